"""What the image kernels (``image.py``) and their gradients (``image_grad.py``) share: the
``mge_img`` struct and the C prelude (coordinates, MegEngine's ``border_interpolate``, the resize
and sampling taps, the warps' and remap's sampling position), and the plans' small helpers.

Imports run one way: ``image.py`` and ``image_grad.py`` import this module, it imports neither
(and ``image.py`` imports ``image_grad.py``, never the reverse).  This module has no ``PLANS``
table, so the device's registration (``launch/plans.py``) passes it by.
"""
import numpy as np

from ....ops.base import INFER, TensorDesc, op_error
from ....ops.vision import BORDER_MODES
from .elemwise import _PRELUDE, SUPPORTED_DTYPES, _code, _load, _storage, _store
from .launch import THREADS, Buf, Launch, Plan, grid_for

__all__ = ["IMG_DTYPE", "IMG_PRELUDE", "PARTS", "FLOAT_DTYPES", "INT_DTYPES", "NUMERIC_DTYPES",
           "traits", "check_dtype", "checked", "need", "one", "img_layout", "img_struct",
           "sample_struct", "imode_of", "mat_idx_error"]

_F16, _F32, _F64 = (np.dtype(d) for d in ("float16", "float32", "float64"))
#: The float dtypes (the gradients, Resize3D, reflect/replicate PadBackward).
FLOAT_DTYPES = (_F16, _F32, _F64)
#: The integer dtypes of ``SUPPORTED_DTYPES``.
INT_DTYPES = tuple(d for d in SUPPORTED_DTYPES if d.kind in "iu")
#: Floats and integers: what the resizes, warps and remap sample.
NUMERIC_DTYPES = FLOAT_DTYPES + INT_DTYPES

#: ``struct mge_img`` (see the module docstring); ``in_``/``in_st``: dims and strides of the array
#: read (``aux_st``: a second one's strides), ``out``: the output's dims, ``ord``: its memory order.
IMG_DTYPE = np.dtype([("in_", np.int64, (5,)), ("in_st", np.int64, (5,)),
                      ("aux_st", np.int64, (5,)), ("out", np.int64, (5,)),
                      ("ord", np.int32, (5,)), ("amode", np.int32, (3,)), ("imode", np.int32),
                      ("bmode", np.int32), ("flag", np.int32), ("fill", np.float64)], align=True)

