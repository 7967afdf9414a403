"""Op and var names of traced graphs (MegEngine's AutoNaming rules): ``mge.jit.naming``.

The cases of MegEngine's ``unit/utils/test_dump_naming.py``, checked on the names
``names_for_dump`` computes for a recording (what ``trace.dump`` writes), plus the rules around
them: module scopes, parameter names, user renames, duplicates, the keep_* options.  The
expected names are MegEngine 1.13's.
"""
import logging

import numpy as np
import pytest

import mge
import mge.functional as F
import mge.module as M
from mge import Parameter, Tensor
from mge.jit import trace
from mge.jit.naming import names_for_dump, opr_name
from mge.utils.naming import AutoNaming, tensor_name


def _names(func, symbolic, keep_opr_name=True, keep_var_name=2, arg_names=("x",), x=None,
           output_names=None, prefer_input_names=True, **kwargs):
    """Trace ``func`` once; return (recording, op names, var names)."""
    AutoNaming.clear()
    traced = trace(func, symbolic=symbolic, capture_as_const=True)
    x = Tensor(np.ones((2, 3), "float32")) if x is None else x
    traced(x, **kwargs)
    rec = traced.recording
    op_names, var_names = names_for_dump(rec, arg_names, output_names, keep_opr_name,
                                         keep_var_name, prefer_input_names=prefer_input_names)
    assert len(op_names) == len(rec.ops)
    return rec, op_names, var_names


def _producer(rec, v):
    for k, (_, _, outs) in enumerate(rec.ops):
        if v in outs:
            return k
    raise AssertionError(f"var {v} has no producer")


def _chain(rec, op_names):
    """The names of the ops the output depends on, in recording order."""
    return [n for n in op_names if n is not None]


@pytest.fixture(params=[False, True], ids=["eager", "symbolic"])
def symbolic(request):
    return request.param


def test_auto_naming(symbolic):
    class Simple(M.Module):
        def __init__(self, name):
            super().__init__()
            self.name = name

        def forward(self, x):
            return x + x

    rec, ops, var = _names(Simple("simple"), symbolic)
    k = _producer(rec, rec.outputs[0])
    assert ops[k] == "simple.ADD"
    assert var[rec.outputs[0]] == "simple.ADD"


def test_user_named_tensor(symbolic):
    class Simple(M.Module):
        def __init__(self, name):
            super().__init__()
            self.name = name
            self.k = Parameter(1.0, name="k")

        def forward(self, x):
            x = x + x
            x.name = "o_x"
            return x

    rec, ops, var = _names(Simple("simple"), symbolic)
    assert ops[_producer(rec, rec.outputs[0])] == "simple.ADD"
    assert var[rec.outputs[0]] == "o_x"


def test_user_named_param(symbolic):
    class Simple(M.Module):
        def __init__(self, name):
            super().__init__()
            self.name = name
            self.k = Parameter(2.0, name="k")

        def forward(self, x):
            return self.k * x

    rec, ops, var = _names(Simple("simple"), symbolic)
    ins = rec.ops[_producer(rec, rec.outputs[0])][1]
    assert sorted(var[v] for v in ins) == ["simple.k", "x"]
    assert tensor_name(Simple("simple").k) == "simple.k"


def test_without_module(symbolic):
    rec, ops, var = _names(lambda x: 2 * x, symbolic)
    assert ops[_producer(rec, rec.outputs[0])] == "MUL"


def test_ignore_top_module(symbolic):
    class Simple(M.Module):
        def forward(self, x):
            return x + x

    rec, ops, var = _names(Simple(), symbolic)
    assert ops[_producer(rec, rec.outputs[0])] == "ADD"
    assert var[rec.outputs[0]] == "ADD"


def test_with_submodule(symbolic):
    class Simple(M.Module):
        def __init__(self, name):
            super().__init__()
            self.name = name
            self.linear = M.Linear(3, 3)

        def forward(self, x):
            return self.linear(x)

    rec, ops, var = _names(Simple("simple"), symbolic)
    assert _chain(rec, ops)[-2:] == ["simple.linear.MatrixMul", "simple.linear.ADD"]
    assert var[rec.outputs[0]] == "simple.linear.ADD"
    names = {var[v] for op, ins, _ in rec.ops for v in ins if v in var}
    assert {"simple.linear.weight", "simple.linear.bias"} <= names


