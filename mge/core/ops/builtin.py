"""``mge.core.ops.builtin``: MegEngine 1.13's op classes, with their names, parameters and defaults.

Code written for MegEngine builds ops such as ``Elemwise(Elemwise.Mode.ADD)``,
``Reduce(mode="sum", axis=1)``, ``Subtensor(items=[(0, True, False, False, False)])`` or
``GetVarShape()`` and runs them with ``mge.core._imperative_rt.core2.apply(op, *tensors)`` (or
``mge.core.apply``).  Each class here keeps MegEngine's parameters and translates an application
into mge's own ops (``mge/_core/ops/``), applied through the dispatcher, so grad, trace, AMP and the
channel see ordinary mge ops.  MegEngine passes some parameters as tensor inputs (the target shape
of ``Reshape``/``Broadcast``, the indices of ``Subtensor``, the shape of an RNG op); those values are
read from the tensors when the op is applied.

Ops compare equal and hash by their parameters (settable, as in MegEngine: ``op.offsets = [...]``),
and their enum parameters
(``Elemwise.Mode``, ``Reduce.Mode``, ``Convolution.Strategy``, ...) accept MegEngine's names in any
case.  Modes mge has no kernel for (``ERFINV``, ``RMULH``, ...) raise ``NotImplementedError`` when
applied.  ``docs/differences.rst`` lists what differs.
"""
import enum

import numpy as np

from ..._core import _accel
from ..._core import ops as _ops
from ..._core.device import as_device
from ..._core.ops.rng import next_seed

_apply = _accel.load("mge._core.dispatch").apply

#: MegEngine's "no axis given" value of ``Reduce``/``Cumsum`` (INT_MAX)
INVALID_AXIS_REDUCE = 2147483647
#: MegEngine's "no axis" value of ``GetVarShape``/``Reshape`` (MAX_NDIM)
INVALID_AXIS = 7

__all__ = ["BuiltinOp"]


# -- enums -----------------------------------------------------------------------------------------
class _EnumMember(str):
    """A member of a MegEngine enum: a string equal to its name in any case."""

    _enum_name = ""

    def __eq__(self, other):
        if isinstance(other, str):
            return str.upper(self) == other.upper()
        return NotImplemented

    def __ne__(self, other):
        r = self.__eq__(other)
        return r if r is NotImplemented else not r

    def __hash__(self):
        return str.__hash__(str.upper(self))

    def __repr__(self):
        return f"{self._enum_name}.{str.__str__(self)}"

    __str__ = __repr__

    def __reduce__(self):
        # pickled as its plain name: op constructors accept names
        return (str, (str.upper(self),))


def _make_enum(qualname, names):
    """A MegEngine-style enum class: members are attributes named as their (upper-case) value."""
    cls = type(qualname.rsplit(".", 1)[-1], (_EnumMember,), {"_enum_name": qualname,
                                                             "__doc__": f"MegEngine's ``{qualname}``."})
    members = {}
    for n in names:
        m = cls(n)
        setattr(cls, n, m)
        members[n] = m
    cls._members = members

    def convert(value):
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            m = members.get(value.upper())
            if m is not None:
                return m
        raise ValueError(f"{qualname}: unknown value {value!r}; expected one of {list(members)}")
    cls.convert = staticmethod(convert)
    return cls


class _Strategy(enum.IntFlag):
    """MegEngine's algorithm-choice strategy flags (``Convolution.Strategy`` and the others)."""

    HEURISTIC = 1
    PROFILE = 2
    REPRODUCIBLE = 4
    OPTIMIZED = 8


# -- the base class --------------------------------------------------------------------------------
class BuiltinOp:
    """Base of MegEngine's op classes: parameters in ``_params`` (name -> default), settable by
    attribute (enum parameters converted), compared and hashed by value.  ``apply`` of an instance runs :meth:`_apply` on its inputs."""

    _params = {}
    _enums = {}   # parameter -> converter (enum parameters)

    def __init__(self, *args, **kwargs):
        names = list(self._params)
        if len(args) > len(names):
            raise TypeError(f"{type(self).__name__} takes at most {len(names)} parameters")
        values = dict(self._params)
        values.update(zip(names, args))
        for k, v in kwargs.items():
            if k not in values and k != "scope":
                raise TypeError(f"{type(self).__name__} got an unexpected parameter {k!r}")
            values[k] = v
        scope = values.pop("scope", "")
        for k, conv in self._enums.items():
            if k in values:
                values[k] = conv(values[k])
        object.__setattr__(self, "_values", values)
        object.__setattr__(self, "scope", scope)

    def __getattr__(self, name):
        try:
            return self.__dict__["_values"][name]
        except KeyError:
            raise AttributeError(f"{type(self).__name__} has no parameter {name!r}") from None

    def __setattr__(self, name, value):
        if name == "scope":
            object.__setattr__(self, name, value)
            return
        values = self.__dict__["_values"]
        if name not in values:
            raise AttributeError(f"{type(self).__name__} has no parameter {name!r}")
        conv = self._enums.get(name)
        values[name] = conv(value) if conv is not None else value

    def _key(self):
        return tuple((k, _hashable(v)) for k, v in self._values.items())

    def __eq__(self, other):
        return type(self) is type(other) and self._key() == other._key()

    def __ne__(self, other):
        return not self == other

    def __hash__(self):
        return hash((type(self).__name__, self._key()))

    def __repr__(self):
        return type(self).__name__

    def __reduce__(self):
        return (_rebuild, (type(self), dict(self._values)))

    @property
    def type(self):
        """The op's class name (MegEngine's ``OpDef.type``)."""
        return type(self).__name__

    def _apply(self, inputs):
        raise NotImplementedError(f"{type(self).__name__} has no implementation in mge")


def _rebuild(cls, values):
    return cls(**values)


def _hashable(v):
    if isinstance(v, (list, tuple)):
        return tuple(_hashable(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, _hashable(x)) for k, x in v.items()))
    if isinstance(v, np.dtype):
        return ("dtype", str(v))
    return v


def _op(name, params, enums=None, doc=None, base=BuiltinOp, **attrs):
    cls = type(name, (base,), {"_params": dict(params), "_enums": dict(enums or {}),
                               "__doc__": doc or f"MegEngine's ``{name}`` op.", **attrs})
    globals()[name] = cls
    __all__.append(name)
    return cls


