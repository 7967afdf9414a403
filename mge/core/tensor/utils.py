"""``mge.core.tensor.utils``: MegEngine's helpers for building tensors and small op graphs.

``subgraph_fn`` and ``subgraph`` run the op graph a function describes.  MegEngine can compile such
a graph into one fused op with MegBrain; mge interprets it (the ops run one by one through
``apply``, so grad and trace see them), and a ``custom_grad`` graph becomes an
``mge.autodiff.Function`` whose backward runs the gradient part of the graph.
"""
import itertools
from collections.abc import Iterable

import numpy as np

from ...tensor import Tensor
from .. import _trace_option
from .._imperative_rt.core2 import (  # noqa: F401
    Const, _get_convert_inputs, _set_convert_inputs, get_device, make_shape_tuple,
)
from ..ops import builtin
from ..ops.builtin import apply
from .dtype import is_dtype_equal, is_quantize  # noqa: F401

__all__ = [
    "get_convert_inputs", "set_convert_inputs", "convert_single_value", "convert_inputs",
    "cast_tensors", "result_type", "isscalar", "setscalar", "astensor1d", "astype",
    "make_shape_tuple", "subgraph", "subgraph_fn", "interpret_subgraph", "Function", "as_device",
    "make_const",
]

from ..autodiff.grad import Function  # noqa: E402


def as_device(obj):
    """``obj`` (a device name, ``CompNode`` or device; ``None``: the default) as mge's device."""
    from ..._core.device import as_device as _as_device
    return _as_device(obj)


def make_const(*args, **kwargs):
    """MegBrain's constant var of a computing graph: mge has no computing graph, so this raises
    ``NotImplementedError`` (use ``Tensor(value, is_const=True)``)."""
    raise NotImplementedError("make_const builds a var of MegBrain's computing graph, which mge "
                              "does not have; use Tensor(value, is_const=True)")


def get_convert_inputs():
    """Whether ``convert_inputs`` converts (MegEngine's switch; mge always converts)."""
    return _get_convert_inputs()


def set_convert_inputs(flag):
    """Set the ``convert_inputs`` switch; returns the previous value."""
    return _set_convert_inputs(flag)


def convert_single_value(v, *, dtype=None, device=None):
    """``v`` as a tensor of ``dtype`` on ``device`` (a tensor is cast/copied as needed)."""
    if isinstance(v, Tensor):
        if dtype is not None and not is_dtype_equal(v.dtype, dtype):
            v = v.astype(dtype)
        if device is not None and v.device != device:
            v = v.to(device)
        return v
    return Tensor(v, dtype=dtype, device=device)


def convert_inputs(*args, device=None):
    """Turn the non-tensor values among ``args`` into tensors of the tensors' common dtype, on the
    tensors' device (or ``device``)."""
    if not get_convert_inputs():
        return args
    tensors = [a for a in args if isinstance(a, Tensor)]
    dtype = result_type(*args) if tensors else None
    if device is None:
        device = get_device(*args)
    return tuple(a if isinstance(a, Tensor) else
                 convert_single_value(a, dtype=dtype, device=device) for a in args)


def cast_tensors(*args, promote=False):
    """Cast the tensors among ``args`` to AMP's high (``promote``) or low precision dtype."""
    from ...amp import autocast as _autocast
    dtype = _autocast._get_amp_high_prec_dtype() if promote else _autocast._get_amp_low_prec_dtype()
    return tuple(a.astype(dtype) if a is not None else None for a in args)


def result_type(*args):
    """numpy's result type of the tensors' dtypes and the other dtype-like arguments."""
    dtypes = []
    for a in args:
        if isinstance(a, Tensor):
            dtypes.append(a.dtype)
            continue
        try:
            dtypes.append(np.dtype(a))
        except TypeError:
            pass
    return np.result_type(*dtypes)


def isscalar(x):
    """Whether ``x`` is a 0-d tensor or a numpy/Python scalar."""
    if isinstance(x, Tensor):
        return x._isscalar()
    return np.isscalar(x)


def setscalar(x):
    """Make the one-element tensor ``x`` 0-d, in place (MegEngine's scalar flag)."""
    if x.size != 1:
        raise ValueError(f"setscalar: tensor of shape {x.shape} has {x.size} elements, not 1")
    if x.shape != ():
        x._reset(x.reshape(()))
    return x


