"""CUDA kernels and launch plans for the convolutions: ``Convolution``,
``ConvolutionBackwardData`` and ``ConvolutionBackwardFilter`` (``ops/nn_conv.py``).

Every convolution is a few data-movement kernels around matrix products, which the CUDA device
runs with cuBLAS (``cublasGemmStridedBatchedEx``).  This module writes the kernels' CUDA C (as
``elemwise.py`` does, a ``KernelSource`` per dtype and index width) and, in pure Python, each
op's **plan** in ``kernels/launch.py``'s one format: ``PLANS[op class](op, ins, outs)`` gives a
``launch.Plan`` whose steps are ``Launch``es (kernel, grid, block, arguments), ``Gemm``s (m, n,
k, transposes, leading dims and batch strides, all in cuBLAS's column-major terms, on ``Buf``s of
the plan's buffers) and ``Memset``s, with the bytes of workspace they need.  Buffers: the op's
inputs ``"in0"``... in the op's order (``Convolution``: x, weight; ``ConvolutionBackwardData``:
weight, dy; ``ConvolutionBackwardFilter``: x, dy, weight -- the weight only gives the shape),
its output ``"out0"`` (y, dx, dw) and ``"ws"``, laid out by ``launch.Workspace`` (the column
matrix ``col``/``cols``, the transposed ``dy``, float16's float32 sum).  The device follows a
plan step by step; the tests run the same plans on the host (``tests/cuda_plans.run_plan``: the
kernels built with g++, the GEMMs done by numpy) and compare with the CPU kernels.

``STRIDED`` is empty: every input arrives dense.  The kernels index dense NCHW planes (one
``mge_window`` struct describes every image and channel) and the GEMMs read images and groups
at fixed strides; a strided input would need a layout per launch for a copy that costs one pass
over the input, little beside im2col's ``K`` reads of each element.

The algorithms (NCHW, 1 to 3 spatial dims, any stride, padding, dilation and groups):

* ``Convolution``: ``im2col`` writes the column matrix of a chunk of ``nb`` images, row
  ``c * K + kpos`` (input channel ``c``, kernel position ``kpos`` of ``K``), column
  ``n * P + p`` (image, output position of ``P``); so the rows of group ``g`` are one block and
  ``y[n, g] = W[g] @ col[g][:, n*P:(n+1)*P]``, a GEMM per (image, group), batched over the images
  (one cuBLAS call per group, the weight's batch stride 0) or over the groups (one call per
  image), whichever makes fewer calls.  A 1x1 convolution with stride 1 and no padding needs no
  column matrix: its GEMMs read ``x`` itself.
* ``ConvolutionBackwardData``: ``cols[g][:, n*P:(n+1)*P] = W[g]^T @ dy[n, g]`` (GEMMs as above,
  into a column buffer of the accumulation type), then ``col2im``: **one thread per element of
  dx** sums the column entries of every (kernel position, output position) that reads it, in
  the CPU kernel's order (kernel positions row-major) -- deterministic, no atomics.  1x1 with
  stride 1, no padding and no output padding: one GEMM straight into dx.
* ``ConvolutionBackwardFilter``: ``dw[g] = dy[g] @ col[g]^T`` summed over the batch.  For a
  chunk of more than one image, ``nchw_to_cnp`` first copies the chunk of ``dy`` to
  ``(C, nb, P)`` so that the sum over images and positions is the GEMM's ``k`` (one call per
  chunk, batched over the groups; ``beta = 1`` adds the later chunks).  float16 with several
  chunks accumulates in a float32 workspace and converts once (``typecvt_kernel``), so it is
  rounded once, as on the CPU.  An empty batch is a ``Memset`` of dw to zeros.

**Batch chunks.**  The column matrix of the whole batch may be large; a plan cuts the batch into
chunks of nearly equal size whose workspace stays under ``workspace_limit`` bytes (default
``DEFAULT_WORKSPACE_LIMIT``; one image a chunk when even one does not fit), and repeats its
steps per chunk on the same workspace (stream order makes the reuse safe).  ``plan.notes`` says
how the batch was cut.

**Checks.**  None: nothing here depends on the data (no indices, no labels), so every error is
the plan's own, raised from the shapes and dtypes -- the op's rule first (its errors name the op,
the shapes and the dtypes), then ``TypeError``/``ValueError`` naming the op, shapes and dtypes
for what the CUDA kernels do not take (more than 3 spatial dims, other dtypes, mixed dtypes,
outputs that are not the rule's, a strided input, a GEMM past cuBLAS's 32-bit sizes).

Thread decomposition: each kernel is a grid-stride loop (``MGE_LOOP``) with one thread per
element it writes, the fastest-varying index the innermost dim of what it writes (the output
positions), so consecutive threads write consecutive addresses and, at stride 1, read
consecutive ones.  ``im2col`` has a thread per (channel, image, output position) writing the
``K`` column entries of its kernel positions (one index decomposition for ``K`` stores, as
Caffe's).  No kernel uses shared memory or barriers: the host build (``hostbuild.py``) runs the
grid-stride loop as one serial loop over all elements, which covers the same index set as any
grid; the grids are ``launch.grid_for(n)`` blocks of ``launch.THREADS`` threads.

Spatial dims: 1-D and 2-D windows are passed as 3-D ones with leading size-1 dims (kernel 1,
stride 1, no padding), in one struct ``mge_window`` (``pack_window``), so one kernel text serves
every rank.  Indices are 32 bits wide (``index_bits=32``) whenever every element count and
offset of a launch fits (``launch_index_bits``), else 64 (a plan's ``index_bits=64`` asks for the
64-bit variants always: the tests run both); the pointers of a launch are moved to its chunk by
the plan (``Buf`` byte offsets), so a chunk's indices start at 0.

Dtypes: float16, float32, float64 (the op's rule takes floating point only).  float16 is stored
as its bits and the GEMMs compute in float32 (``compute_dtype``) with float16 or float32
operands, as the CPU kernel computes float16 in float32 and rounds once.
"""
import functools
import math
from dataclasses import dataclass

