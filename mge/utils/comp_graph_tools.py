"""MegEngine's ``comp_graph_tools``: walking and rewriting computing graphs
(``mge.core.tensor.megbrain_graph``), and ``GraphInference``, which runs a model file.

The tools take graph vars -- the raw vars of a loaded graph (``load_graph(...).output_vars_list``),
``megbrain_graph.VarNode`` wrappers, or ``mge.utils.network_node`` vars, whose owners are network
operators -- and return raw graph vars, as MegEngine's do.  ``replace_vars``/``replace_oprs``
build new operators for everything that depends on what is replaced (the old graph stays as it
was).  ``GraphInference`` loads a model file written by ``trace.dump``, ``dump_graph`` or
``Network.dump`` (mge's format, see ``mge.jit.dump``) and runs it on numpy inputs.
"""
import collections
import heapq
from collections import OrderedDict

import numpy as np

from ..core.tensor import megbrain_graph as G
from ..core.tensor.megbrain_graph import set_priority_to_id
from ..tensor import Tensor

__all__ = [
    "get_dep_vars", "get_owner_opr_inputs", "get_owner_opr_type", "get_opr_type",
    "graph_traversal", "get_oprs_seq", "replace_vars", "replace_oprs", "set_priority_to_id",
    "find_vars_by_name", "convert_inputs", "convert_outputs", "embed_inputs", "GraphInference",
]


def _plain(x):
    # megbrain_graph.VarNode / OpNode wrappers -> their raw nodes; network nodes stay
    if type(x) is G.VarNode or type(x) is G.OpNode:
        return x._node
    if isinstance(x, G.OpNode):  # InputNode, OutputNode, ...
        return x._node
    return x


def _var_list(var):
    if isinstance(var, (list, tuple)):
        return [_plain(v) for v in var]
    return [_plain(var)]


def get_dep_vars(var, var_type=None):
    """The vars ``var`` (a var or a list) depends on, itself included, breadth first; only
    those whose owner operator's type is ``var_type`` (a name or a list of names) if given."""
    if isinstance(var_type, str):
        var_type = [var_type]
    out, seen = [], set()
    queue = collections.deque(_var_list(var))
    while queue:
        v = queue.popleft()
        if id(v) in seen:
            continue
        seen.add(id(v))
        queue.extend(get_owner_opr_inputs(v))
        if var_type is None or get_owner_opr_type(v) in var_type:
            out.append(v)
    return out


def get_owner_opr_inputs(var):
    """The input vars of the operator computing ``var``."""
    return list(_plain(var).owner.inputs)


def get_owner_opr_type(var):
    """The type name of the operator computing ``var``."""
    return _plain(var).owner.type


def get_opr_type(opr):
    """The type name of an operator."""
    return _plain(opr).type


class _ReadyHeap:
    """Operators ready to run, popped by (priority, id, name): a stable order."""

    def __init__(self, priority):
        self._heap = []
        self._priority = priority
        self._pairs = {}

    def add(self, opr):
        key = (opr.id, opr.name)
        other = self._pairs.setdefault(key, opr)
        if other is not opr:
            raise RuntimeError(f"duplicated (id, name) pair: opr0={other} opr1={opr}")
        heapq.heappush(self._heap, (self._priority(opr), opr.id, opr.name, _Box(opr)))

    def pop_min(self):
        return heapq.heappop(self._heap)[-1].item

    def __bool__(self):
        return bool(self._heap)


class _Box:
    """Holds an operator in a heap entry (never compared: the keys before it differ)."""

    __slots__ = ("item",)

    def __init__(self, item):
        self.item = item

    def __lt__(self, other):
        return False


def graph_traversal(outputs):
    """Walk the graph computing ``outputs``; returns ``(map_oprs, map_vars, var2oprs,
    opr2receivers, indegree2opr, opr2indegree)``: operators and vars by id, each var's
    ``(reader id, input index)`` pairs, each operator's readers, and the operators by number of
    inputs with the inverse map (for :func:`get_oprs_seq`'s topological sort)."""
    outputs = _var_list(outputs)
    map_oprs = collections.defaultdict(set)
    map_vars = collections.defaultdict(set)
    var2oprs = collections.defaultdict(list)
    opr2receivers = collections.defaultdict(list)
    queue = []
    for o in (v.owner for v in outputs):
        if all(o is not q for q in queue):
            queue.append(o)
    visited = {o.id for o in queue}
    indegree2opr = collections.defaultdict(set)
    indegree2opr[0] = _ReadyHeap(lambda op: (op.priority,))
    opr2indegree = {}
    i = 0
    while i < len(queue):
        opr = queue[i]
        i += 1
        map_oprs[opr.id] = opr
        for idx, v in enumerate(opr.inputs):
            map_vars[v.id] = v
            var2oprs[v.id].append((opr.id, idx))
            prev = v.owner
            if prev.id not in visited:
                visited.add(prev.id)
                queue.append(prev)
            opr2receivers[prev.id].append(opr.id)
        n = len(opr.inputs)
        indegree2opr[n].add(opr if n == 0 else opr.id)
        opr2indegree[opr.id] = n
    return map_oprs, map_vars, var2oprs, opr2receivers, indegree2opr, opr2indegree


