"""MegEngine's ``network_node``: the nodes of ``mge.utils.network.Network``.

A network ``VarNode`` stands for a var of a computing graph (``mge.core.tensor.megbrain_graph``):
its ``var`` is the graph var, and it has a ``name``, an ``owner`` (the network ``OpNode`` that
computes it; ``None`` for a var not added to a network yet) and ``users``.  mge functions and
operators on network vars build graph operators (``F.relu(v)``, ``v * 2``), giving new network vars
without an owner; ``Network.add_dep_oprs``/``add_output``/``replace_vars`` take them in.

A network ``OpNode`` has ``inputs``, ``outputs``, ``params`` (a dict), ``name``, ``type`` (as
MegEngine's node classes say it) and ``opdef`` (the mge op class); ``compile()`` rebuilds its graph
operator when its inputs or parameters changed.  The node classes are MegEngine's
(:func:`str_to_mge_class` maps a graph operator's type name to one); ``Host2DeviceCopy`` is a model
input, ``ImmutableTensor`` a parameter (``set_value`` changes it).
"""
import sys

import numpy as np

from .._core import ops as _ops
from ..core._trace_option import use_symbolic_shape
from ..core.tensor import megbrain_graph as G
from .comp_graph_tools import replace_vars

__all__ = ["NetworkNode", "VarNode", "OpNode", "str_to_mge_class"]


class NetworkNode:
    """Base of the network nodes."""


class VarNode(NetworkNode, G.VarNode):
    """A var of a ``Network``: wraps the graph var ``var`` (a raw graph var or a ``VarNode``),
    with ``owner_opr`` and ``name``."""

    def __init__(self, var=None, *, owner_opr=None, name=None):
        if isinstance(var, G.VarNode):
            var = var.var
        self._node = var
        self._owner = owner_opr
        self._name = name
        self._users = None

    @classmethod
    def _from_graph_var(cls, var):
        return cls(var)

    @classmethod
    def load(cls, sym_var, owner_opr):
        """The network var of the graph var ``sym_var``, computed by ``owner_opr``."""
        obj = cls(sym_var)
        obj.name = sym_var.name
        obj.owner = owner_opr
        return obj

    @property
    def users(self):
        """The network operators reading this var."""
        if self._users is None:
            self._users = []
        return self._users

    @property
    def owner(self):
        """The network operator computing this var (``None`` before it joins a network)."""
        return self._owner

    @owner.setter
    def owner(self, owner):
        self._owner = owner

    @property
    def name(self):
        """The var's name in the network."""
        return self._name

    @name.setter
    def name(self, name):
        self._name = name

    @property
    def id(self):
        """An id unique among live nodes."""
        return id(self)

    @property
    def var(self):
        """The graph var."""
        return self._node

    @var.setter
    def var(self, var):
        self._reset(var)

    def _rebind(self, node):
        self._reset(node)

    def _reset(self, other):
        if isinstance(other, G.VarNode):
            other = other.var
        self._node = other
        self._owner = None

    def _reset_var(self, var):
        owner = self._owner
        self.var = var
        if self._name is not None:
            self._node.name = self._name
        self._owner = owner

    @property
    def graph(self):
        """The graph of the var."""
        return self._node.graph

    def _get_var_shape(self, axis=None):
        shape = self.partial_shape
        if axis is not None:
            shape = shape[axis]
        return _const_var(self.graph, np.array(shape, dtype=np.int32), self.device)

    @property
    def partial_shape(self):
        """The inferred (static) shape, a tuple."""
        s = self._node.shape
        if s is None:
            raise ValueError(f"VarNode {self.name!r}: its shape is not known until run")
        return tuple(s)

    def shapeof(self, axis):
        """The size of axis ``axis`` as a var."""
        return self._get_var_shape(axis=axis)

    @property
    def _tuple_shape(self):
        return self.partial_shape

    @property
    def shape(self):
        """The inferred shape (a tuple, ``None`` where unknown); under
        ``set_symbolic_shape(True)`` a var holding it (a constant: mge's graphs infer shapes
        when they are built)."""
        if not use_symbolic_shape():
            return self._node.shape
        return self._get_var_shape()

    def __bool__(self):
        return False

    def __repr__(self):
        return "VarNode:" + str(self.name)

    __hash__ = object.__hash__

    def set_owner_opr(self, owner_opr):
        """Set the owner operator."""
        self.owner = owner_opr


