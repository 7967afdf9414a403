"""amp.GradScaler: loss scaling, unscaling with the non-finite check, the scale's schedule, and
the amp package's switches after the split into a package."""
import numpy as np
import pytest

import mge
import mge.functional as F
import mge.optimizer as optim
from mge.amp import GradScaler
from mge.amp.check_non_finite import check_non_finite
from mge.autodiff import GradManager


class FakeGradManager:
    """Stands in for GradManager: backward(y, dy) sets each attached tensor's grad to
    ``factor * dy`` summed over the ys (what d(factor * sum(y))/dw would give)."""

    def __init__(self, tensors, grads):
        self.tensors = tensors
        self.grads = grads  # gradient per unit dy
        self.calls = []

    def attached_tensors(self):
        return self.tensors

    def backward(self, y=None, dy=None):
        self.calls.append((y, dy))
        scale = sum(float(d.numpy().sum()) for d in dy)
        for t, g in zip(self.tensors, self.grads):
            t.grad = mge.tensor(np.asarray(g, "float32") * scale)


def test_defaults_and_state_dict():
    s = GradScaler()
    assert (s.scale_factor, s.growth_factor, s.backoff_factor, s.growth_interval) == (16.0, 2.0, 0.5, 2000)
    s._growth_tracker = 7
    sd = s.state_dict()
    assert sd == {"scale_factor": 16.0, "growth_factor": 2.0, "backoff_factor": 0.5,
                  "growth_interval": 2000, "_growth_tracker": 7}
    t = GradScaler(init_scale=1.0)
    t.load_state_dict(sd)
    assert t.state_dict() == sd


def test_backward_scales_dy_and_unscales_grads():
    w, b = mge.Parameter([1.0, 2.0]), mge.Parameter([0.0])
    gm = FakeGradManager([w, b], [[0.5, -0.25], [1.0]])
    s = GradScaler(init_scale=8.0, growth_interval=1)
    loss = mge.tensor(3.0)
    s.backward(gm, loss)
    (ys, dys), = gm.calls
    assert ys == [loss] and dys[0].numpy().tolist() == 8.0
    np.testing.assert_allclose(w.grad.numpy(), [0.5, -0.25])  # unscaled
    np.testing.assert_allclose(b.grad.numpy(), [1.0])
    assert s.scale_factor == 16.0  # updated: one good step with growth_interval 1


def test_backward_with_dy_and_without_unscale():
    w = mge.Parameter([1.0])
    gm = FakeGradManager([w], [[1.0]])
    s = GradScaler(init_scale=4.0)
    s.backward(gm, [mge.tensor(1.0)], [mge.tensor(0.5)], unscale_grad=False)
    assert gm.calls[0][1][0].numpy().tolist() == 2.0
    np.testing.assert_allclose(w.grad.numpy(), [2.0])  # still scaled
    s.unscale([w])
    np.testing.assert_allclose(w.grad.numpy(), [0.5])
    s.backward(gm, mge.tensor(1.0), mge.tensor(1.0), update_scale=False)
    assert s._growth_tracker == 0 and s.scale_factor == 4.0


def test_non_finite_grads_are_dropped_and_scale_backs_off():
    w, b = mge.Parameter([1.0, 2.0]), mge.Parameter([0.0])
    opt = optim.SGD([w, b], lr=1.0)
    s = GradScaler(init_scale=1024.0, growth_interval=2)
    w.grad = mge.tensor([np.inf, 1.0])
    b.grad = mge.tensor([2048.0])
    assert s.unscale([w, b, None]) is s
    assert w.grad is None and b.grad is None and s._found_non_finite
    opt.step()  # nothing to do: the step is skipped
    assert w.numpy().tolist() == [1.0, 2.0]
    s.update()
    assert s.scale_factor == 512.0 and s._growth_tracker == 0 and not s._found_non_finite
    # two good steps grow it again
    for _ in range(2):
        w.grad = mge.tensor([512.0, 512.0])
        s.unscale([w])
        np.testing.assert_allclose(w.grad.numpy(), [1.0, 1.0])
        s.update()
    assert s.scale_factor == 1024.0
    w.grad = mge.tensor([np.nan, 0.0])
    s.unscale([w]).update(new_scale=3.0)
    assert s.scale_factor == 3.0 and w.grad is None


