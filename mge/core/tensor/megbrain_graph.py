"""MegBrain's computing-graph API (``Graph``, ``VarNode``, ``OutputNode``, ``dump_graph``, ...),
built over mge's ops.

In MegEngine this module drives MegBrain, its C++ static graph runtime.  mge has no MegBrain;
here a graph is a plain Python structure of operators and vars, and running it applies mge's
eager ops (the same ``apply``, transformation stack, channel and kernels as eager code):

* ``Graph`` owns operators (``OpNode``) and their output vars (``VarNode``).  Vars are made by
  ``Graph.make_const`` (an ``ImmutableTensor``), ``Graph.make_h2d`` (a ``Host2DeviceCopy``),
  ``InputNode`` / :func:`input_callback` (a value given at run time), or by applying an op to
  vars: :func:`apply_normal_varnode`, or any mge function (``F.add(v, 1)``, ``v.reshape(...)``)
  on a ``VarNode`` -- ``apply`` sends an op with a ``VarNode`` among its inputs here
  (``mge._core.dispatch.set_graph_hook``), which adds an operator instead of running it.  Each
  var's shape and dtype are inferred when it is made, by the op's shape rule (``None`` where
  unknown until run); an op whose inputs cannot meet is refused then, naming the op and the
  shapes.
* ``Graph.compile(*outputs)`` chooses what to compute; ``execute()`` starts a run and ``wait()``
  finishes it (``__call__`` does both).  Unlike MegBrain, which runs a function on a thread while
  the caller feeds its inputs, mge runs the operators on the caller's thread when the first
  result is asked for (``OutputNode.get_value``, ``wait``): give inputs (``InputNode.set_value``)
  between ``execute`` and reading the outputs, as MegEngine's tests do.  An exception raised by
  an operator or a callback comes out of ``get_value``/``wait``.
* :func:`load_graph` reads a model file written by ``trace.dump`` (mge's format, see
  ``mge.jit.dump``) into a graph and :func:`dump_graph` writes one back.  Operators carry
  MegBrain's type names (``"Elemwise"``, ``"ConvolutionForward"``, ``"Host2DeviceCopy"``,
  ``"ImmutableTensor"``, ...).

MegBrain's graph optimisations (``optimize_for_inference``'s layout passes, fast-run strategies)
have no counterpart: their options are accepted and recorded (see ``docs/differences.rst``).
"""
import collections
import itertools
import json
import weakref

import numpy as np

from ..._core import _accel
from ..._core.device import as_device
from ..._core.dtype import common_dtype, promote_args, scalar_dtype
from ..._core.ops import elemwise as _elemwise_ops
from ..._core.ops.base import INFER, OpDef, OpIndexError, OpTypeError, OpValueError
from ...tensor import Tensor

_dispatch = _accel.load("mge._core.dispatch")
_mge_apply = _dispatch.apply

__all__ = [
    "Graph", "VarNode", "OpNode", "InputNode", "OutputNode", "ValueOutputNode",
    "AttrOutputNode", "VirtualDepNode", "TensorAttr", "CompGraphDumpResult",
    "CompGraphLoadResult", "set_priority_to_id", "optimize_for_inference",
    "deserialize_infer_option", "modify_opr_algo_strategy_inplace", "dump_graph", "load_graph",
    "apply_normal_varnode", "input_callback", "output_callback",
]

_order = itertools.count()  # creation order of operators, over all graphs (a topological order)


# -- MegBrain's names for mge's ops ------------------------------------------------------------
#: mge op class name -> MegBrain operator type (what ``OpNode.type`` says); others keep the
#: class name.
MGB_TYPE = {
    "Convolution": "ConvolutionForward",
    "ConvolutionBackwardFilter": "ConvolutionBackwardFilter",
    "MatInv": "MatrixInverse",
    "Pooling": "PoolingForward",
    "AdaptivePooling": "AdaptivePoolingForward",
    "ROIPooling": "ROIPoolingForward",
    "ROIAlign": "ROIAlignForward",
    "BatchNorm": "BatchNormForward",
    "WarpPerspective": "WarpPerspectiveForward",
    "WarpAffine": "WarpAffineForward",
    "Remap": "RemapForward",
    "Resize": "ResizeForward",
    "Resize3D": "Resize3DForward",
    "Argsort": "ArgsortForward",
    "CvtColor": "CvtColorForward",
    "AddAxis": "AxisAddRemove",
    "RemoveAxis": "AxisAddRemove",
    "LayerNorm": "LayerNormForward",
    "Softmax": "SoftmaxForward",
    "Correlation": "CorrelationForward",
    # the quantized inference ops (mge/_core/ops/quantized.py)
    "ConvBias": "ConvBiasForward",
    "BatchConvBias": "BatchConvBiasForward",
    "QuantizedConvolutionBackwardData": "ConvolutionBackwardData",
    "QuantizedMatrixMul": "MatrixMul",
    "QuantizedElemwise": "Elemwise",
    "QuantizedTypeCvt": "TypeCvt",
}


def mgb_type(op):
    """MegBrain's operator type name for the mge op ``op`` (``Convolution`` ->
    ``"ConvolutionForward"``, ``Elemwise`` -> ``"Elemwise"``)."""
    name = type(op).__name__
    return MGB_TYPE.get(name, name)


class _Mode(str):
    """A mode parameter as ``OpNode.params`` shows it: MegBrain's upper-case name, equal to the
    name in any case."""

    def __eq__(self, other):
        if isinstance(other, str):
            return self.upper() == other.upper()
        return NotImplemented

    def __ne__(self, other):
        r = self.__eq__(other)
        return r if r is NotImplemented else not r

    __hash__ = str.__hash__

    @classmethod
    def of(cls, value):
        """The mode ``value`` (an op's own string) as shown: upper case, ``raw`` the value."""
        m = cls(value.upper())
        m.raw = value
        return m


def _unmode(v):
    """An op parameter as the op takes it (a shown mode -> the op's own string)."""
    return getattr(v, "raw", v) if isinstance(v, _Mode) else v


