"""``_imperative_rt.core2``: the Python face of MegEngine's runtime (``tensor.cpp``), over mge.

``apply(op, *inputs)`` runs an op -- one of :mod:`mge.core.ops.builtin` (MegEngine's op classes) or
one of mge's own (``mge.core.ops``) -- and returns a tuple of tensors.  ``Tensor`` is mge's tensor;
``AsyncError``/``TraceError`` are mge's errors; options, ``sync``/``full_sync``/``close`` act on
mge's channel; ``GradKey`` is the grad plugin's.
"""
import weakref

from ..._core.channel import get_channel
from ..._core.errors import AsyncError, TraceError  # noqa: F401
from ..._core.device import as_device
from ...tensor import Tensor
from ..ops.builtin import apply
from .. import _trace_option

__all__ = ["apply", "Tensor", "AsyncError", "TraceError", "GradKey", "set_option", "get_option",
           "sync", "full_sync", "close", "TensorWeakRef", "make_shape_tuple", "Const",
           "get_device", "_set_swap_flag", "_get_swap_flag", "_set_drop_flag", "_get_drop_flag",
           "set_cpp_use_symbolic_shape", "create_complex", "_get_convert_inputs",
           "_set_convert_inputs", "_set_async_level", "_get_async_level", "config_async_error"]


def set_option(name, value):
    """Set the channel option ``name`` (``async_level``, ``enable_drop``, ...)."""
    get_channel().set_option(name, value)


def get_option(name):
    """The value of the channel option ``name``."""
    return get_channel().get_option(name)


def sync():
    """Wait until the ops issued so far have run; raises an ``AsyncError`` of one that failed."""
    get_channel().sync()


def full_sync():
    """``sync`` and wait for the device work too."""
    get_channel().full_sync()


def close():
    """Finish every pending op (the channel stays usable)."""
    get_channel().sync()


def _set_swap_flag(flag):
    """Allow (``True``) or forbid tensor swapping (channel option ``enable_swap``)."""
    set_option("enable_swap", int(bool(flag)))


def _get_swap_flag():
    """Whether tensor swapping is enabled."""
    return bool(get_option("enable_swap"))


def _set_drop_flag(flag):
    """Allow (``True``) or forbid tensor dropping (channel option ``enable_drop``)."""
    set_option("enable_drop", int(bool(flag)))


def _get_drop_flag():
    """Whether tensor dropping is enabled."""
    return bool(get_option("enable_drop"))


def _set_async_level(level):
    """Set the channel option ``async_level`` (0, 1 or 2)."""
    set_option("async_level", int(level))


def _get_async_level():
    """The channel option ``async_level``."""
    return get_option("async_level")


def config_async_error(level):
    """MegEngine's switch for where asynchronous errors are raised; mge raises them at the next
    sync point as ``AsyncError`` (``async_level`` 0 raises at the op).  Sets ``async_level``."""
    set_option("async_level", 0 if level else 2)


_convert_inputs = [True]


def _get_convert_inputs():
    """Whether ``apply`` converts Python values among its inputs (always, in mge)."""
    return _convert_inputs[0]


def _set_convert_inputs(flag):
    """Kept for MegEngine's signature: mge's ``apply`` always converts; returns the old flag."""
    old = _convert_inputs[0]
    _convert_inputs[0] = bool(flag)
    return old


def set_cpp_use_symbolic_shape(fn):
    """MegEngine passes the symbolic-shape switch to C++; mge reads :mod:`_trace_option`."""
    del fn


def _grad_module():
    """The grad plugin's module (``GradKey``, ``backward``, ``set_grad``, ...)."""
    import sys
    from .. import get_plugin
    return sys.modules[type(get_plugin("grad")).__module__]


def GradKey(name=None):
    """A grad plugin ``GradKey`` (``mge.core.get_plugin("grad").GradKey``)."""
    return _grad_module().GradKey(name)


class TensorWeakRef:
    """A weak reference to a tensor: ``ref()`` is the tensor or ``None`` once it is gone."""

    def __init__(self, tensor):
        self._ref = weakref.ref(tensor)

    def __call__(self):
        return self._ref()

    def _use_cnt(self):
        """How many references the tensor has (0 once it is gone)."""
        import sys
        t = self._ref()
        return 0 if t is None else sys.getrefcount(t) - 2


def make_shape_tuple(shape):
    """A shape (tuple, list, numpy array or tensor) as a tuple of ints."""
    if isinstance(shape, Tensor):
        return tuple(int(s) for s in shape.numpy().reshape(-1))
    if hasattr(shape, "__len__") and not isinstance(shape, (str, bytes)):
        import numpy as np
        return tuple(int(s) for s in np.asarray(shape).reshape(-1))
    return (int(shape),)


def Const(value, dtype=None, device=None):
    """A constant tensor of ``value``."""
    return Tensor(value, dtype=dtype, device=device, is_const=True)


def get_device(*args):
    """The device of the first tensor among ``args`` (nested sequences searched), or the default."""
    for a in args:
        if isinstance(a, Tensor):
            return a.device
        if isinstance(a, (list, tuple)):
            d = get_device(*a)
            if d is not None:
                return d
    return as_device(None)


