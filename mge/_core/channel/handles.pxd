# The C layout of the handles (see handles.py).  handles_c.pxd includes this file so that other
# compiled modules can cimport the types from the compiled module, mge._core.channel.handles_c.

cdef class TensorInfo:
    cdef public object shape
    cdef public object dtype
    cdef public object device
    cdef public object value
    cdef public object h_value
    cdef public object producer
    cdef public list users
    cdef public object error
    cdef public object name
    cdef public int evict_type
    cdef public bint in_worker
    cdef public bint deleted
    cdef object __weakref__


cdef class ComputePath:
    cdef public object op
    cdef public list inputs
    cdef public list outputs
