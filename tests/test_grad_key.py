"""The grad transformation plugin (plugins/grad.py): GradKey, backward, set_grad and the tape."""
import collections
import weakref

import numpy as np
import pytest

import mge
import mge.functional as F
from mge import core
from mge.core import OpDef, TensorDesc, Transformation, apply, def_backward, def_infer, def_kernel
from helpers import float_tensor as t, ops_run, same_desc

grad = core.get_plugin("grad")


def ones(y):
    return F.ones_like(y)


@pytest.fixture
def key():
    k = grad.GradKey("test")
    k.enter()
    yield k
    k.exit()


class OpCounter(Transformation):
    """Counts the ops that really run (just above eval), by op name."""

    position = "before:eval"
    made = 0

    def __init__(self):
        OpCounter.made += 1
        self.name = f"test_grad_op_counter_{OpCounter.made}"  # a disabled name stays disabled
        self.counts = collections.Counter()

    def apply(self, op, inputs, next):
        self.counts[op.name] += 1
        return next(op, inputs)


@pytest.fixture
def counter():
    c = OpCounter()
    core.register_transformation(c)
    yield c.counts
    core.disable_transformation(c.name)


# A test op family with rules this file controls: Twice (2x), Pair (x, -x), NoRule (x + 1).
class Twice(OpDef):
    pass


class Pair(OpDef):
    pass


class NoRule(OpDef):
    pass


class Broken(OpDef):
    pass


def _pair(op, descs):
    return [TensorDesc(descs[0][0], descs[0][1])] * 2


for _cls, _rule in ((Twice, same_desc), (Pair, _pair), (NoRule, same_desc), (Broken, same_desc)):
    def_infer(_cls)(_rule)

def_kernel(Twice)(lambda op, x: (x * 2,))
def_kernel(Pair)(lambda op, x: (x.copy(), -x))
def_kernel(NoRule)(lambda op, x: (x + 1,))
def_kernel(Broken)(lambda op, x: (x.copy(),))

SEEN = []


@def_backward(Twice)
def _twice_backward(op, inputs, outputs, grads, needs):
    SEEN.append(needs)
    return [apply(Twice(), grads[0])[0] if needs[0] else None]


@def_backward(Pair)
def _pair_backward(op, inputs, outputs, grads, needs):
    SEEN.append(tuple(g is not None for g in grads))
    a, b = grads
    g = None
    if a is not None:
        g = a
    if b is not None:
        g = -b if g is None else g - b
    return [g]


@def_backward(Broken)
def _broken_backward(op, inputs, outputs, grads, needs):
    raise ZeroDivisionError("this rule is broken on purpose")


# -- the plugin and the stack ------------------------------------------------------------------

def test_plugin_is_on_demand_and_a_key_puts_its_layer_on_the_grad_segment():
    names = [x.name for x in core.transformations()]
    assert "grad" not in names
    k = grad.GradKey("k")
    k.enter()
    try:
        active = core.transformations()
        layers = [x for x in active if x.name == "grad"]
        assert len(layers) == 1 and layers[0].key is k
        names = [x.name for x in active]
        assert names.index("dim_expansion") < names.index("grad") < names.index("scalar")
        k2 = grad.GradKey("k2")
        k2.enter()
        layers = [x for x in core.transformations() if x.name == "grad"]
        assert [x.key for x in layers] == [k2, k]  # the newest key on top
        k2.exit()
    finally:
        k.exit()
    assert "grad" not in [x.name for x in core.transformations()]


def test_key_name_and_repr():
    k = grad.GradKey("mykey")
    assert k.name == "mykey" and "mykey" in repr(k)
    k.name = "other"
    assert k.name == "other"
    assert grad.GradKey().name == ""


def test_enter_twice_and_use_after_exit_are_errors():
    k = grad.GradKey("k")
    k.enter()
    with pytest.raises(RuntimeError, match="already entered"):
        k.enter()
    k.exit()
    k.exit()  # harmless
    with pytest.raises(RuntimeError, match="attach after exit"):
        k.attach(t([1.0]))


