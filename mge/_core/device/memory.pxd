# The C layout of MemoryStats (see memory.py); memory_c.pxd includes it for cimports.

cdef class MemoryStats:
    cdef public object _lock
    cdef dict _buffers
    cdef dict _current
    cdef dict _peak
    cpdef hold(self, device, arr, bint locked=*)
    cpdef release(self, device, arr, bint locked=*)
