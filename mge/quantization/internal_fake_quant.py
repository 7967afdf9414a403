"""MegEngine 1.13's ``megengine.quantization.internal_fake_quant``: the names its fake
quantization code shares (re-exported for code that star-imports this module)."""
from functools import partial  # noqa: F401

from .. import functional as F  # noqa: F401
from ..autodiff import Function  # noqa: F401
from .fake_quant import _FakeQuantize  # noqa: F401
from .observer import MinMaxObserver  # noqa: F401
from .qconfig import QConfig  # noqa: F401
from .utils import QParams  # noqa: F401

