"""Optimizers: each update against a float64 numpy reference over several steps, param groups,
state dicts, skipped parameters, clipping and MegEngine's errors."""
import itertools
import warnings

import numpy as np
import pytest

import mge
import mge.core as core
import mge.optimizer as optim
from helpers import ops_run

SHAPES = [(3, 4), (4,), ()]
STEPS = 4


# -- float64 references: state is a dict of arrays, updated in place -----------------------------

def sgd_ref(p, g, s, lr, momentum=0.0, nesterov=False, weight_decay=0.0):
    g = g + weight_decay * p
    if momentum:
        s["momentum_buffer"] = momentum * s.get("momentum_buffer", 0.0) + g
        g = g + momentum * s["momentum_buffer"] if nesterov else s["momentum_buffer"]
    return p - lr * g


def adam_ref(p, g, s, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, decoupled=False):
    if not decoupled:
        g = g + weight_decay * p
    t = s["step"] = s.get("step", 0.0) + 1
    m = s["exp_avg"] = betas[0] * s.get("exp_avg", 0.0) + (1 - betas[0]) * g
    v = s["exp_avg_sq"] = betas[1] * s.get("exp_avg_sq", 0.0) + (1 - betas[1]) * g * g
    delta = (m / (1 - betas[0] ** t)) / (np.sqrt(v / (1 - betas[1] ** t)) + eps)
    if decoupled:
        delta = delta + weight_decay * p
    return p - lr * delta


def adamw_ref(p, g, s, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
    return adam_ref(p, g, s, lr, betas, eps, weight_decay, decoupled=True)


def adagrad_ref(p, g, s, lr=1e-2, lr_decay=0.0, eps=1e-10, weight_decay=0.0):
    t = s["step"] = s.get("step", 0.0) + 1
    g = g + weight_decay * p
    sq = s["square_avg"] = s.get("square_avg", 0.0) + g * g
    return p - lr / (1 + (t - 1) * lr_decay) * g / np.sqrt(sq + eps)


def adadelta_ref(p, g, s, lr=1.0, rho=0.9, eps=1e-6, weight_decay=0.0):
    s["step"] = s.get("step", 0.0) + 1
    g = g + weight_decay * p
    sq = s["square_avg"] = rho * s.get("square_avg", 0.0) + (1 - rho) * g * g
    delta = np.sqrt(s.get("acc_delta", 0.0) + eps) / np.sqrt(sq + eps) * g
    s["acc_delta"] = rho * s.get("acc_delta", 0.0) + (1 - rho) * delta * delta
    return p - lr * delta


def rmsprop_ref(p, g, s, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0,
                centered=False):
    # torch.optim.RMSprop's algorithm, written out
    s["step"] = s.get("step", 0.0) + 1
    g = g + weight_decay * p
    v = s["square_avg"] = alpha * s.get("square_avg", 0.0) + (1 - alpha) * g * g
    if centered:
        c = s["grad_avg"] = alpha * s.get("grad_avg", 0.0) + (1 - alpha) * g
        avg = np.sqrt(v - c * c) + eps
    else:
        avg = np.sqrt(v) + eps
    if momentum:
        b = s["momentum_buffer"] = momentum * s.get("momentum_buffer", 0.0) + g / avg
        return p - lr * b
    return p - lr * g / avg


CASES = [
    (optim.SGD, sgd_ref, dict(lr=0.1)),
    (optim.SGD, sgd_ref, dict(lr=0.05, weight_decay=0.01)),
    (optim.SGD, sgd_ref, dict(lr=0.05, momentum=0.9)),
    (optim.SGD, sgd_ref, dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-3)),
    (optim.Adam, adam_ref, dict(lr=0.01)),
    (optim.Adam, adam_ref, dict(lr=0.01, betas=(0.8, 0.9), eps=1e-6, weight_decay=0.1)),
    (optim.AdamW, adamw_ref, dict(lr=0.01)),
    (optim.AdamW, adamw_ref, dict(lr=0.02, weight_decay=0.3, betas=(0.5, 0.6))),
    (optim.Adagrad, adagrad_ref, dict()),
    (optim.Adagrad, adagrad_ref, dict(lr=0.1, lr_decay=0.5, weight_decay=0.1, eps=1e-6)),
    (optim.Adadelta, adadelta_ref, dict()),
    (optim.Adadelta, adadelta_ref, dict(lr=0.5, rho=0.7, weight_decay=0.1)),
    (optim.RMSprop, rmsprop_ref, dict()),
    (optim.RMSprop, rmsprop_ref, dict(lr=0.01, alpha=0.9, momentum=0.8, weight_decay=0.1)),
    (optim.RMSprop, rmsprop_ref, dict(lr=0.01, momentum=0.5, centered=True)),
    (optim.RMSprop, rmsprop_ref, dict(lr=0.01, centered=True, eps=1e-4)),
]