def astype(x, dtype):
    """``x`` converted to ``dtype`` (unchanged if it already has it)."""
    if not is_dtype_equal(x.dtype, dtype):
        x = x.astype(dtype)
    return x


def _graph_var(x):
    from ...functional.utils import _is_graph_var
    return _is_graph_var(x)


def _graph_tensor1d(x, ref, dtype, device):
    # astensor1d for graphs: constants of ref's graph, graph vars concatenated as they are
    from .megbrain_graph import _const_like
    items = list(x) if isinstance(x, (list, tuple)) else None
    if items is None or not any(_graph_var(v) or isinstance(v, Tensor) for v in items):
        return _const_like(ref, astensor1d(x, dtype=dtype, device=device))
    from ... import functional as F
    parts = []
    for v in items:
        if not _graph_var(v):
            v = _const_like(ref, convert_single_value(v, dtype=dtype, device=device))
        parts.append(v.reshape(1) if v.ndim == 0 else v)
    out = F.concat(parts)
    return out.astype(dtype) if dtype is not None else out


def astensor1d(x, *reference, dtype=None, device=None):
    """``x`` as a 1-d tensor: a sequence of numbers and/or one-element tensors, a numpy array, or
    a tensor (returned as it is).  ``reference`` tensors give the device when ``device`` is None."""
    if isinstance(x, Tensor) or _graph_var(x):
        return x
    graph_ref = next((r for r in reference if _graph_var(r)), None)
    if graph_ref is None and isinstance(x, (list, tuple)):
        graph_ref = next((v for v in x if _graph_var(v)), None)
    if graph_ref is not None:  # a var of a graph (megbrain_graph): a var of that graph
        return _graph_tensor1d(x, graph_ref, dtype, device or graph_ref.device)
    if device is None:
        device = get_device(*reference) if reference else None
    if isinstance(x, np.ndarray):
        if x.ndim > 1:
            raise ValueError(f"astensor1d: expected a 1-d array, got shape {x.shape}")
        return Tensor(x.reshape(-1), dtype=dtype, device=device)
    if not isinstance(x, Iterable):
        raise TypeError(f"astensor1d: expected a sequence, an array or a tensor, got {x!r}")
    items = list(x)
    if any(isinstance(v, Tensor) for v in items):
        from ... import functional as F
        parts = []
        for v in items:
            v = convert_single_value(v, dtype=dtype, device=device or get_device(*items))
            parts.append(v.reshape(1) if v.ndim == 0 else v)
        out = F.concat(parts)
        return out.astype(dtype) if dtype is not None else out
    return Tensor(np.array(items, dtype=dtype) if dtype is not None else np.array(items),
                  dtype=dtype, device=device)


def _normalize_axis(ndim, axis, reverse=False):
    def convert(a):
        orig = a
        if a < 0:
            a += ndim
        if not 0 <= a < ndim:
            raise AssertionError(f"axis {orig} is out of bounds for tensor of dimension {ndim}")
        return a

    if isinstance(axis, int):
        return convert(axis)
    if isinstance(axis, Iterable):
        out = sorted(map(convert, axis), reverse=reverse)
        if len(set(out)) != len(out):
            raise AssertionError(f"axis {axis} contains duplicated indices")
        return out
    raise TypeError(f"axis must be an int or a sequence of ints, got {axis!r}")


#: the string names of ops a subgraph function may use: ``(name, number of inputs) -> op``
_opr_map = {
    ("-", 1): builtin.Elemwise(mode="negate"),
    ("abs", 1): builtin.Elemwise(mode="abs"),
    ("exp", 1): builtin.Elemwise(mode="exp"),
    ("log1p", 1): builtin.Elemwise(mode="log1p"),
    ("relu", 1): builtin.Elemwise(mode="relu"),
    ("cond_leq_mov", 3): builtin.Elemwise(mode="cond_leq_mov"),
    ("fma3", 3): builtin.Elemwise(mode="FUSE_MUL_ADD3"),
    ("fma4", 4): builtin.Elemwise(mode="FUSE_MUL_ADD4"),
    ("[?:]", 2): builtin.Subtensor(items=[(0, True, False, False, False)]),
    ("[:?]", 2): builtin.Subtensor(items=[(0, False, True, False, False)]),
}
for _name, _mode in [("+", "add"), ("-", "sub"), ("*", "mul"), ("/", "true_div"),
                     ("//", "floor_div"), ("**", "pow"), ("max", "max"), ("min", "min"),
                     ("additive", "add"), ("exp", "EXP"), ("switch_gt0", "switch_gt0"),
                     ("abs_grad", "abs_grad")]:
    _opr_map[(_name, 2)] = builtin.Elemwise(mode=_mode)
