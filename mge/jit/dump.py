"""mge's model files: a traced function's ops and constants, saved and loaded without Python code.

``trace.dump`` writes a model file with :func:`save`; :func:`load` (``mge.jit.load``) reads it
back as a :class:`LoadedModel`, which runs the saved ops as one compiled program
(``mge.jit.program.compile_program``) on the channel: asynchronously, with the kernels the traced
function used, so its results are bit-identical to the traced ones.

The format (``FORMAT_NAME`` ``"mge-model"``, version ``FORMAT_VERSION``) is a zip archive of:

* ``graph.json`` -- UTF-8 JSON, one object:

  - ``"format"``: ``"mge-model"``; ``"version"``: the format version (an int; a reader refuses a
    newer one); ``"producer"``: ``"mge <version>"`` (informational);
  - ``"vars"``: one ``[shape, dtype, device]`` per value of the model, numbered from 0 -- the
    shape a list of ints (``null`` where unknown until run, as for ``cond_take``), the dtype a
    numpy name (``"float32"``; a quantized dtype ``{"qdtype": [numpy name, MegEngine name,
    scale, zero point or null]}``), the device a name (``"cpu0:0"``);
  - ``"inputs"``: ``{"name", "var", "shape", "dtype"}`` per argument of the traced function, in
    order (the order a positional call uses);
  - ``"outputs"``: ``{"name", "var"}`` per tensor the traced function returned, in order;
    ``"output_tree"``: how they were returned (see below);
  - ``"constants"``: ``{"var", "entry"}`` per captured tensor (parameters, buffers, numbers turned
    into tensors), ``entry`` naming the archive member holding its value;
  - ``"ops"``: ``{"type", "params", "inputs", "outputs"}`` per op, in execution order: ``type`` the
    op class as ``"module:qualname"`` (only classes of the ``mge`` package are accepted on load:
    a model file never imports other code), ``params`` the op's parameters by name, ``inputs``
    and ``outputs`` lists of vars.  Each var is an input, a constant or the output of exactly one
    earlier op;
  - ``"user_info"`` (optional): the ``user_info`` given to ``trace.dump``;
  - optional, for the graph view of the file (``megbrain_graph.load_graph``, ``Network``):
    ``"name"`` (and ``"priority"``) of an op or a constant, ``"var_names"`` (``[var, name]``
    pairs: the names the file keeps) and ``"metadata"`` (``graph_modified``,
    ``optimized_for_inference``, ``optimize_options``; ``user_info_pickle``: the archive member
    of a pickled ``user_info``, written by ``Network.dump`` only and never read by :func:`load`).

  Parameters and ``user_info`` are JSON values, with one-key objects as type tags for what JSON
  lacks: ``{"tuple": [...]}``, ``{"dict": [[key, value], ...]}``, ``{"dtype": "int32"}``,
  ``{"device": "cpu0:0"}``, ``{"slice": [start, stop, step]}``, ``{"ellipsis": null}`` and
  ``{"float": "nan" | "inf" | "-inf"}``.  Other floats are JSON numbers written with Python's
  shortest round-trip ``repr``, so they read back exactly; ints, bools, strings and ``null`` are
  JSON's own, and ``1``, ``1.0`` and ``true`` stay distinct.
* ``constants/<n>.npy`` -- each constant's value, in numpy's ``.npy`` format (read with
  ``allow_pickle=False``: never object arrays).

The output tree: ``{"tensor": i}`` (output ``i``), ``{"tuple": [...]}``, ``{"list": [...]}``,
``{"dict": [[key, tree], ...]}`` or ``{"const": value}`` (a non-tensor value returned as is).

A file that is not such an archive, is truncated or corrupt, or was written by a newer format
version gives a :class:`ModelFileError` (a ``ValueError``) naming the file and the problem.
"""
import collections
import copy
import hashlib
import importlib
import io
import json
import math
import os
import re
import sys
import zipfile
import zlib

import numpy as np

from .._core.channel import get_channel
from .._core.device import as_device
from .._core.device.registry import CompNode
from .._core.errors import TraceError
from .._core.ops.base import INFER, OpDef
from .._core.plugins import stack
from ..tensor import Tensor
from . import arith as _arith
from .program import _Known, _resolve, compile_program

__all__ = ["save", "load", "LoadedModel", "ModelInput", "ModelFileError", "DumpResult",
           "FORMAT_NAME", "FORMAT_VERSION"]

#: What ``save`` (and ``trace.dump``) return, with the fields of MegEngine's
#: ``CompGraphDumpResult``: the number of operators as MegBrain counts them (the ops, plus one
#: per input and per constant), the file's bytes, the constants' bytes, a content
#: hash (SHA-256 of the bytes written), the input and output names (as the graph view of the file
#: names them: an output the user did not name is named after its op, ``"ADD"``, as in
#: MegEngine), and the constants' entries.
DumpResult = collections.namedtuple(
    "DumpResult", ["nr_opr", "tot_bytes", "tensor_value_bytes", "content_hash", "inputs",
                   "outputs", "params"])

#: The ``"format"`` of ``graph.json``.
FORMAT_NAME = "mge-model"
#: The format version this mge writes, and the newest it reads.
FORMAT_VERSION = 1
_GRAPH = "graph.json"
_MAX_GRAPH_BYTES = 1 << 30  # a graph.json claiming more is not a model file of ours
_MODULE = re.compile(r"mge(\.[A-Za-z_][A-Za-z0-9_]*)*\Z")
_QUALNAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\Z")
_DTYPE_KINDS = "biuf"
_channel = get_channel()


class ModelFileError(ValueError):
    """A model file that cannot be read: not a model file, truncated, corrupt, or too new.

    The message names the file and what is wrong.
    """


#: An input of a loaded model: its name, shape (a tuple), numpy dtype and device.
ModelInput = collections.namedtuple("ModelInput", ["name", "shape", "dtype", "device"])
ModelInput.__doc__ = "An input of a :class:`LoadedModel`: ``(name, shape, dtype, device)``."


# -- values <-> JSON -------------------------------------------------------------------------------
def _encode(v, where):
    if v is None or isinstance(v, (bool, str)):
        return v
    if isinstance(v, int):
        return int(v)
    if isinstance(v, float):
        if math.isnan(v):
            return {"float": "nan"}
        if math.isinf(v):
            return {"float": "inf" if v > 0 else "-inf"}
        return float(v)
    if isinstance(v, tuple):
        return {"tuple": [_encode(x, where) for x in v]}
    if isinstance(v, list):
        return [_encode(x, where) for x in v]
    if isinstance(v, dict):
        return {"dict": [[_encode(k, where), _encode(x, where)] for k, x in v.items()]}
    if isinstance(v, np.dtype):
        return {"dtype": _dtype_name(v, where)}
    if isinstance(v, CompNode):
        return {"device": str(v)}
    if isinstance(v, slice):
        return {"slice": [_encode(v.start, where), _encode(v.stop, where), _encode(v.step, where)]}
    if v is Ellipsis:
        return {"ellipsis": None}
    if isinstance(v, np.generic) and v.dtype.kind in "biuf":
        return _encode(v.item(), where)
    raise TypeError(f"{where}: a model file cannot hold a value of type {type(v).__name__} "
                    f"({v!r})")


def _dtype_name(d, where):
    # a dtype as JSON: its numpy name, or for a quantized dtype (numpy metadata "mgb_dtype")
    # {"qdtype": [numpy name, MegEngine name, scale, zero point or null]}
    d = np.dtype(d)
    if d.kind not in _DTYPE_KINDS or d.fields is not None or not d.isnative:
        raise TypeError(f"{where}: a model file cannot hold dtype {d}")
    meta = (d.metadata or {}).get("mgb_dtype")
    if meta is not None:
        zp = meta.get("zero_point")
        return {"qdtype": [d.name, str(meta["name"]), float(meta["scale"]),
                           None if zp is None else int(zp)]}
    return d.name


