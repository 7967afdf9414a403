"""``CudaDevice``: the CUDA device (``gpu<N>``) over a ``Backend`` -- buffers, views, the caching
pool and the kernel door.

The device is written against ``backend.py``'s interface only: on a GPU the backend is
``PycudaBackend`` (pycuda and cuBLAS), in the tests ``HostBackend`` (host memory, the same kernel
sources built with g++), so all of this file runs without a GPU (``tests/test_cuda_device.py``
through the test device kind ``cudahost``).

**Buffers.**  A value is a ``CudaBuffer``: the pool ``Block`` holding its bytes, the shape, the
dtype, a byte offset into the block and strides in elements (0 broadcasts; negative steps
backwards).  A buffer made by ``from_host`` or a kernel is a *root* (``base is None``) that owns
its block; a view (``view``: reshape, transpose, broadcast, new axes) keeps its root in ``base``,
as numpy's ``.base``, so the block goes back to the pool exactly when the last buffer over it
goes (``CudaBuffer.__del__``).  ``storage`` names the block as the owner, with the pool's size of
it (the request rounded to 512 bytes), so the channel's memory statistics count what the pool
holds for tensors: ``mge.device.get_allocated_memory`` equals the pool's allocated bytes while no
kernel's scratch memory is live.  Device memory is never visible from the host: ``to_host``
copies (a read-only array; a strided view copies only the bytes it spans).

**Ordering.**  Every copy and kernel goes to the backend's one stream, in the order the channel
issues them, so a freed block may serve the next allocation at once (the next kernel runs after
every earlier use of the memory).  On an asynchronous backend (a GPU) the host does not wait
for that work: the channel's worker issues an op and goes on, and the caller's Python runs
ahead of the GPU.  A value is known to be ready through an event: ``execute`` and ``from_host``
record one after the work that writes their buffers (``CudaBuffer.ready``), and ``to_host``
waits for that event only, then copies on the backend's second stream
(``copy_dtoh_ready``) -- so reading a loss does not wait for the optimizer step queued after
it.  That is sound because nothing later on the stream writes a live buffer: an op writes
in place only into an input whose tensor it freed (``reuse``), which nobody can read any more.

**The kernel door.**  ``execute`` looks the op's class up in ``launch.CUDA_KERNELS`` (then its
base classes); an op without a launcher raises ``NotImplementedError`` naming the op and the
device, which the channel reports as that op's error while everything else keeps working.  A
launcher that does not take views gets its inputs made dense first (``contiguous``, one relayout
kernel each).  The outputs are checked against the op's declared dtypes and shapes.  The ops of
the kernel families (reductions, softmax, indexing, norms, conv, ...) run as *launch plans*
(``kernels/launch.py``), through one executor, ``launch/plans.py``'s ``run_plan``; its kernels
come from ``load_kernels`` (every kernel of a plan in one backend ``load``, cached).

**In place.**  When an op frees an input (``reuse``) whose buffer nothing else can see -- no
other tensor, no view: counted by references, as the CPU device does -- a launcher registered
with ``reuse=True`` may write its output there (an elementwise op over a dense input of the
output's shape and dtype); ``inplace`` counts it.

**Memory.**  ``pool`` is a ``CachingPool`` over the backend; ``memory_stats()`` is its
``stats()``, ``free_beside(buffer)`` its figure for DTR.  When the backend refuses memory the pool
runs its ``on_oom`` callbacks (``add_oom_callback``: DTR's eviction hooks in there), then
``empty_cache``, then this device raises ``CudaOutOfMemory`` -- a ``MemoryError`` naming the
device, the op and the sizes -- and the device stays usable.

``GC safety.``  ``CudaBuffer.__del__`` may run inside the pool's own locked code when a garbage
collection starts there (a collection can start at any allocation); the pool's lock is not
reentrant, so a free from inside the device's pool calls is deferred to the end of that call
(a depth per thread) rather than deadlocking.
"""
import collections
import sys
import threading
import traceback

import numpy as np

from ..base import Device
from . import driver
from . import launch as _launch
from .backend import ELEMENTWISE_BLOCK, elementwise_grid
from .kernels.elemwise import typecvt_kernel
from .kernels.launch import dense_strides
from .pool import CachingPool, PoolOutOfMemory, format_bytes

__all__ = ["CudaDevice", "CudaBuffer", "CudaOutOfMemory", "dense_strides", "make_device"]


