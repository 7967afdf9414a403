"""Shape ops of ``mge.functional`` against numpy."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import mge
import mge.functional as F

DTYPES = ["float32", "int32", "int8", "uint8", "bool", "float16"]


from helpers import arr, check, raises_at_run  # noqa: E402


# -- reshape / flatten / broadcast ----------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
def test_reshape_dtypes(dtype):
    a = arr((2, 3, 4), dtype)
    x = mge.tensor(a)
    check(F.reshape(x, (4, -1)), a.reshape(4, -1))
    check(x.reshape(6, 4), a.reshape(6, 4))
    check(x.reshape((24,)), a.reshape(24))


def test_reshape_float_shape_tensor():
    # MegEngine's Reshape takes a float shape tensor (a float matmul's output) when it holds whole
    # numbers; a bad target is an op error, a RuntimeError, at any async level
    a = arr((1, 4))
    c = F.matmul(mge.tensor([1.0, 1.0]), mge.tensor(np.eye(2, dtype="float32") * 2))
    check(F.reshape(mge.tensor(a), c), a.reshape(2, 2))
    with pytest.raises(RuntimeError):
        F.reshape(mge.tensor(a), mge.tensor([1.0, 1.0]))
    with pytest.raises(TypeError, match="whole numbers"):
        F.reshape(mge.tensor(a), mge.tensor([2.5, 1.6]))
    with pytest.raises(TypeError, match="must be integer"):
        F.broadcast_to(mge.tensor(a), mge.tensor([2.0, 4.0]))


def test_reshape_tensor_shape_scalar_and_empty():
    a = arr((2, 6))
    check(F.reshape(mge.tensor(a), mge.tensor([3, 4])), a.reshape(3, 4))
    check(F.reshape(mge.tensor(5.0), (1, 1)), np.full((1, 1), 5, np.float32))
    check(F.reshape(mge.tensor([[7.0]]), ()), np.float32(7))
    e = np.zeros((0, 3), np.float32)
    check(F.reshape(mge.tensor(e), (3, 0)), e.reshape(3, 0))


def test_reshape_errors():
    x = mge.tensor(arr((3, 4)))
    with pytest.raises(ValueError, match=r"Reshape.*\(3, 4\)"):
        F.reshape(x, (5, -1))
    with pytest.raises(ValueError, match="Reshape.*cannot reshape"):
        F.reshape(x, (5, 2))
    with pytest.raises(ValueError, match="at most one -1"):
        F.reshape(x, (-1, -1))
    with pytest.raises(TypeError, match="reshape"):
        F.reshape(x, (2.5, 2))


def test_flatten():
    a = arr((2, 3, 4, 5))
    x = mge.tensor(a)
    check(F.flatten(x), a.reshape(-1))
    check(F.flatten(x, 1), a.reshape(2, -1))
    check(F.flatten(x, 1, 2), a.reshape(2, 12, 5))
    check(F.flatten(x, -2), a.reshape(2, 3, 20))
    check(x.flatten(), a.reshape(-1))
    check(F.flatten(mge.tensor(3.0)), np.array([3.0], np.float32))
    check(F.flatten(mge.tensor(np.zeros((2, 0, 3), np.float32)), 1), np.zeros((2, 0), np.float32))
    with pytest.raises(ValueError, match="flatten"):
        F.flatten(x, 3, 1)


def test_broadcast_to():
    a = arr((3, 1))
    x = mge.tensor(a)
    check(F.broadcast_to(x, (2, 3, 4)), np.broadcast_to(a, (2, 3, 4)))
    check(F.broadcast_to(x, (2, None, 5)), np.broadcast_to(a, (2, 3, 5)))
    check(F.broadcast_to(mge.tensor(1.5), (2, 2)), np.full((2, 2), 1.5, np.float32))
    check(F.broadcast_to(x, (3, 0)), np.zeros((3, 0), np.float32))
    with pytest.raises(ValueError, match=r"Broadcast.*\(3, 1\).*\(4, 4\)"):
        F.broadcast_to(x, (4, 4))
    with pytest.raises(ValueError, match="Broadcast"):
        F.broadcast_to(mge.tensor(arr((2, 3))), (3,))


# -- axes -----------------------------------------------------------------------------------------
def test_transpose_and_swapaxes():
    a = arr((2, 3, 4), "int32")
    x = mge.tensor(a)
    check(F.transpose(x, (2, 0, 1)), a.transpose(2, 0, 1))
    check(F.transpose(x, (1, "x", 0, 2)), a.transpose(1, 0, 2)[:, None])
    check(F.transpose(mge.tensor(a[0]), ("x", 1, "x", 0)), a[0].T[None, :, None])
    check(x.transpose(), a.transpose())
    check(x.T, a.T)
    check(x.transpose(0, 2, 1), a.transpose(0, 2, 1))
    check(F.swapaxes(x, 0, -1), np.swapaxes(a, 0, -1))
    with pytest.raises(ValueError, match="Dimshuffle.*permutation"):
        F.transpose(x, (0, 0, 1))
    with pytest.raises(ValueError, match="Dimshuffle"):
        F.transpose(x, (0, 1))
    with pytest.raises(ValueError, match="swapaxes"):
        F.swapaxes(x, 0, 3)


def test_expand_dims_and_squeeze():
    a = arr((2, 3))
    x = mge.tensor(a)
    check(F.expand_dims(x, 0), a[None])
    check(F.expand_dims(x, -1), a[..., None])
    check(F.expand_dims(x, (0, 3)), np.expand_dims(a, (0, 3)))
    check(F.expand_dims(mge.tensor(2.0), 0), np.array([2.0], np.float32))
    b = np.zeros((1, 2, 1, 3, 1), np.float32)
    y = mge.tensor(b)
    check(F.squeeze(y), np.squeeze(b))
    check(F.squeeze(y, 2), np.squeeze(b, 2))
    check(F.squeeze(y, (0, -1)), np.squeeze(b, (0, -1)))
    check(F.squeeze(mge.tensor([[1.0]])), np.float32(1.0))
    with pytest.raises(ValueError, match="RemoveAxis.*size 2"):
        F.squeeze(y, 1)
    with pytest.raises(ValueError, match="AddAxis"):
        F.expand_dims(x, 5)


# -- concat / stack / split -----------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
def test_concat_stack_dtypes(dtype):
    a, b = arr((2, 3), dtype, 1), arr((2, 3), dtype, 2)
    x, y = mge.tensor(a), mge.tensor(b)
    check(F.concat([x, y]), np.concatenate([a, b]))
    check(F.concat([x, y, x], axis=-1), np.concatenate([a, b, a], -1))
    check(F.stack([x, y]), np.stack([a, b]))
    check(F.stack([x, y], axis=2), np.stack([a, b], 2))


def test_concat_stack_misc():
    a = arr((2, 3))
    x = mge.tensor(a)
    assert F.concat([x]) is x
    check(F.concat([x, mge.tensor(np.zeros((0, 3), np.float32))]), a)
    check(F.stack([mge.tensor(1.0), mge.tensor(2.0)]), np.array([1.0, 2.0], np.float32))
    out = F.concat([x, mge.tensor(a.astype("int32"))])
    assert out.dtype == np.float32
    check(F.concat([x, x], device="cpu0"), np.concatenate([a, a]))
    with pytest.raises(ValueError, match=r"Concat.*except on axis 0.*\(2, 3\), \(2, 4\)"):
        F.concat([x, mge.tensor(arr((2, 4)))])
    with pytest.raises(ValueError, match="Concat.*axis 2 is out of range"):
        F.concat([x, x], axis=2)
    with pytest.raises(ValueError, match="Stack.*same shape"):
        F.stack([x, mge.tensor(arr((3, 2)))])
    with pytest.raises(ValueError, match="concat.*at least one"):
        F.concat([])


def test_split():
    a = arr((10, 4))
    x = mge.tensor(a)
    for got, ref in zip(F.split(x, 3), np.array_split(a, 3)):
        check(got, ref)
    for got, ref in zip(F.split(x, [2, 2, 7]), np.split(a, [2, 2, 7])):
        check(got, ref)
    for got, ref in zip(F.split(x, 2, axis=-1), np.split(a, 2, axis=-1)):
        check(got, ref)
    parts = F.split(x, [])
    assert len(parts) == 1
    check(parts[0], a)
    with pytest.raises(ValueError, match="cannot be split into 11 sections"):
        F.split(x, 11)
    with pytest.raises(ValueError, match="Invalid nsplits_or_secions"):
        F.split(x, [3, 1])
    with pytest.raises(ValueError, match="positive"):
        F.split(x, 0)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=1, max_size=4), st.data())
def test_concat_split_roundtrip(shape, data):
    axis = data.draw(st.integers(0, len(shape) - 1))
    n = data.draw(st.integers(1, 3))
    parts = [arr(shape, "float32", i) for i in range(n)]
    cat = F.concat([mge.tensor(p) for p in parts], axis=axis)
    check(cat, np.concatenate(parts, axis=axis))
    points = list(np.cumsum([p.shape[axis] for p in parts])[:-1])
    for got, ref in zip(F.split(cat, points, axis=axis), parts):
        check(got, ref)


# -- tile / repeat / roll -------------------------------------------------------------------------
def test_tile_repeat():
    a = arr((2, 3), "int32")
    x = mge.tensor(a)
    check(F.tile(x, (2, 3)), np.tile(a, (2, 3)))
    check(F.tile(x, (2, 1, 2)), np.tile(a, (2, 1, 2)))
    check(F.tile(x, (2,)), np.tile(a, (2,)))
    check(F.tile(x, (0, 2)), np.tile(a, (0, 2)))
    check(F.repeat(x, 2), np.repeat(a, 2))
    check(F.repeat(x, 3, axis=1), np.repeat(a, 3, axis=1))
    check(F.repeat(x, 2, axis=-2), np.repeat(a, 2, axis=-2))
    check(F.repeat(mge.tensor(1.0), 3), np.ones(3, np.float32))
    with pytest.raises(ValueError, match="Repeat.*axis 2"):
        F.repeat(x, 2, axis=2)
    with pytest.raises(ValueError, match="Tile.*non-negative"):
        F.tile(x, (-1, 1))


def test_roll():
    a = arr((3, 4))
    x = mge.tensor(a)
    check(F.roll(x, 1), np.roll(a, 1))
    check(F.roll(x, -5), np.roll(a, -5))
    check(F.roll(x, 1, 0), np.roll(a, 1, 0))
    check(F.roll(x, (1, -1), (0, 1)), np.roll(a, (1, -1), (0, 1)))
    check(F.roll(x, 2, (0, 1)), np.roll(a, 2, (0, 1)))
    check(F.roll(mge.tensor(np.zeros((0, 2), np.float32)), 1, 1), np.zeros((0, 2), np.float32))
    with pytest.raises(ValueError, match="Roll.*axis 2"):
        F.roll(x, 1, 2)


# -- where / cond_take ----------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "int32", "bool", "float16"])
def test_where_dtypes(dtype):
    m = arr((3, 4), "float32", 3) > 0
    a, b = arr((3, 4), dtype, 1), arr((3, 4), dtype, 2)
    check(F.where(mge.tensor(m), mge.tensor(a), mge.tensor(b)), np.where(m, a, b))


def test_where_broadcast_and_promote():
    m = arr((3, 1), "float32", 3) > 0
    a = arr((1, 4))
    out = F.where(mge.tensor(m), mge.tensor(a), mge.tensor(0))
    check(out, np.where(m, a, np.float32(0)))
    check(F.where(mge.tensor(True), mge.tensor(1.0), mge.tensor(2.0)), np.float32(1.0))
    with pytest.raises(TypeError, match="where: input y must be a tensor"):
        F.where(mge.tensor(m), mge.tensor(a), 0.0)
    with pytest.raises(TypeError, match="where: mask must be bool"):
        F.where(mge.tensor(a), mge.tensor(a), mge.tensor(a))
    with pytest.raises(ValueError, match="Where.*broadcast"):
        F.where(mge.tensor(m), mge.tensor(arr((2, 4))), mge.tensor(a))


def test_cond_take():
    a = arr((3, 4))
    m = a > 0
    v, i = F.cond_take(mge.tensor(m), mge.tensor(a))
    check(v, a[m])
    check(i, np.flatnonzero(m).astype(np.int32))
    v, i = F.cond_take(mge.tensor(np.zeros((2, 2), bool)), mge.tensor(a[:2, :2]))
    assert v.shape == (0,) and i.shape == (0,)
    with pytest.raises(ValueError, match="CondTake.*same shape"):
        F.cond_take(mge.tensor(m), mge.tensor(a[0]))
    with pytest.raises(TypeError, match="cond_take: mask must be bool"):
        F.cond_take(mge.tensor(a), mge.tensor(a))


# -- gather / scatter / diag ----------------------------------------------------------------------
def test_gather():
    a = arr((3, 4))
    x = mge.tensor(a)
    idx = np.array([[0, 0], [2, 1]], np.int32)
    check(F.gather(x, 1, mge.tensor(idx)), np.take_along_axis(a[:2, :], idx, 1))
    idx0 = np.array([[2, 0, 1, 1], [0, 0, 2, 1]], np.int32)
    check(F.gather(x, 0, mge.tensor(idx0)), np.take_along_axis(a[:, :4], idx0, 0))
    idx5 = np.array([[0, 3, 1, 1, 2]], np.int32)  # longer than the input along the axis
    check(F.gather(x, 1, mge.tensor(idx5)), np.take_along_axis(a[:1], idx5, 1))
    check(F.gather(x, -1, mge.tensor(idx)), np.take_along_axis(a[:2], idx, 1))
    with pytest.raises(ValueError, match="Gather.*index size 5 exceeds"):
        F.gather(x, 0, mge.tensor(idx5))
    with pytest.raises(TypeError, match="gather: index must be an integer"):
        F.gather(x, 0, mge.tensor(idx.astype("float32")))
    with pytest.raises(ValueError, match="Gather.*same number of dimensions"):
        F.gather(x, 0, mge.tensor([0, 1]))
    raises_at_run(IndexError, "Gather.*out of range",
                  lambda: F.gather(x, 1, mge.tensor([[0, 4]])).numpy())


def test_scatter():
    a = arr((3, 4))
    x = mge.tensor(a)
    idx = np.array([[0, 3], [2, 1]], np.int32)
    src = arr((2, 2), "float32", 5)
    ref = a.copy()
    np.put_along_axis(ref[:2], idx, src, 1)
    check(F.scatter(x, 1, mge.tensor(idx), mge.tensor(src)), ref)
    check(x, a)  # the input is not modified
    ref = a.copy()
    idx0 = np.array([[2, 0, 1, 0]], np.int32)
    np.put_along_axis(ref, idx0, src[:1, :1].repeat(4, 1), 0)
    check(F.scatter(x, 0, mge.tensor(idx0), mge.tensor(src[:1, :1].repeat(4, 1))), ref)
    with pytest.raises(ValueError, match="Scatter.*same shape"):
        F.scatter(x, 1, mge.tensor(idx), mge.tensor(arr((2, 3))))
    raises_at_run(IndexError, "Scatter.*out of range",
                  lambda: F.scatter(x, 0, mge.tensor([[5]]), mge.tensor([[1.0]])).numpy())


def test_diag():
    v = arr((3,), "int32")
    m = arr((3, 4))
    for k in (-2, 0, 1, 3):
        check(F.diag(mge.tensor(v), k), np.diag(v, k))
        check(F.diag(mge.tensor(m), k), np.diag(m, k))
    check(F.diag(mge.tensor(m), 10), np.diag(m, 10))
    with pytest.raises(ValueError, match="Diag.*1-d or 2-d"):
        F.diag(mge.tensor(arr((2, 2, 2))))


def test_meshgrid():
    a, b, c = np.arange(2, dtype=np.float32), np.arange(3, dtype=np.float32), np.ones(4, np.float32)
    for indexing in ("xy", "ij"):
        got = F.meshgrid(mge.tensor(a), mge.tensor(b), mge.tensor(c), indexing=indexing)
        for g, r in zip(got, np.meshgrid(a, b, c, indexing=indexing)):
            check(g, r)
    with pytest.raises(ValueError, match="meshgrid: indexing"):
        F.meshgrid(mge.tensor(a), indexing="yx")
    with pytest.raises(TypeError, match="meshgrid.*same dtype"):
        F.meshgrid(mge.tensor(a), mge.tensor([1, 2]))


def test_copy():
    a = arr((2, 2))
    x = mge.tensor(a)
    y = F.copy(x)
    check(y, a)
    assert y is not x
    check(F.copy(x, "cpu0"), a)


def test_complex_tensors():
    # MegEngine's complex64 tensors: made from float parts, moved by shape and indexing ops,
    # added and multiplied, taken apart by real/imag; other ops refuse them (RuntimeError too)
    from mge.core._imperative_rt.core2 import create_complex, get_imag, get_real
    rng = np.random.RandomState(0)
    re_, im_ = rng.rand(2, 3).astype("float32"), rng.rand(2, 3).astype("float32")
    ref = re_ + 1j * im_
    z = F.complex(mge.tensor(re_), mge.tensor(im_))
    assert z.dtype == np.complex64 and z.numpy().dtype == np.complex64
    np.testing.assert_array_equal(z.numpy(), ref.astype(np.complex64))
    np.testing.assert_array_equal(create_complex(mge.tensor(re_), mge.tensor(im_)).numpy(),
                                  z.numpy())
    np.testing.assert_array_equal(F.real(z).numpy(), re_)
    np.testing.assert_array_equal(get_imag(z).numpy(), im_)
    assert F.imag(z).dtype == np.float32 and get_real(z).dtype == np.float32
    np.testing.assert_allclose((z * z + z - z).numpy(), ref * ref, rtol=1e-6)
    np.testing.assert_allclose((z * mge.tensor(re_)).numpy(), ref * re_, rtol=1e-6)
    np.testing.assert_array_equal(z.reshape(3, 2).numpy(), ref.reshape(3, 2).astype("complex64"))
    np.testing.assert_array_equal(z[1, ::2].numpy(), ref[1, ::2].astype("complex64"))
    np.testing.assert_array_equal(F.concat([z, z.T.T]).numpy(),
                                  np.concatenate([ref, ref]).astype("complex64"))
    np.testing.assert_array_equal(F.broadcast_to(z[:1], (4, 3)).numpy(),
                                  np.broadcast_to(ref[:1], (4, 3)).astype("complex64"))
    r, a = rng.rand(4).astype("float32"), rng.rand(4).astype("float32") * 6
    np.testing.assert_allclose(F.polar(mge.tensor(r), mge.tensor(a)).numpy(),
                               r * np.cos(a) + 1j * r * np.sin(a), rtol=1e-5, atol=1e-6)
    c = mge.tensor(np.array([1 + 2j, 3 - 1j], np.complex64))  # from complex64 data
    assert c.dtype == np.complex64
    for bad in (lambda: F.sum(z), lambda: F.exp(z), lambda: F.abs(z), lambda: z.astype("float32"),
                lambda: F.matmul(z, z.T), lambda: F.relu(z)):
        with pytest.raises(RuntimeError, match="complex"):
            bad()
    with pytest.raises(TypeError, match="complex tensor"):
        F.real(mge.tensor(1.0))
    with pytest.raises(TypeError, match="float tensor"):
        F.complex(mge.tensor([1, 2]), mge.tensor([1.0, 2.0]))


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=0, max_size=4), st.sampled_from(DTYPES), st.data())
def test_transpose_reshape_broadcast_random(shape, dtype, data):
    a = arr(shape, dtype)
    x = mge.tensor(a)
    perm = data.draw(st.permutations(range(len(shape))))
    check(F.transpose(x, tuple(perm)), a.transpose(perm))
    check(F.reshape(x, (-1,)) if a.size else F.reshape(x, (0,)), a.reshape(-1))
    lead = tuple(data.draw(st.lists(st.integers(0, 3), max_size=2)))
    target = lead + tuple(data.draw(st.sampled_from([s, 1 if s == 1 else s])) for s in shape)
    check(F.broadcast_to(x, target), np.broadcast_to(a, target))
    check(F.expand_dims(x, 0), a[None])
    check(F.squeeze(F.expand_dims(x, -1), -1), a)


def test_broadcast_error_is_a_value_error_and_a_runtime_error():
    """A shape that cannot be broadcast: ``ValueError`` (numpy) and ``RuntimeError`` (MegEngine),
    naming the op and shapes."""
    x = F.ones((2, 1, 3))
    for target in [(2, 3, 4), (4, 1, 3)]:
        with pytest.raises(ValueError, match=r"Broadcast: cannot broadcast shape \(2, 1, 3\)"):
            F.broadcast_to(x, target)
        with pytest.raises(RuntimeError):
            F.broadcast_to(x, target)


def test_split_bad_sections_message_is_megengine_s():
    x = mge.tensor(np.zeros((2, 5), "float32"))
    with pytest.raises(ValueError) as e:
        F.split(x, [3, 2, 5], axis=1)
    assert str(e.value) == "Invalid nsplits_or_secions: [3, 2, 5]"


@pytest.mark.parametrize("symbolic", [False, True])
def test_broadcast_to_a_shape_tensor_inside_a_trace(symbolic):
    # the shape tensor stays an input of the op (MegEngine's Broadcast): each call may broadcast
    # to another shape without a TraceError; None keeps the input's size
    from mge.autodiff import GradManager
    from mge.jit import trace
    a = arr((1, 3, 1))

    @trace(symbolic=symbolic)
    def f(x, shape):
        return F.broadcast_to(x, shape)

    for target in [(2, 3, 3), (3, 3, 3), (1, 3, 1)]:
        y = f(mge.tensor(a), mge.tensor(target))
        assert y._tuple_shape == target
        check(y, np.broadcast_to(a, target))
    for target in [(2, None, 3), (3, None, 3)]:
        y = f(mge.tensor(a), tuple(None if s is None else mge.tensor(s) for s in target))
        want = tuple(3 if s is None else s for s in target)
        check(y, np.broadcast_to(a, want))

    @trace(symbolic=symbolic)
    def g(x, shape):
        # (a reduction of the result inside a symbolic trace would need its shape while recording)
        return F.broadcast_to(x * 2, shape)

    x = mge.Parameter(a)
    gm = GradManager().attach([x])
    for n in (2, 4):
        with gm:
            gm.backward(g(x, mge.tensor((n, 3, 5))).sum())
        check(x.grad, np.full((1, 3, 1), 2.0 * n * 5, np.float32))
        x.grad = None


def test_broadcast_to_a_shape_tensor_checks_the_shape_when_it_runs():
    from mge.jit import trace

    @trace(symbolic=False)
    def f(x, shape):
        return F.broadcast_to(x, shape)

    check(f(mge.tensor(arr((3,))), mge.tensor((2, 3))), np.broadcast_to(arr((3,)), (2, 3)))
    with pytest.raises(RuntimeError, match="cannot broadcast"):
        f(mge.tensor(arr((3,))), mge.tensor((2, 4))).numpy()
    with pytest.raises(TypeError, match="integer"):
        f(mge.tensor(arr((3,))), mge.tensor((2.0, 3.0)))


def test_expand_dims_with_a_repeated_axis_adds_two():
    # MegEngine inserts the sorted axes one at a time: (0, 0) adds two leading axes
    x = np.arange(6, dtype="float32").reshape(2, 3)
    y = F.expand_dims(mge.tensor(x), [0, 0])
    assert y.shape == (1, 1, 2, 3)
    np.testing.assert_array_equal(y.numpy(), x.reshape(1, 1, 2, 3))
    assert F.expand_dims(mge.tensor(x), [2, 0]).shape == (1, 2, 1, 3)
    with pytest.raises(ValueError, match=r"AddAxis: invalid axis \(0, 5\)"):
        F.expand_dims(mge.tensor(x), [0, 5])