class _Bad(Exception):
    """A malformed part of graph.json (turned into a ModelFileError naming the file)."""


def _dtype_of(name):
    if isinstance(name, dict) and set(name) == {"qdtype"}:
        q = name["qdtype"]
        if not (isinstance(q, list) and len(q) == 4 and isinstance(q[1], str)
                and isinstance(q[2], (int, float)) and (q[3] is None or isinstance(q[3], int))):
            raise _Bad(f"bad quantized dtype {name!r}")
        base = _dtype_of(q[0])
        meta = {"name": q[1], "scale": float(q[2])}
        if q[3] is not None:
            meta["zero_point"] = int(q[3])
        return np.dtype(base.name, metadata={"mgb_dtype": meta})
    if not isinstance(name, str):
        raise _Bad(f"a dtype must be a name, got {name!r}")
    try:
        d = np.dtype(name)
    except TypeError:
        raise _Bad(f"unknown dtype {name!r}") from None
    if d.kind not in _DTYPE_KINDS or d.name != name:
        raise _Bad(f"dtype {name!r} is not one a tensor holds")
    return d


class _Decoder:
    """Decodes tagged JSON values; devices go through ``as_device`` (or all to ``device``)."""

    def __init__(self, device=None):
        self.device = None if device is None else as_device(device)

    def device_of(self, name):
        if not isinstance(name, str):
            raise _Bad(f"a device must be a name, got {name!r}")
        if self.device is not None:
            return self.device
        try:
            return as_device(name)
        except (ValueError, TypeError) as e:
            raise _Bad(f"unknown device {name!r} ({e})") from None

    def value(self, v):
        if v is None or isinstance(v, (bool, str, int, float)):
            return v
        if isinstance(v, list):
            return [self.value(x) for x in v]
        if not isinstance(v, dict) or len(v) != 1:
            raise _Bad(f"a value must be a JSON scalar, a list or a one-key tag object, got {v!r}")
        (tag, x), = v.items()
        if tag == "tuple" and isinstance(x, list):
            return tuple(self.value(e) for e in x)
        if tag == "dict" and isinstance(x, list):
            out = {}
            for kv in x:
                if not isinstance(kv, list) or len(kv) != 2:
                    raise _Bad(f"a dict entry must be [key, value], got {kv!r}")
                key = self.value(kv[0])
                try:
                    out[key] = self.value(kv[1])
                except TypeError:
                    raise _Bad(f"unhashable dict key {kv[0]!r}") from None
            return out
        if tag == "dtype":
            return _dtype_of(x)
        if tag == "device":
            return self.device_of(x)
        if tag == "slice" and isinstance(x, list) and len(x) == 3:
            return slice(*(self.value(e) for e in x))
        if tag == "ellipsis" and x is None:
            return Ellipsis
        if tag == "float" and x in ("nan", "inf", "-inf"):
            return float(x)
        raise _Bad(f"unknown value tag {tag!r} (or a malformed {tag!r} value: {x!r})")


def _op_from_params(cls, params):
    """The op of class ``cls`` with ``params`` (by name; built positionally in field order, as
    ``OpDef.__reduce__`` rebuilds ops, when every field is given)."""
    if set(params) == set(cls._fields):
        op = cls(*[params[f] for f in cls._fields])
    else:
        op = cls(**params)
    return cls.get(*op._key)


def _op_type_name(op):
    cls = type(op)
    return f"{cls.__module__}:{cls.__qualname__}"


def _mge_op_class(name):
    """The op class ``"module:qualname"`` names, if it is an op class of the mge package."""
    if not isinstance(name, str) or name.count(":") != 1:
        raise _Bad(f"an op type must be 'module:qualname', got {name!r}")
    modname, qualname = name.split(":")
    if not _MODULE.match(modname) or not _QUALNAME.match(qualname):
        raise _Bad(f"op type {name!r}: only op classes of the mge package can be loaded (a "
                   "model file does not import other code)")
    mod = sys.modules.get(modname)
    if mod is None:
        try:
            mod = importlib.import_module(modname)
        except ImportError:
            raise _Bad(f"op type {name!r}: this mge has no module {modname!r} (a model of "
                       "another mge version?)") from None
    obj = mod
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise _Bad(f"op type {name!r}: this mge has no such class (a model of another mge "
                       "version?)")
    if (not isinstance(obj, type) or not issubclass(obj, OpDef) or obj is OpDef
            or not _MODULE.match(obj.__module__ or "")):
        raise _Bad(f"op type {name!r} is not an op class of the mge package")
    if obj.__reduce__ is not OpDef.__reduce__:
        raise _Bad(f"op type {name!r} cannot be rebuilt from parameters")
    return obj


# -- saving ----------------------------------------------------------------------------------------
def _needed_ops(rec, out_vars):
    # the ops the outputs depend on (dead-code elimination, as compile_program does)
    needed = set(out_vars)
    keep = []
    for k in range(len(rec.ops) - 1, -1, -1):
        op, ins, outs = rec.ops[k]
        if outs and needed.intersection(outs):
            keep.append(k)
            needed.update(ins)
    keep.reverse()
    return keep


def _tree_json(tree, where):
    kind = tree[0]
    if kind == "T":
        raise AssertionError("numbered separately")
    if kind in ("tuple", "list"):
        return {kind: [_tree_json(t, where) for t in tree[1]]}
    if kind == "dict":
        return {"dict": [[_encode(k, where), _tree_json(t, where)] for k, t in tree[1]]}
    if kind == "const":
        return {"const": _encode(tree[1], where)}
    raise TypeError(f"{where}: unknown output structure {tree!r}")


def _number_tree(tree, counter, where):
    if tree[0] == "T":
        counter[0] += 1
        return {"tensor": counter[0] - 1}
    if tree[0] in ("tuple", "list"):
        return {tree[0]: [_number_tree(t, counter, where) for t in tree[1]]}
    if tree[0] == "dict":
        return {"dict": [[_encode(k, where), _number_tree(t, counter, where)]
                         for k, t in tree[1]]}
    return _tree_json(tree, where)


def _check_names(names, n, what):
    names = list(names)
    if len(names) != n:
        raise ValueError(f"{what}: {len(names)} names for {n} tensors")
    seen = set()
    for name in names:
        if not isinstance(name, str) or not name:
            raise ValueError(f"{what}: names must be non-empty strings, got {name!r}")
        if name in seen:
            raise ValueError(f"{what}: the name {name!r} is given twice")
        seen.add(name)
    return names


