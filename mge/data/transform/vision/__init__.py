"""Vision transforms (OpenCV-based, images in HWC layout, BGR)."""
from . import functional  # noqa: F401
from .transform import *  # noqa: F401,F403
from .transform import __all__  # noqa: F401
