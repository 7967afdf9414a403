include "handoff.pxd"
