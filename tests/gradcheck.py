"""Finite-difference checks of backward rules (HIPS autograd's ``check_grads``, for mge ops).

``check_vjp(op, *arrays)`` checks the rule ``BACKWARD[type(op)]`` directly, without the grad
transformation: for a random cotangent ``c`` of each float output, the rule's input gradients must
equal the central differences of ``sum(c * op(x))`` in float64.  Every float input is
differentiated unless ``wrt`` names the input positions to check.

``check_dropped_output(op, *arrays)`` checks that the rule gives the same gradients when the grad
transformation hands it None for the outputs (it recomputes them), and ``case_id`` names an
``(op, arrays)`` case for pytest.

``check_grads(fn, *arrays, order=1)`` checks a function end to end, through ``GradManager`` (the
grad transformation and every rule ``fn`` uses): the gradient of ``sum(c * fn(x))`` against
central differences, and with ``order=2`` also a second-order gradient through nested managers.
"""
import numpy as np

from mge import Tensor
from mge.core import apply
from mge._core.autodiff.registry import BACKWARD


def _outputs(op, arrays):
    return [y.numpy().astype(np.float64) for y in apply(op, *[Tensor(a, dtype=a.dtype) for a in arrays])]


def _float_positions(arrays):
    return [i for i, a in enumerate(arrays) if a.dtype.kind == "f"]


def numeric_vjp(op, arrays, cotangents, wrt, eps=1e-6):
    """Central differences of ``sum_k <c_k, op(x)_k>`` with respect to each input in ``wrt``."""
    def objective(args):
        return sum(float(np.sum(c * y)) for c, y in zip(cotangents, _outputs(op, args))
                   if c is not None)
    return _numeric(objective, arrays, wrt, eps)


def _numeric(f, arrays, wrt, eps):
    """Central differences of the scalar function ``f(arrays)`` for each input in ``wrt``."""
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
                vals.append(f(args))
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


def check_dropped_output(op, *arrays):
    """Assert that the rule of ``op`` gives the same gradients when its outputs are None.

    The grad transformation keeps a single output weakly, so a rule may get None for an output it
    reads and must recompute it.  Float outputs get a cotangent of ones; float inputs are needed.
    """
    inputs = [Tensor(a, dtype=a.dtype) for a in arrays]
    outs = apply(op, *inputs)
    grads = [Tensor(np.ones(y.shape), dtype=y.dtype) if y.dtype.kind == "f" else None
             for y in outs]
    needs = [a.dtype.kind == "f" for a in arrays]
    rule = BACKWARD[type(op)]
    kept = rule(op, inputs, list(outs), grads, needs)
    dropped = rule(op, inputs, [None] * len(outs), grads, needs)
    for k, d in zip(kept, dropped):
        assert (k is None) == (d is None)
        if k is not None:
            np.testing.assert_allclose(d.numpy(), k.numpy(), rtol=1e-12, atol=1e-12)


def case_id(case, label=None):
    """A pytest id for an ``(op, arrays)`` case: ``label(op)`` (``op.name`` by default), then the
    input shapes."""
    op, arrays = case
    name = op.name if label is None else label(op)
    return f"{name}-" + "x".join(str(np.shape(a)) for a in arrays)


# -- through the grad transformation ---------------------------------------------------------

def _float_outputs(result):
    outs = result if isinstance(result, (tuple, list)) else (result,)
    return [y for y in outs if y is not None and y.dtype.kind == "f"]


def _objective(fn, tensors, cotangents):
    """``sum_k <c_k, fn(*tensors)_k>`` as a 0-d mge tensor (computed with mge ops)."""
    outs = _float_outputs(fn(*tensors))
    total = None
    for c, y in zip(cotangents, outs):
        term = (y * Tensor(c, dtype=y.dtype, device=y.device)).sum()
        total = term if total is None else total + term
    return total


def _tensors(arrays):
    return [Tensor(a, dtype=a.dtype) for a in arrays]