def test_with_submodule_in_container(symbolic, caplog):
    class Simple(M.Module):
        def __init__(self, name):
            super().__init__()
            self.name = name
            self.l0 = [M.Linear(3, 3) for _ in range(2)]
            self.l1 = tuple(self.l0)
            self.l2 = dict(zip(["l2-0", "l2-1"], self.l0))

        def forward(self, x):
            for i in range(2):
                x = self.l0[i](x)
                x = self.l1[i](x)
                x = self.l2["l2-%d" % i](x)
            return x

    with caplog.at_level(logging.WARNING):
        m = Simple("simple")
    assert "will remain unchanged" in caplog.text  # (l1, l2 hold the l0 modules again)
    rec, ops, var = _names(m, symbolic)
    assert var[rec.outputs[0]] == "simple.l0.1.ADD[2]"
    assert _chain(rec, ops)[-6:] == [
        "simple.l0.1.MatrixMul[0]", "simple.l0.1.ADD[0]", "simple.l0.1.MatrixMul[1]",
        "simple.l0.1.ADD[1]", "simple.l0.1.MatrixMul[2]", "simple.l0.1.ADD[2]"]


def test_named_submodule(symbolic):
    class Simple(M.Module):
        def __init__(self, name):
            super().__init__()
            self.name = name
            self.linear = M.Linear(3, 3, name="x")

        def forward(self, x):
            return self.linear(x)

    rec, ops, var = _names(Simple("simple"), symbolic)
    assert _chain(rec, ops)[-2:] == ["simple.x.MatrixMul", "simple.x.ADD"]
    assert var[rec.outputs[0]] == "simple.x.ADD"


def test_with_same_operators(symbolic):
    class Simple(M.Module):
        def __init__(self, name):
            super().__init__()
            self.name = name

        def forward(self, x):
            return F.relu(F.relu(x))

    rec, ops, var = _names(Simple("simple"), symbolic)
    assert _chain(rec, ops) == ["simple.RELU[0]", "simple.RELU[1]"]


def test_not_keep_opr_name(symbolic):
    # the file keeps no op names: the reader makes MegBrain's default ones
    rec, ops, var = _names(lambda x: 2 * x, symbolic, keep_opr_name=False)
    assert ops == [None] * len(rec.ops)
    assert var[rec.args[0]] == "x"
    assert var[rec.outputs[0]] == "MUL"


@pytest.mark.parametrize("tensor_name_, var_name", [("data", "data"), (None, "arg_0")])
def test_catch_input_name(tensor_name_, var_name):
    x = Tensor(np.ones((2, 3), "float32"), name=tensor_name_)
    rec, ops, var = _names(lambda x: 2 * x, True, arg_names=["arg_0"], x=x,
                           prefer_input_names=False)
    assert var[rec.args[0]] == var_name
    # names the user gave arg_names win over the tensor's own
    rec, ops, var = _names(lambda x: 2 * x, True, arg_names=["given"], x=x)
    assert var[rec.args[0]] == "given"


def test_keyword_argument_names():
    def f(x, *, y):
        x.name = "renamed_x"  # (an argument keeps the name it had when the call began)
        return x * y

    y = Tensor(np.ones((2, 3), "float32"), name="yy")
    rec, ops, var = _names(f, True, arg_names=["arg_0", "y"], prefer_input_names=False, y=y)
    assert [var[v] for v in rec.args] == ["arg_0", "yy"]
    rec, ops, var = _names(f, True, arg_names=["x", "y"], y=y)
    assert [var[v] for v in rec.args] == ["x", "y"]


