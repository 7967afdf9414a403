"""Quantized inference ops (MegEngine's ``ConvBias``, ``BatchConvBias``,
``ConvolutionBackwardData``, ``MatrixMul`` and ``Elemwise`` on quantized dtypes,
``ElemwiseMultiType``, ``TypeCvt`` to and from quantized dtypes), and their shape/dtype rules.

A quantized dtype is a numpy integer dtype carrying ``{"mgb_dtype": {"name", "scale",
"zero_point"}}`` in its metadata (``mge.core.tensor.dtype``).  Numpy compares dtypes without
their metadata (``qint8(0.1) == qint8(0.2)``), and a model file keeps only the storage dtype of
a value, so these ops never read scales from their inputs' dtypes: every op carries, as
parameters, the quantization of each input and of its output as a *qspec*, the tuple
``(cname, scale, zero_point)`` (``("QuantizedS8", 0.1, None)``, ``("Quantized8Asymm", 0.5,
128)``), which compares by value and is JSON data for ``trace.dump``.  A dtype parameter is a
qspec, or a plain numpy dtype for a non-quantized value.  :func:`qspec` and :func:`qdtype`
convert between the two.  An input whose dtype carries a quantization must carry the one the op
names (``TypeError`` naming the op otherwise); an input of the plain storage dtype (a constant of
a loaded model) is read with the op's.

The ops (each ``long_running`` only where it multiplies matrices):

* ``QuantizedTypeCvt(dtype, src)``: MegEngine's ``TypeCvt`` where a side is quantized:
  dequantize (``float32(q - zero_point) * scale``), then quantize (``round(v / scale) +
  zero_point`` with halves away from zero, clipped to the range) -- the arithmetic of mge's
  former composed ``astype``, in float32.
* ``ConvBias(stride, padding, dilation, groups, nonlinear_mode, conv_mode, compute_mode, dtype,
  inp_q, weight_q, bias_q)``: ``(inp, weight[, bias])``, NCHW; an exact integer convolution, the
  qint32 bias, ``relu`` in the int32 domain, then the ``QuantizedTypeCvt`` of the qint32
  accumulator (scale ``float32(inp_scale) * float32(weight_scale)``) to ``dtype``.
* ``BatchConvBias(...)``: the same with one kernel per batch item, ``weight (N, OC, C, KH, KW)``.
* ``QuantizedConvolutionBackwardData(stride, padding, output_padding, dilation, groups,
  conv_mode, compute_mode, dtype, inp_q, weight_q)``: ``(weight, inp)`` (MegEngine's order), the
  transposed convolution, ``weight (IC, OC, KH, KW)``.
* ``QuantizedMatrixMul(transposeA, transposeB, compute_mode, a_q, b_q)``: ``A @ B`` of quantized
  matrices (``A`` may have leading batch dims), the qint32 accumulator.
* ``QuantizedElemwise(mode, dtype)``: ``add`` / ``relu`` of integer values of one quantization
  (the qint32 bias add and relu of ``Linear``), saturated to the storage range.
* ``ElemwiseMultiType(mode, dtype, in_q)``: MegEngine's ``q*`` modes (``qadd``,
  ``qfuse_add_relu``...): the inputs dequantized to float32, the float mode, then quantized to
  ``dtype`` (``None``: the float result).

The CPU kernels are in ``mge/_core/device/cpu/kernels/quantized.py``.  There are no backward
rules (inference only).
"""
import numpy as np

from .base import OpDef, TensorDesc, def_infer, op_error
from .elemwise import ELEMWISE_ARITY, ELEMWISE_MODES, broadcast_shapes

__all__ = ["QuantizedTypeCvt", "ConvBias", "BatchConvBias", "QuantizedConvolutionBackwardData",
           "QuantizedMatrixMul", "QuantizedElemwise", "ElemwiseMultiType", "qspec", "qdtype",
           "qspec_storage", "qspec_range", "QUANTIZED_FLOAT_MODES"]