class CudaOutOfMemory(PoolOutOfMemory):
    """The device could not allocate even after the pool's callbacks and ``empty_cache``; the
    message names the device and what was being allocated, then the pool's figures."""


def _size(shape):
    n = 1
    for s in shape:
        n *= s
    return n


class CudaBuffer:
    """A value on a CUDA device (see the module docstring): ``device``, ``block`` (the pool
    block, shared by views), ``base`` (the root buffer of a view; ``None`` for a root), ``shape``,
    ``dtype``, ``offset`` (bytes into the block) and ``strides`` (elements)."""

    __slots__ = ("device", "block", "base", "shape", "dtype", "offset", "strides", "ready",
                 "__weakref__")

    def __init__(self, device, block, shape, dtype, offset=0, strides=None, base=None):
        self.device = device
        self.block = block
        self.base = base
        self.shape = tuple(shape)
        self.dtype = dtype
        self.offset = offset
        self.strides = dense_strides(self.shape) if strides is None else tuple(strides)
        self.ready = None  # on an asynchronous device: the event after the work that wrote it

    @property
    def address(self):
        """The device address of element 0 (of index (0, ..., 0))."""
        return self.block.address + self.offset

    @property
    def size(self):
        """The number of elements."""
        return _size(self.shape)

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def root(self):
        """The buffer that owns the block (``self`` for a root)."""
        return self if self.base is None else self.base

    @property
    def is_contiguous(self):
        """Whether the elements are dense in C order from ``address`` (strides of size-1 dims
        do not matter)."""
        step = 1
        for n, s in zip(reversed(self.shape), reversed(self.strides)):
            if n != 1 and s != step:
                return False
            step *= n
        return True

    def __del__(self):
        if self.base is None and self.block is not None:
            try:
                self.device._free_block(self.block)
            except Exception:  # interpreter shutdown: the pool may be gone already
                pass

    def __repr__(self):
        view = "" if self.base is None else " view"
        return (f"<CudaBuffer {self.device.name} {self.dtype} {self.shape}{view} at "
                f"{self.address:#x}>")


