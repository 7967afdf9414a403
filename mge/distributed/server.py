"""The job's key-value server (MegEngine 1.13's ``megengine.distributed.server``).

:class:`Server` serves MegEngine's XML-RPC methods (barriers, broadcast values, user key-value
pairs, send/recv bookkeeping) on a port of the master node, from a thread of the process that made
it; :class:`Client` calls them.  Both are plain standard-library code and work on one machine as on
several; mge has no collective server of its own (MegEngine's C++ "mm server"): the collectives of a
world of several processes are issue 15's MPI transport, so ``get_mm_server_port`` answers 0.
"""
import threading
import time
from collections import defaultdict
from functools import partial
from socketserver import ThreadingMixIn
from xmlrpc.client import ServerProxy
from xmlrpc.server import SimpleXMLRPCServer

__all__ = ["Server", "Client"]


class _Future:
    """A value set once by one thread and waited for by others."""

    def __init__(self, ack=True):
        self.ready = threading.Event()
        self.ack = threading.Event() if ack else None
        self.value = None

    def set(self, value):
        self.value = value
        self.ready.set()
        if self.ack is not None:
            self.ack.wait()

    def get(self):
        self.ready.wait()
        if self.ack is not None:
            self.ack.set()
        return self.value


class Methods:
    r"""The server's methods: information exchanged between the processes of a job.

    Args:
        mm_server_port: port of the collective server (0: mge has none).
    """

    def __init__(self, mm_server_port):
        self.lock = threading.Lock()
        self.mm_server_port = mm_server_port
        self.dict_is_grad = defaultdict(partial(_Future, True))
        self.dict_remote_tracer = defaultdict(partial(_Future, True))
        self.dict_barrier_counter = defaultdict(int)
        self.dict_barrier_event = defaultdict(threading.Event)
        self.user_dict = defaultdict(partial(_Future, False))
        self.bcast_dict = {}

    def connect(self):
        r"""Answers True: the connection works."""
        return True

    def get_mm_server_port(self):
        r"""Port of the collective server."""
        return self.mm_server_port

    def set_is_grad(self, key, is_grad):
        r"""Mark whether the send/recv pair ``key`` needs gradients."""
        with self.lock:
            future = self.dict_is_grad[key]
        future.set(is_grad)
        return True

    def check_is_grad(self, key):
        r"""Whether the send/recv pair ``key`` needs gradients (waits for :meth:`set_is_grad`)."""
        with self.lock:
            future = self.dict_is_grad[key]
        ret = future.get()
        with self.lock:
            del self.dict_is_grad[key]
        return ret

    def set_remote_tracer(self, key, tracer_set):
        r"""Set the recordings the send/recv pair ``key`` takes part in."""
        with self.lock:
            future = self.dict_remote_tracer[key]
        future.set(tracer_set)
        return True

    def check_remote_tracer(self, key):
        r"""The recordings of the send/recv pair ``key`` (waits for :meth:`set_remote_tracer`)."""
        with self.lock:
            future = self.dict_remote_tracer[key]
        ret = future.get()
        with self.lock:
            del self.dict_remote_tracer[key]
        return ret

    def group_barrier(self, key, size):
        r"""Wait until ``size`` members of the group ``key`` called it."""
        with self.lock:
            self.dict_barrier_counter[key] += 1
            counter = self.dict_barrier_counter[key]
            event = self.dict_barrier_event[key]
        if counter == size:
            with self.lock:
                del self.dict_barrier_counter[key]
                del self.dict_barrier_event[key]
            event.set()
        else:
            event.wait()
        return True

    def user_set(self, key, val):
        r"""Set a user key-value pair."""
        with self.lock:
            future = self.user_dict[key]
        future.set(val)
        return True

    def user_get(self, key):
        r"""A user value (waits until it is set)."""
        with self.lock:
            future = self.user_dict[key]
        return future.get()

    def bcast_val(self, val, key, size):
        r"""The root passes ``val``, the ``size - 1`` others ``None`` and get the root's value."""
        with self.lock:
            if key not in self.bcast_dict:
                self.bcast_dict[key] = [_Future(False), size]
            arr = self.bcast_dict[key]
        if val is not None:
            arr[0].set(val)
            val = None
        else:
            val = arr[0].get()
        with self.lock:
            arr[1] -= 1
            if arr[1] == 0:
                del self.bcast_dict[key]
        return val

    def _del(self, key):
        with self.lock:
            del self.user_dict[key]

    def user_pop(self, key):
        r"""A user value, deleted once read."""
        ret = self.user_get(key)
        self._del(key)
        return ret


