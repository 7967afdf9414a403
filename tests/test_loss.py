"""mge.functional.loss against float64 numpy references."""
import inspect

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import mge
import mge.functional as F


def T(x, dtype=None):
    return mge.tensor(np.asarray(x), dtype=dtype)


def _reduce(x, reduction):
    return {"mean": np.mean, "sum": np.sum, "none": lambda a: a}[reduction](x)


def _log_softmax(x, axis):
    x = x.astype(np.float64)
    z = x - x.max(axis, keepdims=True)
    return z - np.log(np.exp(z).sum(axis, keepdims=True))


def test_signatures_match_megengine():
    sig = lambda f: str(inspect.signature(f))  # noqa: E731
    assert sig(F.loss.cross_entropy) == ("(pred, label, axis=1, with_logits=True, label_smooth=0, "
                                         "reduction='mean')")
    assert sig(F.loss.binary_cross_entropy) == "(pred, label, with_logits=True, reduction='mean')"
    assert sig(F.loss.l1_loss) == "(pred, label, reduction='mean')"
    assert sig(F.loss.hinge_loss) == "(pred, label, norm='L1', reduction='mean')"
    assert F.loss.__all__ == ["l1_loss", "square_loss", "cross_entropy", "binary_cross_entropy",
                              "hinge_loss", "ctc_loss"]


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("ls", [0, 0.1, 0.5])
def test_cross_entropy_with_logits(reduction, ls):
    rng = np.random.default_rng(0)
    pred = rng.standard_normal((6, 5)).astype("float32") * 4
    label = rng.integers(0, 5, 6).astype("int32")
    y = F.nn.cross_entropy(T(pred), T(label), label_smooth=ls, reduction=reduction)
    logp = _log_softmax(pred, 1)
    nll = -logp[np.arange(6), label]
    ref = (1 - ls) * nll - ls * logp.mean(1)
    assert y.shape == (() if reduction != "none" else (6,))
    np.testing.assert_allclose(y.numpy(), _reduce(ref, reduction), rtol=1e-5, atol=1e-6)


def test_cross_entropy_axis_probabilities_and_stability():
    rng = np.random.default_rng(1)
    pred = rng.standard_normal((2, 3, 4)).astype("float32")
    label = rng.integers(0, 4, (2, 3)).astype("int32")
    y = F.loss.cross_entropy(T(pred), T(label), axis=2, reduction="none")
    logp = _log_softmax(pred, 2)
    np.testing.assert_allclose(y.numpy(), -np.take_along_axis(logp, label[..., None], 2)[..., 0],
                               rtol=1e-5)
    prob = np.exp(_log_softmax(pred[:, 0], 1)).astype("float32")
    lab = label[:, 0]
    y = F.loss.cross_entropy(T(prob), T(lab), with_logits=False, label_smooth=0.2)
    ref = (0.8 * -np.log(prob[np.arange(2), lab]) - 0.2 * np.log(prob).mean(1)).mean()
    np.testing.assert_allclose(y.numpy(), ref, rtol=1e-5)
    big = np.array([[1000.0, -1000.0, 0.0]], "float32")
    np.testing.assert_allclose(F.loss.cross_entropy(T(big), T([1])).numpy(), 2000.0, rtol=1e-6)
    assert F.nn.cross_entropy(T([[1.0, 2.0, 3.0]]), T([2])).item() == pytest.approx(0.40760596)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_cross_entropy_gradient_is_softmax_minus_one_hot(dtype):
    # The one op of the common case and its gradient, against float64 references (float16
    # is computed in float32 and rounded, as the softmax family is).
    from mge.autodiff import GradManager
    rng = np.random.default_rng(3)
    pred = (rng.standard_normal((5, 7)) * 3).astype(dtype)
    label = rng.integers(0, 7, 5).astype("int32")
    x = mge.Parameter(pred, dtype=dtype)
    gm = GradManager().attach([x])
    with gm:
        per_sample = F.nn.cross_entropy(x, T(label), reduction="none")
        loss = per_sample.mean()
        gm.backward(loss)
    p = np.exp(_log_softmax(pred, 1))
    p[np.arange(5), label] -= 1
    tol = dict(rtol=2e-3, atol=2e-3) if dtype == "float16" else dict(rtol=1e-5, atol=1e-7)
    assert per_sample.dtype == np.dtype(dtype) and x.grad.dtype == np.dtype(dtype)
    np.testing.assert_allclose(loss.numpy(), -_log_softmax(pred, 1)[np.arange(5), label].mean(),
                               **tol)
    np.testing.assert_allclose(x.grad.numpy(), p / 5, **tol)


def test_cross_entropy_labels_out_of_range():
    with pytest.raises(IndexError, match=r"SoftmaxCrossEntropy: label out of range \[0, 3\)"):
        F.nn.cross_entropy(T(np.zeros((2, 3), "float32")), T([0, 3])).numpy()
    with pytest.raises(IndexError, match=r"label out of range \[0, 3\)"):
        F.nn.cross_entropy(T(np.zeros((2, 3), "float32")), T([-1, 0])).numpy()
    assert F.nn.cross_entropy(T(np.zeros((2, 3), "float32")), T([0, 2])).numpy() == \
        pytest.approx(np.log(3))  # (the runtime goes on)


