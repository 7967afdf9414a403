"""The names ``trace.dump`` gives the ops and vars of a recording (MegEngine's rules).

MegEngine names every op a trace records after the module scopes around it and its kind --
``"simple.linear.MatrixMul"``, ``"simple.ADD"`` (an ``Elemwise`` is named by its mode) -- and
every var after the tensor it holds, where that has a name, or else after the op computing it.
When it dumps a trace it builds the graph, then renames the ops that share a name, in the order a
depth-first walk from the outputs reaches them, ``name[0]``, ``name[1]``, ... (their outputs'
names follow), and finally gives the outputs the names the user asked for.  The model file keeps
op names with ``keep_opr_name`` and var names with ``keep_var_name`` >= 1; the names of the
inputs always.

:func:`names_for_dump` computes those names for a ``trace`` plugin ``Recording``, from what it
noted while recording (``Recording.op_scopes``: the scope of each op; ``Recording.var_names``:
the names of arguments, captured tensors and renamed results, see
:func:`mge.utils.naming.tensor_name`).  Nothing here runs while a trace records or replays.

The rules, as MegEngine 1.13 applies them:

* an argument (a graph input) is named ``arg_names[i]`` when the user gave ``arg_names``, else
  by its tensor's own name (``Tensor(..., name="data")``), else by its default name
  (``arg_<i>``, a keyword argument by its keyword);
* a captured tensor (a parameter, a constant) by its tensor's name: a tensor held by a module is
  named after the module's path (``"simple.k"``, ``"linear.weight"``); an unnamed one has none
  (the graph's default, ``const<2>``, applies);
* an op by ``scope.kind`` (``kind`` alone outside modules); its output by the name the user gave
  that tensor during the call (``y.name = "o_y"``, the last one given), else by the op's name
  (``"name:o<i>"`` for the outputs of an op with several);
* duplicates: ops, inputs and constants sharing a name get ``[i]`` suffixes, in the order of a
  post-order walk from the outputs (inputs in order; the two inputs of a commutative
  ``Elemwise`` -- ADD, MUL, MAX, MIN, EQ, ... -- in the order their vars were made: arguments,
  then captured tensors, then op outputs, as MegBrain sorts them); the first occurrence of the
  old name in each of their output names becomes the new one;
* the outputs last: ``output_names`` (non-empty entries) replace their names.
"""
import contextlib
import contextvars

__all__ = ["names_for_dump", "dump_request", "graph_inputs", "opr_name", "COMMUTATIVE_MODES"]

# what the user asked trace.dump for (see dump_request): (prefer_input_names, output names)
_REQUEST = contextvars.ContextVar("mge_jit_naming_request", default=None)

#: Elemwise modes whose two inputs MegBrain sorts by var id (MegDNN's ``commutable`` modes)
COMMUTATIVE_MODES = frozenset({"ADD", "FUSE_ADD_RELU", "FUSE_ADD_SIGMOID", "FUSE_ADD_TANH",
                               "MUL", "RMULH", "MAX", "MIN", "EQ", "LOG_SUM_EXP"})

# mge's op classes that are MegEngine's ops under another name (OpDef.make_name's)
_OP_RENAMES = {"CumSum": "Cumsum", "MatInv": "MatrixInverse", "Pad": "Padding",
               "Resize3D": "Resize", "QuantizedTypeCvt": "TypeCvt",
               "QuantizedMatrixMul": "MatrixMul",
               "QuantizedConvolutionBackwardData": "ConvolutionBackwardData"}
# mge's op classes named by their mode, as MegEngine's Elemwise and ElemwiseMultiType ("QADD")
_BY_MODE = frozenset({"Elemwise", "QuantizedElemwise", "ElemwiseMultiType"})
# mge's Elemwise modes whose MegEngine name is not their upper-case spelling
_MODE_RENAMES = {"neg": "NEGATE", "logaddexp": "LOG_SUM_EXP", "hswish": "H_SWISH",
                 "hswish_grad": "H_SWISH_GRAD"}


def opr_name(op):
    """MegEngine's name of the kind of ``op`` (an mge op), as ``OpDef.make_name`` gives it
    without a scope: an ``Elemwise`` by its mode (``"ADD"``, ``"RELU"``), any other op by its
    class (``"MatrixMul"``, ``"TypeCvt"``); mge's ops that MegEngine has under another name get
    that name (``CumSum`` is ``"Cumsum"``), ops of mge's own keep their class name."""
    cls = type(op).__name__
    if cls in _BY_MODE:
        mode = op.mode
        return _MODE_RENAMES.get(mode) or str(mode).upper()
    return _OP_RENAMES.get(cls, cls)


