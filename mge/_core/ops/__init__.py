"""Every op family; importing this package fills the rule tables of ``base``.

One file per family: the op classes, their shape/dtype rules and their CPU kernels.
"""
from . import base  # noqa: F401
from .base import BACKWARD, HOST, INFER, KERNELS, OpDef, TensorDesc  # noqa: F401
from .elemwise import *  # noqa: F401,F403
from .misc import *  # noqa: F401,F403
from .assign import *  # noqa: F401,F403
from .reduce import *  # noqa: F401,F403
from .matmul import *  # noqa: F401,F403
from .shape import *  # noqa: F401,F403
from .indexing import *  # noqa: F401,F403
from .rng import *  # noqa: F401,F403
from .nn import *  # noqa: F401,F403
