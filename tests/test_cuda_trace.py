"""``jit.trace`` on the CUDA device's code (``cudahost0``): replays equal eager runs.

A trace whose tensors all live on the device compiles its replays into programs
(``ops/program.py``) that the device runs as one op, step by step through its own kernel door
(``cuda/launch/program.py``): the same kernels as eagerly, so the same bits, with one channel
command per replay, intermediates freed after their last reader and written over in place.
``symbolic=True`` records lazily and ``without_host=True`` runs no Python on replays, as on the
CPU.  A recording on several devices replays op by op.  A training step (``GradManager``,
``backward``, an optimizer's in-place ``step``) traces and replays step after step with the
eager parameters.
"""
import numpy as np
import pytest

import mge
import mge.functional as F
import mge.module as M
import mge.optimizer as optim
from mge.autodiff import GradManager
from mge.jit import trace

from cuda_device_fixtures import DEV, cuda, level, on  # noqa: F401 (fixtures by name)


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
    programs = _programs(on_device)
    for x, y in data:
        le = eager(on(DEV, x), on(DEV, y))
        lt = traced(on(DEV, x), on(DEV, y))
        assert lt.device == le.device
        np.testing.assert_array_equal(lt.numpy(), le.numpy())
    for pe, pt in zip(eager_net.parameters(), traced_net.parameters()):
        assert str(pt.device).startswith(DEV) and pt.device == pe.device
        np.testing.assert_array_equal(pt.numpy(), pe.numpy())
    assert _programs(on_device) > programs  # (the replays ran as programs)


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


def _programs(dev):
    return sum(n for name, n in dev.executed.items() if name.startswith("TracedProgram"))


def test_without_host_on_the_device_runs_no_python(cuda):
    calls = [0]

    @trace(symbolic=True, without_host=True)
    def f(x):
        calls[0] += 1
        return F.relu(x) * 2

    x = on(DEV, np.linspace(-1, 1, 6, dtype="float32"))
    before = _programs(cuda)
    for _ in range(3):
        np.testing.assert_array_equal(f(x).numpy(), np.maximum(x.numpy(), 0) * 2)
    assert calls == [1] and _programs(cuda) - before == 3


@pytest.mark.parametrize("symbolic", [False, True], ids=["eager_record", "symbolic"])
def test_a_replay_is_one_program_with_eagers_bits_and_buffers_reused(cuda, symbolic):
    def chain(x, w):
        y = F.exp(x * 0.5) - w
        return F.sum(y * y + x, axis=1), F.relu(y)

    rng = np.random.default_rng(1)
    f = trace(symbolic=symbolic)(chain)
    for call in range(3):
        x = on(DEV, rng.standard_normal((4, 33)).astype("float32"))
        w = on(DEV, rng.standard_normal(33).astype("float32"))
        eager = [t.numpy() for t in chain(x, w)]
        programs, inplace = _programs(cuda), cuda.inplace
        traced = [t.numpy() for t in f(x, w)]
        # a replay is the whole call as one command (so is a lazy recording's first call)
        assert _programs(cuda) - programs == (1 if call or symbolic else 0)
        for t, e in zip(traced, eager):
            np.testing.assert_array_equal(t, e)
    assert cuda.inplace > inplace  # (the last replay wrote intermediates over freed ones)


def test_a_recording_on_two_devices_replays_op_by_op(cuda):
    @trace(symbolic=True)
    def f(x, y):
        return (x * 2).to("cpu0") + y

    x = on(DEV, np.arange(6, dtype="float32"))
    y = mge.tensor(np.ones(6, "float32"), device="cpu0")
    before = _programs(cuda)
    for _ in range(3):
        out = f(x, y)
        assert str(out.device).startswith("cpu0")
        np.testing.assert_array_equal(out.numpy(), np.arange(6) * 2 + 1)
    assert _programs(cuda) == before


def test_an_error_in_a_programs_step_names_the_traced_op(cuda, level):
    @trace(symbolic=True)
    def f(x, i):
        return F.nn.indexing_one_hot(x, i) * 2

    x = on(DEV, np.arange(20, dtype="float32").reshape(4, 5))
    good = on(DEV, np.array([0, 1, 4, 2], "int32"))
    np.testing.assert_array_equal(f(x, good).numpy(), [0, 12, 28, 34])
    bad = on(DEV, np.array([0, 1, 7, 2], "int32"))
    with pytest.raises(Exception) as err:
        f(x, bad).numpy()
    text = str(err.value) + str(err.value.__cause__) + " ".join(
        getattr(err.value.__cause__, "__notes__", []) + getattr(err.value, "__notes__", []))
    assert "out of range" in text and "at the traced op IndexingOneHot" in text
    np.testing.assert_array_equal(f(x, good).numpy(), [0, 12, 28, 34])  # still replays
