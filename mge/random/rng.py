"""``RNG`` and the module-level random functions (MegEngine's ``megengine.random.rng``)."""
import numpy as np

from .._core.device import as_device
from .._core.dtype import canonical
from .._core.ops.rng import (
    BetaRNG, GammaRNG, GaussianRNG, PermutationRNG, PoissonRNG, ShuffleRNG, UniformRNG,
    delete_handle, new_handle, next_seed, seed_handle,
)
from ..core import apply
from ..tensor import Tensor

__all__ = ["RNG", "seed", "uniform", "normal", "gamma", "beta", "poisson", "permutation", "shuffle"]

_float32 = np.dtype("float32")


def _size(size, fname):
    if size is None:
        return (1,)
    if isinstance(size, (Tensor, np.ndarray)):
        return tuple(int(s) for s in np.asarray(size).reshape(-1).tolist())
    if isinstance(size, (int, np.integer)) and not isinstance(size, bool):
        return (int(size),)
    try:
        shape = tuple(int(s) for s in size)
    except (TypeError, ValueError):
        raise TypeError(f"{fname}: size must be None, an int or a sequence of ints, got {size!r}") \
            from None
    if any(s < 0 for s in shape):
        raise ValueError(f"{fname}: size {shape} has a negative entry")
    return shape


def _number(v, fname, name):
    if isinstance(v, (Tensor, np.ndarray, np.generic)) and v.size == 1:
        v = v.item()
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TypeError(f"{fname}: {name} must be a number, got {type(v).__name__}")
    return float(v)


class RNG:
    """A random number generator with its own reproducible sequence.

    Signature: ``RNG(seed=None, device=None)``.  Without ``seed`` it draws from the global
    sequence that :func:`seed` resets; ``device`` is where its tensors are made (the default device
    when ``None``).

    Example:
        >>> import mge.random as rand
        >>> a = rand.RNG(seed=100).uniform(size=(2, 2))
        >>> b = rand.RNG(seed=100).uniform(size=(2, 2))
        >>> bool((a.numpy() == b.numpy()).all())
        True
    """

    def __init__(self, seed=None, device=None):
        self._device = device
        if seed is not None:
            self._handle = new_handle(int(seed))
        else:
            self._handle = 0

    def __del__(self):
        try:
            delete_handle(self._handle)
        except Exception:  # interpreter shutdown
            pass

    def _dev(self):
        return as_device(self._device)

    def _param(self, v, fname, name):
        if isinstance(v, Tensor):
            if v.dtype.kind != "f":
                v = v.astype(_float32)
            if self._device is not None and v.device != self._dev():
                raise ValueError(f"{fname}: {name} is on {v.device}, the generator on "
                                 f"{self._dev()}")
            return v
        value = _number(v, fname, name)
        if not value > 0:
            raise ValueError(f"{fname}: {name} must be positive, got {value}")
        return Tensor(value, dtype=_float32, device=self._dev())

    def _broadcast(self, inputs, size, fname):
        from ..functional.tensor import broadcast_to
        shapes = [x.shape for x in inputs]
        try:
            target = tuple(np.broadcast_shapes(*shapes))
        except ValueError:
            raise ValueError(f"{fname}: parameter shapes {shapes} cannot be broadcast together") \
                from None
        if size is not None:
            target = _size(size, fname) + target
        dtype = inputs[0].dtype
        for x in inputs[1:]:
            if x.dtype != dtype:
                dtype = np.promote_types(dtype, x.dtype)
        return [broadcast_to(x.astype(dtype), target) if x.shape != target or x.dtype != dtype
                else x for x in inputs]

    def uniform(self, low=0, high=1, size=None):
        """Uniform samples in ``[low, high)``, float32.

        Signature: ``uniform(low=0, high=1, size=None)``; ``size=None`` gives shape ``(1,)``.
        """
        low, high = _number(low, "uniform", "low"), _number(high, "uniform", "high")
        if not low < high:
            raise ValueError(f"uniform: needs low < high, got low={low}, high={high}")
        op = UniformRNG(next_seed(self._handle), self._handle, _float32, _size(size, "uniform"),
                        self._dev())
        out = apply(op)[0]
        if low == 0 and high == 1:
            return out
        return out * (high - low) + low

    def normal(self, mean=0, std=1, size=None):
        """Normal samples with ``mean`` and standard deviation ``std``, float32.

        Signature: ``normal(mean=0, std=1, size=None)``; ``size=None`` gives shape ``(1,)``.
        """
        mean, std = _number(mean, "normal", "mean"), _number(std, "normal", "std")
        if std < 0:
            raise ValueError(f"normal: std must be non-negative, got {std}")
        op = GaussianRNG(next_seed(self._handle), self._handle, mean, std, _float32,
                         _size(size, "normal"), self._dev())
        return apply(op)[0]

    def gamma(self, shape, scale=1, size=None):
        """Gamma samples with ``shape`` (k) and ``scale`` (theta); numbers or tensors.

        Signature: ``gamma(shape, scale=1, size=None)``.  The output shape is
        ``size + broadcast(shape.shape, scale.shape)``.
        """
        k, theta = self._param(shape, "gamma", "shape"), self._param(scale, "gamma", "scale")
        k, theta = self._broadcast([k, theta], size, "gamma")
        return apply(GammaRNG(next_seed(self._handle), self._handle), k, theta)[0]

    def beta(self, alpha, beta, size=None):
        """Beta samples with parameters ``alpha`` and ``beta``; numbers or tensors.

        Signature: ``beta(alpha, beta, size=None)``.  The output shape is
        ``size + broadcast(alpha.shape, beta.shape)``.
        """
        a, b = self._param(alpha, "beta", "alpha"), self._param(beta, "beta", "beta")
        a, b = self._broadcast([a, b], size, "beta")
        return apply(BetaRNG(next_seed(self._handle), self._handle), a, b)[0]

    def poisson(self, lam, size=None):
        """Poisson samples with rate ``lam`` (a number or a tensor), in ``lam``'s float dtype.

        Signature: ``poisson(lam, size=None)``; the output shape is ``size + lam.shape``.
        """
        (lam,) = self._broadcast([self._param(lam, "poisson", "lam")], size, "poisson")
        return apply(PoissonRNG(next_seed(self._handle), self._handle), lam)[0]

    def permutation(self, n, *, dtype="int32"):
        """A random permutation of ``0..n-1`` (``n`` an int), or of the rows of a tensor ``n``.

        Signature: ``permutation(n, *, dtype="int32")``; for a tensor the result is a shuffled
        copy along axis 0 and ``dtype`` is ignored.
        """
        if isinstance(n, Tensor):
            if n.ndim == 0:
                raise ValueError("permutation: cannot permute a 0-d tensor")
            return apply(ShuffleRNG(next_seed(self._handle), self._handle), n)[0]
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
            raise TypeError(f"permutation: n must be an int or a tensor, got {type(n).__name__}")
        if n < 0:
            raise ValueError(f"permutation: n must be non-negative, got {n}")
        op = PermutationRNG(next_seed(self._handle), self._handle, int(n), canonical(dtype),
                            self._dev())
        return apply(op)[0]

    def shuffle(self, inp):
        """Shuffle ``inp`` in place along axis 0 (the tensor takes the shuffled value).

        Signature: ``shuffle(inp)``; returns ``None``.
        """
        if not isinstance(inp, Tensor):
            raise TypeError(f"shuffle: inp must be a tensor, got {type(inp).__name__}")
        if inp.ndim == 0 or inp.size == 0:
            raise ValueError(f"shuffle: needs a non-empty tensor of at least 1 dim, got shape "
                             f"{inp.shape}")
        out = apply(ShuffleRNG(next_seed(self._handle), self._handle), inp)[0]
        inp._reset(out)


