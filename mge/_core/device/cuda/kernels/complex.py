"""CUDA C for complex64 -- ``CreateComplex``, ``ComplexPart``, the complex modes of ``Elemwise``
and ``TypeCvt`` into complex64 -- with their launch plans (``launch.py``'s one format).

**What.**  A complex64 is stored as numpy stores it: two floats, real then imaginary, 8 bytes
(``struct alignas(8) mge_c64 { float re, im; }``: one 64-bit load or store per element).  Every
kernel here is one elementwise loop, in the two forms of ``elemwise.py``'s kernels: *contiguous*
(every array dense and of the output's shape: a flat grid-stride loop over a 64-bit ``n``) and
*general* (any shape up to ``MAX_NDIM`` dims, a stride per array and dim in elemwise.py's
``mge_layout<K, I>``: 0 broadcasts, negative steps backwards; 32-bit indices whenever every offset
fits).  So inputs are read where they lie -- a transposed, sliced or broadcast view is never
copied first (``STRIDED`` holds every op):

* ``CreateComplex`` (``F.complex``, ``F.polar``) -- ``out = re + 1j * im`` with numpy's
  broadcasting of the two float parts (float16, float32 or float64 each; a float32 part is
  copied bit for bit, NaN payloads, infinities and -0 included; float16 and float64 convert to
  float32 as numpy's assignment does);
* ``ComplexPart`` (``F.real``, ``F.imag``) -- the float32 ``re`` or ``im`` word of each element,
  copied bit for bit;
* ``Elemwise`` of complex64 operands -- the modes the op's rule lets complex tensors take
  (``MODES``: add, sub, mul, neg, eq, neq), each written once in ``_PRELUDE_C`` as numpy
  computes it: add/sub per part, mul with one fused multiply-add per part (``re = fma(ar, br,
  -(ai * bi))``, ``im = fma(ar, bi, ai * br)``: numpy's SIMD loop), neg by flipping the sign
  bits, eq/neq as both parts equal / either differs.  A real operand (float16, float32, 8- and 16-bit integers,
  bool: those numpy promotes with complex64 to complex64) converts to ``x + 0j`` first;
* ``TypeCvt`` into complex64 (``astype("complex64")``, and the dtype promotion of ``z * x`` for a
  float ``x``) -- ``out = float32(x) + 0j`` (rounded once, as numpy's ``astype``) from bool, every
  integer (uint32 and uint64 too, which the other CUDA kernels lack), float16, bfloat16, float32
  or float64.

**Why here.**  ``Elemwise`` and ``TypeCvt`` keep their launchers (``cuda/launch/elemwise.py``),
which hand complex operands (or a complex target) to this module's plans through
``plans.plan_launcher``; ``CreateComplex`` and ``ComplexPart`` are registered from ``PLANS`` by
``register_families``.  The data-moving ops (reshape, transpose, indexing, concat, stack, split,
broadcast, copies, transfers) need nothing here: their kernels move bytes by element size, and a
complex64 moves as one 8-byte word (``relayout.py``'s copies, ``indexing.py``'s get and set,
``elemwise.typecvt_kernel`` from complex64 to itself for the device's relayout); relayout.py's
creation kernels make complex64 too (Fill and Eye by its bits, Arange and Linspace into the real
part).

**Plans.**  ``PLANS[type(op)](op, ins, outs)`` first runs the op's own shape/dtype rule on ``ins``
(its errors name the op, shapes and dtypes; ``outs`` must be what it gives), then refuses what the
kernels lack with a ``TypeError`` naming the op and the dtypes.  One launch each (none when the
output is empty), no workspace, no checks: nothing here can meet bad data.  ``INPLACE``: a complex
``Elemwise`` may write its output into a donated dense input of the output's shape and dtype (each
thread reads element ``i`` of every input before writing element ``i``).

**Host build.**  The same text compiles as host C++ (``hostbuild.py``; elemwise.py's prelude makes
the grid-stride loop a serial loop), so the tests run every plan against the CPU kernels.
"""
import functools

import numpy as np

