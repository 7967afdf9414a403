"""dtype_promote's rules: MegEngine's dtype rules for mixed inputs, and AMP autocast (compiled).

A hot module (see ``mge._core._accel``): every elementwise op walks through
``_elemwise_rule``, so it is compiled; ``mge_plugins.dtype_promote`` is the entry point that
loads it.

* Elementwise ops on tensors of different dtypes compute in their common dtype (int32 with float16
  gives float32, float16 with float32 gives float32); ``where``'s branches meet in MegEngine's
  ``dtype_promotion`` (int32 with float16 gives float16).
* Modes that only make sense on floats (``true_div``, ``exp``, ``sigmoid``...) turn integer inputs
  into float32: ``int / int`` is float32 in MegEngine.
* Under ``mge.amp.autocast`` (``mge.amp.enabled``), matrix products and convolutions run in
  ``amp.low_prec_dtype`` (float16) and ops that need range (layer normalisation, softmax,
  reductions) in ``amp.high_prec_dtype``; batch normalisation takes its data in low precision and
  its parameters and statistics in high precision, as MegEngine's ``batch_norm_rule``.
"""
import cython
import numpy as np

from mge._core import _accel
from mge._core import ops
from mge._core.dtype import common_dtype, is_bfloat16, where_dtype
from mge._core.ops import Elemwise, TypeCvt
from mge._core.ops import elemwise as _elemwise
from mge.core import Transformation

_accel.guard(__name__)
if cython.compiled:  # read the dtype as a C field
    from cython.cimports.mge._core.channel.handles_c import TensorInfo
else:
    TensorInfo = _accel.load("mge._core.channel.handles").TensorInfo

# Modes that compute in float even on integer inputs (MegEngine: int ** int is float32 too).
_FLOAT_ONLY = _elemwise._FLOAT_ONLY | {"pow"}
_float32 = np.dtype("float32")
_FLOATS = frozenset(np.dtype(c) for c in np.typecodes["Float"])  # the dtypes of kind "f"
_cvt = {}


def _cast(next, x, dtype):
    op = _cvt.get(dtype)
    if op is None:
        op = _cvt[dtype] = TypeCvt(dtype)
    return next(op, (x,))[0]


def _promote(next, inputs, dtype):
    return tuple(x if x.dtype == dtype else _cast(next, x, dtype) for x in inputs)


def _elemwise_rule(op, inputs, next):
    # The common case first, cheaply: every input has one dtype (numpy's builtin dtypes are
    # singletons, so ``is`` decides it without a rich comparison).
    info: TensorInfo = inputs[0]._info
    d0 = info.dtype
    same: cython.bint = True
    for x in inputs:
        info = x._info
        if info.dtype is not d0 and info.dtype != d0:
            same = False
            break
    if same:
        if d0 not in _FLOATS and op.mode in _FLOAT_ONLY and not is_bfloat16(d0):
            return next(op, _promote(next, inputs, _float32))
        return next(op, inputs)
    dtype = common_dtype([x.dtype for x in inputs])
    if dtype.kind != "f" and op.mode in _FLOAT_ONLY and not is_bfloat16(dtype):
        dtype = _float32
    return next(op, _promote(next, inputs, dtype))


def _all_inputs_to(dtype_of):
    def rule(op, inputs, next):
        dtype = dtype_of(inputs)
        if dtype is None:
            return next(op, inputs)
        return next(op, _promote(next, inputs, dtype))
    return rule


def _common(inputs):
    dtypes = [x.dtype for x in inputs]
    if all(d == dtypes[0] for d in dtypes):
        return None
    return common_dtype(dtypes)


class AmpState:
    """AMP autocast settings; ``mge.amp`` sets them through the plugin registry."""

    def __init__(self):
        self.autocast = False  # MegEngine's _set_amp_dtype_autocast: convert inputs under AMP
        self.low_prec_dtype = np.dtype("float16")
        self.high_prec_dtype = np.dtype("float32")


amp = AmpState()


def _autocast_low(inputs):
    # Float inputs of matmul/conv run in low precision under autocast, else in their common dtype.
    if amp.autocast and all(x.dtype.kind == "f" for x in inputs):
        return amp.low_prec_dtype
    return _common(inputs)


def _autocast_high(inputs):
    # Outside autocast these ops keep their inputs: the kernels take parameters (running stats,
    # weights) of another float dtype than the data and answer in the data's dtype.
    if amp.autocast and any(x.dtype.kind == "f" for x in inputs):
        return amp.high_prec_dtype
    return None


def _batch_norm_rule(op, inputs, next):
    # MegEngine's batch_norm_rule: under autocast the data runs in low precision and the
    # parameters and statistics in high precision (the output is low precision)
    if not amp.autocast:
        return next(op, inputs)
    low, high = amp.low_prec_dtype, amp.high_prec_dtype
    return next(op, tuple(x if x.dtype == (low if i == 0 else high)
                          else _cast(next, x, low if i == 0 else high)
                          for i, x in enumerate(inputs)))


def _rules():
    rules = {Elemwise: _elemwise_rule}
    for name in ("MatrixMul", "BatchedMatrixMul", "Convolution", "ConvolutionBackwardData", "Linear"):
        cls = getattr(ops, name, None)
        if cls is not None:
            rules[cls] = _all_inputs_to(_autocast_low)
    if hasattr(ops, "BatchNorm"):
        rules[ops.BatchNorm] = _batch_norm_rule
    for name in ("LayerNorm", "Softmax", "LogSoftmax"):
        cls = getattr(ops, name, None)
        if cls is not None:
            rules[cls] = _all_inputs_to(_autocast_high)
    for name in ("Concat", "Stack", "Dot"):
        cls = getattr(ops, name, None)
        if cls is not None:
            rules[cls] = _all_inputs_to(_common)
    if hasattr(ops, "Where"):
        rules[ops.Where] = _where_rule
    return rules


def _where_rule(op, inputs, next):
    # The mask stays bool; the two branches meet in where's own dtype rule (not the elementwise one).
    mask, x, y = inputs
    if x.dtype == y.dtype:
        return next(op, inputs)
    dtype = where_dtype([x.dtype, y.dtype])
    return next(op, (mask,) + _promote(next, (x, y), dtype))


class DTypePromoteTransformation(Transformation):
    """Brings the inputs of an op to the dtype MegEngine computes it in."""

    name = "dtype_promote"
    amp = amp

    def __init__(self):
        self.rules = _rules()

    def apply(self, op, inputs, next):
        return self.rules[type(op)](op, inputs, next)
