"""``mge.functional`` (``F``): every op as a function (MegEngine's names and signatures)."""
from . import elemwise, indexing, loss, math, metric, nn, tensor, utils, vision  # noqa: F401
from .elemwise import *  # noqa: F401,F403
from .math import *  # noqa: F401,F403
from .tensor import *  # noqa: F401,F403
from .nn import *  # noqa: F401,F403
from .metric import topk_accuracy  # noqa: F401,E402  (MegEngine: F.utils exports it at F.)
