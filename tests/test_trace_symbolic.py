"""``trace(symbolic=True)``: the first call builds the graph without running it op by op.

The ops are recorded with placeholders whose shapes and dtypes come from the ops' rules; the whole
recording runs as one program when the function returns.  Values that do not depend on the
arguments can be read during that call (they are computed there, each op once); the others, and
unknown shapes, raise ``ValueError`` where they are read, as in MegEngine.  ``SymbolVar`` describes
a tensor of the recording as a var of its graph.  (Every op family and the training steps are
traced both ways in test_trace.py.)
"""
import numpy as np
import pytest

import mge
import mge.functional as F
import mge.module as M
from mge.autodiff import GradManager
from mge.jit import SymbolVar, TraceError, trace
from mge.optimizer import SGD

from helpers import arr, check

NOT_INFERABLE = "can not infer value of this tensor under trace\\(symbolic=True\\)"


def _profiled_ops(tf):
    return {entry["op"]: entry["calls"] for entry in tf.get_profile()["profiler"]["ops"]}


def test_the_first_call_runs_one_program_not_op_by_op():
    def fn(x):
        return F.relu(x * 2 - 1).sum()

    # the first call's kernels run inside the compiled program (the profile counts only those)
    lazy = trace(fn, symbolic=True, profiling=True)
    eager = trace(fn, symbolic=False, profiling=True)
    a = arr((4, 5))
    check(lazy(mge.tensor(a)), fn(mge.tensor(a)).numpy())
    check(eager(mge.tensor(a)), fn(mge.tensor(a)).numpy())
    assert set(_profiled_ops(lazy)) >= {"Elemwise.mul", "Elemwise.sub", "Elemwise.relu",
                                        "Reduce.sum"}
    assert _profiled_ops(eager) == {}  # recorded op by op, eagerly
    for k in range(3):
        b = arr((4, 5), seed=k + 1)
        check(lazy(mge.tensor(b)), fn(mge.tensor(b)).numpy())
    assert _profiled_ops(lazy)["Elemwise.mul"] == 4


def test_shapes_and_dtypes_are_known_while_recording():
    seen = []

    @trace(symbolic=True)
    def fn(x, idx):
        y = F.matmul(x, x.T).astype("float16")
        z = y[idx]
        seen.append((y.shape, y.dtype, z.shape, z.ndim, x.shape[0] + 1))
        return z

    a = arr((3, 4))
    i = mge.tensor(np.array([2, 0], "int32"))
    out = fn(mge.tensor(a), i)
    assert seen == [((3, 3), np.float16, (2, 3), 2, 4)]
    np.testing.assert_allclose(out.numpy(), (a @ a.T).astype("float16")[[2, 0]], rtol=1e-3)


def test_a_value_depending_on_an_argument_cannot_be_read():
    @trace(symbolic=True)
    def fn(x):
        y = x * 2
        y.numpy()
        return y

    with pytest.raises(ValueError, match=NOT_INFERABLE) as info:
        fn(mge.tensor([1.0, 2.0]))
    assert "op #0 of the recording, Elemwise.mul" in str(info.value)
    # the runtime goes on; the next call records again (the failed one recorded nothing)
    check(mge.tensor([1.0, 2.0]) * 3, np.array([3.0, 6.0], "float32"))
    with pytest.raises(ValueError, match=NOT_INFERABLE):
        fn(mge.tensor([1.0, 2.0]))


@pytest.mark.parametrize("read", ["item", "bool", "repr", "float"])
def test_every_way_of_reading_is_refused(read):
    @trace(symbolic=True)
    def fn(x):
        s = F.sum(x)
        {"item": s.item, "bool": lambda: bool(s > 0), "repr": lambda: repr(s),
         "float": lambda: float(s)}[read]()
        return s

    with pytest.raises(ValueError, match=NOT_INFERABLE):
        fn(mge.tensor([1.0, 2.0]))


