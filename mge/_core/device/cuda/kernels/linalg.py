"""CUDA C for the linear algebra of ``ops/matmul.py`` that is no product -- ``SVD`` -- with its
launch plan (``launch.py``'s one format).

Like the other families this only makes text and plans: NVRTC compiles the text for the GPU, and
the same text builds as host C++ under g++ for the tests (``block.py``'s phases emulate blocks,
threads and barriers there).

**SVD** -- batched one-sided Jacobi (Hestenes), one block per matrix (a block loop over the
batch), one kernel that does everything:

* the matrix, computed in float (float16, float32 and integer inputs: the CPU computes them in
  float32) or double (float64), is loaded as ``W`` -- ``A`` itself, or ``A^T`` when ``m < n``, so
  that ``W`` is ``M x N`` with ``M >= N`` -- column by column into the block's *region*: dynamic
  shared memory when ``region_bytes`` fits ``MAX_SHARED_BYTES``, else a slice of the plan's
  workspace per block (``WORKSPACE_BYTES`` bounds how many blocks get one; the others wait in the
  block loop).  ``W`` is scaled by a power of two to a largest magnitude in ``[0.5, 1)`` (exact:
  no squared norm overflows or underflows for ordinary inputs) and scaled back at the end;
* sweeps of rotations: in each of the ``N' - 1`` rounds of a round-robin tournament (``N'`` is
  ``N`` made even with an idle column) the block takes the ``N' / 2`` disjoint column pairs at
  once: lanes of threads sum ``|w_p|^2``, ``|w_q|^2`` and ``w_p . w_q`` (a shared-memory tree per
  pair), one thread per pair finds Rutishauser's rotation where ``|w_p . w_q| > tol |w_p| |w_q|``
  (``tol``: ``max(sqrt(M), TOLERANCE_ULPS)`` units of the computing type's epsilon, LAPACK
  gesvj's), and every thread applies the rotations to the columns of ``W`` and of ``V`` (the
  identity at first).  A sweep without a rotation ends the iteration;
* the column norms are the singular values; a column with a norm above ``2**-60`` (float) or
  ``2**-500`` (double) of the scaled matrix, normalised, is a left singular vector.  The others
  (the null space of a rank-deficient matrix) and, with ``full_matrices``, the ``M - N`` missing
  columns are built by Gram-Schmidt against the identity's columns: each new column starts from
  the ``e_i`` farthest from the columns so far (``1 - sum of squares of row i`` largest),
  is orthogonalised twice ("twice is enough") and normalised -- so a zero matrix gives the
  identity, as LAPACK does;
* the singular values are ranked descending (ties in column order), and ``U``, ``S`` and ``Vh``
  are written in that order: ``U = W's columns``, ``Vh = V^T`` -- or, for a transposed ``A``,
  ``U = V`` and ``Vh = W's columns^T``.

The outputs are the op's rule's: ``(U, S, Vh)`` of shapes ``(..., m, m), (..., k), (..., n, n)``
with ``full_matrices``, ``(..., m, k), (..., k), (..., k, n)`` without, ``(S,)`` without
``compute_uv`` (``k = min(m, n)``), in the input's float dtype (float32 for integers).  An empty
batch or outputs without elements launch nothing; ``k = 0`` with ``full_matrices`` gives the
identity (numpy's answer).  A NaN in a matrix sets the check's word, and so does a matrix still
rotating after ``MAX_SWEEPS`` sweeps: the device raises the CPU kernel's ``ValueError("SVD: did
not converge (input shape S): SVD did not converge")``; an infinity gives NaN outputs.  A matrix whose region exceeds ``MAX_REGION_BYTES`` is a
``NotImplementedError`` naming the op and the shape.

**Plans.**  ``PLANS[type(op)](op, ins, outs)`` first runs the op's own shape/dtype rule on
``ins`` (its errors name the op, shapes and dtypes; ``outs`` must be what it gives) and refuses a
dtype the kernel lacks (complex) with a ``TypeError`` naming the op, the shapes and dtypes.  ``STRIDED`` is empty:
the kernel reads a dense input (the device copies views first).  Where results differ from the
CPU device: ``DIFFERENCES``.  ``NOT_DONE`` is empty.
"""
import functools
import math