# -- attach, backward and callbacks ------------------------------------------------------------

def test_backward_calls_the_callback_with_the_gradient(key):
    x = t([1.0, 2.0, 3.0])
    got = []
    key.attach(x, got.append)
    assert key.is_attached_to(x)
    y = x * x
    assert key.is_attached_to(y)
    assert not key.is_attached_to(t([1.0]))
    grad.backward(key, [y], [t([1.0, 1.0, 2.0])])
    assert len(got) == 1
    np.testing.assert_allclose(got[0].numpy(), [2.0, 4.0, 12.0])


def test_attach_rejects_bool_and_non_tensor(key):
    with pytest.raises(TypeError, match="float and integer.*bool"):
        key.attach(t([True, False], "bool"))
    with pytest.raises(TypeError, match="expected a Tensor"):
        key.attach([1.0])
    with pytest.raises(TypeError, match="callable"):
        key.attach(t([1.0]), 3)


def test_attaching_again_replaces_the_callback(key):
    x = t([1.0, 2.0])
    first, second = [], []
    key.attach(x, first.append)
    key.attach(x, second.append)
    grad.backward(key, [x * 3], [t([1.0, 1.0])])
    assert first == [] and len(second) == 1
    np.testing.assert_allclose(second[0].numpy(), [3.0, 3.0])


def test_attaching_an_intermediate_passes_its_gradient_on(key):
    x = t([1.0, 2.0])
    gx, gy = [], []
    key.attach(x, gx.append)
    y = x * x
    key.attach(y, gy.append)
    grad.backward(key, [y * 3], [t([1.0, 1.0])])
    np.testing.assert_allclose(gy[0].numpy(), [3.0, 3.0])
    np.testing.assert_allclose(gx[0].numpy(), [6.0, 12.0])


def test_untracked_ys_and_unreached_tensors_get_nothing(key):
    x, w = t([1.0, 2.0]), t([5.0, 6.0])
    gx, gw = [], []
    key.attach(x, gx.append)
    key.attach(w, gw.append)
    grad.backward(key, [t([1.0, 1.0]), x * 2], [t([1.0, 1.0]), t([1.0, 1.0])])
    np.testing.assert_allclose(gx[0].numpy(), [2.0, 2.0])
    assert gw == []


def test_gradients_reaching_a_tensor_twice_are_summed(key):
    x = t([1.0, 2.0])
    got = []
    key.attach(x, got.append)
    y = x * 2 + x * x
    grad.backward(key, [y, x], [t([1.0, 1.0]), t([10.0, 10.0])])
    np.testing.assert_allclose(got[0].numpy(), [2 + 2 + 10, 2 + 4 + 10])


def test_backward_checks_its_arguments(key):
    x = t([1.0, 2.0, 3.0])
    key.attach(x, lambda g: None)
    y = x * 2
    with pytest.raises(ValueError, match="1 ys but 2 dys"):
        grad.backward(key, [y], [t([1.0]), t([1.0])])
    with pytest.raises(TypeError, match="list of tensors"):
        grad.backward(key, y, [ones(y)])
    with pytest.raises(ValueError, match=r"dy\[0\] has shape \(2,\) but y\[0\] has shape \(3,\)"):
        grad.backward(key, [y], [t([1.0, 1.0])])


def test_a_key_runs_backward_once_and_records_nothing_after(key):
    x = t([1.0, 2.0])
    got = []
    key.attach(x, got.append)
    y = x * x
    grad.backward(key, [y], [ones(y)])
    assert not key.is_attached_to(x * 3)
    with pytest.raises(RuntimeError, match="backward was already called"):
        grad.backward(key, [y], [ones(y)])


def test_numpy_dy_is_accepted(key):
    x = t([1.0, 2.0])
    got = []
    key.attach(x, got.append)
    grad.backward(key, [x * x], [np.array([1.0, 0.5], "float32")])
    np.testing.assert_allclose(got[0].numpy(), [2.0, 2.0])


