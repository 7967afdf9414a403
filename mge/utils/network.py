"""MegEngine's ``network``: ``Network``, an editable view of a model file's computing graph.

``Network.load(file)`` reads a model written by ``trace.dump``, ``dump_graph`` or
``Network.dump`` (mge's format, ``mge.jit.dump``) into network nodes
(``mge.utils.network_node``): find vars and operators (``var_filter``, ``opr_filter``,
``get_var_by_name``, ...), build new ones with mge functions on its vars (``F.relu(var)``), make
inputs and constants, replace vars or operators, add and remove outputs, then ``dump`` a new model
file, which ``GraphInference`` or ``mge.jit.load`` runs.

MegBrain-only options of ``dump`` (``optimize_for_inference``'s layout passes such as
``enable_nchw4``, ``strip_info_file``'s code stripping, ``dump_format``) are accepted and recorded
in the file's metadata as MegEngine records them; ``enable_io16xc32``/``enable_ioc16`` are
applied (float16 inputs to the float32 operators), the layout passes are not (see
``docs/differences.rst``).
"""
import collections
import fnmatch
import itertools
import logging
import pickle
import re
from collections import OrderedDict

from ..core._trace_option import set_symbolic_shape as _set_symbolic_shape
from ..core.tensor import megbrain_graph as G
from .comp_graph_tools import get_dep_vars, get_opr_type, get_oprs_seq
from .network_node import (
    ConstOpBase, Host2DeviceCopy, ImmutableTensor, NetworkNode, OpNode, VarNode,
    str_to_mge_class,
)

__all__ = ["Network", "set_symbolic_shape", "as_varnode", "as_oprnode", "NodeFilter",
           "NodeFilterType", "NodeFilterNotType", "NodeFilterCheckType", "NodeFilterHasInput",
           "NodeFilterName"]

logger = logging.getLogger(__name__)