def _const_var(graph, value, device):
    raw = G._make_const(graph, value, value.dtype, device, None)
    return VarNode(raw)



class OpNode(NetworkNode):
    """An operator of a ``Network``: ``inputs``, ``outputs`` (network vars), ``params``,
    ``name``; ``opdef`` (the mge op class) and ``type`` are the class's or the loaded
    operator's."""

    opdef = None
    type = None

    def __init__(self):
        self.inputs = []
        self.outputs = []
        self.params = {}
        self.name = None
        self._opr = None

    @property
    def id(self):
        """An id unique among live nodes."""
        return id(self)

    @property
    def priority(self):
        """``(priority, id)`` of the graph operator."""
        if self._opr is not None:
            return (self._opr.priority, self._opr.id)
        return (0, 0)

    @classmethod
    def load(cls, opr):
        """The network operator of the graph operator ``opr``."""
        obj = cls()
        obj.params = opr.params
        obj.name = opr.name
        obj._opr = opr
        if opr.opdef is not None:
            obj.opdef = type(opr.opdef)
        return obj

    def _op(self):
        params = {k: G._unmode(v) for k, v in self.params.items()}
        if self._opr is not None and self._opr.opdef is not None and \
                type(self._opr.opdef) is self.opdef and self._opr.params == self.params:
            return self._opr.opdef
        from ..jit.dump import _op_from_params
        return _op_from_params(self.opdef, params)

    def compile(self):
        """Rebuild the graph operator if the inputs or parameters changed."""
        op = self._op()
        if (self._opr is None or op is not self._opr.opdef
                or len(self._opr.inputs) != len(self.inputs)
                or any(i is not j.var for i, j in zip(self._opr.inputs, self.inputs))):
            ins = [i.var for i in self.inputs]
            graph = ins[0].graph if ins else (self._opr.graph if self._opr else G.Graph())
            outs = G._add_op(graph, op, ins, name=self.name)
            assert len(outs) == len(self.outputs), \
                f"{self}: {len(outs)} outputs, the node has {len(self.outputs)}"
            self._opr = outs[0].owner
            for node, v in zip(self.outputs, outs):
                node._reset_var(v)
                assert node.owner is self

    def add_inp_var(self, x):
        """Append an input var."""
        self.inputs.append(x)

    def add_out_var(self, x):
        """Append an output var."""
        self.outputs.append(x)

    def __repr__(self):
        return "%s{%s}" % (self.name, self.type)


def str_to_mge_class(classname):
    """The network node class of the graph operator type ``classname`` (``ReadOnlyOpNode`` for
    one without its own class)."""
    if classname == "RNGOpr<MegDNNOpr>":
        classname = "RNGOpr"
    cls = getattr(sys.modules[__name__], classname, None)
    if isinstance(cls, type) and issubclass(cls, OpNode):
        return cls
    return ReadOnlyOpNode


class Host2DeviceCopy(OpNode):
    """A model input: ``shape``, ``dtype``, ``name``, ``device``."""

    type = "Host2DeviceCopy"

    def __init__(self, shape=None, dtype=None, name=None, device=None):
        super().__init__()
        self.shape = shape
        self.dtype = dtype
        self.name = name
        self.device = G.as_device(device if device else "xpux")

    @classmethod
    def load(cls, opr):
        """The network node of a graph ``Host2DeviceCopy``."""
        self = cls()
        assert len(opr.outputs) == 1, "wrong number of outputs"
        v = opr.outputs[0]
        self.shape, self.dtype, self.name, self.device = v.shape, v.dtype, v.name, v.device
        self._opr = opr
        return self

    def compile(self, graph):
        """Make the graph input (again) if the graph, device, shape or dtype changed."""
        o = self._opr
        shape = None if self.shape is None else tuple(self.shape)
        if (o is None or o.graph is not graph or o.outputs[0].device != G.as_device(self.device)
                or o.outputs[0].shape != shape or o.outputs[0].dtype != np.dtype(self.dtype)):
            var = graph.make_h2d(dtype=self.dtype, device=self.device, shape=shape,
                                 name=self.name)._node
            self._opr = var.owner
            if not self.outputs:
                self.outputs.append(VarNode(var, owner_opr=self, name=self.name))
            else:
                self.outputs[0]._reset_var(var)
        if self.name is not None:
            self._opr.name = self.name
            self._opr.outputs[0].name = self.name  # (a model input is named by its var)
        assert self.outputs[0].owner is self