import numpy as np

from ....ops.matmul import SVD
from .elemwise import KernelSource
from .launch import Buf, Check, Launch, Plan, Workspace
from .misc import _FLOATS, _INTS, _code, _dtype, _fail, _storage
from .norm import _PRELUDE_PARTS, _rule

__all__ = ["MAX_THREADS", "MAX_SWEEPS", "TOLERANCE_ULPS", "MAX_SHARED_BYTES", "WORKSPACE_BYTES",
           "MAX_REGION_BYTES", "MAX_BLOCKS", "NVRTC_OPTIONS", "NOT_DONE", "DIFFERENCES",
           "svd_kernel", "svd_threads", "region_bytes", "svd_plan", "PLANS", "STRIDED"]

#: The most threads of an SVD block (a power of two: the lanes' trees halve it).
MAX_THREADS = 256
#: The most Jacobi sweeps (the plan's, read when it is made); a sweep without a rotation ends
#: them sooner: 5 to 15 for random matrices, up to about 40 for ill-conditioned ones of a few
#: hundred columns.  A matrix still rotating after them raises the CPU's "did not converge".
MAX_SWEEPS = 100
#: A pair of columns is rotated while ``|w_p . w_q| > max(sqrt(M), TOLERANCE_ULPS) * eps *
#: |w_p| |w_q|``: above the rounding of a dot product of M terms (a tolerance at the rounding level
#: itself could rotate on noise for ever); it bounds the orthogonality of U's columns.
TOLERANCE_ULPS = 4
#: The largest region (bytes) kept in dynamic shared memory: 48 KiB, the most a launch gets
#: without opting in, less room for the kernel's few static shared words.
MAX_SHARED_BYTES = 48 * 1024 - 256
#: The global workspace the plan gives at most for regions too large for shared memory (at
#: least one block's, however large).
WORKSPACE_BYTES = 256 << 20
#: The largest region of one matrix; beyond it the plan raises ``NotImplementedError``.
MAX_REGION_BYTES = 2 << 30
#: The most blocks of a launch (a block loop takes the rest of the batch).
MAX_BLOCKS = 65535
#: NVRTC flags (elemwise.py's: no contraction into fused multiply-adds, as on the host build).
NVRTC_OPTIONS = ("--fmad=false",)
#: The ops of this family the CUDA device has no kernel for.
NOT_DONE = ()

DIFFERENCES = """\
* SVD is one-sided Jacobi, LAPACK's gesdd divide and conquer: the singular values agree within
  about sqrt(N * sweeps) ulp of S[0] (float: 1e-7 to 3e-6 of S[0] for N up to 64; double 1e-16
  to 1e-14), U and Vh within that rounding divided by the gap between neighbouring singular
  values.  Singular vectors are unique only up to sign (and, for equal singular values, up to a
  rotation of their span): the signs, and the bases of repeated or zero singular values, are
  generally not LAPACK's.  U is orthonormal within the rotation tolerance (a few ulp); V, the
  product of every rotation, within about sqrt(N * sweeps) ulp (float: up to 1e-5 at N = 64,
  LAPACK about 1e-6).
* Complex inputs are refused (TypeError); the CPU kernel decomposes their real part (with
  numpy's ComplexWarning).
* A matrix still rotating after ``MAX_SWEEPS`` (100) sweeps raises "did not converge" where
  LAPACK might not (none seen: random and graded matrices up to 256 x 256, condition numbers up
  to 1e30, took at most 40).
* A matrix holding an infinity gives NaN U, S and Vh (LAPACK's answer there is not meaningful
  either); a NaN raises the CPU kernel's ValueError ("did not converge"), as on the CPU.
* A block per matrix: a few large matrices use a few of the GPU's multiprocessors (fast for
  batches of small matrices, slow for one large one).  Matrices whose region (``W``, ``V`` and
  their bookkeeping) passes ``MAX_REGION_BYTES`` (2 GiB) are refused (NotImplementedError).
"""