#: The C prelude of the image kernels (include guard ``MGE_IMAGE_PRELUDE``): ``struct mge_img``,
#: ``struct mge_pad``, output coordinates, ``mge_border``, the resize taps, the sampling taps and
#: the sampling position of the warps and remap.
IMG_PRELUDE = r"""#ifndef MGE_IMAGE_PRELUDE
#define MGE_IMAGE_PRELUDE
#if defined(__CUDACC__)
#define MGE_IMG_FN static __device__ __forceinline__
#else
#define MGE_IMG_FN static inline
#endif
struct mge_img {
    long long in[5], in_st[5], aux_st[5], out[5];
    int ord[5], amode[3], imode, bmode, flag;
    double fill;
};
struct mge_pad {
    int ndim, mode;
    long long in[8], out[8], before[8], after[8];
};
/* the logical coordinates (n, c, d, y, x) of output element i (dims g.out, memory order g.ord) */
MGE_IMG_FN void mge_img_coords(const mge_img& g, long long i, long long* co) {
    for (int k = 4; k >= 0; --k) {
        int a = g.ord[k];
        co[a] = i % g.out[a];
        i /= g.out[a];
    }
}
MGE_IMG_FN long long mge_pmod(long long a, long long m) {
    long long r = a % m;
    return r < 0 ? r + m : r;
}
/* MegEngine's border_interpolate (the CPU kernel's _border): modes in BORDER_MODES' order */
MGE_IMG_FN long long mge_border(long long p, long long n, int mode, bool* valid) {
    *valid = true;
    if (mode >= 4) {
        bool in = p >= 0 && p < n;
        *valid = in;
        return in ? p : 0;
    }
    if (mode == 0) return p < 0 ? 0 : (p >= n ? n - 1 : p);
    if (mode == 3) return mge_pmod(p, n);
    if (n == 1) return 0;
    if (mode == 1) {
        long long m = mge_pmod(p, 2 * n);
        return m >= n ? 2 * n - 1 - m : m;
    }
    long long m = mge_pmod(p, 2 * n - 2);
    return m >= n ? 2 * n - 2 - m : m;
}
/* The taps of output row o of a 1-D resize from nin to nout (the CPU's matrices' row o, taps of
   one source index merged in order): their count.  Modes: 0 nearest, 1 linear, 2 cubic (Resize),
   3 trilinear with align_corners, 4 trilinear without (Resize3D), 5 identity. */
MGE_IMG_FN int mge_rs_taps(int mode, long long o, long long nin, long long nout, long long* idx,
                           double* w) {
    int k = 0;
    long long t[4];
    double c[4];
    if (mode == 5 || (mode == 1 && nin == 1)) {
        idx[0] = mode == 5 ? o : 0; w[0] = 1.0;
        return 1;
    }
    if (mode <= 2) {
        float scale = (float)nout / (float)nin;
        if (mode == 0) {
            long long s = (long long)((float)o / scale);
            idx[0] = s > nin - 1 ? nin - 1 : s; w[0] = 1.0;
            return 1;
        }
        double alpha = ((double)o + 0.5) / (double)scale - 0.5;
        double fb = floor(alpha);
        long long base = (long long)fb;
        alpha = alpha - fb;
        if (mode == 2) {
            const double A = -0.75, x = alpha;
            c[0] = ((A * (x + 1) - 5 * A) * (x + 1) + 8 * A) * (x + 1) - 4 * A;
            c[1] = ((A + 2) * x - (A + 3)) * x * x + 1;
            c[2] = ((A + 2) * (1 - x) - (A + 3)) * (1 - x) * (1 - x) + 1;
            c[3] = 1 - c[0] - c[1] - c[2];
            for (int j = 0; j < 4; ++j) {
                long long p = base - 1 + j;
                t[j] = p < 0 ? 0 : (p > nin - 1 ? nin - 1 : p);
            }
            k = 4;
        } else {
            if (base < 0) { base = 0; alpha = 0.0; }
            else if (base + 1 >= nin) { base = nin - 2; alpha = 1.0; }
            t[0] = base; c[0] = 1 - alpha; t[1] = base + 1; c[1] = alpha;
            k = 2;
        }
    } else {
        double src;
        if (mode == 3)
            src = (double)o * (nout > 1 ? (double)(nin - 1) / (double)(nout - 1) : 0.0);
        else {
            src = ((double)o + 0.5) * ((double)nin / (double)nout) - 0.5;
            src = src > 0.0 ? src : 0.0;
        }
        double fl = floor(src);
        long long i0 = (long long)fl;
        i0 = i0 > nin - 1 ? nin - 1 : i0;
        long long i1 = i0 + 1 > nin - 1 ? nin - 1 : i0 + 1;
        double lam = src - (double)i0;
        t[0] = i0; c[0] = 1 - lam; t[1] = i1; c[1] = lam;
        k = 2;
    }
    int m = 0;
    for (int j = 0; j < k; ++j) {
        if (m > 0 && idx[m - 1] == t[j]) { w[m - 1] += c[j]; continue; }
        idx[m] = t[j]; w[m] = 0.0 + c[j]; ++m;
    }
    return m;
}
/* The coefficient of source index i in output row o (0 when no tap holds it). */
MGE_IMG_FN double mge_rs_coef(int mode, long long o, long long i, long long nin, long long nout) {
    long long idx[4]; double w[4];
    int k = mge_rs_taps(mode, o, nin, nout, idx, w);
    for (int j = 0; j < k; ++j) if (idx[j] == i) return w[j];
    return 0.0;
}
/* [*lo, *hi): the output rows whose taps hold source index i (contiguous: taps move
   monotonically with o) */
MGE_IMG_FN void mge_rs_range(int mode, long long i, long long nin, long long nout, long long* lo,
                             long long* hi) {
    long long idx[4]; double w[4];
    long long a = 0, b = nout;
    while (a < b) {
        long long m = a + (b - a) / 2;
        int k = mge_rs_taps(mode, m, nin, nout, idx, w);
        if (idx[k - 1] >= i) b = m; else a = m + 1;
    }
    *lo = a;
    b = nout;
    while (a < b) {
        long long m = a + (b - a) / 2;
        mge_rs_taps(mode, m, nin, nout, idx, w);
        if (idx[0] > i) b = m; else a = m + 1;
    }
    *hi = a;
}
/* Bilinear (imode 1: 4 taps (0,0) (0,1) (1,0) (1,1)) or nearest (imode 0: rint) taps at
   (ax, ay) in an h x w plane with border mode bmode: the count; plane offsets (y * sy + x * sx),
   validity, weights and their derivatives by x and y. */
MGE_IMG_FN int mge_sample_taps(int imode, int bmode, double ax, double ay, long long h,
                               long long w, long long sy, long long sx, long long* off,
                               bool* ok, double* wt, double* dwx, double* dwy) {
    if (imode == 0) {
        bool vr, vc;
        long long r = mge_border((long long)rint(ay), h, bmode, &vr);
        long long c = mge_border((long long)rint(ax), w, bmode, &vc);
        off[0] = r * sy + c * sx; ok[0] = vr && vc; wt[0] = 1.0; dwx[0] = 0.0; dwy[0] = 0.0;
        return 1;
    }
    double fx = floor(ax), fy = floor(ay);
    double u = ax - fx, v = ay - fy;
    long long x0 = (long long)fx, y0 = (long long)fy;
    for (int k = 0; k < 4; ++k) {
        int dy = k >> 1, dx = k & 1;
        bool vr, vc;
        long long r = mge_border(y0 + dy, h, bmode, &vr);
        long long c = mge_border(x0 + dx, w, bmode, &vc);
        off[k] = r * sy + c * sx;
        ok[k] = vr && vc;
    }
    wt[0] = (1 - v) * (1 - u); wt[1] = (1 - v) * u; wt[2] = v * (1 - u); wt[3] = v * u;
    dwx[0] = -(1 - v); dwx[1] = 1 - v; dwx[2] = -v; dwx[3] = v;
    dwy[0] = -(1 - u); dwy[1] = -u; dwy[2] = 1 - u; dwy[3] = u;
    return 4;
}
/* The sampling position of output (n, oy, ox): KIND 0 affine, 1 perspective (mat: (N, rows, 3)),
   2 remap (mat: the map (N, OH, OW, 2)); g.flag bit 0: the NHWC warps' quantization.  *den (when
   not NULL): the perspective denominator (1 for affine and remap), which the matrix gradient
   divides by. */
template <class M, int KIND>
MGE_IMG_FN void mge_img_position(const typename M::S* mat, long long nb, long long oy, long long ox,
                                 const mge_img& g, double* ax, double* ay, double* den = 0) {
    if (KIND == 2) {
        const typename M::S* p = mat + ((nb * g.out[3] + oy) * g.out[4] + ox) * 2;
        *ax = M::load(p[0]);
        *ay = M::load(p[1]);
        if (den) *den = 1.0;
        return;
    }
    const typename M::S* m = mat + nb * (KIND == 1 ? 9 : 6);
    double gx = (double)ox, gy = (double)oy;
    double m00 = M::load(m[0]), m01 = M::load(m[1]), m02 = M::load(m[2]);
    double m10 = M::load(m[3]), m11 = M::load(m[4]), m12 = M::load(m[5]);
    double nx = m00 * gx + m01 * gy + m02, ny = m10 * gx + m11 * gy + m12;
    double d = KIND == 1 ? M::load(m[6]) * gx + M::load(m[7]) * gy + M::load(m[8]) : 1.0;
    double x = nx / d, y = ny / d;
    if (g.flag & 1) {
        if (KIND == 0) {
            const double ab = 1024.0;
            double rd = g.imode == 0 ? 512.0 : 16.0;
            double qx = rint((m01 * gy + m02) * ab) + rd + rint(m00 * gx * ab);
            double qy = rint((m11 * gy + m12) * ab) + rd + rint(m10 * gx * ab);
            if (g.imode == 0) { x = floor(qx / ab); y = floor(qy / ab); }
            else { x = floor(qx / 32.0) / 32.0; y = floor(qy / 32.0) / 32.0; }
        } else if (g.imode == 0) {
            x = floor(x); y = floor(y);
        } else {
            const double big = 2147483647.0;
            double vx = x * 32.0, vy = y * 32.0;
            vx = vx != vx ? 0.0 : (vx < -big ? -big : (vx > big ? big : vx));
            vy = vy != vy ? 0.0 : (vy < -big ? -big : (vy > big ? big : vy));
            x = rint(vx) / 32.0; y = rint(vy) / 32.0;
        }
    }
    *ax = x; *ay = y;
    if (den) *den = d;
}
#endif /* MGE_IMAGE_PRELUDE */
"""