# MegEngine's C name of a quantized dtype -> (storage dtype, qmin, qmax); the range of a shared
# C name is the widest (``qint8`` and ``qint8_narrow`` are both QuantizedS8), as mge's dtype
# module reads it.
_CNAMES = {
    "QuantizedS8": ("int8", -128, 127),
    "Quantized8Asymm": ("uint8", 0, 255),
    "Quantized4Asymm": ("uint8", 0, 15),
    "QuantizedS4": ("int8", -8, 7),
    "QuantizedS1": ("int8", 0, 1),
    "QuantizedS32": ("int32", -(2 ** 31), 2 ** 31 - 1),
}
_dtypes = {}  # qspec -> its numpy dtype (built once)


def qspec(dtype):
    """The qspec ``(cname, scale, zero_point)`` of a quantized numpy dtype (``zero_point`` None
    for a symmetric one), or ``None`` for a dtype without a quantization."""
    if dtype is None:
        return None
    md = np.dtype(dtype).metadata
    meta = md.get("mgb_dtype") if md else None
    if meta is None:
        return None
    zp = meta.get("zero_point")
    return (str(meta["name"]), float(meta["scale"]), None if zp is None else int(zp))


def _check_spec(spec):
    if (not isinstance(spec, tuple) or len(spec) != 3 or spec[0] not in _CNAMES
            or not isinstance(spec[1], (int, float))
            or not (spec[2] is None or isinstance(spec[2], int))):
        raise ValueError(f"not a quantization (cname, scale, zero_point): {spec!r}")


def qdtype(spec):
    """The numpy dtype of a dtype parameter: a qspec gives its quantized dtype (the dtype
    ``mge.core.tensor.dtype.qint8(scale)``... makes), a numpy dtype is returned as is."""
    if not isinstance(spec, tuple):
        return np.dtype(spec)
    try:
        return _dtypes[spec]
    except KeyError:
        pass
    _check_spec(spec)
    meta = {"name": spec[0], "scale": float(spec[1])}
    if spec[2] is not None:
        meta["zero_point"] = int(spec[2])
    d = np.dtype(_CNAMES[spec[0]][0], metadata={"mgb_dtype": meta})
    if len(_dtypes) > 4096:
        _dtypes.clear()
    _dtypes[spec] = d
    return d


def qspec_storage(spec):
    """The plain numpy storage dtype of a qspec (``int8``, ``uint8``, ``int32``)."""
    return np.dtype(_CNAMES[spec[0]][0])


def qspec_range(spec):
    """``(qmin, qmax)`` of a qspec's storage values."""
    return _CNAMES[spec[0]][1:]


def _param(v):
    # a dtype parameter: a qspec (tuple) or a plain numpy dtype (or None where allowed)
    if v is None or isinstance(v, tuple):
        return v
    q = qspec(v)
    return q if q is not None else np.dtype(v)


def _check_input(op, descs, k, spec, what):
    """Input ``k`` has the storage dtype of ``spec`` and, if its dtype is quantized, ``spec``."""
    dt = descs[k][1]
    if spec is None:
        if qspec(dt) is not None:
            raise op_error(TypeError, op, f"{what} has the quantized dtype {qspec(dt)} where the op "
                           "takes a non-quantized one", descs)
        return
    if dt != qspec_storage(spec):
        raise op_error(TypeError, op, f"{what} must be stored as {qspec_storage(spec)} "
                       f"(quantization {spec}), got {dt}", descs)
    got = qspec(dt)
    if got is not None and got != spec:
        raise op_error(TypeError, op, f"{what} has the quantization {got} where the op takes "
                       f"{spec}", descs)


def _acc_spec(inp_q, weight_q):
    # MegEngine's accumulator: qint32 with scale float32(inp_scale) * float32(weight_scale)
    return ("QuantizedS32", float(np.float32(inp_q[1]) * np.float32(weight_q[1])), None)