_PROVIDERS = ("ImmutableTensor", "Host2DeviceCopy")


def get_oprs_seq(outputs, prune_reshape=False, prune_immtensor=True):
    """The operators computing ``outputs`` in an execution order (a topological sort by
    priority and id, each data/parameter provider moved just before its first reader).

    Args:
        outputs: the model's output vars.
        prune_reshape: leave out the operators that only compute a ``Reshape``'s target shape.
        prune_immtensor: leave out ``ImmutableTensor`` operators.
    """
    outputs = _var_list(outputs)
    map_oprs, _, var2oprs, opr2receivers, indegree2opr, opr2indegree = graph_traversal(outputs)
    seq = []
    remaining = len(map_oprs)
    ready = indegree2opr[0]
    while ready:
        opr = ready.pop_min()
        remaining -= 1
        if opr.type != "ImmutableTensor" or not prune_immtensor:
            seq.append(opr)
        for rid in opr2receivers[opr.id]:
            n = opr2indegree[rid]
            indegree2opr[n].remove(rid)
            n -= 1
            if n == 0:
                indegree2opr[0].add(map_oprs[rid])
            else:
                indegree2opr[n].add(rid)
            opr2indegree[rid] = n
    assert remaining == 0, f"there are {remaining} remaining nodes; cyclic graph?"

    # providers next to their first reader
    providers = [o for o in seq if o.type in _PROVIDERS]
    ordered = []
    for o in seq:
        if o.type in _PROVIDERS:
            continue
        for v in o.inputs:
            p = v.owner
            if p.type in _PROVIDERS and any(p is q for q in providers):
                ordered.append(p)
                providers = [q for q in providers if q is not p]
        ordered.append(o)
    seq = ordered + providers

    if prune_reshape:
        seq = _prune_reshape(outputs, seq, {k: list(v) for k, v in var2oprs.items()})
    return seq


def _prune_reshape(outputs, seq, var2oprs):
    # a Reshape's target shape is known when a model runs: the operators that only compute
    # it (and nothing else) are left out
    marked = set()
    visited = set()

    def prune(opr, reader):
        useless = True
        for out in opr.outputs:
            if "workspace" in (out.name or ""):
                continue
            idx = next((i for i, v in enumerate(reader.inputs) if v is out), None)
            if idx is not None and (reader.id, idx) in var2oprs.get(out.id, []):
                var2oprs[out.id].remove((reader.id, idx))
            useless = useless and not var2oprs.get(out.id)
        if useless:
            marked.add(opr.id)
            for prev in {id(v.owner): v.owner for v in opr.inputs}.values():
                if (prev.id, opr.id) not in visited:
                    visited.add((prev.id, opr.id))
                    prune(prev, opr)

    for v in get_dep_vars(outputs, "Reshape"):
        opr = v.owner
        if len(opr.inputs) > 1:
            prune(opr.inputs[1].owner, opr)
    return [o for o in seq if o.id not in marked]


def _graph_var(v, what):
    v = _plain(v)
    if isinstance(v, G.VarNode):  # a network var: its graph var
        v = v.var
    if not isinstance(v, G._Var):
        raise TypeError(f"{what}: expected graph vars, got {type(v).__name__}")
    return v


def _graph_opr(o, what):
    o = _plain(o)
    if hasattr(o, "_opr") and not isinstance(o, G._Opr):  # a network operator
        o = o._opr
    if not isinstance(o, G._Opr):
        raise TypeError(f"{what}: expected graph operators, got {type(o).__name__}")
    return o


def replace_vars(dst, varmap):
    """New vars for ``dst`` in which each var of ``varmap`` (a dict or pairs ``old -> new``) is
    replaced and every operator depending on one is rebuilt; returns the new vars (raw)."""
    dst = [_graph_var(v, "replace_vars") for v in dst]
    pairs = getattr(varmap, "items", lambda: varmap)()
    repl = {_graph_var(a, "replace_vars"): _graph_var(b, "replace_vars") for a, b in pairs}
    return G._replace(dst, var_map=repl)


def replace_oprs(dst, oprmap):
    """New vars for ``dst`` in which each operator of ``oprmap`` (``old -> new``, with as many
    outputs) is replaced; returns the new vars (raw)."""
    dst = [_graph_var(v, "replace_oprs") for v in dst]
    pairs = getattr(oprmap, "items", lambda: oprmap)()
    repl = {_graph_opr(a, "replace_oprs"): _graph_opr(b, "replace_oprs") for a, b in pairs}
    return G._replace(dst, opr_map=repl)


def find_vars_by_name(dst, names):
    """The vars named ``names`` among ``dst`` and what they depend on, in the order of
    ``names`` (``AssertionError`` naming those not found)."""
    dst = _var_list(dst)
    wanted = list(names)
    found = {}
    for v in get_dep_vars(dst) + dst:
        if v.name in wanted:
            found[v.name] = v
            wanted.remove(v.name)
    assert not wanted, f"Can not find varnode {wanted} in this model"
    return [found[n] for n in names]


