"""ConvBn2d, ConvBnRelu2d, ConvTransposeBn2d, ConvTransposeBnRelu2d, LinearBn1d, LinearBnRelu1d:
MegEngine 1.13's structure, state-dict keys and outputs in training and evaluation mode
(tests/data/megengine_rnn_refs.npz), and that they equal their parts."""
import pathlib

import numpy as np
import pytest

import mge
import mge.functional as F
import mge.module as M
from gradcheck import check_grads

REFS = np.load(pathlib.Path(__file__).parent / "data" / "megengine_rnn_refs.npz")

FUSED = {
    "convbn2d": (M.ConvBn2d, dict(in_channels=3, out_channels=4, kernel_size=3, padding=1)),
    "convbnrelu2d": (M.ConvBnRelu2d, dict(in_channels=3, out_channels=4, kernel_size=3, stride=2,
                                          bias=False)),
    "convtransposebn2d": (M.ConvTransposeBn2d, dict(in_channels=3, out_channels=2, kernel_size=3,
                                                    stride=2)),
    "convtransposebnrelu2d": (M.ConvTransposeBnRelu2d, dict(in_channels=3, out_channels=2,
                                                            kernel_size=2)),
    "linearbn1d": (M.LinearBn1d, dict(in_features=5, out_features=3)),
    "linearbnrelu1d": (M.LinearBnRelu1d, dict(in_features=5, out_features=3, bias=False)),
}


def state(case):
    prefix = f"{case}/sd/"
    return {k[len(prefix):]: REFS[k] for k in REFS.files if k.startswith(prefix)}


@pytest.mark.parametrize("case", sorted(FUSED))
def test_matches_megengine(case):
    cls, kwargs = FUSED[case]
    m = cls(**kwargs)
    assert sorted(m.state_dict()) == sorted(state(case))
    m.load_state_dict(state(case))
    x = mge.tensor(REFS[f"{case}/x"])
    m.eval()
    np.testing.assert_allclose(m(x).numpy(), REFS[f"{case}/eval_out"], rtol=1e-5, atol=1e-5)
    m.train()
    np.testing.assert_allclose(m(x).numpy(), REFS[f"{case}/train_out"], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(m.bn.running_mean.numpy().ravel(),
                               REFS[f"{case}/running_mean"].ravel(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(m.bn.running_var.numpy().ravel(),
                               REFS[f"{case}/running_var"].ravel(), rtol=1e-5, atol=1e-6)


def test_structure_and_arguments():
    m = M.ConvBn2d(3, 8, 3, stride=2, padding=1, groups=1, bias=False, eps=1e-3, momentum=0.5,
                   affine=False, track_running_stats=True, padding_mode="zeros")
    assert isinstance(m.conv, M.Conv2d) and isinstance(m.bn, M.BatchNorm2d)
    assert m.conv.bias is None and m.conv.stride == (2, 2) and m.bn.eps == 1e-3
    assert m.bn.momentum == 0.5 and m.bn.weight is None
    t = M.ConvTransposeBnRelu2d(3, 2, 3, stride=2, output_padding=1)
    assert isinstance(t.conv_transpose2d, M.ConvTranspose2d) and isinstance(t.bn, M.BatchNorm2d)
    lin = M.LinearBn1d(5, 3)
    assert isinstance(lin.linear, M.Linear) and isinstance(lin.bn, M.BatchNorm1d)
    assert lin.bias.shape == (3,) and M.LinearBn1d(5, 3, bias=False).bias is None
    for name in ("ConvBn2d", "ConvBnRelu2d", "ConvTransposeBn2d", "ConvTransposeBnRelu2d",
                 "LinearBn1d", "LinearBnRelu1d"):
        assert name in M.__all__


@pytest.mark.parametrize("training", [True, False])
def test_equal_to_parts(training):
    mge.random.seed(0)
    m = M.ConvBnRelu2d(2, 3, 3, padding=1)
    m.train(training)
    conv = M.Conv2d(2, 3, 3, padding=1)
    bn = M.BatchNorm2d(3)
    conv.load_state_dict(m.conv.state_dict())
    bn.train(training)
    x = mge.tensor(np.random.default_rng(1).standard_normal((2, 2, 4, 4)).astype("float32"))
    np.testing.assert_allclose(m(x).numpy(), F.relu(bn(conv(x))).numpy(), rtol=1e-6, atol=1e-7)


def test_gradients_through_fused_linear_bn():
    mge.random.seed(1)
    m = M.LinearBnRelu1d(3, 2)
    m.train()
    rng = np.random.default_rng(2)

    def fn(x, w):
        m.linear.weight = w
        return m(x)
    check_grads(fn, rng.standard_normal((5, 3)), rng.standard_normal((2, 3)), rtol=1e-5,
                atol=1e-7)