# -- the graph's own nodes (MegBrain's C++ VarNode / OperatorNode) ----------------------------------
class _Var:
    """A var of a graph: the output ``index`` of operator ``owner``, with a name and the shape
    (``None`` where unknown), dtype and device inferred when it was made."""

    __slots__ = ("graph", "owner", "index", "id", "name", "shape", "dtype", "device",
                 "__weakref__")

    @property
    def comp_node(self):
        """The device (MegBrain's name)."""
        return self.device

    @property
    def ndim(self):
        """The number of dimensions (``None`` where the shape is unknown)."""
        return None if self.shape is None else len(self.shape)

    @property
    def value(self):
        """The var's value as a numpy array, computed now (a var that needs an input fails)."""
        return _evaluate([self])[self].numpy()

    def __repr__(self):
        return f"<graph var {self.name!r} {self.shape} {self.dtype}>"


class _Opr:
    """An operator of a graph: ``type`` (MegBrain's name), ``name``, ``inputs``, ``outputs``,
    the mge op it applies (``opdef``; ``None`` for data providers and callbacks) and
    ``params``."""

    __slots__ = ("graph", "id", "seq", "name", "type", "kind", "opdef", "inputs", "outputs",
                 "priority", "payload", "__weakref__")

    @property
    def params(self):
        """The op's parameters by name (a dict; modes in MegBrain's upper case)."""
        if self.opdef is None:
            return {}
        out = {}
        for f, v in zip(self.opdef._fields, self.opdef._key):
            out[f] = _Mode.of(v) if f == "mode" and isinstance(v, str) else v
        return out

    def __repr__(self):
        return f"<graph opr {self.name!r} {self.type}>"


def _is_var(x):
    return isinstance(x, (_Var, VarNode))


def _raw(x):
    if isinstance(x, _Var):
        return x
    if isinstance(x, VarNode):
        return x._node
    raise TypeError(f"expected a graph VarNode, got {type(x).__name__}")


def _raw_opr(x):
    if isinstance(x, _Opr):
        return x
    if isinstance(x, OpNode):
        return x._node
    raise TypeError(f"expected a graph OpNode, got {type(x).__name__}")


def _flatten(args):
    out = []
    for a in args:
        if isinstance(a, (list, tuple)):
            out.extend(_flatten(a))
        else:
            out.append(a)
    return out


class _Options:
    """Graph options (MegBrain's ``ComputingGraph.Options``): any attribute may be set and read;
    mge's runs do not depend on them."""

    def __init__(self):
        self.async_exec_level = 1
        self.graph_opt_level = 2
        self.seq_opt = _Plain()
        self.comp_node_seq_record_level = 0
        self.no_force_inplace = False
        self.var_sanity_check_first_run = True

    def __repr__(self):
        return f"<graph options {vars(self)}>"


class _Plain:
    """A namespace of options."""


class _Rendezvous:
    """A value handed between the graph and its user (MegBrain's ``*Rendezvous``)."""

    __slots__ = ("value", "has", "error")

    def __init__(self):
        self.value, self.has, self.error = None, False, None

    def set(self, value):
        """Hand over ``value``."""
        self.value, self.has, self.error = value, True, None

    def reset(self):
        """Forget the value."""
        self.value, self.has, self.error = None, False, None

    drop = reset


class Graph:
    """A computing graph (MegBrain's ``ComputingGraph``): see the module's docstring.

    ``options`` holds MegBrain's graph options (accepted; mge's runs do not depend on them).
    """

    def __init__(self):
        self.options = _Options()
        self._ids = itertools.count()
        self._var_cache = weakref.WeakKeyDictionary()
        self._op_cache = weakref.WeakKeyDictionary()
        self._dest = None
        self._pending = False
        self._file_inputs = []  # a loaded model's inputs, in the file's order

    # -- building -----------------------------------------------------------------------------
    def _new_opr(self, kind, type_name, opdef, inputs, descs, name=None, payload=None):
        opr = _Opr()
        opr.graph = self
        opr.id = next(self._ids)
        opr.seq = next(_order)
        opr.kind = kind
        opr.type = type_name
        opr.opdef = opdef
        opr.inputs = tuple(inputs)
        opr.priority = 0
        opr.payload = payload
        if name is None:  # MegBrain's default: the op's kind, its inputs, its id
            label = _default_label(opdef, type_name)
            args = ",".join(str(v.name) for v in opr.inputs)
            if len(args) > 200:
                args = args[:200] + "..."
            name = f"{label}({args})[{opr.id}]" if opr.inputs else f"{label}[{opr.id}]"
        opr.name = name
        outs = []
        for i, (shape, dtype, device) in enumerate(descs):
            v = _Var()
            v.graph = self
            v.owner = opr
            v.index = i
            v.id = next(self._ids)
            v.name = name if len(descs) == 1 else f"{name}:o{i}"
            v.shape = None if shape is None else tuple(int(s) for s in shape)
            v.dtype = None if dtype is None else np.dtype(dtype)
            v.device = device
            outs.append(v)
        opr.outputs = tuple(outs)
        return opr

    def _wrap(self, obj):
        if isinstance(obj, _Var):
            w = self._var_cache.get(obj)
            if w is None:
                w = VarNode(obj)
            return w
        if isinstance(obj, _Opr):
            w = self._op_cache.get(obj)
            if w is None:
                w = OpNode(obj)
            return w
        raise TypeError(type(obj))

    def make_const(self, data, dtype=None, device=None, name=None):
        """A var holding ``data`` (an ``ImmutableTensor`` operator): numbers, arrays, tensors or
        ``DeviceTensorND``; float64/int64 data become float32/int32 unless ``dtype`` says."""
        return self._wrap(_make_const(self, data, dtype, device, name))

    def make_input(self, *args, device=None, dtype=None, shape=None):
        """A var whose value is given at run time (an ``InputNode``'s output)."""
        return InputNode(*args, device=device, dtype=dtype, shape=shape, graph=self).outputs[0]

    def make_h2d(self, *, dtype, device, shape=None, name=None):
        """A ``Host2DeviceCopy`` var: a model input of ``dtype`` (and ``shape``), as loaded
        models have.  A run cannot give it a value: replace it by an ``InputNode``
        (``comp_graph_tools.convert_inputs``) or a constant to compute with it."""
        dev = as_device(device)
        opr = self._new_opr("h2d", "Host2DeviceCopy", None, (),
                            [(shape, np.dtype(dtype), dev)], name=name or "h2d")
        if name:
            opr.outputs[0].name = name
        return self._wrap(opr.outputs[0])

    # -- running ------------------------------------------------------------------------------
    def compile(self, *outputs):
        """Choose the vars to compute (vars, output nodes' vars, or lists of them); returns the
        graph, whose ``execute``/``wait``/``__call__`` run them."""
        self._dest = [_raw(v) for v in _flatten(outputs)]
        self._pending = False
        return self

    def execute(self, *args):
        """Start a run of the compiled vars: the operators run when a result is first read
        (``OutputNode.get_value``) or at ``wait()``."""
        if self._dest is None:
            raise RuntimeError("Graph.execute: compile the graph first (graph.compile(*vars))")
        for opr in _needed_oprs(self._dest):
            if opr.kind == "output" and isinstance(opr.payload[0], _Rendezvous):
                opr.payload[0].reset()
        self._pending = True

    def wait(self):
        """Finish the run started by ``execute`` (runs it now if no result was read yet);
        raises the exception an operator or a callback raised."""
        if self._pending:
            self._run()

    def __call__(self, *args):
        """``execute()`` then ``wait()``."""
        self.execute(*args)
        return self.wait()

    def _run(self):
        self._pending = False
        _evaluate(self._dest)

    def _set_priority_to_id(self, dest_vars):
        set_priority_to_id(dest_vars)