def _np(x):
    return np.asarray(x.numpy() if hasattr(x, "numpy") else x)


def _ints(x):
    return tuple(int(v) for v in _np(x).reshape(-1))


def _tensor(value, dtype=None, device=None):
    from ...tensor import Tensor
    return Tensor(value, dtype=dtype, device=device)


def _F():
    from ... import functional
    return functional


def _dtype(d):
    return None if d is None else np.dtype(d)


def _device(cn, inputs=()):
    if cn is None or (isinstance(cn, str) and cn in ("", "invalid")):
        for t in inputs:
            dev = getattr(t, "device", None)
            if dev is not None:
                return dev
        return as_device(None)
    if getattr(cn, "physical", None) == "invalid":
        return as_device(None)
    try:
        return as_device(cn)
    except Exception:  # an unset CompNode: the default device
        return as_device(None)


# -- elementwise -----------------------------------------------------------------------------------
_ELEMWISE_NAMES = [
    "RELU", "ABS", "ACOS", "ASIN", "CEIL", "COS", "EXP", "EXPM1", "FLOOR", "LOG", "LOG1P", "NEGATE",
    "SIGMOID", "SIN", "TANH", "ABS_GRAD", "ADD", "FLOOR_DIV", "MAX", "MIN", "MOD", "MUL", "POW",
    "SIGMOID_GRAD", "SUB", "SWITCH_GT0", "TANH_GRAD", "TRUE_DIV", "LOG_SUM_EXP", "LT", "LEQ", "EQ",
    "SHL", "SHR", "COND_LEQ_MOV", "FUSE_MUL_ADD3", "FUSE_MUL_ADD4", "FUSE_ADD_RELU",
    "FUSE_ADD_SIGMOID", "FUSE_ADD_TANH", "FAST_TANH", "FAST_TANH_GRAD", "ROUND", "RMULH", "ATAN2",
    "ERF", "ERFINV", "ERFC", "ERFCINV", "H_SWISH", "H_SWISH_GRAD", "FUSE_ADD_H_SWISH", "NOT", "AND",
    "OR", "XOR", "SILU", "SILU_GRAD", "GELU", "GELU_GRAD", "COND_LT_MOV", "NEQ", "ISNAN", "ISINF",
    "SINH", "COSH", "ASINH", "ACOSH", "ATANH", "TAN", "ASINH_GRAD", "ACOSH_GRAD", "ATANH_GRAD",
    "PRELU", "CLIP", "PRELU_GRAD", "SOFTPLUS", "SOFTPLUS_GRAD", "RELU6", "RELU6_GRAD", "HSIGMOID",
    "HSIGMOID_GRAD", "LOGSIGMOID", "SQRT", "SQUARE", "SIGN",
]
# MegEngine's name -> mge's mode, where they differ (the others are the lower-case name)
_ELEMWISE_RENAMES = {"NEGATE": "neg", "LOG_SUM_EXP": "logaddexp", "H_SWISH": "hswish",
                     "H_SWISH_GRAD": "hswish_grad", "FAST_TANH": "tanh"}


def _m(mode, *xs):
    return _apply(_ops.elemwise_op(mode), *xs)[0]


# modes that are a composition of mge's modes
_ELEMWISE_COMPOSED = {
    "FUSE_MUL_ADD3": lambda a, b, c: _m("add", _m("mul", a, b), c),
    "FUSE_MUL_ADD4": lambda a, b, c, d: _m("add", _m("mul", a, b), _m("mul", c, d)),
    "FUSE_ADD_SIGMOID": lambda a, b: _m("sigmoid", _m("add", a, b)),
    "FUSE_ADD_TANH": lambda a, b: _m("tanh", _m("add", a, b)),
    "FUSE_ADD_H_SWISH": lambda a, b: _m("hswish", _m("add", a, b)),
    "ERFC": lambda a: _m("sub", 1, _m("erf", a)),
    "PRELU": lambda x, w: _m("add", _m("max", x, 0), _m("mul", w, _m("min", x, 0))),
    "FAST_TANH_GRAD": lambda x, dy: _m("tanh_grad", _m("tanh", x), dy),
}

_ElemwiseMode = _make_enum("Elemwise.Mode", _ELEMWISE_NAMES)


def _elemwise_apply(self, inputs):
    name = str.upper(self.mode)
    composed = _ELEMWISE_COMPOSED.get(name)
    if composed is not None:
        return (composed(*inputs),)
    mode = _ELEMWISE_RENAMES.get(name, name.lower())
    if mode not in _ops.ELEMWISE_MODES:
        raise NotImplementedError(f"Elemwise mode {name} has no kernel in mge")
    return _apply(_ops.elemwise_op(mode), *inputs)


_op("Elemwise", {"mode": _ElemwiseMode.ADD}, {"mode": _ElemwiseMode.convert},
    "MegEngine's ``Elemwise(mode)``: an elementwise op (``Elemwise.Mode``).",
    Mode=_ElemwiseMode, _apply=_elemwise_apply)
Elemwise.__init__.__doc__ = None


def _typecvt_apply(self, inputs):
    (x,) = inputs
    return (x.astype(self.dtype),) if hasattr(x, "astype") else (_tensor(x, dtype=self.dtype),)


_op("TypeCvt", {"dtype": None}, {"dtype": _dtype}, "Convert to ``dtype``.", _apply=_typecvt_apply)


def _simple(mge_op_fn):
    def run(self, inputs):
        return _apply(mge_op_fn(self, inputs), *inputs)
    return run


_op("Identity", {}, doc="Returns its input.", _apply=_simple(lambda s, i: _ops.Identity()))
_op("FastpathCopy", {}, doc="Returns its input (MegEngine copies without the graph).",
    _apply=_simple(lambda s, i: _ops.Identity()))
_op("Copy", {"comp_node": None}, doc="Copy to ``comp_node``.",
    _apply=_simple(lambda s, i: _ops.Copy(_device(s.comp_node, i))))

# -- reductions ------------------------------------------------------------------------------------
_ReduceMode = _make_enum("Reduce.Mode", ["SUM", "SUM_SQR", "PRODUCT", "MIN", "MAX", "MEAN"])
_ReduceDataType = _make_enum("Reduce.DataType", ["DEFAULT", "FLOAT_IO16xC32", "FLOAT_O32xC32",
                                                 "FLOAT_O16xC32", "QUINT_I8xO32", "QINT_I8xO32"])
