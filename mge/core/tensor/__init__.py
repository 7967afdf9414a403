"""``mge.core.tensor``: MegEngine's helpers around tensors -- :mod:`.dtype` (quantized dtypes,
``bfloat16``), :mod:`.utils` (``astensor1d``, ``make_shape_tuple``, ``subgraph_fn``, ...),
:mod:`.array_method` (the operators of ``Tensor``), :mod:`.qparams` and :mod:`.amp` (the AMP switches).  ``megbrain_graph`` is
MegBrain's C++ graph API, which mge does not have: importing it raises ``ImportError``."""
from . import amp, array_method, dtype, qparams, utils  # noqa: F401

__all__ = ["amp", "array_method", "dtype", "qparams", "utils"]