def _default_label(opdef, type_name):
    if opdef is None:
        return type_name
    try:
        from ...jit.naming import opr_name
    except ImportError:
        mode = getattr(opdef, "mode", None)
        return mode.upper() if isinstance(mode, str) else type_name
    return opr_name(opdef)


def _make_const(graph, data, dtype, device, name, kind="const"):
    from .._imperative_rt.common import DeviceTensorND
    if isinstance(data, DeviceTensorND):
        data = data._tensor
    if isinstance(data, Tensor):
        value = data.numpy()
        if dtype is not None:
            value = value.astype(dtype)
        dev = as_device(device if device is not None else data.device)
    else:
        value = np.asarray(data, dtype=dtype)
        if dtype is None:
            if value.dtype == np.float64:
                value = value.astype(np.float32)
            elif value.dtype == np.int64:
                value = value.astype(np.int32)
        dev = as_device(device)
    value = np.array(value)
    t = Tensor(value, dtype=value.dtype, device=dev)
    type_name = "ImmutableTensor" if kind == "const" else "SharedDeviceTensor"
    opr = graph._new_opr("const", type_name, None, (), [(value.shape, value.dtype, dev)],
                         name=name, payload=t)
    if name is None:  # MegBrain-like defaults: const<value> for one number, else const[shape]
        if value.size == 1:
            v = value.reshape(-1)[0].item()
            text = f"{v:g}" if isinstance(v, float) else str(v)
            label = f"const<{text}>"
        else:
            label = f"const{list(value.shape)}"
        opr.name = opr.outputs[0].name = f"{label}[{opr.id}]"
    return opr.outputs[0]


def _const_like(ref, value):
    """A constant of ``ref``'s graph holding ``value`` (a tensor), wrapped as ``ref`` is."""
    raw = _make_const(_raw(ref).graph, value, None, None, None)
    return type(ref)._from_graph_var(raw)


def _op_label(op):
    try:
        return op.name
    except Exception:
        return type(op).__name__


def _infer(op, inputs):
    """Output descriptions ``(shape, dtype, device)`` of ``op`` on the vars ``inputs``."""
    if getattr(type(op), "sets_device", False) and hasattr(op, "device"):
        device = as_device(op.device)
    elif inputs:
        device = inputs[0].device
    else:
        device = as_device(None)
    rule = INFER.get(type(op))
    known = all(v.shape is not None and v.dtype is not None for v in inputs)
    if rule is None:
        raise NotImplementedError(f"graph: op {_op_label(op)} has no shape rule, so it cannot "
                                  "be added to a graph")
    descs = [(v.shape, v.dtype) for v in inputs]
    items = getattr(op, "items", None)
    if isinstance(items, tuple) and inputs and inputs[0].shape is None and \
            any(isinstance(it, tuple) and it[:1] == ("ell",) for it in items):
        raise IndexError(f"graph: op {_op_label(op)}: an ellipsis needs the number of dimensions "
                         "of the indexed var, which is not known until run")
    try:
        got = rule(op, descs)
    except Exception as e:
        if known or isinstance(e, (OpValueError, OpIndexError, OpTypeError)):
            # (with unknown shapes too: the rule's own verdict, not a failure to compute)
            shapes = ", ".join(f"{v.shape} {v.dtype}" for v in inputs)
            raise type(e)(f"graph: op {_op_label(op)} cannot take inputs ({shapes}): {e}") \
                from None
        # an unknown input shape: the outputs are unknown until run
        dtype = inputs[0].dtype if inputs else None
        return [(None, dtype, device)]
    return [(None if g[0] is None else tuple(g[0]), g[1], device) for g in got]


def _add_op(graph, op, raws, name=None):
    # one physical device ("xpux" names the default one: cpu0:0 here)
    devices = {_physical(v.device) for v in raws}
    if len(devices) > 1 and not getattr(type(op), "sets_device", False):
        raise RuntimeError(f"graph: op {_op_label(op)} takes inputs on different devices "
                           f"({', '.join(sorted(devices))}); copy them to one device first")
    opr = graph._new_opr("op", mgb_type(op), op, raws, _infer(op, raws), name=name)
    return opr.outputs


def _physical(device):
    try:
        return as_device(device).physical_name
    except (ValueError, TypeError):
        return str(device)


_FLOAT_ONLY = _elemwise_ops._FLOAT_ONLY | {"pow"}
_f32 = np.dtype("float32")


def _promote(graph, op, raws):
    """The inputs of ``op`` in the dtype it computes in (the dtype_promote layer's rules for
    elementwise ops, concatenation and ``where``)."""
    from ..._core import ops as _ops
    name = type(op).__name__
    dtypes = [v.dtype for v in raws]
    if any(d is None for d in dtypes):
        return raws
    target = None
    if name == "Elemwise":
        target = dtypes[0] if all(d == dtypes[0] for d in dtypes) else common_dtype(dtypes)
        if target.kind != "f" and op.mode in _FLOAT_ONLY:
            target = _f32
    elif name in ("Concat", "Stack", "Dot"):
        if not all(d == dtypes[0] for d in dtypes):
            target = common_dtype(dtypes)
    elif name == "Where":
        from ..._core.dtype import where_dtype
        if dtypes[1] != dtypes[2]:
            target = where_dtype(dtypes[1:])
            cast = [raws[0]] + [_cast(graph, v, target) for v in raws[1:]]
            return tuple(cast)
    if target is None:
        return raws
    return tuple(_cast(graph, v, target) for v in raws)