class QuantizedTypeCvt(OpDef):
    """``TypeCvt`` where the input (quantization ``src``, a qspec or None) or the output
    (``dtype``: a qspec or a plain numpy dtype) is quantized; MegEngine's ``TypeCvt``."""

    _fields = ("dtype", "src")
    _defaults = {"src": None}
    long_running = False

    def __init__(self, dtype, src=None):
        dtype, src = _param(dtype), _param(src)
        if src is not None and not isinstance(src, tuple):
            src = None
        for s in (dtype, src):
            if isinstance(s, tuple):
                _check_spec(s)
        super().__init__(dtype, src)

    @property
    def out_dtype(self):
        """The numpy dtype of the output."""
        return qdtype(self.dtype)


@def_infer(QuantizedTypeCvt)
def _infer_qtypecvt(op, descs):
    if len(descs) != 1:
        raise op_error(TypeError, op, f"expects 1 input, got {len(descs)}", descs)
    if op.src is not None:
        _check_input(op, descs, 0, op.src, "the input")
    elif descs[0][1].kind == "c":
        raise op_error(TypeError, op, "cannot quantize a complex tensor", descs)
    return [TensorDesc(descs[0][0], qdtype(op.dtype))]


_NONLINEAR = ("identity", "relu")
_CONV_MODES = ("cross_correlation", "convolution")


class _QuantizedConv(OpDef):
    """Common checks of the quantized convolutions."""

    long_running = True  # integer sums over im2col windows: the worker runs them
    _specs = ("dtype", "inp_q", "weight_q", "bias_q")

    def __init__(self, *args, **kwargs):
        if len(args) > len(self._fields):
            raise TypeError(f"{type(self).__name__} takes at most {len(self._fields)} "
                            f"parameters, got {len(args)}")
        values = dict(zip(self._fields, args))
        values.update(kwargs)
        for name in self._specs:
            if name in values:
                values[name] = _param(values[name])
        for name in ("stride", "padding", "dilation", "output_padding"):
            if name in values and isinstance(values[name], (tuple, list)):
                values[name] = tuple(int(x) for x in values[name])
        super().__init__(**values)
        if str(self.conv_mode).lower() not in _CONV_MODES:
            raise ValueError(f"{type(self).__name__}: conv_mode must be one of {_CONV_MODES}, got "
                             f"{self.conv_mode!r}")
        for name in ("stride", "padding", "dilation"):
            v = getattr(self, name)
            if not (isinstance(v, tuple) and len(v) == 2 and all(isinstance(x, int) for x in v)):
                raise ValueError(f"{type(self).__name__}: {name} must be a pair of ints, got {v!r}")
        if min(self.stride) < 1 or min(self.dilation) < 1 or min(self.padding) < 0:
            raise ValueError(f"{type(self).__name__}: stride {self.stride} and dilation "
                             f"{self.dilation} must be >= 1, padding {self.padding} >= 0")
        for name in ("inp_q", "weight_q"):
            _check_spec(getattr(self, name))

    @property
    def acc_spec(self):
        """The qspec of the qint32 accumulator."""
        return _acc_spec(self.inp_q, self.weight_q)

    @property
    def out_spec(self):
        """The output's dtype parameter (the accumulator's qspec when ``dtype`` is None)."""
        return self.acc_spec if self.dtype is None else self.dtype


class ConvBias(_QuantizedConv):
    """MegEngine's ``ConvBias`` on quantized inputs: ``(inp, weight[, bias])`` -> the output of
    dtype ``dtype`` (see the module's docstring); ``stride``, ``padding``, ``dilation`` pairs."""

    _fields = ("stride", "padding", "dilation", "groups", "nonlinear_mode", "conv_mode",
               "compute_mode", "dtype", "inp_q", "weight_q", "bias_q")
    _defaults = {"stride": (1, 1), "padding": (0, 0), "dilation": (1, 1), "groups": 1,
                 "nonlinear_mode": "identity", "conv_mode": "cross_correlation",
                 "compute_mode": "default", "dtype": None, "bias_q": None}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if str(self.nonlinear_mode).lower() not in _NONLINEAR:
            raise NotImplementedError(f"{type(self).__name__}: quantized nonlinear_mode "
                                      f"{self.nonlinear_mode!r} is not supported by mge "
                                      "(identity, relu)")
        if self.groups < 1:
            raise ValueError(f"{type(self).__name__}: groups must be >= 1, got {self.groups}")


