"""``apply(op, *inputs)``: the single entry of every op (compiled; see ``_accel``).

``apply`` turns Python numbers and numpy arrays among the inputs into tensors (dtype from
MegEngine's promotion rule for mixed arguments, device from the tensor inputs), then sends the op
down the transformation stack.  The bottom layer, ``eval``, hands it to the channel and wraps the
resulting handles in new ``Tensor`` objects.
"""
import cython
import numpy as np

from . import _accel
from .channel import get_channel
from .device import as_device
from .device.registry import on_kind_replaced
from .dtype import promote_args, scalar_dtype
from .ops.assign import Assign
from .ops.misc import Identity
_t = _accel.load("mge._core.transformation")
Stack, Transformation = _t.Stack, _t.Transformation

_accel.guard(__name__)
if cython.compiled:  # (a new Tensor per output of every op: made and filled in C)
    from cython.cimports.mge._core.cpython_new import new_instance, set_slot, slot_offset

__all__ = ["apply", "apply_tuple", "set_top_hook", "TopHook", "stack", "set_tensor_type", "EvalTransformation", "const", "convert_inputs", "set_graph_hook"]

_Tensor = None          # set by tensor.py (the Tensor class); avoids an import cycle
_channel = get_channel()
_consts = {}  # (type, value, dtype, device) -> Tensor: Python scalars become cached consts
on_kind_replaced(lambda kind: _consts.clear())  # (a kind registered again: new devices)
_scalar_dtypes = {}  # (tensor dtype, number type) -> scalar_dtype's answer (found once)
_NUMBERS = (float, int, bool)


_INFO = cython.declare(cython.Py_ssize_t, -1)  # compiled: the offset of Tensor's _info slot


def set_tensor_type(cls):
    global _Tensor, _INFO
    _Tensor = cls
    if cython.compiled:
        _INFO = slot_offset(cls.__dict__["_info"])


class EvalTransformation(Transformation):
    """The bottom of the stack: executes the op on the channel."""

    name = "eval"

    def apply(self, op, inputs, next=None):
        return _eval(op, inputs)


def _eval(op, inputs):
    if type(op) is _Assign:
        return _assign(inputs)
    infos = _channel.apply_op(op, [t._info for t in inputs])
    cls = _Tensor
    if cython.compiled:
        if len(infos) == 1:  # (most ops)
            t = new_instance(cls)
            set_slot(t, _INFO, infos[0])
            return (t,)
        out = []
        for info in infos:
            t = new_instance(cls)
            set_slot(t, _INFO, info)
            out.append(t)
        return tuple(out)
    new = cls.__new__
    out = []
    for info in infos:
        t = new(cls)
        t._info = info
        out.append(t)
    return tuple(out)


_Assign = Assign
_IDENTITY = Identity()


def _assign(inputs):
    # ``Assign(target, value)`` (ops/assign.py): the target takes value's value (shared, as
    # Identity shares it); the output holds the target's old value.
    target, value = inputs
    old = target._info
    target._info = _channel.apply_op(_IDENTITY, [value._info])[0]
    t = _Tensor.__new__(_Tensor)
    t._info = old
    return (t,)


stack = Stack(_eval, EvalTransformation())
_chains = stack.chains


@cython.cclass
class TopHook:
    """A hook for ``apply``'s top-level calls (``set_top_hook``) whose ``top`` a compiled
    ``apply`` calls as a C method: the replay's ``Match`` (``mge_plugins.trace_match``) is one,
    and it answers every op of a replayed call.  Any object with a ``top(op, inputs)`` method may
    be a hook; this class only saves the bound-method call."""

    @cython.ccall
    def top(self, op, inputs: tuple):
        """Answer ``apply(op, *inputs)``: a tuple of tensors."""
        raise NotImplementedError(f"{type(self).__name__}.top: a TopHook must define top()")


_top = None  # a running jit.trace's hook for top-level calls (set_top_hook), or None
_top_call = None  # its bound ``top`` method (looked up once, not per op)
_top_hook = cython.declare(TopHook, None)  # the TopHook behind _top_call, when it is one
if cython.compiled:  # (its door methods are C calls)
    from cython.cimports.mge._core.profile_recorder_c import Recorder as _Recorder
else:
    _Recorder = object
_prof = cython.declare(_Recorder, None)  # the running profiler's Recorder (mge/_core/profiler.py)


def _set_profiler(rec):
    global _prof
    _prof = rec


