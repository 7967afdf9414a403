"""CPU kernels of the random number ops.

A kernel draws from ``Generator(PCG64(op.seed))``: its output is a function of the op alone (see
``ops/rng.py`` for the seed streams that give each op its seed).
"""
import numpy as np

from ....ops.rng import (
    BetaRNG, GammaRNG, GaussianRNG, PermutationRNG, PoissonRNG, ShuffleRNG, UniformRNG,
)
from ..table import def_kernel

_float32 = np.dtype("float32")
_float64 = np.dtype("float64")
_int32 = np.dtype("int32")


def _generator(op):
    return np.random.Generator(np.random.PCG64(op.seed))


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


@def_kernel(PermutationRNG)
def _cpu_permutation(op):
    return (_generator(op).permutation(op.n).astype(op.dtype),)


@def_kernel(ShuffleRNG)
def _cpu_shuffle(op, x):
    perm = _generator(op).permutation(x.shape[0])
    return (x[perm], perm.astype(_int32))
