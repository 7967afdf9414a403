"""The DataLoader worker process: fetch, transform and collate the batches it is sent."""
import os
import queue
import random
import signal
import sys
import threading
import traceback

import numpy as np

from . import _transport

_worker_info = None
_PARENT_POLL_S = 1.0  # how often an idle worker checks that the main process is alive


class WorkerInfo:
    r"""What :func:`get_worker_info` returns inside a worker: ``idx`` (this worker's id),
    ``worker`` (the number of workers) and ``seed`` (the seed of its Python and numpy RNGs).
    Read-only."""

    __initialized = False

    def __init__(self, **kwargs):
        for k, v in kwargs.items():
            setattr(self, k, v)
        self.__keys = tuple(kwargs.keys())
        self.__initialized = True

    def __setattr__(self, key, val):
        if self.__initialized:
            raise RuntimeError("Cannot assign attributes to {} objects".format(type(self).__name__))
        return super().__setattr__(key, val)

    def __repr__(self):
        items = ", ".join("{}={}".format(k, getattr(self, k)) for k in self.__keys)
        return "{}({})".format(type(self).__name__, items)


def get_worker_info():
    r"""In a DataLoader worker process, its :class:`WorkerInfo` (``idx``, ``worker``, ``seed``);
    ``None`` in the main process. A :class:`~mge.data.dataset.StreamDataset` uses it to split the
    stream between workers."""
    return _worker_info


class ExceptionWrapper:
    """An exception of a worker, carried to the main process as its formatted traceback."""

    def __init__(self, exc_type=None, exc_msg=None, where="in background"):
        self.exc_type = exc_type
        self.exc_msg = exc_msg
        self.where = where

    @classmethod
    def current(cls, worker_id):
        exc_info = sys.exc_info()
        return cls(exc_info[0].__name__, "".join(traceback.format_exception(*exc_info)),
                   "in DataLoader worker process {}".format(worker_id))

    def message(self):
        return "Caught {} {}.\nOriginal {}".format(self.exc_type, self.where, self.exc_msg)


def fetch_map(dataset, indices, transform, collator, apply_transform):
    items = [dataset[idx] for idx in indices]
    if apply_transform:
        items = transform.apply_batch(items)
    return collator.apply(items)


def fetch_stream(dataset_iter, placeholder, transform, collator, apply_transform, parallel_stream):
    """A batch from raw samples (``parallel_stream=False``) or from this worker's own iterator;
    StopIteration when the stream ends before the first sample."""
    data = []
    for raw in placeholder:
        if parallel_stream:
            try:
                raw = next(dataset_iter)
            except StopIteration:
                break
        data.append(transform.apply(raw) if apply_transform else raw)
    if not data:
        raise StopIteration
    return collator.apply(data)


def _reader(conn, inbox):
    # a thread, so that the main process never blocks sending to a busy worker
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            msg = None
        inbox.put(msg)
        if msg is None:
            return


def worker_loop(dataset, index_conn, result_conn, transform, collator, seed, worker_id,
                num_workers, datakind, parallel_stream, apply_transform, worker_init_fn, slots):
    """The body of worker ``worker_id``: runs until it reads ``None`` or the main process dies."""
    global _worker_info
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the main process's to handle
    _transport.close_foreign_slots(set(slots))
    random.seed(seed)
    np.random.seed(seed)
    _worker_info = WorkerInfo(idx=worker_id, worker=num_workers, seed=seed)
    encoder = _transport.Encoder(slots)
    parent = os.getppid()
    if datakind == "stream" and not parallel_stream:
        # the main process sends raw samples, possibly large: a reader thread drains the pipe so
        # that the main process never blocks sending to a worker that is busy sending to it
        inbox = queue.Queue()
        threading.Thread(target=_reader, args=(index_conn, inbox), daemon=True).start()
        get = inbox.get
    else:
        def get(timeout):
            if not index_conn.poll(timeout):
                raise queue.Empty
            try:
                return index_conn.recv()
            except (EOFError, OSError):
                return None

    def send(msg):
        try:
            result_conn.send(msg)
        except (BrokenPipeError, OSError):  # the main process is gone or shut us down
            _exit()

    try:
        if worker_init_fn is not None:
            worker_init_fn(worker_id)
        if datakind == "stream":
            dataset = iter(dataset)
    except Exception:
        send(("error", -1, ExceptionWrapper.current(worker_id)))
        dataset = None
    ended = False
    while True:
        try:
            msg = get(timeout=_PARENT_POLL_S)
        except queue.Empty:
            if os.getppid() != parent:
                break
            continue
        if msg is None:
            break
        idx, placeholder, released = msg
        encoder.release(released)
        if dataset is None or ended:
            continue
        try:
            if datakind == "stream":
                batch = fetch_stream(dataset, placeholder, transform, collator, apply_transform,
                                     parallel_stream)
            else:
                batch = fetch_map(dataset, placeholder, transform, collator, apply_transform)
            out = ("data", idx, encoder.encode(batch))
            del batch
        except StopIteration:
            if datakind != "stream":
                out = ("error", idx, ExceptionWrapper.current(worker_id))
            else:
                ended = True
                out = ("end", idx, None)
        except Exception:
            out = ("error", idx, ExceptionWrapper.current(worker_id))
        send(out)
        del out
    _exit()


def _exit():
    # no atexit handlers or finalizers inherited from the main process; keep what the user printed
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(0)