def test_cross_entropy_errors():
    with pytest.raises(ValueError, match=r"cross_entropy: label must have one dim less"):
        F.loss.cross_entropy(T(np.zeros((2, 3), "float32")), T(np.zeros((2, 3), "int32")))
    with pytest.raises(ValueError, match="cross_entropy: 'avg' is not a valid value for reduction"):
        F.loss.cross_entropy(T(np.zeros((2, 3), "float32")), T([0, 1]), reduction="avg")
    with pytest.raises(TypeError, match="SoftmaxCrossEntropy: label must be an integer"):
        F.loss.cross_entropy(T(np.zeros((2, 3), "float32")), T([0.0, 1.0]))


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 6), c=st.integers(1, 6), ls=st.sampled_from([0, 0.1]),
       dtype=st.sampled_from(["float32", "float64"]))
def test_cross_entropy_hypothesis(n, c, ls, dtype):
    rng = np.random.default_rng(n * 7 + c)
    pred = (rng.standard_normal((n, c)) * 10).astype(dtype)
    label = rng.integers(0, c, n).astype("int32")
    y = F.loss.cross_entropy(T(pred, dtype), T(label), label_smooth=ls)
    logp = _log_softmax(pred, 1)
    ref = ((1 - ls) * -logp[np.arange(n), label] - ls * logp.mean(1)).mean()
    assert y.dtype == np.dtype(dtype)
    np.testing.assert_allclose(y.numpy(), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_binary_cross_entropy(reduction):
    rng = np.random.default_rng(2)
    logits = (rng.standard_normal((4, 3)) * 5).astype("float32")
    label = rng.integers(0, 2, (4, 3)).astype("float32")
    y = F.loss.binary_cross_entropy(T(logits), T(label), reduction=reduction)
    x = logits.astype(np.float64)
    ref = label * np.logaddexp(0, -x) + (1 - label) * np.logaddexp(0, x)
    np.testing.assert_allclose(y.numpy(), _reduce(ref, reduction), rtol=1e-5, atol=1e-6)
    p = 1 / (1 + np.exp(-x))
    p = np.clip(p, 1e-6, 1 - 1e-6).astype("float32")
    y = F.loss.binary_cross_entropy(T(p), T(label), with_logits=False, reduction=reduction)
    pd = p.astype(np.float64)
    ref = -(label * np.log(pd) + (1 - label) * np.log(1 - pd))
    np.testing.assert_allclose(y.numpy(), _reduce(ref, reduction), rtol=1e-4, atol=1e-5)
    huge = F.loss.binary_cross_entropy(T([100.0, -100.0]), T([0.0, 1.0]), reduction="none")
    np.testing.assert_allclose(huge.numpy(), [100.0, 100.0], rtol=1e-6)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_l1_and_square_loss(reduction):
    rng = np.random.default_rng(3)
    a = rng.standard_normal((3, 4)).astype("float32")
    b = rng.standard_normal((4,)).astype("float32")  # broadcasts
    d = a.astype(np.float64) - b
    np.testing.assert_allclose(F.loss.l1_loss(T(a), T(b), reduction=reduction).numpy(),
                               _reduce(np.abs(d), reduction), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(F.loss.square_loss(T(a), T(b), reduction=reduction).numpy(),
                               _reduce(d * d, reduction), rtol=1e-5, atol=1e-6)
    assert F.nn.l1_loss is F.loss.l1_loss and F.nn.square_loss is F.loss.square_loss


@pytest.mark.parametrize("norm", ["L1", "L2"])
def test_hinge_loss(norm):
    pred = np.array([[0.5, -1.0], [2.0, 0.0]], "float32")
    label = np.array([[1.0, -1.0], [-1.0, 1.0]], "float32")
    per = np.maximum(1 - pred * label, 0)
    per = per if norm == "L1" else per ** 2
    y = F.loss.hinge_loss(T(pred), T(label), norm=norm, reduction="none")
    np.testing.assert_allclose(y.numpy(), per.sum(1))
    assert F.loss.hinge_loss(T(pred), T(label)).item() == pytest.approx(2.25)  # MegEngine's value
    with pytest.raises(ValueError, match="hinge_loss: norm must be"):
        F.loss.hinge_loss(T(pred), T(label), norm="L3")


def test_ctc_loss_names_a_pred_of_the_wrong_rank():
    message = r"ctc_loss: pred must be 3-D \(T, N, C\), got shape \(2, 3\)"
    with pytest.raises(ValueError, match=message):
        F.loss.ctc_loss(mge.tensor(np.ones((2, 3), "float32")), [2, 2], [[1], [1]], [1, 1])


def test_cross_entropy_takes_numpy_int64_labels():
    data = mge.tensor([[0, 50], [0, -150]], dtype="float32")
    np.testing.assert_allclose(F.nn.cross_entropy(data, np.array([1, 0])).numpy(), 0.0)
    np.testing.assert_allclose(F.nn.cross_entropy(data, np.array([0, 1])).numpy(), 100.0)