class Network:
    """A computing graph as network nodes: see the module's docstring.

    Attributes: ``input_vars`` and ``output_vars`` (network ``VarNode`` objects), ``graph`` (the
    ``megbrain_graph.Graph``), ``all_oprs``/``all_vars`` (what the outputs depend on, in an
    execution order) and ``metadata``.
    """

    def __init__(self):
        self.input_vars = []
        self._orig_inputs = []
        self.output_vars = []
        self._orig_outputs = []
        self.all_oprs_map = OrderedDict()
        self.all_vars_map = OrderedDict()
        self.graph = G.Graph()
        self._metadata = None

    @property
    def metadata(self):
        """The file's metadata as a dict (``user_info``, ``graph_modified``,
        ``optimized_for_inference`` and the optimize options), or ``None`` where it has none.
        A ``user_info`` that ``Network.dump`` had to pickle (not JSON data) is unpickled here:
        load only files you trust."""
        m = self._metadata
        if m is None:
            return None
        ret = {}
        if "user_info_pickle" in m:
            try:
                ret["user_info"] = pickle.loads(m["user_info_pickle"])
            except Exception:  # pylint: disable=broad-except
                logger.warning("can't parse user info by pickle, so return the original "
                               "bytes object!")
                ret["user_info"] = m["user_info_pickle"]
        else:
            ret["user_info"] = m.get("user_info")
        ret["graph_modified"] = m["graph_modified"]
        ret["optimized_for_inference"] = m["optimized_for_inference"]
        if ret["optimized_for_inference"]:
            ret.update({k: True for k in m.get("optimize_options", [])})
        return ret

    @classmethod
    def load(cls, model_path, outspec=None):
        """Load a model file (a path or a binary file object) as a ``Network``; ``outspec``:
        names of the vars to take as outputs instead of the model's."""
        self = cls()
        ret = G.load_graph(model_path)
        outputs, self._metadata = ret.output_vars_list, ret.metadata
        if outspec is not None:
            wanted = list(outspec)
            found = {}
            for v in get_dep_vars(outputs) + outputs:
                if v.name in wanted:
                    found[v.name] = v
                    wanted.remove(v.name)
            assert not wanted, "Can not find {} in this model".format(wanted)
            outputs = [found[n] for n in outspec]
        self._orig_outputs = outputs
        for x in outputs:
            self.output_vars.append(self._get_var(x))
        self.add_dep_oprs()
        # the model's inputs the outputs do not depend on stay inputs (its signature)
        for x in getattr(ret.graph, "_file_inputs", ()):
            if all(x is not y for y in self._orig_inputs):
                self._orig_inputs.append(x)
        for x in self._orig_inputs:
            self.input_vars.append(self._get_var(x))
        self.graph = ret.graph
        return self

    def _compile(self):
        self.all_oprs_map = {}
        self.all_vars_map = {}
        for opr in self.all_oprs:
            if isinstance(opr, (ConstOpBase, Host2DeviceCopy)):
                opr.compile(self.graph)
            else:
                opr.compile()
            if opr.name is not None:
                opr._opr.name = opr.name
            self.all_oprs_map[opr._opr] = opr
            for o in opr.outputs:
                self.all_vars_map[o.var] = o

    def optimize_for_inference(self, dest_vars, **kwargs):
        """``megbrain_graph.optimize_for_inference`` on network vars; returns network vars."""
        if not isinstance(dest_vars, (list, tuple)):
            dest_vars = [dest_vars]
        new, _ = G.optimize_for_inference([G.VarNode(v.var) for v in dest_vars], **kwargs)
        return [self._get_var(v._node) for v in new]

    def dump(self, file, *, keep_var_name=1, keep_opr_name=False, keep_param_name=False,
             keep_opr_priority=False, strip_info_file=None, append_json=False,
             optimize_for_inference=True, append=False, user_info=None, enable_metadata=True,
             dump_format=None, compat_older_version=None, **kwargs):
        """Write the network as a model file (a path or a binary file object); returns the
        ``CompGraphDumpResult``.

        ``keep_*``: which names the file keeps (``dump_graph``); ``user_info``: any picklable
        value kept in the metadata (``enable_metadata=False``: no metadata);
        ``optimize_for_inference`` with its ``enable_*`` options: see
        ``megbrain_graph.optimize_for_inference``.  ``append`` (with a path) writes after the
        file's content.  ``dump_format`` and ``compat_older_version`` are accepted and ignored.
        """
        if compat_older_version:
            assert compat_older_version.strip() == "8.14", \
                "Forward compatibility for older version only support 8.14 currently."
        self._compile()
        out = []
        for v in self.output_vars:
            gv = G.VarNode(v.var)
            gv.name = v.name
            out.append(gv)
        if kwargs.pop("arg_names", False):
            logger.warning('"arg_names" is not supported in Network.dump, rename input vars '
                           "directly")
        if kwargs.pop("output_names", False):
            logger.warning('"output_names" is not supported in Network.dump, rename output vars '
                           "directly")
        options = []
        if optimize_for_inference:
            out, code = G.optimize_for_inference(out, **kwargs)
            options = sorted(G.deserialize_infer_option(code))
        metadata = None
        if enable_metadata:
            metadata = {"graph_modified": True, "optimized_for_inference":
                        bool(optimize_for_inference), "optimize_options": options,
                        "user_info": user_info}
        G.set_priority_to_id(out)
        needed = {id(v.var) for v in self.all_vars}
        extra = [v.var for v in self.input_vars
                 if v.var.owner.type == "Host2DeviceCopy" and id(v.var) not in needed]
        data, info = G._dump_graph(
            out, extra, keep_var_name=keep_var_name, keep_opr_name=keep_opr_name,
            keep_param_name=keep_param_name, keep_opr_priority=keep_opr_priority,
            strip_info_file=strip_info_file, append_json=append_json, metadata=metadata)
        if isinstance(file, str):
            with open(file, "ab" if append else "wb") as f:
                f.write(data)
        else:
            file.write(data)
        return info

    def make_const(self, data, name=None, device=None):
        """A parameter (an ``ImmutableTensor`` node) holding ``data``; returns its var."""
        node = ImmutableTensor(data, name, device, self.graph)
        node.compile(self.graph)
        return node.outputs[0]

    def make_input_node(self, shape, dtype, name=None, device=None):
        """A model input (a ``Host2DeviceCopy`` node); returns its var."""
        node = Host2DeviceCopy(shape, dtype, name, device)
        node.compile(self.graph)
        return node.outputs[0]

    def add_output(self, *vars):
        """Add vars to the outputs (their operators join the network)."""
        if not all(v.owner for v in vars):
            self.add_dep_oprs(*vars)
        for v in vars:
            if not any(v is o for o in self.output_vars):
                self.output_vars.append(v)

    def remove_output(self, *vars):
        """Remove vars from the outputs."""
        for v in vars:
            removed = False
            for i, o in enumerate(self.output_vars):
                if v is o:
                    self.output_vars.pop(i)
                    removed = True
                    break
            if not removed:
                logger.warning("Failed to remove {}({}). Please check whether this node is in "
                               "the output list.".format(v.name, id(v)))

    def add_dep_oprs(self, *vars):
        """Take into the network the operators ``vars`` (default: the outputs) depend on that
        are not in it yet; returns ``vars`` as a list."""
        if not vars:
            vars = self.output_vars
        assert all(isinstance(v, VarNode) for v in vars), "Only support add VarNode"
        queue = collections.deque(vars)
        while queue:
            cur = queue.popleft()
            if cur.owner is not None:
                continue
            if cur.name is None:
                cur.name = cur.var.name
            self.all_vars_map[cur.var] = cur
            opr = cur.var.owner
            if get_opr_type(opr) == "Host2DeviceCopy":
                self._orig_inputs.extend(opr.outputs)
            cur.owner = self._add_opr(opr)
            if cur.owner is None:
                cur.owner = self.all_oprs_map[opr]
                continue
            queue.extend(cur.owner.inputs)
        return list(vars)

    def modify_opr_names(self, modifier):
        """Rename the operators: ``modifier`` a prefix (``"net"`` gives ``"net.<name>"``) or a
        function from name to name."""
        if isinstance(modifier, str):
            prefix = modifier
            modifier = lambda v: "{}.{}".format(prefix, v)  # noqa: E731
        assert callable(modifier)
        for o in self.all_oprs:
            new = modifier(o.name)
            assert isinstance(new, str)
            o.name = new

    def reset_batch_size(self, batchsize, *, blacklist=()):
        """Set the first dimension of the inputs (except those named in ``blacklist``) to
        ``batchsize``; they must agree on it."""
        blacklist = set(blacklist)
        prev = None
        for i in self.data_providers_filter:
            if i.name in blacklist:
                blacklist.remove(i.name)
                continue
            shp = list(i.shape)
            if prev is None:
                prev = shp[0]
            else:
                assert prev == shp[0], "batchsize mismatch: batchsize={} shape={} dp={}".format(
                    prev, shp, i.name)
            shp[0] = batchsize
            i.shape = tuple(shp)
        self._compile()
        assert prev is not None, "no data provider found"
        assert not blacklist, "unused items in blacklist: {}".format(blacklist)

    def replace_vars(self, repl_dict):
        """Replace vars: each reader of a key reads its value instead."""
        if not all(v.owner for v in repl_dict.values()):
            self.add_dep_oprs(*list(repl_dict.values()))
        for var in self.all_vars:
            if var in repl_dict:
                repl = repl_dict[var]
                if repl is var:
                    continue
                for opnode in var.users:
                    assert any(var is i for i in opnode.inputs)
                    opnode.inputs = [repl if var is i else i for i in opnode.inputs]
                    if opnode not in repl.users:
                        repl.users.append(opnode)
                var.users.clear()
        # an input replaced by another input: the model's input list follows
        swapped = []
        for v in self.input_vars:
            r = next((r for k, r in repl_dict.items() if k is v), v)
            if isinstance(r.owner, Host2DeviceCopy) or r.var.owner.type == "Host2DeviceCopy":
                swapped.append(r)
        self.input_vars = swapped
        self._compile()

    def replace_oprs(self, repl_dict):
        """Replace operators: the outputs of each key become the value's (same count)."""
        for opr in self.all_oprs:
            if opr in repl_dict:
                new = repl_dict[opr]
                assert len(opr.outputs) == len(new.outputs), \
                    "can not replace {} with {}".format(type(opr), type(new))
                for i, var in enumerate(opr.outputs):
                    var.owner = new
                    src = new.outputs[i]
                    var._name = src._name
                    var._users = src._users
                    var._reset_var(src.var)
                    var.owner = new
                new.outputs = opr.outputs
        self._compile()

    def get_opr_by_type(self, oprcls, unique=True):
        """The operators of node class ``oprcls`` (the one, with ``unique``)."""
        assert issubclass(oprcls, OpNode)
        rst = self.opr_filter.type(oprcls).as_list()
        if unique:
            assert len(rst) == 1, "{} operators of type {} found".format(len(rst), oprcls)
            (rst,) = rst
        return rst

    def get_opr_by_name(self, name, unique=True):
        """The operators named ``name`` (a glob pattern; the one, with ``unique``)."""
        rst = self.opr_filter.name(name).as_list()
        if unique:
            assert len(rst) == 1, "{} operators of type {} found".format(len(rst), name)
            (rst,) = rst
        return rst

    def get_var_by_name(self, name, unique=True):
        """The vars named ``name`` (a glob pattern; the one, with ``unique``)."""
        rst = self.var_filter.name(name).as_list()
        if unique:
            assert len(rst) == 1, "{} operators of type {} found".format(len(rst), name)
            (rst,) = rst
        return rst

    def get_var_receive_oprs(self, var):
        """The operators reading ``var``."""
        return self.opr_filter.has_input(var).as_list()

    def get_dep_oprs(self, var):
        """The operators ``var`` depends on."""
        return get_oprs_seq(var, False, False)

    @property
    def opr_filter(self):
        """A :class:`NodeFilter` over all operators."""
        oprs = self.all_oprs
        return NodeFilter(itertools.islice(oprs, len(oprs)))

    @property
    def var_filter(self):
        """A :class:`NodeFilter` over all vars."""
        vars = self.all_vars
        return NodeFilter(itertools.islice(vars, len(vars)))

    @property
    def params_filter(self):
        """A :class:`NodeFilter` over the parameters (``ImmutableTensor`` operators)."""
        return self.opr_filter.param_provider()

    @property
    def data_providers_filter(self):
        """A :class:`NodeFilter` over the inputs (``Host2DeviceCopy`` operators)."""
        return self.opr_filter.data_provider()

    @property
    def dest_vars(self):
        """The output vars."""
        return self.output_vars

    @property
    def all_oprs(self):
        """The operators the outputs depend on, in an execution order."""
        return get_oprs_seq(self.output_vars, False, False)

    @property
    def all_vars(self):
        """The vars the outputs depend on."""
        return get_dep_vars(self.output_vars)

    @property
    def all_vars_dict(self):
        """The vars by name."""
        return self.var_filter.as_dict()

    @property
    def all_oprs_dict(self):
        """The operators by name."""
        return self.opr_filter.as_dict()

    def _add_opr(self, opr):
        assert isinstance(opr, G._Opr)
        if opr not in self.all_oprs_map:
            node = str_to_mge_class(get_opr_type(opr)).load(opr)
            self.all_oprs_map[opr] = node
            for v in opr.inputs:
                vn = self._get_var(v)
                node.add_inp_var(vn)
                vn.users.append(node)
            for v in opr.outputs:
                node.add_out_var(self._get_var(v))
            return node
        if len(opr.outputs) > 1:
            node = self.all_oprs_map[opr]
            for i, out in enumerate(node.outputs):
                if out.var in self.all_vars_map:
                    node.outputs[i] = self.all_vars_map[out.var]
        return None

    def _get_opr(self, x):
        return self.all_oprs_map.get(x)

    def _get_var(self, x):
        assert isinstance(x, G._Var)
        if x not in self.all_vars_map or self.all_vars_map[x].var is not x:
            self.all_vars_map[x] = VarNode.load(x, self._get_opr(x.owner))
        return self.all_vars_map[x]


