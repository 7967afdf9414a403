"""Random number ops and the per-handle seed streams.

Each RNG handle (0 is the global one that ``mge.random.seed`` resets; ``mge.random.RNG(seed)``
objects get their own) keeps a numpy ``Generator`` that is a *seed stream*: every call draws a fresh
64-bit ``seed`` from it and puts it in the op.  The kernel then draws from
``Generator(PCG64(op.seed))``.  So an op's output is a pure function of its parameters -- the same
numbers when the op is recomputed (DTR) or replayed -- and re-seeding a handle reproduces the whole
sequence of calls.  Values are generated in float32 (or the requested dtype), never float64.

Gradients: samples are not differentiable with respect to the distribution's parameters (no
reparameterisation), so every RNG op's backward rule gives ``None`` (as MegEngine).  The one
exception is ``ShuffleRNG``, which only moves its input's rows: its gradient is the output's
gradient moved back (MegEngine differentiates ``shuffle`` too).
"""
import numpy as np

from .base import OpDef, TensorDesc, def_backward, def_infer, def_kernel, op_error
from .gradutil import cached_op, runs
from .reduce import Argsort

__all__ = ["UniformRNG", "GaussianRNG", "GammaRNG", "BetaRNG", "PoissonRNG", "PermutationRNG",
           "ShuffleRNG", "new_handle", "delete_handle", "next_seed", "seed_handle"]

_streams = {}
_handles = [0]
_float32 = np.dtype("float32")
_float64 = np.dtype("float64")
_int32 = np.dtype("int32")


def seed_handle(handle, seed):
    """(Re)start the seed stream of ``handle`` from ``seed`` (an int)."""
    _streams[handle] = np.random.Generator(np.random.PCG64(seed))


def new_handle(seed):
    """A new handle whose stream starts from ``seed``."""
    _handles[0] += 1
    seed_handle(_handles[0], seed)
    return _handles[0]


def delete_handle(handle):
    if handle:
        _streams.pop(handle, None)


def next_seed(handle):
    """The seed of the next op drawn on ``handle``."""
    stream = _streams.get(handle)
    if stream is None:
        stream = _streams[handle] = np.random.Generator(np.random.PCG64())
    return int(stream.integers(0, 2 ** 63 - 1))


def _generator(op):
    return np.random.Generator(np.random.PCG64(op.seed))


class UniformRNG(OpDef):
    """Uniform values in ``[0, 1)`` of ``shape``."""

    _fields = ("seed", "handle", "dtype", "shape", "device")
    sets_device = True


class GaussianRNG(OpDef):
    """Normal values of ``shape`` with ``mean`` and ``std``."""

    _fields = ("seed", "handle", "mean", "std", "dtype", "shape", "device")
    sets_device = True


class GammaRNG(OpDef):
    """``(shape, scale) ->`` gamma samples, one per element of the (equal-shaped) inputs."""

    _fields = ("seed", "handle")


class BetaRNG(OpDef):
    """``(alpha, beta) ->`` beta samples, one per element."""

    _fields = ("seed", "handle")


class PoissonRNG(OpDef):
    """``lam ->`` Poisson samples (in ``lam``'s float dtype), one per element."""

    _fields = ("seed", "handle")


class PermutationRNG(OpDef):
    """A random permutation of ``0 .. n-1`` in ``dtype``."""

    _fields = ("seed", "handle", "n", "dtype", "device")
    sets_device = True


class ShuffleRNG(OpDef):
    """``x -> (x shuffled along axis 0, the int32 permutation used)``."""

    _fields = ("seed", "handle")


def _no_inputs(op, descs):
    if descs:
        raise op_error(TypeError, op, f"takes no tensor inputs, got {len(descs)}", descs)


def _float_dtype(op, dtype, descs=None):
    if dtype.kind != "f":
        raise op_error(TypeError, op, f"needs a float dtype, got {dtype}", descs)


@def_infer(UniformRNG)
@def_infer(GaussianRNG)
def _infer_sized(op, descs):
    _no_inputs(op, descs)
    _float_dtype(op, op.dtype)
    if any(s < 0 for s in op.shape):
        raise op_error(ValueError, op, f"negative size in shape {op.shape}")
    return [TensorDesc(op.shape, op.dtype)]