def _cast(graph, v, dtype):
    if v.dtype == dtype:
        return v
    from ..._core.ops import TypeCvt
    return _add_op(graph, TypeCvt(np.dtype(dtype)), (v,))[0]


def _graph_of(inputs):
    for x in inputs:
        if _is_var(x):
            return _raw(x).graph
    raise TypeError("no graph var among the inputs")


def _to_raws(graph, op, inputs):
    # graph vars stay; tensors become constants; numbers and arrays become constants of the
    # dtype apply gives them (MegEngine's promotion: numbers are weak)
    var_dtypes = [_raw(x).dtype for x in inputs if _is_var(x)]
    var_dtypes += [x.dtype for x in inputs if isinstance(x, Tensor)]
    device = next((_raw(x).device for x in inputs if _is_var(x)), None)
    others = [x for x in inputs if not _is_var(x) and not isinstance(x, Tensor)]
    dtype = None
    if others:
        dtypes = [d for d in var_dtypes if d is not None]
        if len(inputs) == 2 and len(others) == 1 and len(dtypes) == 1 and \
                type(others[0]) in (int, float, bool):
            dtype = scalar_dtype(dtypes[0], others[0])
        else:
            dtype = promote_args(dtypes, others, _op_label(op))
    out = []
    for x in inputs:
        if _is_var(x):
            out.append(_raw(x))
        elif isinstance(x, Tensor):
            out.append(_make_const(graph, x, None, x.device, None))
        else:
            out.append(_make_const(graph, x, dtype, device, None))
    return tuple(out)


def _graph_apply(op, inputs):
    """The graph hook of ``apply``: ``op`` on inputs with a graph var among them adds an
    operator; returns its outputs wrapped as the first var input is (a ``VarNode`` of this
    module or of ``mge.utils.network_node``)."""
    from ..ops import builtin
    if isinstance(op, builtin.BuiltinOp):
        # MegEngine's op classes translate themselves into mge ops (through apply: back here)
        return tuple(op._apply(list(inputs)))
    graph = _graph_of(inputs)
    wrapper = next(type(x) for x in inputs if isinstance(x, VarNode)) \
        if any(isinstance(x, VarNode) for x in inputs) else VarNode
    raws = _to_raws(graph, op, inputs)
    raws = _promote(graph, op, raws)
    outs = _add_op(graph, op, raws)
    return tuple(wrapper._from_graph_var(v) for v in outs)


# -- running -----------------------------------------------------------------------------------
def _needed_oprs(dest):
    seen = set()
    out = []
    stack = [v.owner for v in dest]
    while stack:
        opr = stack.pop()
        if id(opr) in seen:
            continue
        seen.add(id(opr))
        out.append(opr)
        for v in opr.inputs:
            if id(v.owner) not in seen:
                stack.append(v.owner)
    out.sort(key=lambda o: o.seq)
    return out


def _as_tensor(value, opr):
    from .._imperative_rt.common import DeviceTensorND
    if isinstance(value, DeviceTensorND):
        return value._tensor
    if isinstance(value, Tensor):
        return value
    if value is None:
        raise RuntimeError(f"{opr.type} {opr.name!r}: the input callback gave no value")
    out = opr.outputs[0]
    return Tensor(np.asarray(value), dtype=out.dtype, device=out.device)


def _evaluate(dest):
    """Run the operators ``dest`` (vars) depend on; a dict var -> Tensor of what was computed."""
    from .._imperative_rt.common import DeviceTensorND
    values = {}
    for opr in _needed_oprs(dest):
        kind = opr.kind
        ins = [values[v] for v in opr.inputs]
        if kind == "const":
            outs = [opr.payload]
        elif kind == "op":
            outs = _mge_apply(opr.opdef, *ins)
        elif kind == "h2d":
            if opr.payload is None:
                raise RuntimeError(
                    f"Host2DeviceCopy {opr.name!r} has no value: a graph input is fed through an "
                    "InputNode (comp_graph_tools.convert_inputs replaces Host2DeviceCopy inputs "
                    "by InputNodes)")
            outs = [opr.payload]
        elif kind == "input":
            source = opr.payload
            if isinstance(source, _Rendezvous):
                if not source.has:
                    raise RuntimeError(f"InputNode {opr.name!r}: no value was set (call "
                                       "set_value between execute() and reading the outputs)")
                value = source.value
                source.reset()
            else:
                value = source()
            t = _as_tensor(value, opr)
            want = opr.outputs[0]
            if want.dtype is not None and t.dtype != want.dtype:
                raise TypeError(f"InputNode {opr.name!r}: got a value of dtype {t.dtype}, "
                                f"expected {want.dtype}")
            if want.shape is not None and tuple(t.shape) != want.shape:
                raise ValueError(f"InputNode {opr.name!r}: got a value of shape "
                                 f"{tuple(t.shape)}, expected {want.shape}")
            outs = [t, t]
        elif kind == "output":
            target, mode = opr.payload
            t = ins[0]
            if mode == "value":
                value = DeviceTensorND(t)
            elif mode == "numpy":
                value = t.numpy()
            else:
                value = TensorAttr(tuple(t.shape), t.dtype, t.device)
            if isinstance(target, _Rendezvous):
                target.set(value)
            else:
                target(value)
            outs = [t]
        elif kind == "virtual_dep":
            outs = [ins[0]]
        else:  # pragma: no cover - every kind is listed above
            raise AssertionError(kind)
        for v, t in zip(opr.outputs, outs):
            values[v] = t
    return values