def set_symbolic_shape(option):
    """Set whether network vars' ``shape`` is a var (``True``) or a tuple; returns the previous
    setting."""
    return _set_symbolic_shape(option)


def as_varnode(obj):
    """A network ``VarNode`` from a var, an operator with one output, or a one-element
    iterable of those."""
    if type(obj) is VarNode:
        return obj
    if isinstance(obj, OpNode):
        assert len(obj.outputs) == 1, (
            "operator {} must have one output to be converted to VarNode; got {} actually"
            .format(obj, len(obj.outputs)))
        ret = obj.outputs[0]
        assert type(ret) is VarNode
        return ret
    assert isinstance(obj, collections.abc.Iterable), \
        "{} is not compatible with VarNode".format(obj)
    val = list(obj)
    assert len(val) == 1, "can not convert sequence of length {} to VarNode ({})".format(
        len(val), (lambda s: s if len(s) < 50 else s[:50] + " ...")(str(val)))
    return as_varnode(val[0])


def as_oprnode(obj):
    """A network ``OpNode`` from an operator, a var (its owner), or a one-element iterable of
    those."""
    if type(obj) is VarNode:
        return obj.owner
    if isinstance(obj, OpNode):
        return obj
    assert isinstance(obj, collections.abc.Iterable), \
        "{} is not compatible with OpNode".format(obj)
    val = list(obj)
    assert len(val) == 1, "can not convert sequence of length {} to OpNode({})".format(
        len(val), val)
    return as_oprnode(val[0])