_SVD = r"""#ifndef MGE_SVD
#define MGE_SVD
/* SVD by one-sided Jacobi (kernels/linalg.py): the computing type's helpers */
MGE_FN float mge_svd_eps(float) { return 1.1920928955078125e-07f; }
MGE_FN double mge_svd_eps(double) { return 2.220446049250313e-16; }
/* a column norm below this (of the scaled matrix) is no singular vector: 2^-60, 2^-500 */
MGE_FN float mge_svd_tiny(float) { return 8.673617379884035e-19f; }
MGE_FN double mge_svd_tiny(double) { return 3.054936363499605e-151; }
MGE_FN float mge_svd_ldexp(float x, int e) { return ldexpf(x, e); }
MGE_FN double mge_svd_ldexp(double x, int e) { return ldexp(x, e); }
MGE_FN int mge_svd_exponent(float x) { int e; frexpf(x, &e); return e; }
MGE_FN int mge_svd_exponent(double x) { int e; frexp(x, &e); return e; }
/* element i of x in the computing type T; H: x holds float16 bits */
template <bool H> struct mge_svd_ld {
    template <class T, class S> MGE_MEMBER T at(const S* p, long long i) { return (T)p[i]; }
};
template <> struct mge_svd_ld<true> {
    template <class T> MGE_MEMBER T at(const unsigned short* p, long long i) {
        return (T)mge_h2f(p[i]);
    }
};
/* pair P of round r of the round-robin tournament of Np (even) columns: p < q; q == Np - 1 is
   the idle column when N is odd */
MGE_FN void mge_svd_pair(int r, int P, int Np, int& p, int& q) {
    int a = P == 0 ? Np - 1 : (r + P) % (Np - 1);
    int b = P == 0 ? r : (r - P + (Np - 1)) % (Np - 1);
    p = a < b ? a : b;
    q = a < b ? b : a;
}
/* The SVD of the batch of m x n matrices x (row-major) into uo/so/vo (see linalg.py).  W is
   M x N (M >= N; A^T when trans), Mc the columns of W's left vectors (M with full matrices,
   else N).  The region of a block: ws + blockIdx.x * ws_stride, or dynamic shared memory when ws
   is NULL.  T the computing type, H: x holds float16 bits. */
template <class T, bool H, class S, class O>
MGE_BLOCK_FN void mge_svd(const S* x, O* uo, O* so, O* vo, int* flag, unsigned char* ws,
                          long long ws_stride, long long batch, int m, int n, int M, int N,
                          int Mc, int trans, int uv, int sweeps) {
    MGE_SHARED int sh_bad, sh_nan, sh_rot, sh_piv, sh_e;
    MGE_SHARED T sh_max, sh_norm;
    const int Np = N + (N & 1), npairs = Np / 2, rounds = Np > 1 ? Np - 1 : 0;
    const int bd = (int)blockDim.x;
    const long long PW = bd > npairs ? bd : npairs;
    /* the region: W (M x Mc), V (N x N), sigma, res, coef, partial sums, rotations | ints */
    const long long nt = (long long)M * Mc + (uv ? (long long)N * N : 0) + N + M + Mc + 3 * PW
                         + 2LL * npairs;
    const long long tbytes = (nt * (long long)sizeof(T) + 15) / 16 * 16;
    const long long bytes = tbytes + 4LL * (N + Mc);
    MGE_SHARED_ARRAY(unsigned char, smem, ws ? 0 : bytes)
    if (ws && bytes > ws_stride) {  /* a plan whose layout is not this one: a bug, named */
        MGE_THREADS { MGE_THREAD_IDS if (tid == 0) *flag = 2; }
        return;
    }
    int L = 1;  /* lanes per pair in the dot products */
    while (L * 2 * npairs <= bd && L < M) L *= 2;
    /* LAPACK's gesvj tolerance, sqrt(M) ulps (the rounding of a dot product), at least @ULPS@ */
    const T tol = (mge_sqrt((T)M) > (T)@ULPS@ ? mge_sqrt((T)M) : (T)@ULPS@) * mge_svd_eps((T)0);
    const T tiny = mge_svd_tiny((T)0);
    const long long mn = (long long)m * n, MN = (long long)M * N;
    MGE_BLOCK_LOOP(b, batch) {
        unsigned char* reg = ws ? ws + (long long)blockIdx.x * ws_stride : smem;
        T* g = (T*)reg;
        T* v = g + (long long)M * Mc;
        T* sig = v + (uv ? (long long)N * N : 0);
        T* res = sig + N;
        T* coef = res + M;
        T* part = coef + Mc;
        T* cs = part + 3 * PW;
        int* perm = (int*)(reg + tbytes);
        int* done = perm + N;
        MGE_THREADS { MGE_THREAD_IDS if (tid == 0) sh_nan = 0; }
        MGE_SYNC
        /* load W, its largest magnitude (per thread), NaNs; V = I */
        MGE_THREADS { MGE_THREAD_IDS
            T mx = 0;
            int nan = 0;
            for (long long e = tid; e < mn; e += bd) {
                T a = mge_svd_ld<H>::template at<T>(x, b * mn + e);
                long long i = e / n, j = e - i * n;
                g[trans ? e : j * M + i] = a;
                if (a != a) nan = 1;
                else if (mge_fabs(a) > mx) mx = mge_fabs(a);
            }
            if (uv) {
                for (long long e = tid; e < (long long)N * N; e += bd)
                    v[e] = e / N == e % N ? (T)1 : (T)0;
            }
            part[tid] = mx;
            if (nan) sh_nan = 1;  /* (every writer stores the same 1) */
        }
        MGE_SYNC
        for (int h = bd / 2; h > 0; h /= 2) {
            MGE_THREADS { MGE_THREAD_IDS
                if ((int)tid < h && part[tid + h] > part[tid]) part[tid] = part[tid + h];
            }
            MGE_SYNC
        }
        /* the scale 2^-e bringing the largest magnitude into [0.5, 1) */
        MGE_THREADS { MGE_THREAD_IDS
            if (tid == 0) {
                T a = part[0];
                /* 1: a NaN (LAPACK's "did not converge"), 3: an infinity (NaN outputs) */
                sh_bad = sh_nan ? 1 : a - a != (T)0 ? 3 : 0;
                sh_max = a;
                sh_e = sh_bad || a == (T)0 ? 0 : mge_svd_exponent(a);
            }
        }
        MGE_SYNC
        const int go = !sh_bad;
        MGE_THREADS { MGE_THREAD_IDS
            if (go && sh_e) {
                for (long long e = tid; e < MN; e += bd) g[e] = mge_svd_ldexp(g[e], -sh_e);
            }
        }
        MGE_SYNC
        /* the sweeps, until one rotates nothing (else "did not converge") */
        int converged = !go || sh_max == (T)0 || rounds == 0;
        for (int sweep = 0; !converged && sweep < sweeps; ++sweep) {
            MGE_THREADS { MGE_THREAD_IDS if (tid == 0) sh_rot = 0; }
            MGE_SYNC
            for (int r = 0; r < rounds; ++r) {
                MGE_THREADS { MGE_THREAD_IDS  /* lane l of pair P: its share of the 3 dots */
                    for (int w = (int)tid; w < npairs * L; w += bd) {
                        int P = w / L, l = w - P * L, p, q;
                        mge_svd_pair(r, P, Np, p, q);
                        T aa = 0, bb = 0, ab = 0;
                        if (q < N) {
                            const T* gp = g + (long long)p * M;
                            const T* gq = g + (long long)q * M;
                            for (int i = l; i < M; i += L) {
                                T s1 = gp[i], s2 = gq[i];
                                aa = aa + s1 * s1; bb = bb + s2 * s2; ab = ab + s1 * s2;
                            }
                        }
                        part[3 * w] = aa; part[3 * w + 1] = bb; part[3 * w + 2] = ab;
                    }
                }
                MGE_SYNC
                for (int h = L / 2; h > 0; h /= 2) {
                    MGE_THREADS { MGE_THREAD_IDS
                        for (int w = (int)tid; w < npairs * h; w += bd) {
                            int P = w / h, l = w - P * h;
                            T* d = part + 3 * (P * L + l);
                            const T* s = part + 3 * (P * L + l + h);
                            d[0] = d[0] + s[0]; d[1] = d[1] + s[1]; d[2] = d[2] + s[2];
                        }
                    }
                    MGE_SYNC
                }
                MGE_THREADS { MGE_THREAD_IDS  /* Rutishauser's rotation of each pair */
                    for (int P = (int)tid; P < npairs; P += bd) {
                        const T* d = part + 3 * P * L;
                        T aa = d[0], bb = d[1], ab = d[2], c = 1, s = 0;
                        if (aa > (T)0 && bb > (T)0 &&
                            mge_fabs(ab) > tol * mge_sqrt(aa) * mge_sqrt(bb)) {
                            T zeta = (bb - aa) / ((T)2 * ab), az = mge_fabs(zeta);
                            /* t = sign(zeta) / (|zeta| + sqrt(1 + zeta^2)), never overflowing */
                            T t = az > (T)1 ? (T)1 / (az * ((T)1 + mge_sqrt((T)1 + ((T)1 / az) *
                                                                               ((T)1 / az))))
                                            : (T)1 / (az + mge_sqrt((T)1 + az * az));
                            if (zeta < (T)0) t = -t;
                            c = (T)1 / mge_sqrt((T)1 + t * t);
                            s = c * t;
                            sh_rot = 1;
                        }
                        cs[2 * P] = c; cs[2 * P + 1] = s;
                    }
                }
                MGE_SYNC
                MGE_THREADS { MGE_THREAD_IDS  /* the rotations of W's and V's columns */
                    const int R = M + (uv ? N : 0);
                    for (long long w = tid; w < (long long)npairs * R; w += bd) {
                        int P = (int)(w / R), i = (int)(w - (long long)P * R), p, q;
                        T s = cs[2 * P + 1];
                        if (s != (T)0) {
                            mge_svd_pair(r, P, Np, p, q);
                            T* col = i < M ? g : v;
                            long long ld = i < M ? M : N, ii = i < M ? i : i - M;
                            T* xp = col + p * ld + ii;
                            T* xq = col + q * ld + ii;
                            T c = cs[2 * P], a1 = *xp, b1 = *xq;
                            *xp = c * a1 - s * b1;
                            *xq = s * a1 + c * b1;
                        }
                    }
                }
                MGE_SYNC
            }
            const int rotated = sh_rot;
            MGE_SYNC  /* every thread has read sh_rot before the next sweep clears it */
            converged = !rotated;
        }
        const int ok = go && converged;
        /* the singular values (column norms) */
        MGE_THREADS { MGE_THREAD_IDS
            for (int c = (int)tid; ok && c < N; c += bd) {
                const T* gc = g + (long long)c * M;
                T s = 0;
                for (int i = 0; i < M; ++i) s = s + gc[i] * gc[i];
                sig[c] = mge_sqrt(s);
            }
        }
        MGE_SYNC
        /* normalised columns are singular vectors; the others wait for Gram-Schmidt */
        MGE_THREADS { MGE_THREAD_IDS
            if (ok && uv) {
                for (long long e = tid; e < MN; e += bd) {
                    T s = sig[e / M];
                    if (s >= tiny) g[e] = g[e] / s;
                }
                for (int c = (int)tid; c < Mc; c += bd) done[c] = c < N && sig[c] >= tiny;
            }
        }
        MGE_SYNC
        MGE_THREADS { MGE_THREAD_IDS  /* res[i]: 1 - |row i of the columns so far|^2 */
            if (ok && uv) {
                for (int i = (int)tid; i < M; i += bd) {
                    T t = 1;
                    for (int c = 0; c < Mc; ++c)
                        if (done[c]) t = t - g[(long long)c * M + i] * g[(long long)c * M + i];
                    res[i] = t;
                }
            }
        }
        MGE_SYNC
        for (int c = 0; ok && uv && c < Mc; ++c) {
            if (done[c]) continue;
            T* gc = g + (long long)c * M;
            MGE_THREADS { MGE_THREAD_IDS  /* the identity's column farthest from the others */
                if (tid == 0) {
                    int best = 0;
                    for (int i = 1; i < M; ++i) if (res[i] > res[best]) best = i;
                    sh_piv = best;
                }
            }
            MGE_SYNC
            MGE_THREADS { MGE_THREAD_IDS  /* e_piv - Q Q^T e_piv */
                for (int i = (int)tid; i < M; i += bd) {
                    T t = i == sh_piv ? (T)1 : (T)0;
                    for (int k = 0; k < Mc; ++k)
                        if (done[k]) t = t - g[(long long)k * M + sh_piv] * g[(long long)k * M + i];
                    gc[i] = t;
                }
            }
            MGE_SYNC
            MGE_THREADS { MGE_THREAD_IDS  /* twice is enough: Q^T v again */
                for (int k = (int)tid; k < Mc; k += bd) {
                    T t = 0;
                    if (done[k]) {
                        const T* gk = g + (long long)k * M;
                        for (int i = 0; i < M; ++i) t = t + gk[i] * gc[i];
                    }
                    coef[k] = t;
                }
            }
            MGE_SYNC
            MGE_THREADS { MGE_THREAD_IDS
                for (int i = (int)tid; i < M; i += bd) {
                    T t = gc[i];
                    for (int k = 0; k < Mc; ++k)
                        if (done[k]) t = t - coef[k] * g[(long long)k * M + i];
                    gc[i] = t;
                }
            }
            MGE_SYNC
            MGE_THREADS { MGE_THREAD_IDS
                if (tid == 0) {
                    T s = 0;
                    for (int i = 0; i < M; ++i) s = s + gc[i] * gc[i];
                    sh_norm = mge_sqrt(s);
                }
            }
            MGE_SYNC
            MGE_THREADS { MGE_THREAD_IDS
                for (int i = (int)tid; i < M; i += bd) {
                    T t = gc[i] / sh_norm;
                    gc[i] = t;
                    res[i] = res[i] - t * t;
                }
                if (tid == 0) done[c] = 1;
            }
            MGE_SYNC
        }
        /* rank descending (ties in column order): perm[rank] = column */
        MGE_THREADS { MGE_THREAD_IDS
            for (int j = (int)tid; ok && j < N; j += bd) {
                T sj = sig[j];
                int rank = 0;
                for (int i = 0; i < N; ++i) rank += sig[i] > sj || (sig[i] == sj && i < j);
                perm[rank] = j;
            }
        }
        MGE_SYNC
        /* the outputs; NaN for a matrix with a NaN or an infinity */
        MGE_THREADS { MGE_THREAD_IDS
            const T nan = mge_qnan<T>();
            const int e = sh_e;
            if (tid == 0 && (sh_bad == 1 || (go && !converged))) *flag = 1;
            for (int r = (int)tid; r < N; r += bd)
                mge_stf(so, b * N + r, ok ? mge_svd_ldexp(sig[perm[r]], e) : nan);
            if (uv) {
                const long long ucols = trans ? N : Mc, urows = m;
                for (long long w = tid; w < urows * ucols; w += bd) {
                    long long i = w / ucols, r = w - i * ucols;
                    T t = nan;
                    if (ok) t = trans ? v[(long long)perm[r] * N + i]
                                      : g[(r < N ? (long long)perm[r] : r) * M + i];
                    mge_stf(uo, b * urows * ucols + w, t);
                }
                const long long vrows = trans ? Mc : N, vcols = n;
                for (long long w = tid; w < vrows * vcols; w += bd) {
                    long long r = w / vcols, j = w - r * vcols;
                    T t = nan;
                    if (ok) t = trans ? g[(r < N ? (long long)perm[r] : r) * M + j]
                                      : v[(long long)perm[r] * N + j];
                    mge_stf(vo, b * vrows * vcols + w, t);
                }
            }
        }
        MGE_SYNC
    }
}
#endif /* MGE_SVD */
"""



