include "loops.pxd"
