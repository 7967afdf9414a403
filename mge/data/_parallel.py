"""The main-process side of a DataLoader with worker processes.

Each worker has its own index pipe (main -> worker) and result pipe (worker -> main). Batches are
sent round-robin, ``prefetch_factor`` per worker ahead, and handed out in sampling order. The main
process waits on the result pipes and the workers' process sentinels together, so a worker that
dies is noticed at once. Workers are shut down (told to stop, then terminated, then killed) when
the epoch ends, on any error, on KeyboardInterrupt, and when the iterator is garbage-collected
(a ``weakref.finalize`` that holds no reference to the iterator).
"""
import itertools
import multiprocessing
import multiprocessing.connection
import signal
import threading
import time
import weakref

from . import _transport
from ._worker import worker_loop

_GRACE_S = 2.0  # how long workers get to leave on their own at a normal shutdown


class _DeferSigint:
    """While workers are being forked, a Ctrl-C is held back and raised once they are all
    recorded (so that shutdown knows every one of them). Main thread only."""

    def __enter__(self):
        self.hit = False
        self.old = None
        if threading.current_thread() is threading.main_thread():
            try:
                self.old = signal.signal(signal.SIGINT, self._handler)
            except (ValueError, TypeError):
                self.old = None
        return self

    def _handler(self, signum, frame):
        self.hit = True

    def __exit__(self, *exc):
        if self.old is not None:
            signal.signal(signal.SIGINT, self.old)
        if self.hit and exc[0] is None:
            raise KeyboardInterrupt
        return False


class _Pool:
    """The workers, their pipes and slots: everything shutdown needs, and nothing else."""

    def __init__(self):
        self.procs = []
        self.index_conns = []
        self.result_conns = []
        self.slots = []
        self.closed = False

    def shutdown(self, grace=_GRACE_S):
        if self.closed:
            return
        self.closed = True
        with _DeferSigint():  # a second Ctrl-C must not leave workers behind
            self._stop(grace)

    def _stop(self, grace):
        for conn in self.index_conns:
            try:
                conn.send(None)
            except Exception:
                pass
        deadline = time.monotonic() + grace
        for p in self.procs:
            p.join(timeout=max(0.0, deadline - time.monotonic()))
        for p in self.procs:
            if p.is_alive():
                p.terminate()
        for p in self.procs:
            p.join(timeout=0.5)
            if p.is_alive():
                p.kill()
                p.join()
        for conn in self.index_conns + self.result_conns:
            try:
                conn.close()
            except Exception:
                pass
        for fd in self.slots:
            _transport.close_slot(fd)
        for p in self.procs:
            try:
                p.close()
            except Exception:
                pass


def _describe_exit(code):
    if code is not None and code < 0:
        try:
            return "{} ({})".format(code, signal.Signals(-code).name)
        except ValueError:
            pass
    return str(code)