#: ``KernelSource.parts`` every image kernel starts with: elemwise's prelude, then this one.
PARTS = (("MGE_ELEMWISE_PRELUDE", _PRELUDE), ("MGE_IMAGE_PRELUDE", IMG_PRELUDE))



def traits(d, via):
    """(name, (guard, text)) of ``mge_it<via>_<code>``: a ``d`` element loads as ``via`` (the
    compute type of ``d``, or float32 or float64) and stores back from it."""
    via = np.dtype(via)
    cvia = _storage(_F32 if via == _F16 else via)
    name = f"mge_it{_code(via)}_{_code(d)}"
    text = (f"#ifndef MGE_DEF_{name}\n#define MGE_DEF_{name}\n"
            f"struct {name} {{\n    typedef {_storage(d)} S;\n    typedef {cvia} C;\n"
            f"    MGE_IMG_FN C load(S v) {{ return {_load('v', d, via)}; }}\n"
            f"    MGE_IMG_FN S store(C v) {{ return {_store('v', via, d)}; }}\n}};\n#endif\n")
    return name, (name, text)


def check_dtype(what, d, allowed):
    """``d`` as a numpy dtype, one of ``allowed``; a ``TypeError`` naming ``what`` otherwise."""
    try:
        d = np.dtype(d)
    except TypeError as e:
        raise TypeError(f"CUDA {what}: not a dtype ({e})") from None
    if d not in allowed:
        raise TypeError(f"CUDA {what}: unsupported dtype {d} (takes "
                        f"{', '.join(str(a) for a in allowed)})")
    return d


