"""The profiler: MegEngine 1.13's ``megengine.utils.profiler`` on mge::

    from mge.utils.profiler import Profiler, scope

    with Profiler("profile", formats=["chrome_timeline.json", "memory_flow.svg"]):
        with scope("step"):
            train_step(x, y)
    # profile/<pid>.chrome_timeline.json (open it in https://ui.perfetto.dev)
    # profile/<pid>.memory_flow.svg

What is recorded (``mge/_core/profiler.py`` records; this module starts, stops and writes): every
top-level op dispatch (name and parameters), every channel command on the thread that ran it, every
kernel at the device's kernel door, with a flow arrow from the dispatch to it, waits on values,
scopes, DTR evictions and recomputations, ``jit.trace`` calls, each buffer's allocation and free
with its size, and counters (memory per device, live tensors, pending commands).  With no profiler
running, each event site costs one pointer comparison.

One profiler records at a time: starting a second while one runs raises ``RuntimeError``.
"""
import functools
import json
import logging
import os
import re
import traceback
import weakref
from contextlib import ContextDecorator, contextmanager
from typing import List

from .._core import profiler as _rec
from .._core.channel import get_channel
from . import _memory, _timeline

__all__ = ["Profiler", "profile", "scope", "is_profiling", "merge_trace_events", "start_profile",
           "stop_profile", "push_scope", "pop_scope", "push_scope_with_type",
           "pop_scope_with_type", "sync", "full_sync", "stop_step", "cupti_available",
           "enable_cupti", "disable_cupti", "set_python_backtrace_enabled", "get_logger"]

_running_profiler = None
_living_profilers = weakref.WeakSet()  # stopped profilers whose results are not written yet


def get_logger(name=None):
    """The logger the profiler reports to (``mge.utils.profiler`` by default)."""
    return logging.getLogger(name or __name__)


# -- the runtime's calls (seed 000: start_profile, stop_profile, push_scope, pop_scope) ---------
def start_profile(options=None):
    """Start recording with ``options`` (the ``Profiler`` options); waits for queued work first."""
    _rec.start(options)


def stop_profile():
    """Stop recording; returns ``dump(basename, format)``, which writes the results once."""
    rec = _rec.stop()
    holder = [rec]

    def dump(basename, format):
        if holder[0] is None:
            raise RuntimeError("these profiling results were written already")
        _write(holder[0], basename, format)

    dump.recorder = rec
    return dump


def push_scope(name):
    """Open the scope ``name`` on the calling thread (a span in the timeline)."""
    get_channel().push_scope(name)


def pop_scope(name):
    """Close the calling thread's innermost scope, which must be ``name``."""
    get_channel().pop_scope(name)


def push_scope_with_type(name, type):
    """``push_scope`` for a scope of a kind (``"module"``, ``"functional"``, ...); mge records
    the kind in the name (``"<type>:<name>"`` is not used: the name alone, as shown by MegEngine)."""
    push_scope(name)


def pop_scope_with_type(name, type):
    """Close a scope opened by ``push_scope_with_type``."""
    pop_scope(name)


def sync():
    """Wait until every op issued so far has run."""
    get_channel().sync()


def full_sync():
    """``sync`` plus the devices' own queues."""
    get_channel().full_sync()


def stop_step():
    """Mark the end of a step (an instant event ``step`` in the timeline)."""
    _rec.instant("profiler", "step")


def cupti_available():
    """Whether CUDA's CUPTI can time kernels on the device: never on mge (CPU kernels are timed
    where they run)."""
    return False


def enable_cupti():
    """Not available on mge: raises ``RuntimeError``."""
    raise RuntimeError("CuPTI is not available on mge")


def disable_cupti():
    """Nothing to disable on mge."""


_backtrace = False


def set_python_backtrace_enabled(enabled):
    """Record the Python stack of each dispatched op (``Profiler(with_backtrace=True)``);
    returns the previous setting."""
    global _backtrace
    prev, _backtrace = _backtrace, bool(enabled)
    rec = _rec.active()
    if rec is not None:
        rec.backtrace = _backtrace
    return prev