# -- the Python face: VarNode / OpNode and the callback nodes ---------------------------------------
class VarNode:
    """A var of a graph (MegEngine's ``megbrain_graph.VarNode``), made from a graph var
    (``VarNode(other._node)`` or ``VarNode(other)`` wraps the same var).

    Attributes: ``graph``, ``op`` (the owner ``OpNode``), ``owner`` (the raw operator),
    ``name`` (settable), ``id``, ``shape`` (static, ``None`` where unknown), ``dtype``,
    ``device``/``comp_node``, ``ndim``.  Operators and array methods (``+``, ``<``, ``[...]``,
    ``reshape``, ``astype``, ``sum``, ...) build new vars; ``numpy()`` computes the value now
    (a var that depends on an input cannot).
    """

    def __init__(self, node, isscalar=False):
        if isinstance(node, VarNode):
            node = node._node
        if not isinstance(node, _Var):
            raise TypeError(f"VarNode: expected a graph var, got {type(node).__name__}")
        self._node = node
        node.graph._var_cache[node] = self

    @classmethod
    def _from_graph_var(cls, var):
        return cls(var)

    @property
    def var(self):
        """The graph var this object wraps."""
        return self._node

    @property
    def graph(self):
        """The graph the var belongs to."""
        return self._node.graph

    @property
    def op(self):
        """The operator that computes the var (an ``OpNode``)."""
        return self._node.graph._wrap(self._node.owner)

    @property
    def owner(self):
        """The raw operator that computes the var."""
        return self._node.owner

    @property
    def name(self):
        """The var's name."""
        return self._node.name

    @name.setter
    def name(self, name):
        self._node.name = name

    @property
    def id(self):
        """The var's id in its graph."""
        return self._node.id

    @property
    def dtype(self):
        """The numpy dtype."""
        return self._node.dtype

    @property
    def device(self):
        """The device."""
        return self._node.device

    comp_node = device

    @property
    def shape(self):
        """The static shape (a tuple), ``None`` where unknown until run."""
        return self._node.shape

    @property
    def ndim(self):
        """The number of dimensions (``None`` where the shape is unknown)."""
        return self._node.ndim

    @property
    def size(self):
        """The number of elements (``None`` where the shape is unknown)."""
        s = self.shape
        return None if s is None else int(np.prod(s, dtype=np.int64))

    @property
    def value(self):
        """The value as a numpy array, computed now."""
        return self._node.value

    def numpy(self):
        """The value as a numpy array, computed now (a var that depends on an input cannot
        be: ``RuntimeError``)."""
        return self._node.value

    def item(self):
        """The value of a one-element var, as a Python number."""
        return self.numpy().item()

    def __repr__(self):
        return f"VarNode({self.name!r}, shape={self.shape}, dtype={self.dtype})"

    __hash__ = object.__hash__
    __array_ufunc__ = None  # numpy defers to the operators below (``array - var`` is a var)

    # -- array methods (each builds operators through mge's functions) ------------------------
    def _F(self):
        from ... import functional as F
        return F

    def __add__(self, o): return self._F().add(self, o)
    def __radd__(self, o): return self._F().add(o, self)
    def __sub__(self, o): return self._F().sub(self, o)
    def __rsub__(self, o): return self._F().sub(o, self)
    def __mul__(self, o): return self._F().mul(self, o)
    def __rmul__(self, o): return self._F().mul(o, self)
    def __truediv__(self, o): return self._F().div(self, o)
    def __rtruediv__(self, o): return self._F().div(o, self)
    def __floordiv__(self, o): return self._F().floor_div(self, o)
    def __rfloordiv__(self, o): return self._F().floor_div(o, self)
    def __mod__(self, o): return self._F().mod(self, o)
    def __rmod__(self, o): return self._F().mod(o, self)
    def __pow__(self, o): return self._F().pow(self, o)
    def __rpow__(self, o): return self._F().pow(o, self)
    def __matmul__(self, o): return self._F().matmul(self, o)
    def __rmatmul__(self, o): return self._F().matmul(o, self)
    def __lt__(self, o): return self._F().less(self, o)
    def __le__(self, o): return self._F().less_equal(self, o)
    def __gt__(self, o): return self._F().greater(self, o)
    def __ge__(self, o): return self._F().greater_equal(self, o)
    def __eq__(self, o): return self._F().equal(self, o)
    def __ne__(self, o): return self._F().not_equal(self, o)
    def __neg__(self): return self._F().neg(self)
    def __pos__(self): return self
    def __abs__(self): return self._F().abs(self)
    def __invert__(self): return self._F().logical_not(self)
    def __and__(self, o): return self._F().logical_and(self, o)
    def __rand__(self, o): return self._F().logical_and(o, self)
    def __or__(self, o): return self._F().logical_or(self, o)
    def __ror__(self, o): return self._F().logical_or(o, self)
    def __xor__(self, o): return self._F().logical_xor(self, o)
    def __rxor__(self, o): return self._F().logical_xor(o, self)
    def __lshift__(self, o): return self._F().left_shift(self, o)
    def __rshift__(self, o): return self._F().right_shift(self, o)
    def __round__(self, ndigits=None): return self._F().round(self)
    def __floor__(self): return self._F().floor(self)
    def __ceil__(self): return self._F().ceil(self)

    def __len__(self):
        s = self.shape
        if not s:
            raise TypeError("len() of a 0-d (or unknown-shape) graph var")
        return s[0]

    def __getitem__(self, index):
        return _getitem(self, index)

    def reshape(self, *shape):
        """Reshape (``F.reshape``; the shape may be a var or a tensor)."""
        if len(shape) == 1 and not isinstance(shape[0], int):
            shape = shape[0]
        return self._F().reshape(self, shape)

    def astype(self, dtype):
        """Convert to ``dtype`` (quantized dtypes rescale, as ``Tensor.astype``)."""
        from ..._core.dtype import canonical
        from ..._core.ops import TypeCvt
        dtype = canonical(dtype)
        mine = self.dtype
        if dtype.metadata is not None or (mine is not None and mine.metadata is not None):
            if dtype == mine and dtype.metadata == mine.metadata:
                return self
            from . import dtype as _qdtype
            return _qdtype._typecvt_quantized(self, dtype)
        if dtype == mine:
            return self
        return _mge_apply(TypeCvt(dtype), self)[0]

    def __setitem__(self, index, value):
        # as Tensor's: the var becomes the result of the assignment (a new graph var)
        from ...functional.indexing import setitem
        new = setitem(self, index, value)
        self._rebind(new._node)

    def _rebind(self, node):
        self._node = node

    def __array__(self, dtype=None, copy=None):
        a = self.numpy()
        return a if dtype is None else a.astype(dtype)

    def detach(self):
        """The var itself (a graph has no autodiff)."""
        return self

    def flatten(self):
        """Flatten (``F.flatten``)."""
        return self._F().flatten(self)

    def transpose(self, *axes):
        """Permute the axes (``F.transpose``; reversed by default)."""
        if not axes:
            axes = tuple(range(self.ndim))[::-1]
        elif len(axes) == 1 and isinstance(axes[0], (tuple, list)):
            axes = axes[0]
        return self._F().transpose(self, axes)

    @property
    def T(self):
        """The axes reversed."""
        return self.transpose()

    def broadcast(self, *shape):
        """Broadcast to ``shape`` (``F.broadcast_to``)."""
        if len(shape) == 1 and not isinstance(shape[0], int):
            shape = shape[0]
        return self._F().broadcast_to(self, shape)

    def sum(self, axis=None, keepdims=False):
        """Sum (``F.sum``)."""
        return self._F().sum(self, axis=axis, keepdims=keepdims)

    def mean(self, axis=None, keepdims=False):
        """Mean (``F.mean``)."""
        return self._F().mean(self, axis=axis, keepdims=keepdims)

    def prod(self, axis=None, keepdims=False):
        """Product (``F.prod``)."""
        return self._F().prod(self, axis=axis, keepdims=keepdims)

    def max(self, axis=None, keepdims=False):
        """Maximum (``F.max``)."""
        return self._F().max(self, axis=axis, keepdims=keepdims)

    def min(self, axis=None, keepdims=False):
        """Minimum (``F.min``)."""
        return self._F().min(self, axis=axis, keepdims=keepdims)

    def to(self, device):
        """A copy on ``device`` (a ``Copy`` operator)."""
        from ..._core.ops.misc import Copy
        return _mge_apply(Copy(as_device(device)), self)[0]


