# The C layout of dispatch's hook type (see dispatch.py); dispatch_c.pxd includes this file so
# that a compiled hook (the replay's Match, mge_plugins.trace_match) subclasses it and apply()
# calls its ``top`` as a C method.
cdef class TopHook:
    cpdef top(self, op, tuple inputs)
