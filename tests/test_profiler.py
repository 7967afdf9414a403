"""The profiler (mge.utils.profiler): events of a training step (eager, traced, under DTR), the
Trace Event format, memory counters against mge.device, the memory picture, the analyzer, errors."""
import gc
import io
import json
import os
import xml.etree.ElementTree as ET
from contextlib import redirect_stdout

import numpy as np
import pytest

import mge
import mge.device as D
import mge.functional as F
import mge.module as M
import mge.optimizer as optim
from mge._core import profiler as _rec
from mge.autodiff import GradManager
from mge.utils import profile_analyze
from mge.utils.profiler import Profiler, is_profiling, merge_trace_events, profile, scope

PHASES = {"B", "E", "i", "C", "s", "f", "M"}


@pytest.fixture(autouse=True)
def _clean():
    yield
    if _rec.active() is not None:  # a failed test must not leave a profile running
        _rec.stop()
    mge.dtr.disable()
    mge.dtr.eviction_threshold = 0
    mge.dtr.evictee_minimum_size = "1MB"
    mge.config.async_level = 2


class _Net(M.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = M.Linear(32, 64)
        self.fc2 = M.Linear(64, 10)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


def _setup(seed=0):
    np.random.seed(seed)
    mge.random.seed(seed)
    net = _Net()
    gm = GradManager().attach(net.parameters())
    opt = optim.SGD(net.parameters(), lr=0.1)
    x = mge.tensor(np.random.randn(16, 32).astype("float32"))
    y = mge.tensor(np.random.randint(0, 10, 16).astype("int32"))

    def step(x, y):
        with gm:
            loss = F.nn.cross_entropy(net(x), y)
            gm.backward(loss)
        opt.step()
        opt.clear_grad()
        return loss

    return step, x, y


def _profile(tmp_path, fn, **kw):
    p = Profiler(str(tmp_path), formats=["chrome_timeline.json", "memory_flow.svg"], **kw)
    with p:
        out = fn()
    base = os.path.join(str(tmp_path), str(os.getpid()))
    with open(base + ".chrome_timeline.json", encoding="utf-8") as f:
        data = json.load(f)
    return p, data, base + ".memory_flow.svg", out


def _spans(events):
    """(B event, E event, parent B event or None) per matched pair, per thread."""
    stacks, out = {}, []
    for e in events:
        key = (e.get("pid"), e.get("tid"))
        if e["ph"] == "B":
            stacks.setdefault(key, []).append(e)
        elif e["ph"] == "E":
            b = stacks[key].pop()
            parent = stacks[key][-1] if stacks[key] else None
            out.append((b, e, parent))
    return out


def _enclosing(events):
    """For each s/f event (by id(event)), the stack of B events open on its thread then."""
    stacks, found = {}, {}
    for e in events:
        key = (e.get("pid"), e.get("tid"))
        if e["ph"] == "B":
            stacks.setdefault(key, []).append(e)
        elif e["ph"] == "E":
            stacks[key].pop()
        elif e["ph"] in ("s", "f"):
            found[id(e)] = list(stacks.get(key, []))
    return found


def _check_format(data):
    assert isinstance(data, dict) and isinstance(data["traceEvents"], list)
    events = data["traceEvents"]
    last = {}
    for e in events:
        assert e["ph"] in PHASES, e
        assert isinstance(e["name"], str) and e["name"]
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int)
        if e["ph"] == "M":
            continue
        assert isinstance(e["ts"], (int, float)) and e["ts"] >= 0
        track = (e["pid"], e["tid"])
        assert e["ts"] >= last.get(track, 0), ("timestamps go back on a track", e)
        last[track] = e["ts"]
        assert isinstance(e.get("cat"), str)
        if e["ph"] == "C":
            assert e["args"] and all(isinstance(v, (int, float)) for v in e["args"].values())
        if e["ph"] == "i":
            assert e["s"] in ("t", "p", "g")
        if e["ph"] in ("s", "f"):
            assert isinstance(e["id"], int)
        if e["ph"] == "f":
            assert e["bp"] == "e"
    # B/E pairs match (name, category) and nest on every thread, and end after they begin
    stacks = {}
    for e in events:
        key = (e["pid"], e["tid"])
        if e["ph"] == "B":
            stacks.setdefault(key, []).append(e)
        elif e["ph"] == "E":
            assert stacks.get(key), ("an E without its B", e)
            b = stacks[key].pop()
            assert (b["name"], b["cat"]) == (e["name"], e["cat"])
            assert e["ts"] >= b["ts"]
    assert all(not s for s in stacks.values()), "spans left open"
    names = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert any(n.startswith("caller") for n in names)
    return events


