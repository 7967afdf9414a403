"""Backward passes in traced functions: replayed whole from the recording.

A traced training step's ``gm.backward`` is recorded like any ops; on a replay, when it is the
recorded pass (same seeds, same attached tensors, no other GradManager recording it), its rules do
not run: the gradients reach the attached tensors' callbacks as placeholders of the recorded
values, in the recorded order.  These tests check that every way of using backward gives the
eager results, call after call, and falls back to running the pass where it must.
"""
import numpy as np
import pytest

import mge
import mge.functional as F
import mge.module as M
from mge.autodiff import Function, GradManager
from mge.jit import TraceError, trace
from mge.optimizer import SGD

from helpers import arr, check

STEPS = 4


def _net(seed):
    mge.random.seed(seed)
    return M.Sequential(M.Linear(5, 7), M.ReLU(), M.Linear(7, 3))


def _twins(step, symbolic=False, seed=0):
    """``step(net, gm, opt, x)`` eagerly and traced on two identical nets; compares the results
    and the parameters after each call."""
    states = []
    for _ in range(2):
        net = _net(seed)
        states.append((net, GradManager(), SGD(net.parameters(), lr=0.1, momentum=0.9)))
    eager_state, traced_state = states
    traced = trace(lambda x: step(*traced_state, x), symbolic=symbolic)
    for k in range(STEPS):
        x = mge.tensor(arr((4, 5), seed=k))
        want = step(*eager_state, x)
        got = traced(x)
        check(got, want.numpy())
        for p, q in zip(eager_state[0].parameters(), traced_state[0].parameters()):
            check(q, p.numpy())
    return traced, traced_state


@pytest.mark.parametrize("symbolic", [False, True], ids=["imperative", "symbolic"])
def test_callbacks_get_the_gradients_in_every_call(symbolic):
    seen = []

    def halve(tensor, grad):
        seen.append(tensor.shape)
        return grad * 0.5

    def step(net, gm, opt, x):
        if not gm._attach_specs:
            gm.attach(net.parameters(), callbacks=[halve])
        with gm:
            loss = (net(x) ** 2).mean()
            gm.backward(loss)
        opt.step().clear_grad()
        return loss

    _twins(step, symbolic)
    assert len(seen) == 2 * 4 * STEPS  # 4 parameters, eager and traced, every call


def test_a_callback_that_issues_other_ops_in_a_replay_is_a_divergence():
    flag = {"on": False}

    def maybe_twice(tensor, grad):
        return grad * 2 if flag["on"] else grad

    net = _net(1)
    gm = GradManager().attach(net.parameters(), callbacks=[maybe_twice])

    @trace
    def step(x):
        with gm:
            gm.backward(net(x).sum())
        return [p.grad for p in net.parameters()]

    step(mge.tensor(arr((4, 5))))
    flag["on"] = True
    with pytest.raises(TraceError, match="diverged"):
        step(mge.tensor(arr((4, 5))))
    for p in net.parameters():
        p.grad = None


def test_grads_accumulate_over_two_backward_passes_per_call():
    def step(net, gm, opt, x):
        if not gm._attach_specs:
            gm.attach(net.parameters())
        for half in (x[:2], x[2:]):
            with gm:
                gm.backward((net(half) ** 2).mean())
        opt.step().clear_grad()
        return net(x).sum()

    _twins(step)


def test_a_pass_with_an_explicit_dy():
    def step(net, gm, opt, x):
        if not gm._attach_specs:
            gm.attach(net.parameters())
        with gm:
            y = net(x)
            gm.backward(y, mge.tensor(np.linspace(-1, 1, 12, dtype="float32").reshape(4, 3)) * x[:, :3])
        opt.step().clear_grad()
        return y

    _twins(step)


def test_attaching_another_tensor_between_calls_runs_the_pass():
    net = _net(2)
    extra = mge.Parameter(np.ones((5,), "float32"))
    gm = GradManager().attach(net.parameters())

    def step(x):
        with gm:
            gm.backward((net(x * extra) ** 2).sum())
        grads = [p.grad for p in net.parameters()] + [extra.grad]
        for p in list(net.parameters()) + [extra]:
            p.grad = None
        return grads

    traced = trace(step)
    xs = [mge.tensor(arr((4, 5), seed=k)) for k in range(3)]
    traced(xs[0])
    traced(xs[1])
    gm.attach([extra])  # extra gets a gradient too: the pass runs, and issues other ops than
    with pytest.raises(TraceError, match="diverged"):  # the recorded ones
        traced(xs[2])
    want = step(xs[2])
    assert want[-1] is not None


def test_a_function_with_a_python_backward_runs_in_every_replay():
    calls = []

    class Scale(Function):
        def forward(self, x):
            return x * 3

        def backward(self, dy):
            calls.append(1)
            return dy * 3

    def step(net, gm, opt, x):
        if not gm._attach_specs:
            gm.attach(net.parameters())
        with gm:
            loss = Scale()(net(x)).sum()
            gm.backward(loss)
        opt.step().clear_grad()
        return loss

    _twins(step)
    assert len(calls) == 2 * STEPS  # the user's backward ran in every call, traced ones too


def test_second_order_gradients_through_nested_managers():
    w = mge.Parameter(np.array([0.5, -1.0, 2.0], "float32"))

    def fn(x):
        outer, inner = GradManager().attach([w]), GradManager().attach([w])
        with outer:
            with inner:
                y = (w * w * w * x).sum()
                inner.backward(y)
            g = w.grad          # 3 w^2 x
            w.grad = None
            outer.backward(g.sum())
        out = w.grad            # 6 w x
        w.grad = None
        return g, out

    traced = trace(fn)
    for k in range(STEPS):
        x = mge.tensor(arr((3,), seed=k))
        want = fn(x)
        got = traced(x)
        check(got[0], want[0].numpy())
        check(got[1], want[1].numpy())