def create_complex(real, imag):
    """A complex64 tensor ``real + 1j * imag`` from two float tensors (``F.complex``)."""
    from ...functional.tensor import complex as _complex
    return _complex(real, imag)


_ = _trace_option


# -- grad: the grad plugin's functions (seed 000's GradKeyWrapper::backward, set_grad, ...) -----
def backward(key, ys, dys):
    """Backward from ``ys`` with output gradients ``dys`` over the recording of ``key``."""
    return _grad_module().backward(key, ys, dys)


def get_backward_closure(key, ys):
    """A function of ``dys`` that runs :func:`backward` of ``key`` from ``ys``."""
    return _grad_module().get_backward_closure(key, ys)


def set_grad(backward_fn, inputs, outputs):
    """Make ``backward_fn(*output_grads)`` the backward of ``outputs`` with respect to ``inputs``
    for every recording key that tracks an input; returns ``outputs`` (a list)."""
    return _grad_module().set_grad(backward_fn, inputs, outputs)


def get_grad_key(tensors):
    """The newest recording ``GradKey`` that tracks one of ``tensors``, or ``None``."""
    return _grad_module().get_grad_key(list(tensors))


def is_grad_attached(tensors):
    """Whether a recording ``GradKey`` tracks one of ``tensors``."""
    return _grad_module().is_grad_attached(list(tensors))


# -- scopes and profiling: mge's profiler (mge/_core/profiler.py, mge.utils.profiler) ---------
def _profiler():
    from ...utils import profiler
    return profiler


def push_scope(name):
    """Open the scope ``name`` on the calling thread (a span in a running profile)."""
    get_channel().push_scope(name)


def pop_scope(name):
    """Close the calling thread's innermost scope, which must be ``name``."""
    get_channel().pop_scope(name)


def push_scope_with_type(name, type):
    """:func:`push_scope` for a scope of a kind (``"module"``, ``"functional"``, ...)."""
    _profiler().push_scope_with_type(name, type)


def pop_scope_with_type(name, type):
    """Close a scope opened by :func:`push_scope_with_type`."""
    _profiler().pop_scope_with_type(name, type)


class record_scope:
    """``with record_scope(name): ...`` -- a scope around the block (:func:`push_scope` then
    :func:`pop_scope`)."""

    def __init__(self, name):
        self.name = name

    def __enter__(self):
        push_scope(self.name)
        return self

    def __exit__(self, *exc):
        pop_scope(self.name)


def start_profile(options=None):
    """Start recording a profile with ``options`` (``mge.utils.profiler.Profiler``'s options)."""
    _profiler().start_profile(options)


def stop_profile():
    """Stop recording; returns ``dump(basename, format)``, which writes the results once."""
    return _profiler().stop_profile()


def stop_step():
    """Mark the end of a step in a running profile."""
    _profiler().stop_step()


def cupti_available():
    """Whether CUDA's CUPTI can time kernels: never on mge (no CUDA device yet)."""
    return _profiler().cupti_available()


def enable_cupti():
    """Raises ``RuntimeError``: CUPTI is not available on mge."""
    _profiler().enable_cupti()


def disable_cupti():
    """Nothing to disable on mge (CUPTI is never enabled)."""
    _profiler().disable_cupti()


def set_python_backtrace_enabled(enabled):
    """Record the Python stack of each dispatched op in a profile; returns the previous value."""
    return _profiler().set_python_backtrace_enabled(enabled)


def clear_candidates():
    """DTR: forget the tensors that may be evicted (nothing is evicted automatically after)."""
    get_channel().dtr.clear_candidates()


def get_handle_id(tensor):
    """An id of the tensor's runtime handle (its channel ``TensorInfo``): equal for tensors that
    share one value handle, stable while the tensor lives."""
    return id(tensor._info)


def name_tensor(name, tensor):
    """Give ``tensor`` the name ``name`` (``tensor.name``)."""
    tensor.name = name


def group_start():
    """Begin a group of collectives (``mge.distributed.group_start``)."""
    from ... import distributed
    distributed.group_start()


def group_end():
    """End a group begun by :func:`group_start`."""
    from ... import distributed
    distributed.group_end()


# -- tensor formats --------------------------------------------------------------------------
import enum as _enum  # noqa: E402


class FormatType(_enum.IntEnum):
    """MegEngine's tensor format type: ``DEFAULT``, ``NCHW``, ``NHWC`` (mge's ``Tensor.format``
    strings ``"default"``, ``"nchw"``, ``"nhwc"``)."""

    DEFAULT = 0
    NCHW = 1
    NHWC = 2


DEFAULT = FormatType.DEFAULT
NCHW = FormatType.NCHW
NHWC = FormatType.NHWC


def get_auto_format_convert():
    """Whether NHWC tensors are converted automatically: never in mge (``False``)."""
    return False


def set_auto_format_convert(option):
    """``False`` is accepted (returns the previous value, ``False``); ``True`` raises
    ``NotImplementedError``: mge carries formats as labels and does not convert layouts."""
    if option:
        raise NotImplementedError("mge has no automatic format conversion: tensors carry their "
                                  "format as a label (docs/differences.rst)")
    return False