from ....dtype import is_bfloat16
from ....ops.elemwise import _COMPLEX_OK, ComplexPart, CreateComplex, Elemwise, TypeCvt
from .elemwise import (
    _PRELUDE, _F16, _F32, _F64, MAX_NDIM, SUPPORTED_DTYPES, KernelSource, _code, _storage,
    index_bits_for, pack_layout, simplify_layout,
)
from .launch import THREADS, Buf, Launch, Plan, dense_strides, grid_for
from .norm import _rule

__all__ = ["NVRTC_OPTIONS", "DIFFERENCES", "NOT_DONE", "MODES", "COMPLEX64", "REAL_DTYPES",
           "PART_DTYPES", "OPERAND_DTYPES", "elemwise_kernel", "typecvt_kernel", "create_kernel",
           "part_kernel", "elemwise_plan", "typecvt_plan", "create_complex_plan",
           "complex_part_plan", "PLANS", "STRIDED", "INPLACE"]

#: NVRTC flags (elemwise.py's: no contraction; mul's two fused multiply-adds are explicit).
NVRTC_OPTIONS = ("--fmad=false",)

#: The one complex dtype a tensor holds.
COMPLEX64 = np.dtype("complex64")
# The unsigned integers beyond the elementwise kernels' dtypes: dtype -> (code, C type).
_WIDE_UNSIGNED = {np.dtype("uint32"): ("u32", "unsigned"),
                  np.dtype("uint64"): ("u64", "unsigned long long")}
#: The dtypes ``TypeCvt`` converts into complex64 (and bfloat16, ``ml_dtypes``'s, not named here:
#: it is not imported unless a tensor holds it).
REAL_DTYPES = SUPPORTED_DTYPES + tuple(_WIDE_UNSIGNED)
#: The dtypes of ``CreateComplex``'s parts.
PART_DTYPES = (_F16, _F32, _F64)
#: The real dtypes an ``Elemwise`` takes beside complex64: those numpy promotes with complex64 to
#: complex64 (int32, int64 and float64 give complex128, which no tensor holds).
OPERAND_DTYPES = tuple(d for d in SUPPORTED_DTYPES if np.result_type(d, COMPLEX64) == COMPLEX64)

#: The complex modes of ``Elemwise``: mode -> the prelude's function (exactly the op rule's set).
MODES = {"add": "mge_c_add", "sub": "mge_c_sub", "mul": "mge_c_mul", "neg": "mge_c_neg",
         "eq": "mge_c_eq", "neq": "mge_c_neq"}
assert set(MODES) == set(_COMPLEX_OK), set(MODES) ^ set(_COMPLEX_OK)

#: Where these kernels' results may differ from the CPU device's.
DIFFERENCES = """\
* A NaN computed by add, sub or mul is NaN on both devices, but its sign and payload are the
  hardware's: a GPU gives the canonical NaN where x86 numpy carries an operand's payload (or the
  negative default NaN); likewise a NaN converted from a float16 or float64 part or source
  (CreateComplex, TypeCvt).  Copies, ComplexPart, float32 parts and
  neg keep every bit (neg flips the sign bits, as numpy does).
* mul always fuses each part's multiply-add, as numpy's SIMD loop does on CPUs with FMA (x86-64
  with FMA3, aarch64) for the operands it loads -- dense, positive strides, a broadcast scalar: bit
  for bit there.  Where numpy takes its scalar loop (an operand with a negative stride) or the CPU
  has no FMA, numpy rounds the two products apart, and a part may differ by that rounding (its
  last bit, or more where the two products cancel).
"""

#: What complex tensors do on the CPU device but not here.  Every op whose rule takes complex64
#: has a kernel; arithmetic beyond ``MODES`` the rules refuse on every device alike.  Only an
#: ``Elemwise`` handed a complex64 with an int32, int64 or float64 operand unconverted (the
#: dtype-promotion plugin off: it converts the operand to complex64 first) is refused here with
#: a ``TypeError``, where the CPU device computes numpy's complex128.
NOT_DONE = ("Elemwise of complex64 with an unconverted int32/int64/float64 operand (complex128)",)