def _check_flows(events):
    """Every flow goes from a dispatch (an enqueue or host-compute slice) to a kernel of the
    same op; every kernel not inside another kernel or a recomputation ends one."""
    enc = _enclosing(events)
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    ends = {e["id"]: e for e in events if e["ph"] == "f"}
    assert starts and set(starts) == set(ends)
    for fid, s in starts.items():
        f = ends[fid]
        assert (s["cat"], s["name"]) == (f["cat"], f["name"])
        src = enc[id(s)]
        assert src and src[-1]["cat"] == "channel" and src[-1]["args"]["flow"] == fid
        dst = enc[id(f)]
        assert dst and dst[-1]["cat"] == "kernel" and dst[-1]["name"] == s["name"]
        assert dst[-1]["args"]["flow"] == fid
        assert f["ts"] >= s["ts"]
    for b, e, parent in _spans(events):
        if b["cat"] == "kernel" and (parent is None or parent["cat"] not in ("kernel", "dtr")):
            assert "flow" in b["args"], b
    return starts


def _check_commands(events, worker_tid_names=("mge worker",)):
    """Every ApplyOp command has its kernel inside it, on the command's thread (the caller's or
    the worker's, whichever ran it)."""
    spans = _spans(events)
    children = {}
    for b, e, parent in spans:
        if parent is not None:
            children.setdefault(id(parent), []).append(b)
    n = 0
    for b, e, parent in spans:
        if b["cat"] == "command" and b["name"] == "ApplyOp":
            kernels = [c for c in children.get(id(b), []) if c["cat"] == "kernel"]
            assert [k["name"] for k in kernels][-1:] == [b["args"]["op"]], b
            assert all(k["tid"] == b["tid"] for k in kernels)
            n += 1
    return n


def _counter_at(events, name, ts):
    value = None
    for e in events:
        if e["ph"] == "C" and e["name"] == name:
            if e["ts"] > ts:
                break
            value = e["args"]
    return value


def _memory_counter_name(events):
    # the device the step ran on: the memory track with the most points (devices that earlier
    # tests made and left have a track too, with their value when the profile started)
    counts = {}
    for e in events:
        if e["ph"] == "C" and e["name"].startswith("memory ") and "allocated" in e["args"]:
            counts[e["name"]] = counts.get(e["name"], 0) + 1
    assert counts, "no memory counter"
    name = max(counts, key=counts.get)
    assert counts[name] > 2 and sum(1 for c in counts.values() if c > 2) == 1, counts
    return name


def _check_memory(events, checks):
    name = _memory_counter_name(events)
    marks = {e["name"]: e["ts"] for e in events if e["ph"] == "B" and e["cat"] == "scope"}
    for label, expected in checks:
        assert _counter_at(events, name, marks[label])["allocated"] == expected, label


def _run_with_checks(step, x, y, n=2):
    checks = []
    for k in range(n):
        loss = step(x, y)
        mge._full_sync()
        label = f"check {k}"
        checks.append((label, D.get_allocated_memory()))
        with scope(label):
            pass
    value = loss.item()
    return checks, value


