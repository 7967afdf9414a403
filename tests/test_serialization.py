"""mge.save / mge.load: tensors keep value, dtype, device, class and name; map_location."""
import copy
import io
import pickle

import numpy as np
import pytest

import mge
import mge.optimizer as optim


def _round_trip(obj, **load_kw):
    buf = io.BytesIO()
    mge.save(obj, buf)
    buf.seek(0)
    return mge.load(buf, **load_kw)


@pytest.mark.parametrize("value,dtype", [
    ([[1.5, -2.0], [3.0, 4.0]], "float32"), ([1, 2, 3], "int32"), ([True, False], "bool"),
    (2.5, "float16"), (np.arange(6).reshape(2, 3), "float64"), ([7], "uint8"), ([], "float32"),
])
def test_tensor_round_trip(value, dtype):
    t = mge.tensor(value, dtype=dtype)
    r = _round_trip(t)
    assert type(r) is mge.Tensor and r is not t
    assert r.dtype == np.dtype(dtype) and r.shape == t.shape and r.device == t.device
    np.testing.assert_array_equal(r.numpy(), t.numpy())


def test_parameter_keeps_class_and_name_and_drops_grad():
    p = mge.Parameter([1.0, 2.0], name="fc.weight")
    p.grad = mge.tensor([3.0, 4.0])
    r = _round_trip(p)
    assert type(r) is mge.Parameter and r.name == "fc.weight"
    assert r.grad is None
    np.testing.assert_array_equal(r.numpy(), [1.0, 2.0])


def test_nested_containers_and_shared_tensors():
    a = mge.tensor([1.0])
    obj = {"layer": {"w": mge.Parameter(np.ones((2, 3), "float32")), "b": [a, a]},
           "meta": ("x", 3, None), "arr": np.arange(3)}
    r = _round_trip(obj)
    assert r["meta"] == ("x", 3, None)
    np.testing.assert_array_equal(r["arr"], np.arange(3))
    assert r["layer"]["b"][0] is r["layer"]["b"][1]  # pickle's memo keeps sharing
    np.testing.assert_array_equal(r["layer"]["w"].numpy(), np.ones((2, 3)))


def test_file_name_and_pickle_protocol(tmp_path):
    path = str(tmp_path / "obj.pkl")
    mge.save({"t": mge.tensor([1, 2])}, path, pickle_protocol=2)
    with open(path, "rb") as f:
        assert f.read(2) == b"\x80\x02"
    assert mge.load(path)["t"].numpy().tolist() == [1, 2]


def test_custom_pickle_module():
    calls = []

    class Recorder:
        @staticmethod
        def dump(obj, f, protocol):
            calls.append(("dump", protocol))
            pickle.dump(obj, f, protocol)

        @staticmethod
        def load(f):
            calls.append(("load",))
            return pickle.load(f)

    buf = io.BytesIO()
    mge.save(mge.tensor([1.0]), buf, pickle_module=Recorder, pickle_protocol=4)
    buf.seek(0)
    assert mge.load(buf, pickle_module=Recorder).numpy().tolist() == [1.0]
    assert calls == [("dump", 4), ("load",)]


def test_map_location_forms():
    obj = {"a": mge.tensor([1.0], device="cpu0"), "b": mge.tensor([2.0], device="cpu1"),
           "c": mge.tensor([3.0])}  # the default device, saved as xpux
    r = _round_trip(obj)
    assert [str(r[k].device) for k in "abc"] == ["cpu0:0", "cpu1:0", "xpux:0"]

    r = _round_trip(obj, map_location="cpu2")
    assert {str(r[k].device) for k in "abc"} == {"cpu2:0"}

    r = _round_trip(obj, map_location={"cpu1": "cpu3", "xpux": "cpu0"})
    assert [str(r[k].device) for k in "abc"] == ["cpu0:0", "cpu3:0", "cpu0:0"]

    seen = []
    r = _round_trip(obj, map_location=lambda dev: (seen.append(dev), "cpu5")[1])
    assert sorted(seen) == ["cpu0:0", "cpu1:0", "xpux:0"]
    assert {str(r[k].device) for k in "abc"} == {"cpu5:0"}
    np.testing.assert_array_equal(r["b"].numpy(), [2.0])

    # the mapping lasts for one load only
    assert str(_round_trip(obj)["b"].device) == "cpu1:0"


def test_map_location_errors():
    buf = io.BytesIO()
    mge.save(mge.tensor([1.0]), buf)
    for bad, msg in [({"foo": "cpu0"}, "Invalid locator_map key value foo"),
                     ({"cpu0": "bar"}, "Invalid locator_map key value bar"),
                     (3, "map_location should be str, dict or function")]:
        buf.seek(0)
        with pytest.raises(AssertionError, match=msg):
            mge.load(buf, map_location=bad)
    with pytest.raises(AssertionError, match="does not support write"):
        mge.save(1, 3)