def save(recording, file, arg_names=None, output_names=None, *, output_tree=None,
         user_info=None, append=False, keep_opr_name=False, keep_var_name=1, metadata=None):
    """Write ``recording`` (a ``trace`` plugin ``Recording``) as a model file; returns a
    :data:`DumpResult`.

    Args:
        recording: a finished recording (``trace.recording``), normally of a trace with
            ``capture_as_const=True``: captured tensors are saved with their recorded values
            (the snapshots), and anything else they would read later is not saved.
        file: a path, or a binary file object open for writing.
        arg_names: one name per tensor argument (``recording.args``); default ``arg_0``, ...
        output_names: one name per tensor result (``recording.outputs``); default
            ``output_0``, ...
        output_tree: how the traced function returned its tensors, in ``trace``'s flattened
            form (``("T",)``, ``("tuple", (...))``, ``("list", ...)``, ``("dict", ((key,
            tree), ...))``, ``("const", value)``); default a single tensor when there is one
            output, else a tuple.
        user_info: JSON-like data (``None``, bools, numbers, strings, lists, tuples, dicts)
            stored in the file and returned by :attr:`LoadedModel.user_info`.
        append: with a path, write after the file's existing content (the reader takes the
            last model of a file); ignored for file objects.
        keep_opr_name, keep_var_name: which op and var names the file keeps (MegEngine's
            ``trace.dump`` options): names from ``mge.jit.naming.names_for_dump`` where that
            module exists, else the ops' MegBrain type names and the input/output names.
        metadata: MegEngine's model metadata (a dict: ``graph_modified``,
            ``optimized_for_inference``, ``optimize_options``), read back by
            ``megbrain_graph.load_graph`` and ``Network.metadata``; ``None``: none.

    Only the ops the outputs depend on are saved.  Raises ``ValueError`` for wrong names or
    outputs and ``TypeError`` for something a model file cannot hold (an op outside the mge
    package, a parameter or ``user_info`` value of another type); nothing is written then.
    """
    rec = recording
    if getattr(rec, "_var_of", None) is not None:
        raise ValueError("save: the recording is not finished (the traced function is running)")
    n_args, n_outs = len(rec.args), len(rec.outputs)
    if arg_names is None:
        arg_names = [f"arg_{i}" for i in range(n_args)]
    if output_names is None:
        output_names = [f"output_{i}" for i in range(n_outs)]
    arg_names = _check_names(arg_names, n_args, "save: arg_names")
    output_names = _check_names(output_names, n_outs, "save: output_names")
    if output_tree is None:
        output_tree = ("T",) if n_outs == 1 else ("tuple", (("T",),) * n_outs)
    counter = [0]
    tree = _number_tree(output_tree, counter, "save: output_tree")
    if counter[0] != n_outs:
        raise ValueError(f"save: output_tree holds {counter[0]} tensors, the recording "
                         f"{n_outs} outputs")

    keep = _needed_ops(rec, rec.outputs)
    produced = set()
    for k in keep:
        produced.update(rec.ops[k][2])
    args = set(rec.args)
    used = set(rec.args) | set(rec.outputs) | produced
    for k in keep:
        used.update(rec.ops[k][1])
    consts = sorted(v for v in used if v not in produced and v not in args)
    for v in consts:
        if v not in rec.externals:
            raise ValueError(f"save: the recording's var {v} has no value (not an argument, a "
                             "captured tensor or an op's output)")
    number = {v: i for i, v in enumerate(sorted(used))}

    descs = []
    for v in sorted(used):
        shape, dtype, device = rec.descs[v]
        descs.append([None if shape is None else [int(d) for d in shape],
                      _dtype_name(dtype, f"save: var {v}"), str(device)])
    entries = {}
    constants = []
    for v in consts:
        t = rec.snapshots.get(v, rec.externals[v])
        value = np.asarray(t.numpy())
        shape, dtype, _ = rec.descs[v]
        if value.dtype != dtype or (shape is not None and value.shape != tuple(shape)):
            raise ValueError(f"save: captured tensor var {v} holds {value.shape} {value.dtype} "
                             f"where {shape} {dtype} was recorded")
        entry = f"constants/{number[v]}.npy"
        buf = io.BytesIO()
        np.save(buf, value, allow_pickle=False)
        entries[entry] = buf.getvalue()
        constants.append({"var": number[v], "entry": entry})
    op_names, var_names = _trace_names(rec, arg_names, output_names, keep_opr_name,
                                       keep_var_name)
    try:  # the inputs of commutative ops in the order MegBrain's graph holds them
        from .naming import graph_inputs
    except ImportError:
        graph_inputs = None
    ops = []
    for k in keep:
        op, ins, outs = rec.ops[k]
        if graph_inputs is not None:
            ins = graph_inputs(rec, k)
        name = _op_type_name(op)
        where = f"save: op #{k} ({op.name}, {name})"
        if not _MODULE.match(type(op).__module__ or "") or "<" in type(op).__qualname__:
            raise TypeError(f"{where}: only op classes of the mge package can be saved")
        if type(op).__reduce__ is not OpDef.__reduce__:
            raise TypeError(f"{where}: this op cannot be rebuilt from its parameters")
        params = {f: _encode(x, f"{where}, parameter {f!r}")
                  for f, x in zip(op._fields, op._key)}
        spec = {"type": name, "params": params, "inputs": [number[v] for v in ins],
                "outputs": [number[v] for v in outs]}
        if op_names and op_names[k]:
            spec["name"] = str(op_names[k])
        ops.append(spec)
    graph = {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "producer": f"mge {_mge_version()}",
        "vars": descs,
        "inputs": [{"name": n, "var": number[v], "shape": descs[number[v]][0],
                    "dtype": descs[number[v]][1]} for n, v in zip(arg_names, rec.args)],
        "outputs": [{"name": n, "var": number[v]} for n, v in zip(output_names, rec.outputs)],
        "output_tree": tree,
        "constants": constants,
        "ops": ops,
    }
    named = sorted((number[v], str(n)) for v, n in (var_names or {}).items() if v in number)
    if named:
        graph["var_names"] = [list(p) for p in named]
    result = _write_model(graph, entries, file, append, user_info, metadata)
    # the result names the outputs as the graph does (MegEngine's: an output the user did not
    # name is named after its op); the file's outputs keep the call interface's names
    graph_outputs = [(var_names or {}).get(v) or n for v, n in zip(rec.outputs, output_names)]
    return result._replace(outputs=graph_outputs)


def _write_model(graph, entries, file, append, user_info, metadata, pickle_user_info=False):
    """Write ``graph`` (the graph.json object) and the ``entries`` (archive member -> bytes);
    returns the :data:`DumpResult`.  A ``user_info`` JSON cannot hold is a ``TypeError``, or
    with ``pickle_user_info`` (``Network.dump``, as MegEngine) pickled into the metadata."""
    entries = dict(entries)
    if user_info is not None:
        try:
            graph["user_info"] = _encode(user_info, "save: user_info")
        except TypeError:
            if metadata is None or not pickle_user_info:
                raise
            graph.pop("user_info", None)
    if metadata is not None:
        meta = {"graph_modified": bool(metadata.get("graph_modified", False)),
                "optimized_for_inference": bool(metadata.get("optimized_for_inference", False)),
                "optimize_options": sorted(str(k) for k in metadata.get("optimize_options", ()))}
        if user_info is not None and "user_info" not in graph:
            # what JSON cannot hold (tensors, classes: MegEngine pickles user_info) is pickled;
            # only megbrain_graph.load_graph / Network.metadata unpickle it, never mge.jit.load
            import pickle
            entries["metadata/user_info.pkl"] = pickle.dumps(user_info)
            meta["user_info_pickle"] = "metadata/user_info.pkl"
        graph["metadata"] = meta
    text = json.dumps(graph, allow_nan=False, separators=(",", ":"))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr(_GRAPH, text.encode("utf-8"), compress_type=zipfile.ZIP_DEFLATED)
        for entry, data in entries.items():
            z.writestr(entry, data, compress_type=zipfile.ZIP_STORED)
    data = buf.getvalue()
    if isinstance(file, (str, os.PathLike)):
        with open(file, "ab" if append else "wb") as f:
            f.write(data)
    else:
        file.write(data)
        try:  # rewriting a stream from its start: a longer old model must not remain after it
            if file.seekable():
                file.truncate()
        except (AttributeError, OSError, ValueError):
            pass
    constants = graph["constants"]
    # (nr_opr counts as MegBrain does: each input and each constant is an operator there too)
    return DumpResult(len(graph["ops"]) + len(graph["inputs"]) + len(constants), len(data),
                      sum(len(entries[c["entry"]]) for c in constants),
                      hashlib.sha256(data).hexdigest(),
                      [i["name"] for i in graph["inputs"]],
                      [o["name"] for o in graph["outputs"]], [c["entry"] for c in constants])