# -- the training step ------------------------------------------------------------------------
def test_eager_training_step_events(tmp_path):
    step, x, y = _setup()
    step(x, y)  # warm caches
    p, data, svg, (checks, loss) = _profile(tmp_path, lambda: _run_with_checks(step, x, y),
                                            with_scopes=True)
    events = _check_format(data)
    starts = _check_flows(events)
    _check_commands(events)
    _check_memory(events, checks)
    # every op that reached the channel has a kernel; dispatch spans carry the op's parameters
    kernels = [e for e in events if e["ph"] == "B" and e["cat"] == "kernel"]
    assert {s["name"] for s in starts.values()} == {k["name"] for k in kernels}
    for needed in ("MatrixMul", "Elemwise.relu", "SGDUpdate"):
        assert needed in {k["name"] for k in kernels}
    mm = [e for e in events if e["ph"] == "B" and e["cat"] == "dispatch" and e["name"] == "MatrixMul"]
    assert mm and set(mm[0]["args"]) >= {"transposeA", "transposeB"}
    # scopes: modules (with_scopes), functionals, backward, the user's
    scopes = {e["name"] for e in events if e["ph"] == "B" and e["cat"] == "scope"}
    assert {"_Net", "Linear", "backward", "relu", "check 0"} <= scopes
    # counters: memory, live tensors, pending commands
    counters = {e["name"] for e in events if e["ph"] == "C"}
    assert {"tensors", "commands"} <= counters
    assert np.isfinite(loss)
    assert not is_profiling()


def test_profiled_results_are_the_unprofiled_results(tmp_path):
    step, x, y = _setup(3)
    ref = [step(x, y).numpy() for _ in range(2)]
    step, x, y = _setup(3)
    with Profiler(str(tmp_path)):
        got = [step(x, y).numpy() for _ in range(2)]
    np.testing.assert_array_equal(ref, got)


