"""mge.distributed across processes on MPI (loopback): 2 and 4 ranks started by ``dist.launcher``
through ``mpiexec``; every collective against numpy, a data-parallel SGD step against the same
step on the whole batch in one process, SyncBatchNorm against full-batch BatchNorm, sharded
sampling, and the fault cases (a raising rank, a dying rank, a hung rank), each bounded in time.

Each launch runs many checks and returns their values; the comparisons run here.  Skipped with a
reason where mpi4py or mpiexec is missing (``pip install 'mge[distributed]'``).
"""
import os
import shutil
import sys
import time

import numpy as np
import pytest

import mge
import mge.distributed as dist
import mge.functional as F
import mge.module as M

try:
    import mpi4py  # noqa: F401
    from mge.distributed.launcher import _mpiexec
    _mpiexec()
    _MISSING = None
except (ImportError, RuntimeError) as e:
    _MISSING = f"mge.distributed over MPI needs mpi4py and mpiexec (pip install 'mge[distributed]'): {e}"

pytestmark = pytest.mark.skipif(_MISSING is not None, reason=_MISSING or "")

TIMEOUT = 120  # a whole launch; the fault cases use less


def _inp(rank):
    return (np.arange(24, dtype="float32").reshape(4, 6) * (rank + 1) - 3 * rank)


# -- the ranks' programs ---------------------------------------------------------------------------
def _collectives():
    r, n = dist.get_rank(), dist.get_world_size()
    x = mge.tensor(_inp(r))
    fd = F.distributed
    out = {"rank": r, "size": n, "distributed": dist.is_distributed()}
    out["sum"] = fd.all_reduce_sum(x).numpy()
    out["max"] = fd.all_reduce_max(x).numpy()
    out["min"] = fd.all_reduce_min(x).numpy()
    out["gather0"] = fd.all_gather(x).numpy()
    out["gather1"] = fd.all_gather(x, axis=1).numpy()
    out["rs0"] = fd.reduce_scatter_sum(mge.tensor(np.tile(_inp(r), (n, 1)))).numpy()
    out["rs1"] = fd.reduce_scatter_sum(mge.tensor(np.tile(_inp(r), (1, n))), axis=1).numpy()
    out["bcast"] = fd.broadcast(x).numpy()
    red = fd.reduce_sum(x)
    out["reduce"] = None if red is None else red.numpy()
    g = fd.gather(x, axis=1)
    out["gather"] = None if g is None else g.numpy()
    out["scatter"] = fd.scatter(mge.tensor(np.tile(_inp(r), (n, 1)))).numpy()
    out["a2a"] = fd.all_to_all(mge.tensor(np.tile(_inp(r), (n, 1)))).numpy()
    out["int"] = fd.all_reduce_sum(mge.tensor(np.arange(5, dtype="int32") + r)).numpy()
    out["f16"] = fd.all_gather(mge.tensor(np.ones(3, "float16") * r)).numpy()
    # point to point: a ring
    fd.remote_send(x * 2, (r + 1) % n)
    out["recv"] = fd.remote_recv((r - 1) % n).numpy()
    # a subgroup of ranks 0 and the last, the last first (its root)
    if r in (0, n - 1):
        sub = dist.new_group([n - 1, 0])
        out["sub"] = fd.all_reduce_sum(x, group=sub).numpy()
        out["subrank"] = sub.rank
    # gradients: all_gather <-> reduce_scatter, all_reduce_sum, broadcast -> reduce to root
    p = mge.Parameter(_inp(r))
    gm = mge.autodiff.GradManager().attach([p])
    with gm:
        y = fd.all_gather(p * p).sum() * (r + 1) + (fd.all_reduce_sum(p) * (r + 1)).sum() \
            + (fd.broadcast(p) * (r + 1)).sum()
        gm.backward(y)
    out["grad"] = p.grad.numpy()
    # mismatched shapes across ranks: the same clear error on every rank
    try:
        fd.all_reduce_sum(mge.tensor(np.zeros(3 + r, "float32"))).numpy()
        out["mismatch"] = "no error"
    except Exception as e:
        out["mismatch"] = repr(e.__cause__ if e.__cause__ is not None else e)
    # an input no one else sees takes the result in place (large: not a tiny host value)
    big = np.tile(_inp(r), (1, 2000))
    out["sum_tmp"] = fd.all_reduce_sum(mge.tensor(big) * 2).numpy()
    out["max_tmp"] = fd.all_reduce_max(mge.tensor(big) + 1).numpy()
    out["bcast_tmp"] = fd.broadcast(mge.tensor(big) * 3).numpy()
    try:
        fd.all_reduce_sum(mge.tensor(np.zeros(50000 + r, "float32")) * 2).numpy()
        out["mismatch_tmp"] = "no error"
    except Exception as e:
        out["mismatch_tmp"] = repr(e.__cause__ if e.__cause__ is not None else e)
    dist.group_barrier()
    out["after"] = fd.all_reduce_sum(mge.tensor([1.0])).numpy()  # still usable
    return out