_TEXT = _SVD.replace("@ULPS@", str(TOLERANCE_ULPS))
_PARTS = _PRELUDE_PARTS + (("MGE_SVD", _TEXT),)


def _out_dtype(d):
    """The dtype SVD answers in for input ``d`` (the op's rule: float32 for integers)."""
    return d if d.kind == "f" else np.dtype("float32")


def _ctype(d):
    """The computing C type for input ``d``: double for float64, else float (as the CPU)."""
    return "double" if d == np.float64 else "float"


def svd_kernel(in_dtype):
    """The ``SVD`` kernel of ``in_dtype`` matrices: ``(x, u, s, vh, flag, ws, ws_stride, batch,
    m, n, M, N, Mc, trans, uv, sweeps)`` -- a block per matrix (``MGE_BLOCK_LOOP``), its region of
    ``region_bytes`` in dynamic shared memory (``ws`` NULL) or at ``ws + blockIdx.x *
    ws_stride``; ``u``/``vh`` may be NULL when ``uv`` is 0."""
    return _svd_kernel(_dtype("SVD", in_dtype, _INTS + _FLOATS))


@functools.lru_cache(maxsize=None)
def _svd_kernel(d):
    out, t = _out_dtype(d), _ctype(d)
    h = "true" if d == np.float16 else "false"
    name = f"mge_svd_{_code(d)}"
    params = [f"const {_storage(d)}* x", f"{_storage(out)}* u", f"{_storage(out)}* s",
              f"{_storage(out)}* vh", "int* flag", "unsigned char* ws", "long long ws_stride",
              "long long batch", "int m", "int n", "int M", "int N", "int Mc", "int trans",
              "int uv", "int sweeps"]
    text = (f"MGE_KERNEL {name}({', '.join(params)})\n{{\n"
            f"    mge_svd<{t}, {h}>(x, u, s, vh, flag, ws, ws_stride, batch, m, n, M, N, Mc, "
            f"trans, uv, sweeps);\n}}\n")
    return KernelSource(name, _PARTS + ((name, text),), tuple(params), False, 64, 0)