_REDUCE_MODES = {"SUM": "sum", "SUM_SQR": "sum_sqr", "PRODUCT": "prod", "MIN": "min",
                 "MAX": "max", "MEAN": "mean"}


def _reduce_apply(self, inputs):
    mode = _REDUCE_MODES[str.upper(self.mode)]
    x = inputs[0]
    if len(inputs) == 2:  # reduce to the target shape given as a tensor
        target = _ints(inputs[1])
        shape = tuple(x.shape)
        if len(target) != len(shape):
            raise ValueError(f"Reduce: target shape {target} has another rank than {shape}")
        axes = tuple(i for i, (s, t) in enumerate(zip(shape, target)) if s != t)
        if any(target[i] != 1 for i in axes):
            raise ValueError(f"Reduce: cannot reduce {shape} to {target}")
        return _apply(_ops.Reduce(mode, axes, True), x)
    axis = self.axis
    if axis is None or axis == INVALID_AXIS_REDUCE:
        return _apply(_ops.Reduce(mode, None, False), x)
    return _apply(_ops.Reduce(mode, int(axis), bool(self.keepdim)), x)


_op("Reduce", {"mode": _ReduceMode.SUM, "axis": INVALID_AXIS_REDUCE, "keepdim": True,
               "data_type": _ReduceDataType.DEFAULT},
    {"mode": _ReduceMode.convert, "data_type": _ReduceDataType.convert},
    "``Reduce(mode, axis, keepdim)``: without an axis, over every axis to a 0-d result; with a "
    "second input (a target shape), over the axes where the shapes differ.",
    Mode=_ReduceMode, DataType=_ReduceDataType, _apply=_reduce_apply)


def _arg_apply(cls):
    def run(self, inputs):
        return _apply(cls(int(self.axis), True), *inputs)
    return run


_op("Argmax", {"axis": 0}, doc="Index of the largest value along ``axis`` (kept as size 1).",
    _apply=_arg_apply(_ops.Argmax))
_op("Argmin", {"axis": 0}, doc="Index of the smallest value along ``axis`` (kept as size 1).",
    _apply=_arg_apply(_ops.Argmin))

_ArgsortOrder = _make_enum("Argsort.Order", ["ASCENDING", "DESCENDING"])
_op("Argsort", {"order": _ArgsortOrder.ASCENDING}, {"order": _ArgsortOrder.convert},
    "Sort along the last axis: ``(values, indices)``.", Order=_ArgsortOrder,
    _apply=_simple(lambda s, i: _ops.Argsort(str.upper(s.order) == "DESCENDING")))


def _cumsum_apply(self, inputs):
    (x,) = inputs
    axis = self.axis
    if axis == INVALID_AXIS_REDUCE:
        x = _F().flatten(x)
        axis = 0
    return _apply(_ops.CumSum(int(axis), bool(self.exclusive), bool(self.reverse)), x)


_op("Cumsum", {"axis": INVALID_AXIS_REDUCE, "exclusive": True, "reverse": False},
    doc="Cumulative sum along ``axis`` (all elements, flattened, without one).",
    _apply=_cumsum_apply)

_TopKMode = _make_enum("TopK.Mode", ["KTH_ONLY", "VALUE_IDX_NOSORT", "VALUE_IDX_SORTED"])


def _topk_apply(self, inputs):
    x, k = inputs
    k = int(_np(k).reshape(-1)[0])
    desc = k < 0  # MegEngine: a negative k asks for the largest values
    mode = str.upper(self.mode)
    op = _ops.TopK(abs(k), desc, mode == "KTH_ONLY", mode == "VALUE_IDX_NOSORT")
    out = _apply(op, x)
    return out[:1] if mode == "KTH_ONLY" else out


_op("TopK", {"mode": _TopKMode.KTH_ONLY}, {"mode": _TopKMode.convert},
    "``(x, k)``: the k smallest values along the last axis (the largest for negative k).",
    Mode=_TopKMode, _apply=_topk_apply)

# -- matrix products -------------------------------------------------------------------------------
_ComputeMode = _make_enum("BatchedMatrixMul.ComputeMode", ["DEFAULT", "FLOAT32"])
_MatFormat = _make_enum("BatchedMatrixMul.Format", ["DEFAULT", "MK4", "MK8", "MK4_DOT", "N32K4_DOT"])
_MATMUL_PARAMS = {"transposeA": False, "transposeB": False, "compute_mode": _ComputeMode.DEFAULT,
                  "format": _MatFormat.DEFAULT, "strategy": _Strategy.HEURISTIC,
                  "workspace_limit": 2 ** 64 - 1, "dimA": 0, "dimB": 0}
_MATMUL_ENUMS = {"compute_mode": _ComputeMode.convert, "format": _MatFormat.convert,
                 "strategy": _Strategy}


def _matmul_apply(cls):
    def run(self, inputs):
        op = cls(self.transposeA, self.transposeB, str.lower(self.compute_mode))
        return _apply(op, *inputs)
    return run


_op("MatrixMul", _MATMUL_PARAMS, _MATMUL_ENUMS, "``A @ B`` of 2-d inputs.",
    ComputeMode=_ComputeMode, Format=_MatFormat, Strategy=_Strategy,
    _apply=_matmul_apply(_ops.MatrixMul))
_op("BatchedMatrixMul", _MATMUL_PARAMS, _MATMUL_ENUMS, "Batched ``A @ B``.",
    ComputeMode=_ComputeMode, Format=_MatFormat, Strategy=_Strategy,
    _apply=_matmul_apply(_ops.BatchedMatrixMul))
_op("Dot", {}, doc="Inner product of two vectors.", _apply=_simple(lambda s, i: _ops.Dot()))
_op("MatrixInverse", {}, doc="Inverse of each square matrix.",
    _apply=_simple(lambda s, i: _ops.MatInv()))
_op("SVD", {"full_matrices": False, "compute_uv": True}, doc="Singular value decomposition.",
    _apply=_simple(lambda s, i: _ops.SVD(bool(s.full_matrices), bool(s.compute_uv))))

