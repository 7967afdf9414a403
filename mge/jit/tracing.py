"""``mge.jit.trace``: record a function's ops once, then replay them as compiled programs.

MegEngine's ``megengine.jit.trace`` (seed ``000``: the ``Trace`` proxy's ``enter``/``exit``).  The
first call with arguments of given shapes and dtypes *records*: the function runs as usual and the
``trace`` plugin writes down every op it issues, backward and optimizer ops included.  Later calls
*replay*: the function's Python runs again (its side effects and return values are the user's),
each op is checked against the recording and answered with a placeholder, and the ops run as
compiled programs on the channel (``program.py``).  Arguments of other shapes record a new trace,
unless shapes are fixed (``symbolic_shape=False``), where they are a ``TraceError``.
"""
import contextlib
import functools

from .._core import _accel
from .._core.channel import get_channel
from .._core.errors import TraceError
from .._core import profiler as _profiler  # profiler: trace record/replay spans (issue 13)
from .._core.plugins import get_plugin
from ..core._trace_option import set_symbolic_shape, use_symbolic_shape  # noqa: F401 (MegEngine's)
from ..tensor import Tensor
from .dump import dump_trace
from .naming import dump_request
from .program import Programs

__all__ = ["trace", "exclude_from_trace", "is_tracing", "TraceError"]

_channel = get_channel()
_dispatch = _accel.load("mge._core.dispatch")
_active = None      # the trace whose call is running (one at a time, as in MegEngine)
_excluded = False   # inside exclude_from_trace()
_MAX_SIGNATURES = 16


def is_tracing():
    """Whether a traced function is running now (and not inside ``exclude_from_trace``)."""
    return _active is not None and not _excluded


@contextlib.contextmanager
def exclude_from_trace():
    """Run the block's ops eagerly, outside the trace: they are neither recorded nor replayed.

    The trace is cut there, as MegEngine's is: the ops recorded (or matched) so far run first,
    and a value computed before the block that an op reads after it enters the trace as an
    input taken as it is in each call -- so the block may replace it (``x = -x`` in some calls
    only).  What the block computes is not part of the trace.
    """
    global _excluded
    if _excluded or _active is None:
        yield
        return
    layer = _active._layer
    layer.cut()  # what ran so far has values; they re-enter the trace as cut vars
    _excluded = True
    stack = _plugin().stack
    stack.unregister(layer)
    hook = _dispatch.set_top_hook(None)
    backward_hook = _set_backward_hook(None)
    try:
        yield
    finally:
        _set_backward_hook(backward_hook)
        _dispatch.set_top_hook(hook)
        stack.register(layer, "trace")
        _excluded = False


def _plugin():
    return get_plugin("trace")


def _run_under(layer, function, args, kwargs):
    # the call with ``layer`` on the stack's trace segment, as apply()'s hook for top-level
    # calls and as the grad plugin's hook for backward passes
    _plugin().stack.register(layer, "trace")
    _dispatch.set_top_hook(layer)
    _set_backward_hook(layer)
    try:
        return function(*args, **kwargs)
    finally:
        _set_backward_hook(None)
        _dispatch.set_top_hook(None)
        _plugin().stack.unregister(layer)


def _set_backward_hook(layer):
    # the grad plugin tells a trace's layer about backward passes (None: it is switched off)
    try:
        grad = get_plugin("grad")
    except Exception:
        return None
    return grad.set_backward_hook(layer)


def _flatten(obj, out):
    # the tensors of (nested) tuples, lists and dicts, in order; the rest is structure
    if isinstance(obj, Tensor):
        out.append(obj)
        return ("T",)
    if isinstance(obj, (list, tuple)):
        return (type(obj).__name__, tuple(_flatten(x, out) for x in obj))
    if isinstance(obj, dict):
        return ("dict", tuple((k, _flatten(obj[k], out)) for k in sorted(obj, key=repr)))
    try:
        hash(obj)
        return ("const", obj)
    except TypeError:
        return ("const", repr(obj))


class _Trace:
    """One recording (for one signature of arguments) and its compiled programs."""

    def __init__(self, recording, in_tree, out_tree, profile=None, opt_level=2):
        self.recording = recording
        self.in_tree = in_tree
        self.out_tree = out_tree
        self.programs = Programs(profile, opt_level)
        self.programs_run = True  # every device of the recording runs compiled programs