def test_an_unknown_shape_depending_on_an_argument_cannot_be_read():
    @trace(symbolic=True)
    def fn(x):
        taken, _ = F.cond_take(x > 1, x)
        return taken.shape

    with pytest.raises(ValueError, match="can not infer shape of this tensor.*CondTake"):
        fn(mge.tensor([1.0, 2.0, 3.0]))


def test_unknown_shapes_run_when_not_read():
    tf = trace(lambda x: F.cond_take(x > 1, x)[0] * 2, symbolic=True)
    for k in range(3):
        a = np.array([1.0, 2.0 + k, 3.0, -1.0 - k], "float32")
        check(tf(mge.tensor(a)), a[a > 1] * 2)


def test_values_not_depending_on_arguments_are_computed_when_read():
    w = mge.Parameter(arr((3,), seed=4))
    reads = []

    @trace(symbolic=True)
    def fn(x):
        scale = F.sum(w * w)                   # a parameter's function: inferable
        reads.append(float(scale.item()))
        c = mge.tensor([1.0, 2.0, 3.0]) + 1    # a constant made inside
        reads.append(c.numpy().tolist())
        return x * scale + c

    wa = w.numpy().astype("float64")
    for k in range(3):
        a = arr((3,), seed=k)
        got = fn(mge.tensor(a))
        want = mge.tensor(a) * F.sum(w * w) + (mge.tensor([1.0, 2.0, 3.0]) + 1)
        check(got, want.numpy())
    np.testing.assert_allclose(reads[0], np.sum(wa * wa), rtol=1e-6)
    assert reads[1] == [2.0, 3.0, 4.0]
    assert len(reads) == 6  # (the function's Python runs on every call)


def test_random_values_read_while_recording_are_the_ones_used():
    # a folded op runs once: the value read is the value the program goes on with
    mge.random.seed(7)

    @trace(symbolic=True)
    def fn(x):
        noise = mge.random.normal(size=(4,))
        seen = noise.numpy().copy()
        return x + noise, seen

    a = arr((4,))
    out, seen = fn(mge.tensor(a))
    check(out, (a + seen).astype("float32"))


def test_a_parameter_updated_in_place_and_read_afterwards():
    w = mge.Parameter(np.array([1.0, 2.0], "float32"))
    reads = []

    @trace(symbolic=True)
    def fn(x):
        w._reset(w * 3)        # an update that needs no argument: still inferable
        reads.append(w.numpy().tolist())
        w._reset(w + x)        # one that does
        return w * 1

    out = fn(mge.tensor([10.0, 20.0]))
    assert reads == [[3.0, 6.0]]
    check(out, np.array([13.0, 26.0], "float32"))
    check(w, np.array([13.0, 26.0], "float32"))
    out = fn(mge.tensor([1.0, 1.0]))   # replayed
    check(w, np.array([40.0, 79.0], "float32"))
    assert reads[-1] == [39.0, 78.0]


def test_a_training_step_records_lazily_and_equals_eager():
    def make():
        mge.random.seed(3)
        net = M.Sequential(M.Linear(6, 8), M.ReLU(), M.Linear(8, 3))
        opt = SGD(net.parameters(), lr=0.1, momentum=0.9)
        gm = GradManager().attach(net.parameters())
        return net, opt, gm

    def step(net, opt, gm, x, y):
        with gm:
            loss = F.nn.cross_entropy(net(x), y)
            gm.backward(loss)
        opt.step().clear_grad()
        return loss

    nets = [make(), make()]
    traced = trace(lambda x, y: step(*nets[1], x, y), symbolic=True, profiling=True)
    for k in range(4):
        x = mge.tensor(arr((5, 6), seed=k))
        y = mge.tensor(np.arange(5, dtype="int32") % 3)
        want = step(*nets[0], x, y)
        got = traced(x, y)
        check(got, want.numpy())
        if k == 0:  # the first call ran the training step as one program
            assert _profiled_ops(traced)["MatrixMul"] >= 2
    for p, q in zip(nets[0][0].parameters(), nets[1][0].parameters()):
        check(q, p.numpy())