def svd_threads(M, N):
    """The threads of an SVD block for ``W`` of ``M x N``: a power of two from 32 (a warp) to
    ``MAX_THREADS``, about one per element a rotation round touches."""
    npairs = (N + (N & 1)) // 2
    work = max(npairs * M, M)
    threads = 32
    while threads < MAX_THREADS and threads < work:
        threads *= 2
    return threads


def region_bytes(M, N, Mc, uv, threads, itemsize):
    """The bytes of one block's region (the kernel's layout, ``mge_svd``): ``W`` (``M x Mc``),
    ``V`` (``N x N`` with ``uv``), the singular values, two work vectors, the partial dot
    products and rotations of the pairs, then the ranks and Gram-Schmidt's marks (int32)."""
    npairs = (N + (N & 1)) // 2
    nt = M * Mc + (N * N if uv else 0) + N + M + Mc + 3 * max(threads, npairs) + 2 * npairs
    return -(-nt * itemsize // 16) * 16 + 4 * (N + Mc)


def svd_plan(op, ins, outs):
    """The ``Plan`` of ``SVD`` on ``ins`` ``(x,)`` (``(..., m, n)``): one launch of a block per
    matrix into ``outs`` ``(U, S, Vh)`` (``(S,)`` without ``compute_uv``); a ``Check`` raising
    the CPU kernel's ``ValueError`` for a matrix holding a NaN or still rotating after
    ``MAX_SWEEPS`` sweeps."""
    _rule(op, ins, outs)
    x = ins[0]
    if x.dtype not in _INTS + _FLOATS:
        raise _fail(TypeError, op, f"the CUDA kernel takes integer and float matrices, not "
                    f"{x.dtype}", ins)
    kernel = svd_kernel(x.dtype)
    shape = tuple(x.shape)
    m, n = shape[-2:]
    batch = math.prod(shape[:-2])
    if batch == 0 or all(o.size == 0 for o in outs):
        return Plan((), notes=("no elements to write",))
    uv, full = bool(op.compute_uv), bool(op.full_matrices)
    trans = m < n
    M, N = (n, m) if trans else (m, n)
    mc = M if uv and full else N
    threads = svd_threads(M, N)
    isz = 8 if _ctype(x.dtype) == "double" else 4
    nbytes = region_bytes(M, N, mc, uv, threads, isz)
    if nbytes > MAX_REGION_BYTES:
        raise _fail(NotImplementedError, op, f"the CUDA kernel takes matrices whose work region "
                    f"is at most {MAX_REGION_BYTES} bytes (one block per matrix), this one needs "
                    f"{nbytes} (m = {m}, n = {n}, full_matrices={full}, compute_uv={uv})", ins)
    ws = Workspace()
    flag = ws.add(4)
    if nbytes <= MAX_SHARED_BYTES:
        blocks, region, stride, shared = min(batch, MAX_BLOCKS), None, 0, nbytes
        where = f"{nbytes} bytes of shared memory per block"
    else:
        stride = -(-nbytes // 256) * 256
        blocks = max(1, min(batch, MAX_BLOCKS, WORKSPACE_BYTES // stride))
        region, shared = ws.add(blocks * stride), 0
        where = f"{stride} bytes of workspace per block, {blocks} block(s)"

    def error(value):
        if value == 2:
            return RuntimeError(f"CUDA SVD: the kernel's region is larger than the workspace "
                                f"the plan gives it (input shape {shape}): a bug of linalg.py")
        return ValueError(f"SVD: did not converge (input shape {shape}): SVD did not converge")
    if uv:
        u, s, vh = Buf("out0"), Buf("out1"), Buf("out2")
    else:
        u, s, vh = None, Buf("out0"), None
    launch = Launch(kernel, (blocks,), (threads,),
                    (Buf("in0"), u, s, vh, flag, region, np.int64(stride), np.int64(batch),
                     np.int32(m), np.int32(n), np.int32(M), np.int32(N), np.int32(mc),
                     np.int32(trans), np.int32(uv), np.int32(MAX_SWEEPS)), shared_bytes=shared)
    return Plan((launch,), ws.size, (Check(flag, error),),
                notes=(f"W {M} x {N}{' (A transposed)' if trans else ''}, {where}",))


#: The plan of each op this module has kernels for: ``PLANS[type(op)](op, ins, outs)``.
PLANS = {SVD: svd_plan}

#: The ops whose plans read ``ins[k].strides``: none (a dense input).
STRIDED = frozenset()