_default = RNG()


def seed(seed):
    """Restart the global random sequence from ``seed``.  Signature: ``seed(seed: int)``."""
    seed_handle(0, int(seed))


def uniform(low=0, high=1, size=None):
    """Uniform samples in ``[low, high)``, float32 (see :meth:`RNG.uniform`).

    Signature: ``uniform(low=0, high=1, size=None)``.
    """
    return _default.uniform(low, high, size)


def normal(mean=0, std=1, size=None):
    """Normal samples, float32 (see :meth:`RNG.normal`).

    Signature: ``normal(mean=0, std=1, size=None)``.
    """
    return _default.normal(mean, std, size)


def gamma(shape, scale=1, size=None):
    """Gamma samples (see :meth:`RNG.gamma`).  Signature: ``gamma(shape, scale=1, size=None)``."""
    return _default.gamma(shape, scale, size)


def beta(alpha, beta, size=None):
    """Beta samples (see :meth:`RNG.beta`).  Signature: ``beta(alpha, beta, size=None)``."""
    return _default.beta(alpha, beta, size)


def poisson(lam, size=None):
    """Poisson samples (see :meth:`RNG.poisson`).  Signature: ``poisson(lam, size=None)``."""
    return _default.poisson(lam, size)


def permutation(n, *, dtype="int32"):
    """A random permutation (see :meth:`RNG.permutation`).

    Signature: ``permutation(n, *, dtype="int32")``.
    """
    return _default.permutation(n, dtype=dtype)


def shuffle(inp):
    """Shuffle ``inp`` in place along axis 0 (see :meth:`RNG.shuffle`).

    Signature: ``shuffle(inp)``.
    """
    _default.shuffle(inp)
