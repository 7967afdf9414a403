"""Finding pycuda, the CUDA driver and the GPUs: lazily, once per process, safely across fork.

Importing this module imports no pycuda.  The first question that needs CUDA runs the probe
(:func:`probe`): it imports ``pycuda.driver`` (never ``pycuda.autoinit``, which would create a
context at import), calls ``cuInit`` and counts the GPUs.  The result is cached; when a piece is
missing it keeps a ``reason`` that names that piece and how to get it, and every later use of
the GPU raises with that reason.

A GPU is used through its *primary context* (:func:`primary_context`, :func:`current_context`),
the one context per device that the CUDA runtime and other libraries share; mge never creates a
context of its own.

CUDA cannot be used in a process forked from one that called ``cuInit``: the child inherits the
driver's state without its threads.  A fork handler replaces the probe of such a child by one
that says so (use the "spawn" start method); a child of a process that never initialised CUDA
probes afresh.
"""
import contextlib
import importlib
import os
import threading

__all__ = ["DEVICE_IMPLEMENTED", "INSTALL", "Probe", "DeviceProperties", "probe", "usable",
           "device_count", "check_gpu", "check_device", "primary_context",
           "current_context", "compute_capability", "name", "total_memory", "attribute",
           "properties", "memory_info", "cuda_version", "driver_version"]

# The CUDA device (cuda/device.py) is written and checked on a host emulation, but has not yet
# run on a GPU (issue 16).  Until it has, a GPU that is found cannot hold tensors:
# is_cuda_available() is False, xpux stays the CPU and gpu0 raises NotImplementedError, while the
# queries that need only the driver (count, compute capability, properties, versions) work.
# MGE_CUDA_UNVERIFIED=1 turns the device on anyway -- for its first runs on a GPU
# (benchmarks/gpu/run.sh sets it); once those pass, this becomes True.
DEVICE_IMPLEMENTED = os.environ.get("MGE_CUDA_UNVERIFIED") == "1"

INSTALL = 'pip install "mge[cuda]"'  # the extra that brings pycuda (setup.py)


class Probe:
    """What the probe found: ``driver`` (the ``pycuda.driver`` module, or ``None`` where it
    could not be imported), ``count`` (GPUs, 0 unless the driver started) and ``reason``
    (``None`` when a GPU is usable; else what is missing and how to get it).  ``forked``: this
    process was forked from one that had initialised CUDA."""

    __slots__ = ("driver", "count", "reason", "forked")

    def __init__(self, driver=None, count=0, reason=None, forked=False):
        self.driver = driver
        self.count = count
        self.reason = reason
        self.forked = forked

    @property
    def ok(self):
        """Whether the driver started and found at least one GPU."""
        return self.reason is None

    def __repr__(self):
        return f"Probe(count={self.count}, reason={self.reason!r})"


class DeviceProperties:
    """MegEngine's ``DeviceProperties`` of a CUDA device: ``name``, ``total_memory`` (bytes),
    ``major`` and ``minor`` (the compute capability), read-only."""

    __slots__ = ("_name", "_total_memory", "_major", "_minor")

    def __init__(self, name, total_memory, major, minor):
        self._name = name
        self._total_memory = total_memory
        self._major = major
        self._minor = minor

    name = property(lambda self: self._name, doc="The device's name, e.g. 'NVIDIA H100'.")
    total_memory = property(lambda self: self._total_memory, doc="Device memory in bytes.")
    major = property(lambda self: self._major, doc="The compute capability's major number.")
    minor = property(lambda self: self._minor, doc="The compute capability's minor number.")

    def __repr__(self):
        return (f"DeviceProperties(name={self._name!r}, major={self._major}, "
                f"minor={self._minor}, total_memory={self._total_memory})")


_lock = threading.Lock()  # one probe at a time, one retain per device
_probe = None             # this process's Probe; None: not probed yet
_init_called = False      # cuInit was called (or is running) here: a forked child cannot use CUDA
_contexts = {}            # index -> the retained primary context of that GPU
_inherited = []           # a forked child's copies of its parent's contexts (see the fork handler)


