include "profile_recorder.pxd"
