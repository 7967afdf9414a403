include "memory.pxd"
