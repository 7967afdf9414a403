"""``DataLoader``: batches from a dataset, in-process or with worker processes (MegEngine's
``megengine.data.dataloader``)."""
import collections.abc
import logging
import os
import platform
import queue
import threading
import weakref

import numpy as np

from ._seed import next_loader_seed
from ._worker import WorkerInfo, get_worker_info
from .collator import Collator
from .dataset import Dataset, StreamDataset
from .sampler import MapSampler, Sampler, SequentialSampler, StreamSampler
from .transform import CudaTransform, PseudoTransform, Transform

__all__ = ["DataLoader", "get_worker_info", "WorkerInfo"]

logger = logging.getLogger(__name__)


def _non_negative_number(value, name):
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError("{} should be a non-negative number, but got {}={!r}".format(name, name, value))
    if value < 0:
        raise ValueError("{} should not be negative, but got {}={!r}".format(name, name, value))


class DataLoader:
    r"""Iterates over a dataset in batches: the sampler gives the indices of each batch, the
    dataset its samples, ``transform`` changes each sample and ``collator`` merges them.

    Args:
        dataset: a map-style :class:`~.Dataset` or a :class:`~.StreamDataset`.
        sampler: a :class:`~.MapSampler` (map datasets; default: sequential, batch size 1) or a
            :class:`~.StreamSampler` (stream datasets; default batch size 1).
        transform: a :class:`~.Transform` applied to every sample (default: none). A
            :class:`~.CudaTransform` is applied to the collated batch in the main process.
        collator: merges the samples of a batch (default :class:`~.Collator`).
        num_workers: worker processes that fetch, transform and collate batches; 0 does it in
            the calling process.
        timeout: with workers (or a stream dataset), seconds to wait for a batch before raising
            ``RuntimeError("dataloader timeout ...")``; 0 waits for ever.
        preload: yield batches as :class:`~mge.Tensor` s (arrays inside dicts, lists and tuples
            converted; tuples become lists), the next batch converted before the current one is
            returned.
        parallel_stream: with a stream dataset and workers, each worker iterates its own
            ``iter(dataset)`` (see :func:`get_worker_info`); otherwise the main process reads the
            stream and the workers transform and collate.
        worker_init_fn: mge extension, keyword only: called as ``worker_init_fn(worker_id)`` in
            each worker after its seeding, before its first batch.
        prefetch_factor: mge extension, keyword only: batches sent ahead to each worker
            (default 2, as MegEngine).

    Worker processes are started (forked) for every ``iter(loader)``; worker ``i`` seeds
    Python's and numpy's RNGs with ``base + i``, ``base`` drawn per iterator from the global seed
    (:func:`mge.random.seed`) as MegEngine draws it. Batches come in sampling order. An exception
    in a worker is raised in the main process as ``RuntimeError("Caught <Type> in DataLoader
    worker process <i>. Original Traceback ...")``; a worker that dies (a signal, ``os._exit``)
    raises ``RuntimeError("DataLoader worker (...) exited unexpectedly ...")``. The workers are
    stopped when the epoch ends, on an error or timeout, on KeyboardInterrupt and when the
    iterator is garbage-collected.

    Example:
        >>> import numpy as np
        >>> from mge.data import DataLoader, SequentialSampler
        >>> from mge.data.dataset import ArrayDataset
        >>> ds = ArrayDataset(np.arange(10, dtype="float32").reshape(5, 2), np.arange(5))
        >>> loader = DataLoader(ds, sampler=SequentialSampler(ds, batch_size=2))
        >>> [label.tolist() for _, label in loader]
        [[0, 1], [2, 3], [4]]
    """

    def __init__(self, dataset: Dataset, sampler: Sampler = None, transform: Transform = None,
                 collator: Collator = None, num_workers: int = 0, timeout: int = 0,
                 preload: bool = False, parallel_stream: bool = False, *, worker_init_fn=None,
                 prefetch_factor: int = 2):
        if isinstance(num_workers, bool) or not isinstance(num_workers, (int, np.integer)):
            raise ValueError("num_workers should be a non-negative integer, but got "
                             "num_workers={!r}".format(num_workers))
        if num_workers < 0:
            raise ValueError("num_workers should not be negative, but got num_workers={}".format(
                num_workers))
        _non_negative_number(timeout, "timeout")
        if isinstance(prefetch_factor, bool) or not isinstance(prefetch_factor, int) \
                or prefetch_factor < 1:
            raise ValueError("prefetch_factor should be a positive integer, but got "
                             "prefetch_factor={!r}".format(prefetch_factor))
        if worker_init_fn is not None and not callable(worker_init_fn):
            raise ValueError("worker_init_fn should be callable or None, but got "
                             "worker_init_fn={!r}".format(worker_init_fn))
        self.dataset = dataset
        self.num_workers = int(num_workers)
        self.timeout = timeout
        self.preload = preload
        self.parallel_stream = parallel_stream
        self.worker_init_fn = worker_init_fn
        self.prefetch_factor = prefetch_factor

        if isinstance(dataset, StreamDataset):
            self.sampler = sampler if sampler else StreamSampler(batch_size=1)
            assert isinstance(self.sampler, StreamSampler), \
                "types of dataset and sampler do not match: a StreamDataset needs a StreamSampler"
            if parallel_stream is False and self.num_workers > 1:
                logger.warning("Data time will be affected by getting origin-data, please set "
                               "parallel_stream in order to speed up dataloader!")
            self.datakind = "stream"
        else:
            assert isinstance(dataset, Dataset), \
                "Can not recognize this kind of dataset: %s" % type(dataset)
            self.sampler = sampler if sampler else SequentialSampler(dataset, batch_size=1,
                                                                     drop_last=False)
            assert isinstance(self.sampler, MapSampler), \
                "types of dataset and sampler do not match: a map Dataset needs a MapSampler"
            self.datakind = "map"
        self.transform = PseudoTransform() if transform is None else transform
        self.collator = Collator() if collator is None else collator
        if platform.system() == "Linux" and self.num_workers > 0:
            self.check_memory_rationality()

    def __iter__(self):
        if self.datakind == "stream":
            return _StreamDataLoaderIter(self)
        return _MapDataLoaderIter(self)

    def __len__(self):
        return len(self.sampler)

    def check_memory_rationality(self):
        r"""Warn when ``num_workers + 1`` copies of this process's resident memory would exceed the
        cgroup memory limit (workers touching Python objects un-share their copy-on-write pages)."""
        try:
            with open("/proc/self/statm") as f:
                rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            return
        limit = None
        for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
            try:
                with open(path) as f:
                    text = f.read().strip()
                limit = None if text == "max" else int(text)
                break
            except (OSError, ValueError):
                continue
        total = (self.num_workers + 1) * rss
        if limit is not None and limit < total:
            gib = 1024 ** 3
            logger.warning(
                "Each DataLoader worker reads the shared dataset, which can un-share its "
                "copy-on-write memory: up to %.1f GB for %d workers, above the memory limit of "
                "%.1f GB. Keep dataset metadata in numpy arrays rather than lists or tuples.",
                total / gib, self.num_workers, limit / gib)


