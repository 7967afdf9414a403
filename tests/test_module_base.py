"""mge.module.Module: traversal and naming, state_dict round trips and their errors, train/eval,
hooks, attribute bookkeeping, repr, Sequential."""
import logging
import pickle
from collections import OrderedDict

import numpy as np
import pytest

import mge
import mge.module as M


class Net(M.Module):
    """Submodules as plain attributes, in a list, a dict (keys visited sorted) and a tuple."""

    def __init__(self):
        super().__init__()
        self.fc = M.Linear(3, 4)
        self.layers = [M.Linear(4, 4), M.ReLU()]
        self.d = {"b": M.Conv2d(2, 2, 3), "a": M.BatchNorm2d(2)}
        self.t = (M.Identity(),)
        self.buf = mge.tensor([1.0])

    def forward(self, x):
        return self.layers[1](self.layers[0](self.fc(x)))


PARAMS = ["d.a.bias", "d.a.weight", "d.b.bias", "d.b.weight", "fc.bias", "fc.weight",
          "layers.0.bias", "layers.0.weight"]


# -- traversal ------------------------------------------------------------------------------------

def test_named_parameters_buffers_modules_as_megengine():
    n = Net()
    assert [k for k, _ in n.named_parameters()] == PARAMS
    assert [k for k, _ in n.named_buffers()] == ["buf", "d.a.running_mean", "d.a.running_var"]
    assert [k for k, _ in n.named_modules()] == ["", "d.a", "d.b", "fc", "layers.0", "layers.1",
                                                 "t.0"]
    assert [k for k, _ in n.named_modules(prefix="net")][:2] == ["net", "net.d.a"]
    assert [k for k, _ in n.named_children()] == ["d.a", "d.b", "fc", "layers.0", "layers.1",
                                                  "t.0"]
    assert [k for k, _ in n.named_parameters(prefix="p")][0] == "p.d.a.bias"
    assert list(n.named_parameters(recursive=False)) == []
    assert [k for k, _ in n.named_tensors()][:3] == ["buf", "d.a.bias", "d.a.running_mean"]
    assert len(list(n.parameters())) == 8 and len(list(n.buffers())) == 3
    assert len(list(n.tensors())) == 11
    assert list(n.modules())[0] is n and len(list(n.modules())) == 7
    assert all(isinstance(p, mge.Parameter) for p in n.parameters())
    assert not any(isinstance(b, mge.Parameter) for b in n.buffers())


def test_shared_parameter_listed_once_and_sorted_numeric_keys():
    class Tied(M.Module):
        def __init__(self):
            super().__init__()
            self.a = M.Linear(2, 2)
            self.b = M.Linear(2, 2)
            self.b.weight = self.a.weight

        def forward(self, x):
            return x

    t = Tied()
    assert [k for k, _ in t.named_parameters()] == ["a.bias", "a.weight", "b.bias"]
    # Keys are sorted as strings, as in MegEngine: "10" before "2".
    seq = M.Sequential(*[M.ReLU() for _ in range(11)])
    assert [k for k, _ in seq.named_children()][:3] == ["0", "1", "10"]


def test_with_parent_and_apply():
    n = Net()
    pairs = list(n.named_parameters(with_parent=True))
    assert pairs[0][0] == "d.a.bias" and pairs[0][2] is n.d["a"]
    assert list(n.modules(with_parent=True))[0] == (n, None)
    seen = []
    n.apply(lambda m: seen.append(type(m).__name__))
    assert seen == ["Net", "BatchNorm2d", "Conv2d", "Linear", "Linear", "ReLU", "Identity"]


def test_non_string_dict_key_is_an_error():
    class D(M.Module):
        def __init__(self):
            super().__init__()
            self.d = {1: M.ReLU()}

        def forward(self, x):
            return x

    with pytest.raises(AssertionError,
                       match="keys for Tensor and Module must be str, error key: 1"):
        list(D().named_modules())


# -- names and attribute bookkeeping --------------------------------------------------------------

def test_module_names_follow_attribute_paths():
    n = Net()
    assert n.fc._name == "fc" and n.fc._short_name == "fc"
    assert n.layers[0]._name == "layers.0" and n.d["a"]._name == "d.a"

    class Outer(M.Module):
        def __init__(self):
            super().__init__()
            self.seq = M.Sequential(M.Linear(2, 2), M.ReLU())

        def forward(self, x):
            return x

    o = Outer()
    assert o.seq._name == "seq" and o.seq[0]._name == "seq.0" and o.seq[0]._short_name == "0"
    assert M.Linear(2, 2, name="head").name == "head"
    with pytest.raises(AssertionError, match="Module's name must be a non-empty string"):
        M.ReLU(name=" ")