import numpy as np

from ....ops.base import INFER, TensorDesc, op_error
from ....ops.nn_conv import Convolution, ConvolutionBackwardData, ConvolutionBackwardFilter
from .elemwise import _PRELUDE, KernelSource, _code, _compute, _load, _storage, _store
from .elemwise import typecvt_kernel
from .launch import THREADS, Buf, Gemm, Launch, Memset, Plan, Workspace, grid_for

__all__ = ["pack_window", "WINDOW_DTYPE", "launch_index_bits", "col_dtype", "batch_chunks",
           "im2col_kernel", "col2im_kernel", "nchw_to_cnp_kernel", "conv_forward_plan",
           "conv_backward_data_plan", "conv_backward_filter_plan", "PLANS", "STRIDED",
           "CONV_DTYPES", "MAX_SPATIAL_DIMS", "DEFAULT_WORKSPACE_LIMIT", "WORKSPACE_ALIGNMENT",
           "DIFFERENCES"]

#: The most spatial dims the kernels take (the CPU kernels take any number).
MAX_SPATIAL_DIMS = 3
#: The workspace a plan aims to stay under (bytes) unless told otherwise: the batch is cut into
#: chunks whose column buffer fits.
DEFAULT_WORKSPACE_LIMIT = 256 << 20
#: Byte alignment of each array in the plan's workspace (``launch.Workspace``'s).
WORKSPACE_ALIGNMENT = 256

_F16, _F32, _F64 = (np.dtype(d) for d in ("float16", "float32", "float64"))
#: The dtypes the convolution kernels take.
CONV_DTYPES = (_F16, _F32, _F64)
_INT32_MAX = 2 ** 31 - 1

#: Where the CUDA convolutions' results may differ from the CPU device's.
DIFFERENCES = """\
* The GEMMs are cuBLAS's, which sums in another order (blocking, split-K) than the CPU's BLAS:
  float32 and float64 results differ in the last bits (the tests allow a relative 1e-5 of the
  sum of magnitudes in float32, 1e-12 in float64).  The device must run the float32 GEMMs with
  CUBLAS_COMPUTE_32F and without TF32 (the default math mode): TF32 would drop 13 bits.
* float16 computes in float32 (products exact, sums in float32) and rounds once, as the CPU
  kernel; only the summation order differs.  ``compute_mode`` changes nothing (both modes
  accumulate float16 in float32, on the CPU too).
* col2im sums each dx element's contributions in the CPU kernel's order (kernel positions
  row-major), so given the same column values it is bit-identical.
"""

#: The ops whose plans read ``ins[k].strides``: none (see the module docstring).
STRIDED = frozenset()


def launch_index_bits(*extents):
    """32 when every element count and array extent of a launch (``extents``, in elements)
    fits a signed 32-bit index, else 64.  (The grid-stride loop counts in the unsigned type, so
    its last step past ``n`` cannot wrap.)"""
    return 32 if max(extents, default=0) <= _INT32_MAX else 64


def _index(bits, value):
    return np.int32(value) if bits == 32 else np.int64(value)


