include "device.pxd"
