"""Forward values of the layers against float64 numpy references; batch-norm statistics in
train and eval; dropout in train and eval; layer-specific errors."""
import numpy as np
import pytest

import mge
import mge.module as M
from mge.autodiff import GradManager
from helpers import arr


def _x(shape, seed=0):
    return arr(shape, seed=seed) / 5  # values of about one unit


def _f64(t):
    return np.asarray(t.numpy(), dtype=np.float64)


def _close(t, ref, tol=1e-5):
    np.testing.assert_allclose(t.numpy(), ref, rtol=tol, atol=tol)


# -- float64 references --------------------------------------------------------------------------

def _conv2d_ref(x, w, b, stride, padding, dilation, groups):
    """Direct cross-correlation; ``w`` is (O, I/G, KH, KW)."""
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    oh = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((n, o, oh, ow))
    og = o // groups
    for g in range(groups):
        xs = xp[:, g * cg:(g + 1) * cg]
        for i in range(kh):
            for j in range(kw):
                patch = xs[:, :, i * dh:i * dh + sh * oh:sh, j * dw:j * dw + sw * ow:sw]
                out[:, g * og:(g + 1) * og] += np.einsum(
                    "nchw,oc->nohw", patch, w[g * og:(g + 1) * og, :, i, j])
    return out + b.reshape(1, -1, 1, 1)


def _conv_transpose2d_ref(x, w, b, stride, padding):
    """Scatter form of the transposed convolution; ``w`` is (I, O, KH, KW), one group."""
    n, c, h, wd = x.shape
    _, o, kh, kw = w.shape
    (sh, sw), (ph, pw) = stride, padding
    full = np.zeros((n, o, (h - 1) * sh + kh, (wd - 1) * sw + kw))
    for i in range(kh):
        for j in range(kw):
            full[:, :, i:i + sh * (h - 1) + 1:sh, j:j + sw * (wd - 1) + 1:sw] += np.einsum(
                "nchw,co->nohw", x, w[:, :, i, j])
    out = full[:, :, ph:full.shape[2] - ph, pw:full.shape[3] - pw]
    return out + b.reshape(1, -1, 1, 1)


def _normalize(x, axes, eps):
    mean = x.mean(axis=axes, keepdims=True)
    var = x.var(axis=axes, keepdims=True)
    return (x - mean) / np.sqrt(var + eps)


# -- linear and convolution -----------------------------------------------------------------------

def test_linear_forward_and_shapes():
    m = M.Linear(5, 3)
    assert m.weight.shape == (3, 5) and m.bias.shape == (3,)
    x = _x((2, 4, 5))
    w, b = _f64(m.weight), _f64(m.bias) + 0.5
    m.bias._reset(mge.tensor(b.astype("float32")))
    _close(m(mge.tensor(x)), x.astype(np.float64) @ w.T + b)
    nob = M.Linear(5, 3, bias=False)
    assert nob.bias is None
    _close(nob(mge.tensor(x[0])), x[0].astype(np.float64) @ _f64(nob.weight).T)
    fused = M.LinearRelu(5, 3)
    _close(fused(mge.tensor(x[0])), np.maximum(x[0] @ _f64(fused.weight).T, 0))
    with pytest.raises(ValueError, match="linear"):
        m(mge.tensor(_x((2, 4))))


@pytest.mark.parametrize("kw", [
    dict(),
    dict(stride=2, padding=1),
    dict(stride=(2, 1), padding=(1, 0), dilation=(1, 2), groups=2),
])
def test_conv2d_matches_reference(kw):
    m = M.Conv2d(4, 6, 3, **kw)
    x = _x((2, 4, 7, 8))
    m.bias._reset(mge.tensor(_x((1, 6, 1, 1), seed=1)))
    w = _f64(m.weight)
    if m.groups > 1:
        assert w.shape == (2, 3, 2, 3, 3)
        w = w.reshape(6, 2, 3, 3)
    ref = _conv2d_ref(x.astype(np.float64), w, _f64(m.bias), m.stride, m.padding, m.dilation,
                      m.groups)
    _close(m(mge.tensor(x)), ref)


