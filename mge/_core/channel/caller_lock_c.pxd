include "caller_lock.pxd"