def _ids(case):
    cls, _, kw = case
    return cls.__name__ + "-" + "-".join(f"{k}={v}" for k, v in kw.items())


def _grads(seed):
    rng = np.random.default_rng(seed)
    return [[rng.standard_normal(s) for s in SHAPES] for _ in range(STEPS)]


def _params(seed=1):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s) for s in SHAPES]


@pytest.mark.parametrize("case", CASES, ids=[_ids(c) for c in CASES])
def test_update_matches_float64_reference(case):
    cls, ref, kw = case
    init = _params()
    params = [mge.Parameter(v.astype("float32")) for v in init]
    ids = [id(p) for p in params]
    opt = cls(params, **kw)
    want = [v.copy() for v in init]
    states = [{} for _ in init]
    for grads in _grads(2):
        for p, g in zip(params, grads):
            p.grad = mge.tensor(g.astype("float32"))
        assert opt.step() is opt
        opt.clear_grad()
        assert all(p.grad is None for p in params)
        # the reference sees the float32-rounded gradients
        want = [ref(w, g.astype("float32").astype("float64"), s, **kw)
                for w, g, s in zip(want, grads, states)]
        for p, w in zip(params, want):
            assert p.dtype == np.float32 and p.shape == w.shape
            np.testing.assert_allclose(p.numpy(), w, rtol=2e-5, atol=2e-6)
    assert [id(p) for p in params] == ids  # updated in place: the Parameters keep identity
    # the state the optimizer exports is the reference's state
    sd = opt.state_dict()["state"]
    for i, s in enumerate(states):
        got = sd.get(i, {})  # plain SGD has no state
        assert set(got) == set(s)
        for k, v in s.items():
            np.testing.assert_allclose(got[k], np.broadcast_to(v, got[k].shape), rtol=2e-5, atol=2e-6)


def test_parameters_without_grad_are_skipped_with_their_state():
    a, b = mge.Parameter([1.0, 2.0]), mge.Parameter([3.0])
    opt = optim.Adam([a, b], lr=0.1)
    a.grad = mge.tensor([1.0, 1.0])
    opt.step()
    assert b.numpy().tolist() == [3.0]
    sd = opt.state_dict()["state"]
    assert sd[0]["step"] == 1 and sd[1]["step"] == 0
    np.testing.assert_array_equal(sd[1]["exp_avg"], [0.0])
    assert a.numpy()[0] < 1.0


def test_state_tensors_keep_identity():
    p = mge.Parameter([1.0, 2.0])
    opt = optim.SGD(p, lr=0.1, momentum=0.9)
    buf = opt.state_dict(keep_var=True)["state"][0]["momentum_buffer"]
    assert isinstance(buf, mge.Tensor)
    p.grad = mge.tensor([1.0, -1.0])
    opt.step()
    p.grad = mge.tensor([1.0, -1.0])
    opt.step()
    np.testing.assert_allclose(buf.numpy(), [1.9, -1.9], rtol=1e-6)