# -- names of MegEngine's C++ internals with no counterpart in mge --------------------------------
def _internal(name, why):
    def fn(*args, **kwargs):
        raise NotImplementedError(f"core2.{name}: {why}")
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"Not available in mge: raises ``NotImplementedError`` ({why})."
    return fn


def _internal_class(name, why):
    def init(self, *args, **kwargs):
        raise NotImplementedError(f"core2.{name}: {why}")
    return type(name, (), {"__init__": init, "__module__": __name__,
                           "__doc__": f"Not available in mge: constructing one raises "
                                      f"``NotImplementedError`` ({why})."})


_TRACE = "MegEngine's C++ trace internals; mge's tracing is mge.jit.trace"
_MODULE_TRACE = "traced_module's hooks; mge has no traced_module"
_PYTYPE = "MegEngine registers its Python classes with its C++ runtime; mge's runtime is Python"
_INTERNALS = {
    "add_backward_callback": "a callback of MegEngine's C++ grad tape; use GradManager callbacks",
    "get_grad_slot": "MegEngine's C++ grad slots; use get_grad_key / is_grad_attached",
    "begin_record_values": "MegEngine's C++ value-recording debug aid",
    "end_record_values": "MegEngine's C++ value-recording debug aid",
    "print_stats": "MegEngine's C++ runtime statistics; use mge.utils.profiler",
    "reset_stats": "MegEngine's C++ runtime statistics; use mge.utils.profiler",
    "set_transformation_backtrace_enabled": "MegEngine's C++ transformation backtraces; mge's "
                                            "errors carry Python tracebacks",
    "get_marked_tensor": _TRACE, "get_marked_input_tensor": _TRACE,
    "get_marked_output_tensor": _TRACE, "marked_input_tensor": _TRACE,
    "set_module_tracing": _MODULE_TRACE, "unset_module_tracing": _MODULE_TRACE,
    "set_module_trace_hook": _MODULE_TRACE,
    "set_external_convert": _MODULE_TRACE, "unset_external_convert": _MODULE_TRACE,
    "set_external_convert_hook": _MODULE_TRACE,
    "set_py_tensor_type": _PYTYPE, "set_py_varnode_type": _PYTYPE,
    "set_py_device_type": _PYTYPE, "set_py_external_type": _PYTYPE,
}
for _name, _why in _INTERNALS.items():
    globals()[_name] = _internal(_name, _why)
__all__ += list(_INTERNALS)
for _name, _why in (("Trace", _TRACE), ("OpInfo", _TRACE), ("VarInfo", _TRACE),
                    ("GradSlot", "MegEngine's C++ grad slots")):
    globals()[_name] = _internal_class(_name, _why)
    __all__.append(_name)
del _name, _why


def is_tracing_module():
    """Whether traced_module is tracing: never in mge (``False``)."""
    return False


def is_external_convert():
    """Whether an external-convert hook is set: never in mge (``False``)."""
    return False


def get_real(x):
    """The real part of a complex tensor, as float32 (``F.real``)."""
    from ...functional.tensor import real as _real
    return _real(x)


def get_imag(x):
    """The imaginary part of a complex tensor, as float32 (``F.imag``)."""
    from ...functional.tensor import imag as _imag
    return _imag(x)


__all__ += ["backward", "get_backward_closure", "set_grad", "get_grad_key", "is_grad_attached",
            "push_scope", "pop_scope", "push_scope_with_type", "pop_scope_with_type",
            "record_scope", "start_profile", "stop_profile", "stop_step", "cupti_available",
            "enable_cupti", "disable_cupti", "set_python_backtrace_enabled", "clear_candidates",
            "get_handle_id", "name_tensor", "group_start", "group_end", "FormatType", "DEFAULT",
            "NCHW", "NHWC", "get_auto_format_convert", "set_auto_format_convert",
            "is_tracing_module", "is_external_convert", "get_real", "get_imag"]


# -- Python backtraces (MegEngine's profiler records them per op) ------------------------------------
import itertools as _itertools  # noqa: E402
import sys as _sys  # noqa: E402
import threading as _threading  # noqa: E402

_frame_ids = _itertools.count(1)
_frame_local = _threading.local()


def _mge_backtrace():
    """The caller's Python stack, outermost frame first, one ``File "...", line N, in name`` line
    per frame (as MegEngine's ``_mge_backtrace``, without source lines)."""
    frames = []
    f = _sys._getframe(1)
    while f is not None:
        frames.append(f)
        f = f.f_back
    return "".join(f'File "{f.f_code.co_filename}", line {f.f_lineno}, in {f.f_code.co_name}\n'
                   for f in reversed(frames))


def _get_frame_cache_id():
    """A number naming the calling thread's frame cache: distinct for every thread that asks,
    even when the system reuses a finished thread's ident."""
    i = getattr(_frame_local, "id", None)
    if i is None:
        i = _frame_local.id = next(_frame_ids)
    return i


__all__ += ["_mge_backtrace", "_get_frame_cache_id"]
