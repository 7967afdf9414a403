include "dispatch.pxd"