class ConstOpBase(OpNode):
    """Base of the constant providers: ``set_value`` changes the value."""

    type = "ConstOpBase"
    _kind = "const"

    def __init__(self, data=None, name=None, device=None, graph=None):
        assert type(self) is not ConstOpBase, "ConstOpBase cannot be instantiated"
        super().__init__()
        self.name = name
        self.graph = graph
        if data is not None:
            self.set_value(data, device)

    @property
    def device(self):
        """The device of the value."""
        return self._opr.outputs[0].device if self._opr else None

    @device.setter
    def device(self, device):
        self.set_value(self.numpy(), device)

    @property
    def shape(self):
        """The shape of the value."""
        return self.outputs[0].shape

    @property
    def dtype(self):
        """The dtype of the value."""
        return self._opr.outputs[0].dtype if self._opr else None

    def numpy(self):
        """The value, a numpy array."""
        return self._opr.payload.numpy()

    def set_value(self, data, device=None):
        """Hold ``data`` (a number, a sequence or an array; float64/int64 become
        float32/int32) from now on, on ``device`` (default: where it was)."""
        assert self.graph is not None, "the node has no graph"
        dev = device if device else self.device
        if not isinstance(data, np.ndarray):
            data = np.array(data)
        if data.dtype == np.float64:
            data = data.astype(np.float32)
        elif data.dtype == np.int64:
            data = data.astype(np.int32)
        var = G._make_const(self.graph, data, data.dtype, dev, self.name, kind=self._kind)
        if not self.outputs:
            self.outputs.append(VarNode(var, owner_opr=self, name=self.name))
        else:
            self.outputs[0]._reset_var(var)
        self._opr = var.owner

    @classmethod
    def load(cls, opr):
        """The network node of a graph constant."""
        self = cls()
        self._opr = opr
        self.name = opr.outputs[0].name
        self.graph = opr.graph
        return self

    def compile(self, graph):
        """Move the constant to ``graph`` if it is in another."""
        assert self.outputs[0].var is self._opr.outputs[0]
        assert self.outputs[0].owner is self
        if self.graph is not graph:
            self.graph = graph
            self.set_value(self.numpy())
        if self.name is not None:
            self.outputs[0].var.name = self.name
            self._opr.name = self.name


class ImmutableTensor(ConstOpBase):
    """A parameter of the network (a constant)."""

    type = "ImmutableTensor"


class SharedDeviceTensor(ConstOpBase):
    """A constant shared with a device tensor."""

    type = "SharedDeviceTensor"
    _kind = "shared"


class ReadOnlyOpNode(OpNode):
    """An operator without a node class of its own: its parameters cannot be edited, its inputs
    can."""

    @classmethod
    def load(cls, opr):
        """The network node of ``opr``."""
        obj = super(ReadOnlyOpNode, cls).load(opr)
        obj.type = opr.type
        return obj

    def compile(self):
        """Rebuild the operator on new inputs."""
        assert self._opr is not None
        if self._opr.opdef is not None:
            return super().compile()
        repl = {}
        for node, old in zip(self.inputs, self._opr.inputs):
            if node.var is not old:
                repl[old] = node.var
        if repl:
            outs = replace_vars(self._opr.outputs, repl)
            for node, v in zip(self.outputs, outs):
                node._reset_var(v)
            self._opr = outs[0].owner


def _node_class(name, type_name, opdef_name=None, doc=None):
    opdef = getattr(_ops, opdef_name or type_name, None)
    cls = type(name, (OpNode,), {
        "type": type_name, "opdef": opdef,
        "__doc__": doc or f"A ``{type_name}`` operator.",
        "__module__": __name__,
    })
    setattr(sys.modules[__name__], name, cls)
    __all__.append(name)
    return cls


