"""The detection ops and the CTC loss on the CUDA device, through the public functional API,
against cpu0.

``cudahost0`` (``tests/devices/cuda_host.py``) is the CUDA device's code over the host backend:
``roi_align``, ``roi_pooling``, ``nms``, ``correlation`` and ``ctc_loss`` run
``kernels/detection.py``'s plans through the device's executor, forward and backward (through
``GradManager``: ``VisionBackward`` and the CTC loss's own gradient), and ``ran`` checks that the
op classes really ran on the device.  The checks' errors (a RoI's batch index, a CTC label) are
the CPU device's, at the call (async level 0) or the next read (level 2).  Without g++ the tests
are skipped with the reason, except under ``CI``.
"""
import numpy as np
import pytest

import mge
import mge.functional as F
from mge.autodiff import GradManager
from mge.core import AsyncError, apply

from cuda_device_fixtures import DEV, at, both, cuda, level, on  # noqa: F401 (fixtures)
from mge._core.ops.vision import NMSKeep

F32 = np.dtype("float32")










def close(fn, rtol=1e-5, atol=1e-6):
    """``both(fn)``, each pair equal within ``rtol``/``atol`` (exact for integers)."""
    got, ref = both(fn)
    for g, r in zip(got, ref):
        if g.dtype.kind == "f":
            np.testing.assert_allclose(g, r, rtol=rtol, atol=atol)
        else:
            np.testing.assert_array_equal(g, r)
    return got, ref


def ran(dev, fn):
    """``fn()`` run, and the names of the op classes the device executed meanwhile."""
    before = dict(dev.executed)
    fn()
    return {k.split(".")[0] for k, v in dev.executed.items() if v > before.get(k, 0)}


def _grad(d, fn, *arrays):
    """``fn(*tensors)`` on ``d`` and the gradients of its sum w.r.t. the first input(s)."""
    ts = [on(d, a) for a in arrays]
    gm = GradManager()
    gm.attach(ts[:1])
    with gm:
        y = fn(*ts)
        gm.backward((y * on(d, np.linspace(-1, 1, y.size).reshape(y.shape).astype(F32))).sum())
    return [y, ts[0].grad]


_RNG = np.random.default_rng(0)
_X = _RNG.normal(size=(2, 3, 10, 12)).astype(F32)
_ROIS = np.array([[0, 1.2, 0.5, 7.3, 6.1], [1, 0, 0, 11, 9], [1, 3.7, 2.2, 4.1, 2.9],
                  [0, 2, 1, 12, 10]], F32)


@pytest.mark.parametrize("mode", ["average", "max"])
def test_roi_align_forward_and_backward(cuda, mode):
    def fn(d):
        return _grad(d, lambda x, r: F.vision.roi_align(x, r, (3, 2), mode, 0.8, 2), _X, _ROIS)
    assert {"ROIAlign", "VisionBackward"} <= ran(cuda, lambda: close(fn))


@pytest.mark.parametrize("mode", ["average", "max"])
def test_roi_pooling_forward_and_backward(cuda, mode):
    def fn(d):
        return _grad(d, lambda x, r: F.vision.roi_pooling(x, r, (3, 4), mode, 0.7), _X, _ROIS)
    assert {"ROIPooling", "VisionBackward"} <= ran(cuda, lambda: close(fn))


def test_nms_keeps_the_cpus_boxes(cuda):
    # NMSKeep itself, as F.vision.nms applies it (boxes sorted by score, a batch of one and
    # more); F.vision.nms's final ``sorted_idx[kept]`` indexes with CondTake's output, whose
    # shape the indexing launcher does not take unknown at async level 2 (not this family's op)
    rng = np.random.default_rng(1)
    xy = rng.random((3, 200, 2)) * 60
    boxes = np.concatenate([xy, xy + rng.random((3, 200, 2)) * 20 + 1], -1).astype(F32)

    def fn(d):
        return [*apply(NMSKeep(0.4, 200), on(d, boxes[:1])),
                *apply(NMSKeep(0.6, 25), on(d, boxes))]
    assert "NMSKeep" in ran(cuda, lambda: close(fn))