def test_param_groups_with_different_lrs():
    a, b = mge.Parameter([1.0, 1.0]), mge.Parameter([[2.0]])
    opt = optim.SGD([{"params": [a]}, {"params": b, "lr": 0.5, "momentum": 0.9}], lr=0.1)
    assert [g["lr"] for g in opt.param_groups] == [0.1, 0.5]
    assert [g["momentum"] for g in opt.param_groups] == [0.0, 0.9]
    assert opt.param_groups[1]["params"] == [b]  # a single Parameter becomes a list
    for _ in range(2):
        a.grad = mge.tensor([1.0, 2.0])
        b.grad = mge.tensor([[1.0]])
        opt.step().clear_grad()
    np.testing.assert_allclose(a.numpy(), [0.8, 0.6], rtol=1e-6)
    np.testing.assert_allclose(b.numpy(), [[2.0 - 0.5 - 0.5 * 1.9]], rtol=1e-6)


def test_add_param_group():
    a, b = mge.Parameter([1.0]), mge.Parameter([2.0])
    opt = optim.SGD([a], lr=0.1)
    opt.add_param_group({"params": [b], "lr": 1.0})
    assert opt.param_groups[1] == {"params": [b], "lr": 1.0, "momentum": 0.0, "weight_decay": 0.0}
    b.grad = mge.tensor([1.0])
    opt.step()
    np.testing.assert_allclose(b.numpy(), [1.0])
    with pytest.raises(AssertionError, match="more than one parameter group"):
        opt.add_param_group({"params": [a]})
    with pytest.raises(AssertionError, match="param group must be a dict"):
        opt.add_param_group([a])


def test_group_added_later_gets_its_state():
    a, b = mge.Parameter([1.0]), mge.Parameter([2.0])
    opt = optim.Adam([a], lr=0.1)
    opt.add_param_group({"params": b})
    assert set(opt.state_dict()["state"][1]) == {"exp_avg", "exp_avg_sq", "step"}
    b.grad = mge.tensor([1.0])
    opt.step()  # MegEngine: KeyError
    np.testing.assert_allclose(b.numpy(), [1.9], rtol=1e-6)


def test_stateless_state_dict_round_trip():
    p = mge.Parameter([1.0])
    opt = optim.SGD([p], lr=0.1)
    sd = opt.state_dict()
    assert sd["state"] == {}
    opt2 = optim.SGD([mge.Parameter([1.0])], lr=0.5)
    opt2.load_state_dict(sd)  # MegEngine: KeyError
    assert opt2.param_groups[0]["lr"] == 0.1


def test_hyperparameters_changed_between_steps_take_effect():
    p = mge.Parameter([1.0])
    opt = optim.SGD([p], lr=0.1)
    p.grad = mge.tensor([1.0])
    opt.step()
    opt.param_groups[0]["lr"] = np.float64(0.5)
    opt.step()
    np.testing.assert_allclose(p.numpy(), [0.4], rtol=1e-6)


@pytest.mark.parametrize("cls,kw", [(optim.SGD, dict(lr=0.1, momentum=0.9)),
                                    (optim.Adam, dict(lr=0.01)),
                                    (optim.RMSprop, dict(momentum=0.5, centered=True)),
                                    (optim.Adadelta, dict())])