# -- writing results ----------------------------------------------------------------------------
def _write(rec, path, format):
    if format == "chrome_timeline.json":
        data = _timeline.timeline(rec, _pid_of(path))
        with open(path, "w", encoding="utf-8") as f:
            json.dump(data, f, ensure_ascii=False, separators=(",", ":"))
    elif format == "memory_flow.svg":
        events = _timeline.trace_events(rec, _pid_of(path))
        n = int(rec.options.get("num_tensor_watch", 10))
        with open(path, "w", encoding="utf-8") as f:
            f.write(_memory.memory_flow_svg(events, num_tensor_watch=n))
    else:
        raise ValueError(f"unsupported profiler format {format!r}")


def _pid_of(path):
    m = re.match(r"(\d+)\.", os.path.basename(path))
    return int(m.group(1)) if m else os.getpid()


# -- scopes of modules, functionals and backward ------------------------------------------------
class _Patcher:
    """Wraps ``Module.__call__`` and the public functions of ``mge.functional`` in scopes while
    a ``with_scopes`` profile runs (MegEngine's ``Patcher``), and ``GradManager.backward`` in a
    ``backward`` scope during every profile; ``restore`` puts the originals back."""

    def __init__(self, with_scopes):
        self.saved = []
        from .. import autodiff
        gm = autodiff.GradManager
        self._patch(gm, "backward", _scoped_method(gm.backward, lambda self: "backward"))
        if with_scopes:
            from .. import functional as F
            from ..module import Module
            self._patch(Module, "__call__",
                        _scoped_method(Module.__call__, lambda self: type(self).__name__))
            seen = set()
            for mod in [F] + [getattr(F, n) for n in ("nn", "math", "elemwise", "tensor", "loss",
                                                      "indexing") if hasattr(F, n)]:
                for name in dir(mod):
                    fn = getattr(mod, name)
                    if name.startswith("_") or not callable(fn) or isinstance(fn, type):
                        continue
                    if not getattr(fn, "__module__", "").startswith("mge.functional"):
                        continue
                    wrapped = seen_wrapper(seen, fn, name)
                    self._patch(mod, name, wrapped)

    def _patch(self, owner, name, new):
        self.saved.append((owner, name, owner.__dict__.get(name, _MISSING)))
        setattr(owner, name, new)

    def restore(self):
        for owner, name, old in reversed(self.saved):
            if old is _MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, old)
        self.saved = []


_MISSING = object()
_wrappers = {}


def seen_wrapper(seen, fn, name):
    w = _wrappers.get(fn)
    if w is None:
        w = _wrappers[fn] = _scoped_function(fn, name)
    return w


def _scoped_function(fn, name):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if _rec.active() is None:
            return fn(*args, **kwargs)
        push_scope(name)
        try:
            return fn(*args, **kwargs)
        finally:
            pop_scope(name)
    return wrapper


def _scoped_method(fn, name_of):
    @functools.wraps(fn)
    def wrapper(self, *args, **kwargs):
        if _rec.active() is None:
            return fn(self, *args, **kwargs)
        name = name_of(self)
        push_scope(name)
        try:
            return fn(self, *args, **kwargs)
        finally:
            pop_scope(name)
    return wrapper


