# The C layout of the GIL hand-off (see handoff.py); handoff_c.pxd includes it for cimports.
from cpython.pythread cimport PyThread_type_lock
from libc.stdint cimport int64_t

cdef extern from "pythread.h":
    int PyThread_acquire_lock_timed(PyThread_type_lock, long long microseconds,
                                    int intr_flag) nogil

# CBLAS sgemm/dgemm with 32-bit (LP64) or 64-bit (ILP64) integers: (order, transA, transB, M, N,
# K, alpha, A, lda, B, ldb, beta, C, ldc); the enums are C ints.
ctypedef void (*sgemm32_t)(int, int, int, int, int, int, float, const float *, int,
                           const float *, int, float, float *, int) noexcept nogil
ctypedef void (*sgemm64_t)(int, int, int, int64_t, int64_t, int64_t, float, const float *,
                           int64_t, const float *, int64_t, float, float *, int64_t) noexcept nogil
ctypedef void (*dgemm32_t)(int, int, int, int, int, int, double, const double *, int,
                           const double *, int, double, double *, int) noexcept nogil
ctypedef void (*dgemm64_t)(int, int, int, int64_t, int64_t, int64_t, double, const double *,
                           int64_t, const double *, int64_t, double, double *, int64_t) noexcept nogil


cdef class Handoff:
    cdef public int state
    cdef public bint caller_waiting
    cdef public bint caller_blocked
    cdef public bint wake_pending
    cdef public long long yields
    cdef public long long timeouts
    cdef public long long nogil_runs
    cdef public long long yield_timeout_us
    cdef PyThread_type_lock _signal
    cdef PyThread_type_lock _wake
    cdef object _py_wake
    cpdef yield_to_worker(self)
    cpdef worker_idle(self)
    cpdef wake(self)
    cpdef sleep(self)
    cdef _wake_caller(self)
    cdef int enter_nogil(self)
    cdef int enter_pair(self)


# One GEMM's arguments, ready to run without the GIL (CpuKernels._plan_gemm fills it).
cdef struct GemmJob:
    void *fn
    bint single
    bint ilp64
    int ta
    int tb
    Py_ssize_t m
    Py_ssize_t n
    Py_ssize_t k
    Py_ssize_t lda
    Py_ssize_t ldb
    void *pa
    void *pb
    void *pc
    double alpha  # C = alpha * op(A) @ op(B) + beta * C
    double beta

# The second GEMM thread of gemm2: a native thread that never touches Python.  ``go`` is
# released to start ``job``, ``done`` when it has run.
cdef struct PairThread:
    PyThread_type_lock go
    PyThread_type_lock done
    GemmJob job
    long pid


cdef class CpuKernels:
    cdef public long long gemms
    cdef public long long pairs
    cdef public long long starts
    cdef void *_sgemm
    cdef void *_dgemm
    cdef bint _ilp64
    cdef PairThread *_pair
    cdef public bint started  # a product runs on the second thread (gemm_start) until gemm_join
    cdef unsigned long _starter  # the thread that started it
    cdef Py_buffer _sa
    cdef Py_buffer _sb
    cdef Py_buffer _sc
    cpdef add_scaled(self, out, y, x, double a)
    cpdef relu_grad(self, x, dy)
    cpdef gemm(self, a, b, bint trans_a, bint trans_b)
    cpdef gemm2(self, a1, b1, bint ta1, bint tb1, a2, b2, bint ta2, bint tb2, c1=*,
                double alpha1=*, c2=*, double alpha2=*)
    cpdef gemm_update(self, a, b, bint trans_a, bint trans_b, c, double alpha)
    cpdef gemm_start(self, a, b, bint trans_a, bint trans_b, c=*, double alpha=*)
    cpdef gemm_join(self)
    cpdef join_before_fork(self)
    cdef void *_fn(self, a, b)
    cdef _gemm_into(self, a, b, bint trans_a, bint trans_b, c, double alpha)
    cdef _plan_gemm(self, void *fn, Py_buffer *va, Py_buffer *vb, bint trans_a, bint trans_b,
                    Py_buffer *vc, GemmJob *job, c=*, double alpha=*)
    cdef PairThread *_pair_thread(self)


cdef void _run_gemm(GemmJob *job) noexcept nogil
cdef void _pair_main(void *arg) noexcept nogil


cdef void _add_scaled_f(float *out, float *y, float *x, float a, Py_ssize_t n) noexcept nogil
cdef void _add_scaled_d(double *out, double *y, double *x, double a, Py_ssize_t n) noexcept nogil
# relu's backward as a branchless select (x > 0 ? dy : 0 through a bit mask): a branch per
# element mispredicts half the time on real data; this form the compiler vectorizes.
cdef extern from *:
    """
    #include <stdint.h>
    #include <string.h>
    static void mge_relu_grad_f(float *out, const float *x, const float *dy, Py_ssize_t n) {
        for (Py_ssize_t i = 0; i < n; i++) {
            uint32_t bits, mask = (uint32_t)0 - (uint32_t)(x[i] > 0.0f);
            memcpy(&bits, dy + i, sizeof bits);
            bits &= mask;
            memcpy(out + i, &bits, sizeof bits);
        }
    }
    static void mge_relu_grad_d(double *out, const double *x, const double *dy, Py_ssize_t n) {
        for (Py_ssize_t i = 0; i < n; i++) {
            uint64_t bits, mask = (uint64_t)0 - (uint64_t)(x[i] > 0.0);
            memcpy(&bits, dy + i, sizeof bits);
            bits &= mask;
            memcpy(out + i, &bits, sizeof bits);
        }
    }
    """
    void mge_relu_grad_f(float *out, const float *x, const float *dy, Py_ssize_t n) nogil
    void mge_relu_grad_d(double *out, const double *x, const double *dy, Py_ssize_t n) nogil
cdef tuple _layout(Py_buffer *v, bint trans, Py_ssize_t item)
cdef bint _overlaps(vc_of, Py_buffer *va) except? -1
# the buffers of a kernel's output (writable) and two inputs, all or none; and their release
# (loops.py cimports them too)
cdef int _acquire3(out, a, b, Py_buffer *vo, Py_buffer *va, Py_buffer *vb) except? -1
cdef void _release3(Py_buffer *vo, Py_buffer *va, Py_buffer *vb) noexcept
