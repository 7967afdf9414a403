"""The transformation stack and entry-point plugins, including a third-party plugin package."""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import mge
import mge.core as core
from mge.core import Transformation, ops


def test_builtin_stack_order():
    names = [t.name for t in core.transformations()]
    assert names == ["dtype_promote", "dim_expansion", "scalar", "eval"]
    assert set(core.plugins()) >= {"dtype_promote", "dim_expansion", "scalar"}
    assert core.plugin_errors() == {}


class Counter(Transformation):
    name = "test_counter"
    position = "before:eval"

    def __init__(self):
        self.seen = []

    def apply(self, op, inputs, next):
        self.seen.append((op.name, tuple(x.dtype.name for x in inputs)))
        return next(op, inputs)


def test_registered_transformation_sees_ops_below_dtype_promotion():
    c = Counter()
    core.register_transformation(c)
    try:
        assert [t.name for t in core.transformations()][-2:] == ["test_counter", "eval"]
        x = mge.tensor([1, 2], dtype="int32")
        y = x + 0.5
        # dtype_promote sits above: the counter sees the cast and the float add
        assert ("TypeCvt", ("int32",)) in c.seen
        assert c.seen[-1] == ("Elemwise.add", ("float32", "float32"))
        np.testing.assert_allclose(y.numpy(), [1.5, 2.5])
    finally:
        core.disable_transformation("test_counter")
    n = len(c.seen)
    mge.tensor([1.0]) * 2
    assert len(c.seen) == n, "a disabled transformation must not see ops"
    with pytest.raises(RuntimeError, match="disabled"):
        core.get_plugin("test_counter")


class OnlyElemwise(Transformation):
    name = "test_only_elemwise"
    position = "after:grad"

    def __init__(self):
        from mge.core import ops
        self.op_types = (ops.Elemwise,)
        self.count = 0

    def apply(self, op, inputs, next):
        self.count += 1
        return next(op, inputs)


def test_op_types_filter_skips_other_ops():
    t = OnlyElemwise()
    core.register_transformation(t)
    try:
        x = mge.tensor([1.0, 2.0])
        x.astype("int32")            # TypeCvt: not looked at
        assert t.count == 0
        x * 3.0
        assert t.count == 1
    finally:
        core.disable_transformation(t.name)


def test_bad_position_is_a_clear_error():
    class Bad(Transformation):
        name = "test_bad"
        position = "under:eval"

    with pytest.raises(ValueError, match="before:NAME"):
        core.register_transformation(Bad())


def test_eval_cannot_be_disabled():
    with pytest.raises(ValueError):
        core.disable_transformation("eval")


def test_disable_and_enable_builtin_plugin():
    x = mge.tensor([1, 2])
    core.disable_transformation("dtype_promote")
    try:
        assert "dtype_promote" not in [t.name for t in core.transformations()]
        with pytest.raises(RuntimeError, match="dtype_promote"):
            with mge.amp.autocast():
                pass
        # without promotion the kernel follows numpy: int / int is float64
        assert (x / x).dtype == np.float64
    finally:
        core.enable_transformation("dtype_promote")
    assert (x / x).dtype == np.float32
    assert [t.name for t in core.transformations()][0] == "dtype_promote"


PLUGIN_SRC = '''
from mge.core import Transformation, ops

class Doubler(Transformation):
    """Turns every add into a multiply: proof that it intercepts."""
    name = "doubler"
    position = "after:dtype_promote"

    def apply(self, op, inputs, next):
        if isinstance(op, ops.Elemwise) and op.mode == "add":
            op = ops.Elemwise("mul")
        return next(op, inputs)
'''


def _install_fake_package(tmp_path, name, module_src, entry):
    """What ``pip install`` leaves for entry-point discovery: the module and a dist-info."""
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(module_src))
    info = tmp_path / f"{name}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[mge.transformations]\n{entry}\n")


def _run(tmp_path, code, **env):
    e = dict(os.environ)
    e["PYTHONPATH"] = str(tmp_path) + os.pathsep + e.get("PYTHONPATH", "")
    e.update(env)
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=e, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r


CHECK = '''
import json, warnings
warnings.simplefilter("always")
import mge, mge.core
x = mge.tensor([3.0, 4.0])
print(json.dumps({"names": [t.name for t in mge.core.transformations()],
                  "value": (x + x).numpy().tolist(),
                  "errors": {k: str(v) for k, v in mge.core.plugin_errors().items()}}))
'''


def test_third_party_plugin_package_intercepts_ops(tmp_path):
    _install_fake_package(tmp_path, "mge_doubler", PLUGIN_SRC, "doubler = mge_doubler:Doubler")
    out = json.loads(_run(tmp_path, CHECK).stdout.strip().splitlines()[-1])
    assert out["names"] == ["dtype_promote", "doubler", "dim_expansion", "scalar", "eval"]
    assert out["value"] == [9.0, 16.0]  # x + x became x * x