def test_functional_nms_at_async_level_0(cuda):
    rng = np.random.default_rng(5)
    xy = rng.random((60, 2)) * 40
    boxes = np.concatenate([xy, xy + 12], -1).astype(F32)
    scores = rng.random(60).astype(F32)
    old = mge.config.async_level
    mge.config.async_level = 0
    try:
        def fn(d):
            return [F.vision.nms(on(d, boxes), on(d, scores), 0.5, max_output=30)]
        assert "NMSKeep" in ran(cuda, lambda: close(fn))
    finally:
        mge.config.async_level = old


@pytest.mark.parametrize("mult", [True, False])
def test_correlation_forward_and_both_gradients(cuda, mult):
    rng = np.random.default_rng(2)
    a, b = (rng.normal(size=(2, 3, 9, 8)).astype(F32) for _ in range(2))

    def fn(d):
        ta, tb = on(d, a), on(d, b)
        gm = GradManager()
        gm.attach([ta, tb])
        with gm:
            y = F.vision.correlation(ta, tb, 3, 2, 1, 1, 2, mult)
            gm.backward((y * y).sum())
        return [y, ta.grad, tb.grad]
    assert {"Correlation", "VisionBackward"} <= ran(cuda, lambda: close(fn, 1e-4, 1e-5))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_ctc_loss_and_its_gradient(cuda, reduction):
    rng = np.random.default_rng(3)
    t, n, c, s = 15, 3, 6, 4
    logits = rng.normal(size=(t, n, c)).astype(F32)
    labels = rng.integers(1, c, (n, s)).astype(np.int32)
    labels[0, 1] = labels[0, 0]
    plen, llen = np.array([15, 11, 9], np.int32), np.array([4, 3, 2], np.int32)

    def fn(d):
        x = on(d, logits)
        gm = GradManager()
        gm.attach([x])
        with gm:
            loss = F.nn.ctc_loss(F.softmax(x, axis=-1), on(d, plen), on(d, labels), on(d, llen),
                                 blank=0, reduction=reduction)
            gm.backward(loss.sum())
        return [loss, x.grad]
    assert "CTCLoss" in ran(cuda, lambda: close(fn))


def test_a_roi_batch_index_out_of_range_raises_the_cpus_error(cuda, level):
    rois = _ROIS.copy()
    rois[2, 0] = 5
    messages = []
    for d in (DEV, "cpu0"):
        with pytest.raises((IndexError, AsyncError)) as info:
            at(d, lambda: F.vision.roi_align(on(d, _X), on(d, rois), (2, 2)).numpy())
        err = info.value if isinstance(info.value, IndexError) else info.value.__cause__
        assert isinstance(err, IndexError)
        messages.append(str(err))
    assert messages[0] == messages[1] and "index 5 is out of bounds" in messages[0]


def test_a_ctc_label_out_of_range_raises_the_cpus_error(cuda, level):
    rng = np.random.default_rng(4)
    p = rng.random((6, 2, 4)).astype(F32)
    labels = np.array([[1, 2], [3, 9]], np.int32)
    plen, llen = np.array([6, 6], np.int32), np.array([2, 2], np.int32)
    messages = []
    for d in (DEV, "cpu0"):
        with pytest.raises((IndexError, AsyncError)) as info:
            at(d, lambda: F.nn.ctc_loss(on(d, p), on(d, plen), on(d, labels), on(d, llen),
                                        reduction="none").numpy())
        err = info.value if isinstance(info.value, IndexError) else info.value.__cause__
        assert isinstance(err, IndexError)
        messages.append(str(err))
    assert messages[0] == messages[1] and "index 9 is out of bounds" in messages[0]
