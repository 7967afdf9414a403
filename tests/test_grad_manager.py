"""mge.autodiff.GradManager against MegEngine 1.13's documented behaviour and messages."""
import gc
import weakref

import numpy as np
import pytest

import mge
import mge.functional as F
from mge import core
from mge.autodiff import GradManager, GradManagerGroup
from mge.autodiff import grad_manager as gm_module

from gradcheck import check_grads
from helpers import close, float_tensor as t, ops_run, same_desc


# -- attach ------------------------------------------------------------------------------------

def test_attach_messages():
    gm = GradManager()
    with pytest.raises(AssertionError, match=r"Only tensors of floating point dtype can be "
                       r"attached to get gradients, get tensor dtype: int32 and shape: \(3,\)"):
        gm.attach(t([1, 2, 3], "int32"))
    with pytest.raises(AssertionError, match="Object to be attached should be Tensor"):
        gm.attach([1.0])


def test_attach_returns_self_and_lists_attached_tensors():
    x, y = t([1.0]), t([2.0])
    gm = GradManager()
    assert gm.attach(x) is gm
    gm.attach([x, y])
    assert gm.attached_tensors() == [x, y] or [id(a) for a in gm.attached_tensors()] == [id(x), id(y)]


def test_attached_tensors_are_held_weakly():
    gm = GradManager()
    x = t([1.0])
    gm.attach(x)
    r = weakref.ref(x)
    del x
    gc.collect()
    assert r() is None and gm.attached_tensors() == []


# -- record / backward / release ---------------------------------------------------------------

def test_backward_without_record_is_megengines_error():
    gm = GradManager().attach(t([1.0]))
    with pytest.raises(RuntimeError, match=r"^no computation history. did you forget record\(\) "
                       r"or call a method that clears the history\?$"):
        gm.backward(t([1.0]))


def test_record_twice_and_release_twice():
    gm = GradManager()
    gm.record()
    with pytest.raises(RuntimeError, match="already recording"):
        gm.record()
    gm.release()
    gm.release()
    with gm:
        pass


def test_backward_releases_the_recording():
    x = t([1.0, 2.0, 3.0])
    gm = GradManager().attach(x)
    with gm:
        y = x.sum()
        gm.backward(y)
        with pytest.raises(RuntimeError, match="no computation history"):
            gm.backward(y)
    assert "grad" not in [l.name for l in core.transformations()]


def test_gradients_accumulate_across_backward_calls():
    x = t([1.0, 2.0, 3.0])
    gm = GradManager().attach(x)
    for expected in ([2.0, 4.0, 6.0], [4.0, 8.0, 12.0]):
        with gm:
            gm.backward((x * x).sum())
        close(x.grad, expected)


def test_record_release_form():
    x = t([1.0, 2.0])
    gm = GradManager().attach(x)
    gm.record()
    y = (x * 3).sum()
    gm.backward(y)
    close(x.grad, [3.0, 3.0])


def test_non_scalar_y_defaults_to_ones_and_dy_can_be_given():
    x = t([1.0, 2.0, 3.0])
    gm = GradManager().attach(x)
    with gm:
        gm.backward(x * x)
    close(x.grad, [2.0, 4.0, 6.0])
    with gm:
        gm.backward(x * x, t([1.0, 0.0, 2.0]))
    close(x.grad, [4.0, 4.0, 18.0])
    x.grad = None
    with gm:
        gm.backward(x * 2, np.ones(3, "float32"))
    close(x.grad, [2.0, 2.0, 2.0])


def test_lists_of_ys_and_dys():
    x = t([1.0, 2.0, 3.0])
    gm = GradManager().attach(x)
    with gm:
        gm.backward([(x * 2).sum(), (x * 3).sum()])
    close(x.grad, [5.0, 5.0, 5.0])
    x.grad = None
    with gm:
        gm.backward([x * 2, x * 3], [t([1.0, 1.0, 1.0]), t([0.0, 0.0, 1.0])])
    close(x.grad, [2.0, 2.0, 5.0])


def test_dy_of_the_wrong_shape_is_a_clear_error_and_releases():
    x = t([1.0, 2.0, 3.0])
    gm = GradManager().attach(x)
    with gm:
        with pytest.raises(ValueError, match=r"dy\[0\] has shape \(2,\) but y\[0\] has shape \(3,\)"):
            gm.backward(x * 2, t([1.0, 2.0]))
        assert not gm._recording
    assert x.grad is None