_PRELUDE_C = r"""#ifndef MGE_COMPLEX_PRELUDE
#define MGE_COMPLEX_PRELUDE
/* complex64 as numpy stores it: real then imaginary, 8-byte aligned (one 64-bit access) */
struct alignas(8) mge_c64 { float re, im; };
MGE_FN mge_c64 mge_cplx(float re, float im) { mge_c64 z; z.re = re; z.im = im; return z; }
/* bfloat16 (its bits) as float: the upper half of the float's bits, exactly */
MGE_FN float mge_c_bf2f(unsigned short h) {
    unsigned u = (unsigned)h << 16;
#if defined(__CUDACC__)
    return __uint_as_float(u);
#else
    float x; __builtin_memcpy(&x, &u, 4); return x;
#endif
}
/* x with its sign bit flipped: numpy's negative, every other bit kept (PTX's neg leaves a NaN's
   payload unspecified) */
MGE_FN float mge_c_flip(float x) {
#if defined(__CUDACC__)
    return __int_as_float(__float_as_int(x) ^ (int)0x80000000);
#else
    unsigned u; __builtin_memcpy(&u, &x, 4); u ^= 0x80000000u; __builtin_memcpy(&x, &u, 4);
    return x;
#endif
}
MGE_FN mge_c64 mge_c_add(mge_c64 a, mge_c64 b) { return mge_cplx(a.re + b.re, a.im + b.im); }
MGE_FN mge_c64 mge_c_sub(mge_c64 a, mge_c64 b) { return mge_cplx(a.re - b.re, a.im - b.im); }
/* numpy's complex64 multiply (its SIMD loop's fmaddsub): each part one fused multiply-add */
MGE_FN mge_c64 mge_c_mul(mge_c64 a, mge_c64 b) {
    return mge_cplx(fmaf(a.re, b.re, -(a.im * b.im)), fmaf(a.re, b.im, a.im * b.re));
}
MGE_FN mge_c64 mge_c_neg(mge_c64 a) { return mge_cplx(mge_c_flip(a.re), mge_c_flip(a.im)); }
MGE_FN bool mge_c_eq(mge_c64 a, mge_c64 b) { return a.re == b.re && a.im == b.im; }
MGE_FN bool mge_c_neq(mge_c64 a, mge_c64 b) { return a.re != b.re || a.im != b.im; }
#endif /* MGE_COMPLEX_PRELUDE */
"""

_PARTS = (("MGE_ELEMWISE_PRELUDE", _PRELUDE), ("MGE_COMPLEX_PRELUDE", _PRELUDE_C))


# -- dtypes and C expressions ---------------------------------------------------------------------

def _c_storage(d):
    """The C type an element of ``d`` is stored as (float16 and bfloat16: their bits)."""
    if d == COMPLEX64:
        return "mge_c64"
    if is_bfloat16(d):
        return "unsigned short"
    return _WIDE_UNSIGNED[d][1] if d in _WIDE_UNSIGNED else _storage(d)


def _c_code(d):
    """``d``'s code in kernel names."""
    if d == COMPLEX64:
        return "c64"
    if is_bfloat16(d):
        return "bf16"
    return _WIDE_UNSIGNED[d][0] if d in _WIDE_UNSIGNED else _code(d)


def _dtype(what, dtype, allowed, bfloat16=False):
    """``dtype`` as a numpy dtype of ``allowed`` (or bfloat16, where ``bfloat16``); a
    ``TypeError`` naming the kernel and the dtypes it takes otherwise."""
    try:
        d = np.dtype(dtype)
    except TypeError as e:
        raise TypeError(f"CUDA {what} kernel: not a dtype ({e}) (dtype: {dtype!r})") from None
    if d not in allowed and not (bfloat16 and is_bfloat16(d)):
        names = ", ".join([str(a) for a in allowed] + (["bfloat16"] if bfloat16 else []))
        raise TypeError(f"CUDA {what} kernel: unsupported dtype {d} (these kernels take {names})")
    return d


