"""Convolution and pooling against float64 numpy references (loops over kernel positions)."""
import gc
import itertools
import sys

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import mge
import mge.functional as F
from mge._core.device.cpu import KERNELS
from mge._core.ops import (
    ConvolutionBackwardData, ConvolutionBackwardFilter, Convolution, Pooling,
)


def ref_conv(x, w, stride, padding, dilation, groups):
    """N-d grouped cross-correlation in float64; loops over groups and kernel positions only."""
    nd = x.ndim - 2
    if w.ndim == nd + 3:
        w = w.reshape((-1,) + w.shape[2:])
    x = x.astype(np.float64)
    w = w.astype(np.float64)
    k = w.shape[2:]
    xp = np.pad(x, ((0, 0), (0, 0)) + tuple((p, p) for p in padding))
    out = [(x.shape[2 + i] + 2 * padding[i] - dilation[i] * (k[i] - 1) - 1) // stride[i] + 1
           for i in range(nd)]
    o = w.shape[0]
    ig, og = x.shape[1] // groups, o // groups
    y = np.zeros((x.shape[0], o) + tuple(out))
    for g in range(groups):
        for pos in itertools.product(*(range(kk) for kk in k)):
            sl = tuple(slice(pos[i] * dilation[i], pos[i] * dilation[i] + stride[i] * (out[i] - 1) + 1,
                             stride[i]) for i in range(nd))
            patch = xp[(slice(None), slice(g * ig, (g + 1) * ig)) + sl]
            wk = w[(slice(g * og, (g + 1) * og), slice(None)) + pos]
            y[:, g * og:(g + 1) * og] += np.einsum("nc...,oc->no...", patch, wk)
    return y


def ref_conv_transpose(x, w, stride, padding, output_padding, dilation, groups):
    """Transposed conv in float64 by scattering every input pixel's kernel (loops over kernel)."""
    nd = x.ndim - 2
    if w.ndim == nd + 3:
        g_, a, b = w.shape[:3]
    else:
        g_, a, b = 1, w.shape[0], w.shape[1]
    w = w.reshape((g_, a, b) + w.shape[-nd:]).astype(np.float64)
    k = w.shape[3:]
    ins = x.shape[2:]
    full = [(ins[i] - 1) * stride[i] + dilation[i] * (k[i] - 1) + 1 + output_padding[i]
            for i in range(nd)]
    y = np.zeros((x.shape[0], g_ * b) + tuple(full))
    for g in range(groups):
        xg = x[:, g * a:(g + 1) * a].astype(np.float64)
        for pos in itertools.product(*(range(kk) for kk in k)):
            sl = tuple(slice(pos[i] * dilation[i], pos[i] * dilation[i] + stride[i] * (ins[i] - 1) + 1,
                             stride[i]) for i in range(nd))
            y[(slice(None), slice(g * b, (g + 1) * b)) + sl] += np.einsum(
                "na...,ab->nb...", xg, w[(g, slice(None), slice(None)) + pos])
    crop = tuple(slice(padding[i], full[i] - padding[i]) for i in range(nd))
    return y[(slice(None), slice(None)) + crop]


def _rand(rng, shape, dtype="float32"):
    return rng.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("stride,padding,dilation,groups", [
    (1, 0, 1, 1), (2, 1, 1, 1), ((2, 1), (0, 2), (1, 2), 1), (1, 1, 1, 2), ((1, 3), 2, 2, 4),
])
def test_conv2d_matches_reference(stride, padding, dilation, groups):
    rng = np.random.default_rng(1)
    x = _rand(rng, (2, 8, 9, 10))
    og = 6 // groups if 6 % groups == 0 else 2
    if groups == 1:
        w = _rand(rng, (6, 8, 3, 3))
    else:
        w = _rand(rng, (groups, og, 8 // groups, 3, 2))
    b = _rand(rng, (1, w.shape[0] * (w.shape[1] if groups > 1 else 1), 1, 1))
    pair = lambda v: (v, v) if isinstance(v, int) else v  # noqa: E731
    y = F.conv2d(mge.tensor(x), mge.tensor(w), mge.tensor(b), stride, padding, dilation, groups)
    ref = ref_conv(x, w, pair(stride), pair(padding), pair(dilation), groups) + b
    assert y.dtype == np.float32
    np.testing.assert_allclose(y.numpy(), ref, rtol=1e-5, atol=1e-4)


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 2), groups=st.sampled_from([1, 2, 3]), h=st.integers(3, 9),
       w=st.integers(3, 9), k=st.integers(1, 3), s=st.integers(1, 3), p=st.integers(0, 2),
       d=st.integers(1, 2))