def test_disable_plugins_env(tmp_path):
    _install_fake_package(tmp_path, "mge_doubler", PLUGIN_SRC, "doubler = mge_doubler:Doubler")
    out = json.loads(_run(tmp_path, CHECK, MGE_DISABLE_PLUGINS="doubler,scalar").stdout.splitlines()[-1])
    assert out["names"] == ["dtype_promote", "dim_expansion", "eval"]
    assert out["value"] == [6.0, 8.0]


def test_broken_plugin_is_reported_and_others_work(tmp_path):
    _install_fake_package(tmp_path, "mge_broken", "raise ImportError('no such thing')\n",
                          "broken = mge_broken:Plugin")
    r = _run(tmp_path, CHECK)
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert "broken" in out["errors"] and "no such thing" in out["errors"]["broken"]
    assert "plugin 'broken'" in r.stderr and "no such thing" in r.stderr
    assert out["value"] == [6.0, 8.0]
    assert out["names"] == ["dtype_promote", "dim_expansion", "scalar", "eval"]


class CastWatcher(Transformation):
    name = "test_cast_watcher"
    position = "before:eval"

    def __init__(self):
        from mge.core import ops
        self.op_types = (ops.TypeCvt,)
        self.casts = 0

    def apply(self, op, inputs, next):
        self.casts += 1
        return next(op, inputs)


def test_ops_emitted_by_a_layer_walk_the_layers_of_their_own_class():
    # dtype_promote turns `int + float` into a cast plus an add; the cast must reach the
    # TypeCvt-only watcher below it, and the Elemwise must not.
    w = CastWatcher()
    core.register_transformation(w)
    try:
        y = mge.tensor([1, 2]) + mge.tensor([0.5, 0.5])
        assert w.casts == 1
        assert y.tolist() == [1.5, 2.5]
    finally:
        core.disable_transformation(w.name)


def test_op_equality_distinguishes_parameter_types():
    from mge.core import OpDef, ops

    class Scale(OpDef):
        _fields = ("factor",)

    assert Scale(1) != Scale(1.0) and Scale(1) != Scale(True) and Scale(2) == Scale(2)
    assert ops.Reduce("sum", (1, 2)) == ops.Reduce("sum", [1, 2])
    assert ops.Elemwise("add") == ops.Elemwise("ADD") and hash(ops.Elemwise("add")) == hash(ops.Elemwise("add"))


def test_op_equality_distinguishes_quantized_dtypes():
    # numpy compares dtypes without metadata; an op's quantization parameters are its own
    from mge.core import ops
    from mge.core.tensor import dtype as qd

    assert ops.TypeCvt(qd.qint8(0.1)) != ops.TypeCvt(qd.qint8(0.2))
    assert ops.TypeCvt(qd.qint8(0.1)) == ops.TypeCvt(qd.qint8(0.1))
    assert ops.TypeCvt.get(qd.qint8(0.2)).dtype.metadata["mgb_dtype"]["scale"] == 0.2
    assert ops.TypeCvt(qd.qint8(0.1)) != ops.TypeCvt(np.dtype("int8"))


def test_rules_table_is_called_directly_for_its_classes():
    seen = []

    class Table(Transformation):
        name = "test_rules_table"
        position = "before:eval"

        def __init__(self):
            self.rules = {ops.Elemwise: self.elemwise}

        def elemwise(self, op, inputs, next):
            seen.append(type(op).__name__)
            return next(op, inputs)

        def apply(self, op, inputs, next):  # never used: the table decides
            raise AssertionError("apply called")

    core.register_transformation(Table())
    try:
        x = mge.tensor([1.0, 2.0])
        y = (x + 1).reshape(2, 1)
        assert seen == ["Elemwise"], seen  # the reshape is not in the table
        assert y.shape == (2, 1)
    finally:
        core.disable_transformation("test_rules_table")


def test_stack_chains_have_no_reference_cycles():
    # MegEngine's test_release: a recording, entered and left with the collector off, leaves no
    # objects behind (the stack's replaced chains are freed by reference counting)
    import gc
    import numpy as _np
    import mge as _mge
    from mge.core.autodiff.grad import Grad
    x = _mge.Tensor([0.0])
    dy = _mge.Tensor(_np.ones(1, "float32"))

    def run():
        with Grad() as g:
            g.wrt(x)
            y = x * x
            g(y, dy)

    run()
    gc.collect()
    gc.disable()
    try:
        counts = []
        for _ in range(3):
            run()
            counts.append(len(gc.get_objects()))
        assert counts[1] == counts[2]
    finally:
        gc.enable()