def _as_float(expr, d):
    """C for the element ``expr`` of real dtype ``d`` as a float (numpy's conversion)."""
    if d == _F16:
        return f"mge_h2f({expr})"
    if is_bfloat16(d):
        return f"mge_c_bf2f({expr})"
    if d == _F32:
        return expr
    return f"(float)({expr})"


def _as_complex(expr, d):
    """C for the element ``expr`` of dtype ``d`` as an ``mge_c64`` (a real one plus 0j)."""
    if d == COMPLEX64:
        return expr
    return f"mge_cplx({_as_float(expr, d)}, 0.0f)"


# -- kernels --------------------------------------------------------------------------------------

def _bits(what, index_bits):
    if index_bits not in (32, 64):
        raise ValueError(f"CUDA {what} kernel: index_bits must be 32 or 64, got {index_bits!r}")
    return index_bits


def _kernel(name, ins, out, contiguous, bits, element):
    """The kernel ``name`` storing ``element(loads)`` (a C expression of the inputs' elements)
    into ``out`` from arrays of dtypes ``ins``: contiguous -- ``(out, in0..., long long n)``;
    general -- ``(out, in0..., I n, mge_layout<1 + nin, I> layout)``, the output's strides
    first."""
    ptrs = [f"{_c_storage(out)}* out"] + [f"const {_c_storage(d)}* in{k}"
                                          for k, d in enumerate(ins)]
    if contiguous:
        name += "_c"
        params = ptrs + ["long long n"]
        loads = [f"in{k}[i]" for k in range(len(ins))]
        loop = (f"    MGE_LOOP(unsigned long long, i, n) {{\n"
                f"        out[i] = {element(loads)};\n    }}\n")
    else:
        idx = "int" if bits == 32 else "long long"
        k = len(ins) + 1
        name += f"_s{bits}"
        params = ptrs + [f"{idx} n", f"mge_layout<{k}, {idx}> layout"]
        loads = [f"in{j}[off[{j + 1}]]" for j in range(len(ins))]
        loop = (f"    MGE_LOOP(unsigned {idx}, i, n) {{\n"
                f"        {idx} off[{k}];\n"
                f"        mge_offsets<{k}, {idx}>(layout, ({idx})i, off);\n"
                f"        out[off[0]] = {element(loads)};\n    }}\n")
    text = f"MGE_KERNEL {name}({', '.join(params)})\n{{\n{loop}}}\n"
    return KernelSource(name, _PARTS + ((name, text),), tuple(params), bool(contiguous), bits,
                        len(ins))


def elemwise_kernel(mode, in_dtypes, contiguous=True, index_bits=64):
    """The kernel of ``Elemwise(mode)`` (one of ``MODES``) on operands of ``in_dtypes``: at least
    one complex64, the others of ``OPERAND_DTYPES``; it stores complex64 (add, sub, mul, neg) or
    bool (eq, neq).  ``contiguous``/``index_bits`` as elemwise.py's kernels."""
    if mode not in MODES:
        raise ValueError(f"CUDA complex Elemwise kernel: mode {mode!r} (complex64 takes "
                         f"{', '.join(MODES)})")
    dts = tuple(_dtype(f"complex Elemwise({mode!r})", d, (COMPLEX64,) + OPERAND_DTYPES)
                for d in in_dtypes)
    arity = 1 if mode == "neg" else 2
    if len(dts) != arity or COMPLEX64 not in dts:
        raise TypeError(f"CUDA complex Elemwise({mode!r}) kernel: {arity} operand(s), one of "
                        f"them complex64, got {', '.join(map(str, dts)) or 'none'}")
    return _elemwise_kernel(mode, dts, bool(contiguous), _bits("complex Elemwise", index_bits))


@functools.lru_cache(maxsize=None)
def _elemwise_kernel(mode, dts, contiguous, bits):
    out = np.dtype(bool) if mode in ("eq", "neq") else COMPLEX64

    def element(loads):
        return f"{MODES[mode]}({', '.join(_as_complex(v, d) for v, d in zip(loads, dts))})"

    name = f"mge_cx_{mode}_{'_'.join(_c_code(d) for d in dts)}"
    return _kernel(name, dts, out, contiguous, bits, element)