class ParallelFetcher:
    """Produces batches with worker processes; ``next_batch()`` or StopIteration."""

    def __init__(self, loader, seed, datakind, dataset_iter=None, raw_fetch=None):
        self.num_workers = loader.num_workers
        self.timeout = loader.timeout
        self.datakind = datakind
        self.parallel_stream = loader.parallel_stream
        self.sampler = loader.sampler
        self.raw_fetch = raw_fetch  # stream without parallel_stream: main reads the raw samples
        self.prefetch = max(1, int(loader.prefetch_factor))
        from .transform import CudaTransform
        apply_transform = not isinstance(loader.transform, CudaTransform)

        ctx = multiprocessing.get_context()
        method = ctx.get_start_method()
        use_shm = _transport.shm_supported(method)
        self._pool = pool = _Pool()
        self._finalizer = weakref.finalize(self, pool.shutdown, 0.0)
        try:
            with _DeferSigint():
                self._start_workers(loader, ctx, use_shm, seed, datakind, apply_transform)
        except BaseException:
            self._finalizer()
            raise
        self._status = [True] * self.num_workers
        self._released = [[] for _ in range(self.num_workers)]
        self._cycle = itertools.cycle(range(self.num_workers))
        self._sampler_iter = iter(self.sampler)
        self._send_idx = 0
        self._rcvd_idx = 0
        self._task_info = {}
        self._sampler_done = False
        try:
            for _ in range(self.prefetch * self.num_workers):
                self._try_put_index()
        except BaseException:
            self._finalizer()
            raise

    def _start_workers(self, loader, ctx, use_shm, seed, datakind, apply_transform):
        pool = self._pool
        for i in range(self.num_workers):
            slots = [_transport.new_slot() for _ in range(self.prefetch + 1)] if use_shm else []
            pool.slots.extend(slots)
            idx_r, idx_w = ctx.Pipe(duplex=False)
            res_r, res_w = ctx.Pipe(duplex=False)
            p = ctx.Process(
                target=worker_loop,
                args=(loader.dataset, idx_r, res_w, loader.transform, loader.collator,
                      (seed + i) % (1 << 32), i, self.num_workers, datakind,
                      self.parallel_stream, apply_transform, loader.worker_init_fn, slots),
                daemon=True, name="DataLoaderWorker-{}".format(i))
            p.start()
            idx_r.close()
            res_w.close()
            pool.procs.append(p)
            pool.index_conns.append(idx_w)
            pool.result_conns.append(res_r)

    # -- sending -------------------------------------------------------------------------------
    def _try_put_index(self):
        if self._sampler_done:
            return
        try:
            if self.raw_fetch is not None:
                placeholder = self.raw_fetch()
            else:
                placeholder = next(self._sampler_iter)
        except StopIteration:
            self._sampler_done = True
            return
        for _ in range(self.num_workers):  # the next worker still running
            w = next(self._cycle)
            if self._status[w]:
                break
        else:
            self._sampler_done = True
            return
        released, self._released[w] = self._released[w], []
        try:
            self._pool.index_conns[w].send((self._send_idx, placeholder, released))
        except (BrokenPipeError, OSError):
            self._pool.procs[w].join(timeout=1.0)
            self._check_workers()
            raise
        self._task_info[self._send_idx] = (w,)
        self._send_idx += 1

    # -- receiving -----------------------------------------------------------------------------
    def next_batch(self):
        if self._pool.closed:
            raise StopIteration
        try:
            return self._next_batch()
        except StopIteration:
            self.shutdown()
            raise
        except BaseException:  # an error, a timeout, KeyboardInterrupt: no worker outlives it
            self.shutdown(grace=0.0)
            raise

    def _next_batch(self):
        deadline = time.monotonic() + self.timeout if self.timeout > 0 else None
        while True:
            while self._rcvd_idx < self._send_idx:
                info = self._task_info[self._rcvd_idx]
                if len(info) == 2 or self._status[info[0]]:
                    break
                del self._task_info[self._rcvd_idx]  # its worker's stream ended
                self._rcvd_idx += 1
            else:
                raise StopIteration
            if len(info) == 2:
                del self._task_info[self._rcvd_idx]
                self._rcvd_idx += 1
                self._try_put_index()
                return info[1]
            conn = self._pool.result_conns[info[0]]
            if conn.poll():  # fast path: the batch we need is waiting in its pipe
                try:
                    msg = conn.recv()
                except (EOFError, OSError):
                    self._receive(deadline)  # reports the dead worker
                    continue
                self._handle(info[0], msg)
                continue
            self._receive(deadline)

    def _receive(self, deadline):
        pool = self._pool
        active = [w for w in range(self.num_workers) if self._status[w]]
        conns = {pool.result_conns[w]: w for w in active}
        sentinels = {pool.procs[w].sentinel: w for w in active}
        wait_s = None if deadline is None else max(0.0, deadline - time.monotonic())
        ready = multiprocessing.connection.wait(list(conns) + list(sentinels), timeout=wait_s)
        got = False
        for obj in ready:
            if obj in conns:
                try:
                    msg = obj.recv()
                except (EOFError, OSError):  # the worker closed its pipe: it is exiting
                    w = conns[obj]
                    pool.procs[w].join(timeout=1.0)
                    self._status[w] = False
                    raise self._died_error([(w, pool.procs[w])]) from None
                self._handle(conns[obj], msg)
                got = True
        if not got:
            self._check_workers()
            if deadline is not None and time.monotonic() >= deadline:
                raise RuntimeError(
                    "dataloader timeout: no batch arrived from the {} worker(s) within timeout={} "
                    "seconds".format(self.num_workers, self.timeout))

    def _handle(self, w, msg):
        kind, idx, payload = msg
        if kind == "data":
            batch, slot = _transport.decode(payload)
            if slot is not None:
                self._released[w].append(slot)
            self._task_info[idx] = (w, batch)
        elif kind == "end":  # this worker's stream is exhausted
            self._status[w] = False
        else:
            raise RuntimeError(payload.message())

    def _check_workers(self):
        failed = []
        for w, p in enumerate(self._pool.procs):
            if self._status[w] and not p.is_alive():
                conn = self._pool.result_conns[w]
                if conn.poll():  # it said something before it died: read that first
                    continue
                failed.append((w, p))
        if failed:
            for w, _ in failed:
                self._status[w] = False
            raise self._died_error(failed)

    @staticmethod
    def _died_error(failed):
        return RuntimeError(
            "DataLoader worker (worker(s): {}, pid(s): {}) exited unexpectedly, exitcode(s): {}"
            .format(", ".join(str(w) for w, _ in failed), ", ".join(str(p.pid) for _, p in failed),
                    ", ".join(_describe_exit(p.exitcode) for _, p in failed)))

    def shutdown(self, grace=_GRACE_S):
        if self._finalizer.alive:
            self._finalizer.detach()
            self._pool.shutdown(grace)

    @property
    def pids(self):
        return [p.pid for p in self._pool.procs]