def probe():
    """The cached :class:`Probe` of this process; runs it on the first call (thread-safe)."""
    global _probe
    found = _probe
    if found is None:
        with _lock:
            if _probe is None:
                _probe = _run_probe()
            found = _probe
    return found


def _run_probe():
    global _init_called
    try:
        cuda = importlib.import_module("pycuda.driver")
    except Exception as e:  # ImportError; a broken build can fail with anything (OSError...)
        return Probe(reason=_import_reason(e))
    _init_called = True  # before the call: a fork while cuInit runs must count as initialised
    try:
        cuda.init()
    except Exception as e:  # pycuda.driver.Error, or whatever a broken driver raises
        _init_called = False  # cuInit failed: no driver state for a child to inherit
        return Probe(driver=cuda, reason=_init_reason(e))
    try:
        count = cuda.Device.count()
    except Exception as e:
        return Probe(driver=cuda, reason=f"the CUDA driver started but could not count the GPUs "
                                         f"(pycuda.driver.Device.count(): {_describe(e)})")
    if count == 0:
        return Probe(driver=cuda, reason=_no_gpu_reason("pycuda.driver.Device.count() is 0"))
    return Probe(driver=cuda, count=count)


def _describe(e):
    return f"{type(e).__name__}: {e}"


def _import_reason(e):
    if isinstance(e, ImportError) and e.name == "pycuda":  # the package itself is absent
        return (f"pycuda is not installed ({INSTALL}, on a machine with an NVIDIA GPU and its "
                "driver)")
    failed = f"pycuda is installed but 'import pycuda.driver' failed ({_describe(e)})"
    if "libcuda" in str(e):  # pycuda's extension links the driver library
        return f"{failed}: the NVIDIA driver library (libcuda.so) is missing; install the driver"
    return (f"{failed}: reinstall pycuda for this machine's CUDA "
            "(pip install --force-reinstall --no-cache-dir pycuda)")


def _init_reason(e):
    if "no CUDA-capable device" in str(e):  # cuInit's CUDA_ERROR_NO_DEVICE: a driver, no GPU
        return _no_gpu_reason(f"pycuda.driver.init(): {e}")
    return (f"the CUDA driver failed to start (pycuda.driver.init() raised {_describe(e)}); "
            "nvidia-smi shows whether the NVIDIA driver works")


def _no_gpu_reason(detail):
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    hint = (f"CUDA_VISIBLE_DEVICES={visible!r} may hide them" if visible is not None
            else "nvidia-smi lists the GPUs the driver sees")
    return f"the CUDA driver found no GPU ({detail}); {hint}"


def usable():
    """Whether ``gpu0`` can hold tensors: the device is implemented and a GPU was found.  (While
    ``DEVICE_IMPLEMENTED`` is False this probes nothing, so no pycuda is imported.)"""
    return DEVICE_IMPLEMENTED and probe().ok


def device_count():
    """The number of GPUs the driver sees (0 without pycuda, the driver or a GPU)."""
    return probe().count


def check_gpu(index, what):
    """The ``pycuda.driver`` module, once GPU ``index`` is known to exist; else ``RuntimeError``
    naming what is missing (``what`` starts the message: the device or the query asked)."""
    found = probe()
    if not found.ok:
        raise RuntimeError(f"{what} needs CUDA, which is not available here: {found.reason}")
    if not 0 <= index < found.count:
        raise RuntimeError(f"{what}: request gpu {index} out of valid range [0, {found.count}) "
                           f"(this machine has {found.count} CUDA device"
                           f"{'' if found.count == 1 else 's'})")
    return found.driver


def check_device(index, what):
    """:func:`check_gpu`, then ``NotImplementedError`` while mge's CUDA device is not written."""
    cuda = check_gpu(index, what)
    if not DEVICE_IMPLEMENTED:
        raise NotImplementedError(
            f"{what}: gpu{index} ({cuda.Device(index).name()}) is there, but mge's CUDA device "
            "has not run on a GPU yet, so it is off (see issue 16); use cpu0, or set "
            "MGE_CUDA_UNVERIFIED=1 to try it (the queries of mge.device already work)")
    return cuda