def typecvt_kernel(src_dtype, contiguous=True, index_bits=64):
    """The kernel of ``TypeCvt`` from ``src_dtype`` (complex64, one of ``REAL_DTYPES`` or
    bfloat16) into complex64: ``float32(x) + 0j``, as numpy's ``astype``."""
    src = _dtype("TypeCvt to complex64", src_dtype, (COMPLEX64,) + REAL_DTYPES, bfloat16=True)
    return _typecvt_kernel(src, bool(contiguous), _bits("TypeCvt to complex64", index_bits))


@functools.lru_cache(maxsize=None)
def _typecvt_kernel(src, contiguous, bits):
    return _kernel(f"mge_cx_from_{_c_code(src)}", (src,), COMPLEX64, contiguous, bits,
                   lambda loads: _as_complex(loads[0], src))


def create_kernel(real_dtype, imag_dtype, contiguous=True, index_bits=64):
    """The kernel of ``CreateComplex`` of parts of ``real_dtype`` and ``imag_dtype`` (each one of
    ``PART_DTYPES``): ``out = mge_cplx(float(re), float(im))``."""
    dts = tuple(_dtype("CreateComplex", d, PART_DTYPES) for d in (real_dtype, imag_dtype))
    return _create_kernel(dts, bool(contiguous), _bits("CreateComplex", index_bits))


@functools.lru_cache(maxsize=None)
def _create_kernel(dts, contiguous, bits):
    def element(loads):
        return f"mge_cplx({_as_float(loads[0], dts[0])}, {_as_float(loads[1], dts[1])})"

    name = f"mge_cx_create_{_c_code(dts[0])}_{_c_code(dts[1])}"
    return _kernel(name, dts, COMPLEX64, contiguous, bits, element)


def part_kernel(part, contiguous=True, index_bits=64):
    """The kernel of ``ComplexPart(part)`` (``"real"`` or ``"imag"``): the float32 ``re`` or
    ``im`` word of each complex64 element."""
    if part not in ("real", "imag"):
        raise ValueError(f"CUDA ComplexPart kernel: part must be 'real' or 'imag', got {part!r}")
    return _part_kernel(part, bool(contiguous), _bits("ComplexPart", index_bits))


@functools.lru_cache(maxsize=None)
def _part_kernel(part, contiguous, bits):
    field = "re" if part == "real" else "im"
    return _kernel(f"mge_cx_{part}", (COMPLEX64,), _F32, contiguous, bits,
                   lambda loads: f"{loads[0]}.{field}")


# -- plans ----------------------------------------------------------------------------------------

def _describe(ins):
    return ", ".join(f"{x.dtype} {x.shape}" for x in ins) or "none"


def _fail(exc, op, message, ins):
    return exc(f"CUDA {op.name}: {message} (inputs: {_describe(ins)})")


def _operand_strides(op, x, shape, ins):
    """``x``'s strides (elements) as an operand of an output of ``shape``: numpy's broadcast --
    leading dims it lacks, and its size-1 dims, step 0."""
    lead = len(shape) - len(x.shape)
    if lead < 0 or any(n not in (1, t) for n, t in zip(x.shape, shape[lead:])):
        raise _fail(ValueError, op, f"shape {x.shape} does not broadcast to {shape}", ins)
    return (0,) * lead + tuple(0 if n == 1 else s for n, s in
                               zip(x.shape, x.element_strides))


def _launch(op, make, ins, out):
    """The one ``Launch`` of the kernel ``make(contiguous, index_bits)`` writing the dense
    ``out0`` (Layout ``out``) from ``in0``... (``ins``, any strides, broadcast); ``None`` when
    the output is empty.  The contiguous kernel when the simplified layout is one dense dim."""
    n = out.size
    if n == 0:
        return None
    strides = [dense_strides(out.shape)] + [_operand_strides(op, x, out.shape, ins) for x in ins]
    shape, strides = simplify_layout(out.shape, strides)
    ptrs = (Buf("out0"),) + tuple(Buf(f"in{k}") for k in range(len(ins)))
    if not shape or (len(shape) == 1 and all(s[0] == 1 for s in strides)):
        return Launch(make(True, 64), grid_for(n), (THREADS, 1, 1), ptrs + (np.int64(n),))
    if len(shape) > MAX_NDIM:
        raise _fail(NotImplementedError, op, f"the layout needs {len(shape)} dims after merging, "
                    f"the kernels take at most {MAX_NDIM} (strides "
                    f"{[x.element_strides for x in ins]})", ins)
    bits = index_bits_for(shape, strides)
    index = np.int32 if bits == 32 else np.int64
    return Launch(make(False, bits), grid_for(n), (THREADS, 1, 1),
                  ptrs + (index(n), pack_layout(shape, strides, bits)))