def test_state_dict_round_trip_continues_identically(cls, kw):
    grads = _grads(5)
    a = [mge.Parameter(v.astype("float32")) for v in _params()]
    opt_a = cls(a, **kw)
    for g in grads[:2]:
        for p, x in zip(a, g):
            p.grad = mge.tensor(x.astype("float32"))
        opt_a.step()
    sd = opt_a.state_dict()
    # a fresh optimizer over copies of the parameters, loaded from the state dict
    b = [mge.Parameter(p.numpy()) for p in a]
    opt_b = cls(b, **{**kw, **({"lr": 123.0} if "lr" in kw else {})})
    opt_b.load_state_dict(sd)
    assert opt_b.param_groups[0]["lr"] == opt_a.param_groups[0]["lr"]
    for g in grads[2:]:
        for pa, pb, x in zip(a, b, g):
            pa.grad = mge.tensor(x.astype("float32"))
            pb.grad = mge.tensor(x.astype("float32"))
        opt_a.step()
        opt_b.step()
    for pa, pb in zip(a, b):
        np.testing.assert_array_equal(pa.numpy(), pb.numpy())
    # loading copies: the loaded dict's arrays are not the optimizer's storage
    assert isinstance(sd["state"][0][next(iter(sd["state"][0]))], np.ndarray)


def test_state_dict_layout_and_load_errors():
    a, b = mge.Parameter([1.0]), mge.Parameter([2.0, 3.0])
    opt = optim.Adam([{"params": [a]}, {"params": [b], "lr": 0.5}], lr=0.1)
    sd = opt.state_dict()
    assert sd["param_groups"] == [
        {"lr": 0.1, "weight_decay": 0.0, "betas": (0.9, 0.999), "eps": 1e-08, "params": [0]},
        {"lr": 0.5, "weight_decay": 0.0, "betas": (0.9, 0.999), "eps": 1e-08, "params": [1]},
    ]
    assert set(sd["state"][1]) == {"exp_avg", "exp_avg_sq", "step"}
    assert sd["state"][1]["step"].shape == () and sd["state"][1]["exp_avg"].dtype == np.float32
    with pytest.raises(ValueError, match="different number of parameter groups"):
        optim.Adam([a], lr=0.1).load_state_dict(sd)
    with pytest.raises(ValueError, match="doesn't match the size of optimizer's group"):
        optim.Adam([{"params": [a, b]}, {"params": []}], lr=0.1).load_state_dict(sd)
    with pytest.raises(ValueError, match="doesn't match the keys"):
        optim.SGD([{"params": [a]}, {"params": [b]}], lr=0.1).load_state_dict(sd)
    with pytest.raises(ValueError, match="has shape"):
        optim.Adam([{"params": [b]}, {"params": [a]}], lr=0.1).load_state_dict(sd)


def test_step_is_one_fused_op_per_parameter():
    params = [mge.Parameter(np.ones(s, "float32")) for s in [(8, 4), (4,), (4, 4), (4,), (4, 2), (2,)]]
    opts = [optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=1e-4), optim.Adam(params, lr=0.1),
            optim.AdamW(params, lr=0.1), optim.RMSprop(params), optim.Adagrad(params),
            optim.Adadelta(params)]
    for p in params:
        p.grad = mge.tensor(np.full(p.shape, 0.5, "float32"))
    for opt in opts:
        with ops_run() as seen:
            opt.step()
        updates = [name for name in seen if name != "Assign"]
        assert len(updates) == len(params), (type(opt).__name__, seen)
        # the rest are the in-place assignments of the parameters and their states
        assert len(seen) - len(updates) >= len(params), (type(opt).__name__, seen)