def test_setattr_bookkeeping():
    class Early(M.Module):
        def __init__(self):
            self.x = M.ReLU()

        def forward(self, x):
            return x

    with pytest.raises(AttributeError, match=r"cannot assign module before Module.__init__\(\)"):
        Early()
    lin = M.Linear(3, 3)
    lin.extra = [M.ReLU()]
    assert "extra" in lin._modules
    lin.extra = 5
    assert "extra" not in lin._modules
    lin.bias = None
    assert list(lin.state_dict()) == ["weight"]
    assert repr(lin) == "Linear(in_features=3, out_features=3, bias=False)"
    n = Net()
    del n.fc
    assert "fc" not in n._modules and "fc.weight" not in n.state_dict()


def test_repr_lists_children_in_assignment_order():
    text = repr(Net())
    assert text == (
        "Net(\n"
        "  (fc): Linear(in_features=3, out_features=4, bias=True)\n"
        "  (layers.0): Linear(in_features=4, out_features=4, bias=True)\n"
        "  (layers.1): ReLU()\n"
        "  (d.a): BatchNorm2d(2, eps=1e-05, momentum=0.9, affine=True, track_running_stats=True)\n"
        "  (d.b): Conv2d(2, 2, kernel_size=(3, 3))\n"
        "  (t.0): Identity()\n"
        ")")
    nested = repr(M.Sequential(M.Sequential(M.ReLU())))
    assert nested == "Sequential(\n  (0): Sequential(\n    (0): ReLU()\n  )\n)"


def test_module_is_abstract():
    with pytest.raises(TypeError):
        M.Module()


# -- state_dict -----------------------------------------------------------------------------------

def test_state_dict_keys_shapes_and_copies():
    n = Net()
    sd = n.state_dict()
    assert list(sd) == ["buf", "d.a.bias", "d.a.running_mean", "d.a.running_var", "d.a.weight",
                        "d.b.bias", "d.b.weight", "fc.bias", "fc.weight", "layers.0.bias",
                        "layers.0.weight"]
    # Batch-norm states are (1, C, 1, 1) inside the module and saved flat.
    assert n.d["a"].weight.shape == (1, 2, 1, 1) and sd["d.a.weight"].shape == (2,)
    assert sd["d.b.bias"].shape == (1, 2, 1, 1)
    assert all(isinstance(v, np.ndarray) for v in sd.values())
    before = n.fc.weight.numpy().copy()
    sd["fc.weight"][...] = 0  # a copy: writable, and the module does not change
    np.testing.assert_array_equal(n.fc.weight.numpy(), before)
    kept = n.state_dict(keep_var=True)
    assert kept["fc.weight"] is n.fc.weight


def test_state_dict_round_trip_keeps_tensor_objects():
    mge.random.seed(1)
    a = Net()
    mge.random.seed(2)
    b = Net()
    weight = b.fc.weight
    assert not np.array_equal(a.fc.weight.numpy(), weight.numpy())
    b.load_state_dict(a.state_dict())
    assert b.fc.weight is weight  # optimizers hold these objects
    for (ka, va), (kb, vb) in zip(a.state_dict().items(), b.state_dict().items()):
        assert ka == kb
        np.testing.assert_array_equal(va, vb)
    assert b.d["a"].weight.shape == (1, 2, 1, 1)


def test_state_dict_survives_pickle():
    n = Net()
    sd = pickle.loads(pickle.dumps(n.state_dict()))
    m = Net()
    m.load_state_dict(sd)
    np.testing.assert_array_equal(m.fc.weight.numpy(), n.fc.weight.numpy())


def test_load_state_dict_strict_messages():
    n = Net()
    sd = n.state_dict()
    with pytest.raises(KeyError, match=r"Unused params violate `strict=True`, unused=\{'extra'\}"):
        n.load_state_dict(dict(sd, extra=np.zeros(1, "float32")))
    missing = {k: v for k, v in sd.items() if k != "fc.bias"}
    with pytest.raises(KeyError, match=r"Missing params violate `strict=True`, "
                                       r"missing=\{'fc.bias'\}"):
        n.load_state_dict(missing)
    with pytest.raises(ValueError, match=r"`state_dict` must load a dict or callable, got "
                                         r"<class 'list'>"):
        n.load_state_dict([1])