def test_get_backward_closure(key):
    x = t([1.0, 2.0])
    got = []
    key.attach(x, got.append)
    y = x * x
    closure = grad.get_backward_closure(key, [y])
    closure([t([1.0, 1.0])])
    np.testing.assert_allclose(got[0].numpy(), [2.0, 4.0])


# -- what gets recorded --------------------------------------------------------------------------

def test_suppress_and_resume_nest(key):
    x = t([1.0, 2.0])
    key.attach(x)
    key.suppress()
    key.suppress()
    assert not key.is_attached_to(x * 2)
    key.resume()
    assert not key.is_attached_to(x * 2)
    key.resume()
    assert key.is_attached_to(x * 2)
    key.resume()  # more resumes than suppresses do not go below zero
    key.suppress()
    assert not key.is_attached_to(x * 2)
    key.resume()


def test_detach_and_integer_values_are_not_tracked(key):
    x = t([1.5, 2.5])
    key.attach(x)
    assert not key.is_attached_to(x.detach())
    assert not key.is_attached_to(x.astype("int32"))
    assert not key.is_attached_to(x > 2)
    assert key.is_attached_to(x.astype("float16"))


def test_integer_inputs_never_get_gradients(key):
    x = t([1.5, 2.5])
    got = []
    key.attach(x, got.append)
    i = x.astype("int32")
    y = i.astype("float32") * x      # the path through the integer value carries nothing
    grad.backward(key, [y], [ones(y)])
    np.testing.assert_allclose(got[0].numpy(), [1.0, 2.0])


def test_get_grad_key_and_is_grad_attached(key):
    x = t([1.0])
    plain = t([2.0])
    assert grad.get_grad_key([x, plain]) is None
    assert not grad.is_grad_attached([plain])
    key.attach(x)
    assert grad.get_grad_key([plain, x]) is key
    assert grad.is_grad_attached([x * 2])
    inner = grad.GradKey("inner")
    inner.enter()
    try:
        inner.attach(x)
        assert grad.get_grad_key([x]) is inner       # the newest key that tracks it
        inner.suppress()
        assert grad.get_grad_key([x]) is key         # a paused key does not answer
        inner.resume()
    finally:
        inner.exit()
    assert grad.get_grad_key([x]) is key


def test_rules_get_needs_only_for_tracked_inputs_and_untracked_branches_cost_nothing(key, counter):
    x, c = t([1.0, 2.0]), t([3.0, 4.0])
    got = []
    key.attach(x, got.append)
    y = apply(Twice(), x)[0] * c            # c is not tracked: mul's rule needs only x
    side = apply(Twice(), c)[0]             # not tracked at all: not recorded
    assert not key.is_attached_to(side)
    SEEN.clear()
    counter.clear()
    grad.backward(key, [y], [ones(y)])
    assert SEEN == [(True,)]
    # mul's gradient for x (one mul), then Twice's rule (one Twice); nothing for c
    assert counter["Twice"] == 1
    np.testing.assert_allclose(got[0].numpy(), [6.0, 8.0])


def test_nodes_no_gradient_can_use_are_skipped(key):
    x, w = t([1.0, 2.0]), t([3.0, 4.0])
    got = []
    key.attach(x, got.append)
    key.attach(w)                            # attached without a callback: nobody wants it
    y = apply(Twice(), w)[0] + x
    SEEN.clear()
    grad.backward(key, [y], [ones(y)])
    assert SEEN == []                        # Twice's rule never ran
    np.testing.assert_allclose(got[0].numpy(), [1.0, 1.0])


def test_multi_output_op_gets_none_for_outputs_without_gradient(key):
    x = t([1.0, 2.0])
    got = []
    key.attach(x, got.append)
    a, b = apply(Pair(), x)
    SEEN.clear()
    grad.backward(key, [b], [t([1.0, 1.0])])
    assert SEEN == [(False, True)]
    np.testing.assert_allclose(got[0].numpy(), [-1.0, -1.0])