class ThreadXMLRPCServer(ThreadingMixIn, SimpleXMLRPCServer):
    daemon_threads = True


class Server:
    r"""The job's server, run on the master node.

    Args:
        port: the port to serve on (0: any free port; :attr:`py_server_port` tells which).
    """

    def __init__(self, port=0):
        self._server = ThreadXMLRPCServer(("0.0.0.0", port), logRequests=False, allow_none=True)
        self.mm_server_port = 0
        self._server.register_instance(Methods(self.mm_server_port))
        self.py_server_port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="mge-dist-server",
                                        daemon=True)
        self._thread.start()

    def close(self):
        """Stop serving and release the port."""
        server, self._server = getattr(self, "_server", None), None
        if server is not None:
            server.shutdown()
            server.server_close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class Client:
    r"""A process's connection to the job's :class:`Server`.

    Args:
        master_ip: ip address of the master node.
        port: port of the server.
        timeout: seconds to keep retrying the first connection before ``ConnectionError``.
    """

    def __init__(self, master_ip, port, timeout=60.0):
        self.master_ip = master_ip
        self.port = port
        self.timeout = timeout
        self.connect()
        self.bcast_dict = defaultdict(lambda: 0)

    def connect(self):
        r"""Connect, retrying until the server answers or the timeout passes."""
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                self.proxy = ServerProxy("http://{}:{}".format(self.master_ip, self.port),
                                         allow_none=True)
                if self.proxy.connect():
                    return
            except (OSError, ConnectionError):
                if time.monotonic() > deadline:
                    raise ConnectionError(f"no mge.distributed Server answers at "
                                          f"{self.master_ip}:{self.port}") from None
                time.sleep(0.2)

    def get_mm_server_port(self):
        r"""Port of the collective server."""
        return self.proxy.get_mm_server_port()

    def set_is_grad(self, key, is_grad):
        r"""Mark whether the send/recv pair ``key`` needs gradients."""
        self.proxy.set_is_grad(key, is_grad)

    def check_is_grad(self, key):
        r"""Whether the send/recv pair ``key`` needs gradients."""
        return self.proxy.check_is_grad(key)

    def set_remote_tracer(self, key, tracer_set):
        r"""Set the recordings of the send/recv pair ``key``."""
        self.proxy.set_remote_tracer(key, tracer_set)

    def check_remote_tracer(self, key):
        r"""The recordings of the send/recv pair ``key``."""
        return self.proxy.check_remote_tracer(key)

    def group_barrier(self, key, size):
        r"""Wait until ``size`` members of the group ``key`` reach the barrier."""
        self.proxy.group_barrier(key, size)

    def user_set(self, key, val):
        r"""Set a user key-value pair for every process of the job."""
        return self.proxy.user_set(key, val)

    def user_get(self, key):
        r"""A user value (waits until some process sets it)."""
        return self.proxy.user_get(key)

    def user_pop(self, key):
        r"""A user value, deleted from the server once read."""
        return self.proxy.user_pop(key)

    def bcast_val(self, val, key, size):
        r"""Broadcast ``val`` from the root (which passes it; the others pass ``None``)."""
        idx = self.bcast_dict[key] + 1
        self.bcast_dict[key] = idx
        return self.proxy.bcast_val(val, key + "_bcast_" + str(idx), size)