def test_load_state_dict_shape_messages_and_nothing_changes_on_error():
    n = Net()
    sd = n.state_dict()
    before = n.fc.bias.numpy().copy()
    bad = dict(sd, **{"fc.bias": np.full(4, 7, "float32"),
                      "fc.weight": np.zeros((3, 3), "float32")})
    with pytest.raises(ValueError, match=r"param `fc.weight` shape mismatch, should be \(4, 3\), "
                                         r"get \(3, 3\)"):
        n.load_state_dict(bad)
    np.testing.assert_array_equal(n.fc.bias.numpy(), before)  # fc.bias was not loaded either
    with pytest.raises(ValueError, match=r"param `d.a.weight` size mismatch, should be 2, get 3"):
        n.load_state_dict(dict(sd, **{"d.a.weight": np.zeros(3, "float32")}))
    # Normalization layers take any array of the right size (MegEngine 1.0 checkpoints).
    n.load_state_dict(dict(sd, **{"d.a.weight": np.full((1, 2, 1, 1), 3, "float32")}))
    np.testing.assert_array_equal(n.d["a"].weight.numpy().ravel(), [3, 3])
    with pytest.raises(AssertionError, match="closure should return a `np.ndarray`"):
        n.load_state_dict(dict(sd, **{"fc.bias": [1, 2, 3, 4]}))


def test_load_state_dict_non_strict_and_closure(caplog):
    n = Net()
    sd = n.state_dict()
    m = Net()
    old = m.fc.weight.numpy().copy()
    with caplog.at_level(logging.WARNING):
        m.load_state_dict({k: None if k.startswith("fc") else v for k, v in sd.items()},
                          strict=False)
    assert "Missing params in `strict=False` mode" in caplog.text
    np.testing.assert_array_equal(m.fc.weight.numpy(), old)
    np.testing.assert_array_equal(m.layers[0].weight.numpy(), n.layers[0].weight.numpy())
    # A closure gets each key and the tensor; None skips.
    seen = []

    def closure(key, var):
        seen.append((key, tuple(var.shape)))
        return None if key != "fc.bias" else np.full(var.shape, 5, "float32")

    m.load_state_dict(closure, strict=False)
    assert ("fc.weight", (4, 3)) in seen
    np.testing.assert_array_equal(m.fc.bias.numpy(), np.full(4, 5, "float32"))
    loaded, skipped = m._load_state_dict_with_closure(closure)
    assert loaded == {"fc.bias"} and "fc.weight" in skipped


def test_load_state_dict_takes_the_arrays_dtype_and_accepts_tensors():
    lin = M.Linear(2, 2)
    lin.load_state_dict({"weight": mge.tensor(np.eye(2, dtype="float32")),
                         "bias": np.zeros(2, "float16")})
    np.testing.assert_array_equal(lin.weight.numpy(), np.eye(2))
    assert lin.bias.dtype == np.float16
    lin.load_state_dict({"weight": np.eye(2), "bias": np.zeros(2)})  # numpy's float64 defaults
    assert lin.weight.dtype == lin.bias.dtype == np.float32


# -- train / eval, hooks --------------------------------------------------------------------------

def test_train_eval_flags():
    n = Net()
    assert n.training and n.fc.training
    n.eval()
    assert not any(m.training for m in n.modules())
    n.train()
    assert all(m.training for m in n.modules())
    n.train(False, recursive=False)
    assert not n.training and n.fc.training


def test_hooks_modify_inputs_and_outputs_and_are_removable():
    r = M.ReLU()
    x = mge.tensor([-1.0, 1.0])
    calls = []
    h1 = r.register_forward_pre_hook(lambda m, inputs: (inputs[0] * 2,))
    h2 = r.register_forward_hook(lambda m, inputs, out: out + 1)
    h3 = r.register_forward_hook(lambda m, inputs, out: calls.append((m, len(inputs))))
    np.testing.assert_array_equal(r(x).numpy(), [1, 3])
    assert calls == [(r, 1)]
    h1.remove()
    np.testing.assert_array_equal(r(x).numpy(), [1, 2])
    h2.remove()
    h2.remove()  # a second remove does nothing
    h3.remove()
    np.testing.assert_array_equal(r(x).numpy(), [0, 1])
    assert not r._forward_hooks and not r._forward_pre_hooks
    # A pre-hook may return a single value instead of a tuple.
    r.register_forward_pre_hook(lambda m, inputs: -inputs[0])
    np.testing.assert_array_equal(r(x).numpy(), [1, 0])
    with pytest.raises(TypeError, match="a hook must be callable"):
        r.register_forward_hook(3)


def test_hooks_run_in_registration_order():
    r = M.Identity()
    order = []
    for i in range(3):
        r.register_forward_hook(lambda m, inputs, out, i=i: order.append(i))
    r(mge.tensor([1.0]))
    assert order == [0, 1, 2]


def test_zero_grad_is_deprecated_and_zeros_grads():
    lin = M.Linear(2, 2)
    lin.weight.grad = mge.tensor(np.ones((2, 2), "float32"))
    with pytest.warns(DeprecationWarning, match="zero_grad"):
        lin.zero_grad()
    np.testing.assert_array_equal(lin.weight.grad.numpy(), np.zeros((2, 2)))
    assert lin.bias.grad is None