def batch_chunks(images, per_image_bytes, limit, fixed_bytes=0):
    """``[(first image, count)]``: the batch of ``images`` cut into chunks of nearly equal size
    whose workspace, ``fixed_bytes + count * per_image_bytes``, stays under ``limit`` -- or one
    image a chunk when even one does not fit (the plan then needs more than ``limit``)."""
    if images <= 0:
        return []
    room = (limit - fixed_bytes) // per_image_bytes if per_image_bytes > 0 else images
    most = max(1, min(images, room))
    count = -(-images // most)  # as few chunks as fit, then as even as possible
    size = -(-images // count)
    return [(n0, min(size, images - n0)) for n0 in range(0, images, size)]


# -- the window struct and the kernels' C ---------------------------------------------------------

#: The bytes of ``struct mge_window`` (1 to 3 spatial dims, padded to 3 at the front).
WINDOW_DTYPE = np.dtype([(f, np.int32, (3,)) for f in
                         ("in_", "out", "k", "stride", "pad", "dil")], align=True)


def pack_window(in_size, out_size, kernel, stride, padding, dilation=None):
    """The ``mge_window`` argument for a window of ``kernel`` over ``in_size`` giving
    ``out_size`` (each a tuple of 1 to 3 spatial sizes), as a ``numpy.void`` (pycuda passes it
    by value; ``bytes(...)`` gives its bytes).  Fewer than 3 dims get leading size-1 dims."""
    nd = len(kernel)
    dilation = (1,) * nd if dilation is None else dilation
    parts = (in_size, out_size, kernel, stride, padding, dilation)
    if not 1 <= nd <= MAX_SPATIAL_DIMS or any(len(p) != nd for p in parts):
        raise ValueError(f"CUDA window: 1 to {MAX_SPATIAL_DIMS} spatial dims with one entry each, "
                         f"got in {in_size}, out {out_size}, kernel {kernel}, stride {stride}, "
                         f"padding {padding}, dilation {dilation}")
    lead = MAX_SPATIAL_DIMS - nd
    packed = np.zeros((), WINDOW_DTYPE)
    for name, values, fill in zip(WINDOW_DTYPE.names, parts, (1, 1, 1, 1, 0, 1)):
        packed[name] = (fill,) * lead + tuple(int(v) for v in values)
    return packed[()]


_WINDOW_PRELUDE = r"""#ifndef MGE_WINDOW_PRELUDE
#define MGE_WINDOW_PRELUDE
/* Windows over 1 to 3 spatial dims (1-D and 2-D with leading size-1 dims), shared by the
   convolution and pooling kernels. */
#if defined(__CUDACC__)
#define MGE_STATIC_FN static __device__ __forceinline__
#else
#define MGE_STATIC_FN static inline
#endif
struct mge_window {
    int in[3], out[3], k[3], stride[3], pad[3], dil[3];
};
/* the unsigned counter type of a grid-stride loop over a signed index type I */
template <class I> struct mge_unsigned;
template <> struct mge_unsigned<int> { typedef unsigned int type; };
template <> struct mge_unsigned<long long> { typedef unsigned long long type; };
#define MGE_UNSIGNED(I) typename mge_unsigned<I>::type
template <class I> MGE_FN I mge_volume(const int* d) { return (I)d[0] * d[1] * d[2]; }
#endif /* MGE_WINDOW_PRELUDE */
"""


def _traits(d):
    """(guard, text) of ``mge_tr_<code>``: how a ``d`` element loads into its compute type C
    and stores back (float16 through PTX cvt)."""
    code, c = _code(d), _storage(_compute(d))
    name = f"mge_tr_{code}"
    text = (f"#ifndef MGE_DEF_{name}\n#define MGE_DEF_{name}\n"
            f"struct {name} {{\n    typedef {_storage(d)} S;\n    typedef {c} C;\n"
            f"    MGE_STATIC_FN C load(S v) {{ return {_load('v', d, d)}; }}\n"
            f"    MGE_STATIC_FN S store(C v) {{ return {_store('v', d, d)}; }}\n}};\n#endif\n")
    return name, text


_IM2COL = r"""#ifndef MGE_IM2COL
#define MGE_IM2COL
/* x: (images, channels, *in) -> col: row c * K + kpos, column n * P + p.  A thread per
   (c, n, p), p fastest: consecutive threads store consecutive columns of each row. */
template <class T, class I>
MGE_FN void mge_im2col(T* col, const T* x, I n, I channels, I images, mge_window w)
{
    const I P = mge_volume<I>(w.out), IN = mge_volume<I>(w.in), K = mge_volume<I>(w.k);
    const I row = images * P;
    MGE_LOOP(MGE_UNSIGNED(I), u, n) {
        I i = (I)u;
        I p = i % P, r = i / P;
        I img = r % images, c = r / images;
        int o2 = (int)(p % w.out[2]);
        I q = p / w.out[2];
        int o1 = (int)(q % w.out[1]), o0 = (int)(q / w.out[1]);
        const T* src = x + (img * channels + c) * IN;
        T* dst = col + c * K * row + img * P + p;
        for (int a = 0; a < w.k[0]; ++a) {
            int i0 = o0 * w.stride[0] - w.pad[0] + a * w.dil[0];
            bool v0 = i0 >= 0 && i0 < w.in[0];
            for (int b = 0; b < w.k[1]; ++b) {
                int i1 = o1 * w.stride[1] - w.pad[1] + b * w.dil[1];
                bool v1 = v0 && i1 >= 0 && i1 < w.in[1];
                for (int e = 0; e < w.k[2]; ++e) {
                    int i2 = o2 * w.stride[2] - w.pad[2] + e * w.dil[2];
                    *dst = (v1 && i2 >= 0 && i2 < w.in[2])
                               ? src[((I)i0 * w.in[1] + i1) * w.in[2] + i2] : (T)0;
                    dst += row;
                }
            }
        }
    }
}
#endif
"""

_COL2IM = r"""#ifndef MGE_COL2IM
#define MGE_COL2IM
/* The transpose of im2col, summed: col (rows c * K + kpos, columns n * P + p) -> dx (images,
   channels, *in).  A thread per dx element adds, in kernel-position order, the column entries of
   every output position whose window reads it (deterministic: no atomics). */
template <class TC, class TO, class I>
MGE_FN void mge_col2im(typename TO::S* dx, const typename TC::S* col, I n, I channels, I images,
                       mge_window w)
{
    const I P = mge_volume<I>(w.out), IN = mge_volume<I>(w.in), K = mge_volume<I>(w.k);
    const I row = images * P;
    MGE_LOOP(MGE_UNSIGNED(I), u, n) {
        I i = (I)u;
        I s = i % IN, r = i / IN;
        I c = r % channels, img = r / channels;
        int x2 = (int)(s % w.in[2]);
        I q = s / w.in[2];
        int x1 = (int)(q % w.in[1]), x0 = (int)(q / w.in[1]);
        const typename TC::S* base = col + c * K * row + img * P;
        typename TO::C acc = 0;
        for (int a = 0; a < w.k[0]; ++a) {
            int t0 = x0 + w.pad[0] - a * w.dil[0];
            if (t0 < 0 || t0 % w.stride[0] != 0 || t0 / w.stride[0] >= w.out[0]) continue;
            for (int b = 0; b < w.k[1]; ++b) {
                int t1 = x1 + w.pad[1] - b * w.dil[1];
                if (t1 < 0 || t1 % w.stride[1] != 0 || t1 / w.stride[1] >= w.out[1]) continue;
                for (int e = 0; e < w.k[2]; ++e) {
                    int t2 = x2 + w.pad[2] - e * w.dil[2];
                    if (t2 < 0 || t2 % w.stride[2] != 0 || t2 / w.stride[2] >= w.out[2]) continue;
                    I kpos = ((I)a * w.k[1] + b) * w.k[2] + e;
                    I p = ((I)(t0 / w.stride[0]) * w.out[1] + t1 / w.stride[1]) * w.out[2]
                          + t2 / w.stride[2];
                    acc += TC::load(base[kpos * row + p]);
                }
            }
        }
        dx[i] = TO::store(acc);
    }
}
#endif
"""

_TO_CNP = r"""#ifndef MGE_TO_CNP
#define MGE_TO_CNP
/* (images, channels, plane) -> (channels, images, plane): a thread per element, the plane
   fastest on both sides (reads and writes coalesce). */
template <class T, class I>
MGE_FN void mge_nchw_to_cnp(T* out, const T* in, I n, I channels, I images, I plane)
{
    MGE_LOOP(MGE_UNSIGNED(I), u, n) {
        I i = (I)u;
        I p = i % plane, r = i / plane;
        I img = r % images, c = r / images;
        out[i] = in[(img * channels + c) * plane + p];
    }
}
#endif
"""

_BASE_PARTS = (("MGE_ELEMWISE_PRELUDE", _PRELUDE), ("MGE_WINDOW_PRELUDE", _WINDOW_PRELUDE))


def _kernel_dtype(what, dtype, allowed=CONV_DTYPES):
    try:
        d = np.dtype(dtype)
    except TypeError as e:
        raise TypeError(f"CUDA {what}: not a dtype ({e})") from None
    if d not in allowed:
        raise TypeError(f"CUDA {what}: unsupported dtype {d} (takes "
                        f"{', '.join(str(a) for a in allowed)})")
    return d


def _bits(what, index_bits):
    if index_bits not in (32, 64):
        raise ValueError(f"CUDA {what}: index_bits must be 32 or 64, got {index_bits!r}")
    return "int" if index_bits == 32 else "long long"


def _wrapper(name, parts, params, call, index_bits, nin):
    """The ``KernelSource`` of an ``extern "C"`` kernel ``name`` whose body is ``call`` of a
    template in ``parts``; ``nin`` input pointers follow the output pointer."""
    text = f"MGE_KERNEL {name}({', '.join(params)})\n{{\n    {call};\n}}\n"
    return KernelSource(name, (*_BASE_PARTS, *parts, (name, text)), tuple(params), False,
                        index_bits, nin)


def im2col_kernel(dtype, index_bits=32):
    """The ``im2col`` kernel of ``dtype``: params ``(T* col, const T* x, I n, I channels,
    I images, mge_window w)`` with ``n = channels * images * P``; ``x`` points at the chunk's
    first image.  A ``TypeError`` names an unsupported dtype."""
    return _im2col_kernel(_kernel_dtype("im2col kernel", dtype), index_bits)


@functools.lru_cache(maxsize=None)
def _im2col_kernel(d, index_bits):
    idx, s = _bits("im2col kernel", index_bits), _storage(d)
    params = [f"{s}* col", f"const {s}* x", f"{idx} n", f"{idx} channels", f"{idx} images",
              "mge_window w"]
    name = f"mge_im2col_{_code(d)}_s{index_bits}"
    call = f"mge_im2col<{s}, {idx}>(col, x, n, channels, images, w)"
    return _wrapper(name, (("MGE_IM2COL", _IM2COL),), params, call, index_bits, 1)


def col_dtype(dtype):
    """The dtype of the backward-data column buffer: the accumulation type (float32 for
    float16, which is rounded once, in ``col2im``)."""
    return _compute(np.dtype(dtype))


def col2im_kernel(dtype, index_bits=32):
    """The ``col2im`` kernel writing ``dtype`` from columns of ``col_dtype(dtype)``: params
    ``(T* dx, const C* col, I n, I channels, I images, mge_window w)`` with
    ``n = images * channels * IN``; ``dx`` points at the chunk's first image."""
    return _col2im_kernel(_kernel_dtype("col2im kernel", dtype), index_bits)


@functools.lru_cache(maxsize=None)
def _col2im_kernel(d, index_bits):
    idx = _bits("col2im kernel", index_bits)
    cd = col_dtype(d)
    (tc, tc_text), (to, to_text) = _traits(cd), _traits(d)
    params = [f"{_storage(d)}* dx", f"const {_storage(cd)}* col", f"{idx} n", f"{idx} channels",
              f"{idx} images", "mge_window w"]
    name = f"mge_col2im_{_code(cd)}_to_{_code(d)}_s{index_bits}"
    call = f"mge_col2im<{tc}, {to}, {idx}>(dx, col, n, channels, images, w)"
    parts = ((tc, tc_text), (to, to_text), ("MGE_COL2IM", _COL2IM))
    return _wrapper(name, parts, params, call, index_bits, 1)


def nchw_to_cnp_kernel(dtype, index_bits=32):
    """The kernel copying ``(images, channels, plane)`` to ``(channels, images, plane)``:
    params ``(T* out, const T* in, I n, I channels, I images, I plane)``."""
    return _nchw_to_cnp_kernel(_kernel_dtype("nchw_to_cnp kernel", dtype), index_bits)


@functools.lru_cache(maxsize=None)
def _nchw_to_cnp_kernel(d, index_bits):
    idx, s = _bits("nchw_to_cnp kernel", index_bits), _storage(d)
    params = [f"{s}* out", f"const {s}* in", f"{idx} n", f"{idx} channels", f"{idx} images",
              f"{idx} plane"]
    name = f"mge_nchw_to_cnp_{_code(d)}_s{index_bits}"
    call = f"mge_nchw_to_cnp<{s}, {idx}>(out, in, n, channels, images, plane)"
    return _wrapper(name, (("MGE_TO_CNP", _TO_CNP),), params, call, index_bits, 1)


# -- geometry -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Geometry:
    """A convolution from ``in_`` (images, cin, *in_sp) to (images, cout, *out_sp)."""

    images: int
    groups: int
    cin: int
    cout: int
    kernel: tuple
    in_sp: tuple
    out_sp: tuple
    window: object  # the packed mge_window

    @property
    def ig(self):
        return self.cin // self.groups

    @property
    def og(self):
        return self.cout // self.groups

    @property
    def P(self):
        return math.prod(self.out_sp)

    @property
    def IN(self):
        return math.prod(self.in_sp)

    @property
    def K(self):
        return math.prod(self.kernel)


def _checked(op, ins, outs, names):
    """The inputs' ``TensorDesc``s after the op's rule (which raises first, naming the op, the
    shapes and the dtypes) and the CUDA kernels' own limits; ``outs`` must be the rule's."""
    if len(ins) != len(names):
        raise op_error(TypeError, op, f"CUDA plan: expects {len(names)} inputs {names}, got "
                       f"{len(ins)}")
    descs = [TensorDesc(tuple(i.shape), np.dtype(i.dtype)) for i in ins]
    want = INFER[type(op)](op, descs)
    _check_outs(op, descs, outs, want)
    _check_dense(op, descs, ins)
    nd = len(op.stride)
    if not 1 <= nd <= MAX_SPATIAL_DIMS:
        raise op_error(ValueError, op, f"CUDA plan: the CUDA kernels take 1 to "
                       f"{MAX_SPATIAL_DIMS} spatial dims, got {nd}", descs)
    for d in descs:
        if d.dtype not in CONV_DTYPES:
            raise op_error(TypeError, op, f"CUDA plan: unsupported dtype {d.dtype} (takes "
                           f"{', '.join(str(c) for c in CONV_DTYPES)})", descs)
    if len({d.dtype for d in descs}) > 1:
        raise op_error(TypeError, op, "CUDA plan: all inputs must have one dtype", descs)
    return descs


def _check_outs(op, descs, outs, want):
    """``outs`` (``Layout``s) are the shapes and dtypes of ``want`` (the op's rule)."""
    got = [(tuple(o.shape), np.dtype(o.dtype)) for o in outs]
    rule = [(tuple(w.shape), np.dtype(w.dtype)) for w in want]
    if got != rule:
        raise op_error(ValueError, op, f"CUDA plan: outputs {got} are not the op's {rule}",
                       descs)


def _check_dense(op, descs, ins):
    """A plan not in ``STRIDED`` reads its inputs dense: a strided one is the device's bug."""
    for k, i in enumerate(ins):
        if not i.contiguous:
            raise op_error(ValueError, op, f"CUDA plan: input {k} has strides {i.strides}; the "
                           f"plan takes dense inputs (the op is not in STRIDED)", descs)


def _geometry(op, images, cin, cout, groups, kernel, in_sp, out_sp):
    window = pack_window(in_sp, out_sp, kernel, op.stride, op.padding, op.dilation)
    return _Geometry(images, groups, cin, cout, tuple(kernel), tuple(in_sp), tuple(out_sp),
                     window)


def _weight_parts(op, wshape):
    nd = len(op.stride)
    if len(wshape) == nd + 3:
        return wshape[0], wshape[1], wshape[2], tuple(wshape[3:])
    return 1, wshape[0], wshape[1], tuple(wshape[2:])


def _is_pointwise(op, kernel):
    """1x1 kernel, stride 1, no padding: the column matrix of an image is the image itself."""
    return (all(k == 1 for k in kernel) and all(s == 1 for s in op.stride)
            and not any(op.padding))


def _check_gemm_sizes(op, descs, steps):
    for c in steps:
        if not isinstance(c, Gemm):
            continue
        big = [v for v in (c.m, c.n, c.k, c.lda, c.ldb, c.ldc) if v > _INT32_MAX]
        if big:
            raise op_error(ValueError, op, f"CUDA plan: a GEMM of m={c.m}, n={c.n}, k={c.k} "
                           f"passes cuBLAS's 32-bit sizes", descs)


class _Operand:
    """A GEMM operand per (image, group): at ``buf`` plus ``img * per_image + grp *
    per_group`` elements of ``itemsize`` bytes, columns ``ld`` elements apart."""

    def __init__(self, buf, per_image, per_group, ld, itemsize):
        self.buf, self.per_image, self.per_group, self.ld, self.itemsize = (
            buf, per_image, per_group, ld, itemsize)

    def at(self, image=0, group=0):
        """The ``Buf`` of the matrix of (``image``, ``group``)."""
        return self.buf + (image * self.per_image + group * self.per_group) * self.itemsize


def _gemms(images, groups, a, b, c, **shape):
    """The cuBLAS calls for one GEMM per (image, group) of ``images`` x ``groups``: batched
    over the images (a call per group) or over the groups (a call per image), fewer calls
    first."""
    calls = []
    if groups <= images:
        for g in range(groups):
            calls.append(Gemm(
                a=a.at(group=g), lda=a.ld, stride_a=a.per_image,
                b=b.at(group=g), ldb=b.ld, stride_b=b.per_image,
                c=c.at(group=g), ldc=c.ld, stride_c=c.per_image, batch=images, **shape))
    else:
        for n in range(images):
            calls.append(Gemm(
                a=a.at(image=n), lda=a.ld, stride_a=a.per_group,
                b=b.at(image=n), ldb=b.ld, stride_b=b.per_group,
                c=c.at(image=n), ldc=c.ld, stride_c=c.per_group, batch=groups, **shape))
    return calls


def _launch(kernel_fn, dtype, n, extents, args_of, least):
    """A grid-stride launch of ``kernel_fn(dtype, bits)`` over ``n`` elements, the index width
    from ``extents`` (at least ``least``); ``args_of(bits)`` gives the arguments."""
    bits = max(least, launch_index_bits(n, *extents))
    return Launch(kernel_fn(dtype, bits), grid_for(n), (THREADS, 1, 1), tuple(args_of(bits)))


def _im2col_launch(geo, dtype, col, n0, count, least):
    n = geo.cin * count * geo.P
    extents = (n * geo.K, count * geo.cin * geo.IN)

    def args(bits):
        return (col, Buf("in0", n0 * geo.cin * geo.IN * dtype.itemsize), _index(bits, n),
                _index(bits, geo.cin), _index(bits, count), geo.window)
    return _launch(im2col_kernel, dtype, n, extents, args, least)


def _least(op, index_bits):
    if index_bits not in (32, 64):
        raise op_error(ValueError, op, f"CUDA plan: index_bits must be 32 or 64, got "
                       f"{index_bits!r}")
    return index_bits


def _chunk_note(chunks):
    nb = max((c for _, c in chunks), default=0)
    return f"batch in {len(chunks)} chunks of up to {nb} images"


# -- plans ----------------------------------------------------------------------------------------


def conv_forward_plan(op, ins, outs, workspace_limit=DEFAULT_WORKSPACE_LIMIT, index_bits=32):
    """The plan of ``Convolution`` ``op`` on ``ins`` = ``[x, weight]`` (``launch.Layout``s)
    giving ``outs`` = ``[y]``: im2col per batch chunk (under ``workspace_limit`` bytes of
    columns where one image fits) and the GEMMs into ``y``; none of the columns for a 1x1
    stride-1 unpadded convolution.  ``index_bits=64``: the 64-bit kernel variants even where
    32 bits would do.  The op's rule raises first (its errors name the op, shapes and dtypes);
    then a ``TypeError``/``ValueError`` for what the CUDA kernels do not take."""
    least = _least(op, index_bits)
    descs = _checked(op, ins, outs, ("x", "weight"))
    (xs, dt), (ws, _) = descs
    out = outs[0]
    groups, og, ig, kernel = _weight_parts(op, ws)
    geo = _geometry(op, xs[0], xs[1], out.shape[1], groups, kernel, xs[2:], out.shape[2:])
    e = dt.itemsize
    ck = ig * geo.K
    shape = dict(transa=False, transb=False, m=geo.P, n=og, k=ck, a_dtype=dt, b_dtype=dt,
                 c_dtype=dt, compute_dtype=_compute(dt))
    w = _Operand(Buf("in1"), 0, og * ck, ck, e)
    y_image = geo.cout * geo.P
    if _is_pointwise(op, kernel):
        x = _Operand(Buf("in0"), geo.cin * geo.IN, ig * geo.IN, geo.IN, e)
        y = _Operand(Buf("out0"), y_image, og * geo.P, geo.P, e)
        steps = _gemms(geo.images, groups, x, w, y, **shape)
        _check_gemm_sizes(op, descs, steps)
        return Plan(tuple(steps), notes=("pointwise: the GEMMs read x",))
    chunks = batch_chunks(geo.images, geo.cin * geo.K * geo.P * e, workspace_limit)
    nb = max((c for _, c in chunks), default=0)
    space = Workspace(WORKSPACE_ALIGNMENT)
    col = space.add(geo.cin * geo.K * nb * geo.P * e)
    steps = []
    for n0, count in chunks:
        steps.append(_im2col_launch(geo, dt, col, n0, count, least))
        cols = _Operand(col, geo.P, ck * count * geo.P, count * geo.P, e)
        y = _Operand(Buf("out0", n0 * y_image * e), y_image, og * geo.P, geo.P, e)
        steps += _gemms(count, groups, cols, w, y, **shape)
    _check_gemm_sizes(op, descs, steps)
    return Plan(tuple(steps), space.size if steps else 0, notes=(_chunk_note(chunks),))


def conv_backward_data_plan(op, ins, outs, workspace_limit=DEFAULT_WORKSPACE_LIMIT,
                            index_bits=32):
    """The plan of ``ConvolutionBackwardData`` ``op`` on ``ins`` = ``[weight, dy]`` giving
    ``outs`` = ``[dx]``: per batch chunk, GEMMs into a column buffer of ``col_dtype`` then
    ``col2im`` into ``dx``; a 1x1 stride-1 unpadded one is GEMMs straight into ``dx``."""
    least = _least(op, index_bits)
    descs = _checked(op, ins, outs, ("weight", "dy"))
    (ws, dt), (ys, _) = descs
    groups, a, b, kernel = _weight_parts(op, ws)  # (G, A, B, *k): A = dy ch / G, B = dx ch / G
    xs = outs[0].shape
    geo = _geometry(op, ys[0], xs[1], ys[1], groups, kernel, xs[2:], ys[2:])
    ct, e = _compute(dt), dt.itemsize
    bk = b * geo.K
    w = _Operand(Buf("in0"), 0, a * bk, bk, e)
    dy_image = geo.cout * geo.P
    if _is_pointwise(op, kernel) and tuple(xs[2:]) == tuple(ys[2:]):
        dy = _Operand(Buf("in1"), dy_image, a * geo.P, geo.P, e)
        dx = _Operand(Buf("out0"), geo.cin * geo.P, b * geo.P, geo.P, e)
        steps = _gemms(geo.images, groups, dy, w, dx, transa=False, transb=True, m=geo.P, n=b,
                       k=a, a_dtype=dt, b_dtype=dt, c_dtype=dt, compute_dtype=ct)
        _check_gemm_sizes(op, descs, steps)
        return Plan(tuple(steps), notes=("pointwise: the GEMMs write dx",))
    cd = col_dtype(dt)
    chunks = batch_chunks(geo.images, geo.cin * geo.K * geo.P * cd.itemsize, workspace_limit)
    nb = max((c for _, c in chunks), default=0)
    space = Workspace(WORKSPACE_ALIGNMENT)
    col = space.add(geo.cin * geo.K * nb * geo.P * cd.itemsize)
    steps = []
    for n0, count in chunks:
        dy = _Operand(Buf("in1", n0 * dy_image * e), dy_image, a * geo.P, geo.P, e)
        cols = _Operand(col, geo.P, bk * count * geo.P, count * geo.P, cd.itemsize)
        steps += _gemms(count, groups, dy, w, cols, transa=False, transb=True, m=geo.P, n=bk,
                        k=a, a_dtype=dt, b_dtype=dt, c_dtype=cd, compute_dtype=ct)
        n = count * geo.cin * geo.IN

        def args(bits, n0=n0, count=count, n=n):
            return (Buf("out0", n0 * geo.cin * geo.IN * e), col, _index(bits, n),
                    _index(bits, geo.cin), _index(bits, count), geo.window)
        steps.append(_launch(col2im_kernel, dt, n, (geo.cin * geo.K * count * geo.P,), args,
                             least))
    _check_gemm_sizes(op, descs, steps)
    return Plan(tuple(steps), space.size if steps else 0, notes=(_chunk_note(chunks),))


def conv_backward_filter_plan(op, ins, outs, workspace_limit=DEFAULT_WORKSPACE_LIMIT,
                              index_bits=32):
    """The plan of ``ConvolutionBackwardFilter`` ``op`` on ``ins`` = ``[x, dy, weight]`` giving
    ``outs`` = ``[dw]``: per batch chunk, im2col, (for more than one image) ``nchw_to_cnp`` of
    dy, and one GEMM batched over the groups adding into ``dw`` (float16 over several chunks:
    into a float32 workspace, converted at the end); an empty batch zeroes ``dw``."""
    least = _least(op, index_bits)
    descs = _checked(op, ins, outs, ("x", "dy", "weight"))
    (xs, dt), (ys, _), (ws, _) = descs
    groups, og, ig, kernel = _weight_parts(op, ws)
    geo = _geometry(op, xs[0], xs[1], ys[1], groups, kernel, xs[2:], ys[2:])
    ct, e = _compute(dt), dt.itemsize
    ck = ig * geo.K
    wcount = math.prod(ws)
    if geo.images == 0:
        return Plan((Memset(Buf("out0"), wcount * e),), notes=("empty batch: dw is zeros",))
    col_image = geo.cin * geo.K * geo.P * e
    dy_image = geo.cout * geo.P
    # (dy's copy is counted even where a chunk of one image needs none; each workspace array
    # but the last may round up to the alignment)
    per_image = col_image + dy_image * e
    chunks = batch_chunks(geo.images, per_image, workspace_limit - WORKSPACE_ALIGNMENT)
    acc32 = dt == _F16 and len(chunks) > 1
    if acc32:  # the float32 sum takes room too: cut again with it counted
        chunks = batch_chunks(geo.images, per_image, workspace_limit - 2 * WORKSPACE_ALIGNMENT,
                              wcount * 4)
    nb = max(c for _, c in chunks)
    space = Workspace(WORKSPACE_ALIGNMENT)
    col = space.add(geo.cin * geo.K * nb * geo.P * e)
    dyt = space.add(dy_image * nb * e) if nb > 1 else None
    target, cdt = (space.add(wcount * 4), _F32) if acc32 else (Buf("out0"), dt)
    steps = []
    for k, (n0, count) in enumerate(chunks):
        steps.append(_im2col_launch(geo, dt, col, n0, count, least))
        dy_chunk = Buf("in1", n0 * dy_image * e)
        if count > 1:
            n = dy_image * count

            def args(bits, dy_chunk=dy_chunk, count=count, n=n):
                return (dyt, dy_chunk, _index(bits, n), _index(bits, geo.cout),
                        _index(bits, count), _index(bits, geo.P))
            steps.append(_launch(nchw_to_cnp_kernel, dt, n, (n,), args, least))
            b, ldb, stride_b = dyt, count * geo.P, og * count * geo.P
        else:
            b, ldb, stride_b = dy_chunk, geo.P, og * geo.P
        steps.append(Gemm(
            transa=True, transb=False, m=ck, n=og, k=count * geo.P,
            a=col, lda=count * geo.P, stride_a=ck * count * geo.P,
            b=b, ldb=ldb, stride_b=stride_b,
            c=target, ldc=ck, stride_c=og * ck, batch=groups,
            a_dtype=dt, b_dtype=dt, c_dtype=cdt, compute_dtype=ct, beta=0.0 if k == 0 else 1.0))
    notes = [_chunk_note(chunks)]
    if acc32:
        steps.append(Launch(typecvt_kernel(_F32, dt), grid_for(wcount), (THREADS, 1, 1),
                            (Buf("out0"), target, np.int64(wcount))))
        notes.append("float16 over several chunks: summed in float32, rounded once")
    _check_gemm_sizes(op, descs, steps)
    return Plan(tuple(steps), space.size, notes=tuple(notes))


#: op class -> ``plan(op, ins, outs, workspace_limit=..., index_bits=32)`` -> ``launch.Plan``.
PLANS = {Convolution: conv_forward_plan, ConvolutionBackwardData: conv_backward_data_plan,
         ConvolutionBackwardFilter: conv_backward_filter_plan}
