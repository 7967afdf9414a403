"""The scalar and dim_expansion plugins: what they add, and what happens without them."""
import numpy as np
import pytest

import mge.core as core
import mge.functional as F
from mge import Tensor


@pytest.fixture
def without():
    disabled = []

    def off(name):
        core.disable_transformation(name)
        disabled.append(name)
    yield off
    for name in disabled:
        core.enable_transformation(name)


# -- scalar: MegEngine's meaning of 0-d inputs (each result observed on MegEngine 1.13) ----------

def test_concat_of_scalars_is_a_vector():
    out = F.concat([Tensor(1.0), Tensor(2.0)])
    assert out.shape == (2,)
    np.testing.assert_array_equal(out.numpy(), [1.0, 2.0])
    mixed = F.concat([Tensor(1.0), Tensor([2.0, 3.0])])
    np.testing.assert_array_equal(mixed.numpy(), [1.0, 2.0, 3.0])


def test_cumsum_of_scalar_is_one_element_vector():
    out = F.cumsum(Tensor(2.0), 0)
    assert out.shape == (1,) and out.tolist() == [2.0]


def test_reduce_scalar_along_axis_zero_is_the_scalar():
    for fn in (F.sum, F.max, F.mean, F.prod):
        out = fn(Tensor(2.0), axis=0)
        assert out.shape == () and out.item() == 2.0
    with pytest.raises(ValueError, match="out of range"):
        F.sum(Tensor(2.0), axis=1)


def test_without_scalar_plugin_numpy_rules_apply(without):
    without("scalar")
    with pytest.raises(Exception):
        F.concat([Tensor(1.0), Tensor(2.0)])
    assert F.sum(Tensor([1.0, 2.0])).item() == 3.0  # everything else works


# -- dim_expansion: unbatched (C, H, W) images -----------------------------------------------------

def _img():
    rng = np.random.RandomState(0)
    return rng.rand(3, 6, 6).astype("float32"), rng.rand(4, 3, 3, 3).astype("float32")


def test_conv2d_and_pooling_on_unbatched_image():
    x, w = _img()
    batched = F.conv2d(Tensor(x[None]), Tensor(w), padding=1).numpy()
    out = F.conv2d(Tensor(x), Tensor(w), padding=1)
    assert out.shape == (4, 6, 6)
    np.testing.assert_allclose(out.numpy(), batched[0], rtol=1e-6)
    assert F.max_pool2d(Tensor(x), 2).shape == (3, 3, 3)
    np.testing.assert_allclose(F.avg_pool2d(Tensor(x), 2).numpy(),
                               F.avg_pool2d(Tensor(x[None]), 2).numpy()[0], rtol=1e-6)


def test_conv1d_on_batched_input_is_not_mistaken_for_unbatched():
    x = Tensor(np.ones((2, 3, 7), "float32"))
    w = Tensor(np.ones((4, 3, 3), "float32"))
    assert F.conv1d(x, w).shape == (2, 4, 5)


def test_without_dim_expansion_unbatched_input_is_an_error(without):
    without("dim_expansion")
    x, w = _img()
    with pytest.raises(ValueError, match="Convolution"):
        F.conv2d(Tensor(x), Tensor(w))
    assert F.conv2d(Tensor(x[None]), Tensor(w)).shape == (1, 4, 4, 4)