def apply(op, *inputs):
    """Apply ``op`` to ``inputs`` through the transformation stack; returns a tuple of tensors."""
    if _prof is not None:  # profiler: the op as a dispatch span (the only check when idle)
        return _apply_profiled(op, inputs)
    if _top_hook is not None:
        return _top_hook.top(op, inputs)
    if _top_call is not None:
        return _top_call(op, inputs)
    return _through_stack(op, inputs)


@cython.cfunc
def _apply_profiled(op, inputs):
    # apply's body inside the profiler's dispatch span
    rec = _prof
    rec.enter_dispatch(op)
    try:
        if _top_hook is not None:
            return _top_hook.top(op, inputs)
        if _top_call is not None:
            return _top_call(op, inputs)
        return _through_stack(op, inputs)
    finally:
        rec.exit_dispatch()


def apply_tuple(op, inputs):
    """``apply(op, *inputs)`` without the top-level hook (the hook's own way down)."""
    return _through_stack(op, inputs)


def set_top_hook(hook):
    """Install ``hook`` (``hook.top(op, inputs)`` answers every top-level ``apply``) or remove
    it (``None``); returns the previous one.  ``mge.jit.trace`` uses it to record which ops
    each call of the user's code issued, and to replay whole calls without the stack."""
    global _top, _top_call, _top_hook
    prev = _top
    _top = hook
    _top_call = hook.top if hook is not None else None
    # (a hook may lend another object's top: the Replayer lends its Match's)
    owner = getattr(_top_call, "__self__", None)
    is_top = getattr(_top_call, "__name__", None) == "top"
    _top_hook = owner if is_top and isinstance(owner, TopHook) else None
    return prev


@cython.cfunc
def _through_stack(op, inputs):
    cls = _Tensor
    for x in inputs:
        if not isinstance(x, cls):
            if _graph_var is not None and _has_graph_var(inputs):
                return _graph_apply(op, inputs)
            inputs = _convert(inputs, op)
            break
    try:
        chain = _chains[type(op)]
    except KeyError:
        chain = stack.chain_for(type(op))
    return chain(op, inputs)


_graph_var = None    # the VarNode class of mge.core.tensor.megbrain_graph, once imported
_graph_apply = None  # its op-building function: (op, inputs) -> tuple of VarNodes


def set_graph_hook(var_type, graph_apply):
    """Send every ``apply`` with an input of type ``var_type`` to ``graph_apply(op, inputs)``
    instead of the stack (``None, None``: no more).  MegBrain-style graph building
    (``mge.core.tensor.megbrain_graph``) uses it: an op on ``VarNode`` objects adds a node to
    their graph rather than running.  Checked only when an input is not a ``Tensor``, so it
    costs tensors' ops nothing."""
    global _graph_var, _graph_apply
    _graph_var, _graph_apply = var_type, graph_apply


def _has_graph_var(inputs):
    for x in inputs:
        if isinstance(x, _graph_var):
            return True
    return False


def convert_inputs(inputs, op=None):
    """``inputs`` as a tuple of tensors: Python numbers and arrays converted as ``apply`` does."""
    cls = _Tensor
    for x in inputs:
        if not isinstance(x, cls):
            return _convert(tuple(inputs), op)
    return tuple(inputs)


def _scalar_dtype(dtype, value):
    key = (dtype, type(value))
    try:
        return _scalar_dtypes[key]
    except KeyError:
        d = _scalar_dtypes[key] = scalar_dtype(dtype, value)
        return d


def _convert(inputs, op=None):
    # An operand no tensor can hold (a string, a complex number, None, longdouble data) is the
    # TypeError of promote_args, naming the op: refused here, at the call.
    cls = _Tensor
    if len(inputs) == 2:  # the common ``tensor <op> number`` forms
        a, b = inputs
        if isinstance(a, cls) and type(b) in _NUMBERS:
            info = a._info
            return a, const(b, _scalar_dtype(info.dtype, b), info.device)
        if isinstance(b, cls) and type(a) in _NUMBERS:
            info = b._info
            return const(a, _scalar_dtype(info.dtype, a), info.device), b
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
    dtype = promote_args(dtypes, others, "apply" if op is None else op.name)
    if device is None:
        device = as_device(None)
    return tuple(x if isinstance(x, cls) else const(x, dtype, device) for x in inputs)


def const(value, dtype, device):
    """A tensor for a Python number or array argument; numbers are cached, arrays copied."""
    if type(value) in _NUMBERS:
        key = (type(value), value, dtype, device)
        try:
            return _consts[key]
        except KeyError:
            pass
        t = _wrap(_channel.put(np.array(value, dtype=dtype), device))
        if value == 0 and type(value) is float:
            return t  # 0.0 and -0.0 are equal keys: do not cache either
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