class CudaDevice(Device):
    """The CUDA device ``gpu<index>`` over ``backend`` (``None``: ``PycudaBackend(index)``);
    ``kind`` names the registered kind (``"cuda"``; the tests' host emulation ``"cudahost"``).

    Public counters: ``executed`` (op name -> kernel door calls), ``inplace`` (outputs written
    into a donated input), ``relayouts`` (views made dense for a launcher)."""

    kind = "cuda"
    runs_programs = True  # a jit.trace program runs as one op, step by step (launch/program.py)

    def __init__(self, index=0, backend=None, kind="cuda"):
        super().__init__(index)
        if backend is None:
            from .pycuda_backend import PycudaBackend  # (imports pycuda: only for a real GPU)
            backend = PycudaBackend(index)
        self.kind = kind
        self.backend = backend
        self.pool = CachingPool(backend)
        self._modules = {}          # (kernel name, its text) -> the backend's module
        self._modules_lock = threading.Lock()
        self._local = threading.local()   # the pool-call depth and the frees deferred meanwhile
        self._oom_callbacks = {}    # a callback -> the wrapper the pool calls
        self.executed = collections.Counter()
        self.inplace = 0
        self.relayouts = 0
        _launch.load_all()

    @property
    def name(self):
        """The device's name: ``gpu<index>`` (``<kind><index>`` for another kind)."""
        return f"gpu{self.index}" if self.kind == "cuda" else f"{self.kind}{self.index}"

    def __repr__(self):
        return f"<CudaDevice {self.name} on {self.backend.name}>"

    # -- the pool ---------------------------------------------------------------------------------
    def _enter_pool(self):
        local = self._local
        local.depth = getattr(local, "depth", 0) + 1

    def _leave_pool(self):
        local = self._local
        local.depth -= 1
        if local.depth == 0:
            deferred = getattr(local, "deferred", None)
            while deferred:
                self.pool.free(deferred.pop())

    def _free_block(self, block):
        local = self._local
        if getattr(local, "depth", 0):
            if getattr(local, "deferred", None) is None:
                local.deferred = []
            local.deferred.append(block)
        else:
            self.pool.free(block)

    def allocate(self, nbytes, what="a buffer"):
        """A pool block of ``nbytes``; ``CudaOutOfMemory`` naming ``what`` when none can be had."""
        self._enter_pool()
        try:
            return self.pool.allocate(nbytes)
        except PoolOutOfMemory as e:
            raise CudaOutOfMemory(f"{self.name}: {what}: {e}", e.requested, e.size,
                                  e.stats) from e
        finally:
            self._leave_pool()

    def empty(self, shape, dtype, what=None):
        """A new dense buffer of ``shape`` and ``dtype`` (uninitialised)."""
        dtype = np.dtype(dtype) if not isinstance(dtype, np.dtype) else dtype
        shape = tuple(int(s) for s in shape)
        nbytes = _size(shape) * dtype.itemsize
        block = self.allocate(nbytes, what or f"{dtype} {shape} ({format_bytes(nbytes)})")
        return CudaBuffer(self, block, shape, dtype)

    def workspace(self, nbytes):
        """Scratch memory of ``nbytes`` bytes for a kernel: a buffer whose block returns to the
        pool when it goes (work on the stream is ordered, so it may go right after the launch)."""
        return self.empty((int(nbytes),), np.uint8, f"a workspace of {format_bytes(nbytes)}")

    def memory_stats(self):
        """The pool's figures (``CachingPool.stats()``): allocated, reserved, their peaks, ..."""
        return self.pool.stats()

    def empty_cache(self):
        """Release the pool's wholly free segments to the backend; the bytes released."""
        self._enter_pool()
        try:
            return self.pool.empty_cache()
        finally:
            self._leave_pool()

    def reset_peak(self):
        """Restart the pool's peaks from the current figures."""
        self.pool.reset_peak()

    def add_oom_callback(self, fn):
        """Call ``fn(nbytes)`` when the backend refuses memory (``CachingPool.add_oom_callback``:
        it frees what it can and says whether it freed anything).  Add callbacks here, not on
        the pool: the pool calls them outside its lock, so buffers they drop are freed at once
        (not deferred as a free inside the pool's own code is)."""
        def call(nbytes):
            local = self._local
            depth = getattr(local, "depth", 0)
            local.depth = 0
            try:
                return fn(nbytes)
            finally:
                local.depth = depth
        with self._modules_lock:
            self._oom_callbacks[fn] = call
        self.pool.add_oom_callback(call)

    def remove_oom_callback(self, fn):
        """Stop calling ``fn`` on out-of-memory (``ValueError`` if it was not added)."""
        with self._modules_lock:
            call = self._oom_callbacks.pop(fn, None)
        if call is None:
            raise ValueError(f"{self.name}: remove_oom_callback of {fn!r}, which was not added")
        self.pool.remove_oom_callback(call)

    def synchronize(self):
        """Wait until every piece of work issued to the device has run (raising what failed
        there asynchronously)."""
        self.backend.synchronize()

    @property
    def asynchronous(self):
        """Whether kernels run after ``execute`` returns (a GPU's stream): the backend's."""
        return self.backend.asynchronous

    def event(self):
        """A new event of the device's stream (``backend.Event``: ``record``, ``query``,
        ``synchronize``, ``elapsed_ms``); the profiler times kernels with them."""
        return self.backend.event()

    # -- storage and transfers -------------------------------------------------------------------
    def _check(self, buffer, what):
        if not isinstance(buffer, CudaBuffer):
            raise TypeError(f"{self.name}.{what}: not a buffer of this device: "
                            f"{type(buffer).__name__}")
        if buffer.device is not self:
            raise TypeError(f"{self.name}.{what}: a buffer of {buffer.device.name}")

    def from_host(self, array):
        """A new buffer holding a copy of the host array ``array``."""
        array = np.asarray(array, order="C")  # (ascontiguousarray would make a 0-d array 1-d)
        if array.dtype.hasobject:
            raise TypeError(f"{self.name}: cannot hold an array of dtype {array.dtype}")
        buf = self.empty(array.shape, array.dtype)
        self.backend.copy_htod(buf.address, array)
        if self.backend.asynchronous:
            buf.ready = self.backend.event(timing=False).record()
        return buf

    def to_host(self, buffer):
        """The value as a read-only host array (a copy; for a view, of the bytes it spans)."""
        self._check(buffer, "to_host")
        dtype, shape = buffer.dtype, buffer.shape
        copy = self.backend.copy_dtoh
        if buffer.ready is not None and buffer.size:  # wait for its writer only
            buffer.ready.synchronize()
            copy = self.backend.copy_dtoh_ready
        if buffer.size == 0:
            out = np.empty(shape, dtype)
        elif buffer.is_contiguous:
            out = np.empty(shape, dtype)
            copy(out, buffer.address)
        else:
            lo = sum((n - 1) * s for n, s in zip(shape, buffer.strides) if s < 0)
            hi = sum((n - 1) * s for n, s in zip(shape, buffer.strides) if s > 0)
            raw = np.empty(hi - lo + 1, dtype)
            copy(raw, buffer.address + lo * dtype.itemsize)
            out = np.lib.stride_tricks.as_strided(
                raw[-lo:], shape, tuple(s * dtype.itemsize for s in buffer.strides))
        out.flags.writeable = False
        return out

    def storage(self, buffer):
        """``(block, its pool size)``: the allocation behind ``buffer`` (shared by its views)."""
        block = buffer.block
        return block, block.size

    def shape(self, buffer):
        return buffer.shape

    def nbytes(self, buffer):
        return buffer.block.size

    def free_beside(self, buffer):
        """Free bytes in the pool blocks just left and right of ``buffer``'s block."""
        self._enter_pool()
        try:
            return self.pool.free_beside(buffer.block)
        finally:
            self._leave_pool()

    # runs_long: Device's (the op's ``long_running`` fact).

    # -- views and relayout ----------------------------------------------------------------------
    def view(self, buffer, shape, strides=None, offset=0, dtype=None):
        """A view of ``buffer``'s root: ``shape``, ``strides`` in elements (default: dense),
        ``offset`` bytes from ``buffer``'s own start, optionally relabelled as ``dtype`` (of the
        same itemsize)."""
        root = buffer.root
        dtype = buffer.dtype if dtype is None else dtype
        return CudaBuffer(self, root.block, shape, dtype, buffer.offset + offset, strides, root)

    def contiguous(self, buffer):
        """``buffer`` itself if dense, else a dense copy (one relayout kernel)."""
        if buffer.is_contiguous:
            return buffer
        return self.relayout(buffer)

    def relayout(self, buffer, out=None):
        """A dense copy of ``buffer`` (into the dense buffer ``out`` when given): the general
        TypeCvt kernel from the dtype to itself, which follows any strides."""
        from .launch.elemwise import launch_general  # (the launchers import this module)
        out = out if out is not None else self.empty(buffer.shape, buffer.dtype)
        if buffer.size:
            self.relayouts += 1
            launch_general(self, typecvt_kernel, (buffer.dtype, buffer.dtype), out, [buffer],
                           f"relayout of {buffer.dtype} {buffer.shape}")
        return out

    # -- kernels ---------------------------------------------------------------------------------
    def module(self, kernel):
        """The backend's module holding ``kernel`` (loaded on first use, then cached)."""
        key = _kernel_key(kernel)
        mod = self._modules.get(key)
        if mod is None:
            with self._modules_lock:
                mod = self._modules.get(key)
                if mod is None:
                    mod = self._modules[key] = self.backend.load([kernel])
        return mod

    def load_kernels(self, kernels):
        """``{kernel name: module}`` for ``kernels``: those not loaded yet go to the backend in
        one ``load`` (one NVRTC program; on the host one g++ build), then each is cached as
        ``module`` caches it."""
        out, missing = {}, []
        for k in kernels:
            mod = self._modules.get(_kernel_key(k))
            if mod is None:
                missing.append(k)
            else:
                out[k.name] = mod
        if missing:
            with self._modules_lock:
                todo = [k for k in missing if _kernel_key(k) not in self._modules]
                if todo:
                    mod = self.backend.load(todo)
                    for k in todo:
                        self._modules[_kernel_key(k)] = mod
                for k in missing:
                    out[k.name] = self._modules[_kernel_key(k)]
        return out

    def launch(self, kernel, grid, block, args, shared_bytes=0):
        """Launch ``kernel`` (a ``KernelSource``) on ``grid`` x ``block`` with ``args``."""
        self.backend.launch(self.module(kernel), kernel.name, grid, block, args, shared_bytes)

    def launch_elementwise(self, kernel, n, args):
        """Launch the grid-stride ``kernel`` over ``n`` elements (nothing for ``n == 0``):
        ``ELEMENTWISE_BLOCK`` threads a block, ``elementwise_grid`` blocks."""
        if n:
            grid = elementwise_grid(n, self.backend.multiprocessors)
            self.launch(kernel, (grid, 1, 1), (ELEMENTWISE_BLOCK, 1, 1), args)

    # -- the kernel door ---------------------------------------------------------------------------
    def execute(self, op, inputs, descs, reuse=None):
        """Run ``op``'s launcher on ``inputs`` (buffers of this device; for a transfer, a host
        array); one buffer per desc, checked against it."""
        # count references before anything else binds the buffers (see ``_donated``)
        donated = _donated(inputs, reuse) if reuse else []
        launcher = _launch.lookup(type(op))
        if launcher is None:
            raise NotImplementedError(
                f"{op.name} has no CUDA kernel yet (device {self.name}); to run it on the CPU, "
                f"move its inputs there first (Tensor.to('cpu0'))")
        args = list(inputs)
        for k, buf in enumerate(args):
            if isinstance(buf, np.ndarray) and op.sets_device:
                continue  # a transfer's source on the host (Copy from another device)
            self._check(buf, f"execute({op.name})")
            if not launcher.strided and not buf.is_contiguous:
                args[k] = self.relayout(buf)
                donated = [d for d in donated if d != k]
        try:
            if launcher.reuse:
                outs = launcher.fn(self, op, args, descs, donated)
            else:
                outs = launcher.fn(self, op, args, descs)
        except BaseException as e:
            # The error is kept (the channel reports it later) with its traceback, whose frames
            # would keep the input buffers -- device memory -- alive until then: drop them.
            traceback.clear_frames(e.__traceback__)
            args = inputs = buf = None
            raise
        del args
        self.executed[op.name] += 1
        outs = self._checked(op, outs, descs)
        if self.backend.asynchronous and outs:
            ready = self.backend.event(timing=False).record()
            for buf in outs:
                buf.ready = ready
        return outs

    def _checked(self, op, outs, descs):
        if type(outs) is not tuple and type(outs) is not list:
            raise TypeError(f"{op.name}: the CUDA launcher must return a tuple of buffers, it "
                            f"returned {type(outs).__name__}")
        if len(outs) != len(descs):
            raise RuntimeError(f"{op.name}: the CUDA launcher returned {len(outs)} output(s), "
                               f"the op declares {len(descs)}")
        result = []
        for k, (buf, desc) in enumerate(zip(outs, descs)):
            if not isinstance(buf, CudaBuffer) or buf.device is not self:
                raise TypeError(f"{op.name}: the CUDA launcher's output {k} is not a buffer of "
                                f"{self.name}: {type(buf).__name__}")
            if buf.dtype != desc.dtype:
                raise TypeError(f"{op.name}: the CUDA launcher gave output {k} as {buf.dtype}, "
                                f"the op declares {desc.dtype}")
            if buf.dtype is not desc.dtype and buf.dtype.metadata != desc.dtype.metadata:
                buf = self.view(buf, buf.shape, buf.strides, 0, desc.dtype)  # (quantized scales)
            shape = desc.shape
            if shape is not None and buf.shape != tuple(shape):
                raise ValueError(f"{op.name}: the CUDA launcher gave output {k} of shape "
                                 f"{buf.shape}, the op declares {tuple(shape)}")
            result.append(buf)
        return result


def _kernel_key(kernel):
    # a kernel's identity: its name and its text, as the (guard, text) pieces -- a tuple of the
    # generators' own strings, whose hashes Python caches (joining them per launch would not be
    # free); a kernel-like object without pieces by its whole source
    parts = getattr(kernel, "parts", None)
    return (kernel.name, parts if parts is not None else kernel.source)


def _refs(values, i):
    return sys.getrefcount(values[i])


# References to a buffer held only by a list and this module's check (as in cpu/device.py): above
# it someone else -- another tensor, a view through ``base`` -- still sees the buffer.
_SOLE_REFS = _refs([object()], 0)


def _donated(inputs, reuse):
    out = []
    for k in reuse:
        if not 0 <= k < len(inputs):
            continue
        uses = sum(1 for b in inputs if b is inputs[k])
        if uses != 1 or _refs(inputs, k) > _SOLE_REFS:
            continue
        buf = inputs[k]
        if isinstance(buf, CudaBuffer) and buf.base is None and buf.offset == 0:
            out.append(k)
    return out


def make_device(index):
    """The registry's factory of ``gpu<index>``: the driver's checks (``driver.check_device``),
    then the device itself."""
    driver.check_device(index, f"device 'gpu{index}'")
    return CudaDevice(index)
