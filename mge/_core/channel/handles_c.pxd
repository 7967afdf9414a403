include "handles.pxd"