def _programs_run_on(devices):
    # whether the recording's ops run as compiled programs: every device runs programs as one op
    # (Device.runs_programs), and they are the CPU's or all on one device (a program runs on one
    # device: the CUDA device's steps go through its own door).  Otherwise a recording is made
    # eagerly and replays issue the recorded ops one by one.
    impls = {getattr(d, "impl", None) for d in devices}
    if not all(getattr(i, "runs_programs", True) for i in impls):
        return False
    return len(impls) <= 1 or all(getattr(i, "kind", None) == "cpu" for i in impls)


class trace:
    """Wraps a function so that its ops are recorded on the first call and replayed after.

    ``trace(function, symbolic=False, capture_as_const=False, record_only=False,
    sublinear_memory_config=None, dtr_config=None, profiling=False, opt_level=2,
    graph_opt_config=None, symbolic_shape=True, without_host=False)``, usable as
    ``@trace``, ``@trace(symbolic=True)`` or ``trace(f)``.

    * ``capture_as_const`` -- tensors the function reads but does not receive (parameters,
      globals) keep the values they had when recorded; every argument must then be a tensor.
    * ``symbolic_shape`` -- ``False`` fixes the argument shapes: others are a ``TraceError``;
      with ``True`` (the default) they record a new trace.
    * ``symbolic`` -- the first call records the ops without running them (lazily): values
      that depend on the arguments cannot be read during it (``ValueError``), and the whole
      call runs as one compiled program when the function returns; see :class:`SymbolVar`.
      With ``False`` the first call runs op by op as it records.
    * ``record_only`` -- the first call records lazily and runs nothing (for ``dump``): its
      results have no values, tensors it updated keep theirs.  Implies ``symbolic`` and
      ``capture_as_const``; later calls replay as usual.
    * ``dtr_config`` -- DTR (``mge.dtr``) with the config's budget during each call: the
      recorded ops are issued to the channel one by one instead of as compiled programs, so
      that DTR can evict their outputs and recompute them (results bit-identical).
    * ``opt_level``, ``sublinear_memory_config``, ``graph_opt_config`` are accepted; see
      ``docs/differences.rst`` for what mge does with each.
    * ``profiling`` -- the compiled programs time their kernel calls: ``get_profile()``.
    * ``without_host`` -- later calls do not run the function's Python: the recorded ops run as
      one program on the new arguments, captured tensors the function assigned (parameters,
      optimizer states) take their new values, and the results come back in the recorded
      structure.  Other Python side effects of the function (appending to a list, ``.grad``
      attributes, printing) happen on the first call only.  On a device that runs no
      compiled programs (``Device.runs_programs``) the function runs
      again and its ops are issued one by one, as in any replay there; so does a recording
      whose tensors are on several devices, one of them not the CPU.

    Example::

        >>> import numpy as np, mge
        >>> from mge.jit import trace
        >>> @trace(symbolic=True)
        ... def f(x):
        ...     return x * 2 + 1
        >>> for _ in range(3):
        ...     y = f(mge.tensor([1.0, 2.0]))
        >>> y.numpy().tolist()
        [3.0, 5.0]
    """

    def __new__(cls, *args, **kwargs):
        if not args:
            return functools.partial(cls, **kwargs)
        return super().__new__(cls)

    def __init__(self, function, symbolic=False, capture_as_const=False, record_only=False,
                 sublinear_memory_config=None, dtr_config=None, profiling=False, opt_level=2,
                 graph_opt_config=None, symbolic_shape=True, without_host=False):
        if not callable(function):
            raise TypeError(f"trace: function must be callable, got {type(function).__name__}")
        functools.update_wrapper(self, function)
        self.__wrapped__ = function
        self.record_only = bool(record_only)
        self.symbolic = bool(symbolic) or self.record_only
        self.capture_as_const = bool(capture_as_const) or self.record_only
        self.symbolic_shape = bool(symbolic_shape)
        self.profiling = bool(profiling)
        self.opt_level = opt_level
        self.dtr_config = dtr_config
        self.sublinear_memory_config = sublinear_memory_config
        self.graph_opt_config = graph_opt_config
        self.without_host = bool(without_host)
        self._traces = {}   # argument signature -> _Trace
        self._layer = None  # the transformation on the stack during a call
        self._last = None   # the _Trace of the last call (dump, stats)

    def __get__(self, obj, objtype=None):
        # a traced method: bound to its object (a non-tensor argument, part of the signature)
        if obj is None:
            return self
        return functools.partial(self.__call__, obj)

    # -- calling ----------------------------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        global _active
        if _active is not None:
            raise TraceError(f"trace: {self.__name__!r} was called while the traced function "
                             f"{_active.__name__!r} runs; traced functions do not nest")
        tensors = []
        in_tree = _flatten((args, kwargs), tensors)
        if self.capture_as_const:
            for i, a in enumerate(args):
                if not isinstance(a, Tensor):
                    e = TypeError("Only support tensor type args when capture_as_const is "
                                  "enabled")  # (MegEngine's words; an AssertionError there)
                    e.add_note(f"trace: argument {i} is a {type(a).__name__}")
                    raise e
        key = (in_tree, tuple((t._info.shape, t._info.dtype, t._info.device) for t in tensors))
        tr = self._traces.get(key)
        _active = self
        _pspan = _profiler.trace_span(self, tr is None)  # profiler (issue 13): None when idle
        saved = _dtr_on(self.dtr_config)
        try:
            if tr is None:
                if self._traces and not self.symbolic_shape:
                    old = next(iter(self._traces))
                    raise TraceError(f"trace: the arguments differ from the recorded ones "
                                     f"(symbolic_shape=False): shapes and dtypes "
                                     f"{_describe(key)} where {_describe(old)} were recorded")
                tr, outputs = self._record(args, kwargs, tensors, in_tree)
                if len(self._traces) >= _MAX_SIGNATURES:
                    self._traces.pop(next(iter(self._traces)))
                self._traces[key] = tr
            elif self.without_host and tr.programs_run:  # (else the ops, one by one)
                outputs = self._run_without_host(tr, tensors)
            else:
                outputs = self._replay(tr, args, kwargs, tensors)
        finally:
            _dtr_restore(saved)
            _active = None
            self._layer = None
            _profiler.end(_pspan)  # profiler (issue 13)
        self._last = tr
        return outputs

    def _record(self, args, kwargs, tensors, in_tree):
        plugin = _plugin()
        rec = plugin.Recording(self.capture_as_const)
        tr = _Trace(rec, in_tree, None, {} if self.profiling else None, self.opt_level)
        # (under DTR, or with inputs on a device that runs no programs: op by op, as replays)
        lazy = self.dtr_config is None and _programs_run_on({t.device for t in tensors})
        if self.symbolic and lazy:
            tr, outputs = self._record_lazily(plugin, tr, args, kwargs, tensors)
        else:
            for t in tensors:
                rec.bind_arg(t)
            layer = self._layer = plugin.Recorder(rec)
            outputs = _run_under(layer, self.__wrapped__, args, kwargs)
            out_tensors = []
            tr.out_tree = _flatten(outputs, out_tensors)
            rec.finish(out_tensors)
        tr.programs_run = _programs_run_on({d[2] for d in rec.descs})
        return tr, outputs

    def _record_lazily(self, plugin, tr, args, kwargs, tensors):
        # symbolic=True: the ops are recorded without running, then run as one program
        rec = tr.recording
        layer = self._layer = plugin.LazyRecorder(rec, tr.programs)
        layer.bind(tensors)
        _channel.resolve = layer.resolve
        try:
            outputs = _run_under(layer, self.__wrapped__, args, kwargs)
            out_tensors = []
            tr.out_tree = _flatten(outputs, out_tensors)
            rec.finish(out_tensors)
        except BaseException:
            try:
                layer.abort()
            finally:
                _channel.resolve = None
            raise
        try:
            if self.record_only:
                layer.discard()
            else:
                layer.finish()
        finally:
            _channel.resolve = None
        return tr, outputs

    def _replay(self, tr, args, kwargs, tensors):
        plugin = _plugin()
        layer = self._layer = plugin.Replayer(tr.recording, tr.programs, self.capture_as_const)
        layer.bind(tensors)
        layer.op_by_op = self.dtr_config is not None or not tr.programs_run
        _channel.resolve = layer.resolve
        try:
            outputs = _run_under(layer, self.__wrapped__, args, kwargs)
            self._check_outputs(tr, outputs)
            layer.check_complete()
        finally:
            # what was matched runs, also after an error: the tensors the caller holds get values
            try:
                layer.launch(layer.pos)
                layer.release()
            finally:
                _channel.resolve = None
        return outputs

    def _run_without_host(self, tr, tensors):
        plugin = _plugin()
        layer = self._layer = plugin.Replayer(tr.recording, tr.programs, self.capture_as_const)
        layer.bind(tensors)
        infos = layer.run_without_host()
        out = []
        for info in infos:
            t = Tensor.__new__(Tensor)
            t._info = info
            out.append(t)
        return _unflatten(tr.out_tree, iter(out))

    def _check_outputs(self, tr, outputs):
        out_tensors = []
        out_tree = _flatten(outputs, out_tensors)
        if out_tree != tr.out_tree:
            raise TraceError(f"trace: the function returned {_tree_text(out_tree)} where it "
                             f"returned {_tree_text(tr.out_tree)} when recorded")
        rec = tr.recording
        vi = self._layer.vi
        for i, (t, v) in enumerate(zip(out_tensors, rec.outputs)):
            if v in rec.externals:
                continue  # computed outside the trace (an excluded block, a global): as it is
            if t._info is not vi[v] and not self._layer.holds(t, v):
                e = TraceError("trace error because data unreadable")
                e.add_note(f"trace: output {i} is not the value recorded as output {i} "
                           f"(shape {rec.descs[v][0]}, {rec.descs[v][1]})")
                raise e

    # -- introspection ----------------------------------------------------------------------------
    @property
    def recording(self):
        """The recording of the last call (``None`` before the first)."""
        return None if self._last is None else self._last.recording

    def get_profile(self):
        """With ``profiling=True``: the compiled programs' kernel calls since the first call, as
        a JSON-compatible dict (as MegEngine's): ``{"profiler": {"ops": [...]}}``, per op name
        the number of calls and the total and mean time in milliseconds, slowest first
        (``None`` without ``profiling``, as in MegEngine)."""
        if not self.profiling:
            return None
        total = {}
        for tr in self._traces.values():
            for name, (calls, seconds) in tr.programs.profile.items():
                entry = total.setdefault(name, [0, 0.0])
                entry[0] += calls
                entry[1] += seconds
        ops = [{"op": name, "calls": calls, "time_ms": seconds * 1e3,
                "mean_ms": seconds * 1e3 / calls}
               for name, (calls, seconds) in sorted(total.items(), key=lambda kv: -kv[1][1])]
        return {"profiler": {"ops": ops}}

    def dump(self, file, arg_names=None, output_names=None, append=False, keep_var_name=1,
             keep_opr_name=False, keep_param_name=False, keep_opr_priority=False,
             no_change_graph=False, strip_info_file=None, append_json=False,
             optimize_for_inference=True, user_info=None, enable_metadata=True,
             input_data=None, repeat=1, silent=False, **kwargs):
        """Save the last call's recording as an mge model file, for ``mge.jit.load``; returns
        a ``mge.jit.dump.DumpResult`` (MegEngine's ``CompGraphDumpResult`` fields: op count,
        bytes, constants' bytes, content hash, input, output and constant names).  With
        ``format="onnx"`` it writes an ONNX model instead (``mge.jit.export_onnx``; returns None).

        MegEngine's ``trace.dump``; the file is mge's own format (``mge/jit/dump.py``: a zip of
        ``graph.json`` and the captured values), not MegEngine's.  It holds the ops the outputs
        depend on and the values of the captured tensors (parameters, constants) as recorded.
        The function must have been traced with ``capture_as_const=True`` and called at least
        once; with several argument signatures, the last call's is saved.

        Args:
            file: a path, or a binary file object open for writing.
            arg_names: names of the positional tensor arguments (default ``arg_0``, ``arg_1``,
                ...; a ``None`` entry keeps the default); tensors passed by keyword are named
                by their keyword.
            output_names: names of the tensor results (default ``output_0``, ...); a function
                returning a dict of tensors has its keys as names, and ``output_names`` is then
                a ``TypeError``, as in MegEngine.
            append: with a path, write after the file's existing content (``mge.jit.load``
                reads the last model of a file).
            user_info: JSON-like data (``None``, bools, numbers, strings, lists, tuples, dicts)
                kept in the file (``LoadedModel.user_info``); not pickled, unlike MegEngine.
            enable_metadata: ``False`` leaves ``user_info`` out.
            keep_opr_name: keep the ops' names (MegEngine's: the module scopes and the op's
                kind, ``"simple.linear.MatrixMul"``; ``mge.jit.naming``).
            keep_var_name: 0: keep only the inputs' var names; 1 or 2: keep every var's (the
                names of the tensors, ``y.name = ...``, or of the ops computing them).

        MegEngine's other options are accepted and ignored: ``keep_param_name`` (the
        captured tensors are constants, named as the other vars), ``keep_opr_priority``,
        ``no_change_graph``,
        ``strip_info_file``, ``append_json``, ``optimize_for_inference`` (True by default, as in
        MegEngine; it enables the ``enable_*`` float16 I/O options ``enable_io16xc32`` and
        ``enable_ioc16``, and is recorded in the file's metadata; the loaded program is
        optimized as a replay's is), ``input_data``, ``repeat``, ``silent``, and the keywords
        ``no_assert``, ``maxerr``, ``resize_input``, ``input_transform``, ``dump_format``,
        ``model_version`` and ``enable_*`` (layout and precision passes); another keyword is a
        ``TypeError``.
        """
        if not self.capture_as_const:
            raise ValueError("you must specify capture_as_const=True at __init__ to use dump")
        # the names the user asked for (MegEngine renames only with those): mge.jit.naming
        with dump_request(arg_names is not None, self._given_output_names(output_names)):
            return dump_trace(self, file, arg_names, output_names, append=append,
                              user_info=user_info if enable_metadata else None,
                              ignored=dict(kwargs, keep_var_name=keep_var_name,
                                           keep_opr_name=keep_opr_name,
                                           keep_param_name=keep_param_name,
                                           keep_opr_priority=keep_opr_priority,
                                           optimize_for_inference=optimize_for_inference,
                                           enable_metadata=enable_metadata))

    def _given_output_names(self, output_names):
        # output_names as given, else the keys of a returned dict of tensors, else None
        if output_names:
            return [output_names] if isinstance(output_names, str) else list(output_names)
        tree = None if self._last is None else self._last.out_tree
        if tree is not None and tree[0] == "dict" and all(t == ("T",) for _, t in tree[1]):
            return [str(k) for k, _ in tree[1]]
        return None