def _plan(launch):
    if launch is None:
        return Plan((), notes=("empty: nothing to write",))
    form = "contiguous" if launch.kernel.contiguous else f"general, {launch.kernel.index_bits}-bit"
    return Plan((launch,), notes=(form,))


def _kernel_for(op, ins, fn, *args):
    """``fn(*args, contiguous, bits)`` as a maker, its refusals named after the op."""
    try:
        fn(*args)  # refuses the dtypes before any layout work
    except (TypeError, ValueError) as e:
        raise _fail(type(e), op, str(e), ins) from None
    return lambda contiguous, bits: fn(*args, contiguous, bits)


def elemwise_plan(op, ins, outs):
    """The ``Plan`` of ``Elemwise(mode)`` on complex64 operands (``ins``, any strides, numpy's
    broadcast) into ``out0``."""
    (desc,) = _rule(op, ins, outs)
    dts = tuple(x.dtype for x in ins)
    mixed = [d for d in dts if d != COMPLEX64 and d not in OPERAND_DTYPES]
    if COMPLEX64 in dts and mixed:  # numpy computes these in complex128, which no tensor holds
        raise _fail(TypeError, op, f"complex64 with {mixed[0]} computes in "
                    f"{np.result_type(mixed[0], COMPLEX64)}: convert the operand to complex64 "
                    f"first", ins)
    make = _kernel_for(op, ins, elemwise_kernel, op.mode, dts)
    return _plan(_launch(op, make, ins, outs[0]))


def typecvt_plan(op, ins, outs):
    """The ``Plan`` of ``TypeCvt`` into complex64 of ``in0`` (any strides) into ``out0``."""
    (desc,) = _rule(op, ins, outs)
    if desc.dtype != COMPLEX64:
        raise _fail(TypeError, op, f"converts into complex64 here, not {desc.dtype}", ins)
    make = _kernel_for(op, ins, typecvt_kernel, ins[0].dtype)
    return _plan(_launch(op, make, ins, outs[0]))


def create_complex_plan(op, ins, outs):
    """The ``Plan`` of ``CreateComplex`` of ``(real, imag)`` (any strides, numpy's broadcast)
    into the complex64 ``out0``."""
    _rule(op, ins, outs)
    make = _kernel_for(op, ins, create_kernel, ins[0].dtype, ins[1].dtype)
    return _plan(_launch(op, make, ins, outs[0]))


def complex_part_plan(op, ins, outs):
    """The ``Plan`` of ``ComplexPart(part)`` of the complex64 ``in0`` (any strides) into the
    float32 ``out0``."""
    _rule(op, ins, outs)
    make = _kernel_for(op, ins, part_kernel, op.part)
    return _plan(_launch(op, make, ins, outs[0]))


#: The plan of each op this module has kernels for: ``PLANS[type(op)](op, ins, outs)``.
#: ``Elemwise`` and ``TypeCvt`` have explicit launchers (``cuda/launch/elemwise.py``), which win
#: at registration and call these plans for complex64 operands or targets.
PLANS = {CreateComplex: create_complex_plan, ComplexPart: complex_part_plan,
         Elemwise: elemwise_plan, TypeCvt: typecvt_plan}

#: The ops whose plans read ``ins[k].strides``: all (views are read in place).
STRIDED = frozenset(PLANS)

#: (output, input) pairs an op may write into when the input is donated (``plans.plan_launcher``).
INPLACE = {Elemwise: ((0, 0), (0, 1))}