class BatchConvBias(ConvBias):
    """MegEngine's ``BatchConvBias``: ``ConvBias`` with one kernel per batch item
    (``weight (N, OC, C, KH, KW)``; ``groups`` 1)."""


class QuantizedConvolutionBackwardData(_QuantizedConv):
    """MegEngine's ``ConvolutionBackwardData`` on quantized inputs (the quantized transposed
    convolution): ``(weight (IC, OC, KH, KW), inp (N, IC, H, W))`` -> ``dtype``."""

    _fields = ("stride", "padding", "output_padding", "dilation", "groups", "conv_mode",
               "compute_mode", "dtype", "inp_q", "weight_q")
    _defaults = {"stride": (1, 1), "padding": (0, 0), "output_padding": (0, 0),
                 "dilation": (1, 1), "groups": 1, "conv_mode": "cross_correlation",
                 "compute_mode": "default", "dtype": None}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.groups != 1:
            raise NotImplementedError("group quantized transposed conv2d is not supported yet.")


def _conv_out(size, k, s, p, d):
    return (size + 2 * p - d * (k - 1) - 1) // s + 1


def _check_conv_inputs(op, descs, n_min, n_max, names):
    if not n_min <= len(descs) <= n_max:
        raise op_error(TypeError, op, f"expects {n_min}..{n_max} inputs ({', '.join(names)}), got "
                       f"{len(descs)}", descs)


@def_infer(ConvBias)
def _infer_conv_bias(op, descs):
    _check_conv_inputs(op, descs, 2, 3, ("inp", "weight", "bias"))
    _check_input(op, descs, 0, op.inp_q, "inp")
    _check_input(op, descs, 1, op.weight_q, "weight")
    if len(descs) == 3:
        if op.bias_q is None:
            raise op_error(TypeError, op, "a bias is given but the op has no bias_q", descs)
        _check_input(op, descs, 2, op.bias_q, "bias")
    out_dt = qdtype(op.out_spec)
    xs, ws = descs[0][0], descs[1][0]
    if xs is None or ws is None:
        return [TensorDesc(None, out_dt)]
    if len(xs) != 4:
        raise op_error(ValueError, op, f"inp must be 4-D (N, C, H, W), got shape {xs}", descs)
    g = op.groups
    if len(ws) == 5:
        oc, cg, k = ws[0] * ws[1], ws[2], ws[3:]
        if ws[0] != g:
            raise op_error(ValueError, op, f"a 5-D weight {ws} must have groups={g} first", descs)
    elif len(ws) == 4:
        oc, cg, k = ws[0], ws[1], ws[2:]
    else:
        raise op_error(ValueError, op, f"weight must be (OC, C/g, KH, KW) or (groups, OC/g, C/g, "
                       f"KH, KW), got shape {ws}", descs)
    if cg * g != xs[1] or oc % g:
        raise op_error(ValueError, op, f"inp has {xs[1]} channels, weight {ws} with groups={g} "
                       f"expects {cg * g} (and OC divisible by groups)", descs)
    out = tuple(_conv_out(xs[2 + i], k[i], op.stride[i], op.padding[i], op.dilation[i])
                for i in range(2))
    if min(out) <= 0:
        raise op_error(ValueError, op, f"kernel {tuple(k)} (dilation {op.dilation}) is larger than "
                       f"the padded input {xs[2:]} (padding {op.padding})", descs)
    _check_bias(op, descs, oc)
    return [TensorDesc((xs[0], oc) + out, out_dt)]