class NodeFilter:
    """An iterator over network nodes, with chainable filters (``type``, ``not_type``,
    ``name``, ``has_input``, ``param_provider``, ``data_provider``) and consumers
    (``as_list``, ``as_unique``, ``as_dict``, ``as_count``).

    ``node_iter``: an iterable of nodes, or a var / operator (then what it depends on).
    """

    def __init__(self, node_iter):
        if isinstance(node_iter, VarNode):
            oprs = get_oprs_seq(node_iter, False, False)
            node_iter = itertools.islice(oprs, len(oprs) - 1)
        if isinstance(node_iter, OpNode):
            oprs = get_oprs_seq(node_iter.inputs, False, False)
            node_iter = itertools.islice(oprs, len(oprs) - 1)
        assert isinstance(node_iter, collections.abc.Iterable)
        if not isinstance(node_iter, NodeFilter) and type(self) is not NodeFilterCheckType:
            node_iter = NodeFilterCheckType(node_iter, NetworkNode)
        self._iter = node_iter

    @classmethod
    def make_all_deps(cls, *dest_vars):
        """A filter over everything ``dest_vars`` depend on."""
        return cls(list(get_oprs_seq(dest_vars, False, False)))

    def __iter__(self):
        return iter(self._iter)

    def type(self, node_type):
        """Only nodes of class ``node_type``."""
        return NodeFilterType(self, node_type)

    def check_type(self, node_type):
        """Raise ``TypeError`` for a node not of class ``node_type``."""
        return NodeFilterCheckType(self, node_type)

    def not_type(self, node_type):
        """Only nodes not of class ``node_type``."""
        return NodeFilterNotType(self, node_type)

    def param_provider(self):
        """Only parameters (``ImmutableTensor``)."""
        return self.type(ImmutableTensor)

    def data_provider(self):
        """Only inputs (``Host2DeviceCopy``)."""
        return self.type(Host2DeviceCopy)

    def name(self, pattern, ignorecase=True):
        """Only nodes whose name matches the glob ``pattern``."""
        return NodeFilterName(self, pattern, ignorecase)

    def has_input(self, var):
        """Only operators reading ``var``."""
        return NodeFilterHasInput(self, var)

    def as_list(self):
        """The nodes as a list."""
        return list(self)

    def as_unique(self):
        """The one node (``ValueError`` otherwise)."""
        (opr,) = self
        return opr

    def as_dict(self):
        """An ordered dict name -> node."""
        return collections.OrderedDict((i.name, i) for i in self)

    def as_count(self):
        """The number of nodes."""
        return sum(1 for _ in self)


