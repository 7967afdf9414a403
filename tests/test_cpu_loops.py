"""The CPU device's C loops (``mge/_core/device/cpu/loops.py``) against numpy and float64.

Compiled, each loop gives numpy's bits (``bias_act``) or float64 references within float
rounding (the cross entropy); it declines (``None``/``False``) what it does not take, and the
kernels then use numpy.  In the pure-Python twin every loop declines.
"""
import numpy as np
import pytest

from mge._core import _accel

loops = _accel.load("mge._core.device.cpu.loops")
COMPILED = _accel.MODES.get("mge._core.device.cpu.loops") == "compiled"


def _logits(rows, cls, dtype, seed=0):
    return (np.random.default_rng(seed).standard_normal((rows, cls)) * 4).astype(dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("relu", [False, True])
def test_bias_act_gives_numpys_bits(dtype, relu):
    x = _logits(7, 9, dtype)
    x[0, :4] = [np.nan, -0.0, 0.0, np.inf]
    b = _logits(1, 9, dtype, seed=1)[0]
    b[:4] = [1.0, -0.0, -0.0, -np.inf]
    with np.errstate(invalid="ignore"):  # (inf + -inf)
        want = np.add(x, b)
    if relu:
        want = np.maximum(want, 0)
    out = np.empty_like(x)
    if not COMPILED:  # the twin declines: the kernel's numpy path is the one tested
        assert not loops.bias_act(out, x, b, relu)
        return
    assert loops.bias_act(out, x, b, relu)
    np.testing.assert_array_equal(out.view(f"u{out.itemsize}"), want.view(f"u{want.itemsize}"))
    assert loops.bias_act(x, x, b, relu)  # in place
    np.testing.assert_array_equal(x.view(f"u{x.itemsize}"), want.view(f"u{want.itemsize}"))


def test_bias_act_declines_what_it_does_not_take():
    x = _logits(4, 6, "float32")
    b = np.zeros(6, "float32")
    out = np.zeros_like(x)
    assert not loops.bias_act(out, x.T.copy().T, b, True)         # not C-contiguous
    assert not loops.bias_act(out, x, b.astype("float64"), True)   # another dtype
    assert not loops.bias_act(out, x, np.zeros(5, "float32"), True)  # another width
    assert not loops.bias_act(out.astype("float16"), x.astype("float16"), b.astype("float16"),
                              True)
    ro = np.empty_like(x)
    ro.flags.writeable = False
    assert not loops.bias_act(ro, x, b, False)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", [(64, 512), (7, 3), (1, 5), (33, 2)])
def test_colsum_sgd_gives_eagers_bits(dtype, shape):
    # eager: the bias gradient np.add.reduce(g, axis=0), then param + (a * grad) in the dtype
    g = _logits(*shape, dtype, seed=6)
    param = _logits(1, shape[1], dtype, seed=7)[0]
    a = -0.013
    want = np.add(param, np.multiply(np.add.reduce(g, axis=0), a, dtype=np.dtype(dtype)))
    out = np.empty_like(param)
    done = loops.colsum_sgd(out, param, g, a)
    assert done == COMPILED
    if done:
        np.testing.assert_array_equal(out.view(f"u{out.itemsize}"), want.view(f"u{want.itemsize}"))


def test_colsum_sgd_declines_what_it_does_not_take():
    g = _logits(4, 6, "float32")
    p = np.zeros(6, "float32")
    out = np.zeros(6, "float32")
    assert not loops.colsum_sgd(out, p, g[:, :1].copy(), 0.1)          # one column
    assert not loops.colsum_sgd(out, p, g.T.copy().T, 0.1)             # not C-contiguous
    assert not loops.colsum_sgd(out, p.astype("float64"), g, 0.1)      # another dtype
    assert not loops.colsum_sgd(out, np.zeros(5, "float32"), g, 0.1)   # another width


def _nll64(x, label):
    x = x.astype(np.float64)
    m = x.max(1, keepdims=True)
    lse = np.log(np.exp(x - m).sum(1)) + m[:, 0]
    return lse - x[np.arange(len(x)), label]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("label_dtype", ["int32", "int64"])
def test_cross_entropy_and_its_gradient_against_float64(dtype, label_dtype):
    x = _logits(33, 11, dtype)
    x[0] = [1000.0] + [-1000.0] * 10  # large logits: max-shifted, no overflow
    label = np.random.default_rng(2).integers(0, 11, 33).astype(label_dtype)
    tol = dict(rtol=1e-6, atol=1e-6) if dtype == "float32" else dict(rtol=1e-12, atol=1e-12)
    nll = loops.cross_entropy(x, label)
    if not COMPILED:
        assert nll is None
        return
    assert nll.dtype == np.dtype(dtype)
    np.testing.assert_allclose(nll, _nll64(x, label), **tol)
    dy = np.random.default_rng(3).standard_normal(33).astype(dtype)
    x64 = x.astype(np.float64)
    p = np.exp(x64 - x64.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    p[np.arange(33), label] -= 1
    dx = loops.cross_entropy_backward(x, label, dy[::1])
    np.testing.assert_allclose(dx, p * dy[:, None], **tol)
    dy_view = np.broadcast_to(dy[:1], (33,))  # a mean's gradient: one value for every row
    np.testing.assert_allclose(loops.cross_entropy_backward(x, label, dy_view),
                               p * dy[0], **tol)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_cross_entropy_reduced_in_the_loop(dtype):
    # "sum"/"mean": the loss summed in double, and the gradient of a reduced loss's scalar dy
    # (divided by the rows for a mean, rounded to the dtype first as numpy's dy / count is)
    x = _logits(20, 6, dtype, seed=4)
    label = np.random.default_rng(5).integers(0, 6, 20).astype("int32")
    dy = np.asarray(0.7, dtype)
    nll = _nll64(x, label)
    x64 = x.astype(np.float64)
    p = np.exp(x64 - x64.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    p[np.arange(20), label] -= 1
    tol = dict(rtol=1e-6, atol=1e-6) if dtype == "float32" else dict(rtol=1e-12, atol=1e-12)
    for reduction, total, share in (("sum", nll.sum(), float(dy)),
                                    ("mean", nll.mean(), float(dy / dy.dtype.type(20)))):
        got = loops.cross_entropy(x, label, reduction)
        grad = loops.cross_entropy_backward(x, label, dy, reduction)
        if not COMPILED:
            assert got is None and grad is None
            continue
        assert got.shape == () and got.dtype == np.dtype(dtype)
        np.testing.assert_allclose(got, total, **tol)
        np.testing.assert_allclose(grad, p * share, **tol)
    assert loops.cross_entropy(x, label, "avg") is None
    assert loops.cross_entropy_backward(x, label, np.ones(20, dtype), "mean") is None  # not 0-d


def test_cross_entropy_declines_bad_labels_and_layouts():
    x = _logits(4, 3, "float32")
    assert loops.cross_entropy(x, np.array([0, 1, 3, 0], "int32")) is None   # out of range
    assert loops.cross_entropy(x, np.array([0, -1, 2, 0], "int32")) is None  # negative
    assert loops.cross_entropy(x.astype("float16"), np.zeros(4, "int32")) is None
    assert loops.cross_entropy(x, np.zeros(4, "uint8")) is None
    assert loops.cross_entropy_backward(x, np.zeros(4, "int32"), np.ones(4, "float64")) is None
    assert loops.cross_entropy_backward(x, np.array([0, 0, 9, 0], "int32"),
                                        np.ones(4, "float32")) is None


def test_the_pure_twin_declines_everything_and_the_compiled_one_takes_the_common_case():
    x = _logits(4, 3, "float32")
    got = loops.cross_entropy(x, np.zeros(4, "int32"))
    assert (got is not None) == COMPILED
    assert loops.bias_act(np.empty_like(x), x, np.zeros(3, "float32"), True) == COMPILED