del _name, _mode


def _as_op(op, nargs):
    if isinstance(op, str):
        if (op, nargs) not in _opr_map:
            raise ValueError(f"unknown operator {op!r} with {nargs} inputs")
        return _opr_map[(op, nargs)]
    return op


def _exprs(dtype, device):
    def apply_expr(op, *args, nr_out=None):
        results = apply(_as_op(op, len(args)), *args)
        if nr_out is None:
            if len(results) != 1:
                raise ValueError(f"{op} has {len(results)} outputs; pass nr_out")
            return results[0]
        if len(results) != nr_out:
            raise ValueError(f"{op} has {len(results)} outputs, not {nr_out}")
        return results

    def apply_const(value, dtype=dtype, device=device):
        return Const(value, dtype, device)

    return apply_expr, apply_const


def interpret_subgraph(func, dtype, device):
    """A function running ``func(inputs, apply_expr, apply_const)`` (which returns
    ``(outputs, outputs_has_grad)``) on tensors; outputs without grad are detached."""
    def decorated(*args):
        apply_expr, apply_const = _exprs(dtype, device)
        outputs, has_grad = func(args, apply_expr, apply_const)
        return [o if g else o.detach() for o, g in zip(outputs, has_grad)]
    return decorated


def _custom_grad_function(func, dtype, device, nr_inputs):
    from ...autodiff import Function

    class SubgraphOp(Function):
        """The forward part of a ``custom_grad`` subgraph; backward runs its gradient part."""

        def forward(self, *inputs):
            if len(inputs) != nr_inputs:
                raise TypeError(f"subgraph takes {nr_inputs} inputs, got {len(inputs)}")
            apply_expr, apply_const = _exprs(dtype, device)
            self._gen = func(list(inputs), apply_expr, apply_const)
            outputs = tuple(self._gen.send(None))
            self._shapes = [(o.shape, o.dtype) for o in outputs]
            return outputs if len(outputs) > 1 else outputs[0]

        def backward(self, *output_grads):
            from ... import functional as F
            grads = [F.zeros(s, dtype=d) if g is None else g
                     for g, (s, d) in zip(output_grads, self._shapes)]
            input_grads = list(self._gen.send(grads))
            self._gen.close()
            if len(input_grads) != nr_inputs:
                raise ValueError(f"subgraph backward gave {len(input_grads)} grads for "
                                 f"{nr_inputs} inputs")
            return tuple(input_grads) if len(input_grads) > 1 else input_grads[0]

    return SubgraphOp


def subgraph(name, dtype, device, nr_inputs, gopt_level=None, jit_fusion=False,
             custom_grad=False):
    """Decorator: ``func(inputs, f, c)`` describes an op graph with ``f(op, *args)`` (an op or an
    ``_opr_map`` name) and constants ``c(value)``; returns a factory ``() -> op`` whose op is
    called on tensors (a ``Function`` with ``custom_grad``: ``func`` is then a generator that
    yields the outputs, receives the output grads and yields the input grads)."""
    del name, gopt_level, jit_fusion

    def decorator(func):
        if custom_grad:
            cls = _custom_grad_function(func, dtype, device, nr_inputs)
            return cls
        run = interpret_subgraph(func, dtype, device)
        return lambda: run
    return decorator


def subgraph_fn(name, dtype, device, nr_inputs, gopt_level=None, jit_fusion=False,
                custom_grad=False, *, interpret=False):
    """Decorator: like :func:`subgraph`, but the result is called directly on tensors and returns
    the list (or tuple) of outputs."""
    del interpret
    _trace_option.use_xla_backend()

    def decorator(func):
        op = subgraph(name, dtype, device, nr_inputs, gopt_level, jit_fusion, custom_grad)(func)

        def wrapped(*args):
            outputs = op()(*args)
            if custom_grad and not isinstance(outputs, (tuple, list)):
                outputs = (outputs,)
            return outputs
        return wrapped
    return decorator


_ = itertools