def _first_order(fn, arrays, cotangents, wrt):
    """Gradients of the objective for the inputs in ``wrt``, through one GradManager."""
    from mge.autodiff import GradManager
    tensors = _tensors(arrays)
    gm = GradManager().attach([tensors[i] for i in wrt])
    with gm:
        gm.backward(_objective(fn, tensors, cotangents))
    return {i: _grad_array(tensors[i], arrays[i]) for i in wrt}


def _grad_array(t, a):
    g = t.grad
    out = np.zeros(a.shape) if g is None else g.numpy().astype(np.float64)
    assert out.shape == a.shape, f"gradient of shape {out.shape} for an input of shape {a.shape}"
    return out


def _second_order(fn, arrays, cotangents, vs, wrt):
    """Gradients of ``sum_i <v_i, grad_i>`` (grad: of the objective), via nested GradManagers."""
    from mge.autodiff import GradManager
    tensors = _tensors(arrays)
    leaves = [tensors[i] for i in wrt]
    outer = GradManager().attach(leaves)
    inner = GradManager().attach(leaves)
    with outer:
        with inner:
            inner.backward(_objective(fn, tensors, cotangents))
        h = None
        for i, t in zip(wrt, leaves):
            g, t.grad = t.grad, None
            if g is None:
                continue
            term = (g * Tensor(vs[i], dtype=g.dtype)).sum()
            h = term if h is None else h + term
        if h is not None:
            outer.backward(h)
    return {i: _grad_array(tensors[i], arrays[i]) for i in wrt}


def check_grads(fn, *arrays, order=1, wrt=None, eps=1e-6, rtol=1e-5, atol=1e-7, seed=0):
    """Assert that GradManager's gradients of ``fn`` match central differences (float64).

    ``fn(*tensors)`` returns a tensor or a tuple of tensors.  Float inputs become float64 tensors
    (the others are passed as they are) and every float input is differentiated unless ``wrt``
    names positions.  For a random cotangent ``c`` per float output, the gradient of
    ``sum(c * fn(*x))`` must equal its central differences; with ``order=2``, also the gradient
    of ``sum(v * grad)`` for a random ``v`` (second order, through nested GradManagers), against
    the central differences of that first-order gradient.
    """
    if order not in (1, 2):
        raise ValueError(f"check_grads: order must be 1 or 2, got {order}")
    arrays = [np.asarray(a) for a in arrays]
    arrays = [a.astype(np.float64) if a.dtype.kind == "f" else a for a in arrays]
    if wrt is None:
        wrt = _float_positions(arrays)
    rng = np.random.default_rng(seed)
    outs = _float_outputs(fn(*_tensors(arrays)))
    assert outs, "check_grads: fn has no float output"
    cotangents = [rng.standard_normal(tuple(y.shape)) for y in outs]

    def objective(args):
        return _objective(fn, _tensors(args), cotangents).item()

    got = _first_order(fn, arrays, cotangents, wrt)
    expected = _numeric(objective, arrays, wrt, eps)
    for i in wrt:
        np.testing.assert_allclose(got[i], expected[i], rtol=rtol, atol=atol,
                                   err_msg=f"{getattr(fn, '__name__', fn)}: gradient of input {i}")
    if order == 1:
        return
    vs = {i: rng.standard_normal(arrays[i].shape) for i in wrt}

    def linear_of_grad(args):
        g = _first_order(fn, args, cotangents, wrt)
        return sum(float(np.sum(vs[i] * g[i])) for i in wrt)

    got2 = _second_order(fn, arrays, cotangents, vs, wrt)
    expected2 = _numeric(linear_of_grad, arrays, wrt, eps)
    for i in wrt:
        np.testing.assert_allclose(got2[i], expected2[i], rtol=rtol, atol=atol,
                                   err_msg=f"{getattr(fn, '__name__', fn)}: second-order "
                                           f"gradient of input {i}")
