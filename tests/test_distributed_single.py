"""mge.distributed in a world of one process (no launcher): rank 0 of size 1."""
import numpy as np
import pytest

import mge
import mge.distributed as dist
import mge.functional as F
from mge.autodiff import GradManager
from mge.core._imperative_rt.core2 import apply
from mge.core.ops.builtin import CollectiveComm


def _x(shape=(2, 4), seed=0):
    return np.random.RandomState(seed).randn(*shape).astype("float32")


def test_world_of_one():
    assert dist.get_rank() == 0 and dist.get_world_size() == 1
    assert not dist.is_distributed()
    assert dist.WORLD.size == 1 and dist.WORLD.rank == 0 and dist.WORLD.key == "0"
    g = dist.new_group([0])
    assert g.size == 1 and g.rank == 0
    with pytest.raises(AssertionError):
        dist.new_group([1])
    dist.group_barrier()  # returns at once
    with pytest.raises(AssertionError, match="init_process_group"):
        dist.get_backend()
    assert F.distributed.all_reduce_sum is dist.functional.all_reduce_sum


def test_init_process_group_needs_mpi(monkeypatch):
    # no MPI launch and nothing at the master's address: a timeout naming the address
    monkeypatch.setenv("MGE_DIST_CONNECT_TIMEOUT", "0.3")
    with pytest.raises(TimeoutError, match="localhost:1234"):
        dist.init_process_group("localhost", 1234, 2, 0, 0)
    with pytest.raises(TypeError):
        dist.init_process_group("localhost", "1234", 2, 0, 0)
    with pytest.raises(ValueError):
        dist.init_process_group("localhost", 1234, 2, 0, 0, backend="gloo")
    assert not dist.is_distributed()


@pytest.mark.parametrize("name", ["all_reduce_sum", "all_reduce_max", "all_reduce_min",
                                  "broadcast", "reduce_sum"])
def test_reductions_of_one_rank(name):
    a = _x()
    x = mge.tensor(a)
    y = getattr(F.distributed, name)(x)
    assert y is not x and y.dtype == x.dtype
    np.testing.assert_array_equal(y.numpy(), a)
    xi = mge.tensor(np.arange(6, dtype="int32").reshape(2, 3))
    assert getattr(F.distributed, name)(xi).dtype == np.int32


@pytest.mark.parametrize("axis", [0, 1])
def test_gather_scatter_of_one_rank(axis):
    a = _x((2, 3, 4), seed=1)
    x = mge.tensor(a)
    for fn in (F.distributed.all_gather, F.distributed.gather, F.distributed.scatter,
               F.distributed.reduce_scatter_sum):
        out = fn(x, axis=axis)
        np.testing.assert_array_equal(out.numpy(), a)
    out = F.distributed.all_to_all(x, split_axis=axis, concat_axis=1 - axis)
    np.testing.assert_array_equal(out.numpy(), a)


def test_collective_gradients():
    a = _x(seed=2)
    x = mge.tensor(a)
    w = np.random.RandomState(3).randn(2, 4).astype("float32")
    gm = GradManager().attach(x)
    with gm:
        y = (F.distributed.all_reduce_sum(x) * w + F.distributed.broadcast(x)
             + F.distributed.reduce_sum(x) * 2 + F.distributed.all_gather(x, axis=1)
             + F.distributed.scatter(x) + F.distributed.gather(x))
        gm.backward(y.sum())
    np.testing.assert_allclose(x.grad.numpy(), w + 1 + 2 + 1 + 1 + 1, rtol=1e-6)


def test_collective_comm_op():
    x = mge.tensor(_x())
    op = CollectiveComm(mode="all_reduce_sum", nr_devices=1, key="0")
    assert op.mode == CollectiveComm.Mode.ALL_REDUCE_SUM
    (y,) = apply(op, x)
    np.testing.assert_array_equal(y.numpy(), x.numpy())
    with pytest.raises(NotImplementedError, match="needs MPI"):
        apply(CollectiveComm(mode="ALL_REDUCE_SUM", nr_devices=2), x)


def test_remote_send_recv():
    x = mge.tensor([1.0])
    with pytest.raises(ValueError, match="out of the world"):  # a world of one process
        F.distributed.remote_send(x, 1)
    with pytest.raises(ValueError, match="out of the world"):
        F.distributed.remote_recv(1)
    with pytest.raises(ValueError):
        F.distributed.remote_send(x, 0)


def test_allreduce_callback():
    rng = np.random.RandomState(4)
    w = mge.Parameter(rng.randn(3, 2).astype("float32"))
    xs = rng.randn(5, 3).astype("float32")
    for method in ("MEAN", "sum"):
        w.grad = None
        gm = GradManager().attach([w], callbacks=[dist.make_allreduce_cb(method, dist.WORLD)])
        with gm:
            gm.backward(F.matmul(mge.tensor(xs), w).sum())
        np.testing.assert_allclose(w.grad.numpy(), xs.sum(0)[:, None].repeat(2, 1), rtol=1e-5)
    with pytest.raises(AssertionError):
        dist.make_allreduce_cb("max")


def test_param_pack_and_bcast():
    a, b = mge.tensor(np.ones(1, "float32")), mge.tensor(np.arange(9, dtype="float32").reshape(3, 3))
    offsets = dist.helper.get_offsets([(1,), (3, 3)])
    assert offsets == [0, 1, 1, 10]
    packed = dist.helper.param_pack_concat([a, b], mge.tensor(offsets), offsets)
    np.testing.assert_array_equal(packed.numpy(), np.r_[1.0, np.arange(9)])
    c, d = dist.helper.param_pack_split(packed, offsets, [(1,), (3, 3)])
    np.testing.assert_array_equal(d.numpy(), b.numpy())
    e, f = dist.helper.pack_allreduce_split([a, b], [(1,), (3, 3)], dist.WORLD, "mean")
    np.testing.assert_array_equal(f.numpy(), b.numpy())
    p = mge.Parameter(np.arange(3, dtype="float32"))
    dist.bcast_list_([p])
    np.testing.assert_array_equal(p.numpy(), [0, 1, 2])


def test_launcher_and_synchronized():
    @dist.launcher
    def f(a, b=1):
        return a + b + dist.get_world_size()

    assert f(2, b=3) == [6]
    assert dist.launcher(n_gpus=1)(lambda: dist.get_rank())() == [0]
    with pytest.raises(NotImplementedError, match="host file"):  # several machines: mpiexec -f
        dist.launcher(n_gpus=2, world_size=4)(lambda: 0)()
    assert dist.synchronized(lambda: 7)() == 7


def test_server_client():
    server = dist.Server()
    try:
        client = dist.Client("localhost", server.py_server_port)
        client.user_set("k", [1, 2])
        assert client.user_get("k") == [1, 2]
        assert client.user_pop("k") == [1, 2]
        client.group_barrier("0", 1)
        assert client.get_mm_server_port() == 0
    finally:
        server.close()
