"""Random number ops, their shape/dtype rules, and the per-handle seed streams.

Each RNG handle (0 is the global one that ``mge.random.seed`` resets; ``mge.random.RNG(seed)``
objects get their own) keeps a numpy ``Generator`` that is a *seed stream*: every call draws a fresh
64-bit ``seed`` from it and puts it in the op.  The kernel (``device/cpu/kernels/rng.py``) then
draws from ``Generator(PCG64(op.seed))``.  So an op's output is a pure function of its
parameters -- the same numbers when the op is replayed -- and re-seeding a handle reproduces the
whole sequence of calls.  RNG ops still declare ``never_recompute``: DTR and drop keep their
outputs rather than draw them again.  Values are generated in float32 (or the requested dtype),
never float64.

Gradients (``autodiff/rules/rng.py``): samples are not differentiable with respect to the
distribution's parameters, except ``ShuffleRNG``'s, which only moves its input's rows.
"""
import numpy as np

from .base import OpDef, TensorDesc, def_infer, op_error

__all__ = ["UniformRNG", "GaussianRNG", "GammaRNG", "BetaRNG", "PoissonRNG", "PermutationRNG",
           "ShuffleRNG", "new_handle", "delete_handle", "next_seed", "seed_handle", "reseeded",
           "same_but_seed"]

_streams = {}
_seeds = {}  # handle -> the seed its stream was last (re)started from
_handles = [0]
_int32 = np.dtype("int32")


def seed_handle(handle, seed):
    """(Re)start the seed stream of ``handle`` from ``seed`` (an int)."""
    _seeds[handle] = seed
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


def reseeded(op):
    """``op`` (a ``seeded`` op) with the next seed of its handle, as a new call would draw it."""
    values = [getattr(op, f) for f in op._fields]
    values[op._fields.index("seed")] = next_seed(getattr(op, "handle", 0))  # (dropout: 0)
    return type(op).get(*values)


def same_but_seed(a, b):
    """Whether ops ``a`` and ``b`` are one ``seeded`` op but for their seeds."""
    if type(a) is not type(b) or not a.seeded:
        return False
    return all(getattr(a, f) == getattr(b, f) for f in a._fields if f != "seed")


class UniformRNG(OpDef):
    """Uniform values in ``[0, 1)`` of ``shape``."""

    _fields = ("seed", "handle", "dtype", "shape", "device")
    sets_device = True
    long_running = False
    never_recompute = True
    seeded = True


class GaussianRNG(OpDef):
    """Normal values of ``shape`` with ``mean`` and ``std``."""

    _fields = ("seed", "handle", "mean", "std", "dtype", "shape", "device")
    sets_device = True
    long_running = False
    never_recompute = True
    seeded = True


class GammaRNG(OpDef):
    """``(shape, scale) ->`` gamma samples, one per element of the (equal-shaped) inputs."""

    _fields = ("seed", "handle")
    long_running = False
    never_recompute = True
    seeded = True


class BetaRNG(OpDef):
    """``(alpha, beta) ->`` beta samples, one per element."""

    _fields = ("seed", "handle")
    long_running = False
    never_recompute = True
    seeded = True


class PoissonRNG(OpDef):
    """``lam ->`` Poisson samples (in ``lam``'s float dtype), one per element."""

    _fields = ("seed", "handle")
    long_running = False
    never_recompute = True
    seeded = True


class PermutationRNG(OpDef):
    """A random permutation of ``0 .. n-1`` in ``dtype``."""

    _fields = ("seed", "handle", "n", "dtype", "device")
    sets_device = True
    long_running = False
    never_recompute = True
    seeded = True


class ShuffleRNG(OpDef):
    """``x -> (x shuffled along axis 0, the int32 permutation used)``."""

    _fields = ("seed", "handle")
    long_running = False
    never_recompute = True
    seeded = True


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


@def_infer(PermutationRNG)
def _infer_permutation(op, descs):
    _no_inputs(op, descs)
    if op.n < 0:
        raise op_error(ValueError, op, f"n must be non-negative, got {op.n}")
    if op.dtype.kind not in "iuf":
        raise op_error(TypeError, op, f"unsupported dtype {op.dtype}")
    return [TensorDesc((op.n,), op.dtype)]


@def_infer(ShuffleRNG)
def _infer_shuffle(op, descs):
    if len(descs) != 1:
        raise op_error(TypeError, op, f"expects 1 input, got {len(descs)}", descs)
    shape, dtype = descs[0]
    if shape is not None and len(shape) == 0:
        raise op_error(ValueError, op, "cannot shuffle a 0-d tensor", descs)
    return [TensorDesc(shape, dtype), TensorDesc(None if shape is None else (shape[0],), _int32)]