# -- plans ------------------------------------------------------------------------------------------


def checked(op, ins, outs, names):
    """The inputs' ``TensorDesc``s after the op's rule (its errors first, naming the op, shapes
    and dtypes); ``outs`` must be the rule's and the inputs dense."""
    if len(ins) not in names:
        raise op_error(TypeError, op, f"CUDA plan: expects {' or '.join(map(str, names))} "
                       f"inputs, got {len(ins)}")
    descs = [TensorDesc(tuple(i.shape), np.dtype(i.dtype)) for i in ins]
    want = INFER[type(op)](op, descs)
    got = [(tuple(o.shape), np.dtype(o.dtype)) for o in outs]
    rule = [(tuple(w.shape), np.dtype(w.dtype)) for w in want]
    if got != rule:
        raise op_error(ValueError, op, f"CUDA plan: outputs {got} are not the op's {rule}", descs)
    for k, i in enumerate(ins):
        if not i.contiguous:
            raise op_error(ValueError, op, f"CUDA plan: input {k} has strides {i.strides}; the "
                           f"plan takes dense inputs (the op is not in STRIDED)", descs)
    return descs


def need(op, descs, d, allowed, what="input"):
    """A ``TypeError`` naming the op unless dtype ``d`` (of the ``what``) is one of ``allowed``."""
    if d not in allowed:
        raise op_error(TypeError, op, f"CUDA plan: the {what}'s dtype {d} is not taken (takes "
                       f"{', '.join(str(a) for a in allowed)})", descs)


def one(kernel, n, args, checks=(), workspace=0):
    """The plan of one grid-stride launch of ``kernel`` over ``n`` items (none when ``n`` is 0)."""
    if not n:
        return Plan((), notes=("empty output: nothing to launch",))
    return Plan((Launch(kernel, grid_for(n), (THREADS, 1, 1), args),), workspace, checks)


def img_layout(shape, fmt, three=False):
    """(dims (n, c, d, y, x), dense strides per logical dim, memory order) of an image array of
    ``shape`` in ``fmt`` (``"NHWC"``, else NCHW; ``three``: NCDHW)."""
    if three:
        n, c, dd, h, w = shape
        return (n, c, dd, h, w), (c * dd * h * w, dd * h * w, h * w, w, 1), (0, 1, 2, 3, 4)
    if fmt == "NHWC":
        n, h, w, c = shape
        return (n, c, 1, h, w), (h * w * c, 1, 0, w * c, c), (0, 2, 3, 4, 1)
    n, c, h, w = shape
    return (n, c, 1, h, w), (c * h * w, h * w, 0, w, 1), (0, 1, 2, 3, 4)


def img_struct(src, out, **fields):
    """The ``mge_img`` of the array read (``src``, an ``img_layout``) and the output iterated
    (``out``), with other fields set by name."""
    g = np.zeros((), IMG_DTYPE)
    g["in_"][:], g["in_st"][:] = src[0], src[1]
    g["out"][:], g["ord"][:] = out[0], out[2]
    for k, v in fields.items():
        g[k] = v
    return g[()]


def sample_struct(op, xs, out_shape, imode, bmode, fill, cv, **fields):
    """The ``mge_img`` of a warp or remap: the image of shape ``xs`` read, ``out_shape`` iterated
    (the op's format), the interpolation and border modes, the fill, ``cv``: the NHWC warps'
    quantization."""
    src, out = img_layout(xs, op.format), img_layout(out_shape, op.format)
    return img_struct(src, out, imode=imode, bmode=BORDER_MODES.index(bmode), flag=int(cv),
                      fill=float(fill), **fields)


def imode_of(op):
    """The kernels' interpolation code of a warp or remap (1 linear, 0 nearest); the CPU's
    ``NotImplementedError`` for the others."""
    if op.imode not in ("linear", "nearest"):
        raise NotImplementedError(f"{op.name}: interpolation mode {op.imode!r} is not "
                                  "implemented in mge (linear and nearest are)")
    return 1 if op.imode == "linear" else 0


def mat_idx_error(op, batch, count, dtype, buf="in2"):
    """A ``Check``'s error: the CPU's ``IndexError`` of ``op`` for ``mat_idx`` (``count`` elements
    of ``dtype`` at ``buf``) out of range of a ``batch``-image input."""
    def error(value, read):
        b = read(Buf(buf), dtype, count).astype(np.int64).reshape(-1)
        return IndexError(f"{op.name}: mat_idx out of bound: {b.tolist()} (src batch {batch})")
    return error