def _trace_names(rec, arg_names, output_names, keep_opr_name, keep_var_name):
    """``(op_names, var_names)`` for a recording: ``mge.jit.naming.names_for_dump``'s, where
    that module exists; else the ops' MegBrain type names (with ``keep_opr_name``) and the
    argument and output names."""
    try:
        from .naming import names_for_dump
    except ImportError:
        names_for_dump = None
    if names_for_dump is not None:
        return names_for_dump(rec, arg_names, output_names, keep_opr_name, keep_var_name)
    from ..core.tensor.megbrain_graph import mgb_type
    op_names = [mgb_type(op) if keep_opr_name else None for op, _, _ in rec.ops]
    var_names = dict(zip(rec.args, arg_names))
    var_names.update(zip(rec.outputs, output_names))
    return op_names, var_names


#: Other formats ``trace.dump(format=...)`` writes: name -> (its option names, writer).  A
#: writer module registers itself here (``onnx_export.py``: ``"onnx"``), so this module imports
#: none of them.
FORMATS = {}

_DUMP_IGNORED = frozenset({"no_assert", "maxerr", "resize_input", "input_transform", "dump_format",
                           "model_version"})


def dump_trace(traced, file, arg_names=None, output_names=None, *, append=False, user_info=None,
               ignored=None):
    """``trace.dump``'s work: name the last call's arguments and results, then :func:`save`.

    ``traced`` is an ``mge.jit.trace``.  Positional tensor arguments are named ``arg_<i>`` (or
    by ``arg_names``), keyword tensors by their keyword; results ``output_<i>`` (or by
    ``output_names``), or by their keys when the function returned a dict of tensors.
    ``ignored`` holds the other keywords: ``format`` (``"mge"``, the default, or one of
    :data:`FORMATS`: ``"onnx"``, ``mge.jit.onnx_export``, which also takes ``opset``) and
    MegEngine's extra keywords
    (``TypeError`` for one MegEngine lacks).
    """
    ignored = dict(ignored or {})
    keep_var_name = ignored.pop("keep_var_name", 1)
    keep_opr_name = ignored.pop("keep_opr_name", False)
    ignored.pop("keep_param_name", None)
    ignored.pop("keep_opr_priority", None)
    optimized = bool(ignored.pop("optimize_for_inference", False))
    enable_metadata = ignored.pop("enable_metadata", True)
    fmt = ignored.pop("format", "mge")
    if fmt != "mge" and fmt not in FORMATS:
        known = ", ".join(repr(f) for f in ("mge",) + tuple(FORMATS))
        raise ValueError(f"trace.dump: unknown format {fmt!r} (expected {known})")
    options = {}
    if fmt != "mge":
        option_names, writer = FORMATS[fmt]
        options = {k: ignored.pop(k) for k in option_names if k in ignored}
        if append:
            raise ValueError(f"trace.dump: append=True is for mge model files; an {fmt} file "
                             "holds one model")
    for k in ignored:
        if k not in _DUMP_IGNORED and not k.startswith("enable_"):
            raise TypeError(f"trace.dump() got an unexpected keyword argument {k!r}")
    given_outputs = output_names or None
    rec, names, output_names, out_tree = dump_names(traced, arg_names, output_names)
    _check_inference(rec)
    rec = _simplified(rec, getattr(traced, "opt_level", 2))
    if fmt != "mge":
        writer(rec, file, names, output_names, user_info=user_info, **options)
        return None
    metadata = None
    if enable_metadata:
        options = sorted(k for k, v in ignored.items() if k.startswith("enable_") and v) \
            if optimized else []
        if optimized and "enable_fuse_grain" not in ignored:
            options.append("enable_fuse_grain")
        metadata = {"graph_modified": False, "optimized_for_inference": optimized,
                    "optimize_options": options}
    # what the user asked for, for mge.jit.naming (MegEngine names unnamed outputs after their
    # ops, not output_<i>: the graph view of the file shows those names)
    if given_outputs is not None:
        asked = [given_outputs] if isinstance(given_outputs, str) else list(given_outputs)
    elif out_tree[0] == "dict" and all(t == ("T",) for _, t in out_tree[1]):
        asked = list(output_names)
    else:
        asked = None
    f16 = [k for k in ("enable_io16xc32", "enable_ioc16") if optimized and ignored.get(k)]
    with _dump_request(arg_names is not None, asked):
        if f16:  # float16 I/O: the graph pass of megbrain_graph.optimize_for_inference
            return _dump_float16(rec, file, names, output_names, out_tree, user_info, append,
                                 keep_opr_name, keep_var_name, metadata, f16)
        return save(rec, file, names, output_names, output_tree=out_tree, user_info=user_info,
                    append=append, keep_opr_name=keep_opr_name, keep_var_name=keep_var_name,
                    metadata=metadata)


def _dump_float16(rec, file, names, output_names, out_tree, user_info, append, keep_opr_name,
                  keep_var_name, metadata, options):
    # trace.dump(optimize_for_inference=True, enable_io16xc32/enable_ioc16=True): the model as
    # a graph, its float32 operators given float16 inputs, written again
    from ..core.tensor import megbrain_graph as G
    buf = io.BytesIO()
    save(rec, buf, names, output_names, output_tree=out_tree, user_info=user_info,
         keep_opr_name=keep_opr_name, keep_var_name=keep_var_name)
    buf.seek(0)
    ret = load_graph_file(buf, G.Graph)
    new, _ = G.optimize_for_inference(list(ret.output_vars_list), **{k: True for k in options})
    raws = [G._raw(v) for v in new]
    for v, name in zip(raws, output_names):
        v.name = name
    meta = dict(metadata or {}, user_info=user_info) if metadata is not None else None
    data, result = save_graph_oprs(
        raws, G._needed_oprs(raws), keep_var_name=keep_var_name, keep_opr_name=keep_opr_name,
        metadata=meta, extra_inputs=ret.graph._file_inputs,
        output_tree=_number_tree(out_tree, [0], "save: output_tree"))
    if isinstance(file, (str, os.PathLike)):
        with open(file, "ab" if append else "wb") as f:
            f.write(data)
    else:
        file.write(data)
    return result


def _simplified(rec, opt_level):
    """The recording as its graph is saved: at ``opt_level`` 1 and above with the arithmetic
    rewrites of :mod:`mge.jit.arith` (MegBrain makes them while building the graph it dumps), so
    the file holds the ops the compiled program runs.  A shallow copy: op indices stay (a
    rewritten op takes the place of the original, a dropped one is left for dead-code
    elimination), outputs follow the values they became."""
    if opt_level < 1:
        return rec
    ops = list(rec.ops)
    alias = {}
    known = _Known({}, rec.snapshots, rec.descs)
    _arith.simplify(ops, range(len(ops)), rec.descs, known, alias)
    if not alias and ops == rec.ops:
        return rec
    view = copy.copy(rec)
    view.ops = ops
    view.outputs = [_resolve(alias, v) for v in rec.outputs]
    return view


def _dump_request(prefer_input_names, output_names):
    try:
        from .naming import dump_request
    except ImportError:
        import contextlib
        return contextlib.nullcontext()
    return dump_request(prefer_input_names, output_names)


def _check_inference(rec):
    # MegEngine's trace.dump refuses a training-mode BatchNorm (its statistics updates)
    for k in _needed_ops(rec, rec.outputs):
        op = rec.ops[k][0]
        if getattr(op, "fwd_mode", None) == "training" and type(op).__name__ == "BatchNorm":
            raise RuntimeError(f"trace.dump: can not dump BatchNorm in training mode, maybe you "
                               f"forget to do model.eval()? ({rec.describe(k)})")


