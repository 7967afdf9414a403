"""mge.module.init: fans, gains, the initialisers' statistics, MegEngine's default initialisation
of each module, reproducibility under mge.random.seed; the docstring examples of mge.module."""
import doctest
import importlib
import math

import numpy as np
import pytest

import mge
import mge.module as M
import mge.module.init as init


def _param(*shape):
    return mge.Parameter(np.zeros(shape, "float32"))


def test_fans_in_megengine_layouts():
    assert init.calculate_fan_in_and_fan_out(_param(4, 3)) == (3, 4)
    assert init.calculate_fan_in_and_fan_out(_param(4, 3, 2)) == (6, 8)
    assert init.calculate_fan_in_and_fan_out(_param(4, 3, 2, 2)) == (12, 16)
    # grouped (G, O/G, I/G, KH, KW): the group axis is ignored
    assert init.calculate_fan_in_and_fan_out(_param(2, 4, 3, 2, 2)) == (12, 16)
    assert init.calculate_correct_fan(_param(4, 3), "FAN_OUT") == 4
    with pytest.raises(ValueError, match="fewer than 2 dimensions"):
        init.calculate_fan_in_and_fan_out(_param(3))
    with pytest.raises(ValueError, match=r"Mode fan not supported, please use one of "
                                         r"\['fan_in', 'fan_out'\]"):
        init.calculate_correct_fan(_param(3, 3), "fan")


def test_gains():
    assert init.calculate_gain("linear") == 1 and init.calculate_gain("conv2d") == 1
    assert init.calculate_gain("sigmoid") == 1
    assert init.calculate_gain("tanh") == pytest.approx(5 / 3)
    assert init.calculate_gain("relu") == pytest.approx(math.sqrt(2))
    assert init.calculate_gain("leaky_relu") == pytest.approx(math.sqrt(2 / (1 + 0.01 ** 2)))
    assert init.calculate_gain("leaky_relu", 0.2) == pytest.approx(math.sqrt(2 / 1.04))
    with pytest.raises(ValueError, match="negative_slope x not a valid number"):
        init.calculate_gain("leaky_relu", "x")
    with pytest.raises(ValueError, match="Unsupported nonlinearity foo"):
        init.calculate_gain("foo")


def test_fill_zeros_ones_keep_the_tensor_object_and_dtype():
    t = mge.Parameter(np.arange(6, dtype="float32").reshape(2, 3))
    same = t
    init.fill_(t, 2.5)
    assert t is same and t.shape == (2, 3) and t.dtype == np.float32
    np.testing.assert_array_equal(t.numpy(), np.full((2, 3), 2.5))
    init.zeros_(t)
    assert not t.numpy().any()
    init.ones_(t)
    assert t.numpy().min() == t.numpy().max() == 1
    i = mge.tensor([1, 2], dtype="int32")
    init.fill_(i, 7)
    assert i.dtype == np.int32
    with pytest.raises(TypeError, match="fill_: expected a Tensor, got list"):
        init.fill_([1.0], 0)


def test_random_initialisers_statistics():
    t = _param(200, 300)  # fan_in 300, fan_out 200
    init.uniform_(t, -2, 3)
    v = t.numpy()
    assert v.min() >= -2 and v.max() < 3 and abs(v.mean() - 0.5) < 0.05
    init.normal_(t, 1.0, 2.0)
    v = t.numpy()
    assert abs(v.mean() - 1) < 0.03 and abs(v.std() - 2) < 0.03

    bound = math.sqrt(6 / 500)
    init.xavier_uniform_(t)
    v = t.numpy()
    assert np.abs(v).max() <= bound and np.abs(v).max() > 0.95 * bound
    init.xavier_normal_(t, gain=2.0)
    assert t.numpy().std() == pytest.approx(2 * math.sqrt(2 / 500), rel=0.03)

    bound = math.sqrt(6 / 300)  # default a=0: gain sqrt(2)
    init.msra_uniform_(t)
    v = t.numpy()
    assert np.abs(v).max() <= bound and np.abs(v).max() > 0.95 * bound
    init.msra_uniform_(t, a=math.sqrt(5))
    assert np.abs(t.numpy()).max() <= math.sqrt(1 / 300) * 1.0001
    init.msra_normal_(t, mode="fan_out", nonlinearity="relu")
    assert t.numpy().std() == pytest.approx(math.sqrt(2 / 200), rel=0.03)
    assert t.dtype == np.float32 and t.shape == (200, 300)


def test_default_initialisation_is_megengines():
    mge.random.seed(0)
    lin = M.Linear(400, 300)
    assert lin.weight.numpy().std() == pytest.approx(math.sqrt(1 / 400), rel=0.03)
    assert not lin.bias.numpy().any()
    conv = M.Conv2d(16, 64, 3, groups=4)  # fan_in counts every input channel, as in MegEngine
    assert conv.weight.numpy().std() == pytest.approx(math.sqrt(1 / (16 * 9)), rel=0.05)
    convt = M.ConvTranspose2d(8, 64, 3)  # fan_in is out_channels * kernel
    assert convt.weight.numpy().std() == pytest.approx(math.sqrt(1 / (64 * 9)), rel=0.05)
    emb = M.Embedding(200, 50)
    assert emb.weight.numpy().std() == pytest.approx(1, rel=0.05)
    bn = M.BatchNorm2d(3)
    assert bn.weight.numpy().min() == 1 and not bn.bias.numpy().any()
    assert not bn.running_mean.numpy().any() and bn.running_var.numpy().min() == 1
    ln = M.LayerNorm(4)
    assert ln.weight.numpy().min() == 1 and not ln.bias.numpy().any()


def test_model_construction_is_reproducible_under_seed():
    def build():
        return M.Sequential(M.Conv2d(3, 4, 3), M.BatchNorm2d(4), M.ReLU(), M.Linear(4, 2),
                            M.Embedding(3, 2))

    mge.random.seed(7)
    a = build().state_dict()
    mge.random.seed(7)
    b = build().state_dict()
    mge.random.seed(8)
    c = build().state_dict()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    assert not np.array_equal(a["0.weight"], c["0.weight"])
    lin = M.Linear(3, 3)
    mge.random.seed(5)
    lin.reset_parameters()
    first = lin.weight.numpy().copy()
    mge.random.seed(5)
    lin.reset_parameters()
    np.testing.assert_array_equal(lin.weight.numpy(), first)


_DOC_MODULES = ["mge.module", "mge.module.module", "mge.module.hooks", "mge.module.init",
                "mge.module.linear", "mge.module.conv", "mge.module.batchnorm",
                "mge.module.normalization", "mge.module.dropout", "mge.module.identity",
                "mge.module.embedding", "mge.module.pooling", "mge.module.activation",
                "mge.module.sequential", "mge.module.misc"]


@pytest.mark.parametrize("name", _DOC_MODULES)
def test_docstring_examples_run(name):
    result = doctest.testmod(importlib.import_module(name), extraglobs={"np": np},
                             optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0