def _to_tensor(batch):
    from ..tensor import Tensor
    if isinstance(batch, np.ndarray):
        return Tensor(batch)
    if isinstance(batch, (str, bytes)):
        return batch
    if isinstance(batch, collections.abc.Mapping):
        return {k: _to_tensor(v) for k, v in batch.items()}
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):
        return type(batch)(*(_to_tensor(v) for v in batch))
    if isinstance(batch, collections.abc.Sequence):
        return [_to_tensor(v) for v in batch]
    return batch


class _BaseDataLoaderIter:
    def __init__(self, loader):
        self.dataset = loader.dataset
        self.sampler = loader.sampler
        self.transform = loader.transform
        self.collator = loader.collator
        self.num_workers = loader.num_workers
        self.timeout = loader.timeout
        self.preload = loader.preload
        self.parallel_stream = loader.parallel_stream
        self.datakind = loader.datakind
        self.seed = next_loader_seed()
        self.num_processed = 0
        self._cache = None
        self._done = False
        self._fetcher = None

    def __iter__(self):
        return self

    def __next__(self):
        if not self.preload:
            batch = self._next()
            self.num_processed += 1
            return batch
        if self._done:
            raise StopIteration
        if self._cache is None:  # the first batch
            self._cache = _to_tensor(self._next())
        out, self._cache = self._cache, None
        try:
            self._cache = _to_tensor(self._next())
        except StopIteration:
            self._done = True
        self.num_processed += 1
        return out

    def _next(self):
        if self._fetcher is not None:
            batch = self._fetcher.next_batch()
        else:
            batch = self._serial_batch()
        if isinstance(self.transform, CudaTransform):
            batch = self.transform.apply(batch)
        return batch

    def _shutdown_workers(self):
        if self._fetcher is not None:
            self._fetcher.shutdown()