def _check_bias(op, descs, oc):
    if len(descs) == 3 and descs[2][0] is not None:
        n = 1
        for s in descs[2][0]:
            n *= s
        if n != oc:
            raise op_error(ValueError, op, f"bias must hold one value per output channel "
                           f"({oc}), got shape {descs[2][0]}", descs)


@def_infer(BatchConvBias)
def _infer_batch_conv_bias(op, descs):
    _check_conv_inputs(op, descs, 2, 3, ("inp", "weight", "bias"))
    if op.groups != 1:
        raise op_error(NotImplementedError, op, "groups must be 1", descs)
    _check_input(op, descs, 0, op.inp_q, "inp")
    _check_input(op, descs, 1, op.weight_q, "weight")
    if len(descs) == 3:
        if op.bias_q is None:
            raise op_error(TypeError, op, "a bias is given but the op has no bias_q", descs)
        _check_input(op, descs, 2, op.bias_q, "bias")
    out_dt = qdtype(op.out_spec)
    xs, ws = descs[0][0], descs[1][0]
    if xs is None or ws is None:
        return [TensorDesc(None, out_dt)]
    if len(xs) != 4 or len(ws) != 5 or ws[0] != xs[0] or ws[2] != xs[1]:
        raise op_error(ValueError, op, f"inp must be (N, C, H, W) and weight (N, OC, C, KH, KW), "
                       f"got shapes {xs} and {ws}", descs)
    out = tuple(_conv_out(xs[2 + i], ws[3 + i], op.stride[i], op.padding[i], op.dilation[i])
                for i in range(2))
    if min(out) <= 0:
        raise op_error(ValueError, op, f"kernel {ws[3:]} is larger than the padded input "
                       f"{xs[2:]}", descs)
    _check_bias(op, descs, ws[1])
    return [TensorDesc((xs[0], ws[1]) + out, out_dt)]


@def_infer(QuantizedConvolutionBackwardData)
def _infer_qdeconv(op, descs):
    if len(descs) != 2:
        raise op_error(TypeError, op, f"expects 2 inputs (weight, inp), got {len(descs)}", descs)
    _check_input(op, descs, 0, op.weight_q, "weight")
    _check_input(op, descs, 1, op.inp_q, "inp")
    out_dt = qdtype(op.out_spec)
    ws, xs = descs[0][0], descs[1][0]
    if xs is None or ws is None:
        return [TensorDesc(None, out_dt)]
    if len(xs) != 4 or len(ws) != 4 or ws[0] != xs[1]:
        raise op_error(ValueError, op, f"inp must be (N, IC, H, W) and weight (IC, OC, KH, KW), "
                       f"got shapes {xs} and {ws}", descs)
    out = tuple((xs[2 + i] - 1) * op.stride[i] - 2 * op.padding[i]
                + op.dilation[i] * (ws[2 + i] - 1) + op.output_padding[i] + 1 for i in range(2))
    if min(out) <= 0:
        raise op_error(ValueError, op, f"output size {out} is not positive", descs)
    return [TensorDesc((xs[0], ws[1]) + out, out_dt)]


class QuantizedMatrixMul(OpDef):
    """MegEngine's ``MatrixMul`` of quantized matrices: ``A @ B`` (each transposed first where its
    flag says), ``A`` 2-D or with leading batch dims, ``B`` 2-D; the exact integer sums as
    qint32 with scale ``float32(a_scale) * float32(b_scale)``."""

    _fields = ("transposeA", "transposeB", "compute_mode", "a_q", "b_q")
    _defaults = {"transposeA": False, "transposeB": False, "compute_mode": "default"}
    long_running = True

    def __init__(self, transposeA=False, transposeB=False, compute_mode="default", a_q=None,
                 b_q=None):
        a_q, b_q = _param(a_q), _param(b_q)
        _check_spec(a_q)
        _check_spec(b_q)
        super().__init__(bool(transposeA), bool(transposeB), compute_mode, a_q, b_q)

    @property
    def acc_spec(self):
        """The qspec of the qint32 result."""
        return _acc_spec(self.a_q, self.b_q)


