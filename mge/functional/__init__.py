"""``mge.functional`` (``F``): every op as a function (MegEngine's names and signatures)."""
from . import elemwise, indexing, loss, math, nn, tensor, utils  # noqa: F401
from .elemwise import *  # noqa: F401,F403
from .math import *  # noqa: F401,F403
from .tensor import *  # noqa: F401,F403
from .nn import *  # noqa: F401,F403
