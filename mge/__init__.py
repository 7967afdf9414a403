"""mge: MegEngine's imperative runtime rebuilt in Python.  ``import mge as megengine``.

    >>> import mge
    >>> import mge.functional as F
    >>> x = mge.tensor([[1.0, -2.0], [3.0, 4.0]])
    >>> F.relu(x).sum().item()
    8.0
"""
from .version import __version__

from . import _core  # noqa: F401  (ops and the runtime)
from ._core.device import get_default_device, set_default_device
from .tensor import Parameter, Tensor, tensor
from .tensor import _impl as _tensor_mod
from . import functional  # noqa: E402

_tensor_mod.F = functional

from ._core.autodiff import rules as _rules  # noqa: E402,F401  (fills the backward tables)

from . import amp, autodiff, config, core, device, random  # noqa: E402,F401
from .device import (get_allocated_memory, get_device_count, get_max_allocated_memory,  # noqa: E402,F401
                     is_cuda_available, reset_max_memory_stats)
from . import module  # noqa: E402,F401
from . import jit, optimizer  # noqa: E402,F401
from . import dtr  # noqa: E402,F401
from . import distributed  # noqa: E402,F401  (a world of one process; MPI is issue 15)
from . import data  # noqa: E402,F401  (lazy: its submodules load on first use)
from . import utils  # noqa: E402,F401  (lazy: profiler, profile_analyze, module_stats)
from . import hub  # noqa: E402,F401  (megengine.hub: hubconf entry points, pretrained weights)
from .functional import quantized as _quantized_functional  # noqa: E402,F401  (F.quantized)
from .serialization import load, save  # noqa: E402
from .logger import enable_debug_log, get_logger, set_log_file, set_log_level  # noqa: E402
from .device import (coalesce_free_memory, get_cuda_compute_capability,  # noqa: E402,F401
                     get_cuda_device_property, get_cuda_driver_version, get_cuda_version,
                     get_cudnn_version, get_max_reserved_memory, get_mem_status_bytes,
                     get_reserved_memory, set_prealloc_config)
from ._core.plugins import load_plugins as _load_plugins  # noqa: E402

_load_plugins()


def check_misc():
    """MegEngine checks its install at import (CUDA module loading mode, conflicting
    megbrain/megenginelite packages, Termux's OpenCV); mge depends on none of them, so there is
    nothing to check (returns ``None``)."""


def _full_sync():
    """Wait until every op issued so far has run; raises errors of asynchronous ops."""
    from ._core.channel import get_channel
    get_channel().full_sync()


def _sync():
    """Wait until every op issued so far has run (MegEngine's ``_sync``)."""
    from ._core.channel import get_channel
    get_channel().sync()


__all__ = ["Tensor", "tensor", "Parameter", "functional", "random", "amp", "autodiff", "config", "core",
           "device", "module", "optimizer", "dtr", "distributed", "jit", "data", "utils", "save", "load", "get_default_device", "set_default_device", "is_cuda_available", "get_device_count",
           "get_allocated_memory", "get_max_allocated_memory", "reset_max_memory_stats", "__version__",
           "check_misc", "get_logger", "set_log_level", "set_log_file", "enable_debug_log",
           "get_mem_status_bytes", "coalesce_free_memory", "set_prealloc_config",
           "get_reserved_memory", "get_max_reserved_memory", "get_cuda_version",
           "get_cudnn_version", "get_cuda_driver_version", "get_cuda_compute_capability",
           "get_cuda_device_property"]


def __getattr__(name):
    # ``mge.quantization`` (and with it ``module.qat``/``module.quantized``) loads on first use:
    # it needs the quantized dtypes, whose ``bfloat16`` import (ml_dtypes) is slow.
    if name == "quantization":
        import importlib
        return importlib.import_module(f"{__name__}.quantization")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
