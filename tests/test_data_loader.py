"""mge.data.DataLoader: in-process and with worker processes -- batches and their order, worker
errors with their traceback, killed workers, timeout, cleanup (end of epoch, garbage collection,
KeyboardInterrupt), worker seeding (against MegEngine's recorded seeds), stream datasets, preload
and the shared-memory path."""
import gc
import multiprocessing
import os
import signal
import sys
import time

import numpy as np
import pytest

import mge
from mge.data import DataLoader, RandomSampler, SequentialSampler, StreamSampler
from mge.data import _transport
from mge.data.dataloader import get_worker_info
from mge.data.dataset import ArrayDataset, Dataset, StreamDataset
from mge.data.transform import Compose, CudaTransform, Normalize, ToMode, Transform

HERE = os.path.dirname(os.path.abspath(__file__))
REFS = np.load(os.path.join(HERE, "data", "megengine_data_transforms.npz"))

pytestmark = pytest.mark.skipif(multiprocessing.get_start_method() != "fork",
                                reason="the worker tests fork the test process")


@pytest.fixture(autouse=True)
def _no_children_left():
    yield
    left = multiprocessing.active_children()
    assert left == [], "worker processes left behind: %r" % left


def image_dataset(n=40, size=6):
    rng = np.random.RandomState(0)
    return ArrayDataset(rng.randint(0, 256, (n, size, size, 3)).astype(np.uint8),
                        np.arange(n, dtype=np.int32))


def pipeline():
    return Compose([Normalize(mean=(103, 116, 123), std=(57, 57, 58)), ToMode("CHW")])


def test_init_errors_and_defaults():
    ds = image_dataset()
    with pytest.raises(ValueError, match="num_workers"):
        DataLoader(ds, num_workers=-1)
    with pytest.raises(ValueError, match="num_workers"):
        DataLoader(ds, num_workers=1.5)
    with pytest.raises(ValueError, match="timeout"):
        DataLoader(ds, timeout=-1)
    with pytest.raises(ValueError, match="prefetch_factor"):
        DataLoader(ds, prefetch_factor=0)
    with pytest.raises(AssertionError, match="sampler"):
        DataLoader(ds, sampler=StreamSampler(2))
    loader = DataLoader(ds)
    assert isinstance(loader.sampler, SequentialSampler) and loader.sampler.batch_size == 1
    assert len(DataLoader(ds, sampler=RandomSampler(ds, batch_size=6))) == 7


@pytest.mark.parametrize("num_workers", [0, 2])
def test_batches_in_sampling_order(num_workers):
    ds = image_dataset()
    sampler = RandomSampler(ds, batch_size=6, seed=3)
    loader = DataLoader(ds, sampler=sampler, transform=pipeline(), num_workers=num_workers)
    batches = list(loader)
    order = [i for b in RandomSampler(ds, batch_size=6, seed=3) for i in b]
    labels = np.concatenate([lab for _, lab in batches])
    assert labels.tolist() == order
    data = np.concatenate([d for d, _ in batches])
    expect = (ds.arrays[0][order] - np.float32([103, 116, 123])) / np.float32([57, 57, 58])
    np.testing.assert_allclose(data, expect.transpose(0, 3, 1, 2), rtol=1e-6)
    assert data.dtype == np.float32 and batches[-1][0].shape == (4, 3, 6, 6)


def test_two_epochs_and_two_loaders_at_once():
    ds = image_dataset()
    a = DataLoader(ds, sampler=SequentialSampler(ds, batch_size=8), num_workers=2)
    b = DataLoader(ds, sampler=SequentialSampler(ds, batch_size=20), num_workers=2)
    for _ in range(2):
        for k, (_, lab) in enumerate(a):
            assert lab.tolist() == list(range(8 * k, 8 * k + 8))
            if k == 1:
                assert [lab.tolist()[0] for _, lab in b] == [0, 20]


class Failing(Dataset):
    def __init__(self, bad):
        self.bad = bad

    def __getitem__(self, i):
        if i == self.bad:
            raise ValueError("bad sample %d" % i)
        return np.full((2,), i)

    def __len__(self):
        return 12