@def_infer(QuantizedMatrixMul)
def _infer_qmatmul(op, descs):
    if len(descs) != 2:
        raise op_error(TypeError, op, f"expects 2 inputs (a, b), got {len(descs)}", descs)
    _check_input(op, descs, 0, op.a_q, "a")
    _check_input(op, descs, 1, op.b_q, "b")
    out_dt = qdtype(op.acc_spec)
    a, b = descs[0][0], descs[1][0]
    if a is None or b is None:
        return [TensorDesc(None, out_dt)]
    if len(a) < 1 or len(b) != 2 or (op.transposeA and len(a) != 2):
        raise op_error(ValueError, op, f"a must be (K,) or (..., M, K) (2-D when transposed) and "
                       f"b 2-D, got shapes {a} and {b}", descs)
    k = a[-2] if op.transposeA else a[-1]
    kb, n = (b[1], b[0]) if op.transposeB else (b[0], b[1])
    if k != kb:
        raise op_error(ValueError, op, f"inner dims differ: {k} and {kb} (shapes {a}, {b}, "
                       f"transposeA={op.transposeA}, transposeB={op.transposeB})", descs)
    if len(a) == 1:
        return [TensorDesc((n,), out_dt)]
    m = a[-1] if op.transposeA else a[-2]
    return [TensorDesc(tuple(a[:-2]) + (m, n), out_dt)]


_INT_MODES = {"add": 2, "relu": 1}


class QuantizedElemwise(OpDef):
    """MegEngine's ``Elemwise`` ``add`` / ``relu`` on integer values of the one quantization
    ``dtype`` (a qspec; the qint32 bias add and relu of a quantized ``Linear``): computed exactly,
    saturated to the storage range; numpy broadcasting.

    ``in_q`` (optional, one entry per input) names an input's own dtype where it is not
    ``dtype``: a qspec, or a plain numpy dtype for a float input.  Such an input is converted to
    ``dtype`` first, as ``QuantizedTypeCvt`` converts it -- the float bias of a quantized
    ``Linear`` is added so, as MegBrain folds the ``TypeCvt`` of a constant into a constant."""

    _fields = ("mode", "dtype", "in_q")
    _defaults = {"in_q": ()}
    long_running = False

    def __init__(self, mode, dtype, in_q=()):
        mode = str(mode).lower()
        if mode not in _INT_MODES:
            raise ValueError(f"QuantizedElemwise: mode must be one of {sorted(_INT_MODES)}, got "
                             f"{mode!r}")
        dtype = _param(dtype)
        _check_spec(dtype)
        in_q = tuple(_param(q) for q in in_q)
        for q in in_q:
            if isinstance(q, tuple):
                _check_spec(q)
            elif q is None:
                raise ValueError("QuantizedElemwise: an in_q entry must be a qspec or a dtype")
        super().__init__(mode, dtype, in_q)

    def input_spec(self, k):
        """The dtype parameter of input ``k`` (``dtype`` unless ``in_q`` names another)."""
        return self.in_q[k] if self.in_q else self.dtype


@def_infer(QuantizedElemwise)
def _infer_qelemwise(op, descs):
    n = _INT_MODES[op.mode]
    if len(descs) != n:
        raise op_error(TypeError, op, f"expects {n} input(s), got {len(descs)}", descs)
    if op.in_q and len(op.in_q) != n:
        raise op_error(TypeError, op, f"in_q names {len(op.in_q)} input(s), the mode takes {n}",
                       descs)
    for k in range(n):
        spec = op.input_spec(k)
        if isinstance(spec, tuple):
            _check_input(op, descs, k, spec, f"input {k}")
        elif descs[k][1] != spec or qspec(descs[k][1]) is not None:
            raise op_error(TypeError, op, f"input {k} must be {spec}, got {descs[k][1]}", descs)
    shape = descs[0][0] if n == 1 else broadcast_shapes(op, descs)
    return [TensorDesc(shape, qdtype(op.dtype))]