def dump_names(traced, arg_names=None, output_names=None):
    """``(recording, input names, output names, output tree)`` of the last call of ``traced``,
    named as :func:`dump_trace` says; ``ValueError`` when it cannot be dumped."""
    tr = traced._last
    if tr is None:
        raise ValueError(f"trace.dump: {traced.__name__!r} has not been called yet; call the "
                         "traced function once (with inputs of the shapes to dump) first")
    rec = tr.recording
    if not rec.outputs:
        raise ValueError("the traced function without return values cannot be dumped, the "
                         "traced function should return List[Tensor] or Dict[str, Tensor]")
    # arguments: positional tensors arg_<i> (or arg_names), keyword tensors by their keyword
    args_tree, kwargs_tree = tr.in_tree[1]
    n_pos = sum(1 for t in args_tree[1] if t == ("T",))
    if isinstance(arg_names, str):
        arg_names = (arg_names,)
    if arg_names is not None:
        arg_names = list(arg_names)
        if len(arg_names) != n_pos:
            raise ValueError(f"wrong number of arg_names, should be {n_pos} values")
    names = []
    for i, t in enumerate(args_tree[1]):
        if t == ("T",):
            given = None if arg_names is None else arg_names[sum(
                1 for u in args_tree[1][:i] if u == ("T",))]
            names.append(f"arg_{i}" if given is None else given)
        else:
            _tensor_names(t, f"arg_{i}", names)
    for key, t in kwargs_tree[1]:
        _tensor_names(t, str(key), names)
    # results: dict keys, output_names or output_<i>
    out_tree = tr.out_tree
    n_out = len(rec.outputs)
    dict_names = None
    if out_tree[0] == "dict" and all(t == ("T",) for _, t in out_tree[1]):
        dict_names = [str(k) for k, _ in out_tree[1]]
    if isinstance(output_names, str):
        output_names = (output_names,)
    if output_names:
        if dict_names is not None:
            raise TypeError("cannot specify output_names when output is already in dict format")
        output_names = list(output_names)
        if len(output_names) != n_out:
            raise ValueError(f"wrong number of output_names, should be {n_out} values")
    else:
        output_names = dict_names or [f"output_{i}" for i in range(n_out)]
    return rec, names, output_names, out_tree


def _tensor_names(tree, prefix, names):
    # names for the tensors of a (nested) argument: prefix, prefix_<j>, ...
    if tree == ("T",):
        names.append(prefix)
    elif tree[0] in ("tuple", "list"):
        for j, t in enumerate(tree[1]):
            _tensor_names(t, f"{prefix}_{j}", names)
    elif tree[0] == "dict":
        for k, t in tree[1]:
            _tensor_names(t, f"{prefix}_{k}", names)


def _mge_version():
    from ..version import __version__
    return __version__


# -- loading ---------------------------------------------------------------------------------------
def _file_label(file):
    if isinstance(file, (str, os.PathLike)):
        return repr(os.fspath(file))
    name = getattr(file, "name", None)
    return repr(name) if isinstance(name, str) else f"<{type(file).__name__} object>"


def _read_archive(file, label):
    if isinstance(file, (str, os.PathLike)):
        try:
            with open(file, "rb") as f:
                data = f.read()
        except OSError as e:
            raise ModelFileError(f"model file {label}: cannot be read ({e.strerror or e})") from None
    else:
        data = file.read()
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"load: {label} is not a binary file (read() gave "
                            f"{type(data).__name__})")
    if not data:
        raise ModelFileError(f"model file {label} is empty")
    try:
        z = zipfile.ZipFile(io.BytesIO(bytes(data)))
    except zipfile.BadZipFile:
        if data[:2] == b"PK":
            raise ModelFileError(f"model file {label} is truncated or corrupt (a broken zip "
                                 "archive)") from None
        raise ModelFileError(f"{label} is not an mge model file (not a zip archive; a "
                             "MegEngine .mge file is not readable by mge)") from None
    return z


def _member(z, name, label, limit=None):
    try:
        info = z.getinfo(name)
    except KeyError:
        raise ModelFileError(f"model file {label} has no {name!r} (not an mge model file, or "
                             "truncated)") from None
    if limit is not None and info.file_size > limit:
        raise ModelFileError(f"model file {label}: {name!r} is too large ({info.file_size} "
                             "bytes)")
    try:
        return z.read(info)
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError,
            NotImplementedError) as e:
        raise ModelFileError(f"model file {label}: {name!r} is corrupt or truncated ({e})") from None


def _need(obj, key, types, what):
    if not isinstance(obj, dict) or key not in obj:
        raise _Bad(f"{what} has no {key!r}")
    v = obj[key]
    if not isinstance(v, types) or (isinstance(v, bool) and bool not in _as_tuple(types)):
        raise _Bad(f"{what}: {key!r} is {v!r}")
    return v


def _as_tuple(types):
    return types if isinstance(types, tuple) else (types,)


def _var(v, n, what):
    if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v < n:
        raise _Bad(f"{what}: {v!r} is not a var (0..{n - 1})")
    return v


class _Graph:
    """What ``compile_program`` reads of a recording: ``ops`` and ``descs``."""

    def __init__(self, ops, descs):
        self.ops = ops
        self.descs = descs


def load(file, device=None):
    """Read a model file written by ``trace.dump`` (or :func:`save`): a :class:`LoadedModel`.

    Args:
        file: a path, or a binary file object open for reading.
        device: run the model on this device instead of the devices it was saved with.

    Raises :class:`ModelFileError` (a ``ValueError``) naming the file when it is not an mge
    model file, is truncated or corrupt, was written by a newer mge (format version above
    ``FORMAT_VERSION``), or names an op class outside the mge package.

    Example::

        >>> import io, numpy as np, mge
        >>> from mge.jit import trace
        >>> @trace(capture_as_const=True)
        ... def f(x):
        ...     return x * 2 + 1
        >>> y = f(mge.tensor([1.0, 2.0]))
        >>> buf = io.BytesIO()
        >>> f.dump(buf)
        >>> model = mge.jit.load(io.BytesIO(buf.getvalue()))
        >>> model(np.array([1.0, 2.0], dtype="float32")).numpy().tolist()
        [3.0, 5.0]
    """
    label, z, graph = _open_model(file)
    with z:
        try:
            return LoadedModel._build(graph, z, label, _Decoder(device))
        except _Bad as e:
            raise ModelFileError(f"model file {label} is malformed: {e}") from None


def _open_model(file):
    """``(label, zip archive, graph.json object)`` of a model file, its format and version
    checked (:class:`ModelFileError` otherwise)."""
    label = _file_label(file)
    z = _read_archive(file, label)
    try:
        raw = _member(z, _GRAPH, label, _MAX_GRAPH_BYTES)
        try:
            graph = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            raise ModelFileError(f"model file {label}: {_GRAPH} is not valid JSON ({e})") from None
        if not isinstance(graph, dict) or graph.get("format") != FORMAT_NAME:
            raise ModelFileError(f"{label} is not an mge model file ({_GRAPH} does not say "
                                 f"format {FORMAT_NAME!r})")
        version = graph.get("version")
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise ModelFileError(f"model file {label}: bad format version {version!r}")
        if version > FORMAT_VERSION:
            raise ModelFileError(
                f"model file {label} has format version {version}, newer than this mge reads "
                f"(up to {FORMAT_VERSION}; written by {graph.get('producer', 'a newer mge')!s}): "
                "upgrade mge to load it")
    except BaseException:
        z.close()
        raise
    return label, z, graph