def test_backward_of_nothing_or_of_unrelated_tensors_gives_no_gradient():
    x, w = t([1.0, 2.0, 3.0]), t([1.0, 1.0, 1.0])
    gm = GradManager().attach([x, w])
    with gm:
        gm.backward()
    assert x.grad is None
    with gm:
        gm.backward(t([1.0, 2.0]))
    assert x.grad is None
    with gm:
        gm.backward((x * 2).sum())
    close(x.grad, [2.0, 2.0, 2.0])
    assert w.grad is None


def test_computation_before_record_or_attach_is_not_seen():
    x = t([1.0, 2.0])
    gm = GradManager().attach(x)
    before = x * 10
    with gm:
        gm.backward((before * x).sum())
    close(x.grad, [10.0, 20.0])
    w = t([3.0, 4.0])
    x.grad = None
    with gm:
        y = w * x
        gm.attach(w)           # attached while recording: later ops on w are seen, earlier not
        z = (y + w * w).sum()
        gm.backward(z)
    close(w.grad, [6.0, 8.0])
    close(x.grad, [3.0, 4.0])


def test_callbacks_run_in_order_and_repeated_attach_concatenates():
    x = t([1.0, 2.0, 3.0])
    calls = []

    def cb1(tensor, g):
        calls.append(("cb1", tensor is x, g.numpy().tolist()))
        return g * 10

    def cb2(tensor, g):
        calls.append(("cb2", tensor is x, g.numpy().tolist()))
        return g + 1

    gm = GradManager()
    gm.attach(x, callbacks=cb1)
    gm.attach([x], callbacks=[cb2])
    with gm:
        gm.backward((x * 3).sum())
    assert calls == [("cb1", True, [3.0, 3.0, 3.0]), ("cb2", True, [30.0, 30.0, 30.0])]
    close(x.grad, [31.0, 31.0, 31.0])


def test_grads_are_separate_tensors_even_when_a_rule_shares_one():
    a, b = t([1.0, 2.0]), t([3.0, 4.0])
    gm = GradManager().attach([a, b])
    with gm:
        gm.backward(a + b)          # add's rule may hand the same tensor to both inputs
    assert a.grad is not b.grad
    with gm:
        gm.backward(a * 2)
    close(a.grad, [3.0, 3.0])       # accumulating into a.grad (in place) leaves b.grad alone
    close(b.grad, [1.0, 1.0])
    dy = t([5.0, 6.0])
    a.grad = None
    with gm:
        gm.backward(a * 1 + 0, dy)
    a.grad += 1
    close(dy, [5.0, 6.0])           # the caller's dy is not the tensor that became a.grad


def test_get_backwarding_grad_manager():
    x = t([1.0])
    seen = []
    gm = GradManager().attach(x, callbacks=lambda tensor, g: seen.append(
        gm_module.get_backwarding_grad_manager()) or g)
    with gm:
        gm.backward(x * 2)
    assert seen == [gm] and gm_module.get_backwarding_grad_manager() is None


def test_detach_stops_gradients():
    x, w = t([1.0, 2.0, 3.0]), t([1.0, 1.0, 1.0])
    gm = GradManager().attach([x, w])
    with gm:
        gm.backward((x.detach() * w).sum())
    assert x.grad is None
    close(w.grad, [1.0, 2.0, 3.0])


def test_integer_paths_carry_no_gradient():
    x = t([1.5, 2.5])
    gm = GradManager().attach(x)
    with gm:
        i = x.astype("int32")
        gm.backward(((i * 2).astype("float32") + x).sum())
    close(x.grad, [1.0, 1.0])


def test_grads_through_in_place_updates():
    # values checked against MegEngine 1.13
    x, w = t([1.0, 2.0, 3.0]), t([2.0, 2.0, 2.0])
    gm = GradManager().attach([x, w])
    with gm:
        y = x * w
        w += 10
        w *= 2
        gm.backward(y.sum() + (w * x).sum())
    close(x.grad, [26.0, 26.0, 26.0])
    close(w.grad, [3.0, 6.0, 9.0])
    x.grad = w.grad = None
    with gm:
        w[0] = 5.0
        gm.backward((x * w).sum())
    close(x.grad, [5.0, 24.0, 24.0])
    close(w.grad, [0.0, 2.0, 3.0])


def test_tensors_that_die_free_their_tape():
    x = t([1.0, 2.0])
    gm = GradManager().attach(x)
    with gm:
        y = x * 2
        r = weakref.ref(y)
        node = weakref.ref(y._gslot[1])
        del y
        assert r() is None and node() is None
        h = x * 3
        z = h * 2
        rh = weakref.ref(h)
        del h
        assert rh() is not None    # z's node holds it for the backward
    assert rh() is None            # release freed what z still held
    del z
    gm2 = GradManager().attach(x)
    with gm2:
        sq = x * x
        loss = sq.sum()
        rsq = weakref.ref(sq)
        del sq
        gm2.backward(loss)
        assert rsq() is None       # backward freed the tape as it went, although loss is alive