def test_worker_exception_carries_traceback():
    loader = DataLoader(Failing(5), sampler=SequentialSampler(Failing(5), batch_size=2),
                        num_workers=2)
    it = iter(loader)
    assert next(it).tolist() == [[0, 0], [1, 1]]
    with pytest.raises(RuntimeError, match="Caught ValueError in DataLoader worker process 0") as e:
        for _ in it:
            pass
    msg = str(e.value)
    assert "Traceback (most recent call last)" in msg
    assert "bad sample 5" in msg and "__getitem__" in msg
    assert multiprocessing.active_children() == []


def test_in_process_exception_is_the_original():
    with pytest.raises(ValueError, match="bad sample 1"):
        list(DataLoader(Failing(1), num_workers=0))


class Killing(Dataset):
    def __getitem__(self, i):
        if i == 3:
            os.kill(os.getpid(), signal.SIGKILL)
        return np.int64(i)

    def __len__(self):
        return 8

    def __init__(self):
        pass


def test_killed_worker_is_an_error_not_a_hang():
    loader = DataLoader(Killing(), sampler=SequentialSampler(Killing(), batch_size=2),
                        num_workers=2)
    with pytest.raises(RuntimeError, match=r"DataLoader worker \(worker\(s\): 1, pid\(s\): \d+\) "
                                           r"exited unexpectedly, exitcode\(s\): -9 \(SIGKILL\)"):
        list(loader)


class Blocking(Dataset):
    def __init__(self):
        pass

    def __getitem__(self, i):
        time.sleep(60)  # a stuck worker (it is killed at the timeout)
        return i

    def __len__(self):
        return 4


def test_timeout():
    loader = DataLoader(Blocking(), num_workers=2, timeout=0.3)
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="dataloader timeout.*timeout=0.3"):
        next(iter(loader))
    assert time.monotonic() - t0 < 10


def test_garbage_collected_iterator_stops_its_workers():
    ds = image_dataset()
    it = iter(DataLoader(ds, sampler=SequentialSampler(ds, batch_size=4), num_workers=2))
    next(it)
    pids = it._fetcher.pids
    assert len(multiprocessing.active_children()) == 2
    del it
    gc.collect()
    assert multiprocessing.active_children() == []
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


class InterruptingParent(Dataset):
    def __init__(self):
        pass

    def __getitem__(self, i):
        os.kill(os.getppid(), signal.SIGINT)  # what Ctrl-C does to the main process
        time.sleep(60)
        return i

    def __len__(self):
        return 4


def test_keyboard_interrupt_stops_workers():
    loader = DataLoader(InterruptingParent(), num_workers=2)
    with pytest.raises(KeyboardInterrupt):
        for _ in loader:
            pass
    assert multiprocessing.active_children() == []


class Seeds(Dataset):
    def __init__(self):
        pass

    def __getitem__(self, i):
        info = get_worker_info()
        return np.array([info.idx, info.seed, np.random.randint(0, 2 ** 31), info.worker])

    def __len__(self):
        return 4


def test_worker_seeds_follow_megengine():
    expected = REFS["loader_seed/7"]
    loader = DataLoader(Seeds(), sampler=SequentialSampler(Seeds(), batch_size=1), num_workers=2)
    runs = []
    for _ in range(2):
        mge.random.seed(7)
        epochs = [np.concatenate(list(loader)) for _ in range(2)]
        runs.append(epochs)
    np.testing.assert_array_equal(runs[0], runs[1])  # deterministic
    for e, rows in enumerate(runs[0]):
        assert rows[:, 0].tolist() == [0, 1, 0, 1] and (rows[:, 3] == 2).all()
        for w in (0, 1):  # worker w's RNG was seeded with MegEngine's base seed + w
            mine = rows[rows[:, 0] == w]
            assert (mine[:, 1] == expected[e] + w).all()
            rs = np.random.RandomState(expected[e] + w)
            assert mine[:, 2].tolist() == [rs.randint(0, 2 ** 31) for _ in mine]
    assert get_worker_info() is None  # in the main process


def test_worker_init_fn_and_its_errors():
    class WhoAmI(Dataset):
        def __init__(self):
            pass

        def __getitem__(self, i):
            return np.int64(os.environ["MGE_TEST_WORKER"])

        def __len__(self):
            return 6

    def init(worker_id):
        os.environ["MGE_TEST_WORKER"] = str(100 + worker_id)

    got = np.concatenate(list(DataLoader(WhoAmI(), num_workers=2, worker_init_fn=init)))
    assert got.tolist() == [100, 101] * 3

    def bad_init(worker_id):
        raise KeyError("no init for %d" % worker_id)

    with pytest.raises(RuntimeError, match="Caught KeyError in DataLoader worker process"):
        list(DataLoader(WhoAmI(), num_workers=2, worker_init_fn=bad_init))


