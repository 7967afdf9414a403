"""The members of MegEngine's Python Tensor that mge adds in mge/tensor.py."""
import math
import warnings

import numpy as np
import pytest

import mge


def test_tuple_shape_and_isscalar():
    x = mge.tensor(np.zeros((2, 3), np.float32))
    assert x._tuple_shape == (2, 3) and isinstance(x._tuple_shape, tuple)
    assert not x._isscalar() and mge.tensor(1.0)._isscalar()
    p = mge.Parameter([1.0, 2.0])
    assert p._tuple_shape == (2,)


def test_dev_tensor():
    x = mge.tensor([1.0, 2.0])
    d = x._dev_tensor()
    assert d.shape == (2,) and d.dtype == np.float32 and d.comp_node == x.device
    np.testing.assert_array_equal(d.numpy(), [1.0, 2.0])


def test_set_value_and_reset_zero():
    p = mge.Parameter([1.0, 2.0])
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        p.reset_zero()
        np.testing.assert_array_equal(p.numpy(), [0.0, 0.0])
        p.set_value(np.array([3.0, 4.0], np.float32))
    np.testing.assert_array_equal(p.numpy(), [3.0, 4.0])
    assert isinstance(p, mge.Parameter)
    assert sum(issubclass(i.category, DeprecationWarning) for i in w) == 2


def test_format():
    x = mge.tensor(np.ones((1, 2, 3, 3), np.float32))
    assert x.format == "default"
    x.format = "nhwc"
    assert x.format == "nhwc"
    with pytest.raises(ValueError):
        x.format = "weird"


def test_qparams():
    x = mge.tensor([1.0])
    q = x.qparams
    assert q.scale is None and q.zero_point is None and q.mode.name == "SYMMERTIC"
    assert x._qparams is q
    from mge.core.tensor.qparams import create_qparams
    x.qparams = create_qparams(scale=mge.tensor(0.5))
    assert x.qparams.scale.item() == 0.5


def test_dlpack_and_math_dunders():
    x = mge.tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    y = np.from_dlpack(x)
    np.testing.assert_array_equal(y, x.numpy())
    assert x.__dlpack_device__() == (1, 0)
    s = mge.tensor(2.5)
    assert math.floor(s) == 2 and math.ceil(s) == 3 and math.trunc(mge.tensor(-2.5)) == -2


def test_requires_grad_reserved():
    x = mge.tensor([1.0])
    with pytest.raises(AttributeError):
        x.requires_grad
    with pytest.raises(AttributeError):
        x.requires_grad = True


def test_astype_between_quantized_scales():
    from mge.core.tensor.dtype import get_scale, qint8
    x = mge.tensor(np.array([1, 2, 3], dtype=np.float32))
    y = x.astype(qint8(0.1))
    z = y.astype(qint8(0.2))
    assert get_scale(y.dtype) == pytest.approx(0.1) and get_scale(z.dtype) == pytest.approx(0.2)
    assert y.astype(qint8(0.1)) is y


def test_getnewargs_getstate_and_copies_share_qparams():
    import copy
    x = mge.tensor([1, 2, 3], dtype=np.float32)
    args = x.__getnewargs__()
    assert len(args) == 3 and np.all(args[0] == x.numpy()) and args[1] == x.dtype
    assert args[2] == x.device.logical_name
    assert x.__getstate__() == {}
    x.qparams.scale = mge.tensor(1.0)
    assert list(x.__getstate__()) == ["qparams"]
    x2 = copy.copy(x)
    assert x2.qparams is x.qparams
    x3 = copy.deepcopy(x)
    assert x3.qparams is not x.qparams and x3.qparams.scale.numpy() == 1.0


def test_none_operand_message():
    with pytest.raises(TypeError) as e:
        mge.tensor(1.0) + None
    assert str(e.value) == "the operand is None and is not supported."
    with pytest.raises(TypeError, match="the operand is None"):
        None * mge.tensor(1.0)