def convert_inputs(dst, inputs=None):
    """Replace the ``Host2DeviceCopy`` inputs (or ``inputs``) of the graph of ``dst`` by
    ``InputNode`` objects; returns ``(new dst vars, {input name: InputNode})``."""
    dst = [_graph_var(v, "convert_inputs") for v in dst]
    if inputs is None:
        inputs = get_dep_vars(dst, "Host2DeviceCopy")
    input_dict = OrderedDict()
    repl = {}
    for inp in inputs:
        inp = _graph_var(inp, "convert_inputs")
        node = G.InputNode(device=inp.device, dtype=inp.dtype, shape=inp.shape,
                           graph=inp.graph)
        node.name = inp.name
        node._node.outputs[0].name = inp.name
        input_dict[inp.name] = node
        repl[inp] = node._node.outputs[0]
    new = replace_vars(dst, repl)
    for old, nv in zip(dst, new):
        nv.name = old.name
    return new, input_dict


def convert_outputs(dst):
    """Put an ``OutputNode`` on each var of ``dst``; returns ``(their vars, {name:
    OutputNode})``."""
    dst = [_graph_var(v, "convert_outputs") for v in dst]
    output_dict = OrderedDict((v.name, G.OutputNode(v)) for v in dst)
    return [o._node.outputs[0] for o in output_dict.values()], output_dict


def embed_inputs(dst, data, inputs=None):
    """Replace the ``Host2DeviceCopy`` inputs (or ``inputs``) by constants holding ``data``
    (arrays, in order); returns ``(new dst vars, {input name: constant var})``."""
    dst = [_graph_var(v, "embed_inputs") for v in dst]
    if inputs is None:
        inputs = get_dep_vars(dst, "Host2DeviceCopy")
    assert len(data) == len(inputs), \
        f"embed_inputs: {len(data)} values for {len(inputs)} inputs"
    input_dict = OrderedDict()
    repl = {}
    for inp, d in zip(inputs, data):
        inp = _graph_var(inp, "embed_inputs")
        c = G._make_const(inp.graph, np.asarray(d), inp.dtype, inp.device, inp.name,
                          kind="shared")
        c.name = inp.name
        input_dict[inp.name] = c
        repl[inp] = c
    new = replace_vars(dst, repl)
    for old, nv in zip(dst, new):
        nv.name = old.name
    return new, input_dict


class GraphInference:
    """Load a model file and run it (MegEngine's interface).

    Args:
        file: a path or a binary file object (written by ``trace.dump``, ``dump_graph`` or
            ``Network.dump``).
        outputs: names of the outputs to compute (default: the model's outputs).
        profiling, optimize_for_inference: accepted for MegEngine's signature (mge runs the
            graph's operators as loaded).
    """

    def __init__(self, file, outputs=None, profiling=False, optimize_for_inference=False,
                 **kwargs):
        ret = G.load_graph(file)
        self._graph, nodes = ret.graph, ret.output_vars_list
        if outputs is not None:
            nodes = find_vars_by_name(nodes, outputs)
        self._origin_outputs = nodes
        nodes, found = convert_inputs(nodes)
        # the inputs in the model's order (its signature: what positional inputs follow), the
        # ones its outputs do not need included (taken and ignored)
        self._inp_dict = OrderedDict()
        for v in getattr(self._graph, "_file_inputs", ()):
            node = found.pop(v.name, None)
            if node is None:
                node = G.InputNode(device=v.device, dtype=v.dtype, shape=v.shape,
                                   graph=self._graph)
                node.name = v.name
            self._inp_dict[v.name] = node
        self._inp_dict.update(found)
        nodes, self._oup_dict = convert_outputs(nodes)
        self._func = self._graph.compile(nodes)

    def run(self, *inp_args, inp_dict=None):
        """Run on ``inp_args`` (in the order of the model's inputs: the traced function's
        arguments) and ``inp_dict`` (by input name); returns an ``OrderedDict`` ``{output name:
        numpy array}``."""
        assert len(inp_args) <= len(self._inp_dict), \
            "This model expects {} inputs".format(len(self._inp_dict))
        keys = list(self._inp_dict)
        inputs = dict(zip(keys, inp_args))
        if inp_dict is not None:
            inputs.update(inp_dict)
        assert inputs.keys() == self._inp_dict.keys(), \
            "This model expects inputs {}, but gets inputs {}".format(keys, list(inputs))
        for key, node in self._inp_dict.items():
            value = inputs[key]
            if isinstance(value, Tensor):
                t = value if value.dtype == node.dtype else value.astype(node.dtype)
            else:
                t = Tensor(np.asarray(value), dtype=node.dtype, device=node.device)
            node.set_value(t._dev_tensor())
        self._func.execute()
        self._func.wait()
        return OrderedDict((k, np.asarray(o.get_value().numpy()))
                           for k, o in self._oup_dict.items())