def _getitem(x, index):
    # numpy indexing through the function behind Tensor.__getitem__
    from ...functional.indexing import getitem
    return getitem(x, index)


class OpNode:
    """An operator of a graph (MegEngine's ``megbrain_graph.OpNode``): ``graph``, ``name``
    (settable), ``id``, ``type`` (MegBrain's name), ``inputs``/``outputs`` (``VarNode`` objects),
    ``params`` (a dict) and ``opdef`` (the mge op it applies, or ``None``)."""

    def __init__(self, node):
        if isinstance(node, OpNode):
            node = node._node
        if not isinstance(node, _Opr):
            raise TypeError(f"OpNode: expected a graph operator, got {type(node).__name__}")
        self._node = node
        node.graph._op_cache[node] = self

    @property
    def graph(self):
        """The graph the operator belongs to."""
        return self._node.graph

    @property
    def name(self):
        """The operator's name."""
        return self._node.name

    @name.setter
    def name(self, name):
        self._node.name = name

    @property
    def id(self):
        """The operator's id in its graph."""
        return self._node.id

    @property
    def inputs(self):
        """The input vars (``VarNode`` objects)."""
        return tuple(map(self._node.graph._wrap, self._node.inputs))

    @property
    def outputs(self):
        """The output vars (``VarNode`` objects)."""
        return tuple(map(self._node.graph._wrap, self._node.outputs))

    @property
    def params(self):
        """The parameters by name."""
        return self._node.params

    @property
    def type(self):
        """MegBrain's operator type name."""
        return self._node.type

    @property
    def opdef(self):
        """The mge op the operator applies (``None`` for providers and callbacks)."""
        return self._node.opdef

    @property
    def priority(self):
        """The scheduling priority (kept in dumped files with ``keep_opr_priority``)."""
        return self._node.priority

    def __repr__(self):
        return f"OpNode({self.name!r}, {self.type})"


def _callback_input(graph, source, device, dtype, shape, deps, name):
    if graph is None:
        graph = _graph_of(deps) if deps else None
    if graph is None:
        raise ValueError("input_callback/InputNode: give graph= (or input vars)")
    if dtype is None:
        raise ValueError("input_callback/InputNode: give dtype=")
    dev = as_device(device)
    opr = graph._new_opr("input", "InputCallback", None, [_raw(d) for d in deps],
                         [(shape, np.dtype(dtype), dev), ((), np.dtype("int32"), dev)],
                         name=name or "input", payload=source)
    return opr


def input_callback(callback, *args, device=None, dtype=None, shape=None, graph=None):
    """A graph input whose value ``callback()`` gives at each run (a ``DeviceTensorND``, a
    tensor or an array); ``args`` are vars it depends on.  Returns ``(value_var, dummy_var)``."""
    opr = _callback_input(graph, callback, device, dtype, shape, args, None)
    g = opr.graph
    return g._wrap(opr.outputs[0]), g._wrap(opr.outputs[1])


def _callback_output(var, args, target, mode):
    raws = [_raw(v) for v in (var,) + tuple(args)]
    g = raws[0].graph
    v = raws[0]
    opr = g._new_opr("output", "OutputCallback", None, raws,
                     [(v.shape, v.dtype, v.device)], name=f"output({v.name})",
                     payload=(target, mode))
    return opr


def output_callback(callback, var, *args):
    """Call ``callback(value)`` with ``var``'s value (a ``DeviceTensorND``) at each run;
    ``args`` are vars to compute first.  Returns the var to compile."""
    opr = _callback_output(var, args, callback, "value")
    return opr.graph._wrap(opr.outputs[0])


class InputNode(OpNode):
    """A graph input given by ``set_value`` before each run's results are read.

    Args:
        *args: vars the input depends on.
        device, dtype, shape: the input's device, dtype (required) and shape (``None``: any).
        graph: the graph (or the graph of ``args``).
        use_static_shape: accepted for MegEngine's signature.
    """

    def __init__(self, *args, device=None, dtype=None, shape=None, graph=None,
                 use_static_shape=False):
        self._rendezvous = _Rendezvous()
        opr = _callback_input(graph, self._rendezvous, device, dtype, shape, args, None)
        super().__init__(opr)

    def set_value(self, value):
        """The value of the next run (a ``DeviceTensorND``, a tensor or an array)."""
        self._rendezvous.set(value)

    def reset(self):
        """Forget a value set and not used yet."""
        self._rendezvous.reset()

    @property
    def device(self):
        """The input's device."""
        return self._node.outputs[0].device

    @property
    def dtype(self):
        """The input's dtype."""
        return self._node.outputs[0].dtype


