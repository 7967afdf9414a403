"""MegEngine's dtype rules (the dtype_promote plugin) and AMP autocast."""
import numpy as np
import pytest

import mge
import mge.functional as F
from mge import Tensor

I = lambda: Tensor([1, 2])                       # noqa: E731
FL = lambda: Tensor([1.0, 2.0])                  # noqa: E731
H = lambda: Tensor([1.0, 2.0], dtype="float16")  # noqa: E731
B = lambda: Tensor([True, False])                # noqa: E731
S = lambda: Tensor(np.array([1, 2], dtype="int16"))  # noqa: E731

# (expression, expected dtype, expected value): each observed on MegEngine 1.13
CASES = [
    (lambda: I() + H(), "float32", [2, 4]),
    (lambda: FL() + H(), "float32", [2, 4]),
    (lambda: B() * 2, "float32", [2, 0]),
    (lambda: B() * 2.5, "float32", [2.5, 0]),
    (lambda: B() + I(), "float32", [2, 2]),
    (lambda: B() * FL(), "float32", [1, 0]),
    (lambda: S() + I(), "int32", [2, 4]),
    (lambda: S() * 2, "int16", [2, 4]),
    (lambda: S() * 2.5, "float32", [2.5, 5]),
    (lambda: H() * 2.5, "float16", [2.5, 5]),
    (lambda: I() ** 2, "float32", [1, 4]),
    (lambda: I() ** I(), "float32", [1, 4]),
    (lambda: I() / 2, "float32", [0.5, 1]),
    (lambda: I() / I(), "float32", [1, 1]),
    (lambda: I() // 2, "int32", [0, 1]),
    (lambda: I() % 2, "int32", [1, 0]),
    (lambda: I() + True, "int32", [2, 3]),
    (lambda: I() > 1.5, "bool", [False, True]),
    (lambda: B() == 1, "bool", [True, False]),
    (lambda: abs(-I()), "int32", [1, 2]),
]


@pytest.mark.parametrize("i", range(len(CASES)))
def test_megengine_promotion(i):
    fn, dtype, value = CASES[i]
    out = fn()
    assert out.dtype == np.dtype(dtype)
    np.testing.assert_allclose(out.numpy().astype("float64"), value)


def test_float_only_modes_promote_integers():
    for f in (F.exp, F.sqrt, F.sin, F.log1p):
        assert f(I()).dtype == np.float32
    np.testing.assert_allclose(F.exp(I()).numpy(), np.exp([1.0, 2.0]), rtol=1e-6)


def test_signedness_mismatch_is_megengine_error():
    with pytest.raises(TypeError, match="different signedness is undefined: Uint8 Int32"):
        Tensor(np.array([1], dtype="uint8")) + I()


def test_concat_promotes_mixed_dtypes():
    out = F.concat([I(), FL()])
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out.numpy(), [1, 2, 1, 2])


def test_autocast_matmul_low_precision_and_restores():
    a = Tensor(np.ones((2, 3), "float32"))
    b = Tensor(np.ones((3, 4), "float32"))
    assert mge.amp.enabled is False
    with mge.amp.autocast():
        assert mge.amp.enabled is True
        out = F.matmul(a, b)
        assert out.dtype == np.float16
        np.testing.assert_array_equal(out.numpy(), np.full((2, 4), 3.0))
        assert (a + 1).dtype == np.float32  # elementwise ops keep their dtype
    assert mge.amp.enabled is False
    assert F.matmul(a, b).dtype == np.float32


def test_autocast_as_decorator_and_custom_dtypes():
    @mge.amp.autocast(low_prec_dtype="float16", high_prec_dtype="float32")
    def f(x):
        return F.matmul(x, x), F.softmax(x.astype("float16"), axis=1)

    x = Tensor(np.eye(2, dtype="float32"))
    mm, sm = f(x)
    assert mm.dtype == np.float16 and sm.dtype == np.float32
    assert mge.amp.low_prec_dtype == "float16" and mge.amp.high_prec_dtype == "float32"


def test_amp_module_properties():
    mge.amp.enabled = True
    try:
        assert F.matmul(Tensor(np.ones((1, 1), "float32")), Tensor(np.ones((1, 1), "float32"))).dtype == np.float16
    finally:
        mge.amp.enabled = False
    mge.amp.low_prec_dtype = "float16"
    assert mge.amp.low_prec_dtype == "float16"


def test_disabled_autocast_context_changes_nothing():
    with mge.amp.autocast(enabled=False):
        assert mge.amp.enabled is False
        assert F.matmul(Tensor(np.ones((1, 1), "float32")), Tensor(np.ones((1, 1), "float32"))).dtype == np.float32


def test_batch_norm_under_autocast_takes_low_precision_data_and_high_precision_parameters():
    # MegEngine's batch_norm_rule: the data in float16, weight/bias/statistics in float32
    import mge.functional as F
    rng = np.random.RandomState(7)
    x = mge.tensor(rng.randn(2, 3, 4, 4).astype("float32"))
    w = mge.tensor(np.ones((1, 3, 1, 1), "float32"))
    b = mge.tensor(np.zeros((1, 3, 1, 1), "float32"))
    with mge.amp.autocast():
        out = F.batch_norm(x, weight=w, bias=b, training=True, inplace=False)
    manual = F.batch_norm(x.astype("float16"), weight=w, bias=b, training=True, inplace=False)
    assert out.dtype == np.float16 and manual.dtype == np.float16
    np.testing.assert_array_equal(out.numpy(), manual.numpy())