def _var_ranks(rec):
    # var -> the order MegBrain makes the vars of a dumped trace in: the inputs (in order), the
    # captured tensors, then the ops' outputs (both by var number, which follows the recording)
    rank = {}
    for i, v in enumerate(rec.args):
        rank.setdefault(v, (0, i))
    for v in rec.externals:
        rank.setdefault(v, (1, v))
    for _, _, outs in rec.ops:
        for v in outs:
            rank.setdefault(v, (2, v))
    return rank


def _commutative(op, ins):
    return (len(ins) == 2 and type(op).__name__ == "Elemwise"
            and opr_name(op) in COMMUTATIVE_MODES)


def graph_inputs(recording, k, ranks=None):
    """The input vars of op ``k`` of ``recording`` in the order MegBrain's graph holds them:
    as recorded, except the two inputs of a commutative ``Elemwise`` (:data:`COMMUTATIVE_MODES`),
    which MegBrain sorts by the order their vars were made (the graph's inputs first, then the
    captured tensors, then op outputs): ``k * x`` reads ``(x, k)``.  ``ranks`` may be given to
    save recomputing them over many ops (``_var_ranks(recording)``)."""
    op, ins, _ = recording.ops[k]
    if not _commutative(op, ins):
        return tuple(ins)
    if ranks is None:
        ranks = _var_ranks(recording)
    return tuple(sorted(ins, key=lambda v: ranks.get(v, (3, v))))


@contextlib.contextmanager
def dump_request(prefer_input_names, output_names):
    """``with dump_request(...):`` -- what the user asked ``trace.dump`` for, for the
    :func:`names_for_dump` calls inside the block (the model writer's): whether they gave
    ``arg_names`` (``prefer_input_names``) and the output names they gave (``output_names``,
    or the keys of a returned dict; ``None`` when none).  MegEngine names the outputs only
    with those: a writer's default output names (``output_0``, ...) do not rename them."""
    token = _REQUEST.set((bool(prefer_input_names),
                          None if output_names is None else list(output_names)))
    try:
        yield
    finally:
        _REQUEST.reset(token)