def primary_context(index):
    """GPU ``index``'s primary context, retained once per process (never a new context)."""
    cuda = check_gpu(index, f"the primary context of gpu{index}")
    with _lock:
        ctx = _contexts.get(index)
        if ctx is None:
            ctx = _contexts[index] = cuda.Device(index).retain_primary_context()
    return ctx


@contextlib.contextmanager
def current_context(index):
    """``with current_context(i):`` -- GPU ``i``'s primary context is current on this thread
    inside the block (pushed on entry, popped on exit, as CUDA's context stack nests)."""
    ctx = primary_context(index)
    ctx.push()
    try:
        yield ctx
    finally:
        ctx.pop()


def compute_capability(index, what=None):
    """``(major, minor)``: the compute capability of GPU ``index`` (``what`` names the asker in
    an error)."""
    cuda = check_gpu(index, what or f"the compute capability of gpu{index}")
    return tuple(cuda.Device(index).compute_capability())


def name(index):
    """The name of GPU ``index`` (e.g. ``'NVIDIA H200'``)."""
    return check_gpu(index, f"the name of gpu{index}").Device(index).name()


def total_memory(index):
    """The memory of GPU ``index`` in bytes."""
    return check_gpu(index, f"the memory of gpu{index}").Device(index).total_memory()


def attribute(index, attr):
    """A ``pycuda.driver.device_attribute`` of GPU ``index`` by name, e.g.
    ``attribute(0, "MULTIPROCESSOR_COUNT")`` (for launch configurations)."""
    cuda = check_gpu(index, f"attribute {attr} of gpu{index}")
    return cuda.Device(index).get_attribute(getattr(cuda.device_attribute, attr))


def properties(index, what=None):
    """The :class:`DeviceProperties` of GPU ``index`` (``what`` names the asker in an error)."""
    dev = check_gpu(index, what or f"the properties of gpu{index}").Device(index)
    major, minor = dev.compute_capability()
    return DeviceProperties(dev.name(), dev.total_memory(), major, minor)


def memory_info(index):
    """``(total, free)`` bytes of GPU ``index``'s memory (``cuMemGetInfo`` in its primary
    context), in the order of MegEngine's ``get_mem_status_bytes``."""
    with current_context(index):
        free, total = probe().driver.mem_get_info()
    return total, free


def _driver_module(what):
    # the versions need pycuda (and, for the driver's, its library) but no GPU and no cuInit
    found = probe()
    if found.driver is None:
        raise RuntimeError(f"{what} needs CUDA, which is not available here: {found.reason}")
    return found.driver


def cuda_version():
    """The CUDA version pycuda was built against, as MegEngine counts it:
    ``major * 1000 + minor * 10`` (12.4 -> 12040)."""
    major, minor = _driver_module("get_cuda_version()").get_version()[:2]
    return major * 1000 + minor * 10


def driver_version():
    """The latest CUDA version the installed driver supports (``cuDriverGetVersion``, e.g.
    12040)."""
    return _driver_module("get_cuda_driver_version()").get_driver_version()


def _after_fork_in_child():
    global _lock, _probe, _init_called, _contexts
    _lock = threading.Lock()  # another thread of the parent may have held it at the fork
    if _init_called or (_probe is not None and _probe.forked):
        # The parent's contexts are not valid here, and releasing them fails (pycuda prints a
        # clean-up warning): keep the copies alive and unused.
        _inherited.extend(_contexts.values())
        _probe = Probe(forked=True, reason=(
            f"CUDA cannot be used in a process forked from one that initialised CUDA (parent pid "
            f"{os.getppid()}); start the processes that use the GPU with the \"spawn\" start "
            "method (multiprocessing.get_context(\"spawn\"))"))
    else:
        _probe = None  # the parent never touched the driver: this child may probe afresh
    _init_called = False
    _contexts = {}


os.register_at_fork(after_in_child=_after_fork_in_child)


def _reset_for_tests():
    """Forget the probe and the retained contexts, so that the next use probes again (the tests
    swap a fake ``pycuda`` in and out; a real process never needs this)."""
    global _probe, _init_called, _contexts
    with _lock:
        _probe = None
        _init_called = False
        _contexts = {}