def test_missing_rule_is_an_error_naming_the_op_only_when_needed(key):
    x = t([1.0, 2.0])
    key.attach(x, lambda g: None)
    y = apply(NoRule(), x)[0]
    with pytest.raises(RuntimeError, match="no backward rule for NoRule"):
        grad.backward(key, [y], [ones(y)])


def test_missing_rule_is_fine_when_no_gradient_goes_through(key):
    x, w = t([1.0, 2.0]), t([1.0, 1.0])
    got = []
    key.attach(x, got.append)
    key.attach(w)                       # tracked, but no callback
    y = apply(NoRule(), w)[0] * x
    grad.backward(key, [y], [ones(y)])
    np.testing.assert_allclose(got[0].numpy(), [2.0, 2.0])


def test_error_in_a_rule_propagates_and_names_the_op():
    k = grad.GradKey("k")
    k.enter()
    try:
        x = t([1.0, 2.0])
        k.attach(x, lambda g: None)
        y = apply(Broken(), x)[0]
        with pytest.raises(ZeroDivisionError, match="broken on purpose") as info:
            grad.backward(k, [y], [ones(y)])
        notes = getattr(info.value, "__notes__", ["in the backward rule of Broken"])
        assert any("Broken" in n for n in notes)
    finally:
        k.exit()
    assert "grad" not in [x.name for x in core.transformations()]
    # a new key works as before
    k2 = grad.GradKey("k2")
    k2.enter()
    try:
        got = []
        k2.attach(x, got.append)
        grad.backward(k2, [x * 5], [t([1.0, 1.0])])
        np.testing.assert_allclose(got[0].numpy(), [5.0, 5.0])
    finally:
        k2.exit()


# -- set_grad ----------------------------------------------------------------------------------

def test_set_grad_gives_outputs_a_custom_backward(key):
    x = t([1.0, 2.0])
    got, seen = [], []
    key.attach(x, got.append)
    y = x * 1
    key.suppress()
    z1, z2 = x * 7, x * 9                 # not recorded: the custom backward is their gradient
    key.resume()

    def backward_fn(d1, d2):
        seen.append((d1 is None, d2 is None))
        return (d1 * 100,)

    out = grad.set_grad(backward_fn, [y], [z1, z2])
    assert out[0] is z1 and key.is_attached_to(z1)
    grad.backward(key, [z1], [t([1.0, 1.0])])
    assert seen == [(False, True)]
    np.testing.assert_allclose(got[0].numpy(), [100.0, 100.0])


def test_set_grad_checks_what_backward_fn_returns(key):
    x = t([1.0, 2.0])
    key.attach(x, lambda g: None)
    z = grad.set_grad(lambda d: (d, d), [x], [t([0.0, 0.0])])[0]
    with pytest.raises(ValueError, match="returned 2 gradients for 1 inputs"):
        grad.backward(key, [z], [t([1.0, 1.0])])


def test_set_grad_checks_gradient_shapes(key):
    x = t([1.0, 2.0])
    key.attach(x, lambda g: None)
    z = grad.set_grad(lambda d: t([1.0, 2.0, 3.0]), [x], [t([0.0, 0.0])])[0]
    with pytest.raises(ValueError, match=r"shape \(3,\) for input 0 of shape \(2,\)"):
        grad.backward(key, [z], [t([1.0, 1.0])])


def test_set_grad_without_tracked_inputs_records_nothing(key):
    z = t([1.0])
    assert grad.set_grad(lambda d: (d,), [t([2.0])], [z]) == [z]
    assert not key.is_attached_to(z)


# -- the tape's lifetime -----------------------------------------------------------------------

def test_tensors_that_die_free_their_tape(key):
    x = t([1.0, 2.0])
    key.attach(x)
    y = x * 2
    z = y * 3
    node_y, node_z = weakref.ref(y._gslot[1]), weakref.ref(z._gslot[1])
    ry = weakref.ref(y)
    del y
    assert ry() is not None                # z's node keeps its input alive
    del z
    assert node_z() is None and node_y() is None and ry() is None


