"""LAMB and LAMBFp16: trajectories of MegEngine 1.13's LAMBUpdate kernel
(tests/data/megengine_rnn_refs.npz), a float64 reference of the algorithm (the trust ratio with
the true parameter norm, as MegEngine's CUDA kernel has it), state, errors, and that a step is
ops that a trace records."""
import pathlib

import numpy as np
import pytest

import mge
import mge.optimizer as optim

REFS = np.load(pathlib.Path(__file__).parent / "data" / "megengine_rnn_refs.npz")
TARGET = np.linspace(-1.0, 1.5, 12, dtype="float32").reshape(3, 4)


def grad_of(p):
    return ((p - TARGET) * (1 + np.abs(TARGET)) + 0.3 * p * p).astype(p.dtype)


def run(cls, p0, steps=6, dtype="float32", **kwargs):
    p = mge.Parameter(p0, dtype=dtype)
    opt = cls([p], **kwargs)
    traj = []
    for _ in range(steps):
        p.grad = mge.tensor(grad_of(p.numpy()), dtype=dtype)
        opt.step().clear_grad()
        traj.append(p.numpy())
    return np.stack(traj), opt, p


def np_lamb(p0, steps, lr, betas=(0.9, 0.999), eps=1e-8, bias_correction=True,
            weight_decay=0.0, always_adapt=False):
    p = p0.astype(np.float64)
    m = np.zeros_like(p)
    v = np.zeros_like(p)
    out = []
    for t in range(1, steps + 1):
        g = grad_of(p.astype(np.float32)).astype(np.float64)
        m = betas[0] * m + (1 - betas[0]) * g
        v = betas[1] * v + (1 - betas[1]) * g * g
        bc1 = 1 - betas[0] ** t if bias_correction else 1
        bc2 = 1 - betas[1] ** t if bias_correction else 1
        r = (m / bc1) / (np.sqrt(v / bc2) + eps) + weight_decay * p
        trust = 1.0
        pn, dn = np.linalg.norm(p), np.linalg.norm(r)
        if (always_adapt or weight_decay > 0) and pn > 0 and dn > 0:
            trust = pn / dn
        p = p - lr * trust * r
        out.append(p)
    return np.stack(out)