def test_kernels_of_long_ops_run_on_the_worker_thread(tmp_path):
    a = mge.tensor(np.random.RandomState(0).rand(256, 256).astype("float32"))
    mge._full_sync()

    def run():
        c = F.matmul(a, a)
        return (c * 2).sum().item()

    _, data, _, _ = _profile(tmp_path, run)
    events = _check_format(data)
    _check_flows(events)
    assert _check_commands(events) >= 1
    tids = {e["args"]["name"]: e["tid"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    mm = [e for e in events if e["ph"] == "B" and e["cat"] == "kernel" and e["name"] == "MatrixMul"]
    assert mm and all(k["tid"] == tids["mge worker"] for k in mm)
    # the flow crosses threads: dispatch on the caller, kernel on the worker
    s = [e for e in events if e["ph"] == "s" and e["name"] == "MatrixMul"][0]
    assert s["tid"] != tids["mge worker"]
    waits = [e for e in events if e["ph"] == "B" and e["cat"] == "wait"]
    assert waits  # .item() waited for the sum


def test_traced_training_step_events(tmp_path):
    step, x, y = _setup(1)
    traced = mge.jit.trace(step)
    traced(x, y)  # records
    traced(x, y)  # replays (compiles)
    p, data, svg, (checks, loss) = _profile(tmp_path, lambda: _run_with_checks(traced, x, y))
    events = _check_format(data)
    _check_flows(events)
    _check_commands(events)
    _check_memory(events, checks)
    names = {e["name"] for e in events if e["ph"] == "B"}
    assert "trace replay step" in names
    kernels = [e for e in events if e["ph"] == "B" and e["cat"] == "kernel"]
    assert any("TracedProgram" in k["name"] or "trace" in k["name"].lower() for k in kernels), \
        {k["name"] for k in kernels}
    # a record is recorded too
    step2, x2, y2 = _setup(2)
    traced2 = mge.jit.trace(step2)
    _, data2, _, _ = _profile(tmp_path, lambda: traced2(x2, y2).item())
    names2 = {e["name"] for e in _check_format(data2) if e["ph"] == "B"}
    assert "trace record step" in names2


def test_dtr_evictions_and_recomputations(tmp_path):
    n = 4096
    x = mge.tensor(np.random.RandomState(0).rand(n).astype("float32"))
    gc.collect()
    mge._full_sync()
    base = D.get_allocated_memory()
    mge.dtr.evictee_minimum_size = 1024
    mge.dtr.eviction_threshold = base + 5 * 4 * n
    mge.dtr.enable()

    def run():
        ys = [x]
        for _ in range(12):
            ys.append(F.sin(ys[-1]) * 1.5)
        return [y.numpy() for y in reversed(ys)][::-1]

    _, data, svg, got = _profile(tmp_path, run)
    mge.dtr.disable()
    expected = [x.numpy()]
    for _ in range(12):
        expected.append(np.sin(expected[-1]) * np.float32(1.5))
    for g, e in zip(got, expected):
        np.testing.assert_array_equal(g, e)
    events = _check_format(data)
    _check_flows(events)
    _check_commands(events)
    evicts = [e for e in events if e["ph"] == "i" and e["name"] == "evict"]
    assert evicts and all(e["args"]["bytes"] == 4 * n for e in evicts if e["args"]["auto"])
    rec = [b for b, e, parent in _spans(events) if b["cat"] == "dtr"]
    assert rec and all(b["name"].startswith("recompute ") for b in rec)
    # each recomputation runs its op's kernel inside it
    inside = {parent["name"] for b, e, parent in _spans(events)
              if b["cat"] == "kernel" and parent is not None and parent["cat"] == "dtr"}
    assert inside and all(name.startswith("recompute ") for name in inside)


# -- outputs ---------------------------------------------------------------------------------
def test_memory_flow_svg_has_one_rect_per_tensor(tmp_path):
    step, x, y = _setup()
    _, data, svg, _ = _profile(tmp_path, lambda: step(x, y).item())
    root = ET.parse(svg).getroot()
    ns = {"s": "http://www.w3.org/2000/svg"}
    rects = root.findall(".//s:rect[@class='tensor']", ns)
    allocs = [e for e in data["traceEvents"] if e["ph"] == "i" and e["name"] == "alloc"]
    assert len(rects) == len(allocs) > 0
    assert {r.get("data-id") for r in rects} == {str(a["args"]["id"]) for a in allocs}
    assert root.findall(".//s:path[@class='memory']", ns)
    assert all(r.find("s:title", ns).text for r in rects)


def test_analyzer_tables(tmp_path):
    step, x, y = _setup()
    _, data, _, _ = _profile(tmp_path, lambda: step(x, y).item())
    events = data["traceEvents"]
    report = profile_analyze.analyze(events, top=3, sort="mean")
    assert 0 < len(report["kernels"]) <= 3
    means = [r["mean"] for r in report["kernels"]]
    assert means == sorted(means, reverse=True)
    peak = max(e["args"]["allocated"] for e in events
               if e["ph"] == "C" and e["name"] == _memory_counter_name(events))
    assert report["peak"]["bytes"] == peak
    assert report["alive_bytes"] == peak  # the tensors alive at the peak make it up exactly
    assert report["threads"] and report["threads"][0]["total"] > 0
    buf = io.StringIO()
    with redirect_stdout(buf):
        assert profile_analyze.main([str(tmp_path), "--top", "2", "--sort", "calls"]) == 0
    text = buf.getvalue()
    for title in ("Top ops by kernel time", "Waits", "Kernel time per thread", "Peak memory",
                  "Tensors alive at the peak"):
        assert title in text
    buf = io.StringIO()
    with redirect_stdout(buf):
        profile_analyze.main([str(tmp_path), "--json", "--top", "1"])
    assert len(json.loads(buf.getvalue())["kernels"]) == 1
    with pytest.raises(SystemExit) as e, redirect_stdout(io.StringIO()) as out:
        profile_analyze.main(["--help"])
    assert e.value.code == 0 and "--top" in out.getvalue() and "--sort" in out.getvalue()


def test_merge_trace_events(tmp_path):
    step, x, y = _setup()
    _profile(tmp_path, lambda: step(x, y).item())
    src = os.path.join(str(tmp_path), f"{os.getpid()}.chrome_timeline.json")
    with open(src) as f:
        data = json.load(f)
    with open(os.path.join(str(tmp_path), "1.chrome_timeline.json"), "w") as f:
        json.dump(data, f)
    path = merge_trace_events(str(tmp_path))
    with open(path) as f:
        merged = json.load(f)["traceEvents"]
    n = sum(1 for e in data["traceEvents"] if e["name"] != "Metadata")
    assert len(merged) == 2 * n


# -- the API --------------------------------------------------------------------------------
def test_one_profiler_at_a_time(tmp_path):
    p1 = Profiler(str(tmp_path))
    p1.start()
    try:
        assert is_profiling()
        with pytest.raises(RuntimeError, match="already running"):
            Profiler(str(tmp_path / "b")).start()
        with pytest.raises(RuntimeError):
            with Profiler(str(tmp_path / "c")):
                pass
    finally:
        p1.stop()
    assert not is_profiling()
    with pytest.raises(RuntimeError, match="not running"):
        p1.stop()
    assert p1.dump() and p1.dump() == []  # written once


def test_arguments_are_checked():
    with pytest.raises(ValueError, match="unsupported"):
        Profiler(format="timeline.txt")
    with pytest.raises(TypeError):
        Profiler(formats="chrome_timeline.json")
    with pytest.raises(TypeError, match="unknown option"):
        Profiler(sample_rat=3)
    p = Profiler("d", formats=["chrome_timeline.json", "memory_flow.svg"], num_tensor_watch=3)
    assert p.directory == "d" and p.format == "chrome_timeline.json"
    assert p.formats == ["chrome_timeline.json", "memory_flow.svg"]
    assert p.path == os.path.join("d", "<PID>.{chrome_timeline.json,memory_flow.svg}")


def test_decorator_and_profile(tmp_path):
    seen = []

    @profile(str(tmp_path / "a"))
    def f(a):
        seen.append(is_profiling())
        return (a * 2).numpy()

    np.testing.assert_array_equal(f(mge.tensor([1.0, 2.0])), [2.0, 4.0])
    assert seen == [True] and not is_profiling()
    assert os.listdir(str(tmp_path / "a")) == [f"{os.getpid()}.chrome_timeline.json"]
    assert isinstance(f.__profiler__, Profiler)

    @scope("inner")
    def g(a):
        return a + 1

    with Profiler(str(tmp_path / "b")) as p:
        with scope("outer"):
            g(mge.tensor([1.0]))
    events = p.recorder.events
    names = [e[4] for e in events if e[0] == "B" and e[3] == "scope"]
    assert names == ["outer", "inner"]


def test_sample_rate_and_profile_device(tmp_path):
    a = mge.tensor(np.ones((8, 8), "float32"))
    with Profiler(str(tmp_path), sample_rate=2) as p:
        for _ in range(4):
            a = a + 1
        a.numpy()
    assert sum(1 for e in p.recorder.events if e[4] == "memory sample") >= 2
    with Profiler(str(tmp_path), profile_device=0) as p:
        (a + 1).numpy()
    assert not [e for e in p.recorder.events if e[3] == "kernel"]


def test_with_backtrace(tmp_path):
    with Profiler(str(tmp_path), with_backtrace=True) as p:
        (mge.tensor([1.0]) * 3).numpy()
    bt = [e[5]["backtrace"] for e in p.recorder.events if e[0] == "B" and e[3] == "dispatch"]
    assert bt and any("test_profiler.py" in line for line in bt[0])


def test_a_profile_started_inside_a_scope_still_nests(tmp_path):
    mge.core.get_channel().push_scope("before")
    try:
        with Profiler(str(tmp_path)) as p:
            with scope("inside"):
                (mge.tensor([1.0]) + 1).numpy()
    finally:
        mge.core.get_channel().pop_scope("before")
    with open(os.path.join(str(tmp_path), f"{os.getpid()}.chrome_timeline.json")) as f:
        _check_format(json.load(f))


def test_idle_profiler_records_nothing():
    assert _rec.active() is None
    rec = _rec.Recorder()
    (mge.tensor([1.0]) + 1).numpy()
    assert rec.events == []