def test_conv2d_padding_modes_and_fused_relu():
    x = _x((1, 3, 5, 5))
    for mode, np_mode in (("reflect", "reflect"), ("replicate", "edge")):
        m = M.Conv2d(3, 2, 3, padding=1, padding_mode=mode)
        xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)), mode=np_mode)
        ref = _conv2d_ref(xp, _f64(m.weight), _f64(m.bias), (1, 1), (0, 0), (1, 1), 1)
        _close(m(mge.tensor(x)), ref)
    fused = M.ConvRelu2d(3, 2, 3)
    ref = _conv2d_ref(x.astype(np.float64), _f64(fused.weight), _f64(fused.bias), (1, 1), (0, 0),
                      (1, 1), 1)
    _close(fused(mge.tensor(x)), np.maximum(ref, 0))
    with pytest.raises(ValueError, match="padding_mode must be one of"):
        M.Conv2d(3, 2, 3, padding_mode="circular")


@pytest.mark.parametrize("groups", [1, 2])
def test_conv1d_matches_reference(groups):
    m = M.Conv1d(4, 6, 3, stride=2, padding=1, groups=groups)
    assert m.weight.shape == ((6, 4, 3) if groups == 1 else (2, 3, 2, 3))
    assert m.bias.shape == (1, 6, 1)
    x = _x((2, 4, 9))
    w = _f64(m.weight).reshape(6, 4 // groups, 3, 1)
    ref = _conv2d_ref(x[..., None].astype(np.float64), w, _f64(m.bias), (2, 1), (1, 0), (1, 1),
                      groups)[..., 0]
    _close(m(mge.tensor(x)), ref)


def test_conv_transpose2d_matches_reference():
    m = M.ConvTranspose2d(3, 4, 3, stride=2, padding=1)
    assert m.weight.shape == (3, 4, 3, 3) and m.bias.shape == (1, 4, 1, 1)
    m.bias._reset(mge.tensor(_x((1, 4, 1, 1), seed=2)))
    x = _x((2, 3, 4, 5))
    ref = _conv_transpose2d_ref(x.astype(np.float64), _f64(m.weight), _f64(m.bias), (2, 2), (1, 1))
    _close(m(mge.tensor(x)), ref)
    assert M.ConvTranspose2d(4, 6, 3, groups=2).weight.shape == (2, 2, 3, 3, 3)
    fused = M.ConvTransposeRelu2d(3, 4, 3, stride=2, padding=1)
    fused.load_state_dict(m.state_dict())
    _close(fused(mge.tensor(x)), np.maximum(ref, 0))


def test_conv3d_shapes():
    m = M.Conv3d(2, 3, 2, padding=1)
    assert m.weight.shape == (3, 2, 2, 2, 2) and m.bias.shape == (1, 3, 1, 1, 1)
    assert m(mge.tensor(_x((1, 2, 3, 4, 4)))).shape == (1, 3, 4, 5, 5)
    t = M.ConvTranspose3d(2, 3, 2, stride=2)
    assert t.weight.shape == (2, 3, 2, 2, 2)
    assert t(mge.tensor(_x((1, 2, 2, 3, 3)))).shape == (1, 3, 4, 6, 6)


def test_conv_argument_errors():
    with pytest.raises(ValueError, match="in_channels must be divisible by groups"):
        M.Conv2d(3, 4, 3, groups=2)
    with pytest.raises(ValueError, match="out_channels must be divisible by groups"):
        M.Conv2d(4, 3, 3, groups=2)
    with pytest.raises(ValueError, match=r"Conv2d: kernel_size must be >= 1, got \(0, 3\)"):
        M.Conv2d(4, 3, (0, 3))
    with pytest.raises(ValueError, match=r"Conv2d: stride must be an int or 2 ints"):
        M.Conv2d(4, 3, 3, stride=(1, 1, 1))
    assert repr(M.Conv1d(2, 4, 3, stride=2)) == "Conv1d(2, 4, kernel_size=3, stride=2)"
    assert repr(M.Conv2d(2, 4, 3, stride=2, padding=1, groups=2, bias=False)) == \
        "Conv2d(2, 4, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1), groups=2, bias=False)"


# -- batch norm -----------------------------------------------------------------------------------

def test_batchnorm2d_training_updates_running_stats_and_eval_uses_them():
    m = M.BatchNorm2d(3, momentum=0.8)
    m.weight._reset(mge.tensor(_x((1, 3, 1, 1), seed=3)))
    m.bias._reset(mge.tensor(_x((1, 3, 1, 1), seed=4)))
    gamma, beta = _f64(m.weight), _f64(m.bias)
    rmean, rvar = np.zeros((1, 3, 1, 1)), np.ones((1, 3, 1, 1))
    for seed in range(3):
        x = _x((4, 3, 2, 5), seed=10 + seed).astype(np.float64) + seed
        y = m(mge.tensor(x.astype("float32")))
        _close(y, _normalize(x, (0, 2, 3), 1e-5) * gamma + beta)
        n = x.size // 3
        rmean = 0.8 * rmean + 0.2 * x.mean((0, 2, 3), keepdims=True)
        rvar = 0.8 * rvar + 0.2 * x.var((0, 2, 3), keepdims=True) * n / (n - 1)
        _close(m.running_mean, rmean)
        _close(m.running_var, rvar)
    m.eval()
    x = _x((2, 3, 2, 2), seed=20).astype(np.float64)
    _close(m(mge.tensor(x.astype("float32"))), (x - rmean) / np.sqrt(rvar + 1e-5) * gamma + beta)
    _close(m.running_mean, rmean)  # eval does not update


def test_batchnorm1d_2d_and_3d_inputs():
    m = M.BatchNorm1d(3, eps=1e-3)
    x2 = _x((6, 3)).astype(np.float64)
    _close(m(mge.tensor(x2.astype("float32"))), _normalize(x2, (0,), 1e-3))
    x3 = _x((6, 3, 4), seed=1).astype(np.float64)
    _close(m(mge.tensor(x3.astype("float32"))), _normalize(x3, (0, 2), 1e-3))
    assert m.running_mean.shape == (1, 3, 1, 1)
    with pytest.raises(ValueError, match=r"expected 2D or 3D input \(got 4D input\)"):
        m(mge.tensor(_x((2, 3, 2, 2))))
    with pytest.raises(ValueError, match=r"expected 4D input \(got 3D input\)"):
        M.BatchNorm2d(3)(mge.tensor(x3.astype("float32")))
    with pytest.raises(ValueError, match=r"BatchNorm1d: expected 3 channels"):
        m(mge.tensor(_x((6, 4))))


def test_batchnorm_without_running_stats_or_affine():
    x = _x((4, 3, 2, 2)).astype(np.float64)
    m = M.BatchNorm2d(3, track_running_stats=False)
    assert m.running_mean is None and [k for k, _ in m.named_buffers()] == []
    m.eval()  # still the batch statistics
    _close(m(mge.tensor(x.astype("float32"))), _normalize(x, (0, 2, 3), 1e-5))
    na = M.BatchNorm2d(3, affine=False)
    assert na.weight is None and list(na.state_dict()) == ["running_mean", "running_var"]
    _close(na(mge.tensor(x.astype("float32"))), _normalize(x, (0, 2, 3), 1e-5))


def test_batchnorm_freeze_uses_running_stats_in_training():
    m = M.BatchNorm2d(3, freeze=True)
    m.running_mean._reset(mge.tensor(np.array([1, 2, 3], "float32").reshape(1, 3, 1, 1)))
    m.running_var._reset(mge.tensor(np.array([4, 1, 9], "float32").reshape(1, 3, 1, 1)))
    x = _x((2, 3, 2, 2)).astype(np.float64)
    ref = (x - np.array([1, 2, 3]).reshape(1, 3, 1, 1)) / np.sqrt(
        np.array([4, 1, 9]).reshape(1, 3, 1, 1) + 1e-5)
    _close(m(mge.tensor(x.astype("float32"))), ref)
    np.testing.assert_array_equal(m.running_mean.numpy().ravel(), [1, 2, 3])
    frozen1d = M.BatchNorm1d(3, freeze=True)
    assert frozen1d(mge.tensor(_x((5, 3)))).shape == (5, 3)
    with pytest.raises(AssertionError, match="track_running_stats must be initilized to True"):
        M.BatchNorm2d(3, freeze=True, track_running_stats=False)


def test_batchnorm_reset_and_sync_batchnorm():
    m = M.BatchNorm2d(2)
    m(mge.tensor(_x((3, 2, 2, 2)) + 5))
    m.reset_running_stats()
    np.testing.assert_array_equal(m.running_mean.numpy().ravel(), [0, 0])
    np.testing.assert_array_equal(m.running_var.numpy().ravel(), [1, 1])
    s = M.SyncBatchNorm(3)
    x = _x((4, 3, 2)).astype(np.float64)
    _close(s(mge.tensor(x.astype("float32"))), _normalize(x, (0, 2), 1e-5))


# -- other normalisations -------------------------------------------------------------------------

def test_layer_group_instance_general_norm():
    x = _x((2, 4, 3, 3)).astype(np.float64)
    ln = M.LayerNorm((3, 3))
    ln.weight._reset(mge.tensor(_x((3, 3), seed=5)))
    _close(ln(mge.tensor(x.astype("float32"))), _normalize(x, (2, 3), 1e-5) * _f64(ln.weight))
    assert M.LayerNorm(3).normalized_shape == (3,)
    gn = M.GroupNorm(2, 4)
    gn.bias._reset(mge.tensor(np.arange(4, dtype="float32")))
    xg = x.reshape(2, 2, -1)
    ref = _normalize(xg, (2,), 1e-5).reshape(x.shape) + np.arange(4).reshape(1, 4, 1, 1)
    _close(gn(mge.tensor(x.astype("float32"))), ref)
    with pytest.raises(AssertionError, match="num_channels"):
        M.GroupNorm(3, 4)
    inorm = M.InstanceNorm(4, affine=False)
    _close(inorm(mge.tensor(x.astype("float32"))), _normalize(x, (2, 3), 1e-5))
    gen = M.GeneralNorm((2, 3), (0, 2))
    assert gen.weight.shape == (2, 3)
    _close(gen(mge.tensor(x.astype("float32"))), _normalize(x, (0, 2), 1e-5))
    with pytest.raises(AssertionError, match="inp.shape"):
        gen(mge.tensor(_x((2, 4, 4, 3))))
    assert list(gn.state_dict()) == ["bias", "weight"]


def test_local_response_norm():
    x = np.arange(25, dtype=np.float32).reshape(1, 1, 5, 5)
    out = M.LocalResponseNorm(kernel_size=3, k=1.0, alpha=1e-4, beta=0.75)(mge.tensor(x))
    xf = x.astype(np.float64)
    _close(out, xf / (1 + 1e-4 * xf ** 2) ** 0.75)


# -- dropout, embedding, pooling, activations ---------------------------------------------------

def test_dropout_train_and_eval():
    m = M.Dropout(0.25)
    x = np.ones((4000,), "float32")
    y = m(mge.tensor(x)).numpy()
    kept = y != 0
    np.testing.assert_allclose(y[kept], 1 / 0.75, rtol=1e-6)
    assert abs(kept.mean() - 0.75) < 0.03
    m.eval()
    np.testing.assert_array_equal(m(mge.tensor(x)).numpy(), x)
    assert M.Dropout()(mge.tensor(x)).numpy().min() == 1  # drop_prob 0 in training: identity
    assert repr(M.Dropout(0.5)) == "Dropout(drop_prob=0.5)"
    with pytest.raises(ValueError, match=r"Dropout: drop_prob must be in \[0, 1\)"):
        M.Dropout(1.0)


def test_embedding_lookup_and_errors():
    weight = _x((5, 3))
    m = M.Embedding(5, 3, initial_weight=mge.tensor(weight))
    idx = np.array([[0, 4], [2, 2]], "int32")
    np.testing.assert_array_equal(m(mge.tensor(idx)).numpy(), weight[idx])
    assert m.weight.shape == (5, 3) and isinstance(m.weight, mge.Parameter)
    pre = M.Embedding.from_pretrained(mge.tensor(weight))
    assert pre.freeze and pre.num_embeddings == 5
    np.testing.assert_array_equal(pre(mge.tensor(idx)).numpy(), weight[idx])
    with pytest.raises(ValueError, match="Not support padding index now."):
        M.Embedding(5, 3, padding_idx=0)
    with pytest.raises(ValueError, match="Not support weight normalize now."):
        M.Embedding(5, 3, max_norm=1.0)
    with pytest.raises(ValueError, match="The weight shape should match"):
        M.Embedding(4, 3, initial_weight=mge.tensor(weight))
    with pytest.raises(ValueError, match="Embeddings parameter is expected to be 2-dimensional"):
        M.Embedding.from_pretrained(mge.tensor(weight[0]))


def test_pooling_modules():
    x = _x((2, 3, 6, 6)).astype(np.float64)
    mp = M.MaxPool2d(2)
    assert mp.stride == 2
    _close(mp(mge.tensor(x.astype("float32"))), x.reshape(2, 3, 3, 2, 3, 2).max((3, 5)))
    ap = M.AvgPool2d(3)
    _close(ap(mge.tensor(x.astype("float32"))), x.reshape(2, 3, 2, 3, 2, 3).mean((3, 5)))
    aap = M.AdaptiveAvgPool2d((3, 2))
    _close(aap(mge.tensor(x.astype("float32"))), x.reshape(2, 3, 3, 2, 2, 3).mean((3, 5)))
    amp = M.AdaptiveMaxPool2d(2)
    _close(amp(mge.tensor(x.astype("float32"))), x.reshape(2, 3, 2, 3, 2, 3).max((3, 5)))
    padded = M.AvgPool2d(2, 2, padding=1, mode="average")(mge.tensor(np.ones((1, 1, 2, 2), "f4")))
    np.testing.assert_allclose(padded.numpy(), np.full((1, 1, 2, 2), 0.25))
    assert repr(M.MaxPool2d(2)) == "MaxPool2d(kernel_size=2, stride=2, padding=0)"


def test_activation_modules():
    x = _x((3, 4))
    xf = x.astype(np.float64)
    sig = 1 / (1 + np.exp(-xf))
    _close(M.ReLU()(mge.tensor(x)), np.maximum(xf, 0))
    _close(M.Sigmoid()(mge.tensor(x)), sig)
    _close(M.SiLU()(mge.tensor(x)), xf * sig)
    from math import erf
    _close(M.GELU()(mge.tensor(x)), xf * 0.5 * (1 + np.vectorize(erf)(xf / np.sqrt(2))))
    e = np.exp(xf - xf.max(1, keepdims=True))
    _close(M.Softmax()(mge.tensor(x)), e / e.sum(1, keepdims=True))  # axis 1 for 2-D input
    e0 = np.exp(xf - xf.max(0, keepdims=True))
    _close(M.Softmax(0)(mge.tensor(x)), e0 / e0.sum(0, keepdims=True))
    _close(M.LeakyReLU(0.2)(mge.tensor(x)), np.where(xf > 0, xf, 0.2 * xf))
    p = M.PReLU()
    assert p.weight.shape == (1,) and float(p.weight.numpy()[0]) == 0.25
    _close(p(mge.tensor(x)), np.where(xf > 0, xf, 0.25 * xf))
    pc = M.PReLU(3, init=0.1)
    assert pc.weight.shape == (1, 3, 1, 1)
    pc.weight._reset(mge.tensor(np.array([0.1, 0.2, 0.3], "float32").reshape(1, 3, 1, 1)))
    slopes = np.array([0.1, 0.2, 0.3])
    x4 = _x((2, 3, 2, 2)).astype(np.float64)
    _close(pc(mge.tensor(x4.astype("float32"))),
           np.where(x4 > 0, x4, slopes.reshape(1, 3, 1, 1) * x4))
    x2 = _x((5, 3)).astype(np.float64)
    _close(pc(mge.tensor(x2.astype("float32"))), np.where(x2 > 0, x2, slopes * x2))


def test_small_wrapper_modules():
    x = _x((3, 4))
    np.testing.assert_array_equal(M.Identity()(mge.tensor(x)).numpy(), x)
    a, b = _x((2, 2)), _x((2, 2), seed=1)
    np.testing.assert_allclose(M.Elemwise("FUSE_ADD_RELU")(mge.tensor(a), mge.tensor(b)).numpy(),
                               np.maximum(a + b, 0), rtol=1e-6)
    np.testing.assert_array_equal(M.Concat()([mge.tensor(a), mge.tensor(b)], axis=1).numpy(),
                                  np.concatenate([a, b], 1))
    np.testing.assert_array_equal(M.Pad(((1, 1), (0, 2)), mode="replicate")(mge.tensor(a)).numpy(),
                                  np.pad(a, ((1, 1), (0, 2)), mode="edge"))
    assert M.PixelShuffle(2)(mge.tensor(_x((1, 8, 2, 3)))).shape == (1, 2, 4, 6)


# -- gradients -----------------------------------------------------------------------------------

def test_parameters_receive_gradients_of_their_shapes():
    import mge.functional as F
    net = M.Sequential(M.Conv2d(2, 4, 3, padding=1), M.BatchNorm2d(4), M.ReLU(),
                       M.AdaptiveAvgPool2d(1))
    head = M.Linear(4, 3)
    params = list(net.parameters()) + list(head.parameters())
    gm = GradManager().attach(params)
    x = mge.tensor(_x((2, 2, 5, 5)))
    with gm:
        loss = (head(F.flatten(net(x), 1)) ** 2).sum()
        gm.backward(loss)
    for p in params:
        assert p.grad is not None and p.grad.shape == p.shape
    # The linear layer's gradient against its float64 reference.
    feats = _f64(F.flatten(net(x), 1))
    out = feats @ _f64(head.weight).T + _f64(head.bias)
    _close(head.weight.grad, 2 * out.T @ feats, tol=1e-4)
    _close(head.bias.grad, 2 * out.sum(0), tol=1e-4)


def test_elemwise_module_takes_megengine_mode_names():
    rng = np.random.RandomState(0)
    a, b, c = (rng.randn(7).astype("float32") for _ in range(3))
    ta, tb, tc = mge.tensor(a), mge.tensor(b), mge.tensor(c)
    hswish = a * np.clip(a + 3, 0, 6) / 6
    np.testing.assert_allclose(M.Elemwise("h_swish")(ta).numpy(), hswish, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(M.Elemwise("H_SWISH")(ta).numpy(), hswish, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(M.Elemwise("fuse_mul_add3")(ta, tb, tc).numpy(), a * b + c,
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(M.Elemwise("negate")(ta).numpy(), -a)
    np.testing.assert_allclose(M.Elemwise("add")(ta, tb).numpy(), a + b, rtol=1e-6)
    with pytest.raises(ValueError, match="Elemwise: unknown method 'no_such_mode'"):
        M.Elemwise("no_such_mode")(ta)


def _local_conv_ref(x, w, stride, pad, dil):
    g, oh, ow, icg, kh, kw, ocg = w.shape
    n = x.shape[0]
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    out = np.zeros((n, g * ocg, oh, ow))
    for gi in range(g):
        for i in range(oh):
            for j in range(ow):
                patch = xp[:, gi * icg:(gi + 1) * icg,
                           i * stride:i * stride + dil * (kh - 1) + 1:dil,
                           j * stride:j * stride + dil * (kw - 1) + 1:dil]
                out[:, gi * ocg:(gi + 1) * ocg, i, j] = np.einsum(
                    "nckl,cklo->no", patch, w[gi, i, j])
    return out


@pytest.mark.parametrize("groups,stride,padding,dilation", [(1, 1, 0, 1), (2, 2, 1, 1),
                                                            (1, 1, 1, 2)])
def test_local_conv2d_against_numpy_and_its_grad(groups, stride, padding, dilation):
    mge.random.seed(3)
    m = M.LocalConv2d(4, 6, 7, 7, 3, stride=stride, padding=padding, dilation=dilation,
                      groups=groups)
    oh = (7 + 2 * padding - 3) // stride + 1
    assert m.weight.shape == (groups, oh, oh, 4 // groups, 3, 3, 6 // groups) and m.bias is None
    if dilation > 1:  # the weight's size ignores dilation: fewer real positions is an error
        with pytest.raises(ValueError, match="LocalConv2d: a 9x9"):
            m(mge.tensor(np.zeros((1, 4, 7, 7), "float32")))
        return
    x = np.random.RandomState(0).randn(2, 4, 7, 7).astype("float32")
    ref = _local_conv_ref(x.astype(np.float64), m.weight.numpy().astype(np.float64), stride,
                          padding, dilation)
    tx = mge.tensor(x)
    gm = GradManager().attach([m.weight, tx])
    with gm:
        y = m(tx)
        gm.backward((y * y).sum())
    np.testing.assert_allclose(y.numpy(), ref, rtol=1e-4, atol=1e-5)
    # d(sum y^2)/dW = sum over n of 2*y * patch: check one kernel entry by finite difference
    w = m.weight.numpy().astype(np.float64)
    idx = (0, 1, 1, 0, 2, 1, 0)
    eps = 1e-3
    w2 = w.copy()
    w2[idx] += eps
    num = ((_local_conv_ref(x, w2, stride, padding, dilation) ** 2).sum()
           - (ref ** 2).sum()) / eps
    np.testing.assert_allclose(m.weight.grad.numpy()[idx], num, rtol=2e-2)
    assert tx.grad.shape == x.shape
    with pytest.raises(ValueError, match="conv_mode must be 'cross_correlation'"):
        M.LocalConv2d(4, 6, 7, 7, 3, conv_mode="convolution")


def test_batch_matmul_activation_and_quant_stubs():
    mge.random.seed(0)
    m = M.BatchMatMulActivation(2, 3, 4, nonlinear_mode="relu")
    assert m.weight.shape == (2, 4, 3) and m.bias.shape == (4,)
    m.bias._reset(mge.tensor(np.arange(4, dtype="float32")))
    x = np.random.RandomState(1).randn(2, 3, 4).astype("float32")
    ref = np.maximum(np.matmul(m.weight.numpy(), x) + np.arange(4), 0)
    np.testing.assert_allclose(m(mge.tensor(x)).numpy(), ref, rtol=1e-5, atol=1e-6)
    plain = M.BatchMatMulActivation(2, 3, 4, bias=False)
    np.testing.assert_allclose(plain(mge.tensor(x)).numpy(), np.matmul(plain.weight.numpy(), x),
                               rtol=1e-5, atol=1e-6)
    assert "batch=2, in_features=3, out_features=4, bias=True" in repr(m)
    with pytest.raises(ValueError, match="nonlinear_mode must be one of"):
        M.BatchMatMulActivation(2, 3, 4, nonlinear_mode="tanh")
    t = mge.tensor([1.0])
    assert M.QuantStub()(t) is t and M.DequantStub()(t) is t