def test_large_batches_travel_through_shared_memory(monkeypatch):
    if not _transport.shm_supported("fork"):
        pytest.skip("no memfd on this system")
    slots = []
    real = _transport.decode

    def spy(msg):
        out = real(msg)
        slots.append(out[1])
        return out

    monkeypatch.setattr(_transport, "decode", spy)
    data = np.random.RandomState(1).rand(32, 3, 32, 32).astype(np.float32)
    ds = ArrayDataset(data, np.arange(32))
    batches = list(DataLoader(ds, sampler=SequentialSampler(ds, batch_size=8), num_workers=2))
    np.testing.assert_array_equal(np.concatenate([d for d, _ in batches]), data)
    assert batches[0][0].flags["WRITEABLE"]
    assert len(slots) == 4 and all(s is not None for s in slots)


class Numbers(StreamDataset):
    def __init__(self, n):
        self.n = n

    def __iter__(self):
        info = get_worker_info()
        lo, step = (0, 1) if info is None else (info.idx, info.worker)
        for i in range(lo, self.n, step):
            yield np.full((2, 2, 3), i, np.uint8), i


@pytest.mark.parametrize("num_workers,parallel", [(0, False), (2, False), (2, True)])
def test_stream_dataset(num_workers, parallel):
    loader = DataLoader(Numbers(10), sampler=StreamSampler(batch_size=3), transform=pipeline(),
                        num_workers=num_workers, parallel_stream=parallel)
    batches = list(loader)
    labels = [lab.tolist() for _, lab in batches]
    assert batches[0][0].shape == (3, 3, 2, 2)
    if parallel:  # worker 0 streams the even numbers, worker 1 the odd ones, batches alternate
        assert labels == [[0, 2, 4], [1, 3, 5], [6, 8], [7, 9]]
    else:
        assert labels == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]


class StuckStream(StreamDataset):
    def __init__(self):
        pass

    def __iter__(self):
        yield np.zeros(2), 0
        time.sleep(60)  # stuck
        yield np.zeros(2), 1


def test_stream_timeout_in_process():
    loader = DataLoader(StuckStream(), sampler=StreamSampler(batch_size=2), timeout=0.3)
    with pytest.raises(RuntimeError, match="dataloader timeout"):
        next(iter(loader))


def test_stream_worker_exception():
    class Bad(Transform):
        def apply(self, x):
            raise RuntimeError("test raise error")

    loader = DataLoader(Numbers(10), sampler=StreamSampler(batch_size=2), transform=Bad(),
                        num_workers=2, parallel_stream=True)
    with pytest.raises(RuntimeError, match="Caught RuntimeError in DataLoader worker process"):
        next(iter(loader))


@pytest.mark.parametrize("num_workers", [0, 2])
def test_preload_yields_tensors(num_workers):
    ds = image_dataset(10)
    loader = DataLoader(ds, sampler=SequentialSampler(ds, batch_size=4), transform=pipeline(),
                        num_workers=num_workers, preload=True)
    batches = list(loader)
    assert len(batches) == 3
    data, label = batches[0]
    assert isinstance(batches[0], list)
    assert isinstance(data, mge.Tensor) and isinstance(label, mge.Tensor)
    assert data.shape == (4, 3, 6, 6) and label.numpy().tolist() == [0, 1, 2, 3]
    assert batches[2][1].numpy().tolist() == [8, 9]


def test_cuda_transform_runs_on_the_batch_in_the_main_process():
    class Twice(CudaTransform):
        def apply(self, batch):
            return [batch[0] * 2, batch[1], os.getpid()]

    ds = ArrayDataset(np.ones((4, 2)), np.arange(4))
    for nw in (0, 2):
        out = list(DataLoader(ds, sampler=SequentialSampler(ds, batch_size=2), transform=Twice(),
                              num_workers=nw))
        assert out[0][0].tolist() == [[2, 2], [2, 2]] and out[0][2] == os.getpid()


def test_megengine_import_names():
    import mge as megengine
    from mge.data import DataLoader as D
    assert megengine.data.DataLoader is D
    assert "data" in megengine.__all__
    for name in megengine.data.__all__:
        assert getattr(megengine.data, name).__doc__, name