class LoadedModel:
    """A model read by :func:`load`: call it like the traced function.

    ``model(*inputs, **named_inputs)`` takes numpy arrays (or anything ``mge.tensor`` takes) or
    tensors, positionally in the order of :attr:`inputs` or by input name, and returns tensors
    structured as the traced function returned them (a tensor, a tuple, a list or a dict).
    :meth:`run` returns a dict of the outputs by name instead.

    Each input must have the shape and dtype it was traced with (numpy's float64 and int64
    data become float32 and int32 first, as in ``mge.tensor``, unless the input is float64 or
    int64).  The ops run as one compiled program
    on the channel, asynchronously like any op, with the kernels the traced function ran; the
    outputs carry no gradient history (inference only), and a loaded model cannot run inside a
    traced function.

    Attributes: :attr:`inputs` (:class:`ModelInput` tuples), :attr:`output_names`,
    :attr:`user_info`, :attr:`version` (the file's format version), :attr:`producer` (the mge
    that wrote it) and :attr:`num_ops`.
    """

    def __init__(self):
        raise TypeError("LoadedModel: use mge.jit.load(file)")

    @classmethod
    def _build(cls, graph, z, label, dec):
        self = object.__new__(cls)
        self.version = graph["version"]
        self.producer = graph.get("producer")
        descs = _read_vars(graph, dec)
        n = len(descs)
        defined = set()

        inputs = []
        names = set()
        for j, spec in enumerate(_need(graph, "inputs", list, _GRAPH)):
            what = f"input {j}"
            name = _need(spec, "name", str, what)
            v = _var(_need(spec, "var", int, what), n, what)
            if name in names:
                raise _Bad(f"input name {name!r} appears twice")
            names.add(name)
            if descs[v][0] is None:
                raise _Bad(f"input {name!r} has no shape")
            inputs.append((name, v))
            defined.add(v)

        consts = []
        for j, spec in enumerate(_need(graph, "constants", list, _GRAPH)):
            what = f"constant {j}"
            v = _var(_need(spec, "var", int, what), n, what)
            entry = _need(spec, "entry", str, what)
            if v in defined:
                raise _Bad(f"{what}: var {v} has two values")
            raw = _member(z, entry, label)
            try:
                value = np.load(io.BytesIO(raw), allow_pickle=False)
            except (ValueError, EOFError, OSError) as e:
                raise _Bad(f"{what} ({entry!r}) is not a valid .npy array ({e})") from None
            shape, dtype, device = descs[v]
            if not isinstance(value, np.ndarray) or value.dtype != dtype or (
                    shape is not None and value.shape != shape):
                raise _Bad(f"{what} ({entry!r}) holds {getattr(value, 'shape', '?')} "
                           f"{getattr(value, 'dtype', '?')} where var {v} is {shape} {dtype}")
            consts.append((v, Tensor(value, dtype=dtype, device=device)))
            defined.add(v)

        ops = []
        for k, spec in enumerate(_need(graph, "ops", list, _GRAPH)):
            what = f"op #{k}"
            op_cls = _mge_op_class(_need(spec, "type", str, what))
            raw_params = _need(spec, "params", dict, what)
            try:
                params = {str(f): dec.value(x) for f, x in raw_params.items()}
            except _Bad as e:
                raise _Bad(f"{what} ({spec['type']}): a parameter: {e}") from None
            try:
                op = _op_from_params(op_cls, params)
            except Exception as e:
                raise _Bad(f"{what} ({spec['type']}): its parameters do not build the op "
                           f"({e})") from None
            ins = tuple(_var(v, n, f"{what} input") for v in _need(spec, "inputs", list, what))
            outs = tuple(_var(v, n, f"{what} output") for v in _need(spec, "outputs", list, what))
            for v in ins:
                if v not in defined:
                    raise _Bad(f"{what} ({op.name}) reads var {v} before anything gives it a "
                               "value")
            for v in outs:
                if v in defined:
                    raise _Bad(f"{what} ({op.name}) writes var {v}, which already has a value")
            if not outs:
                raise _Bad(f"{what} ({op.name}) has no outputs")
            _check_infer(op, [descs[v] for v in ins], [descs[v] for v in outs], what)
            defined.update(outs)
            ops.append((op, ins, outs))

        outputs = []
        out_names = set()
        for j, spec in enumerate(_need(graph, "outputs", list, _GRAPH)):
            what = f"output {j}"
            name = _need(spec, "name", str, what)
            v = _var(_need(spec, "var", int, what), n, what)
            if name in out_names:
                raise _Bad(f"output name {name!r} appears twice")
            if v not in defined:
                raise _Bad(f"output {name!r} (var {v}) has no value")
            out_names.add(name)
            outputs.append((name, v))
        self._tree = _read_tree(_need(graph, "output_tree", dict, _GRAPH), len(outputs), dec)
        self.user_info = dec.value(graph["user_info"]) if "user_info" in graph else None

        self.inputs = tuple(ModelInput(name, descs[v][0], descs[v][1], descs[v][2])
                            for name, v in inputs)
        self.output_names = tuple(name for name, _ in outputs)
        self.num_ops = len(ops)
        self._in_vars = [v for _, v in inputs]
        self._consts = dict(consts)
        self._out_vars = [v for _, v in outputs]
        unique = list(dict.fromkeys(self._out_vars))
        try:
            # opt_level 0: the file's ops as written (a trace's dump is simplified already, at
            # the trace's opt_level), so a round trip gives the traced outputs
            self._program = compile_program(_Graph(ops, descs), 0, len(ops), tuple(unique),
                                            opt_level=0)
        except Exception as e:
            raise _Bad(f"its ops cannot be compiled ({type(e).__name__}: {e})") from None
        self._out_index = [unique.index(v) for v in self._out_vars]
        self._label = label
        return self

    # -- calling ----------------------------------------------------------------------------------
    def __repr__(self):
        ins = ", ".join(f"{i.name}: {i.shape} {i.dtype}" for i in self.inputs)
        return (f"<LoadedModel {self._label}: ({ins}) -> ({', '.join(self.output_names)}), "
                f"{self.num_ops} ops>")

    def check_inputs(self, *args, **kwargs):
        """The inputs of a call as tensors, in the order of :attr:`inputs`.

        Raises ``ValueError`` (``TypeError`` for a value ``mge.tensor`` cannot take) naming the
        input when one is missing, unknown, given twice, or of another shape or dtype than
        traced.
        """
        specs = self.inputs
        if len(args) > len(specs):
            raise ValueError(f"the model takes {len(specs)} inputs, {len(args)} were given")
        given = dict(zip((s.name for s in specs), args))
        for name, value in kwargs.items():
            if not any(s.name == name for s in specs):
                known = ", ".join(s.name for s in specs) or "none"
                raise ValueError(f"the model has no input {name!r} (its inputs: {known})")
            if name in given:
                raise ValueError(f"input {name!r} is given twice")
            given[name] = value
        missing = [s.name for s in specs if s.name not in given]
        if missing:
            raise ValueError(f"missing model input(s): {', '.join(missing)}")
        out = []
        for s in specs:
            x = given[s.name]
            if not isinstance(x, Tensor):
                same = getattr(x, "dtype", None) == s.dtype  # (float64/int64 data kept as such)
                x = Tensor(x, dtype=s.dtype if same else None, device=s.device)
            elif x.device != s.device:
                x = x.to(s.device)
            if tuple(x.shape) != s.shape or x.dtype != s.dtype:
                raise ValueError(f"model input {s.name!r} must be of shape {s.shape} and dtype "
                                 f"{s.dtype}; got shape {tuple(x.shape)}, {x.dtype}")
            out.append(x)
        return out

    def _outputs(self, args, kwargs):
        if _tracing_now():
            raise TraceError("a loaded model cannot run inside a traced function")
        tensors = self.check_inputs(*args, **kwargs)
        value = dict(zip(self._in_vars, tensors))
        value.update(self._consts)
        infos = [value[v]._info for v in self._program.in_vars]
        new = Tensor.__new__
        results = []
        for info in _channel.apply_op(self._program, infos):
            t = new(Tensor)
            t._info = info
            results.append(t)
        return [results[i] for i in self._out_index]

    def __call__(self, *args, **kwargs):
        """Run the model: outputs structured as the traced function returned them."""
        return _build_tree(self._tree, self._outputs(args, kwargs))

    def run(self, *args, **kwargs):
        """Run the model: a dict of the output tensors by output name, in output order."""
        return dict(zip(self.output_names, self._outputs(args, kwargs)))