def _native(dtype):
    # numpy draws float32 or float64 directly; other float dtypes are drawn as float32.
    return dtype if dtype in (_float32, _float64) else _float32


@def_kernel(UniformRNG)
def _cpu_uniform(op):
    out = _generator(op).random(op.shape, dtype=_native(op.dtype))
    if out.dtype != op.dtype:
        below_one = np.nextafter(op.dtype.type(1), op.dtype.type(0))
        out = np.minimum(out.astype(op.dtype), below_one)  # rounding must not reach 1
    return (out,)


@def_kernel(GaussianRNG)
def _cpu_gaussian(op):
    dtype = _native(op.dtype)
    out = _generator(op).standard_normal(op.shape, dtype=dtype)
    if op.std != 1:
        out *= dtype.type(op.std)
    if op.mean != 0:
        out += dtype.type(op.mean)
    return (out.astype(op.dtype, copy=False),)


def _elementwise(n):
    def infer(op, descs):
        if len(descs) != n:
            raise op_error(TypeError, op, f"expects {n} input(s), got {len(descs)}", descs)
        for d in descs:
            _float_dtype(op, d[1], descs)
        if any(d[0] != descs[0][0] for d in descs) or any(d[1] != descs[0][1] for d in descs):
            raise op_error(ValueError, op, "inputs must have the same shape and dtype", descs)
        return [TensorDesc(descs[0][0], descs[0][1])]
    return infer


def_infer(GammaRNG)(_elementwise(2))
def_infer(BetaRNG)(_elementwise(2))
def_infer(PoissonRNG)(_elementwise(1))


def _positive(op, name, x):
    if x.size and not (x > 0).all():
        raise ValueError(f"{op.name}: {name} must be positive")


@def_kernel(GammaRNG)
def _cpu_gamma(op, shape, scale):
    _positive(op, "shape", shape)
    _positive(op, "scale", scale)
    return (_generator(op).gamma(shape, scale).astype(shape.dtype),)


@def_kernel(BetaRNG)
def _cpu_beta(op, alpha, beta):
    _positive(op, "alpha", alpha)
    _positive(op, "beta", beta)
    return (_generator(op).beta(alpha, beta).astype(alpha.dtype),)


@def_kernel(PoissonRNG)
def _cpu_poisson(op, lam):
    if lam.size and not (lam >= 0).all():
        raise ValueError(f"{op.name}: lam must be non-negative")
    return (_generator(op).poisson(lam).astype(lam.dtype),)


@def_infer(PermutationRNG)
def _infer_permutation(op, descs):
    _no_inputs(op, descs)
    if op.n < 0:
        raise op_error(ValueError, op, f"n must be non-negative, got {op.n}")
    if op.dtype.kind not in "iuf":
        raise op_error(TypeError, op, f"unsupported dtype {op.dtype}")
    return [TensorDesc((op.n,), op.dtype)]


@def_kernel(PermutationRNG)
def _cpu_permutation(op):
    return (_generator(op).permutation(op.n).astype(op.dtype),)


@def_infer(ShuffleRNG)
def _infer_shuffle(op, descs):
    if len(descs) != 1:
        raise op_error(TypeError, op, f"expects 1 input, got {len(descs)}", descs)
    shape, dtype = descs[0]
    if shape is not None and len(shape) == 0:
        raise op_error(ValueError, op, "cannot shuffle a 0-d tensor", descs)
    return [TensorDesc(shape, dtype), TensorDesc(None if shape is None else (shape[0],), _int32)]


@def_kernel(ShuffleRNG)
def _cpu_shuffle(op, x):
    perm = _generator(op).permutation(x.shape[0])
    return (x[perm], perm.astype(_int32))


def _no_gradient(op, inputs, outputs, grads, needs):
    # A sample is not a differentiable function of the distribution's parameters.
    return [None] * len(inputs)


for _cls in (UniformRNG, GaussianRNG, GammaRNG, BetaRNG, PoissonRNG, PermutationRNG):
    def_backward(_cls)(_no_gradient)


@def_backward(ShuffleRNG)
def _shuffle_grad(op, inputs, outputs, grads, needs):
    # y = x[perm], so dx[perm] = dy: dx = dy[argsort(perm)].
    g = grads[0]
    if g is None or not needs[0]:
        return [None]
    inverse = runs(cached_op(Argsort, False), outputs[1])[1]
    return [g[inverse]]