def test_exit_frees_the_tape_of_tensors_still_alive():
    k = grad.GradKey("k")
    k.enter()
    x = t([1.0, 2.0])
    k.attach(x)
    h = x * 2
    y = h * 3
    rh = weakref.ref(h)
    del h
    assert rh() is not None
    k.exit()
    assert rh() is None                    # y is alive, but its node let go of h
    assert not k.is_attached_to(x) and getattr(x, "_gslot", None) is None
    del y


def test_backward_frees_the_tape_as_it_goes(key):
    x = t([1.0, 2.0])
    key.attach(x, lambda g: None)
    h = x * 2
    y = h * 3
    rh = weakref.ref(h)
    del h
    grad.backward(key, [y], [ones(y)])
    assert rh() is None


# -- in-place updates --------------------------------------------------------------------------

def test_an_in_place_update_is_an_op_that_the_layers_see():
    # Tensor._reset is the op Assign (nothing is patched while a key records): the key's layer
    # moves the gradient with the value.
    plain = mge.Tensor.__dict__["_reset"]
    x, y = t([1.0, 2.0]), t([3.0, 4.0])
    k = grad.GradKey("k")
    k.enter()
    try:
        got = []
        k.attach(y, got.append)
        assert mge.Tensor.__dict__["_reset"] is plain
        with ops_run() as seen:
            x._reset(y)
        assert seen == ["Assign"]
        assert k.is_attached_to(x)
        grad.backward(k, [x], [t([1.0, 1.0])])
    finally:
        k.exit()
    np.testing.assert_allclose(got[0].numpy(), [1.0, 1.0])


def test_in_place_update_keeps_recorded_values_and_moves_the_slot(key):
    x, w = t([1.0, 2.0, 3.0]), t([2.0, 2.0, 2.0])
    gx, gw = [], []
    key.attach(x, gx.append)
    key.attach(w, gw.append)
    y = x * w
    w += 10          # mul's rule must still see w == 2
    w *= 2           # and the gradient goes through both updates to the attached w
    z = y.sum() + (w * x).sum()
    grad.backward(key, [z], [ones(z)])
    np.testing.assert_allclose(gx[0].numpy(), [26.0, 26.0, 26.0])
    np.testing.assert_allclose(gw[0].numpy(), [3.0, 6.0, 9.0])
    np.testing.assert_allclose(w.numpy(), [24.0, 24.0, 24.0])


def test_setitem_under_recording(key):
    x, w = t([1.0, 2.0, 3.0]), t([24.0, 24.0, 24.0])
    gx, gw = [], []
    key.attach(x, gx.append)
    key.attach(w, gw.append)
    w[0] = 5.0
    y = (x * w).sum()
    grad.backward(key, [y], [ones(y)])
    np.testing.assert_allclose(gx[0].numpy(), [5.0, 24.0, 24.0])
    np.testing.assert_allclose(gw[0].numpy(), [0.0, 2.0, 3.0])


# -- both channel modes ------------------------------------------------------------------------

@pytest.mark.parametrize("level", [0, 2])
def test_backward_at_async_levels(level):
    old = mge.config.async_level
    mge.config.async_level = level
    try:
        k = grad.GradKey("k")
        k.enter()
        try:
            rng = np.random.default_rng(0)
            a = rng.standard_normal((16, 8)).astype("float32")
            b = rng.standard_normal((8, 4)).astype("float32")
            x, w = mge.tensor(a), mge.tensor(b)
            got = []
            k.attach(w, got.append)
            y = F.relu(F.matmul(x, w)).sum()
            grad.backward(k, [y], [ones(y)])
        finally:
            k.exit()
        mask = (a @ b > 0).astype("float32")
        np.testing.assert_allclose(got[0].numpy(), a.T @ mask, rtol=1e-5, atol=1e-5)
    finally:
        mge.config.async_level = old


