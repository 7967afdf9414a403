# The C layout of the profiler's recorder (see profile_recorder.py); profile_recorder_c.pxd
# includes this file so that the event sites cimport the Recorder type and call its door methods
# as C functions.

# The record kinds and "no object": C constants (a module global costs a dict lookup per use).
cdef long long PLAIN, DISPATCH, END, FLOW, COMMAND, KERNEL, HOLD, STORAGE, RELEASE, _NONE

cdef long long _now()
cdef Py_ssize_t _length(long long kind)


cdef class _ThreadState:
    cdef public long long index
    cdef public object ident
    cdef public list stack
    cdef public long long flow
    cdef public long long made_by
    cdef public long long kernel


cdef class _Log:
    cdef long long *data
    cdef public Py_ssize_t size
    cdef Py_ssize_t capacity
    cdef bint _room(self, Py_ssize_t n) except 0
    cdef bint put(self, long long a, long long b, long long c, long long d=*, long long e=*,
                  long long f=*, long long g=*, long long h=*, long long i=*,
                  long long j=*) except 0


cdef class Recorder:
    cdef public dict options
    cdef public object live
    cdef public long long kernels
    cdef public long long sample_rate
    cdef public bint profile_device
    cdef public bint backtrace
    cdef public object start_ns
    cdef public object start_wall_us
    cdef public object stop_ns
    cdef public object worker_tid
    cdef public object main_tid
    cdef public dict thread_names
    cdef public dict timers
    cdef public list device_events
    cdef public _Log buf
    cdef dict _names
    cdef dict _args
    cdef list _objs
    cdef dict _index
    cdef void *_seen_ptr[32]
    cdef long long _seen_index[32]
    cdef dict _threads
    cdef list _thread_list
    cdef long long _flows
    cdef object _expanded
    cdef object _last_dtype
    cdef long long _last_dtype_i
    cdef object _last_shape
    cdef long long _last_shape_i
    cdef unsigned long _last_tid
    cdef _ThreadState _last_state
    cdef long long _ref(self, obj) except? -2
    cdef long long _ref_same(self, obj) except? -2
    cdef long long _ref_op(self, op) except? -2
    cdef long long _ref_dev(self, dev) except? -2
    cdef long long _ref_dtype(self, dtype) except? -2
    cdef long long _ref_shape(self, shape) except? -2
    cdef long long _new(self, obj) except? -2
    cdef _ThreadState _local(self)
    cdef _plain(self, _ThreadState local, tuple event)
    cdef long long _flow_start(self, _ThreadState local, what, op) except? -2
    cpdef enter_dispatch(self, op)
    cpdef exit_dispatch(self)
    cpdef flow_command(self, cmd)
    cpdef flow_host(self, op)
    cpdef enter_command(self, ex, cmd)
    cpdef exit_command(self)
    cpdef enter_kernel(self, device, op, descs, reuse)
    cpdef exit_kernel(self)
    cpdef hold(self, key, owner, nbytes, dev, current)
    cpdef release(self, key, dev, current)
