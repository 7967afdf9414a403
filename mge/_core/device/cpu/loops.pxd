# The C loops of loops.py (small kernels that numpy would run as several passes, each a Python
# call); loops_c.pxd includes it for cimports.
cdef extern from *:
    """
    #include <math.h>
    #include <stdint.h>

    /* Cross entropy of row-major (rows, classes) logits against labels, one row at a time:
       nll[i] = log(sum_j exp(x[i,j] - m)) - (x[i,label[i]] - m), m the row's max, the sum in
       double; with ``reduce`` 1 (sum) or 2 (mean) out[0] is their total (or mean), summed in
       double, instead.  Returns the first row whose label is out of range, or -1. */
    #define MGE_CE_FWD(NAME, T, L, EXP, LOG)                                                  \
    static Py_ssize_t NAME(T *out, const T *x, const L *label, Py_ssize_t rows,             \
                           Py_ssize_t cls, int reduce) {                                     \
        double total = 0;                                                                    \
        for (Py_ssize_t i = 0; i < rows; i++) {                                              \
            const T *r = x + i * cls;                                                        \
            L l = label[i];                                                                  \
            if (l < 0 || (Py_ssize_t)l >= cls) return i;                                     \
            T m = r[0];                                                                      \
            for (Py_ssize_t j = 1; j < cls; j++) if (r[j] > m) m = r[j];                      \
            double s = 0;                                                                    \
            for (Py_ssize_t j = 0; j < cls; j++) s += (double)EXP(r[j] - m);                 \
            T nll = (T)(log(s) - (double)(r[l] - m));                                        \
            if (reduce) total += (double)nll; else out[i] = nll;                             \
        }                                                                                    \
        if (reduce) out[0] = (T)(reduce == 2 ? (rows ? total / (double)rows : NAN) : total); \
        return -1;                                                                           \
    }
    /* Its gradient: dx[i,j] = (softmax(x[i])[j] - (j == label[i])) * g[i], with g[i] = dy[i]
       (dy_step 1), or a reduced loss's dy[0] (dy_step 0), divided by the rows for a mean
       (``mean``: rounded to T first, as numpy's dy / count). */
    #define MGE_CE_BWD(NAME, T, L, EXP)                                                       \
    static Py_ssize_t NAME(T *dx, const T *x, const L *label, const T *dy, Py_ssize_t dy_step,\
                           int mean, Py_ssize_t rows, Py_ssize_t cls) {                      \
        for (Py_ssize_t i = 0; i < rows; i++) {                                              \
            const T *r = x + i * cls;                                                        \
            T *o = dx + i * cls;                                                             \
            L l = label[i];                                                                  \
            if (l < 0 || (Py_ssize_t)l >= cls) return i;                                     \
            T gi = dy[i * dy_step];                                                          \
            if (mean) gi = (T)(gi / (T)rows);                                                \
            T m = r[0];                                                                      \
            for (Py_ssize_t j = 1; j < cls; j++) if (r[j] > m) m = r[j];                      \
            double s = 0;                                                                    \
            for (Py_ssize_t j = 0; j < cls; j++) s += (double)EXP(r[j] - m);                 \
            double g = (double)gi / s;                                                       \
            for (Py_ssize_t j = 0; j < cls; j++) o[j] = (T)((double)EXP(r[j] - m) * g);      \
            o[l] = (T)((double)o[l] - (double)gi);                                           \
        }                                                                                    \
        return -1;                                                                           \
    }
    /* out[i,j] = x[i,j] + b[j], then relu as numpy's maximum(v, 0) does it (nan stays nan,
       -0 becomes +0): the same bits as the two numpy calls. */
    #define MGE_BIAS_ACT(NAME, T)                                                             \
    static void NAME(T *out, const T *x, const T *b, Py_ssize_t rows, Py_ssize_t cols,       \
                     int relu) {                                                             \
        for (Py_ssize_t i = 0; i < rows; i++) {                                              \
            const T *r = x + i * cols;                                                       \
            T *o = out + i * cols;                                                           \
            if (relu) {                                                                      \
                for (Py_ssize_t j = 0; j < cols; j++) {                                      \
                    T v = r[j] + b[j];                                                       \
                    o[j] = (v > 0 || v != v) ? v : (T)0;                                     \
                }                                                                            \
            } else {                                                                         \
                for (Py_ssize_t j = 0; j < cols; j++) o[j] = r[j] + b[j];                    \
            }                                                                                \
        }                                                                                    \
    }
    MGE_BIAS_ACT(mge_bias_act_f, float)
    MGE_BIAS_ACT(mge_bias_act_d, double)
    /* A plain SGD step of a bias from its gradient's rows: acc = the column sums of g (row
       by row, in T: numpy's add.reduce over axis 0 of a C-contiguous g with two or more
       columns adds the rows in this order), then out[j] = p[j] + a * acc[j] (two roundings,
       as numpy's p + (a * acc)). */
    #define MGE_COLSUM_SGD(NAME, T)                                                           \
    static void NAME(T *out, const T *p, const T *g, T *acc, Py_ssize_t rows,               \
                     Py_ssize_t cols, T a) {                                                 \
        for (Py_ssize_t j = 0; j < cols; j++) acc[j] = g[j];                                 \
        for (Py_ssize_t i = 1; i < rows; i++) {                                              \
            const T *r = g + i * cols;                                                       \
            for (Py_ssize_t j = 0; j < cols; j++) acc[j] += r[j];                            \
        }                                                                                    \
        for (Py_ssize_t j = 0; j < cols; j++) { T d = a * acc[j]; out[j] = p[j] + d; }       \
    }
    MGE_COLSUM_SGD(mge_colsum_sgd_f, float)
    MGE_COLSUM_SGD(mge_colsum_sgd_d, double)
    MGE_CE_FWD(mge_ce_fwd_f_i32, float, int32_t, expf, logf)
    MGE_CE_FWD(mge_ce_fwd_f_i64, float, int64_t, expf, logf)
    MGE_CE_FWD(mge_ce_fwd_d_i32, double, int32_t, exp, log)
    MGE_CE_FWD(mge_ce_fwd_d_i64, double, int64_t, exp, log)
    MGE_CE_BWD(mge_ce_bwd_f_i32, float, int32_t, expf)
    MGE_CE_BWD(mge_ce_bwd_f_i64, float, int64_t, expf)
    MGE_CE_BWD(mge_ce_bwd_d_i32, double, int32_t, exp)
    MGE_CE_BWD(mge_ce_bwd_d_i64, double, int64_t, exp)
    """
    void mge_colsum_sgd_f(float *, const float *, const float *, float *, Py_ssize_t, Py_ssize_t,
                          float) nogil
    void mge_colsum_sgd_d(double *, const double *, const double *, double *, Py_ssize_t,
                          Py_ssize_t, double) nogil
    void mge_bias_act_f(float *, const float *, const float *, Py_ssize_t, Py_ssize_t, int) nogil
    void mge_bias_act_d(double *, const double *, const double *, Py_ssize_t, Py_ssize_t,
                        int) nogil
    Py_ssize_t mge_ce_fwd_f_i32(float *, const float *, const int *, Py_ssize_t, Py_ssize_t,
                                int) nogil
    Py_ssize_t mge_ce_fwd_f_i64(float *, const float *, const long long *, Py_ssize_t,
                                Py_ssize_t, int) nogil
    Py_ssize_t mge_ce_fwd_d_i32(double *, const double *, const int *, Py_ssize_t,
                                Py_ssize_t, int) nogil
    Py_ssize_t mge_ce_fwd_d_i64(double *, const double *, const long long *, Py_ssize_t,
                                Py_ssize_t, int) nogil
    Py_ssize_t mge_ce_bwd_f_i32(float *, const float *, const int *, const float *, Py_ssize_t,
                                int, Py_ssize_t, Py_ssize_t) nogil
    Py_ssize_t mge_ce_bwd_f_i64(float *, const float *, const long long *, const float *,
                                Py_ssize_t, int, Py_ssize_t, Py_ssize_t) nogil
    Py_ssize_t mge_ce_bwd_d_i32(double *, const double *, const int *, const double *,
                                Py_ssize_t, int, Py_ssize_t, Py_ssize_t) nogil
    Py_ssize_t mge_ce_bwd_d_i64(double *, const double *, const long long *, const double *,
                                Py_ssize_t, int, Py_ssize_t, Py_ssize_t) nogil