# -- convolution -----------------------------------------------------------------------------------
_ConvMode = _make_enum("Convolution.Mode", ["CROSS_CORRELATION", "CONVOLUTION"])
_ConvSparse = _make_enum("Convolution.Sparse", ["DENSE", "GROUP"])
_ConvFormat = _make_enum("Convolution.Format", ["NCHW", "NHWC", "NCHW4", "NCHW8", "NCHW32",
                                                "NCHW88", "NCHW44", "NCHW44_DOT", "NCHW4_NCHW",
                                                "NCHW4_NCHW32", "NCHW32_NCHW4", "NCHW64"])
_ConvComputeMode = _make_enum("Convolution.ComputeMode", ["DEFAULT", "FLOAT32"])
_CONV_PARAMS = {"mode": _ConvMode.CROSS_CORRELATION, "pad_h": 0, "pad_w": 0, "stride_h": 1,
                "stride_w": 1, "dilate_h": 1, "dilate_w": 1, "sparse": _ConvSparse.DENSE,
                "format": _ConvFormat.NCHW, "compute_mode": _ConvComputeMode.DEFAULT,
                "strategy": _Strategy.HEURISTIC, "workspace_limit": 2 ** 64 - 1}
_CONV_ENUMS = {"mode": _ConvMode.convert, "sparse": _ConvSparse.convert,
               "format": _ConvFormat.convert, "compute_mode": _ConvComputeMode.convert,
               "strategy": _Strategy}


def _conv_args(self, weight):
    if str.upper(self.format) != "NCHW":
        raise NotImplementedError(f"Convolution format {self.format}: mge computes NCHW only")
    groups = 1
    if str.upper(self.sparse) == "GROUP":
        groups = int(weight.shape[0])
        w = weight
        weight = _F().reshape(w, (w.shape[0] * w.shape[1],) + tuple(w.shape[2:]))
    if str.upper(self.mode) == "CONVOLUTION":  # a true convolution: the kernel flipped
        weight = weight[..., ::-1, ::-1]
    return weight, ((self.stride_h, self.stride_w), (self.pad_h, self.pad_w),
                    (self.dilate_h, self.dilate_w), groups, str.lower(self.compute_mode))


def _conv_apply(self, inputs):
    x, weight = inputs[:2]
    weight, args = _conv_args(self, weight)
    return _apply(_ops.Convolution(*args), x, weight)


def _deconv_apply(self, inputs):
    weight, dy = inputs[:2]
    weight, (s, p, d, g, cm) = _conv_args(self, weight)
    return _apply(_ops.ConvolutionBackwardData(s, p, d, g, (0, 0), cm), weight, dy)


_op("Convolution", _CONV_PARAMS, _CONV_ENUMS, "2-d convolution of ``(x, weight)`` (NCHW).",
    Mode=_ConvMode, Sparse=_ConvSparse, Format=_ConvFormat, ComputeMode=_ConvComputeMode,
    Strategy=_Strategy, _apply=_conv_apply)
_op("ConvolutionBackwardData", _CONV_PARAMS, _CONV_ENUMS,
    "Transposed 2-d convolution of ``(weight, dy)``.", Mode=_ConvMode, Sparse=_ConvSparse,
    Format=_ConvFormat, ComputeMode=_ConvComputeMode, Strategy=_Strategy, _apply=_deconv_apply)

# -- shapes ----------------------------------------------------------------------------------------


def _getvarshape_apply(self, inputs):
    (x,) = inputs
    shape = tuple(x.shape)
    if self.axis != INVALID_AXIS:
        shape = (shape[self.axis],)
    return (_tensor(np.array(shape, dtype=np.int32), device=x.device),)


_op("GetVarShape", {"axis": INVALID_AXIS},
    doc="The shape of the input as an int32 tensor (one entry with ``axis``).",
    _apply=_getvarshape_apply)


def _shape_param_or_input(self, inputs):
    if len(inputs) >= 2:
        return _ints(inputs[1])
    return tuple(int(s) for s in self.shape)


def _reshape_apply(self, inputs):
    return _apply(_ops.Reshape(_shape_param_or_input(self, inputs)), inputs[0])


def _broadcast_apply(self, inputs):
    return _apply(_ops.Broadcast(_shape_param_or_input(self, inputs)), inputs[0])


_op("Reshape", {"axis": INVALID_AXIS, "shape": []},
    doc="``(x, shape)`` or ``Reshape(shape=...)(x)``: same data, new shape.", _apply=_reshape_apply)
_op("Broadcast", {"shape": []}, doc="``(x, shape)`` or ``Broadcast(shape=...)(x)``: broadcast.",
    _apply=_broadcast_apply)


def _dimshuffle_apply(self, inputs):
    (x,) = inputs
    pattern = tuple("x" if p == -1 or p == "x" else int(p) for p in self.pattern)
    if "x" not in pattern:
        return _apply(_ops.Dimshuffle(pattern), x)
    perm = tuple(p for p in pattern if p != "x")
    y = _apply(_ops.Dimshuffle(perm), x)[0] if perm != tuple(range(len(perm))) else x
    new = tuple(i for i, p in enumerate(pattern) if p == "x")
    return _apply(_ops.AddAxis(new), y)


_op("Dimshuffle", {"pattern": [], "format": _ConvFormat.NCHW}, {"format": _ConvFormat.convert},
    "Permute axes by ``pattern`` (``-1`` entries add an axis).", _apply=_dimshuffle_apply)
_op("AddAxis", {"axis": []}, doc="Insert size-1 axes at ``axis``.",
    _apply=_simple(lambda s, i: _ops.AddAxis(tuple(int(a) for a in s.axis))))
_op("RemoveAxis", {"axis": []}, doc="Remove the size-1 axes ``axis``.",
    _apply=_simple(lambda s, i: _ops.RemoveAxis(tuple(int(a) for a in s.axis))))
_op("Concat", {"axis": 0, "comp_node": None}, doc="Join the inputs along ``axis``.",
    _apply=_simple(lambda s, i: _ops.Concat(int(s.axis))))
_op("Stack", {"axis": 0, "comp_node": None}, doc="Join the inputs along a new axis ``axis``.",
    _apply=_simple(lambda s, i: _ops.Stack(int(s.axis))))