class _OutputBase(OpNode):
    _mode = "value"

    def __init__(self, var, *args):
        self._rendezvous = _Rendezvous()
        super().__init__(_callback_output(var, args, self._rendezvous, self._mode))

    def _get(self):
        r = self._rendezvous
        if not r.has:
            g = self._node.graph
            if g._pending and g._dest is not None and \
                    any(o is self._node for o in _needed_oprs(g._dest)):
                g._run()
            elif not r.has:
                raise RuntimeError(f"{type(self).__name__}: no value (compile a graph with its "
                                   "outputs and execute() it first)")
        return r.value

    def drop_value(self):
        """Forget the value."""
        self._rendezvous.drop()

    def reset(self):
        """Forget the value."""
        self._rendezvous.reset()


class OutputNode(_OutputBase):
    """Keeps ``var``'s value at each run; ``get_value()`` returns it (a ``DeviceTensorND``,
    with ``numpy()``).  ``args`` are vars to compute first."""

    def get_value(self):
        """The value of the last run (runs the executed graph now if it has not run)."""
        return self._get()


class ValueOutputNode(_OutputBase):
    """Like ``OutputNode``, but ``get_value()`` returns a numpy array."""

    _mode = "numpy"

    def get_value(self):
        """The value of the last run, as a numpy array."""
        return self._get()


class TensorAttr:
    """Shape, dtype and device of a var's value (what ``AttrOutputNode`` gives)."""

    __slots__ = ("shape", "dtype", "device")

    def __init__(self, shape, dtype, device):
        self.shape = shape
        self.dtype = dtype
        self.device = device


class AttrOutputNode(_OutputBase):
    """Keeps the shape, dtype and device of ``var``'s value at each run; ``get_value()``
    returns a :class:`TensorAttr`."""

    _mode = "attr"

    def get_value(self):
        """The ``TensorAttr`` of the last run."""
        return self._get()


class VirtualDepNode(OpNode):
    """A var equal to ``vars[0]`` that is computed after all of ``vars``."""

    def __init__(self, vars, device=""):
        raws = [_raw(v) for v in vars]
        v = raws[0]
        g = v.graph
        super().__init__(g._new_opr("virtual_dep", "VirtualDep", None, raws,
                                    [(v.shape, v.dtype, v.device)]))


CompGraphDumpResult = collections.namedtuple(
    "CompGraphDumpResult",
    ["nr_opr", "tot_bytes", "tensor_value_bytes", "content_hash", "inputs", "outputs", "params"])
CompGraphDumpResult.__doc__ = "What :func:`dump_graph` returns besides the bytes."

CompGraphLoadResult = collections.namedtuple(
    "CompGraphLoadResult", ["graph", "output_vars_dict", "output_vars_list", "metadata"])
CompGraphLoadResult.__doc__ = ("What :func:`load_graph` returns: the graph, the output vars by "
                               "name and in order, and the file's metadata.")


def set_priority_to_id(dest_vars):
    """Set the priority of each operator ``dest_vars`` depend on to its id where it is 0."""
    for opr in _needed_oprs([_raw(v) for v in dest_vars]):
        if opr.priority == 0:
            opr.priority = opr.id


#: The options of :func:`optimize_for_inference` (MegBrain's ``GraphOptimizeOptions``), in the
#: order of their bits in :func:`deserialize_infer_option`'s integer.
_INFER_OPTIONS = (
    "enable_hwcd4", "enable_nchw4", "enable_nchw88", "enable_nchw32", "enable_nchw44",
    "enable_nchw44_dot", "enable_chwn4", "enable_nchw64", "enable_io16xc32", "enable_ioc16",
    "enable_fuse_conv_bias_nonlinearity", "enable_fuse_conv_bias_with_z",
    "enable_fuse_preprocess", "enable_fuse_grain",
)
_LAYOUTS = _INFER_OPTIONS[:8]


def optimize_for_inference(dest_vars, **kwargs):
    """MegBrain's inference passes: returns ``(new_vars, options)``, ``options`` an integer
    :func:`deserialize_infer_option` decodes.

    mge applies ``enable_io16xc32`` and ``enable_ioc16`` (float32 operators take and give
    float16: a ``TypeCvt`` to float16 before each float32 input of an operator, the operator
    computing in float16).  The layout options (``enable_nchw4``, ...) and the fusions are
    accepted and recorded only: mge's kernels have no such layouts, and its compiled programs
    fuse on their own.  ``enable_fuse_grain`` is on unless given ``False``.  An unknown option
    is a ``ValueError``.
    """
    opts = {}
    for k in _INFER_OPTIONS:
        default = k == "enable_fuse_grain"
        if kwargs.pop(k, default):
            opts[k] = True
    if kwargs:
        raise ValueError("unknown options: %s" % list(kwargs))
    layouts = [k for k in _LAYOUTS if k in opts]
    if len(layouts) > 1:
        raise ValueError(f"optimize_for_inference: one layout at most, got {layouts}")
    raws = [_raw(v) for v in dest_vars]
    if "enable_io16xc32" in opts or "enable_ioc16" in opts:
        raws = _to_float16(raws)
    graph = raws[0].graph if raws else None
    out = [graph._wrap(v) for v in raws]
    return out, sum(1 << i for i, k in enumerate(_INFER_OPTIONS) if k in opts)


def _to_float16(dest):
    from ..._core.ops import TypeCvt
    f16 = np.dtype("float16")
    repl = {}
    for opr in _needed_oprs(dest):
        if opr.kind != "op":
            continue
        ins = [repl.get(v, v) for v in opr.inputs]
        changed = any(a is not b for a, b in zip(ins, opr.inputs))
        if any(v.dtype == _f32 for v in ins):
            ins = [_add_op(v.graph, TypeCvt(f16), (v,))[0] if v.dtype == _f32 else v
                   for v in ins]
            changed = True
        if changed:
            new = _copy_opr(opr, ins)
            for a, b in zip(opr.outputs, new.outputs):
                repl[a] = b
    return [repl.get(v, v) for v in dest]


def deserialize_infer_option(x):
    """The options (a dict name -> ``True``) of an integer made by
    :func:`optimize_for_inference`."""
    return {k: True for i, k in enumerate(_INFER_OPTIONS) if int(x) >> i & 1}


def modify_opr_algo_strategy_inplace(dest_vars, strategy):
    """MegBrain: set the fast-run strategy of the convolutions and matrix products
    ``dest_vars`` depend on.  mge's kernels have no algorithm choice: checked and ignored."""
    if not isinstance(strategy, str) and not hasattr(strategy, "name"):
        raise TypeError(f"modify_opr_algo_strategy_inplace: bad strategy {strategy!r}")
    for v in dest_vars:
        _raw(v)