class _MapDataLoaderIter(_BaseDataLoaderIter):
    def __init__(self, loader):
        super().__init__(loader)
        if self.num_workers > 0:
            from ._parallel import ParallelFetcher
            self._fetcher = ParallelFetcher(loader, self.seed, "map")
        else:
            self._sampler_iter = iter(self.sampler)

    def __len__(self):
        return len(self.sampler)

    def _serial_batch(self):
        indices = next(self._sampler_iter)
        items = [self.dataset[idx] for idx in indices]
        if not isinstance(self.transform, CudaTransform):
            items = self.transform.apply_batch(items)
        return self.collator.apply(items)


def _timed_next_thread(it, requests, results):
    while requests.get() is not None:
        try:
            results.put((True, next(it)))
        except BaseException as e:  # handed to the waiting caller
            results.put((False, e))


class _TimedNext:
    """``next(it)`` that gives up after ``timeout`` seconds (0: waits for ever). The iterator runs
    in a helper thread so that the caller regains control; after a timeout the iterator is
    abandoned (the thread is stuck in it) and every later call raises."""

    def __init__(self, it, timeout):
        self._it = it
        self._timeout = timeout
        self._thread = None
        self._stuck = False

    def __call__(self):
        if self._timeout <= 0:
            return next(self._it)
        if self._stuck:
            raise RuntimeError("dataloader timeout: the stream dataset's iterator is still stuck "
                               "from an earlier timeout")
        if self._thread is None:
            self._requests, self._results = queue.Queue(), queue.Queue()
            self._thread = threading.Thread(target=_timed_next_thread, name="DataLoaderStream",
                                            args=(self._it, self._requests, self._results),
                                            daemon=True)
            self._thread.start()
            weakref.finalize(self, self._requests.put, None)
        self._requests.put(True)
        try:
            ok, value = self._results.get(timeout=self._timeout)
        except queue.Empty:
            self._stuck = True
            raise RuntimeError("dataloader timeout: the stream dataset gave no sample within "
                               "timeout={} seconds".format(self._timeout)) from None
        if not ok:
            raise value
        return value


class _StreamDataLoaderIter(_BaseDataLoaderIter):
    def __init__(self, loader):
        super().__init__(loader)
        self.batch_size = self.sampler.batch_size
        if self.num_workers > 0 and self.parallel_stream:
            from ._parallel import ParallelFetcher
            self._fetcher = ParallelFetcher(loader, self.seed, "stream")
            return
        self.dataset_iter = iter(self.dataset)
        self._raw_next = _TimedNext(self.dataset_iter, self.timeout)
        self._ended = False
        if self.num_workers > 0:
            from ._parallel import ParallelFetcher
            self._fetcher = ParallelFetcher(loader, self.seed, "stream", raw_fetch=self._raw_batch)

    def _raw_batch(self):
        """Up to ``batch_size`` raw samples; StopIteration when the stream has ended."""
        if self._ended:
            raise StopIteration
        raw = []
        while len(raw) < self.batch_size:
            try:
                raw.append(self._raw_next())
            except StopIteration:
                self._ended = True
                break
        if not raw:
            raise StopIteration
        return raw

    def _serial_batch(self):
        raw = self._raw_batch()
        if isinstance(self.transform, CudaTransform):
            return self.collator.apply(list(raw))
        return self.collator.apply([self.transform.apply(r) for r in raw])