def test_builtin_op_parameters_settable():
    from mge.core._imperative_rt.core2 import apply
    from mge.core.ops.builtin import Elemwise, ParamPackSplit
    op = Elemwise(Elemwise.Mode.ADD)
    op.mode = "mul"
    assert op.mode == Elemwise.Mode.MUL and op == Elemwise(Elemwise.Mode.MUL)
    (y,) = apply(op, mge.tensor([2.0]), mge.tensor([3.0]))
    assert y.numpy()[0] == 6.0
    p = ParamPackSplit()
    p.offsets = [0, 1]
    assert p.offsets == [0, 1]
    with pytest.raises(AttributeError):
        op.no_such_param = 1


def test_make_backward_graph_masks_and_runs_the_rule():
    # MegEngine's masks over (inputs, outputs, output grads); the backward runs mge's rule
    from mge.core._imperative_rt import TensorAttr, imperative
    from mge.core.ops.builtin import Elemwise, Reshape
    M = Elemwise.Mode

    def attrs(*shapes):
        return [TensorAttr(shape=s, dtype="float32", comp_node="xpux") for s in shapes]

    g, save, has = imperative.make_backward_graph(Elemwise(M.RELU), attrs(None), [True], [True])
    assert save == [False, True, True] and has == [True]  # relu reads its output (MegEngine's)
    rng = np.random.RandomState(3)
    a, b, d = rng.randn(2, 3).astype("float32"), rng.randn(2, 1).astype("float32"), \
        rng.randn(2, 3).astype("float32")
    (dx,) = g(mge.tensor(np.maximum(a, 0)), mge.tensor(d))
    np.testing.assert_array_equal(dx.numpy(), d * (a > 0))
    g, save, has = imperative.make_backward_graph(Elemwise(M.MUL), attrs((2, 3), (2, 1)),
                                                  [True, True], [True])
    assert save == [True, True, False, True] and has == [True, True]  # as MegEngine's
    da, db = g(mge.tensor(a), mge.tensor(b), mge.tensor(d))
    np.testing.assert_allclose(da.numpy(), d * b, rtol=1e-6)
    np.testing.assert_allclose(db.numpy(), (d * a).sum(1, keepdims=True), rtol=1e-5)
    g, save, has = imperative.make_backward_graph(Elemwise(M.ADD), attrs((2, 1), (2, 3)),
                                                  [False, True], [True])
    assert save == [False, False, False, True] and has == [False, True]  # add reads no inputs
    (db,) = g(mge.tensor(d))
    np.testing.assert_array_equal(db.numpy(), d)
    _, save, has = imperative.make_backward_graph(Elemwise(M.ADD), [TensorAttr(dtype="int32")] * 2,
                                                  [True, True], [True])
    assert has == [False, False]  # integers get no gradient
    with pytest.raises(TypeError, match="expects 3 saved"):
        imperative.make_backward_graph(Elemwise(M.MUL), attrs(None, None), [True, True],
                                       [True])[0](mge.tensor(a))
    with pytest.raises(NotImplementedError, match="Reshape"):
        imperative.make_backward_graph(Reshape(), attrs(None), [True], [True])


def test_astype_quantizes_and_dequantizes():
    from mge.core.tensor import dtype as D
    rng = np.random.RandomState(5)
    data = (rng.random_sample((3, 4)) * 5 - 1).astype(np.float32)
    for name, dt in (("qint8", D.qint8(0.01)), ("quint8", D.quint8(0.01, 135)),
                     ("qint4", D.qint4(0.01)), ("quint4", D.quint4(0.01, 5)), ("qint1", D.qint1(0.01))):
        to = getattr(D, "convert_to_" + name)
        frm = getattr(D, "convert_from_" + name)
        q = mge.tensor(data).astype(dt)
        assert q.dtype.metadata == dt.metadata
        np.testing.assert_array_equal(q.numpy(), to(data, dt))
        f = mge.tensor(to(data, dt), dtype=dt).astype("float32")
        assert f.dtype == np.float32 and not f.dtype.metadata
        np.testing.assert_allclose(f.numpy(), frm(to(data, dt)), rtol=1e-6)
    # between scales: requantized, ties rounded away from zero (MegEngine's TypeCvt)
    q1 = mge.tensor(np.array([0.1, 0.3, -0.1, 0.25, 0.35, -0.25], np.float32)).astype(D.qint8(0.1))
    np.testing.assert_array_equal(q1.numpy(), [1, 3, -1, 3, 4, -3])
    np.testing.assert_array_equal(q1.astype(D.qint8(0.2)).numpy(), [1, 2, -1, 2, 2, -2])