#: MegEngine's float elementwise modes that mge computes as a composition of its own modes
#: (name -> the number of inputs), for ``ElemwiseMultiType``'s ``q*`` modes; the others are
#: mge's modes (``ELEMWISE_MODES``) or their MegEngine spellings (``QUANTIZED_MODE_RENAMES``).
QUANTIZED_FLOAT_MODES = {"fuse_mul_add3": 3, "fuse_mul_add4": 4, "fuse_add_sigmoid": 2,
                         "fuse_add_tanh": 2, "fuse_add_h_swish": 2, "erfc": 1, "prelu": 2,
                         "fast_tanh_grad": 2}
_RENAMES = {"negate": "neg", "log_sum_exp": "logaddexp", "h_swish": "hswish",
            "h_swish_grad": "hswish_grad", "fast_tanh": "tanh"}


def float_mode(mode):
    """The float mode of an ``ElemwiseMultiType`` mode (``"qadd"`` -> ``"add"``,
    ``"qh_swish"`` -> ``"hswish"``, a composed one as is), and its number of inputs."""
    m = str(mode).lower()
    if not m.startswith("q"):
        raise NotImplementedError(f"ElemwiseMultiType: only the quantized modes (q*) are "
                                  f"provided by mge, got {mode!r}")
    m = m[1:]
    if m in QUANTIZED_FLOAT_MODES:
        return m, QUANTIZED_FLOAT_MODES[m]
    m = m if m in ELEMWISE_MODES else _RENAMES.get(m, m)
    if m not in ELEMWISE_MODES:
        raise NotImplementedError(f"ElemwiseMultiType mode {mode!r} has no kernel in mge")
    return m, ELEMWISE_ARITY[m]


class ElemwiseMultiType(OpDef):
    """MegEngine's ``ElemwiseMultiType`` for its quantized modes (``qadd``, ``qmul``,
    ``qfuse_add_relu``, ``qabs``...): the inputs (quantizations ``in_q``, one qspec or None per
    input) dequantized to float32, the float mode applied, the result quantized to ``dtype``
    (a qspec, a plain dtype, or None for the float result)."""

    _fields = ("mode", "dtype", "in_q")
    _defaults = {"dtype": None, "in_q": ()}
    long_running = False

    def __init__(self, mode, dtype=None, in_q=()):
        mode = str(mode).lower()
        float_mode(mode)  # refuses unknown modes
        in_q = tuple(_param(q) for q in in_q)
        in_q = tuple(q if isinstance(q, tuple) else None for q in in_q)
        for q in in_q:
            if q is not None:
                _check_spec(q)
        super().__init__(mode, _param(dtype), in_q)


def _float_result(dtypes):
    # the float dtype dequantized inputs meet in: float32 unless a float input is wider
    return np.result_type(np.float32, *[d for d in dtypes if d.kind == "f"])


@def_infer(ElemwiseMultiType)
def _infer_elemwise_multi_type(op, descs):
    m, n = float_mode(op.mode)
    if len(descs) != n:
        raise op_error(TypeError, op, f"expects {n} input(s), got {len(descs)}", descs)
    if len(op.in_q) != n:
        raise op_error(TypeError, op, f"in_q names {len(op.in_q)} input(s), the mode takes {n}",
                       descs)
    for k, q in enumerate(op.in_q):
        _check_input(op, descs, k, q, f"input {k}")
    shape = descs[0][0]
    if any(d[0] != shape for d in descs):
        shape = broadcast_shapes(op, descs)
    if op.dtype is not None:
        return [TensorDesc(shape, qdtype(op.dtype))]
    floats = [np.dtype(np.float32) if q is not None else descs[k][1]
              for k, q in enumerate(op.in_q)]
    if m in ELEMWISE_MODES:
        from .elemwise import Elemwise
        from .base import INFER
        out = INFER[Elemwise](Elemwise.get(m), [TensorDesc((1,), d) for d in floats])[0][1]
    else:
        out = _float_result(floats)
    return [TensorDesc(shape, out)]