def test_conv2d_hypothesis(n, groups, h, w, k, s, p, d):
    if h + 2 * p < d * (k - 1) + 1 or w + 2 * p < d * (k - 1) + 1:
        return
    rng = np.random.default_rng(0)
    x = _rand(rng, (n, 2 * groups, h, w))
    wt = _rand(rng, (groups, 2, 2, k, k)) if groups > 1 else _rand(rng, (3, 2, k, k))
    y = F.conv2d(mge.tensor(x), mge.tensor(wt), None, s, p, d, groups).numpy()
    np.testing.assert_allclose(y, ref_conv(x, wt, (s, s), (p, p), (d, d), groups), rtol=1e-5,
                               atol=1e-4)


def test_conv1d_and_conv3d():
    rng = np.random.default_rng(2)
    x = _rand(rng, (2, 4, 11))
    w = _rand(rng, (5, 4, 3))
    y = F.conv1d(mge.tensor(x), mge.tensor(w), mge.tensor(np.ones(5, "float32")), 2, 1, 2)
    np.testing.assert_allclose(y.numpy(), ref_conv(x, w, (2,), (1,), (2,), 1) + 1, rtol=1e-5,
                               atol=1e-4)
    x3 = _rand(rng, (1, 2, 5, 6, 4))
    w3 = _rand(rng, (3, 2, 2, 3, 2))
    y3 = F.conv3d(mge.tensor(x3), mge.tensor(w3), None, (1, 2, 1), 1, 1)
    np.testing.assert_allclose(y3.numpy(), ref_conv(x3, w3, (1, 2, 1), (1, 1, 1), (1, 1, 1), 1),
                               rtol=1e-5, atol=1e-4)


def test_conv2d_float64_and_float16():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 3, 6, 6))
    w = rng.standard_normal((4, 3, 3, 3))
    y = F.conv2d(mge.tensor(x, dtype="float64"), mge.tensor(w, dtype="float64"), padding=1)
    assert y.dtype == np.float64
    np.testing.assert_allclose(y.numpy(), ref_conv(x, w, (1, 1), (1, 1), (1, 1), 1), rtol=1e-10)
    y16 = F.conv2d(mge.tensor(x, dtype="float16"), mge.tensor(w, dtype="float16"))
    assert y16.dtype == np.float16
    ref = ref_conv(x.astype("float16"), w.astype("float16"), (1, 1), (0, 0), (1, 1), 1)
    np.testing.assert_allclose(y16.numpy(), ref, rtol=1e-2, atol=2e-2)


def test_conv2d_errors():
    x = mge.tensor(np.zeros((2, 4, 5, 5), "float32"))
    with pytest.raises(ValueError, match=r"Convolution.*4 channels.*\(2, 4, 5, 5\).*\(6, 3, 3, 3\)"):
        F.conv2d(x, mge.tensor(np.zeros((6, 3, 3, 3), "float32")))
    with pytest.raises(ValueError, match=r"Convolution: weight must be 5-D"):
        F.conv2d(x, mge.tensor(np.zeros((6, 2, 3, 3), "float32")), groups=2)
    with pytest.raises(ValueError, match=r"Convolution: kernel .* larger"):
        F.conv2d(x, mge.tensor(np.zeros((6, 4, 7, 7), "float32")))
    with pytest.raises(ValueError, match=r"Convolution: input must be 4-D"):
        F.conv2d(mge.tensor(np.zeros((4, 5), "float32")), mge.tensor(np.zeros((6, 4, 3, 3), "float32")))
    with pytest.raises(TypeError, match=r"Convolution: inputs must be floating point"):
        F.conv2d(mge.tensor(np.zeros((1, 1, 3, 3), "int32")), mge.tensor(np.zeros((1, 1, 1, 1), "int32")))
    with pytest.raises(ValueError, match="conv_mode"):
        F.conv2d(x, mge.tensor(np.zeros((6, 4, 3, 3), "float32")), conv_mode="convolution")
    with pytest.raises(ValueError, match=r"conv2d: expected an int or a tuple of 2"):
        F.conv2d(x, mge.tensor(np.zeros((6, 4, 3, 3), "float32")), stride=(1, 1, 1))