class NodeFilterType(NodeFilter):
    """See :meth:`NodeFilter.type`."""

    def __init__(self, node_iter, node_type):
        assert issubclass(node_type, NetworkNode), "bad opr type: {}".format(node_type)
        super().__init__(node_iter)
        self._node_type = node_type

    def __iter__(self):
        for i in self._iter:
            if isinstance(i, self._node_type):
                yield i


class NodeFilterNotType(NodeFilterType):
    """See :meth:`NodeFilter.not_type`."""

    def __iter__(self):
        for i in self._iter:
            if not isinstance(i, self._node_type):
                yield i


class NodeFilterCheckType(NodeFilterType):
    """See :meth:`NodeFilter.check_type`."""

    def __iter__(self):
        for i in self._iter:
            if not isinstance(i, self._node_type):
                raise TypeError("all nodes should be {}; got {!r}".format(self._node_type, i))
            yield i


class NodeFilterHasInput(NodeFilter):
    """See :meth:`NodeFilter.has_input`."""

    def __init__(self, node_iter, var):
        var = as_varnode(var)
        super().__init__(node_iter)
        self.var = var

    def __iter__(self):
        for i in self._iter:
            assert isinstance(i, OpNode), \
                "has_input() must be used with OpNode; got {!r}".format(i)
            if any(self.var is v for v in i.inputs):
                yield i


class NodeFilterName(NodeFilter):
    """See :meth:`NodeFilter.name`."""

    def __init__(self, node_iter, pattern, ignorecase):
        super().__init__(node_iter)
        self.pattern = pattern
        self._re = self.make_re(pattern, ignorecase)

    @classmethod
    def make_re(cls, pattern, ignorecase=True):
        """The regular expression of a glob pattern."""
        assert isinstance(pattern, str), "bad pattern: {!r}".format(pattern)
        return re.compile(fnmatch.translate(pattern), re.IGNORECASE if ignorecase else 0)

    def __iter__(self):
        for i in self._iter:
            if self.pattern == i.name or self._re.match(i.name or ""):
                yield i