def test_keep_options():
    class Simple(M.Module):
        def __init__(self):
            super().__init__("simple")
            self.linear = M.Linear(3, 3)
            self.k = Parameter(2.0, name="k")

        def forward(self, x):
            y = F.relu(self.linear(x)) * self.k
            y.name = "o_y"
            return F.relu(F.relu(y))

    def run(ko, kv, **kw):
        return _names(Simple(), False, keep_opr_name=ko, keep_var_name=kv, **kw)

    rec, ops, var = run(True, 2)
    assert _chain(rec, ops) == ["simple.linear.MatrixMul", "simple.linear.ADD",
                                "simple.RELU[0]", "simple.MUL", "simple.RELU[1]",
                                "simple.RELU[2]"]
    mul = rec.ops[ops.index("simple.MUL")]
    assert var[mul[2][0]] == "o_y"
    assert {var[v] for v in mul[1]} == {"simple.RELU[0]", "simple.k"}
    # keep_var_name=0: the inputs' and the constants' (their ops') names only
    rec, ops, var = run(True, 0)
    assert var[rec.args[0]] == "x"
    assert set(var.values()) == {"x", "simple.linear.weight", "simple.linear.bias", "simple.k"}
    # neither: the inputs' names only
    rec, ops, var = run(False, 0)
    assert ops == [None] * len(rec.ops) and var == {rec.args[0]: "x"}
    # var names without op names
    rec, ops, var = run(False, 1)
    assert var[rec.outputs[0]] == "simple.RELU[2]"
    # output_names rename the outputs (with var names kept)
    rec, ops, var = run(True, 1, output_names=["out"])
    assert var[rec.outputs[0]] == "out" and ops[-1] == "simple.RELU[2]"
    rec, ops, var = run(True, 0, output_names=["out"])
    assert rec.outputs[0] not in var


def test_several_outputs_and_renames():
    class A(M.Module):
        def __init__(self):
            super().__init__()
            self.w = Parameter(np.arange(3, dtype="float32"))

        def forward(self, x):
            return x * self.w

    class B(M.Module):
        def __init__(self):
            super().__init__("bb")
            self.a = A()

        def forward(self, x):
            v, i = F.topk(x, 2)
            y = self.a(x) + self.a(x)
            y.name = "first"
            y.name = "second"  # the last name given wins
            c = Tensor([1.0, 2, 3], name="cst")
            return y + c, v, i

    rec, ops, var = _names(B(), True)
    topk = next(k for k, (op, _, _) in enumerate(rec.ops) if type(op).__name__ == "TopK")
    assert ops[topk] == "bb.TopK"
    assert [var[v] for v in rec.ops[topk][2]] == ["bb.TopK:o0", "bb.TopK:o1"]
    adds = [n for n in ops if n and "ADD" in n]
    assert adds == ["bb.ADD[0]", "bb.ADD[1]"]
    first_add = rec.ops[ops.index("bb.ADD[0]")]
    assert var[first_add[2][0]] == "second"
    assert "cst" in {var[v] for v in rec.ops[ops.index("bb.ADD[1]")][1]}
    assert sorted(n for n in ops if n and "MUL" in n) == ["bb.a.MUL[0]", "bb.a.MUL[1]"]
    rec, ops, var = _names(B(), True, output_names=["o1", "o2", "o3"])
    assert [var[v] for v in rec.outputs] == ["o1", "o2", "o3"]


def test_duplicates_follow_the_walk_order():
    # commutative inputs are walked in var order (arguments, constants, op outputs), as
    # MegBrain sorts them: b = relu(x) is made first, so it gets [0] though it is on the right
    def f(x):
        b = F.relu(x)
        a = F.relu(F.exp(x))
        return a + b

    rec, ops, var = _names(f, False)
    assert ops[0] == "RELU[0]" and ops[2] == "RELU[1]"


def test_opr_name():
    from mge._core.ops import Elemwise
    from mge._core.ops.base import OpDef
    assert opr_name(Elemwise("add")) == "ADD"
    assert opr_name(Elemwise("neg")) == "NEGATE"
    assert opr_name(Elemwise("logaddexp")) == "LOG_SUM_EXP"

    class Custom(OpDef):
        _fields = ()
    assert opr_name(Custom()) == "Custom"