# -- the Profiler -------------------------------------------------------------------------------
class Profiler(ContextDecorator):
    r"""Profile the imperative runtime: ops, commands, kernels, memory.

    Args:
        path: the directory the results are written to (``<path>/<pid>.<format>``).
        format: the result format when ``formats`` is not given: ``"chrome_timeline.json"``
            (the Trace Event format: open it in Perfetto or ``chrome://tracing``) or
            ``"memory_flow.svg"`` (tensor lifetimes against memory).
        formats: several formats at once (a list).
        with_backtrace: record the Python stack of each dispatched op (in its ``args``).
        with_scopes: a scope per module call (the module's class name) and per ``mge.functional``
            call (the function's name); slower.
        sample_rate: every ``sample_rate``-th kernel also records a ``memory sample`` counter
            (0: none; mge's memory counters are exact anyway).
        profile_device: 0 leaves the kernel spans out (only the host side is recorded).
        num_tensor_watch: how many of the largest tensors alive at the peak the memory picture
            labels.
        enable_cupti: accepted for MegEngine's code; CuPTI is not available (a warning).

    Use it as a context manager (the results are written when the block ends), as a decorator
    (each call of the function is profiled), or with ``start``/``stop``/``dump``::

        profiler = Profiler("profile")
        for step in range(10):
            with profiler:  # the results of the last step remain
                train_step()
    """

    CHROME_TIMELINE = "chrome_timeline.json"

    valid_options = {"sample_rate": 0, "profile_device": 1, "num_tensor_watch": 10,
                     "enable_cupti": 0}
    valid_formats = {"chrome_timeline.json", "memory_flow.svg"}

    def __init__(self, path: str = "profile", format: str = "chrome_timeline.json",
                 formats: List[str] = None, with_backtrace: bool = False,
                 with_scopes: bool = False, **kwargs) -> None:
        if not formats:
            formats = [format]
        if isinstance(formats, str):
            raise TypeError("formats expects a list of formats, got a str")
        for f in formats:
            if f not in Profiler.valid_formats:
                raise ValueError(f"unsupported profiler format {f!r} (valid: "
                                 f"{', '.join(sorted(Profiler.valid_formats))})")
        self._path = path
        self._formats = list(formats)
        self._options = {}
        for opt, default in Profiler.valid_options.items():
            self._options[opt] = int(kwargs.pop(opt, default))
        if kwargs:
            raise TypeError(f"Profiler got unknown option(s) {', '.join(sorted(kwargs))} "
                            f"(valid: {', '.join(Profiler.valid_options)})")
        if self._options["enable_cupti"]:
            get_logger().warning("CuPTI unavailable")
        self._pid = "<PID>"
        self._dump_callback = None
        self._patcher = None
        self._with_scopes = bool(with_scopes)
        self.with_backtrace = bool(with_backtrace)
        self._recorder = None

    # -- where results go -------------------------------------------------------------------------
    @property
    def path(self):
        """``<directory>/<pid>.<format>`` (``{a,b}`` for several formats)."""
        if len(self._formats) == 1:
            fmt = self._formats[0]
        else:
            fmt = "{" + ",".join(self._formats) + "}"
        return self.format_path(self._path, self._pid, fmt)

    @property
    def directory(self):
        """The directory the results are written to."""
        return self._path

    @property
    def formats(self):
        """The formats that ``dump`` writes."""
        return list(self._formats)

    @property
    def format(self):
        """The first of ``formats``."""
        return self._formats[0]

    @property
    def recorder(self):
        """The last stopped profile's ``Recorder`` (raw events), or ``None``."""
        return self._recorder

    def format_path(self, path, pid, format):
        """The file of ``format`` for process ``pid`` under ``path``."""
        return os.path.join(path, "{}.{}".format(pid, format))

    # -- recording ---------------------------------------------------------------------------------
    def start(self):
        """Start recording; raises ``RuntimeError`` while another profiler records."""
        global _running_profiler
        if _running_profiler is not None:
            raise RuntimeError("another Profiler is already running (one profiler at a time): "
                               "stop it first")
        if _rec.active() is not None:
            raise RuntimeError("a profile is already being recorded (start_profile): stop it "
                               "first")
        options = dict(self._options, with_backtrace=self.with_backtrace)
        _rec.start(options)
        _running_profiler = self
        rec = _rec.active()
        rec.backtrace = self.with_backtrace or _backtrace
        self._pid = os.getpid()
        try:
            self._patcher = _Patcher(self._with_scopes)
        except BaseException:
            _running_profiler = None
            _rec.stop()
            raise
        return self

    def stop(self):
        """Stop recording (after every queued op has run); ``dump`` writes the results."""
        global _running_profiler
        if _running_profiler is not self:
            raise RuntimeError("this Profiler is not running")
        _running_profiler = None
        if self._patcher is not None:
            self._patcher.restore()
            self._patcher = None
        self._dump_callback = stop_profile()
        self._recorder = self._dump_callback.recorder
        self._pid = os.getpid()
        _living_profilers.add(self)

    def step(self):
        """Mark the end of a step in the timeline."""
        if _running_profiler is None:
            raise RuntimeError("no Profiler is running")
        stop_step()
        return self

    def dump(self):
        """Write the results of the last stopped profile, one file per format; returns their
        paths (``[]`` when there is nothing new to write)."""
        if self._dump_callback is None:
            return []
        os.makedirs(self._path, exist_ok=True)
        paths = []
        for fmt in self._formats:
            path = self.format_path(self._path, self._pid, fmt)
            get_logger().info("process %s generating %s", self._pid, fmt)
            _write(self._recorder, path, fmt)
            get_logger().info("profiling results written to %s", path)
            if os.path.getsize(path) > 64 * 1024 * 1024:
                get_logger().warning("profiling results too large, maybe you are profiling "
                                     "multi iters, consider attach profiler in each iter "
                                     "separately")
            paths.append(path)
        self._dump_callback = None
        _living_profilers.discard(self)
        return paths

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()
        self.dump()
        return False

    def __call__(self, func):
        func = super().__call__(func)
        func.__profiler__ = self
        return func

    def __del__(self):
        try:
            self.dump()
        except Exception:
            pass


