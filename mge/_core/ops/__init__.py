"""Every op family; importing this package fills the shape/dtype rule table of ``base``.

One file per family: the op classes and their shape/dtype rules.  Their CPU kernels are in
``mge/_core/device/cpu/kernels/`` and their backward rules in ``mge/_core/autodiff/rules/``, one
file per family there too.
"""
from . import base  # noqa: F401
from .base import INFER, OpDef, TensorDesc  # noqa: F401
from .elemwise import *  # noqa: F401,F403
from .misc import *  # noqa: F401,F403
from .assign import *  # noqa: F401,F403
from .reduce import *  # noqa: F401,F403
from .matmul import *  # noqa: F401,F403
from .shape import *  # noqa: F401,F403
from .indexing import *  # noqa: F401,F403
from .rng import *  # noqa: F401,F403
from .creation import *  # noqa: F401,F403
from .optimizer import *  # noqa: F401,F403
from .nn import *  # noqa: F401,F403
from .quantized import *  # noqa: F401,F403
