"""``mge.random``: random tensors (MegEngine's ``megengine.random``).

``seed(n)`` makes every later draw of the module-level functions reproducible; an ``RNG(seed)``
object has its own independent, reproducible sequence.

    >>> import mge.random as rand
    >>> rand.seed(0)
    >>> a = rand.normal(size=(2,)).numpy()
    >>> rand.seed(0)
    >>> bool((rand.normal(size=(2,)).numpy() == a).all())
    True
"""
from .rng import RNG, beta, gamma, normal, permutation, poisson, seed, shuffle, uniform

__all__ = ["RNG", "beta", "gamma", "normal", "permutation", "poisson", "seed", "uniform", "shuffle"]