def _check_infer(op, ins, outs, what):
    rule = INFER.get(type(op))
    if rule is None:
        return
    try:
        got = rule(op, [(d[0], d[1]) for d in ins])
    except Exception as e:
        raise _Bad(f"{what} ({op.name}) does not take its inputs' shapes and dtypes "
                   f"({type(e).__name__}: {e})") from None
    if len(got) != len(outs) or any(
            g[1] != o[1] or (g[0] is not None and tuple(g[0]) != o[0]) for g, o in zip(got, outs)):
        stored = ", ".join(f"{o[0]} {o[1]}" for o in outs)
        computed = ", ".join(f"{g[0]} {g[1]}" for g in got)
        raise _Bad(f"{what} ({op.name}) computes {computed} where the file says {stored}")


def _read_vars(graph, dec):
    """graph.json's ``"vars"``: ``(shape, dtype, device)`` per var (``_Bad`` naming the var)."""
    descs = []
    for i, d in enumerate(_need(graph, "vars", list, _GRAPH)):
        if not isinstance(d, list) or len(d) != 3:
            raise _Bad(f"var {i} must be [shape, dtype, device], got {d!r}")
        shape, dtype, device = d
        if shape is not None:
            if not isinstance(shape, list) or not all(
                    isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shape):
                raise _Bad(f"var {i}: bad shape {shape!r}")
            shape = tuple(shape)
        try:
            descs.append((shape, _dtype_of(dtype), dec.device_of(device)))
        except _Bad as e:
            raise _Bad(f"var {i}: {e}") from None
    return descs


def _read_tree(tree, n_outs, dec):
    seen = []

    def walk(t):
        if not isinstance(t, dict) or len(t) != 1:
            raise _Bad(f"output_tree: bad node {t!r}")
        (kind, x), = t.items()
        if kind == "tensor":
            if not isinstance(x, int) or isinstance(x, bool) or not 0 <= x < n_outs:
                raise _Bad(f"output_tree: {x!r} is not an output")
            seen.append(x)
            return ("T", x)
        if kind in ("tuple", "list") and isinstance(x, list):
            return (kind, [walk(e) for e in x])
        if kind == "dict" and isinstance(x, list):
            items = []
            for kv in x:
                if not isinstance(kv, list) or len(kv) != 2:
                    raise _Bad(f"output_tree: bad dict entry {kv!r}")
                key = dec.value(kv[0])
                try:
                    hash(key)
                except TypeError:
                    raise _Bad(f"output_tree: unhashable dict key {kv[0]!r}") from None
                items.append((key, walk(kv[1])))
            return ("dict", items)
        if kind == "const":
            return ("const", dec.value(x))
        raise _Bad(f"output_tree: unknown node kind {kind!r}")

    out = walk(tree)
    if sorted(seen) != list(range(n_outs)):
        raise _Bad("output_tree does not hold each output once")
    return out


def _build_tree(tree, tensors):
    kind = tree[0]
    if kind == "T":
        return tensors[tree[1]]
    if kind == "tuple":
        return tuple(_build_tree(t, tensors) for t in tree[1])
    if kind == "list":
        return [_build_tree(t, tensors) for t in tree[1]]
    if kind == "dict":
        return {k: _build_tree(t, tensors) for k, t in tree[1]}
    return tree[1]


def _tracing_now():
    # a traced function is recording or replaying (its layer is on the stack's trace segment);
    # asked here rather than of mge.jit.tracing, which imports this module
    return any(t.name == "trace" for t in stack.active())


# -- MegBrain-style graphs (mge.core.tensor.megbrain_graph) ---------------------------------------
def save_graph_oprs(dest, oprs, *, keep_var_name=1, keep_opr_name=False, keep_param_name=False,
                    keep_opr_priority=False, metadata=None, extra_inputs=(), output_tree=None):
    """Write the graph operators ``oprs`` (``megbrain_graph``'s, in a topological order)
    computing the vars ``dest`` in this format; returns ``(bytes, DumpResult)``.

    ``Host2DeviceCopy`` and ``InputNode`` vars become the model's inputs (named by their vars),
    constants its constants, the others its ops; output callbacks and virtual dependencies stand
    for the var they pass on.  ``keep_var_name`` (0, 1, 2), ``keep_opr_name``,
    ``keep_param_name`` and ``keep_opr_priority`` are MegEngine's ``dump_graph`` options; the
    inputs and outputs are always named.  ``metadata`` as :func:`save`'s, plus ``user_info``.
    ``extra_inputs``: input vars (``Host2DeviceCopy``) kept as inputs of the model although the
    outputs do not depend on them (a model keeps its signature).
    """
    listed = {id(o) for o in oprs}
    oprs = list(oprs) + [v.owner for v in extra_inputs if id(v.owner) not in listed]
    alias = {}

    def real(v):
        while v in alias:
            v = alias[v]
        return v

    for opr in oprs:
        if opr.kind in ("output", "virtual_dep"):
            alias[opr.outputs[0]] = opr.inputs[0]
            for extra in opr.outputs[1:]:
                alias[extra] = opr.inputs[0]
    dest = [real(v) for v in dest]
    number = {}

    def num(v):
        v = real(v)
        if v not in number:
            number[v] = len(number)
        return number[v]

    descs, inputs, constants, ops, entries = [], [], [], [], {}
    var_names = {}
    input_names = set()
    for opr in oprs:
        kind = opr.kind
        where = f"dump_graph: {opr.type} {opr.name!r}"
        if kind in ("output", "virtual_dep"):
            continue
        if kind in ("h2d", "input"):
            v = opr.outputs[0]
            if v.shape is None:
                raise ValueError(f"{where}: a model input needs a shape")
            if v.name in input_names:
                raise ValueError(f"{where}: two inputs are named {v.name!r}")
            input_names.add(v.name)
            inputs.append({"name": v.name, "var": num(v), "shape": list(v.shape),
                           "dtype": _dtype_name(v.dtype, where)})
        elif kind == "const":
            v = opr.outputs[0]
            value = np.asarray(opr.payload.numpy())
            entry = f"constants/{num(v)}.npy"
            buf = io.BytesIO()
            np.save(buf, value, allow_pickle=False)
            entries[entry] = buf.getvalue()
            spec = {"var": num(v), "entry": entry}
            if keep_opr_name or keep_param_name:
                spec["name"] = opr.name
            constants.append(spec)
            if keep_param_name or keep_var_name >= 2:
                var_names[num(v)] = v.name
        else:
            op = opr.opdef
            tname = _op_type_name(op)
            if not _MODULE.match(type(op).__module__ or "") or "<" in type(op).__qualname__:
                raise TypeError(f"{where}: only op classes of the mge package can be saved")
            params = {f: _encode(x, f"{where}, parameter {f!r}")
                      for f, x in zip(op._fields, op._key)}
            spec = {"type": tname, "params": params,
                    "inputs": [num(v) for v in opr.inputs],
                    "outputs": [num(v) for v in opr.outputs]}
            if keep_opr_name:
                spec["name"] = opr.name
            if keep_opr_priority and opr.priority:
                spec["priority"] = int(opr.priority)
            ops.append(spec)
            if keep_var_name >= 2:
                for v in opr.outputs:
                    var_names[num(v)] = v.name
        for v in opr.outputs:
            num(v)
    outputs = []
    seen = set()
    for v in dest:
        name = v.name
        if name in seen:
            raise ValueError(f"dump_graph: two outputs are named {name!r}; rename one "
                             "(var.name = ...)")
        seen.add(name)
        outputs.append({"name": name, "var": num(v)})
    for i in inputs:
        var_names[i["var"]] = i["name"]
    for v, i in sorted(number.items(), key=lambda kv: kv[1]):
        descs.append([None if v.shape is None else [int(d) for d in v.shape],
                      _dtype_name(v.dtype, f"dump_graph: var {v.name!r}"), str(v.device)])
    n_out = len(outputs)
    tree = output_tree if output_tree is not None else (
        {"tensor": 0} if n_out == 1 else {"tuple": [{"tensor": i} for i in range(n_out)]})
    graph = {
        "format": FORMAT_NAME, "version": FORMAT_VERSION, "producer": f"mge {_mge_version()}",
        "vars": descs, "inputs": inputs, "outputs": outputs, "output_tree": tree,
        "constants": constants, "ops": ops,
    }
    named = sorted((k, str(n)) for k, n in var_names.items() if n)
    if named:
        graph["var_names"] = [list(p) for p in named]
    metadata = dict(metadata) if metadata is not None else None
    user_info = metadata.pop("user_info", None) if metadata is not None else None
    buf = io.BytesIO()
    result = _write_model(graph, entries, buf, False, user_info, metadata,
                          pickle_user_info=True)
    return buf.getvalue(), result