def test_update_op_checks_shapes_and_dtypes():
    p = mge.Parameter([1.0, 2.0])
    opt = optim.SGD([p], lr=0.1)
    p.grad = mge.tensor([1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match=r"SGDUpdate: the gradient's shape \(3,\) does not match "
                                         r"the parameter's shape \(2,\)"):
        opt.step()
    q = mge.Parameter([1, 2], dtype="int32")
    q.grad = mge.tensor([1, 1], dtype="int32")
    with pytest.raises(TypeError, match="AdamUpdate: parameters and gradients must be floating point"):
        optim.Adam([q], lr=0.1).step()


def test_float16_parameters_keep_their_dtype_with_float32_state():
    p = mge.Parameter(np.array([1.0, 2.0], "float16"))
    opt = optim.Adam([p], lr=0.1)
    p.grad = mge.tensor(np.array([1.0, -1.0], "float16"))
    opt.step()
    assert p.dtype == np.float16
    assert opt.state_dict()["state"][0]["exp_avg"].dtype == np.float32
    np.testing.assert_allclose(p.numpy(), [0.9, 2.1], rtol=1e-3)


def test_zero_grad_is_deprecated_and_zeros():
    p = mge.Parameter([1.0, 2.0])
    opt = optim.SGD([p], lr=0.1)
    p.grad = mge.tensor([3.0, 4.0])
    g = p.grad
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        opt.zero_grad()
    assert w and issubclass(w[0].category, DeprecationWarning) and "clear_grad" in str(w[0].message)
    assert p.grad is g and g.numpy().tolist() == [0.0, 0.0]


def test_step_restores_record_computing_path():
    p = mge.Parameter([1.0])
    p.grad = mge.tensor([1.0])
    old = core.get_option("record_computing_path")
    core.set_option("record_computing_path", 1)
    try:
        optim.SGD([p], lr=1.0).step()
        assert core.get_option("record_computing_path") == 1
    finally:
        core.set_option("record_computing_path", old)
    np.testing.assert_allclose(p.numpy(), [0.0])


# -- MegEngine's errors --------------------------------------------------------------------------

P = mge.Parameter([1.0])


@pytest.mark.parametrize("make,exc,msg", [
    (lambda: optim.SGD([P], lr=-1), AssertionError, "Invalid learning rate: -1"),
    (lambda: optim.SGD([P], lr=0.1, momentum=-1), AssertionError, "Invalid momentum value: -1"),
    (lambda: optim.SGD([P], lr=0.1, weight_decay=-1), AssertionError, "Invalid weight_decay value: -1"),
    (lambda: optim.SGD([P], lr=0.1, nesterov=True), AssertionError, "Nesterov momentum requires a momentum"),
    (lambda: optim.Adam([P], lr=-1), ValueError, "Invalid learning rate: -1"),
    (lambda: optim.Adam([P], lr=1, weight_decay=-1), ValueError, "Invalid weight_decay value: -1"),
    (lambda: optim.Adam([P], lr=1, betas=(1.0, 0.9)), ValueError, "Invalid beta parameter at index 0: 1.0"),
    (lambda: optim.AdamW([P], lr=1, betas=(0.9, -0.1)), ValueError, r"Invalid beta parameter at index 1: -0.1"),
    (lambda: optim.Adagrad([P], lr=-1), AssertionError, "Invalid learning rate: -1"),
    (lambda: optim.Adagrad([P], lr_decay=-1), AssertionError, "Invalid learning rate decay: -1"),
    (lambda: optim.Adagrad([P], eps=-1), AssertionError, "Invalid epsilon value: -1"),
    (lambda: optim.Adadelta([P], rho=2), AssertionError, "Invalid rho value: 2"),
    (lambda: optim.RMSprop([P], lr=-1), ValueError, "Invalid learning rate: -1"),
    (lambda: optim.RMSprop([P], alpha=-1), ValueError, "Invalid alpha value: -1"),
    (lambda: optim.RMSprop([P], momentum=-1), ValueError, "Invalid momentum value: -1"),
    (lambda: optim.SGD([], lr=1), ValueError, "optimizer got an empty parameter list"),
    (lambda: optim.SGD(3, lr=1), TypeError, "should be Parameter or dict, or Iterable of them"),
    (lambda: optim.SGD([mge.tensor(1.0)], lr=1), TypeError,
     "optimizer can only optimize Parameters, but one of the params is <class 'mge"),
    (lambda: optim.SGD([P, {"params": [P]}], lr=1), TypeError, "types of params argument"),
    (lambda: optim.SGD([{"params": [P]}, {"params": [P]}], lr=1), AssertionError, "more than one parameter group"),
    (lambda: optim.Optimizer([P], {}), TypeError, "abstract"),
])
def test_errors(make, exc, msg):
    with pytest.raises(exc, match=msg):
        make()


def test_required_hyperparameter():
    class Plain(optim.SGD):
        def __init__(self, params):
            optim.Optimizer.__init__(self, params, dict(lr=optim.optimizer.required, momentum=0.0,
                                                        weight_decay=0.0))
            self.nesterov = False

    with pytest.raises(ValueError, match="didn't specify a value of required optimization parameter lr"):
        Plain([P])
    assert Plain([{"params": [P], "lr": 0.5}]).param_groups[0]["lr"] == 0.5


# -- gradient clipping ---------------------------------------------------------------------------

@pytest.mark.parametrize("ord,max_norm", list(itertools.product([2.0, 1.0, float("inf"), "inf", 3.0], [0.5, 100.0])))
def test_clip_grad_norm(ord, max_norm):
    rng = np.random.default_rng(3)
    grads = [rng.standard_normal(s).astype("float32") for s in [(3, 2), (5,), (1,)]]
    params = [mge.Parameter(np.zeros(g.shape, "float32")) for g in grads]
    params.append(mge.Parameter([9.0]))  # no grad: skipped
    for p, g in zip(params, grads):
        p.grad = mge.tensor(g)
    kept = [p.grad for p in params[:3]]
    total = optim.clip_grad_norm(params, max_norm, ord=ord)
    flat = np.concatenate([g.ravel().astype("float64") for g in grads])
    want = np.linalg.norm(flat, ord=float(ord))
    assert isinstance(total, mge.Tensor) and total.shape == ()
    np.testing.assert_allclose(total.item(), want, rtol=1e-5)
    scale = min(max_norm / (want + 1e-6), 1.0)
    for p, g, k in zip(params, grads, kept):
        assert p.grad is k  # in place
        np.testing.assert_allclose(p.grad.numpy(), g * scale, rtol=1e-5, atol=1e-7)
    assert params[3].grad is None


def test_clip_grad_norm_single_tensor_and_no_grads():
    p = mge.Parameter([0.0, 0.0])
    p.grad = mge.tensor([3.0, 4.0])
    assert optim.clip_grad_norm(p, 1.0).item() == pytest.approx(5.0)
    np.testing.assert_allclose(p.grad.numpy(), [0.6, 0.8], rtol=1e-5)
    out = optim.clip_grad_norm([mge.Parameter(1.0)], 1.0)
    assert isinstance(out, mge.Tensor) and out.item() == 0.0


def test_clip_grad_value():
    a, b, c = mge.Parameter([0.0, 0.0, 0.0]), mge.Parameter([[0.0]]), mge.Parameter([1.0])
    a.grad = mge.tensor([3.0, -4.0, 0.5])
    b.grad = mge.tensor([[-0.2]])
    g = a.grad
    assert optim.clip_grad_value([a, b, c], -1.0, 2.0) is None
    assert a.grad is g
    np.testing.assert_array_equal(a.grad.numpy(), [2.0, -1.0, 0.5])
    np.testing.assert_array_equal(b.grad.numpy(), np.float32([[-0.2]]))
    assert c.grad is None
    optim.clip_grad_value(b, 0.0, 1.0)
    np.testing.assert_array_equal(b.grad.numpy(), [[0.0]])


# -- the docstrings' examples --------------------------------------------------------------------

@pytest.mark.parametrize("name", [
    "mge.optimizer", "mge.optimizer.optimizer", "mge.optimizer.sgd", "mge.optimizer.adam",
    "mge.optimizer.adamw", "mge.optimizer.adagrad", "mge.optimizer.adadelta",
    "mge.optimizer.rmsprop", "mge.optimizer.multi_step_lr", "mge.optimizer.cosine_annealing_lr",
    "mge.optimizer.clip_grad", "mge.serialization", "mge.amp", "mge.amp.autocast",
])
def test_docstring_examples(name):
    import doctest
    import importlib
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
