"""``mge.random``: shapes, dtypes, distributions and reproducibility."""
import numpy as np
import pytest

import mge
import mge.random as R
from mge.core import apply
from mge._core.ops.rng import UniformRNG

DRAWS = {
    "uniform": lambda r, size: r.uniform(size=size),
    "uniform_range": lambda r, size: r.uniform(-2, 3, size=size),
    "normal": lambda r, size: r.normal(1.0, 2.0, size=size),
    "gamma": lambda r, size: r.gamma(2.0, 0.5, size=size),
    "beta": lambda r, size: r.beta(2.0, 3.0, size=size),
    "poisson": lambda r, size: r.poisson(3.0, size=size),
}


@pytest.mark.parametrize("name", sorted(DRAWS))
def test_shapes_and_float32(name):
    draw = DRAWS[name]
    for r in (R, R.RNG(1)):
        x = draw(r, (2, 3))
        assert x.shape == (2, 3) and x.dtype == np.float32
        assert draw(r, None).shape == (1,) if name not in ("gamma", "beta", "poisson") else True
        assert draw(r, (0, 4)).shape == (0, 4)


@pytest.mark.parametrize("name", sorted(DRAWS))
def test_seed_reproduces_sequence(name):
    draw = DRAWS[name]
    R.seed(123)
    a = [draw(R, (5,)).numpy() for _ in range(3)]
    R.seed(123)
    b = [draw(R, (5,)).numpy() for _ in range(3)]
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(a[0], a[1])
    R.seed(124)
    assert not np.array_equal(draw(R, (5,)).numpy(), a[0])


def test_rng_objects_are_independent():
    a = R.RNG(seed=7).uniform(size=(4,)).numpy()
    b = R.RNG(seed=7).uniform(size=(4,)).numpy()
    np.testing.assert_array_equal(a, b)
    r = R.RNG(seed=7)
    R.seed(0)
    R.normal(size=(10,))  # global draws do not disturb r's sequence
    np.testing.assert_array_equal(r.uniform(size=(4,)).numpy(), a)
    assert not np.array_equal(r.uniform(size=(4,)).numpy(), a)
    cpu0 = mge._core.device.as_device("cpu0")
    assert R.RNG(seed=7, device="cpu0").uniform(size=(2,)).device == cpu0


def test_ops_are_pure_functions_of_their_parameters():
    # Recomputing an op (DTR) or replaying it gives the same numbers.
    op = UniformRNG(99, 0, np.dtype("float32"), (3,), mge._core.device.as_device(None))
    np.testing.assert_array_equal(apply(op)[0].numpy(), apply(op)[0].numpy())


def test_distributions():
    R.seed(0)
    n = 20000
    u = R.uniform(-2, 3, size=(n,)).numpy()
    assert u.min() >= -2 and u.max() < 3 and abs(u.mean() - 0.5) < 0.05
    g = R.normal(1.0, 2.0, size=(n,)).numpy()
    assert abs(g.mean() - 1.0) < 0.05 and abs(g.std() - 2.0) < 0.05
    k = R.gamma(2.0, 0.5, size=(n,)).numpy()
    assert k.min() > 0 and abs(k.mean() - 1.0) < 0.03
    b = R.beta(2.0, 3.0, size=(n,)).numpy()
    assert 0 <= b.min() and b.max() <= 1 and abs(b.mean() - 0.4) < 0.01
    p = R.poisson(3.0, size=(n,)).numpy()
    assert np.all(p == np.round(p)) and abs(p.mean() - 3.0) < 0.05


def test_tensor_parameters_broadcast():
    shape = mge.tensor([1.0, 2.0])
    scale = mge.tensor([[1.0], [2.0]])
    assert R.gamma(shape, scale).shape == (2, 2)
    assert R.gamma(shape, 1.0, size=(3,)).shape == (3, 2)
    assert R.beta(shape, scale, size=(3,)).shape == (3, 2, 2)
    lam = mge.tensor([1.0, 50.0])
    p = R.poisson(lam, size=(4000,)).numpy()
    assert p.shape == (4000, 2) and p.dtype == np.float32
    np.testing.assert_allclose(p.mean(0), [1.0, 50.0], rtol=0.05)
    assert R.poisson(mge.tensor([1, 2])).dtype == np.float32  # integer rates become float32


def test_permutation():
    p = R.permutation(10).numpy()
    assert p.dtype == np.int32 and sorted(p.tolist()) == list(range(10))
    assert R.permutation(5, dtype="float32").dtype == np.float32
    assert R.permutation(0).shape == (0,)
    x = np.arange(12, dtype=np.int32).reshape(6, 2)
    t = mge.tensor(x)
    y = R.permutation(t).numpy()
    assert sorted(map(tuple, y.tolist())) == sorted(map(tuple, x.tolist()))
    np.testing.assert_array_equal(t.numpy(), x)  # a copy: the input is unchanged
    with pytest.raises(ValueError, match="permutation: n must be non-negative"):
        R.permutation(-1)
    with pytest.raises(TypeError, match="permutation: n must be an int"):
        R.permutation(2.5)


def test_shuffle_in_place():
    x = np.arange(20, dtype=np.float32).reshape(10, 2)
    t = mge.tensor(x)
    R.seed(3)
    assert R.shuffle(t) is None
    y = t.numpy()
    assert not np.array_equal(y, x)
    assert sorted(map(tuple, y.tolist())) == sorted(map(tuple, x.tolist()))
    t2 = mge.tensor(x)
    R.seed(3)
    R.shuffle(t2)
    np.testing.assert_array_equal(t2.numpy(), y)
    with pytest.raises(ValueError, match="shuffle"):
        R.shuffle(mge.tensor(1.0))
    with pytest.raises(TypeError, match="shuffle: inp must be a tensor"):
        R.shuffle(x)


def test_errors():
    with pytest.raises(ValueError, match="uniform: needs low < high"):
        R.uniform(1, 1)
    with pytest.raises(ValueError, match="gamma: shape must be positive"):
        R.gamma(0.0)
    with pytest.raises(ValueError, match="beta: beta must be positive"):
        R.beta(1.0, -1.0)
    with pytest.raises(ValueError, match="poisson: lam must be positive"):
        R.poisson(-1.0)
    with pytest.raises(ValueError, match="normal: std"):
        R.normal(0, -1)
    with pytest.raises(TypeError, match="normal: size"):
        R.normal(size="ab")
    with pytest.raises(ValueError, match="gamma: parameter shapes"):
        R.gamma(mge.tensor([1.0, 2.0]), mge.tensor([1.0, 2.0, 3.0]))