def load_graph_file(file, graph_cls):
    """Read a model file into a new ``graph_cls`` (``megbrain_graph.Graph``); returns its
    ``CompGraphLoadResult``.  Inputs become ``Host2DeviceCopy`` operators, constants
    ``ImmutableTensor`` ones, ops operators of their MegBrain type names; the names the file
    keeps are the operators' and vars' names (a var without one takes its operator's)."""
    from ..core.tensor import megbrain_graph as G
    if isinstance(file, (str, os.PathLike)):
        with open(file, "rb") as f:
            file = io.BytesIO(f.read())
    label, z, graph = _open_model(file)
    with z:
        try:
            return _build_graph(graph, z, label, graph_cls, G)
        except _Bad as e:
            raise ModelFileError(f"model file {label} is malformed: {e}") from None


def _build_graph(graph, z, label, graph_cls, G):
    dec = _Decoder()
    descs = _read_vars(graph, dec)
    n = len(descs)
    names = {}
    for pair in graph.get("var_names", []):
        if not isinstance(pair, list) or len(pair) != 2 or not isinstance(pair[1], str):
            raise _Bad(f"var_names: bad entry {pair!r}")
        names[_var(pair[0], n, "var_names")] = pair[1]
    g = graph_cls()
    g._file_inputs = []
    var = {}
    for j, spec in enumerate(_need(graph, "inputs", list, _GRAPH)):
        what = f"input {j}"
        name = _need(spec, "name", str, what)
        v = _var(_need(spec, "var", int, what), n, what)
        if v in var:
            raise _Bad(f"{what}: var {v} has two values")
        shape, dtype, device = descs[v]
        name = names.get(v) or name  # the graph's name of the input (MegEngine's rules)
        var[v] = G._raw(g.make_h2d(dtype=dtype, device=device, shape=shape, name=name))
        g._file_inputs.append(var[v])
    for j, spec in enumerate(_need(graph, "constants", list, _GRAPH)):
        what = f"constant {j}"
        v = _var(_need(spec, "var", int, what), n, what)
        entry = _need(spec, "entry", str, what)
        if v in var:
            raise _Bad(f"{what}: var {v} has two values")
        raw = _member(z, entry, label)
        try:
            value = np.load(io.BytesIO(raw), allow_pickle=False)
        except (ValueError, EOFError, OSError) as e:
            raise _Bad(f"{what} ({entry!r}) is not a valid .npy array ({e})") from None
        shape, dtype, device = descs[v]
        if not isinstance(value, np.ndarray) or value.dtype != dtype or (
                shape is not None and value.shape != shape):
            raise _Bad(f"{what} ({entry!r}) does not hold var {v}'s {shape} {dtype}")
        name = spec.get("name")
        if name is not None and not isinstance(name, str):
            raise _Bad(f"{what}: bad name {name!r}")
        var[v] = G._make_const(g, value, dtype, device, name or names.get(v))
    for k, spec in enumerate(_need(graph, "ops", list, _GRAPH)):
        what = f"op #{k}"
        op_cls = _mge_op_class(_need(spec, "type", str, what))
        try:
            params = {str(f): dec.value(x) for f, x in _need(spec, "params", dict, what).items()}
        except _Bad as e:
            raise _Bad(f"{what} ({spec['type']}): a parameter: {e}") from None
        try:
            op = _op_from_params(op_cls, params)
        except Exception as e:
            raise _Bad(f"{what} ({spec['type']}): its parameters do not build the op "
                       f"({e})") from None
        ins = [_var(v, n, f"{what} input") for v in _need(spec, "inputs", list, what)]
        outs = [_var(v, n, f"{what} output") for v in _need(spec, "outputs", list, what)]
        for v in ins:
            if v not in var:
                raise _Bad(f"{what} ({op.name}) reads var {v} before anything gives it a value")
        for v in outs:
            if v in var:
                raise _Bad(f"{what} ({op.name}) writes var {v}, which already has a value")
        if not outs:
            raise _Bad(f"{what} ({op.name}) has no outputs")
        _check_infer(op, [descs[v] for v in ins], [descs[v] for v in outs], what)
        name = spec.get("name")
        if name is not None and not isinstance(name, str):
            raise _Bad(f"{what}: bad name {name!r}")
        opr = g._new_opr("op", G.mgb_type(op), op, [var[v] for v in ins],
                         [descs[v] for v in outs], name=name)
        if isinstance(spec.get("priority"), int):
            opr.priority = spec["priority"]
        for v, o in zip(outs, opr.outputs):
            var[v] = o
    for v, name in names.items():
        if v in var:
            var[v].name = name
    out_list, out_dict = [], {}
    for j, spec in enumerate(_need(graph, "outputs", list, _GRAPH)):
        what = f"output {j}"
        name = _need(spec, "name", str, what)
        v = _var(_need(spec, "var", int, what), n, what)
        if v not in var:
            raise _Bad(f"output {name!r} (var {v}) has no value")
        name = names.get(v) or name  # a name the file keeps for the var wins
        var[v].name = name
        out_list.append(var[v])
        out_dict[name] = var[v]
    metadata = _read_metadata(graph, z, label, dec)
    return G.CompGraphLoadResult(g, out_dict, out_list, metadata)


def _read_metadata(graph, z, label, dec):
    meta = graph.get("metadata")
    if meta is None:
        return None
    if not isinstance(meta, dict):
        raise _Bad(f"metadata: {meta!r}")
    out = {"graph_modified": bool(meta.get("graph_modified", False)),
           "optimized_for_inference": bool(meta.get("optimized_for_inference", False)),
           "optimize_options": list(meta.get("optimize_options", []))}
    if "user_info_pickle" in meta:
        out["user_info_pickle"] = _member(z, meta["user_info_pickle"], label)
    else:
        out["user_info"] = dec.value(graph["user_info"]) if "user_info" in graph else None
    return out