def _net(seed=3):
    rng = np.random.RandomState(seed)

    class Net(M.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = M.Linear(6, 5)
            self.fc2 = M.Linear(5, 2)

        def forward(self, x):
            return self.fc2(F.relu(self.fc1(x)))

    net = Net()
    for p in net.parameters():
        p._reset(mge.tensor(rng.randn(*p.shape).astype("float32")))
    return net


def _data():
    rng = np.random.RandomState(7)
    return rng.randn(8, 6).astype("float32"), rng.randint(0, 2, 8).astype("int32"), \
        rng.randn(8, 3, 2, 2).astype("float32")


def _one_step(net, x, y):
    gm = mge.autodiff.GradManager()
    cb = [dist.make_allreduce_cb("mean")] if dist.get_world_size() > 1 else []
    gm.attach(net.parameters(), callbacks=cb)
    opt = mge.optimizer.SGD(net.parameters(), lr=0.1)
    with gm:
        loss = F.nn.cross_entropy(net(mge.tensor(x)), mge.tensor(y))
        gm.backward(loss)
    grads = [p.grad.numpy() for p in net.parameters()]
    opt.step()
    return grads, [p.numpy() for p in net.parameters()]


def _training():
    r, n = dist.get_rank(), dist.get_world_size()
    out = {}
    # bcast_list_: every rank starts from rank 0's parameters
    net = _net(seed=3 + r)
    dist.bcast_list_(list(net.parameters()))
    out["params0"] = [p.numpy() for p in net.parameters()]
    x, y, img = _data()
    k = len(x) // n
    out["grads"], out["params1"] = _one_step(net, x[r * k:(r + 1) * k], y[r * k:(r + 1) * k])
    # bucketed all-reduce (a 50-byte bucket threshold: fc2's gradients and fc1's bias, then fc1's
    # weight; the default 10 MiB: one bucket at the end) equals the gradients reduced one by one
    xr, yr = mge.tensor(x[r * k:(r + 1) * k]), mge.tensor(y[r * k:(r + 1) * k])
    for name, thd in (("small", 50), ("default", None)):
        cb = dist.make_allreduce_cb("MEAN")
        if thd is not None:
            cb._param_pack_thd = thd
        ref = lambda p, g: F.distributed.all_reduce_sum(g) / n  # noqa: E731
        grads = {}
        for key, cbs in (("bucket", [cb]), ("ref", [ref])):
            net2 = _net(seed=11)
            gm = mge.autodiff.GradManager().attach(net2.parameters(), callbacks=cbs)
            for _ in range(2):  # the callback's state is per backward
                with gm:
                    gm.backward(F.nn.cross_entropy(net2(xr), yr))
            grads[key] = [p.grad.numpy() for p in net2.parameters()]
        out["bucket_" + name] = (grads["bucket"], grads["ref"], list(cb._packed))
    # SyncBatchNorm on this rank's part of the batch
    bn = M.SyncBatchNorm(3)
    bn.weight._reset(mge.tensor(np.array([1.5, -0.5, 2.0], "float32").reshape(1, 3, 1, 1)))
    xi = mge.tensor(img[r * k:(r + 1) * k])
    gm = mge.autodiff.GradManager().attach([xi, bn.weight, bn.bias])
    with gm:
        o = bn(xi)
        gm.backward((o * o * mge.tensor(np.arange(3, dtype="float32").reshape(1, 3, 1, 1))).sum())
    out["bn"] = o.numpy()
    out["bn_dx"] = xi.grad.numpy()
    out["bn_dw"] = bn.weight.grad.numpy()
    out["bn_rm"] = bn.running_mean.numpy()
    out["bn_rv"] = bn.running_var.numpy()
    # sharded sampling: each rank's indices of one epoch
    ds = mge.data.dataset.ArrayDataset(np.arange(10, dtype="float32"))
    for name, sampler in (("seq", mge.data.SequentialSampler(ds, batch_size=2)),
                          ("rand", mge.data.RandomSampler(ds, batch_size=2, seed=5))):
        out[name] = [int(i) for b in sampler for i in b]
    return out


def _raises():
    if dist.get_rank() == 1:
        raise ValueError("rank one fails on purpose")
    F.distributed.all_reduce_sum(mge.tensor([1.0])).numpy()  # waits for rank 1 forever
    return "unreachable"


def _dies():
    if dist.get_rank() == 1:
        os._exit(3)
    F.distributed.all_reduce_sum(mge.tensor([1.0])).numpy()
    return "unreachable"


def _hangs():
    if dist.get_rank() == 1:
        time.sleep(600)
    return dist.get_rank()


# -- the checks ------------------------------------------------------------------------------------
def _check_collectives(res, n):
    xs = [_inp(r) for r in range(n)]
    assert [o["rank"] for o in res] == list(range(n))
    for r, o in enumerate(res):
        assert o["size"] == n and o["distributed"]
        np.testing.assert_array_equal(o["sum"], sum(xs))
        np.testing.assert_array_equal(o["max"], np.max(xs, 0))
        np.testing.assert_array_equal(o["min"], np.min(xs, 0))
        np.testing.assert_array_equal(o["gather0"], np.concatenate(xs, 0))
        np.testing.assert_array_equal(o["gather1"], np.concatenate(xs, 1))
        np.testing.assert_array_equal(o["rs0"], sum(xs))
        np.testing.assert_array_equal(o["rs1"], sum(xs))
        np.testing.assert_array_equal(o["bcast"], xs[0])
        if r == 0:
            np.testing.assert_array_equal(o["reduce"], sum(xs))
            np.testing.assert_array_equal(o["gather"], np.concatenate(xs, 1))
        else:
            assert o["reduce"] is None and o["gather"] is None
        np.testing.assert_array_equal(o["scatter"], xs[0])
        np.testing.assert_array_equal(o["a2a"], np.concatenate([x for x in xs], 0))
        assert o["int"].dtype == np.int32
        np.testing.assert_array_equal(o["int"], sum(np.arange(5) + k for k in range(n)))
        np.testing.assert_array_equal(o["f16"], np.repeat(np.arange(n), 3).astype("float16"))
        np.testing.assert_array_equal(o["recv"], 2 * xs[(r - 1) % n])
        if r in (0, n - 1):
            np.testing.assert_array_equal(o["sub"], xs[0] + xs[n - 1])
            assert o["subrank"] == (1 if r == 0 else 0)
        # d/dp of sum_k (k+1) (sum(all_gather(p*p)) + sum(all_reduce_sum(p)) + sum(broadcast(p)))
        c = sum(k + 1 for k in range(n))
        expect = c * 2 * xs[r] + c + (c if r == 0 else 0)
        np.testing.assert_allclose(o["grad"], expect, rtol=1e-6)
        assert "ValueError" in o["mismatch"] and "differ" in o["mismatch"], o["mismatch"]
        big = [np.tile(x, (1, 2000)) for x in xs]
        np.testing.assert_array_equal(o["sum_tmp"], 2 * sum(big))
        np.testing.assert_array_equal(o["max_tmp"], np.max(big, 0) + 1)
        np.testing.assert_array_equal(o["bcast_tmp"], 3 * big[0])
        assert "ValueError" in o["mismatch_tmp"] and "differ" in o["mismatch_tmp"]
        np.testing.assert_array_equal(o["after"], [n])


def test_collectives_2_and_training():
    res = dist.launcher(_collectives, n_gpus=2, timeout=TIMEOUT)()
    _check_collectives(res, 2)
    res = dist.launcher(_training, n_gpus=2, timeout=TIMEOUT)()
    # one process, the whole batch
    net = _net(seed=3)
    p0 = [p.numpy() for p in net.parameters()]
    x, y, img = _data()
    grads, params1 = _one_step(net, x, y)
    for o in res:
        for a, b in zip(o["params0"], p0):
            np.testing.assert_array_equal(a, b)
        for a, b in zip(o["grads"], grads):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
        for a, b in zip(o["params1"], params1):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    for o in res:
        for name, packed in (("small", [("float32", 3), ("float32", 1)] * 2),
                             ("default", [("float32", 4)] * 2)):
            bucketed, ref, got = o["bucket_" + name]
            assert got == packed, (name, got)
            for a, b in zip(bucketed, ref):
                np.testing.assert_array_equal(a, b)
    bn = M.BatchNorm2d(3)
    bn.weight._reset(mge.tensor(np.array([1.5, -0.5, 2.0], "float32").reshape(1, 3, 1, 1)))
    xi = mge.tensor(img)
    gm = mge.autodiff.GradManager().attach([xi, bn.weight, bn.bias])
    with gm:
        o = bn(xi)
        gm.backward((o * o * mge.tensor(np.arange(3, dtype="float32").reshape(1, 3, 1, 1))).sum())
    np.testing.assert_allclose(np.concatenate([r["bn"] for r in res]), o.numpy(), rtol=1e-4,
                               atol=1e-5)
    np.testing.assert_allclose(np.concatenate([r["bn_dx"] for r in res]), xi.grad.numpy(),
                               rtol=1e-4, atol=1e-4)
    for r in res:
        np.testing.assert_allclose(r["bn_rm"], bn.running_mean.numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(r["bn_rv"], bn.running_var.numpy(), rtol=1e-5, atol=1e-6)
    # each rank's weight gradient is its part; together they are the full batch's
    np.testing.assert_allclose(sum(r["bn_dw"] for r in res), bn.weight.grad.numpy(), rtol=1e-4,
                               atol=1e-4)
    for name in ("seq", "rand"):
        seen = sorted(i for r in res for i in r[name])
        assert seen == list(range(10)), (name, [r[name] for r in res])


def test_collectives_4():
    res = dist.launcher(_collectives, n_gpus=4, timeout=TIMEOUT)()
    _check_collectives(res, 4)


def test_raising_rank_fails_the_launch_with_its_traceback():
    t = time.monotonic()
    with pytest.raises(RuntimeError, match=r"rank 1 of 2 raised(.|\n)*rank one fails on purpose"):
        dist.launcher(_raises, n_gpus=2, timeout=60)()
    assert time.monotonic() - t < 30


def test_dying_rank_and_hung_rank_are_bounded():
    t = time.monotonic()
    with pytest.raises(RuntimeError, match="died without a result"):
        dist.launcher(_dies, n_gpus=2, timeout=60)()
    assert time.monotonic() - t < 30
    t = time.monotonic()
    with pytest.raises(TimeoutError, match="timeout of 4 s"):
        dist.launcher(_hangs, n_gpus=2, timeout=4)()
    assert time.monotonic() - t < 20


def test_guide_example_trains_on_2_processes():
    # docs/guides/distributed.rst's example, as written (tests/test_docs_examples.py's pages
    # are listed there; this one needs MPI, so it runs here, skipped with the rest without it)
    import pathlib
    import subprocess
    import textwrap

    text = (pathlib.Path(__file__).resolve().parent.parent / "docs/guides/distributed.rst"
            ).read_text()
    block = text.split(".. code-block:: python\n", 1)[1]
    lines = []
    for line in block.splitlines()[1:]:
        if line and not line.startswith("   "):
            break
        lines.append(line)
    code = textwrap.dedent("\n".join(lines))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "trained on 2 processes" in r.stdout


_ORPHAN_PARENT = r"""
import os, sys, time
import mge.distributed as dist

def work(marks):
    open(os.path.join(marks, "rank.%d" % dist.get_rank()), "w").write(str(os.getpid()))
    time.sleep(120)  # far longer than the test waits

dist.launcher(work, n_gpus=2)(sys.argv[1])
"""


def test_ranks_do_not_outlive_a_killed_launcher(tmp_path):
    # the launcher's process killed with SIGKILL (no chance to clean up): its ranks exit
    import signal
    import subprocess
    script = tmp_path / "parent.py"
    script.write_text(_ORPHAN_PARENT)
    marks = tmp_path / "marks"
    marks.mkdir()
    parent = subprocess.Popen([sys.executable, str(script), str(marks)])
    try:
        deadline = time.monotonic() + 60
        while len(list(marks.iterdir())) < 2:
            assert time.monotonic() < deadline, "the ranks did not start"
            assert parent.poll() is None, "the launcher ended early"
            time.sleep(0.1)
        pids = [int(p.read_text()) for p in marks.iterdir()]
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
    deadline = time.monotonic() + 20
    alive = pids
    while alive and time.monotonic() < deadline:
        time.sleep(0.2)
        alive = [p for p in pids if _alive(p)]
    assert not alive, f"ranks {alive} outlived their launcher"


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not yet reaped by its parent) is gone too
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False
    return True