def apply_normal_varnode(op, *args):
    """Add the operator ``op`` (an mge op or one of ``mge.core.ops.builtin``) on the vars
    ``args``; returns its output vars (``VarNode`` objects)."""
    out = _graph_apply(op, args)
    return [VarNode(_raw(v)) if not type(v) is VarNode else v for v in out]


# -- copying and replacing (comp_graph_tools.replace_vars / replace_oprs) -------------------------
def _copy_opr(opr, inputs):
    """A new operator doing what ``opr`` does, on ``inputs``; keeps the outputs' names."""
    g = opr.graph
    if opr.kind == "op":
        new = g._new_opr("op", opr.type, opr.opdef, inputs, _infer(opr.opdef, inputs),
                         name=opr.name)
    else:
        descs = [(v.shape, v.dtype, v.device) for v in opr.outputs]
        if opr.kind in ("output", "virtual_dep") and inputs:
            descs = [(inputs[0].shape, inputs[0].dtype, inputs[0].device)]
        new = g._new_opr(opr.kind, opr.type, None, inputs, descs, name=opr.name,
                         payload=opr.payload)
    new.priority = opr.priority
    for a, b in zip(opr.outputs, new.outputs):
        b.name = a.name
    return new


def _replace(dest, var_map=None, opr_map=None):
    """``dest`` with the vars of ``var_map`` (or the outputs of the operators of ``opr_map``)
    replaced, and the operators that depend on them rebuilt (copies; the old ones stay)."""
    memo = dict(var_map or {})
    for old, new in (opr_map or {}).items():
        if len(old.outputs) != len(new.outputs):
            raise ValueError(f"replace_oprs: {old.type} {old.name!r} has {len(old.outputs)} "
                             f"outputs, its replacement {new.type} {new.name!r} "
                             f"{len(new.outputs)}")
        memo.update(zip(old.outputs, new.outputs))
    for opr in _needed_oprs(dest):
        if all(v in memo for v in opr.outputs):
            continue
        ins = [memo.get(v, v) for v in opr.inputs]
        if any(a is not b for a, b in zip(ins, opr.inputs)):
            new = _copy_opr(opr, ins)
            for a, b in zip(opr.outputs, new.outputs):
                memo.setdefault(a, b)
    return [memo.get(v, v) for v in dest]


# -- files ---------------------------------------------------------------------------------------
def dump_graph(output_vars, *, keep_var_name=1, keep_opr_name=False, keep_param_name=False,
               keep_opr_priority=False, no_change_graph=False, strip_info_file=None,
               append_json=False, metadata=None, dump_format=None, model_version=2,
               compat_older_version=None):
    """Serialize the graph computing ``output_vars`` (a list of vars, or a dict name -> var,
    which names them) in mge's model format (``mge.jit.dump``); returns ``(bytes,
    CompGraphDumpResult)``.

    ``Host2DeviceCopy`` vars and ``InputNode`` objects are the model's inputs (named by their vars),
    ``ImmutableTensor``/``SharedDeviceTensor`` vars its constants; the outputs keep their names.
    ``keep_var_name`` (0: none, 1: the outputs', 2: all), ``keep_opr_name``,
    ``keep_param_name`` and ``keep_opr_priority`` choose which names and priorities the file
    keeps (inputs and outputs are always named: a model is called by them).  ``metadata`` is a
    dict (``graph_modified``, ``optimized_for_inference``, ``optimize_options``, ``user_info``:
    any picklable value).  ``strip_info_file``: the op types used, as JSON.  ``dump_format``,
    ``model_version``, ``no_change_graph`` and ``compat_older_version`` choose among MegBrain's
    binary formats: accepted and ignored (mge has one format).
    """
    return _dump_graph(output_vars, (), keep_var_name=keep_var_name,
                       keep_opr_name=keep_opr_name, keep_param_name=keep_param_name,
                       keep_opr_priority=keep_opr_priority, strip_info_file=strip_info_file,
                       append_json=append_json, metadata=metadata)


def _dump_graph(output_vars, extra_inputs, *, keep_var_name, keep_opr_name, keep_param_name,
                keep_opr_priority, strip_info_file, append_json, metadata):
    # dump_graph, keeping the inputs ``extra_inputs`` although the outputs may not need them
    if isinstance(output_vars, dict):
        seen = set()
        for name, var in output_vars.items():
            raw = _raw(var)
            if raw.id in seen:
                raise ValueError("var name is associated with a var object, so we can not have "
                                 f"two names given to the same var: {var}")
            seen.add(raw.id)
            raw.name = name
        output_vars = list(output_vars.values())
    raws = [_raw(v) for v in output_vars]
    from ...jit import dump as _dump
    data, result = _dump.save_graph_oprs(
        raws, _needed_oprs(raws), keep_var_name=keep_var_name, keep_opr_name=keep_opr_name,
        keep_param_name=keep_param_name, keep_opr_priority=keep_opr_priority,
        metadata=metadata, extra_inputs=[_raw(v) for v in extra_inputs])
    if strip_info_file is not None:
        _write_strip_info(strip_info_file, raws, result, append_json)
    return data, CompGraphDumpResult(*result)


def _write_strip_info(file, raws, result, append_json):
    types = sorted({o.type for o in _needed_oprs(raws)})
    info = {"opr_types": types, "hash": result.content_hash}
    if isinstance(file, str):
        old = {}
        if append_json:
            try:
                with open(file) as f:
                    old = json.load(f)
            except (OSError, ValueError):
                old = {}
        if append_json:
            info["opr_types"] = sorted(set(old.get("opr_types", [])) | set(types))
        with open(file, "w") as f:
            json.dump(info, f)
    else:
        json.dump(info, file)


def load_graph(fpath):
    """Read a model file written by ``trace.dump``, :func:`dump_graph` or ``Network.dump``
    (a path or a binary file object) into a new :class:`Graph`; returns a
    :class:`CompGraphLoadResult` (graph, output vars by name and in order -- raw graph vars,
    as MegEngine gives them -- and the metadata: ``None`` where the file has none)."""
    from ...jit import dump as _dump
    return _dump.load_graph_file(fpath, Graph)


_dispatch.set_graph_hook(VarNode, _graph_apply)