_DTR_OPTIONS = ("enable_dtr_auto_drop", "enable_drop", "record_computing_path",
                "dtr_eviction_threshold", "dtr_evictee_minimum_size")


def _dtr_on(config):
    # dtr_config: DTR with its budget for the length of a call; returns the options to restore
    if config is None:
        return None
    saved = {name: _channel.get_option(name) for name in _DTR_OPTIONS}
    for name, value in (("enable_dtr_auto_drop", 1), ("enable_drop", 1),
                        ("record_computing_path", 1),
                        ("dtr_eviction_threshold", int(config.eviction_threshold)),
                        ("dtr_evictee_minimum_size", int(config.evictee_minimum_size))):
        _channel.set_option(name, value)
    return saved


def _dtr_restore(saved):
    if saved is not None:
        for name, value in saved.items():
            _channel.set_option(name, value)


def _unflatten(tree, tensors):
    # the structure _flatten described, with the next tensors in place of its tensors
    kind = tree[0]
    if kind == "T":
        return next(tensors)
    if kind == "const":
        return tree[1]
    if kind == "dict":
        return {k: _unflatten(sub, tensors) for k, sub in tree[1]}
    items = [_unflatten(sub, tensors) for sub in tree[1]]
    return tuple(items) if kind == "tuple" else items


def _describe(key):
    return ", ".join(f"{s}:{d}" for s, d, _ in key[1]) or "(no tensors)"


def _tree_text(tree):
    return str(tree).replace("('T',)", "Tensor")