def test_error_in_a_rule_does_not_break_later_steps():
    from mge.core import OpDef, apply, def_backward, def_infer, def_kernel

    class Fragile(OpDef):
        pass

    def_infer(Fragile)(same_desc)
    def_kernel(Fragile)(lambda op, x: (x.copy(),))

    @def_backward(Fragile)
    def _rule(op, inputs, outputs, grads, needs):
        raise ValueError("fragile rule failed")

    x = t([1.0, 2.0])
    gm = GradManager().attach(x)
    with gm:
        with pytest.raises(ValueError, match="fragile rule failed"):
            gm.backward(apply(Fragile(), x)[0].sum())
    assert x.grad is None
    assert "grad" not in [l.name for l in core.transformations()]
    with gm:
        gm.backward((x * 4).sum())
    close(x.grad, [4.0, 4.0])


def test_disabled_plugin_is_a_clear_error_at_record():
    gm = GradManager().attach(t([1.0]))
    core.disable_transformation("grad")
    try:
        with pytest.raises(RuntimeError, match="'grad' transformation is disabled"):
            gm.record()
    finally:
        core.enable_transformation("grad")
    with gm:
        pass


# -- several managers --------------------------------------------------------------------------

def test_nested_managers_give_second_order_gradients():
    x = t([1.0, 2.0, 3.0])
    gm1 = GradManager().attach(x)
    gm2 = GradManager().attach(x)
    with gm1:
        with gm2:
            gm2.backward((x ** 3).sum())
        g = x.grad
        close(g, [3.0, 12.0, 27.0])
        x.grad = None
        gm1.backward(g.sum())
    close(x.grad, [6.0, 12.0, 18.0])


def test_inner_manager_does_not_record_the_outer_managers_backward():
    # MegEngine 1.13 (its test_grad_manager_visibility_by_order): a manager entered later does not
    # see the backward of one entered before it; the earlier one records the later one's
    x = t([1.0, 2.0])
    outer, inner = GradManager().attach(x), GradManager().attach(x)
    with outer:
        with inner:
            y = (x * x * x).sum()
            outer.backward(y)          # inner does not record this backward pass
            g = x.grad
            x.grad = None
            inner.backward(g.sum())
    assert x.grad is None
    with outer:
        with inner:
            y = (x * x * x).sum()
            inner.backward(y)          # outer records this one: second order
            g = x.grad
            x.grad = None
            outer.backward(g.sum())
    close(x.grad, [6.0, 12.0])


def test_groups_do_not_record_each_others_backward():
    # values checked against MegEngine 1.13
    a, b = t([1.0, 2.0]), t([3.0, 4.0])
    ga, gb = GradManager().attach(a), GradManager().attach(b)
    group = ga | gb
    assert isinstance(group, GradManagerGroup)
    with group:
        y = (a * b).sum()
        ga.backward(y)
        close(a.grad, [3.0, 4.0])
        assert b.grad is None
        gb.backward(y)
        close(b.grad, [1.0, 2.0])
    a.grad = b.grad = None
    with ga | gb:
        gb.backward((a * a * b).sum())
    assert a.grad is None
    close(b.grad, [1.0, 4.0])


def test_group_merging_and_release_on_exit():
    g1, g2, g3 = GradManager(), GradManager(), GradManager()
    group = (g1 | g2) | g3
    assert isinstance(group, GradManagerGroup) and len(group._gms) == 3
    assert len((g1 | (g2 | g3))._gms) == 3
    with group:
        assert g1._recording and g2._recording and g3._recording
    assert not (g1._recording or g2._recording or g3._recording)
    assert "grad" not in [l.name for l in core.transformations()]


def test_gradient_penalty_wgan_gp():
    # The WGAN-GP term: lambda * (|d critic(x) / dx| - 1)^2, differentiated for the weights.
    rng = np.random.default_rng(0)
    xa = rng.standard_normal((4, 3)).astype("float32")
    wa = rng.standard_normal((3, 1)).astype("float32")
    x, w = mge.tensor(xa), mge.tensor(wa)
    gm_w = GradManager().attach(w)
    gm_x = GradManager().attach(x)
    with gm_w:
        with gm_x:
            critic = F.tanh(F.matmul(x, w)).sum()
            gm_x.backward(critic)
        gx = x.grad
        norm = F.sqrt((gx * gx).sum(axis=1))
        penalty = ((norm - 1) ** 2).mean() * 10
        gm_w.backward(penalty)
    # reference in float64: d/dw of 10 * mean((|(1 - tanh(xw)^2) w^T|_row - 1)^2)
    def penalty_np(wv):
        s = 1 - np.tanh(xa.astype(np.float64) @ wv) ** 2
        g = s * wv.T
        return 10 * np.mean((np.sqrt((g * g).sum(axis=1)) - 1) ** 2)
    eps = 1e-6
    ref = np.zeros_like(wa, dtype=np.float64)
    for i in range(3):
        d = np.zeros((3, 1))
        d[i] = eps
        ref[i] = (penalty_np(wa + d) - penalty_np(wa - d)) / (2 * eps)
    np.testing.assert_allclose(w.grad.numpy(), ref, rtol=1e-3, atol=1e-4)