def test_recording_keeps_no_inputs_a_rule_does_not_read():
    # MegEngine 1.13's test_autodiff: add, relu, reshape, subtensor, add/remove axis and
    # IndexingMultiAxisVec keep neither their inputs nor intermediate values alive
    import weakref

    import numpy as np

    import mge
    import mge.functional as F
    from mge.core.autodiff.grad import Grad

    rng = np.random.RandomState(6)
    a = rng.rand(3, 4).astype("float32")
    x = mge.tensor(a)
    grads = {}
    with Grad() as g:
        g.wrt(x, callback=lambda d: grads.update(x=d))
        t = x * 2
        u = mge.tensor(rng.rand(3, 4).astype("float32"))
        refs = [weakref.ref(t), weakref.ref(u)]
        v = t + u
        refs.append(weakref.ref(v))
        y = F.relu(v)               # relu's rule reads its output y (kept), not v
        del v
        s = F.reshape(y * 1, (4, 3))
        s2 = F.expand_dims(s, 0)
        refs.append(weakref.ref(s))
        z = s2[0, 1:3]
        refs.append(weakref.ref(s2))
        i = z[:, mge.tensor([0, 2])]
        refs.append(weakref.ref(z))
        del t, u, s, s2, z
        assert [r() is None for r in refs] == [True] * len(refs)
        g(i, mge.tensor(np.ones((2, 2), "float32")))
    ref = np.zeros((4, 3), "float32")
    ref[1:3][:, [0, 2]] = 2.0
    np.testing.assert_allclose(grads["x"].numpy(), ref.reshape(3, 4))


def test_backward_broadcasts_dy():
    import numpy as np

    import mge
    import mge.functional as F
    from mge.core.autodiff.grad import Grad

    x = mge.tensor([1.0, -1.0])
    out = {}
    with Grad() as g:
        g.wrt(x, callback=lambda d: out.update(x=d))
        g(F.relu(x * 2), mge.tensor([1.0]))
    np.testing.assert_allclose(out["x"].numpy(), [2.0, 0.0])
    with Grad() as g:
        g.wrt(x)
        with pytest.raises(ValueError, match="dy"):
            g(x * 2, mge.tensor([1.0, 2.0, 3.0]))


def test_recording_keeps_every_input_while_dtr_records_computing_paths():
    # under DTR the recording keeps the inputs its rules do not read (DTR can evict and recompute
    # them); gradients are the same either way
    import weakref

    import numpy as np

    import mge
    from mge.core.autodiff.grad import Grad

    a = np.random.RandomState(7).rand(3, 4).astype("float32")
    for dtr in (False, True):
        if dtr:
            mge.dtr.enable()
        try:
            x = mge.tensor(a)
            got = {}
            with Grad() as g:
                g.wrt(x, callback=lambda d: got.update(x=d))
                t = x * 2
                ref = weakref.ref(t)
                y = t + 1
                del t
                assert (ref() is not None) == dtr
                g(y, mge.tensor(np.ones((3, 4), "float32")))
            np.testing.assert_allclose(got["x"].numpy(), np.full((3, 4), 2.0, "float32"))
        finally:
            mge.dtr.disable()


def test_integer_gradients_flow_from_attached_integer_tensors():
    # MegEngine lets integer tensors receive integer gradients; integers computed from floats
    # (argmax) still get none
    import numpy as np

    import mge
    import mge.functional as F
    from mge.core.autodiff.grad import Grad

    x = mge.tensor(np.arange(1, 4, dtype=np.int32))
    got = {}
    with Grad() as g:
        g.wrt(x, callback=lambda d: got.update(x=d))
        y = (x * 3 + x).reshape(3, 1)[1:]
        g(y, F.ones_like(y))
    assert got["x"].dtype == np.int32
    np.testing.assert_array_equal(got["x"].numpy(), [0, 4, 4])
    w = mge.tensor(np.ones(3, "float32"))
    with Grad() as g:
        g.wrt(w, callback=lambda d: got.update(w=d))
        i = F.argmax(w * 2, axis=0)
        y = (w * 2)[i] + w.sum()
        g(y, F.ones_like(y))
    np.testing.assert_array_equal(got["w"].numpy(), [3.0, 1.0, 1.0])