@contextmanager
def _scope(name):
    push_scope(name)
    try:
        yield
    finally:
        pop_scope(name)


class scope(ContextDecorator):
    """A named scope: a span in the timeline around the ops inside it (context manager or
    decorator).  Scopes are per thread and nest."""

    def __init__(self, name):
        self.name = name

    def __enter__(self):
        push_scope(self.name)
        return self

    def __exit__(self, *exc):
        pop_scope(self.name)
        return False


def profile(*args, **kwargs):
    """``@profile`` (a default ``Profiler`` for each call of the function) or
    ``profile(path, ...)`` (a ``Profiler`` with those arguments)."""
    if len(args) == 1 and not kwargs and callable(args[0]):
        return Profiler()(args[0])
    return Profiler(*args, **kwargs)


def is_profiling():
    """Whether a ``Profiler`` is recording now."""
    return _running_profiler is not None


def merge_trace_events(directory: str):
    """Merge ``<pid>.chrome_timeline.json`` of several processes in ``directory`` into
    ``merge.chrome_timeline.json``, their clocks aligned by the wall time each started at."""
    names = sorted(n for n in os.listdir(directory) if re.match(r"\d+\.chrome_timeline\.json$", n))
    if not names:
        raise FileNotFoundError(f"no <pid>.chrome_timeline.json in {directory}")
    contents = []
    for n in names:
        with open(os.path.join(directory, n), encoding="utf-8") as f:
            content = json.load(f)
        if isinstance(content, list):
            content = {"traceEvents": content}
        contents.append(content)

    def local_time(content):
        for e in content["traceEvents"]:
            if e.get("name") == "Metadata":
                return e["args"]["localTime"]
        return None

    times = [local_time(c) for c in contents]
    known = [t for t in times if t is not None]
    base = min(known) if known else 0
    events = []
    for content, t in zip(contents, times):
        shift = 0 if t is None else t - base
        for e in content["traceEvents"]:
            if e.get("name") == "Metadata":
                continue
            if "ts" in e:
                e["ts"] = round(e["ts"] + shift, 3)
            events.append(e)
    path = os.path.join(directory, "merge.chrome_timeline.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"traceEvents": events}, f, ensure_ascii=False, separators=(",", ":"))
    get_logger().info("profiling results written to %s", path)
    return path


def _stop_current_profiler():
    if _running_profiler is not None:
        try:
            _running_profiler.stop()
        except Exception:
            pass
    for p in list(_living_profilers):
        try:
            p.dump()
        except Exception:
            pass


import atexit  # noqa: E402

atexit.register(_stop_current_profiler)
del _scope, traceback