# -- a training step, and both channel modes ---------------------------------------------------

def _mlp_reference(xa, la, w1, b1, w2, b2):
    h = np.maximum(xa @ w1 + b1, 0)
    z = h @ w2 + b2
    z = z - z.max(axis=1, keepdims=True)
    p = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    g = p.copy()
    g[np.arange(len(la)), la] -= 1
    g /= len(la)
    gw2, gb2 = h.T @ g, g.sum(0)
    gh = (g @ w2.T) * (h > 0)
    return [xa.T @ gh, gh.sum(0), gw2, gb2]


@pytest.mark.parametrize("level", [0, 2])
def test_mlp_training_gradients_match_numpy(level):
    old = mge.config.async_level
    mge.config.async_level = level
    try:
        rng = np.random.default_rng(1)
        xa = rng.standard_normal((8, 5)).astype("float32")
        la = rng.integers(0, 3, 8).astype("int32")
        arrays = [rng.standard_normal((5, 6)).astype("float32") * 0.5,
                  rng.standard_normal(6).astype("float32") * 0.1,
                  rng.standard_normal((6, 3)).astype("float32") * 0.5,
                  rng.standard_normal(3).astype("float32") * 0.1]
        params = [mge.Parameter(a) for a in arrays]
        gm = GradManager().attach(params)
        x, label = mge.tensor(xa), mge.tensor(la)
        for step in range(2):
            with gm:
                w1, b1, w2, b2 = params
                h = F.relu(F.matmul(x, w1) + b1)
                loss = F.nn.cross_entropy(F.matmul(h, w2) + b2, label)
                gm.backward(loss)
            ref = _mlp_reference(xa.astype(np.float64), la, *[a.astype(np.float64) for a in arrays])
            for p, r in zip(params, ref):
                np.testing.assert_allclose(p.grad.numpy(), r * (step + 1), rtol=1e-4, atol=1e-5)
    finally:
        mge.config.async_level = old


def test_check_grads_helper_first_and_second_order():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((4, 2))
    check_grads(lambda x, y: F.tanh(F.matmul(x, y)), a, b, order=2)
    check_grads(lambda x: (F.exp(x), x.sum(axis=0)), a, order=2)
    with pytest.raises(AssertionError):
        check_grads(lambda x: _wrong_grad(x), a)


def _wrong_grad(x):
    # x * 2 in value, but a gradient of 3 (set_grad): check_grads must notice
    from mge.autodiff import Function

    class Wrong(Function):
        def forward(self, v):
            return v * 2

        def backward(self, dy):
            return dy * 3

    return Wrong()(x)


def test_rules_that_read_outputs_get_them_without_recomputing():
    # sigmoid's, softmax's and max-reduce's rules read the forward output; the grad
    # transformation keeps it (KEEPS_OUTPUTS), so backward never runs the forward op again.
    x = mge.tensor(np.linspace(-1, 1, 6, dtype="float32").reshape(2, 3))
    gm = GradManager().attach([x])
    with gm:
        loss = (F.sigmoid(x).sum() + F.softmax(x, axis=1)[:, 0].sum()
                + F.max(x * 2, axis=1).sum())
        with ops_run() as seen:
            gm.backward(loss)
    assert "Elemwise.sigmoid" not in seen and "Softmax" not in seen, seen
    assert not any(s.startswith("Reduce.max") for s in seen), seen
    assert x.grad is not None and np.isfinite(x.grad.numpy()).all()

def test_tensor_of_a_tensor_keeps_gradient_history():
    # MegEngine 1.13: Tensor(x * 2) stays on the tape (x.grad == [8, 16] here); detach() cuts it.
    x = mge.tensor([1.0, 2.0])
    gm = GradManager().attach([x])
    with gm:
        y = mge.Tensor(x * 2)
        z = mge.Tensor(x * 3).detach()
        gm.backward((y * y).sum() + (z * x).sum())
    np.testing.assert_array_equal(x.grad.numpy(), [8.0 + 3.0, 16.0 + 6.0])
