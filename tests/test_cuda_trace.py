"""``jit.trace`` on the CUDA device's code (``cudahost0``): replays equal eager runs.

The CUDA device has no kernel for a compiled program (``Device.runs_programs`` is False), so a
trace whose tensors live there is recorded eagerly (also with ``symbolic=True``) and its replays
issue the recorded ops one by one: the same kernels as eagerly, so the same bits.  A training
step (``GradManager``, ``backward``, an optimizer's in-place ``step``) traces and replays step
after step with the eager parameters.
"""
import numpy as np
import pytest

import mge
import mge.functional as F
import mge.module as M
import mge.optimizer as optim
from mge.autodiff import GradManager
from mge.jit import trace

from cuda_device_fixtures import DEV, cuda, on  # noqa: F401 (fixtures by name)


class _MLP(M.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = M.Linear(6, 8)
        self.fc2 = M.Linear(8, 3)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


@pytest.fixture
def on_device(cuda):
    """``cudahost0`` as the default device (the model's parameters, the optimizer's state)."""
    old = mge.get_default_device()
    mge.set_default_device(DEV)
    yield cuda
    mge.set_default_device(old)


def _model(seed):
    mge.random.seed(seed)
    return _MLP()


def _step_fn(net):
    gm = GradManager().attach(net.parameters())
    opt = optim.SGD(net.parameters(), lr=0.1, momentum=0.9)

    def step(x, y):
        with gm:
            loss = F.nn.cross_entropy(net(x), y)
            gm.backward(loss)
        opt.step().clear_grad()
        return loss
    return step


@pytest.mark.parametrize("symbolic", [False, True], ids=["eager_record", "symbolic"])
def test_a_traced_training_step_on_the_device_equals_eager(on_device, symbolic):
    rng = np.random.default_rng(0)
    data = [(rng.standard_normal((5, 6)).astype("float32"), rng.integers(0, 3, 5).astype("int32"))
            for _ in range(4)]
    eager_net, traced_net = _model(3), _model(3)
    eager, traced = _step_fn(eager_net), trace(symbolic=symbolic)(_step_fn(traced_net))
    for x, y in data:
        le = eager(on(DEV, x), on(DEV, y))
        lt = traced(on(DEV, x), on(DEV, y))
        assert lt.device == le.device
        np.testing.assert_array_equal(lt.numpy(), le.numpy())
    for pe, pt in zip(eager_net.parameters(), traced_net.parameters()):
        assert str(pt.device).startswith(DEV) and pt.device == pe.device
        np.testing.assert_array_equal(pt.numpy(), pe.numpy())


def test_a_traced_function_on_the_device_still_checks_its_ops(cuda):
    flip = [False]

    @trace(symbolic=True)
    def f(x):
        return F.exp(x) if flip[0] else F.relu(x)

    x = on(DEV, np.linspace(-1, 1, 6, dtype="float32"))
    for _ in range(2):
        np.testing.assert_array_equal(f(x).numpy(), np.maximum(x.numpy(), 0))
    flip[0] = True
    with pytest.raises(mge.jit.TraceError, match="Exp|EXP|exp"):
        f(x).numpy()
    flip[0] = False
    np.testing.assert_array_equal(f(x).numpy(), np.maximum(x.numpy(), 0))  # (still replays)


def test_without_host_on_the_device_replays_the_ops(cuda):
    # (no program runs there: the function's Python runs again and its ops are issued)
    @trace(symbolic=True, without_host=True)
    def f(x):
        return F.relu(x) * 2

    x = on(DEV, np.linspace(-1, 1, 6, dtype="float32"))
    for _ in range(3):
        np.testing.assert_array_equal(f(x).numpy(), np.maximum(x.numpy(), 0) * 2)