def test_module_pickles():
    n = Net()
    m = pickle.loads(pickle.dumps(n))
    np.testing.assert_array_equal(m.fc.weight.numpy(), n.fc.weight.numpy())
    assert [k for k, _ in m.named_parameters()] == PARAMS


# -- Sequential -----------------------------------------------------------------------------------

def test_sequential_positional_and_ordered_dict():
    s = M.Sequential(M.ReLU(), M.Linear(2, 3), M.Sigmoid())
    assert len(s) == 3 and s.layer_keys == ["0", "1", "2"]
    assert isinstance(s[-1], M.Sigmoid) and [type(m) for m in s] == [M.ReLU, M.Linear, M.Sigmoid]
    tail = s[1:]
    assert isinstance(tail, M.Sequential) and tail.layer_keys == ["1", "2"] and tail[0] is s[1]
    assert list(s.state_dict()) == ["1.bias", "1.weight"]
    d = M.Sequential(OrderedDict([("fc", M.Linear(2, 2)), ("act", M.ReLU())]))
    assert d.layer_keys == ["fc", "act"] and d[0] is d.fc
    assert [k for k, _ in d.named_modules()] == ["", "act", "fc"]
    with pytest.raises(IndexError):
        s[3]


def test_sequential_forward_set_and_delete():
    s = M.Sequential(M.Linear(2, 2), M.ReLU())
    x = mge.tensor([[1.0, -2.0]])
    w, b = s[0].weight.numpy(), s[0].bias.numpy()
    np.testing.assert_allclose(s(x).numpy(), np.maximum(x.numpy() @ w.T + b, 0), rtol=1e-6)
    s[1] = M.Identity()
    assert isinstance(s[1], M.Identity)
    np.testing.assert_allclose(s(x).numpy(), x.numpy() @ w.T + b, rtol=1e-6)
    del s[0]
    assert s.layer_keys == ["1"] and not hasattr(s, "0")
    s3 = M.Sequential(M.ReLU(), M.ReLU(), M.ReLU())
    del s3[:2]
    assert s3.layer_keys == ["2"]
    with pytest.raises(TypeError, match="Sequential: layer '0' is a int, not a Module"):
        M.Sequential(3)


# -- dotted-key access (MegEngine's _access_structure and utils.module_utils) -------------------

class _Structured(M.Module):
    def __init__(self):
        super().__init__()
        self.fc = M.Linear(2, 2)
        self.blocks = [M.Linear(2, 3), {"head": M.Linear(3, 1)}]
        self.seq = M.Sequential(M.Linear(2, 2), M.ReLU())

    def forward(self, x):
        return x


def test_access_structure_follows_lists_dicts_and_attributes():
    from mge.module.module import _access_structure
    net = _Structured()
    assert _access_structure(net, "fc") is net.fc
    assert _access_structure(net, "blocks.0") is net.blocks[0]
    assert _access_structure(net, "blocks.1.head.weight") is net.blocks[1]["head"].weight
    seen = _access_structure(net, "blocks.1.head", callback=lambda p, k, c: (p, k, c))
    assert seen == (net.blocks[1], "head", net.blocks[1]["head"])
    parent, key, _ = _access_structure(net, "blocks.0", callback=lambda p, k, c: (p, k, c))
    assert parent is net.blocks and key == 0


def test_expand_structure_get_and_set_by_named_modules_keys():
    from mge.utils.module_utils import get_expand_structure, set_expand_structure
    net = _Structured()
    for key, module in net.named_modules():
        if key:
            assert get_expand_structure(net, key) is module
    new_head, new_fc, new_layer = M.Linear(3, 1), M.Linear(2, 2), M.Linear(2, 2)
    set_expand_structure(net, "blocks.1.head", new_head)
    set_expand_structure(net, "fc", new_fc)
    set_expand_structure(net, "seq.0", new_layer)
    assert net.blocks[1]["head"] is new_head and net.fc is new_fc and net.seq[0] is new_layer
    x = mge.tensor(np.ones((1, 2), "float32"))
    np.testing.assert_allclose(net.seq(x).numpy(),
                               np.maximum(new_layer(x).numpy(), 0), rtol=1e-6)


def test_set_module_mode_safe_restores_each_mode():
    from mge.utils.module_utils import set_module_mode_safe
    net = _Structured()
    net.fc.eval()
    with set_module_mode_safe(net, training=False) as m:
        assert m is net and not any(x.training for x in net.modules())
    assert not net.fc.training and net.seq.training and net.training
