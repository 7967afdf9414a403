"""``apply(op, *inputs)``: the single entry of every op (compiled; see ``_accel``).

``apply`` turns Python numbers and numpy arrays among the inputs into tensors (dtype from
MegEngine's promotion rule for mixed arguments, device from the tensor inputs), then sends the op
down the transformation stack.  The bottom layer, ``eval``, hands it to the channel and wraps the
resulting handles in new ``Tensor`` objects.
"""
import numpy as np

from .channel import get_channel
from .device import as_device
from .dtype import promote_args
from .transformation import Stack, Transformation

__all__ = ["apply", "stack", "set_tensor_type", "EvalTransformation", "const"]

_Tensor = None          # set by tensor.py (the Tensor class); avoids an import cycle
_channel = get_channel()
_consts = {}            # (type, value, dtype, device) -> Tensor: Python scalars become cached consts


def set_tensor_type(cls):
    global _Tensor
    _Tensor = cls


class EvalTransformation(Transformation):
    """The bottom of the stack: executes the op on the channel."""

    name = "eval"

    def apply(self, op, inputs, next=None):
        return _eval(op, inputs)


def _eval(op, inputs):
    infos = _channel.apply_op(op, [t._info for t in inputs])
    new = _Tensor.__new__
    cls = _Tensor
    out = []
    for info in infos:
        t = new(cls)
        t._info = info
        out.append(t)
    return tuple(out)


stack = Stack(_eval, EvalTransformation())
_chains = stack.chains


def apply(op, *inputs):
    """Apply ``op`` to ``inputs`` through the transformation stack; returns a tuple of tensors."""
    cls = _Tensor
    for x in inputs:
        if not isinstance(x, cls):
            inputs = _convert(inputs)
            break
    try:
        chain = _chains[type(op)]
    except KeyError:
        chain = stack.chain_for(type(op))
    return chain(op, inputs)


def _convert(inputs):
    cls = _Tensor
    dtypes = []
    others = []
    device = None
    for x in inputs:
        if isinstance(x, cls):
            dtypes.append(x._info.dtype)
            if device is None:
                device = x._info.device
        else:
            others.append(x)
    dtype = promote_args(dtypes, others)
    if device is None:
        device = as_device(None)
    return tuple(x if isinstance(x, cls) else const(x, dtype, device) for x in inputs)


def const(value, dtype, device):
    """A tensor for a Python number or array argument; numbers are cached, arrays copied."""
    if isinstance(value, (int, float, bool)):
        key = (type(value), value, dtype, device)
        try:
            return _consts[key]
        except KeyError:
            pass
        t = _wrap(_channel.put(np.array(value, dtype=dtype), device))
        if len(_consts) > 1024:
            _consts.clear()
        _consts[key] = t
        return t
    if isinstance(value, _Tensor):
        return value
    try:
        arr = np.array(value, dtype=dtype)
    except (TypeError, ValueError) as e:
        raise TypeError(f"apply: cannot convert {type(value).__name__} to a tensor of {dtype}: {e}") from None
    return _wrap(_channel.put(arr, device))


def _wrap(info):
    t = _Tensor.__new__(_Tensor)
    t._info = info
    return t