def _split_apply(self, inputs):
    x = inputs[0]
    n = int(x.shape[self.axis])
    if self.nsections:
        k = int(self.nsections)
        sizes = [n // k + (1 if i < n % k else 0) for i in range(k)]
    else:
        sizes = [int(_np(t).reshape(-1)[0]) for t in inputs[1:]]
    return _apply(_ops.Split(int(self.axis), tuple(sizes)), x)


_op("Split", {"axis": 0, "nsections": 0},
    doc="Cut along ``axis`` into ``nsections`` parts, or parts of the sizes given as inputs.",
    _apply=_split_apply)
_op("CondTake", {}, doc="``(x, mask) -> (x[mask], indices)``.",
    _apply=lambda self, inputs: _apply(_ops.CondTake(), inputs[1], inputs[0]))
_op("Diag", {"k": 0}, doc="Diagonal matrix of a vector / diagonal of a matrix.",
    _apply=_simple(lambda s, i: _ops.Diag(int(s.k))))


def _fill_apply(self, inputs):
    shape = _ints(inputs[0]) if inputs else ()
    dtype = self.dtype if self.dtype is not None else np.dtype("float32")
    return (_F().full(shape, self.value, dtype=dtype, device=_device(self.comp_node)),)


_op("Fill", {"value": 0.0, "dtype": None, "comp_node": None}, {"dtype": _dtype},
    "``(shape) ->`` a tensor of ``value``.", _apply=_fill_apply)


def _linspace_apply(self, inputs):
    start, stop, num = (float(_np(t).reshape(-1)[0]) for t in inputs)
    return (_F().linspace(start, stop, int(num), device=_device(self.comp_node)),) if self.endpoint \
        else (_F().linspace(start, stop, int(num) + 1, device=_device(self.comp_node))[:-1],)


_op("Linspace", {"comp_node": None, "endpoint": True},
    doc="``(start, stop, num) ->`` evenly spaced values.", _apply=_linspace_apply)


def _eye_apply(self, inputs):
    shape = _ints(inputs[0])
    n, m = (shape + shape)[:2] if len(shape) == 1 else shape
    out = _F().eye(n, m, dtype=self.dtype, device=_device(self.comp_node))
    if self.k:
        out = _tensor(np.eye(n, m, k=int(self.k), dtype=self.dtype), device=out.device)
    return (out,)


_op("Eye", {"k": 0, "dtype": np.dtype("float32"), "comp_node": None}, {"dtype": _dtype},
    "``(shape) ->`` ones on diagonal ``k``.", _apply=_eye_apply)

# -- indexing --------------------------------------------------------------------------------------


def _index_of(items, tensors, scalar_idx):
    """The Python index of MegEngine's ``items`` ``(axis, begin, end, step, idx)`` whose present
    parts are read from ``tensors`` in order."""
    it = iter(tensors)
    ndim = max((int(i[0]) for i in items), default=-1) + 1
    index = [slice(None)] * ndim
    for axis, has_begin, has_end, has_step, has_idx in items:
        begin = int(_np(next(it)).reshape(-1)[0]) if has_begin else None
        end = int(_np(next(it)).reshape(-1)[0]) if has_end else None
        step = int(_np(next(it)).reshape(-1)[0]) if has_step else None
        if has_idx:
            v = next(it)
            if scalar_idx:
                index[int(axis)] = int(_np(v).reshape(-1)[0])
            else:
                index[int(axis)] = v
        else:
            index[int(axis)] = slice(begin, end, step)
    return tuple(index)


def _get_apply(scalar_idx):
    def run(self, inputs):
        x = inputs[0]
        return (x[_index_of(self.items, inputs[1:], scalar_idx)],)
    return run


def _set_apply(scalar_idx, incr):
    def run(self, inputs):
        x, value = inputs[:2]
        index = _index_of(self.items, inputs[2:], scalar_idx)
        out = _apply(_ops.Identity(), x)[0]
        if incr:
            value = out[index] + value
        out[index] = value
        return (out,)
    return run


for _name, _scalar, _kind in [
        ("Subtensor", True, None), ("SetSubtensor", True, "set"), ("IncrSubtensor", True, "incr"),
        ("IndexingMultiAxisVec", False, None), ("IndexingSetMultiAxisVec", False, "set"),
        ("IndexingIncrMultiAxisVec", False, "incr")]:
    _doc = (f"MegEngine's ``{_name}(items)``: ``items`` are ``(axis, begin, end, step, idx)`` flags; "
            "the indices present are the inputs after " + ("``x``" if _kind is None else
                                                           "``(x, value)``") + ", in order.")
    _op(_name, {"items": []}, doc=_doc,
        _apply=_get_apply(_scalar) if _kind is None else _set_apply(_scalar, _kind == "incr"))
del _name, _scalar, _kind, _doc



def _mesh_index_of(x, items, tensors, batched):
    """The index of MegEngine's mesh indexing on ``x``: every axis gets an index vector (a vector
    idx of ``items``, a slice's positions, or the whole axis), shaped to its own dimension, so
    that they broadcast to the mesh (outer product) in axis order.  ``batched``: axis 0 is the
    batch and each vector idx is ``(batch, k)``, one vector per batch entry."""
    it = iter(tensors)
    shape = x.shape
    ndim = len(shape)
    given = {}
    for axis, has_begin, has_end, has_step, has_idx in items:
        begin = int(_np(next(it)).reshape(-1)[0]) if has_begin else None
        end = int(_np(next(it)).reshape(-1)[0]) if has_end else None
        step = int(_np(next(it)).reshape(-1)[0]) if has_step else None
        given[int(axis)] = next(it) if has_idx else slice(begin, end, step)
    index = []
    for a in range(ndim):
        v = given.get(a, slice(None))
        lead = [1] * a
        tail = [1] * (ndim - a - 1)
        if isinstance(v, slice):
            v = _tensor(np.arange(shape[a], dtype=np.int32)[v].reshape(lead + [-1] + tail),
                        device=x.device)
        elif batched and a > 0:
            v = v.reshape([shape[0]] + [1] * (a - 1) + [-1] + tail)
        else:
            v = v.reshape(lead + [-1] + tail)
        index.append(v)
    return tuple(index)


def _mesh_get_apply(batched):
    def run(self, inputs):
        x = inputs[0]
        return (x[_mesh_index_of(x, self.items, inputs[1:], batched)],)
    return run


def _mesh_set_apply(batched, incr):
    def run(self, inputs):
        x, value = inputs[:2]
        index = _mesh_index_of(x, self.items, inputs[2:], batched)
        out = _apply(_ops.Identity(), x)[0]
        if incr:
            value = out[index] + value
        out[index] = value
        return (out,)
    return run


for _name, _batched, _kind in [
        ("MeshIndexing", False, None), ("SetMeshIndexing", False, "set"),
        ("IncrMeshIndexing", False, "incr"), ("BatchedMeshIndexing", True, None),
        ("BatchedSetMeshIndexing", True, "set"), ("BatchedIncrMeshIndexing", True, "incr")]:
    _doc = (f"MegEngine's ``{_name}(items)``: indexing where the vector indices of several axes "
            "combine as a mesh (outer product)" + (", per entry of the batch axis 0" if _batched
                                                   else "") + "; the index inputs follow "
            + ("``x``" if _kind is None else "``(x, value)``") + ".")
    _op(_name, {"items": []}, doc=_doc,
        _apply=_mesh_get_apply(_batched) if _kind is None else _mesh_set_apply(_batched,
                                                                                _kind == "incr"))
del _name, _batched, _kind, _doc

def _onehot_apply(self, inputs):
    x, index = inputs
    return _apply(_ops.IndexingOneHot(int(self.axis), True), x, index)


def _set_onehot_apply(self, inputs):
    return _apply(_ops.IndexingSetOneHot(int(self.axis)), *inputs)


_op("IndexingOneHot", {"axis": 0, "ndim": 0},
    doc="``(x, index)``: ``x`` at ``index`` along ``axis`` (kept as size 1).", _apply=_onehot_apply)
_op("IndexingSetOneHot", {"axis": 0, "ndim": 0},
    doc="``(x, index, value)``: ``x`` with ``value`` written at ``index`` along ``axis``.",
    _apply=_set_onehot_apply)

# -- nn --------------------------------------------------------------------------------------------
_op("Softmax", {"axis": -1}, doc="Softmax along ``axis``.",
    _apply=_simple(lambda s, i: _ops.Softmax(int(s.axis))))


def _nms_apply(self, inputs):
    boxes = inputs[0]
    F = _F()
    if not hasattr(F, "nms"):
        raise NotImplementedError("NMSKeep: mge.functional has no nms")
    b = boxes[0] if boxes.ndim == 3 else boxes
    import numpy as _n
    scores = _tensor(_n.arange(b.shape[0], 0, -1, dtype=_n.float32))
    return (F.nms(b, scores, float(self.iou_thresh), int(self.max_output)),)


_op("NMSKeep", {"iou_thresh": 0.0, "max_output": 0},
    doc="Non-maximum suppression of boxes sorted by score: the indices kept.", _apply=_nms_apply)


def _assert_equal_apply(self, inputs):
    expect, got = inputs[:2]
    a, b = _np(expect).astype(np.float64), _np(got).astype(np.float64)
    err = np.abs(a - b) / np.maximum(1, np.minimum(np.abs(a), np.abs(b)))
    if a.shape != b.shape or (err.size and err.max() > self.maxerr):
        raise AssertionError(f"AssertEqual: max error {err.max() if err.size else 'shape'} > "
                             f"{self.maxerr}")
    return (got,)


_op("AssertEqual", {"maxerr": 1e-4, "verbose": False},
    doc="``(expect, got) -> got``; raises ``AssertionError`` when they differ by more than "
        "``maxerr``.", _apply=_assert_equal_apply)


def _check_non_finite_apply(self, inputs):
    bad = any(not np.isfinite(_np(t)).all() for t in inputs)
    outs = [_m("mul", t, self.scale) for t in inputs]
    return tuple(outs) + (_tensor(np.array([int(bad)], dtype=np.int32)),)


_op("CheckNonFinite", {"scale": 1.0},
    doc="``(*xs) -> (*xs * scale, flag)``: ``flag`` is 1 if any input has a NaN or infinity.",
    _apply=_check_non_finite_apply)

# -- random ----------------------------------------------------------------------------------------


def _rng_seed(self):
    # mge's RNG ops carry the seed of their draw; a MegEngine op carries its handle's seed and
    # draws the next number of the handle's stream: take the next seed of that stream.
    return next_seed(int(self.handle))


def _uniform_apply(self, inputs):
    shape = _ints(inputs[0])
    dev = _device(None, inputs)
    return _apply(_ops.UniformRNG(_rng_seed(self), int(self.handle), np.dtype(self.dtype), shape,
                                  dev))


def _gaussian_apply(self, inputs):
    shape = _ints(inputs[0])
    dev = _device(None, inputs)
    return _apply(_ops.GaussianRNG(_rng_seed(self), int(self.handle), float(self.mean),
                                   float(self.std), np.dtype(self.dtype), shape, dev))


def _perm_apply(self, inputs):
    n = int(np.prod(_ints(inputs[0])))
    return _apply(_ops.PermutationRNG(_rng_seed(self), int(self.handle), n, np.dtype(self.dtype),
                                      _device(None, inputs)))


def _param_rng(cls):
    def run(self, inputs):
        return _apply(cls(_rng_seed(self), int(self.handle)), *inputs)
    return run


_op("UniformRNG", {"seed": 0, "dtype": np.dtype("float32"), "handle": 0}, {"dtype": _dtype},
    "``(shape) ->`` uniform samples in [0, 1).", _apply=_uniform_apply)
_op("GaussianRNG", {"seed": 0, "mean": 0.0, "std": 1.0, "dtype": np.dtype("float32"), "handle": 0},
    {"dtype": _dtype}, "``(shape) ->`` normal samples.", _apply=_gaussian_apply)
_op("GammaRNG", {"seed": 0, "handle": 0}, doc="``(shape, scale) ->`` gamma samples.",
    _apply=_param_rng(_ops.GammaRNG))
_op("BetaRNG", {"seed": 0, "handle": 0}, doc="``(alpha, beta) ->`` beta samples.",
    _apply=_param_rng(_ops.BetaRNG))
_op("PoissonRNG", {"seed": 0, "handle": 0}, doc="``(lam) ->`` Poisson samples.",
    _apply=_param_rng(_ops.PoissonRNG))
_op("PermutationRNG", {"seed": 0, "dtype": np.dtype("int32"), "handle": 0}, {"dtype": _dtype},
    "``(shape) ->`` a random permutation of ``0 .. n-1``.", _apply=_perm_apply)
_op("ShuffleRNG", {"seed": 0, "handle": 0}, doc="``(x) -> (x shuffled along axis 0, indices)``.",
    _apply=_param_rng(_ops.ShuffleRNG))


def _dropout_apply(self, inputs):
    (x,) = inputs
    return (_F().nn.dropout(x, float(self.drop_prob), training=True),
            _tensor(np.zeros(0, dtype=np.uint8)))


_op("Dropout", {"drop_prob": 0.0, "seed": 0, "handle": 0},
    doc="``(x) -> (x with elements zeroed with probability drop_prob, mask)``.",
    _apply=_dropout_apply)
def _lamb_apply(self, inputs):
    # MegEngine's fused step, computed by mge's LAMB in ordinary ops; ``step`` is the step being
    # taken (MegEngine's optimizer increments its count first)
    from ...optimizer.lamb import _lamb_step
    exp_avg, exp_avg_sq, param, grad = inputs
    taken = _tensor(np.asarray(float(self.step) - 1.0, dtype=exp_avg.dtype))
    new_param, new_avg, new_avg_sq, _ = _lamb_step(
        param, grad, exp_avg, exp_avg_sq, taken, lr=float(self.lr), beta0=float(self.beta_1),
        beta1=float(self.beta_2), eps=float(self.eps), weight_decay=float(self.weight_decay),
        bias_correction=bool(self.bias_correction), always_adapt=bool(self.always_adapt))
    return (new_avg, new_avg_sq, new_param)


_op("LAMBUpdate", {"beta_1": 1.0, "beta_2": 1.0, "step": 1.0, "lr": 1.0, "weight_decay": 1.0,
                   "eps": 1.0, "bias_correction": True, "always_adapt": False},
    doc="MegEngine's fused LAMB update: ``(exp_avg, exp_avg_sq, param, grad) -> (new exp_avg, "
        "new exp_avg_sq, new param)`` for the step ``step``, computed as mge's "
        "``optimizer.LAMB`` computes it.", _apply=_lamb_apply)
_op("ElemwiseMultiType", {"mode": "", "dtype": None},
    doc="MegEngine's quantized elementwise op (its ``q*`` modes: ``qadd``, ``qmul``...), as "
        "``mge.functional.quantized._elemwise_multi_type``.",
    _apply=lambda self, inputs: (_F().quantized._elemwise_multi_type(
        *inputs, mode=str(self.mode).lower(), dtype=self.dtype),))
_op("ParamPackConcat", {"offsets": []},
    doc="``(*xs, offsets) ->`` one flat tensor of the inputs, each at its offset.",
    _apply=lambda self, inputs: (_F().concat([_F().flatten(t) for t in inputs[:-1]]),))


def _param_pack_split_apply(self, inputs):
    (flat,) = inputs[:1]
    offs = list(self.offsets)
    out = []
    for i, shape in enumerate(self.shapes):
        begin, end = int(offs[2 * i]), int(offs[2 * i + 1])
        out.append(_F().reshape(flat[begin:end], tuple(int(s) for s in shape)))
    return tuple(out)


_op("ParamPackSplit", {"offsets": [], "shapes": []},
    doc="``(flat) ->`` the tensors of ``shapes`` at ``offsets`` (begin, end pairs).",
    _apply=_param_pack_split_apply)



# -- collective communication (mge.distributed) ----------------------------------------------------
_CollectiveMode = _make_enum("CollectiveComm.Mode", [
    "REDUCE_SUM", "BROADCAST", "ALL_GATHER", "REDUCE_SCATTER_SUM", "ALL_REDUCE_SUM",
    "ALL_REDUCE_MAX", "ALL_REDUCE_MIN", "ALL_REDUCE_PROD", "GATHER", "SCATTER", "ALL_TO_ALL"])


def _needs_mpi(what):
    from ...distributed.group import _needs_mpi as needs
    return needs(what)


def _collective_apply(self, inputs):
    # Every mode of a group of one rank gives that rank its own input (the sum, max, min or
    # product of one value; the gather, scatter or all-to-all of one part): a copy of the input
    # on ``comp_node``, whose backward rule (a copy back) is the collective's one-rank gradient.
    (x,) = inputs
    if int(self.nr_devices) > 1:
        raise _needs_mpi(f"CollectiveComm({self.mode}) over {int(self.nr_devices)} ranks")
    return _apply(_ops.Copy(_device(self.comp_node, inputs)), x)


_op("CollectiveComm", {"key": "", "nr_devices": 0, "rank": 0, "is_root": False,
                       "local_grad": False, "addr": "", "port": 0,
                       "mode": _CollectiveMode.REDUCE_SUM, "dtype": None, "backend": "",
                       "comp_node": ""},
    {"mode": _CollectiveMode.convert, "dtype": _dtype},
    "MegEngine's collective op over the ``nr_devices`` ranks of a group (``CollectiveComm.Mode``); "
    "mge runs groups of one rank (more need issue 15's MPI transport).",
    Mode=_CollectiveMode, _apply=_collective_apply)


def _remote_apply(self, inputs):
    raise _needs_mpi(f"{type(self).__name__} (a tensor sent between two processes)")


_op("RemoteSend", {"key": "", "addr": "", "port": 0, "rank_to": 0, "backend": ""},
    doc="MegEngine's send of a tensor to process ``rank_to``: needs issue 15's MPI transport.",
    _apply=_remote_apply)
_op("RemoteRecv", {"key": "", "addr": "", "port": 0, "rank_from": 0, "cn": "invalid",
                   "shape": [], "dtype": None, "backend": ""}, {"dtype": _dtype},
    doc="MegEngine's receive of a tensor from process ``rank_from``: needs issue 15's MPI "
        "transport.", _apply=_remote_apply)


def _barrier_apply(self, inputs):
    # mge's channel runs the ops of every device and stream in the order they were issued, so
    # whatever was issued before the barrier has run when anything after it runs: recording an
    # event is passing the tensor on, waiting for one has nothing to wait for.
    if int(self.nr_outputs) == 0:
        return ()
    return tuple(_apply(_ops.Identity(), x)[0] for x in inputs[:int(self.nr_outputs)])


_op("Barrier", {"comp_node": None, "nr_outputs": 0},
    doc="MegEngine's stream barrier (``mge._multistream``): with ``nr_outputs`` 1 it records an "
        "event (its output), with 0 it waits for one.  mge's channel keeps issue order across "
        "devices, so it orders nothing further.", _apply=_barrier_apply)


# -- the rest of MegEngine's op classes ------------------------------------------------------------
# Their parameters are generated from MegEngine's param definitions (``_builtin_params.py``).  The
# ones below with an ``_apply`` run over mge.functional; the others raise NotImplementedError naming
# the op when applied (the class exists so that code building or inspecting them imports).


def _nchw_only(self):
    fmt = self._values.get("format")
    if fmt is not None and str.upper(fmt) != "NCHW":
        raise NotImplementedError(f"{type(self).__name__} format {fmt}: mge computes NCHW only")


def _pooling_apply(self, inputs):
    _nchw_only(self)
    (x,) = inputs[:1]
    kw = dict(kernel_size=(int(self.window_h), int(self.window_w)),
              stride=(int(self.stride_h), int(self.stride_w)),
              padding=(int(self.pad_h), int(self.pad_w)))
    if str.upper(self.mode) == "MAX":
        return (_F().max_pool2d(x, **kw),)
    mode = "average" if str.upper(self.mode) == "AVERAGE" else "average_count_exclude_padding"
    return (_F().avg_pool2d(x, mode=mode, **kw),)


def _adaptive_pooling_apply(self, inputs):
    _nchw_only(self)
    x = inputs[0]
    shape = _ints(inputs[1]) if len(inputs) > 1 else tuple(int(v) for v in self.shape)
    if str.upper(self.mode) == "MAX":
        return (_F().adaptive_max_pool2d(x, shape),)
    if str.upper(self.mode) == "AVERAGE_COUNT_EXCLUDE_PADDING":
        raise NotImplementedError("AdaptivePooling mode AVERAGE_COUNT_EXCLUDE_PADDING has no "
                                  "kernel in mge")
    return (_F().adaptive_avg_pool2d(x, shape),)


_NONLINE = {"IDENTITY": None, "RELU": "relu", "SIGMOID": "sigmoid", "H_SWISH": "hswish"}


def _conv_bias_apply(self, inputs):
    if len(inputs) > 3:
        raise NotImplementedError("ConvBias with a residual input z: not supported by mge")
    x, weight = inputs[:2]
    weight, (stride, pad, dil, groups, cm) = _conv_args(self, weight)
    y = _apply(_ops.Convolution(stride, pad, dil, groups, cm), x, weight)[0]
    if len(inputs) > 2:
        y = _m("add", y, inputs[2])
    act = _NONLINE[str.upper(self.nonlineMode)]
    if act is not None:
        y = getattr(_F(), act)(y)
    if self.dtype is not None:
        y = y.astype(self.dtype)
    return (y,)


def _pixel_shuffle_apply(self, inputs):
    return (_F().pixel_shuffle(inputs[0], int(self.factor)),)


def _masked_fill_apply(self, inputs):
    x, mask = inputs[:2]
    fill = _F().full_like(x, self.value)
    return (_F().where(mask.astype("bool") if mask.dtype != np.bool_ else mask, fill, x),)


def _fill_like_apply(self, inputs):
    (x,) = inputs[:1]
    y = _F().full_like(x, self.value)
    if self.comp_node is not None:
        y = _apply(_ops.Copy(_device(self.comp_node, inputs)), y)[0]
    return (y,)


_GENERATED_APPLY = {"Pooling": _pooling_apply, "AdaptivePooling": _adaptive_pooling_apply,
                    "ConvBias": _conv_bias_apply, "PixelShuffle": _pixel_shuffle_apply,
                    "MaskedFill": _masked_fill_apply, "FillLike": _fill_like_apply}


def _generated_op(name, fields):
    params, enums, attrs = {}, {}, {}
    for field, default, enum in fields:
        if isinstance(default, tuple) and default[0] == "strategy":
            default = _Strategy(default[1])
            enums[field] = _Strategy
            attrs["Strategy"] = _Strategy
        elif isinstance(default, tuple) and default[0] == "dtype":
            default = np.dtype(default[1])
            enums[field] = _dtype
        elif field == "dtype":
            enums[field] = _dtype
        if enum is not None:
            ename, members = enum
            cls = attrs.get(ename) or _make_enum(f"{name}.{ename}", list(members))
            attrs[ename] = cls
            default = cls.convert(default)
            enums[field] = cls.convert
        params[field] = default
    run = _GENERATED_APPLY.get(name)
    if run is not None:
        attrs["_apply"] = run
        doc = f"MegEngine's ``{name}`` op (run over mge.functional)."
    else:
        doc = (f"MegEngine's ``{name}`` op.  mge has no kernel for it: applying it raises "
               "``NotImplementedError``.")
    _op(name, params, enums, doc, **attrs)


def _define_generated():
    from ._builtin_params import OP_PARAMS
    for name, fields in OP_PARAMS.items():
        if name not in globals():
            _generated_op(name, fields)


_define_generated()

#: MegEngine's ``OpDef``: the base class of every op class (mge's :class:`BuiltinOp`)
OpDef = BuiltinOp
__all__.append("OpDef")


class PyOpBase(BuiltinOp):
    """MegEngine's base of ops written in Python (``PyOp``).  mge has no Python-op hook into
    its runtime: subclass it to keep such code importable; applying one raises
    ``NotImplementedError``."""

    def _apply(self, inputs):
        raise NotImplementedError(f"{type(self).__name__}: mge does not run Python ops "
                                  "(PyOpBase) through apply")


__all__.append("PyOpBase")


def backup_keys():
    """MegEngine's list of the keys of its op classes saved for a reload of the op module (it
    rebinds them after ``importlib.reload``); mge's op classes are plain Python, so this is the
    names of this module's op classes."""
    return [n for n in __all__ if isinstance(globals().get(n), type)
            and issubclass(globals()[n], BuiltinOp)]


__all__.append("backup_keys")


def apply(op, *inputs):
    """Apply ``op`` (a class of this module or an mge op) to ``inputs``: a tuple of tensors."""
    if isinstance(op, BuiltinOp):
        return tuple(op._apply(list(inputs)))
    return _apply(op, *inputs)


__all__.append("apply")