def test_module_scopes_are_popped_on_errors():
    class Bad(M.Module):
        def forward(self, x):
            raise RuntimeError("boom")

    class Outer(M.Module):
        def __init__(self):
            super().__init__("outer")
            self.bad = Bad()

        def forward(self, x):
            return self.bad(x)

    AutoNaming.clear()
    with pytest.raises(RuntimeError):
        Outer()(mge.tensor(1.0))
    assert AutoNaming.scopes == [] and AutoNaming.get_scope() == ""


def test_parameter_names():
    class Inner(M.Module):
        def __init__(self):
            super().__init__()
            self.weight = Parameter(np.ones(3, "float32"))
            self.k = Parameter(1.0, name="k")

        def forward(self, x):
            return x

    class Outer(M.Module):
        def __init__(self):
            super().__init__()
            self.inner = Inner()
            self.buf = Tensor([1.0])

        def forward(self, x):
            return x

    m = Outer()
    assert tensor_name(m.inner.weight) == "inner.weight"
    assert tensor_name(m.inner.k) == "inner.k"
    assert tensor_name(m.buf) == "buf"
    assert m.inner.weight.name == "" or m.inner.weight.name is None  # (name itself unchanged)
    m.inner.weight.name = "w"
    assert tensor_name(m.inner.weight) == "inner.w"
    assert tensor_name(Tensor([1.0], name="free")) == "free"
    assert tensor_name(Tensor([1.0])) == ""


def test_replay_records_nothing():
    # naming is noted while recording only: replays leave the recording as it was
    class Simple(M.Module):
        def __init__(self):
            super().__init__("simple")

        def forward(self, x):
            y = x + 1
            y.name = "y"
            return y * 2

    traced = trace(Simple(), capture_as_const=True)
    x = Tensor(np.ones(3, "float32"))
    traced(x)
    rec = traced.recording
    before = (list(rec.op_scopes), dict(rec.var_names))
    assert rec.op_scopes == ["simple", "simple"]
    for _ in range(3):
        np.testing.assert_allclose(traced(x).numpy(), 4.0)
    assert traced.recording is rec
    assert (rec.op_scopes, rec.var_names) == before


def test_dump_request_gives_the_users_names():
    # trace.dump says what the user asked for: a writer's default output names do not rename
    # the outputs, and arg_names given by the user win over the tensors' own names
    from mge.jit.naming import dump_request

    class Simple(M.Module):
        def __init__(self):
            super().__init__("simple")

        def forward(self, x):
            return x + x

    traced = trace(Simple(), capture_as_const=True)
    traced(Tensor(np.ones((2, 3), "float32"), name="data"))
    rec = traced.recording
    with dump_request(False, None):
        _, var = names_for_dump(rec, ["arg_0"], ["output_0"], True, 1)
    assert var[rec.outputs[0]] == "simple.ADD" and var[rec.args[0]] == "data"
    with dump_request(True, ["out"]):
        _, var = names_for_dump(rec, ["x"], ["output_0"], True, 1)
    assert var[rec.outputs[0]] == "out" and var[rec.args[0]] == "x"
    _, var = names_for_dump(rec, ["arg_0"], ["output_0"], True, 1)  # (no request: as given)
    assert var[rec.outputs[0]] == "output_0" and var[rec.args[0]] == "data"
    # trace.dump opens one: the user's output names (or a returned dict's keys)
    assert traced._given_output_names(None) is None
    assert traced._given_output_names("y") == ["y"]
    as_dict = trace(lambda x: {"b": x * 2, "a": x + 1}, capture_as_const=True)
    as_dict(Tensor(np.ones(2, "float32")))
    assert as_dict._given_output_names(None) == ["a", "b"]


def test_graph_inputs_sorts_commutative_inputs():
    from mge.jit.naming import graph_inputs

    class Simple(M.Module):
        def __init__(self):
            super().__init__("simple")
            self.k = Parameter(2.0, name="k")

        def forward(self, x):
            return (self.k * x) - self.k  # MUL commutes (x first: an input), SUB does not

    rec, ops, var = _names(Simple(), False)
    mul, sub = rec.ops
    assert [var[v] for v in mul[1]] == ["simple.k", "x"]  # as recorded
    assert [var[v] for v in graph_inputs(rec, 0)] == ["x", "simple.k"]
    assert graph_inputs(rec, 1) == tuple(sub[1])
