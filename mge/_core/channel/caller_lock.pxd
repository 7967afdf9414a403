# The C layout of the callers' lock (see caller_lock.py); caller_lock_c.pxd includes it for cimports.
from cpython.pythread cimport PyThread_type_lock

cdef extern from "pythread.h":
    unsigned long mge_thread_ident "PyThread_get_thread_ident" () nogil
    int PyThread_acquire_lock_timed(PyThread_type_lock, long long microseconds,
                                    int intr_flag) nogil


cdef class CallerLock:
    cdef PyThread_type_lock _lock
    cdef unsigned long _owner
    cdef long _count
    cdef public unsigned long worker_tid
    cdef object _rlock
    cpdef bint enter(self)
    cpdef exit(self)
    cdef bint _take(self, unsigned long tid, double timeout)
