"""Finite-difference checks of backward rules (HIPS autograd's ``check_grads``, for mge ops).

``check_vjp(op, *arrays)`` checks the rule ``BACKWARD[type(op)]`` directly, without the grad
transformation: for a random cotangent ``c`` of each float output, the rule's input gradients must
equal the central differences of ``sum(c * op(x))`` in float64.  Every float input is
differentiated unless ``wrt`` names the input positions to check.
"""
import numpy as np

from mge import Tensor
from mge.core import apply
from mge._core.ops.base import BACKWARD


def _outputs(op, arrays):
    return [y.numpy().astype(np.float64) for y in apply(op, *[Tensor(a, dtype=a.dtype) for a in arrays])]


def _float_positions(arrays):
    return [i for i, a in enumerate(arrays) if a.dtype.kind == "f"]


def numeric_vjp(op, arrays, cotangents, wrt, eps=1e-6):
    """Central differences of ``sum_k <c_k, op(x)_k>`` with respect to each input in ``wrt``."""
    grads = {}
    for i in wrt:
        base = arrays[i]
        g = np.zeros(base.shape, np.float64)
        for idx in np.ndindex(*base.shape):
            vals = []
            for sign in (1, -1):
                x = base.copy()
                x[idx] += sign * eps
                args = list(arrays)
                args[i] = x
                outs = _outputs(op, args)
                vals.append(sum(float(np.sum(c * y)) for c, y in zip(cotangents, outs) if c is not None))
            g[idx] = (vals[0] - vals[1]) / (2 * eps)
        grads[i] = g
    return grads


def rule_vjp(op, arrays, cotangents, wrt):
    """The input gradients the backward rule of ``op`` gives for ``cotangents``."""
    inputs = tuple(Tensor(a, dtype=a.dtype) for a in arrays)
    outputs = apply(op, *inputs)
    grads = tuple(None if c is None else Tensor(c, dtype=c.dtype) for c in cotangents)
    needs = tuple(i in wrt for i in range(len(arrays)))
    rule = BACKWARD[type(op)]
    result = rule(op, inputs, outputs, grads, needs)
    assert len(result) == len(arrays), f"{op.name}: rule returned {len(result)} grads for {len(arrays)} inputs"
    out = {}
    for i in wrt:
        g = result[i]
        out[i] = np.zeros(arrays[i].shape) if g is None else g.numpy().astype(np.float64)
        assert out[i].shape == arrays[i].shape, f"{op.name}: grad of input {i} has shape {out[i].shape}, input {arrays[i].shape}"
    return out


def check_vjp(op, *arrays, wrt=None, eps=1e-6, rtol=1e-6, atol=1e-8, seed=0):
    """Assert that ``BACKWARD[type(op)]`` matches central differences (float inputs -> float64)."""
    arrays = [np.asarray(a) for a in arrays]
    arrays = [a.astype(np.float64) if a.dtype.kind == "f" else a for a in arrays]
    if wrt is None:
        wrt = _float_positions(arrays)
    outs = _outputs(op, arrays)
    rng = np.random.default_rng(seed)
    cotangents = [rng.standard_normal(y.shape) if y.dtype.kind == "f" else None for y in outs]
    # Outputs of non-float dtype (indices, masks) get no cotangent.
    raw = apply(op, *[Tensor(a, dtype=a.dtype) for a in arrays])
    cotangents = [c if r.dtype.kind == "f" else None for c, r in zip(cotangents, raw)]
    expected = numeric_vjp(op, arrays, cotangents, wrt, eps)
    got = rule_vjp(op, arrays, cotangents, wrt)
    for i in wrt:
        np.testing.assert_allclose(got[i], expected[i], rtol=rtol, atol=atol,
                                   err_msg=f"{op!r}: gradient of input {i}")