# MegEngine's node classes: class name (a graph operator type), ``type``, the mge op class
for _name, _type, _opdef in [
    ("Elemwise", "Elemwise", None), ("ElemwiseMultiType", "ElemwiseMultiType", None),
    ("Reduce", "Reduce", None), ("TypeCvt", "TypeCvt", None),
    ("MatrixInverse", "MatrixInverse", "MatInv"), ("MatrixMul", "MatrixMul", None),
    ("BatchedMatrixMul", "BatchedMatmul", "BatchedMatrixMul"), ("Dot", "Dot", None),
    ("SVD", "SVD", None), ("ConvolutionForward", "Convolution", "Convolution"),
    ("ConvolutionBackwardData", "ConvTranspose", "ConvolutionBackwardData"),
    ("DeformableConvForward", "DeformableConv", None), ("GroupLocalForward", "GroupLocal", None),
    ("PoolingForward", "Pooling", "Pooling"),
    ("AdaptivePoolingForward", "AdaptivePooling", "AdaptivePooling"),
    ("ROIPoolingForward", "ROIPooling", "ROIPooling"),
    ("DeformablePSROIPoolingForward", "DeformablePSROIPooling", None),
    ("ConvBiasForward", "ConvBias", None), ("BatchConvBiasForward", "BatchConvBias", None),
    ("BatchNormForward", "BatchNorm", "BatchNorm"), ("ROIAlignForward", "ROIAlign", "ROIAlign"),
    ("WarpPerspectiveForward", "WarpPerspective", "WarpPerspective"),
    ("WarpAffineForward", "WarpAffine", "WarpAffine"), ("RemapForward", "Remap", "Remap"),
    ("ResizeForward", "Resize", "Resize"), ("Resize3DForward", "Resize3D", "Resize3D"),
    ("IndexingOneHot", "IndexingOneHot", None), ("IndexingSetOneHot", "IndexingSetOneHot", None),
    ("Copy", "Copy", None), ("ArgsortForward", "Argsort", "Argsort"), ("Argmax", "Argmax", None),
    ("Argmin", "Argmin", None), ("CondTake", "CondTake", None), ("TopK", "TopK", None),
    ("NvOf", "NvOf", None), ("UniformRNG", "UniformRNG", None),
    ("GaussianRNG", "GaussianRNG", None), ("Linspace", "Linspace", None), ("Eye", "Eye", None),
    ("GetVarShape", "GetVarShape", None), ("Concat", "Concat", None),
    ("Broadcast", "Broadcast", None), ("Identity", "Identity", None),
    ("NMSKeep", "NMSKeep", None), ("Dimshuffle", "Dimshuffle", None),
    ("Reshape", "Reshape", None), ("AxisAddRemove", "AxisAddRemove", None),
    ("Subtensor", "Subtensor", None), ("SetSubtensor", "SetSubtensor", None),
    ("IncrSubtensor", "IncrSubtensor", None),
    ("IndexingMultiAxisVec", "IndexingMultiAxisVec", None),
    ("IndexingSetMultiAxisVec", "IndexingSetMultiAxisVec", None),
    ("IndexingIncrMultiAxisVec", "IndexingIncrMultiAxisVec", None),
    ("MeshIndexing", "MeshIndexing", None), ("SetMeshIndexing", "SetMeshIndexing", None),
    ("IncrMeshIndexing", "IncrMeshIndexing", None),
    ("BatchedMeshIndexing", "BatchedMeshIndexing", None),
    ("BatchedSetMeshIndexing", "BatchedSetMeshIndexing", None),
    ("BatchedIncrMeshIndexing", "BatchedIncrMeshIndexing", None),
    ("AssertEqual", "AssertEqual", None), ("CvtColorForward", "CvtColor", "CvtColor"),
]:
    _node_class(_name, _type, _opdef)

BatchNormForward.output_idx = -1  # noqa: F821  (made above)


class RNGOpr(OpNode):
    """A random-number operator (MegBrain's ``RNGOpr``): uniform or Gaussian by its
    parameters."""

    @classmethod
    def load(cls, opr):
        """The network node of a random-number operator."""
        obj = super(RNGOpr, cls).load(opr)
        obj.type = type(opr.opdef).__name__ if opr.opdef is not None else opr.type
        return obj
