"""jit.trace's arithmetic simplification (mge.jit.arith): MegBrain's rewrites at opt_level >= 1."""
import numpy as np
import pytest

import mge
import mge.functional as F
from mge.jit import trace

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # nan and inf on purpose


def _both(fn, *args, capture_as_const=True):
    """(opt_level=0 result, opt_level=1 result) of ``fn`` traced, each from the first call and
    from two replays (which must agree with it)."""
    out = []
    for level in (0, 1):
        f = trace(fn, symbolic=True, opt_level=level, capture_as_const=capture_as_const)
        first = f(*args).numpy()
        for _ in range(2):
            np.testing.assert_array_equal(f(*args).numpy(), first)
        out.append(first)
    return out


def test_a_over_a_is_one_even_where_a_is_zero():
    x = mge.tensor([0.0, 2.0, np.inf], dtype="float32")
    raw, opt = _both(lambda x: (2.0 * x) / (2.0 * x), x)
    assert np.isnan(raw[0]) and np.isnan(raw[2])
    np.testing.assert_array_equal(opt, np.ones(3, "float32"))
    assert opt.dtype == np.float32


def test_a_minus_a_is_zero_and_floor_div_is_one():
    x = mge.tensor([np.inf, 1.5, -3.0], dtype="float32")
    raw, opt = _both(lambda x: x - x, x)
    assert np.isnan(raw[0])
    np.testing.assert_array_equal(opt, np.zeros(3, "float32"))
    xi = mge.tensor([3, 5], dtype="int32")
    raw, opt = _both(lambda x: x // x, xi)
    np.testing.assert_array_equal(opt, [1, 1])
    assert opt.dtype == np.int32


def test_log_sum_exp_is_stable():
    x, y = mge.tensor(1.0e4), mge.tensor(0.0)
    raw, opt = _both(lambda x, y: F.log(F.exp(x) + F.exp(y)), x, y)
    assert not np.isfinite(raw)
    np.testing.assert_allclose(opt, np.logaddexp(np.float32(1e4), np.float32(0)), rtol=1e-6)


def test_log_sum_exp_broadcasts():
    rng = np.random.RandomState(0)
    a = rng.randn(3, 4).astype("float32")
    b = rng.randn(4).astype("float32")
    raw, opt = _both(lambda x, y: F.log(F.exp(x) + F.exp(y)), mge.tensor(a), mge.tensor(b))
    ref = np.logaddexp(a.astype("float64"), b.astype("float64"))
    np.testing.assert_allclose(opt, ref, rtol=1e-6)
    np.testing.assert_allclose(raw, ref, rtol=1e-5)
    assert opt.shape == (3, 4)


def test_log_exp_is_the_identity():
    x = mge.tensor([100.0, -3.0], dtype="float32")  # exp(100) overflows float32
    raw, opt = _both(lambda x: F.log(F.exp(x)), x)
    assert np.isinf(raw[0])
    np.testing.assert_array_equal(opt, [100.0, -3.0])


def test_log1p_and_expm1_with_captured_constants():
    x = mge.tensor([1e-8, 0.5], dtype="float32")
    one = mge.tensor(1.0)
    _, opt = _both(lambda x: F.log(one + x), x)
    np.testing.assert_allclose(opt, np.log1p(np.float32([1e-8, 0.5])), rtol=1e-6)
    assert opt[0] > 0  # log(1 + 1e-8) is 0 in float32; log1p is not
    _, opt = _both(lambda x: F.exp(x) - one, x)
    np.testing.assert_allclose(opt, np.expm1(np.float32([1e-8, 0.5])), rtol=1e-6)
    assert opt[0] > 0


def test_identities_with_captured_constants():
    x = mge.tensor([np.inf, -2.0, 3.0], dtype="float32")
    zero, one = mge.tensor(0.0), mge.tensor(1.0)
    raw, opt = _both(lambda x: x * zero, x)
    assert np.isnan(raw[0])
    np.testing.assert_array_equal(opt, np.zeros(3, "float32"))
    _, opt = _both(lambda x: (x + zero) * one, x)
    np.testing.assert_array_equal(opt, [np.inf, -2.0, 3.0])
    _, opt = _both(lambda x: x ** zero, x)
    np.testing.assert_array_equal(opt, np.ones(3, "float32"))
    _, opt = _both(lambda x: F.floor_div(x, one), mge.tensor([1.5, -1.5], dtype="float32"))
    np.testing.assert_array_equal(opt, [1.0, -2.0])


def test_constants_not_captured_are_not_assumed():
    # without capture_as_const a captured tensor may change between calls: never simplified
    x = mge.tensor([np.inf], dtype="float32")
    zero = mge.tensor(0.0)
    f = trace(lambda x: x * zero, symbolic=True, opt_level=1)
    assert np.isnan(f(x).numpy()[0])
    assert np.isnan(f(x).numpy()[0])


def test_a_shape_changing_rewrite_is_not_taken():
    # a + 0 where the constant broadcasts a to a larger shape keeps the add
    x = mge.tensor([1.0, 2.0], dtype="float32")
    zeros = mge.tensor(np.zeros((3, 2), "float32"))
    raw, opt = _both(lambda x: x + zeros, x)
    np.testing.assert_array_equal(opt, np.broadcast_to([1.0, 2.0], (3, 2)))
    assert opt.shape == raw.shape == (3, 2)


@pytest.mark.parametrize("level", [0, 1, 2])
def test_training_step_unchanged_by_simplification(level):
    # an MLP step has nothing to simplify: every opt_level gives the eager bits
    rng = np.random.RandomState(1)
    w0 = rng.randn(4, 3).astype("float32")
    x = mge.tensor(rng.randn(5, 4).astype("float32"))

    def step(w, x):
        return F.relu(F.matmul(x, w)).sum()

    f = trace(step, symbolic=True, opt_level=level)
    w = mge.tensor(w0)
    np.testing.assert_array_equal(f(w, x).numpy(), step(w, x).numpy())
    np.testing.assert_array_equal(f(w, x).numpy(), step(w, x).numpy())


@pytest.mark.parametrize("level", [0, 1])
def test_dump_writes_the_simplified_graph(level):
    import io

    f = trace(lambda x: F.log(F.exp(x)) * 2, symbolic=True, opt_level=level,
              capture_as_const=True)
    x = mge.tensor([100.0, -3.0], dtype="float32")
    traced = f(x).numpy()
    buf = io.BytesIO()
    result = f.dump(buf, arg_names=["x"])
    # the ops: exp, log and mul recorded; at opt_level 1 the file holds the mul only
    assert result.nr_opr == (1 + 1 + 3 if level == 0 else 1 + 1 + 1)
    buf.seek(0)
    loaded = mge.jit.load(buf)
    np.testing.assert_array_equal(loaded(x).numpy(), traced)
    y = np.float32([1.5, 2.0])
    expect = np.log(np.exp(y)) * 2 if level == 0 else y * 2
    np.testing.assert_array_equal(loaded(mge.tensor(y)).numpy(), expect)
