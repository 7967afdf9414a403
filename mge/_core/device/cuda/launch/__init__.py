"""The CUDA device's launchers: op class -> how its kernels run, one module per op family.

A launcher is ``fn(device, op, inputs, descs) -> tuple of CudaBuffers`` (one per desc, of the
desc's dtype and shape), registered with ``def_launcher(cls)`` in ``CUDA_KERNELS``; the device's
``execute`` looks the op's class up there (then its base classes) and raises
``NotImplementedError`` ("... has no CUDA kernel yet") for an op without one.

``def_launcher(cls, strided=False, reuse=False)``:

* ``strided=False`` (the default): every input buffer is made dense (C order) before the call,
  so a launcher whose kernels index flat arrays never sees a view (a transpose, a broadcast);
  ``strided=True`` launchers take views as they are (``CudaBuffer.strides``, in elements, may be
  0 or negative; ``CudaBuffer.address`` is element 0's address).
* ``reuse=True``: the launcher is called as ``fn(device, op, inputs, descs, donated)`` where
  ``donated`` lists the positions of inputs that nothing else can see any more (their tensors
  were freed by this op and no other tensor or view shares the buffer): it may write an output
  into such a buffer.

What a launcher uses of the device: ``device.empty(shape, dtype)`` (a new dense buffer from the
pool), ``device.view(buf, shape, strides, offset)``, ``device.contiguous(buf)``,
``device.launch_elementwise(kernel, n, args)`` (a grid-stride kernel), ``device.launch(kernel,
grid, block, args, shared_bytes)``, ``device.backend`` (copies, memset, ``gemm``) and
``device.workspace(nbytes)`` (scratch memory freed when the returned buffer goes).

Every module of this package is imported when the table is first needed (``load_all``), so a
family's launchers are one new file here and nothing else.  Then ``plans.register_families``
gives every op of every kernel family's ``PLANS`` table (``cuda/kernels/*.py``, in
``kernels/launch.py``'s plan format) a launcher that runs its plan, unless a module here
registered one for it: a family that states its ops as plans needs no file here at all.
"""
import importlib
import pkgutil
import threading

__all__ = ["CUDA_KERNELS", "Launcher", "def_launcher", "lookup", "load_all"]


class Launcher:
    """A registered launcher: ``fn``, and whether it takes views (``strided``) and donated
    inputs (``reuse``)."""

    __slots__ = ("fn", "strided", "reuse")

    def __init__(self, fn, strided, reuse):
        self.fn, self.strided, self.reuse = fn, strided, reuse

    def __repr__(self):
        return f"Launcher({self.fn.__module__}.{self.fn.__qualname__})"


#: op class -> ``Launcher``
CUDA_KERNELS = {}


def def_launcher(cls, strided=False, reuse=False):
    """Decorator: register ``fn`` as ``cls``'s CUDA launcher (see the module docstring)."""
    def deco(fn):
        CUDA_KERNELS[cls] = Launcher(fn, bool(strided), bool(reuse))
        return fn
    return deco


def lookup(cls):
    """The ``Launcher`` of op class ``cls`` (or of its nearest base class with one); ``None``."""
    launcher = CUDA_KERNELS.get(cls)
    if launcher is None:
        for base in cls.__mro__[1:]:
            launcher = CUDA_KERNELS.get(base)
            if launcher is not None:
                break
    return launcher


_loaded = False
_lock = threading.Lock()


def load_all():
    """Import every launcher module of this package once (they register themselves)."""
    global _loaded
    if _loaded:
        return
    with _lock:
        if not _loaded:
            for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
                importlib.import_module(f"{__name__}.{info.name}")
            # after every explicit launcher: those win over the plan launchers
            importlib.import_module(f"{__name__}.plans").register_families()
            _loaded = True