def names_for_dump(recording, arg_names, output_names, keep_opr_name, keep_var_name,
                   keep_param_name=False, *, prefer_input_names=None):
    """The names ``trace.dump`` writes for ``recording``: ``(op_names, var_names)``.

    Args:
        recording: a finished ``trace`` plugin ``Recording``.
        arg_names: one entry per var of ``recording.args``: the name dump gives that argument
            (the user's ``arg_names`` or the default ``arg_<i>``, a keyword argument's keyword),
            or ``None`` for the default ``arg_<i>``; may be shorter than ``recording.args``
            (the rest take their defaults), or ``None``.
        output_names: one entry per var of ``recording.outputs``: the name the user asked for
            (``output_names``, or the keys of a returned dict); ``None`` or ``""`` keeps the
            name the graph gives it (MegEngine gives outputs no default names); or ``None``.
        keep_opr_name: whether the file keeps op names.
        keep_var_name: 0: the file keeps no var names but the inputs'; 1 or 2: all of them
            (MegEngine's default dump format keeps them all from 1).
        keep_param_name: accepted for MegEngine's signature; it names shared parameters,
            which a trace with ``capture_as_const`` does not have (captured tensors are
            constants, named by ``keep_opr_name``/``keep_var_name``), so it changes nothing.
        prefer_input_names: pass ``True`` when the user gave ``arg_names``: then they win
            over the arguments' own tensor names (MegEngine's rule); with ``False`` a tensor's
            own name (``Tensor(..., name="data")``) wins over its ``arg_names`` entry, which is
            then a default.  ``None`` (the default): as the enclosing :func:`dump_request`
            says, else ``False``.

    Inside a :func:`dump_request` block (``trace.dump`` opens one), the request's output
    names replace ``output_names``, and its ``prefer_input_names`` is the default.

    Returns:
        ``op_names``: a list parallel to ``recording.ops``, each op's name, or ``None`` where
        the file keeps none (``keep_opr_name`` false, or an op the outputs do not depend on);
        ``var_names``: ``{var: name}`` for the vars whose name the file keeps: the inputs
        always; captured tensors that have a name when ``keep_opr_name`` or ``keep_var_name``
        (MegEngine keeps a constant's name as its op's name too); op outputs when
        ``keep_var_name`` >= 1.  A var not in it takes its graph's default name (a single
        output: its op's name; ``"<op name>:o<i>"`` for an op with several outputs).
    """
    rec = recording
    request = _REQUEST.get()
    if request is not None:
        output_names = request[1]
    if prefer_input_names is None:
        prefer_input_names = request[0] if request is not None else False
    ops = rec.ops
    scopes = getattr(rec, "op_scopes", None)
    if scopes is None or len(scopes) != len(ops):
        scopes = [""] * len(ops)
    own = getattr(rec, "var_names", None) or {}
    given = list(arg_names or ())

    producer = {}
    for k, (_, _, outs) in enumerate(ops):
        for v in outs:
            producer[v] = k
    # -- the graph's nodes and their names before deduplication: ("arg", i), ("const", v) and
    # ("op", k) nodes; a var's name is None while it follows its op's name
    node_name = {}
    var_name = {}
    arg_node = {}
    for i, v in enumerate(rec.args):
        name = given[i] if i < len(given) else None
        default = f"arg_{i}"
        if prefer_input_names and name:
            chosen = name
        elif own.get(v):
            chosen = own[v]
        else:
            chosen = name or default
        arg_node[v] = ("arg", i)  # (an argument bound twice: the last binding, as MegEngine)
        node_name[("arg", i)] = chosen
        var_name[v] = None
    consts = {}
    for v in rec.externals:
        if v in arg_node:
            continue
        consts[v] = ("const", v)
        node_name[("const", v)] = own.get(v) or None  # (unnamed: the graph's default)
        var_name[v] = None
    for k, (op, _, outs) in enumerate(ops):
        base = opr_name(op)
        name = scopes[k] + "." + base if scopes[k] else base
        node_name[("op", k)] = name
        for j, v in enumerate(outs):
            if own.get(v):
                var_name[v] = own[v]
            else:
                var_name[v] = f"{name}:o{j}" if len(outs) > 1 else None

    def owner(v):
        if v in arg_node:
            return arg_node[v]
        k = producer.get(v)
        if k is not None:
            return ("op", k)
        return consts.get(v)

    ranks = _var_ranks(rec)

    def node_inputs(node):
        if node[0] != "op":
            return ()
        return graph_inputs(rec, node[1], ranks)

    # -- post-order walk from the outputs (MegBrain's DepOprIter), grouping nodes by name
    order = []
    seen = set()
    for out in rec.outputs:
        root = owner(out)
        if root is None or root in seen:
            continue
        seen.add(root)
        stack = [(root, iter(node_inputs(root)))]
        while stack:
            node, it = stack[-1]
            for v in it:
                sub = owner(v)
                if sub is not None and sub not in seen:
                    seen.add(sub)
                    stack.append((sub, iter(node_inputs(sub))))
                    break
            else:
                stack.pop()
                order.append(node)
    groups = {}
    for node in order:
        name = node_name[node]
        if name is not None:
            groups.setdefault(name, []).append(node)

    def node_outputs(node):
        if node[0] == "op":
            return ops[node[1]][2]
        if node[0] == "arg":
            return (rec.args[node[1]],)
        return (node[1],)

    final_var = {}
    for name, nodes in groups.items():
        if len(nodes) < 2:
            continue
        for i, node in enumerate(nodes):
            new = f"{name}[{i}]"
            for v in node_outputs(node):
                current = var_name.get(v) or name
                final_var[v] = current.replace(name, new, 1)
            node_name[node] = new
    for v, name in var_name.items():
        if v not in final_var and name is not None:
            final_var[v] = name
    # vars that follow their op's (or input's, constant's) name
    for node in order:
        name = node_name[node]
        if name is not None:
            for v in node_outputs(node):
                final_var.setdefault(v, name)
    if output_names:
        for v, name in zip(rec.outputs, output_names):
            if name:
                final_var[v] = name

    # -- what the file keeps
    op_names = [None] * len(ops)
    if keep_opr_name:
        for node in order:
            if node[0] == "op":
                op_names[node[1]] = node_name[node]
    var_names = {}
    for node in order:
        kind = node[0]
        for v in node_outputs(node):
            if keep_var_name >= 1:
                name = final_var.get(v)  # every var's name is kept
            elif kind == "arg" or (kind == "const" and keep_opr_name):
                name = node_name[node]  # an input's name; a constant's op's, its var follows
            else:
                name = None
            if name:
                var_names[v] = name
    # arguments the outputs do not depend on are still inputs of the file
    for v, node in arg_node.items():
        if v not in var_names:
            var_names[v] = (final_var.get(v) if keep_var_name >= 1 else None) or node_name[node]
    return op_names, var_names