def test_an_error_while_recording_leaves_the_updates_done_so_far():
    w = mge.Parameter(np.array([1.0, 2.0], "float32"))

    @trace(symbolic=True)
    def fn(x):
        w._reset(w + x)
        raise RuntimeError("user error after the update")

    with pytest.raises(RuntimeError, match="user error"):
        fn(mge.tensor([1.0, 1.0]))
    check(w, np.array([2.0, 3.0], "float32"))  # the update ran, as it would have eagerly


def test_a_shape_error_is_raised_at_the_op_while_recording():
    @trace(symbolic=True)
    def fn(x):
        return x + mge.tensor(np.ones((3,), "float32"))

    with pytest.raises(ValueError, match="shape"):
        fn(mge.tensor(arr((2,))))


def test_symbol_var_describes_a_var_of_the_graph():
    seen = {}

    @trace(symbolic=True)
    def fn(x):
        y = F.relu(x) + 1
        v = SymbolVar(y)
        c = SymbolVar(mge.tensor([1.0, 2.0]) * 2)
        seen.update(shape=v.shape, dtype=v.dtype, inferable=v.inferable, op=v.op.name,
                    c_inferable=c.inferable, c=c.numpy().tolist(), scalar=v._isscalar(),
                    arg_op=SymbolVar(x).op)
        if v.inferable:  # (a replay)
            seen["value"] = v.numpy().tolist()
        else:
            with pytest.raises(ValueError, match=NOT_INFERABLE):
                v.numpy()
        return y

    check(fn(mge.tensor([-1.0, 2.0])), np.array([1.0, 3.0], "float32"))
    assert seen == dict(shape=(2,), dtype=np.float32, inferable=False, op="Elemwise.add",
                        c_inferable=True, c=[2.0, 4.0], scalar=False, arg_op=None)
    check(fn(mge.tensor([-1.0, 2.0])), np.array([1.0, 3.0], "float32"))  # replayed
    assert seen["inferable"] is True and seen["value"] == [1.0, 3.0]  # a replay computes it
    with pytest.raises(TypeError, match="no traced function runs now"):
        SymbolVar(mge.tensor([1.0]))


def test_the_first_call_and_replays_agree_with_eager_on_a_long_chain():
    def fn(x, y):
        for k in range(30):
            x = x * 1.01 + y - 0.5 if k % 2 else F.maximum(x, y) / 1.5
        return x

    tf = trace(fn, symbolic=True)
    for k in range(4):
        a, b = arr((8, 8), seed=k), arr((8, 8), seed=k + 9)
        check(tf(mge.tensor(a), mge.tensor(b)), fn(mge.tensor(a), mge.tensor(b)).numpy())


def test_traced_functions_do_not_nest_while_recording_lazily():
    inner = trace(lambda x: x + 1, symbolic=True)
    outer = trace(lambda x: inner(x) * 2, symbolic=True)
    with pytest.raises(TraceError, match="do not nest"):
        outer(mge.tensor([1.0]))


def test_record_only_records_without_running_and_dumps(tmp_path):
    w = mge.Parameter(np.array([1.0, 2.0], "float32"))
    calls = []

    def fn(x):
        calls.append(1)
        w._reset(w + 1)          # an update: not run by a record_only call
        return F.relu(x) * w

    tf = trace(fn, record_only=True)
    assert tf.symbolic and tf.capture_as_const
    out = tf(mge.tensor([-1.0, 3.0]))
    with pytest.raises(mge.core.UnusableTensorError) as info:
        out.numpy()
    assert "record_only=True) records without running" in str(info.value.__cause__)
    check(w, np.array([1.0, 2.0], "float32"))   # the update did not run
    path = tmp_path / "model.mge"
    tf.dump(str(path), arg_names=["x"])
    model = mge.jit.load(str(path))
    check(model(x=mge.tensor([-1.0, 3.0])), np.array([0.0, 9.0], "float32"))
    # a later call replays and runs
    check(tf(mge.tensor([2.0, 1.0])), np.array([4.0, 3.0], "float32"))
    assert len(calls) == 2
