"""Backward rules of the random number ops.

Samples are not differentiable with respect to the distribution's parameters (no
reparameterisation), so every RNG op's rule gives ``None`` (as MegEngine).  The one exception is
``ShuffleRNG``, which only moves its input's rows: its gradient is the output's gradient moved
back (MegEngine differentiates ``shuffle`` too).
"""
from ...ops.indexing import IndexingMultiAxisVec
from ...ops.reduce import Argsort
from ...ops.rng import (
    BetaRNG, GammaRNG, GaussianRNG, PermutationRNG, PoissonRNG, ShuffleRNG, UniformRNG,
)
from ..gradutil import run, runs
from ..registry import def_backward


def _no_gradient(op, inputs, outputs, grads, needs):
    # A sample is not a differentiable function of the distribution's parameters.
    return [None] * len(inputs)


for _cls in (UniformRNG, GaussianRNG, GammaRNG, BetaRNG, PoissonRNG, PermutationRNG):
    def_backward(_cls)(_no_gradient)
del _cls


@def_backward(ShuffleRNG)
def _shuffle_grad(op, inputs, outputs, grads, needs):
    # y = x[perm], so dx[perm] = dy: dx = dy[argsort(perm)].
    g = grads[0]
    if g is None or not needs[0]:
        return [None]
    inverse = runs(Argsort.get(False), outputs[1])[1]
    return [run(IndexingMultiAxisVec.get((("arr",),)), g, inverse)]