def test_growth_interval_zero_never_checks_or_updates():
    w = mge.Parameter([1.0])
    s = GradScaler(init_scale=4.0, growth_interval=0)
    w.grad = mge.tensor([np.inf])
    g = w.grad
    s.unscale([w])
    assert w.grad is g and np.isinf(w.grad.numpy()[0])
    w.grad = mge.tensor([8.0])
    s.unscale([w])
    np.testing.assert_allclose(w.grad.numpy(), [2.0])
    s.update(new_scale=100.0)
    assert s.scale_factor == 4.0


def test_check_non_finite_op():
    a = mge.tensor([1.0, 2.0])
    b = mge.tensor(np.array([4.0], "float16"))
    flag = check_non_finite([a, b], 0.5)
    assert flag.dtype == np.int32 and flag.item() == 0
    np.testing.assert_array_equal(a.numpy(), [0.5, 1.0])
    assert b.dtype == np.float16 and b.numpy().tolist() == [2.0]
    assert check_non_finite([mge.tensor([0.0, -np.inf])]).item() == 1
    with pytest.raises(TypeError, match="CheckNonFinite: inputs must be floating point"):
        check_non_finite([mge.tensor([1, 2])])


def test_amp_package_keeps_its_switches():
    assert mge.amp.enabled is False
    with mge.amp.autocast(low_prec_dtype="float16"):
        assert mge.amp.enabled is True
        assert F.matmul(mge.tensor([[1.0, 2.0]]), mge.tensor([[3.0], [4.0]])).dtype == np.float16
    assert mge.amp.enabled is False
    assert mge.amp.low_prec_dtype == "float16" and mge.amp.high_prec_dtype == "float32"
    assert set(mge.amp.__all__) >= {"autocast", "GradScaler"}


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # numpy warns about the inf * -inf
def test_with_grad_manager():
    w = mge.Parameter([1.0, -2.0])
    gm = GradManager().attach([w])
    opt = optim.SGD([w], lr=0.1)
    s = GradScaler(init_scale=2.0 ** 10, growth_interval=1)
    with gm:
        loss = (w * w).sum()
        s.backward(gm, loss)
    np.testing.assert_allclose(w.grad.numpy(), [2.0, -4.0], rtol=1e-6)
    assert s.scale_factor == 2.0 ** 11
    opt.step().clear_grad()
    np.testing.assert_allclose(w.numpy(), [0.8, -1.6], rtol=1e-6)
    # an overflowing loss: the grads are dropped and the step skipped
    with gm:
        loss = (w * mge.tensor(np.float32(np.inf))).sum()
        s.backward(gm, loss)
    assert w.grad is None and s.scale_factor == 2.0 ** 10
    mge._full_sync()  # the kernels' warnings come out while they are filtered


def test_convert_module_and_tensor_format_mark_4d_and_5d_tensors():
    import mge.module as M
    from mge import amp

    class Net(M.Module):
        def __init__(self):
            super().__init__()
            self.conv = M.Conv2d(4, 4, 3, groups=2)
            self.bn = M.BatchNorm2d(4)
            self.fc = M.Linear(2, 2)

        def forward(self, x):
            return self.bn(self.conv(x))

    net = Net()
    before = {k: (v.shape, v.numpy().copy()) for k, v in net.named_tensors()}
    copy = amp.convert_module_format(net, inplace=False)
    assert all(t.format == "default" for t in net.tensors())
    out = amp.convert_module_format(net)
    assert out is net
    for k, t in net.named_tensors():
        assert t.format == ("nhwc" if t.ndim in (4, 5) else "default"), k
        assert t.shape == before[k][0]
        np.testing.assert_array_equal(t.numpy(), before[k][1])
    assert {k: t.format for k, t in copy.named_tensors()} == \
        {k: t.format for k, t in net.named_tensors()}
    x = mge.tensor(np.random.RandomState(0).rand(1, 4, 5, 5).astype("float32"))
    y = amp.convert_tensor_format(x, inplace=False)
    assert y is not x and y.format == "nhwc" and x.format == "default"
    np.testing.assert_array_equal(y.numpy(), x.numpy())
    assert amp.convert_tensor_format(x) is x and x.format == "nhwc"
    v = mge.tensor([1.0, 2.0])
    assert amp.convert_tensor_format(v) is v and v.format == "default"
    with pytest.raises(TypeError, match="convert_module_format"):
        amp.convert_module_format(x)