@pytest.mark.parametrize("case,cls,kwargs,dtype", [
    ("lamb_default", optim.LAMB, dict(lr=0.01), "float32"),
    ("lamb_no_bias_correction", optim.LAMB,
     dict(lr=0.05, betas=(0.8, 0.99), eps=1e-6, bias_correction=False), "float32"),
    ("lamb_fp16", optim.LAMBFp16, dict(lr=0.01), "float16"),
])
def test_matches_megengine_kernel(case, cls, kwargs, dtype):
    traj, opt, p = run(cls, REFS[f"{case}/p0"], dtype=dtype, **kwargs)
    assert p.dtype == np.dtype(dtype)
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == "float32" else dict(rtol=0, atol=1e-3)
    np.testing.assert_allclose(traj, REFS[f"{case}/traj"], **tol)
    st = opt._state[p]
    assert st["exp_avg"].dtype == np.float32 and st["exp_avg_sq"].dtype == np.float32
    np.testing.assert_allclose(st["exp_avg"].numpy(), REFS[f"{case}/exp_avg"], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(st["exp_avg_sq"].numpy(), REFS[f"{case}/exp_avg_sq"], rtol=1e-4,
                               atol=1e-7)
    assert float(st["step"].numpy()) == 6


@pytest.mark.parametrize("kwargs", [
    dict(lr=0.01, weight_decay=0.1),
    dict(lr=0.02, always_adapt=True),
    dict(lr=0.01, weight_decay=0.05, bias_correction=False, betas=(0.85, 0.995)),
])
def test_trust_ratio_against_float64_reference(kwargs):
    p0 = REFS["lamb_wd/p0"]
    traj, _, _ = run(optim.LAMB, p0, **kwargs)
    np.testing.assert_allclose(traj, np_lamb(p0, 6, **kwargs).astype(np.float32), rtol=1e-5,
                               atol=1e-6)


def test_megengine_cpu_trust_ratio_differs():
    # MegEngine's CPU kernel sums the parameter's squares in an int, so with weight decay its
    # trajectory leaves the algorithm's; mge follows the algorithm (and MegEngine's CUDA kernel).
    p0 = REFS["lamb_wd/p0"]
    exact = np_lamb(p0, 6, lr=0.01, weight_decay=0.1)
    traj, _, _ = run(optim.LAMB, p0, lr=0.01, weight_decay=0.1)
    assert np.abs(traj - exact).max() < 1e-5 < np.abs(REFS["lamb_wd/traj"] - exact).max()


def test_zero_norm_param_and_skipped_grad():
    a = mge.Parameter(np.zeros(3, "float32"))
    b = mge.Parameter(np.ones(3, "float32"))
    opt = optim.LAMB([a, b], lr=0.1, weight_decay=0.1)
    a.grad = mge.tensor(np.array([1.0, -1.0, 2.0], "float32"))
    opt.step()
    # ||a|| == 0: trust ratio 1, the step is lr * adam-like delta
    np.testing.assert_allclose(a.numpy(), [-0.1, 0.1, -0.1], rtol=1e-5)
    np.testing.assert_array_equal(b.numpy(), np.ones(3))  # no grad: untouched
    assert float(opt._state[b]["step"].numpy()) == 0


def test_float64_and_groups():
    w = mge.Parameter(np.array([1.0, -2.0]), dtype="float64")
    u = mge.Parameter(np.array([0.5], "float32"))
    opt = optim.LAMB([{"params": [w], "lr": 0.1}, {"params": [u]}], lr=0.01, weight_decay=0.01)
    w.grad = mge.tensor(np.array([0.3, 0.3]), dtype="float64")
    u.grad = mge.tensor(np.array([1.0], "float32"))
    opt.step()
    assert w.dtype == np.float64 and opt._state[w]["exp_avg"].dtype == np.float64
    r = np.array([1.0, 1.0]) + 0.01 * np.array([1.0, -2.0])
    expected = np.array([1.0, -2.0]) - 0.1 * np.linalg.norm([1.0, -2.0]) / np.linalg.norm(r) * r
    np.testing.assert_allclose(w.numpy(), expected, rtol=1e-6)


def test_errors():
    p = mge.Parameter([1.0])
    with pytest.raises(ValueError, match="Invalid learning rate"):
        optim.LAMB([p], lr=-1)
    with pytest.raises(ValueError, match="Invalid weight_decay"):
        optim.LAMB([p], lr=0.1, weight_decay=-1)
    with pytest.raises(ValueError, match="Invalid beta parameter at index 1"):
        optim.LAMB([p], lr=0.1, betas=(0.9, 1.0))


def test_state_dict_round_trip():
    traj, opt, p = run(optim.LAMB, REFS["lamb_default/p0"], steps=3, lr=0.01)
    sd = opt.state_dict()
    q = mge.Parameter(p.numpy())
    opt2 = optim.LAMB([q], lr=0.01)
    opt2.load_state_dict(sd)
    for x in (p, q):
        x.grad = mge.tensor(grad_of(p.numpy()))
    opt.step()
    opt2.step()
    np.testing.assert_array_equal(p.numpy(), q.numpy())


def test_step_under_trace():
    from mge.jit import trace
    p = mge.Parameter(np.array([1.0, -1.0, 0.5], "float32"))
    opt = optim.LAMB([p], lr=0.1, weight_decay=0.1)

    @trace(symbolic=False)
    def step(g):
        p.grad = g
        opt.step()
        return p

    grads = [np.array([0.2, 0.1, -0.3], "float32"), np.array([0.5, -0.2, 0.1], "float32"),
             np.array([-0.1, 0.4, 0.2], "float32")]
    for g in grads:
        step(mge.tensor(g))
    q = mge.Parameter(np.array([1.0, -1.0, 0.5], "float32"))
    eager = optim.LAMB([q], lr=0.1, weight_decay=0.1)
    for g in grads:
        q.grad = mge.tensor(g)
        eager.step()
    np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=1e-6)
