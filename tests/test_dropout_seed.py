"""Dropout masks come from the global random stream, so ``mge.random.seed`` makes them reproducible."""
import numpy as np

import mge
import mge.functional as F
import mge.module as M


def _ones(n=256):
    return mge.tensor(np.ones(n, "float32"))


def _masks(seed, calls=2, p=0.5):
    mge.random.seed(seed)
    return [F.nn.dropout(_ones(), p).numpy().copy() for _ in range(calls)]


def test_seed_reproduces_the_masks():
    first, second = _masks(3), _masks(3)
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)


def test_masks_are_masks_and_change_from_call_to_call():
    a, b = _masks(3)
    assert set(np.unique(a).tolist()) == {0.0, 2.0}   # kept values scaled by 1 / (1 - p)
    assert not np.array_equal(a, b)                   # 256 elements: equal masks are not a chance


def test_another_seed_gives_other_masks():
    assert not np.array_equal(_masks(3, calls=1)[0], _masks(4, calls=1)[0])


def test_dropout_shares_the_stream_with_the_other_random_ops():
    # One stream: a draw before the dropout changes its mask, and the sequence as a whole replays.
    def run():
        u = mge.random.uniform(size=(4,)).numpy().copy()
        return u, F.nn.dropout(_ones(), 0.5).numpy().copy()

    mge.random.seed(11)
    u1, m1 = run()
    mge.random.seed(11)
    u2, m2 = run()
    np.testing.assert_array_equal(u1, u2)
    np.testing.assert_array_equal(m1, m2)
    mge.random.seed(11)
    assert not np.array_equal(F.nn.dropout(_ones(), 0.5).numpy(), m1)


def test_dropout_module_is_reproducible():
    layer = M.Dropout(0.3)
    layer.train()
    x = mge.tensor(np.arange(1, 65, dtype="float32"))
    mge.random.seed(5)
    a = layer(x).numpy().copy()
    mge.random.seed(5)
    b = layer(x).numpy().copy()
    np.testing.assert_array_equal(a, b)
    layer.eval()
    np.testing.assert_array_equal(layer(x).numpy(), x.numpy())
