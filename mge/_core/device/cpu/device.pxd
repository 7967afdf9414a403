# The C layout of CpuDevice (see device.py); device_c.pxd includes it for cimports.

cdef class CpuDevice:
    cdef public int index
    cdef public long long inplace
    cpdef to_host(self, buffer)
    cpdef list execute(self, op, list inputs, list descs, list reuse=*)
    cdef list _execute(self, op, list inputs, list descs, list reuse)
    cdef list _donated(self, list inputs, list reuse)
    cdef _inplace(self, op, cls, list inputs, out, list reuse)
