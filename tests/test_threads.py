"""Several Python threads may use mge at once (one reentrant lock serialises the channel's
callers; each thread has its own scopes), with results equal to running them one after the other.

Every thread is joined with a timeout, so a regression fails instead of hanging.
"""
import threading

import numpy as np
import pytest

import mge
import mge.functional as F
import mge.module as M
from mge.autodiff import GradManager
from mge.optimizer import SGD

TIMEOUT = 60


@pytest.fixture(params=[2, 0], ids=["async2", "async0"])
def level(request):
    saved = mge.config.async_level
    mge.config.async_level = request.param
    yield request.param
    mge.config.async_level = saved


def _run_threads(targets):
    errors = []

    def guarded(fn):
        def run():
            try:
                fn()
            except BaseException as e:  # reported by the test, not lost in the thread
                errors.append(e)
        return run

    threads = [threading.Thread(target=guarded(fn)) for fn in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    if errors:
        raise errors[0]


def test_two_threads_doing_matmuls(level):
    a = np.random.RandomState(0).rand(128, 128).astype("float32")
    ref = F.matmul(mge.tensor(a), mge.tensor(a)).numpy()

    def work():
        for _ in range(20):
            np.testing.assert_array_equal(F.matmul(mge.tensor(a), mge.tensor(a)).numpy(), ref)

    _run_threads([work, work])


def test_a_background_thread_of_matmuls_beside_tiny_ops(level):
    a = np.random.RandomState(1).rand(256, 256).astype("float32")

    def background():
        x = mge.tensor(a)
        for _ in range(20):
            x = F.matmul(x, mge.tensor(a)) / 256
        x.numpy()

    def tiny():
        t = mge.tensor([1.0, 2.0])
        for _ in range(200):
            np.testing.assert_array_equal((t * 2).numpy(), [2.0, 4.0])

    _run_threads([background, tiny])


def _train(seed, steps=3):
    rng = np.random.RandomState(seed)
    model = M.Linear(8, 4)
    model.weight._reset(mge.tensor(rng.randn(4, 8).astype("float32")))
    model.bias._reset(mge.tensor(np.zeros(4, "float32")))
    gm = GradManager().attach(model.parameters())
    opt = SGD(model.parameters(), lr=0.1, momentum=0.9)
    data = mge.tensor(rng.randn(16, 8).astype("float32"))
    for _ in range(steps):
        with gm:
            loss = (model(data) ** 2).mean()
            gm.backward(loss)
        opt.step().clear_grad()
    return model.weight.numpy().copy(), float(loss.item())


def test_two_threads_training_their_own_models_match_a_sequential_run(level):
    expected = [_train(1), _train(2)]
    got = {}

    def trainer(seed):
        def run():
            got[seed] = _train(seed)
        return run

    _run_threads([trainer(1), trainer(2)])
    for seed, (w, loss) in zip((1, 2), expected):
        np.testing.assert_array_equal(got[seed][0], w)
        assert got[seed][1] == loss


def test_scopes_are_per_thread():
    ch = mge._core.channel.get_channel()
    inner = {}

    def other():
        ch.push_scope("other")
        inner["scopes"] = list(ch.scopes)
        ch.pop_scope("other")

    ch.push_scope("main")
    try:
        _run_threads([other])
        assert inner["scopes"] == ["other"] and ch.scopes == ["main"]
    finally:
        ch.pop_scope("main")