@pytest.mark.parametrize("stride,padding,output_padding,dilation,groups", [
    (1, 0, 0, 1, 1), (2, 1, 1, 1, 1), ((2, 3), (1, 0), (1, 2), 1, 2), (2, 1, 0, 2, 1),
])
def test_conv_transpose2d(stride, padding, output_padding, dilation, groups):
    rng = np.random.default_rng(4)
    x = _rand(rng, (2, 4, 5, 6))
    w = _rand(rng, (4, 3, 3, 2)) if groups == 1 else _rand(rng, (groups, 4 // groups, 3, 3, 2))
    pair = lambda v: (v, v) if isinstance(v, int) else v  # noqa: E731
    y = F.conv_transpose2d(mge.tensor(x), mge.tensor(w), None, stride, padding, output_padding,
                           dilation, groups)
    ref = ref_conv_transpose(x, w, pair(stride), pair(padding), pair(output_padding),
                             pair(dilation), groups)
    assert y.shape == ref.shape
    np.testing.assert_allclose(y.numpy(), ref, rtol=1e-5, atol=1e-4)


def test_conv_transpose_is_adjoint_of_conv():
    # <conv(x, w), dy> == <x, conv_transpose(dy, w)> == <w, dW(x, dy)>: the backward ops agree.
    rng = np.random.default_rng(5)
    k = KERNELS
    for xs, ws, s, p, d, g in [((2, 4, 7, 8), (2, 3, 2, 3, 2), (2, 1), (1, 2), (2, 1), 2),
                               ((1, 2, 5, 4, 6), (3, 2, 1, 2, 2), (2, 1, 1), (1, 0, 1), (1, 1, 2), 1)]:
        x, w = rng.standard_normal(xs), rng.standard_normal(ws)
        y = k[Convolution](Convolution(s, p, d, g), x, w)[0]
        dy = rng.standard_normal(y.shape)
        op_pad = tuple((xs[2 + i] + 2 * p[i] - d[i] * (ws[-len(s) + i] - 1) - 1) % s[i]
                       for i in range(len(s)))
        dx = k[ConvolutionBackwardData](ConvolutionBackwardData(s, p, d, g, op_pad), w, dy)[0]
        dw = k[ConvolutionBackwardFilter](ConvolutionBackwardFilter(s, p, d, g), x, dy, w)[0]
        assert dx.shape == x.shape and dw.shape == w.shape
        np.testing.assert_allclose((x * dx).sum(), (y * dy).sum(), rtol=1e-10)
        np.testing.assert_allclose((w * dw).sum(), (y * dy).sum(), rtol=1e-10)


def test_conv_transpose2d_errors():
    x = mge.tensor(np.zeros((1, 4, 3, 3), "float32"))
    with pytest.raises(ValueError, match=r"ConvolutionBackwardData.*4 channels.*weight expects 3"):
        F.conv_transpose2d(x, mge.tensor(np.zeros((3, 2, 3, 3), "float32")))
    with pytest.raises(ValueError, match=r"output_padding .* must be smaller"):
        F.conv_transpose2d(x, mge.tensor(np.zeros((4, 2, 3, 3), "float32")), output_padding=1)


# -- pooling -------------------------------------------------------------------------------------

def ref_pool(x, k, s, p, mode):
    x = x.astype(np.float64)
    n, c, h, w = x.shape
    oh, ow = (h + 2 * p[0] - k[0]) // s[0] + 1, (w + 2 * p[1] - k[1]) // s[1] + 1
    fill = -np.inf if mode == "max" else 0.0
    xp = np.pad(x, ((0, 0), (0, 0), (p[0], p[0]), (p[1], p[1])), constant_values=fill)
    valid = np.pad(np.ones((h, w)), ((p[0], p[0]), (p[1], p[1])))
    stack, cnt = [], 0
    for i in range(k[0]):
        for j in range(k[1]):
            sl = (slice(i, i + s[0] * (oh - 1) + 1, s[0]), slice(j, j + s[1] * (ow - 1) + 1, s[1]))
            stack.append(xp[(slice(None), slice(None)) + sl])
            cnt = cnt + valid[sl]
    stack = np.stack(stack)
    if mode == "max":
        return stack.max(0)
    if mode == "average":
        return stack.sum(0) / (k[0] * k[1])
    return stack.sum(0) / cnt


@pytest.mark.parametrize("k,s,p", [(2, None, 0), (3, 2, 1), ((3, 2), (1, 2), (1, 0)), (2, 3, 1)])
@pytest.mark.parametrize("mode", ["max", "average", "average_count_exclude_padding"])
def test_pool2d(k, s, p, mode):
    rng = np.random.default_rng(6)
    x = _rand(rng, (2, 3, 7, 8))
    pair = lambda v: (v, v) if isinstance(v, int) else v  # noqa: E731
    if mode == "max":
        y = F.max_pool2d(mge.tensor(x), k, s, p)
    else:
        y = F.avg_pool2d(mge.tensor(x), k, s, p, mode=mode)
    ref = ref_pool(x, pair(k), pair(k if s is None else s), pair(p), mode)
    assert y.shape == ref.shape and y.dtype == np.float32
    np.testing.assert_allclose(y.numpy(), ref, rtol=1e-5, atol=1e-6)


def test_pool_output_size_is_floor():
    x = mge.tensor(np.zeros((1, 1, 5, 5), "float32"))
    assert F.max_pool2d(x, 2).shape == (1, 1, 2, 2)          # (5 - 2) // 2 + 1
    assert F.avg_pool2d(x, 4, 3).shape == (1, 1, 1, 1)
    assert F.max_pool2d(x, 3, 2, 1).shape == (1, 1, 3, 3)


def test_pool_dtypes_and_avg_default_mode():
    x = np.arange(16, dtype="float32").reshape(1, 1, 4, 4)
    y = F.avg_pool2d(mge.tensor(x), 3, 2, 1)
    np.testing.assert_allclose(y.numpy()[0, 0], [[2.5, 4.0], [8.5, 10.0]])  # MegEngine's values
    yi = F.max_pool2d(mge.tensor(x.astype("int32")), 2)
    assert yi.dtype == np.int32
    np.testing.assert_array_equal(yi.numpy()[0, 0], [[5, 7], [13, 15]])
    y16 = F.avg_pool2d(mge.tensor(x.astype("float16")), 2)
    assert y16.dtype == np.float16
    np.testing.assert_allclose(y16.numpy()[0, 0], [[2.5, 4.5], [10.5, 12.5]])


def test_pool_errors():
    x = mge.tensor(np.zeros((1, 1, 4, 4), "float32"))
    with pytest.raises(ValueError, match=r"Pooling.max: kernel .* larger .*\(1, 1, 4, 4\)"):
        F.max_pool2d(x, 5)
    with pytest.raises(ValueError, match=r"Pooling.*input must be 4-D"):
        F.max_pool2d(mge.tensor(np.zeros((4, 4), "float32")), 2)
    with pytest.raises(ValueError, match="avg_pool2d: mode"):
        F.avg_pool2d(x, 2, mode="foo")
    with pytest.raises(TypeError, match="average pooling needs a floating point"):
        F.avg_pool2d(mge.tensor(np.zeros((1, 1, 4, 4), "int32")), 2)
    with pytest.raises(ValueError, match="Pooling: unknown mode"):
        Pooling("min", (2, 2))


@pytest.mark.parametrize("oshp", [(3, 4), 2, (7, 9), (5, 5), (1, 1)])
def test_adaptive_pool2d(oshp):
    x = np.random.default_rng(7).standard_normal((2, 3, 7, 9)).astype("float32")
    o = (oshp, oshp) if isinstance(oshp, int) else oshp
    sh, sw = 7 // o[0], 9 // o[1]
    k = (7 - (o[0] - 1) * sh, 9 - (o[1] - 1) * sw)
    ya = F.adaptive_avg_pool2d(mge.tensor(x), oshp)
    ym = F.adaptive_max_pool2d(mge.tensor(x), oshp)
    assert ya.shape == (2, 3) + o
    np.testing.assert_allclose(ya.numpy(), ref_pool(x, k, (sh, sw), (0, 0), "average"), rtol=1e-5,
                               atol=1e-6)
    np.testing.assert_allclose(ym.numpy(), ref_pool(x, k, (sh, sw), (0, 0), "max"), rtol=1e-6)


def test_adaptive_pool_matches_megengine_values():
    x = mge.tensor(np.arange(2 * 3 * 7 * 9, dtype="float32").reshape(2, 3, 7, 9))
    np.testing.assert_allclose(F.adaptive_avg_pool2d(x, (3, 4)).numpy()[0, 0],
                               [[10, 12, 14, 16], [28, 30, 32, 34], [46, 48, 50, 52]])
    np.testing.assert_allclose(F.adaptive_max_pool2d(x, (2, 2)).numpy()[0, 0], [[31, 35], [58, 62]])
    with pytest.raises(ValueError, match="AdaptivePooling.*output size"):
        F.adaptive_avg_pool2d(x, (8, 2))


def _python_calls(fn):
    """``fn()`` and the number of Python and C function calls made on this thread while it ran."""
    n = [0]

    def count(frame, event, arg):
        if event in ("call", "c_call"):
            n[0] += 1

    gc.collect()
    gc.disable()  # no finalizers of other tests' garbage in the count
    saved = sys.getprofile()
    sys.setprofile(count)
    try:
        out = fn()
    finally:
        sys.setprofile(saved)
        gc.enable()
    return out, n[0]


def test_conv_work_does_not_grow_with_the_output_size():
    # The kernel is im2col and one matrix product per group (BLAS): no Python loop over output
    # pixels, batch items or channels, so the calls it makes are the same for a 2-image 6x6
    # output and a 16-image 28x28 one (what a wall-clock limit on a large conv stood in for).
    rng = np.random.default_rng(8)
    w = mge.tensor(_rand(rng, (8, 4, 3, 3)))
    small = mge.tensor(_rand(rng, (2, 4, 6, 6)))
    large = mge.tensor(_rand(rng, (16, 4, 28, 28)))
    old = mge.config.async_level
    mge.config.async_level = 0  # the kernel runs on this thread, where the calls are counted
    try:
        for x in (small, large):
            F.conv2d(x, w, padding=1)  # first calls fill caches
        mge._full_sync()               # and the Dels of their outputs run now, not in the count
        y_small, n_small = _python_calls(lambda: F.conv2d(small, w, padding=1))
        y_large, n_large = _python_calls(lambda: F.conv2d(large, w, padding=1))
    finally:
        mge.config.async_level = old
    assert y_small.shape == (2, 8, 6, 6) and y_large.shape == (16, 8, 28, 28)
    assert n_small > 0 and n_large == n_small, (n_small, n_large)
    np.testing.assert_allclose(y_large.numpy(), ref_conv(large.numpy(), w.numpy(), (1, 1), (1, 1),
                                                         (1, 1), 1), rtol=1e-4, atol=1e-4)


def test_empty_batch():
    x = mge.tensor(np.zeros((0, 2, 4, 4), "float32"))
    assert F.conv2d(x, mge.tensor(np.ones((3, 2, 3, 3), "float32"))).shape == (0, 3, 2, 2)
    assert F.conv_transpose2d(x, mge.tensor(np.ones((2, 3, 3, 3), "float32"))).shape == (0, 3, 6, 6)
    assert F.max_pool2d(x, 2).shape == (0, 2, 2, 2)
    assert F.avg_pool2d(x, 2, padding=1).shape == (0, 2, 3, 3)
    k = KERNELS[ConvolutionBackwardFilter]
    dw = k(ConvolutionBackwardFilter((1, 1), (0, 0), (1, 1), 1), np.zeros((0, 2, 4, 4)),
           np.zeros((0, 3, 2, 2)), np.ones((3, 2, 3, 3)))[0]
    np.testing.assert_array_equal(dw, np.zeros((3, 2, 3, 3)))


def test_unbatched_input_runs_with_a_batch_of_one():
    rng = np.random.default_rng(9)
    x = _rand(rng, (3, 5, 5))
    w = _rand(rng, (2, 3, 3, 3))
    y = F.conv2d(mge.tensor(x), mge.tensor(w))
    np.testing.assert_allclose(y.numpy(), ref_conv(x[None], w, (1, 1), (0, 0), (1, 1), 1)[0],
                               rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(F.max_pool2d(mge.tensor(x), 2).numpy(),
                               ref_pool(x[None], (2, 2), (2, 2), (0, 0), "max")[0])