@pytest.fixture
def _format_layer():
    from mge.core import _format
    yield
    _format.uninstall()  # leave the stack as other tests expect it


def test_tensor_format_label_propagates(_format_layer):
    import mge.functional as F
    data = np.arange(24, dtype=np.float32).reshape(1, 2, 3, 4)
    a = mge.tensor(data, format="nhwc")
    assert a.format == "nhwc" and mge.tensor(a).format == "nhwc"
    assert mge.tensor(data).format == "default"
    ones = F.ones((1, 2, 3, 4))
    y = a * ones + a / 2
    assert y.format == "nhwc"
    np.testing.assert_array_equal(y.numpy(), data * 1.5)  # values are the logical ones
    assert F.concat([a, ones], axis=1).format == "nhwc"
    assert F.reshape(a, (1, 2, 6, 2)).format == "nhwc"
    assert F.reshape(a, (1, 24)).format == "default"
    assert F.transpose(a, (2, 3, 0, 1)).format == "default"
    assert F.nn.pad(a, ((1, 1),), mode="constant").format == "default"
    assert F.max_pool2d(a, 2).format == "nhwc"
    assert (ones + 1).format == "default"
    b = mge.tensor(a)
    b[...] = mge.tensor(data, format="nchw")
    assert b.format == "nchw"
    b.format = "nhwc"
    b[:, :1] = 0
    assert b.format == "nhwc"
    b += 1
    assert b.format == "nhwc"
    b.format = "default"
    assert b.format == "default"
    with pytest.raises(ValueError):
        mge.tensor(data, format="nc4hw4x")


def test_bfloat16_tensors_hold_and_compute():
    # MegEngine tensors take bfloat16 (ml_dtypes' numpy type); values round to bfloat16 on the way in
    ml_dtypes = pytest.importorskip("ml_dtypes")
    from mge.core.tensor.dtype import bfloat16, is_bfloat16
    import mge.functional as F
    assert bfloat16 == np.dtype(ml_dtypes.bfloat16)
    data = np.array([-3.4, 1.394683, 2.323497, -7.439948, -5.2397], dtype=bfloat16)
    x = mge.Tensor(data, dtype=bfloat16)
    assert x.dtype == bfloat16 and is_bfloat16(x.dtype) and x.numpy().dtype == bfloat16
    np.testing.assert_allclose(x.numpy().astype(np.float32),
                               [-3.40625, 1.398438, 2.328125, -7.4375, -5.25], atol=1e-6)
    assert mge.Tensor(data).dtype == bfloat16  # from the array's own dtype
    np.testing.assert_array_equal((x + x).numpy(), data + data)
    assert (x + x).dtype == bfloat16 and F.sum(x).dtype == bfloat16
    np.testing.assert_allclose(F.sum(x).numpy().astype(np.float32),
                               np.float32(data.sum()), rtol=1e-2)
    y = x + mge.Tensor(np.ones(5, np.float32))  # meets float32 in float32, as in MegEngine
    assert y.dtype == np.float32
    np.testing.assert_allclose(y.numpy(), data.astype(np.float32) + 1)
    f = x.astype("float32")
    assert f.dtype == np.float32
    np.testing.assert_array_equal(f.numpy(), data.astype(np.float32))
    back = f.astype(bfloat16)
    assert back.dtype == bfloat16
    np.testing.assert_array_equal(back.numpy(), data)


def test_bfloat16_stays_bfloat16_in_float_only_modes():
    # exp/log/sqrt... of bfloat16 data compute in bfloat16, as MegEngine's do (integers go to
    # float32)
    pytest.importorskip("ml_dtypes")
    from mge.core.tensor.dtype import bfloat16
    import mge.functional as F
    data = np.array([0.5, 1.0, 4.0], dtype=bfloat16)
    x = mge.Tensor(data, dtype=bfloat16)
    for fn, ref in ((F.exp, np.exp), (F.log, np.log), (F.sqrt, np.sqrt)):
        y = fn(x)
        assert y.dtype == bfloat16, fn
        np.testing.assert_allclose(y.numpy().astype(np.float32),
                                   ref(data.astype(np.float64)), rtol=1e-2)
    assert F.exp(mge.Tensor([1, 2])).dtype == np.float32