def test_optimizer_state_dict_round_trip_continues():
    p = mge.Parameter([1.0, -1.0])
    opt = optim.Adam([p], lr=0.1)
    p.grad = mge.tensor([0.5, 0.25])
    opt.step()
    sd = _round_trip(opt.state_dict(keep_var=True))
    assert isinstance(sd["state"][0]["exp_avg"], mge.Tensor)
    q = mge.Parameter(p.numpy())
    opt2 = optim.Adam([q], lr=0.5)
    opt2.load_state_dict(sd)
    for o, t in ((opt, p), (opt2, q)):
        t.grad = mge.tensor([0.5, 0.25])
        o.step()
    np.testing.assert_array_equal(p.numpy(), q.numpy())


def test_plain_pickle_and_deepcopy_use_the_same_rule():
    p = mge.Parameter([1.0, 2.0], name="w")
    r = pickle.loads(pickle.dumps(p))
    assert type(r) is mge.Parameter and r.name == "w"
    d = copy.deepcopy({"p": p})
    assert type(d["p"]) is mge.Parameter and d["p"] is not p
    np.testing.assert_array_equal(d["p"].numpy(), [1.0, 2.0])


def test_qparams_and_quantized_dtype_survive_save_load():
    import io
    from mge.core.tensor.dtype import get_scale, qint8
    a = mge.tensor(0)
    a.qparams.scale = mge.tensor(1.0)
    q = mge.tensor(np.array([1.0, 2.0], np.float32)).astype(qint8(0.25))
    buf = io.BytesIO()
    mge.save([a, q], buf)
    buf.seek(0)
    b, q2 = mge.load(buf)
    assert b.qparams.scale.numpy() == 1.0
    assert get_scale(q2.dtype) == pytest.approx(0.25)


def test_load_megengine_pickle_of_a_tensor():
    # MegEngine pickles Tensor.__new__(Tensor, value, dtype, device, ...) plus its state
    import io
    import pickle

    class Tensor:  # stands for megengine.tensor.Tensor when the pickle is written
        def __reduce_ex__(self, proto):
            import copyreg
            return (copyreg.__newobj__, (Tensor, np.array([1, 2, 3], np.int8), np.dtype("int8"),
                                         "cpu0:0", False, False, None, "default"),
                    {"qdict": {"mode": None, "scale": None, "zero_point": None}})
    Tensor.__module__ = "megengine.tensor"
    Tensor.__qualname__ = "Tensor"
    import sys
    import types
    fake = types.ModuleType("megengine.tensor")
    fake.Tensor = Tensor
    saved = {k: sys.modules.get(k) for k in ("megengine", "megengine.tensor")}
    sys.modules["megengine"] = types.ModuleType("megengine")
    sys.modules["megengine.tensor"] = fake
    try:
        data = pickle.dumps(Tensor(), protocol=4)
    finally:
        for k, v in saved.items():
            if v is None:
                del sys.modules[k]
            else:
                sys.modules[k] = v
    with pytest.warns(UserWarning, match="qdict"):
        t = mge.load(io.BytesIO(data))
    assert isinstance(t, mge.Tensor) and t.dtype == np.int8
    assert t.device.logical_name == "cpu0:0" and t.numpy().tolist() == [1, 2, 3]


def test_load_megengine_pickle_with_value_in_state():
    # MegEngine before 1.2: Tensor.__new__(Tensor) and the value in the state
    import copyreg
    import io
    import pickle
    import sys
    import types

    class Tensor:
        def __reduce_ex__(self, proto):
            return (copyreg.__newobj__, (Tensor,),
                    {"data": np.array([1, 2, 3], np.int8), "device": "cpu0:0", "dtype": np.int8})
    Tensor.__module__, Tensor.__qualname__ = "megengine.tensor", "Tensor"
    fake = types.ModuleType("megengine.tensor")
    fake.Tensor = Tensor
    saved = {k: sys.modules.get(k) for k in ("megengine", "megengine.tensor")}
    sys.modules["megengine"] = types.ModuleType("megengine")
    sys.modules["megengine.tensor"] = fake
    try:
        data = pickle.dumps(Tensor(), protocol=4)
    finally:
        for k, v in saved.items():
            if v is None:
                del sys.modules[k]
            else:
                sys.modules[k] = v
    t = mge.load(io.BytesIO(data))
    assert t.dtype == np.int8 and t.numpy().tolist() == [1, 2, 3]
    assert t.device.logical_name == "cpu0:0"
