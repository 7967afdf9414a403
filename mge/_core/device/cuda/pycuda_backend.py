"""``PycudaBackend``: the CUDA device's backend on a real GPU, through pycuda's driver API.

Thin on purpose: every decision (shapes, strides, launch geometry, the GEMM's column-major
arguments) is made above it and tested on ``HostBackend``; this file only forwards.  Importing
it imports no pycuda: ``PycudaBackend(index)`` asks ``driver.py`` for pycuda and the GPU.

* **Context.**  GPU ``index``'s primary context (``driver.primary_context``), made current around
  every call (``driver.current_context``): the channel's worker and the caller's thread both
  call in, and a context is current per thread.
* **Memory.**  ``reserve`` is ``mem_alloc`` (its ``MemoryError`` becomes the pool's
  ``OutOfDeviceMemory``), ``release`` frees the ``DeviceAllocation``.
* **Copies** go on the backend's stream.  Host-to-device copies of at least ``pinned_threshold``
  bytes are staged through a page-locked buffer (``pagelocked_empty``) so the DMA runs at full
  speed and the host goes on at once; the staging buffer is reused after an event says its
  previous copy has finished.  Device-to-host copies wait for the stream (the caller reads the
  bytes next), staged the same way when large.
* **Kernels.**  ``load`` compiles the kernels' program with NVRTC for the GPU's own compute
  capability (``compute_XY``, with the kernels' ``NVRTC_OPTIONS``) and loads the PTX with
  ``module_from_buffer`` (the driver JIT-compiles it once; NVRTC's output is cached per process).
  ``launch`` packs the arguments into one parameter buffer at their C alignment
  (``backend.pack_params``) and calls the function with it (pycuda passes a ``numpy.void`` as
  raw bytes), on the stream, with the dynamic shared memory asked for.
* **GEMM** (``gemm(g, a, b, c)``: a ``launch.Gemm`` on its operands' addresses) goes to cuBLAS's
  ``cublasGemmStridedBatchedEx`` (``cublas.py``'s handle and library) on the same stream, each
  operand with its own data type (``gemm_ex_args``); TF32 only with ``allow_tf32``.
"""
import ctypes
import threading

import numpy as np

from . import driver, nvrtc
from .backend import Backend, Event, Stream, check_gemm, marshal_args, pack_params, parse_param
from .kernels.elemwise import NVRTC_OPTIONS, program
from .pool import OutOfDeviceMemory

__all__ = ["PycudaBackend", "PycudaStream", "PycudaEvent", "launch_buffer", "arch_of",
           "gemm_ex_args"]


def gemm_ex_args(g, a, b, c, handle, allow_tf32=False):
    """The arguments of ``cublasGemmStridedBatchedEx`` for the ``launch.Gemm`` ``g`` on device
    addresses ``a``, ``b``, ``c``: each operand's own ``cudaDataType`` (so float16 operands may
    sum into a float32 C, as the convolutions' column buffers do), the compute type (float32 for
    float16 and float32 -- TF32 only with ``allow_tf32`` and float32 operands --, float64 for
    float64), alpha and beta in the compute type's precision."""
    from .cublas import _GEMM_DEFAULT, COMPUTE, CUDA_R, OP
    types = [np.dtype(d) for d in (g.a_dtype, g.b_dtype, g.c_dtype)]
    if np.dtype(g.compute_dtype) == np.float64:
        compute, scalar = COMPUTE["64F"], ctypes.c_double
    else:
        tf32 = allow_tf32 and all(t == np.float32 for t in types)
        compute, scalar = COMPUTE["32F_FAST_TF32" if tf32 else "32F"], ctypes.c_float
    alpha, beta = scalar(g.alpha), scalar(g.beta)
    return (handle, OP["T" if g.transa else "N"], OP["T" if g.transb else "N"], g.m, g.n, g.k,
            ctypes.byref(alpha), ctypes.c_void_p(int(a)), CUDA_R[types[0]], g.lda, g.stride_a,
            ctypes.c_void_p(int(b)), CUDA_R[types[1]], g.ldb, g.stride_b, ctypes.byref(beta),
            ctypes.c_void_p(int(c)), CUDA_R[types[2]], g.ldc, g.stride_c, g.batch, compute,
            _GEMM_DEFAULT)


def arch_of(capability):
    """NVRTC's virtual architecture for a compute capability: ``(9, 0)`` -> ``"compute_90"``."""
    major, minor = capability
    return f"compute_{major}{minor}"


def launch_buffer(params, args, kernel="kernel"):
    """The one ``numpy.void`` argument a pycuda launch gets for ``args`` of the kernel
    parameters ``params`` (C declarations): the parameter buffer, each value at its alignment."""
    values = marshal_args([parse_param(p) for p in params], args, kernel)
    buf = pack_params(values)
    return np.void(buf) if buf else None


class PycudaStream(Stream):
    """A pycuda ``Stream`` (``raw``) in the backend's interface."""

    def __init__(self, backend, raw):
        self.backend, self.raw = backend, raw

    @property
    def handle(self):
        """The ``CUstream`` as an int (for cuBLAS)."""
        return self.raw.handle

    def synchronize(self):
        with self.backend.context():
            self.raw.synchronize()

    def query(self):
        with self.backend.context():
            return self.raw.is_done()


class PycudaEvent(Event):
    """A pycuda ``Event`` in the backend's interface."""

    def __init__(self, backend, timing=True):
        super().__init__()
        self.backend = backend
        with backend.context():
            flags = 0 if timing else backend.cuda.event_flags.DISABLE_TIMING
            self.raw = backend.cuda.Event(flags)

    def record(self, stream=None):
        stream = stream or self.backend.stream
        with self.backend.context():
            self.raw.record(stream.raw)
        self.recorded = True
        return self

    def query(self):
        if not self.recorded:
            return True
        with self.backend.context():
            return self.raw.query()

    def synchronize(self):
        if self.recorded:
            with self.backend.context():
                self.raw.synchronize()

    def elapsed_ms(self, end):
        """``cuEventElapsedTime`` from this event to ``end`` (both waited for)."""
        if not (self.recorded and end.recorded):
            raise RuntimeError("elapsed_ms: both events must be recorded")
        with self.backend.context():
            end.raw.synchronize()
            return self.raw.time_till(end.raw)


class PycudaBackend(Backend):
    """GPU ``index`` through pycuda (see the module docstring).  ``allow_tf32``: float32 GEMMs
    may use TF32 tensor cores; ``pinned_threshold``: bytes from which copies are staged through
    page-locked memory."""

    name = "pycuda"
    asynchronous = True

    def __init__(self, index=0, allow_tf32=False, pinned_threshold=1 << 20):
        self.index = index
        self.cuda = driver.check_gpu(index, f"the CUDA device gpu{index}")
        self._ctx = driver.primary_context(index)
        self.arch = arch_of(driver.compute_capability(index))
        self.multiprocessors = driver.attribute(index, "MULTIPROCESSOR_COUNT")
        self.allow_tf32 = allow_tf32
        self.pinned_threshold = pinned_threshold
        self._lock = threading.Lock()       # the staging buffer and the cuBLAS handle
        self._staging = None                # page-locked bytes, grown on demand
        self._staged = None                 # event after the staging buffer's last copy
        self._cublas = None
        self._copies = None                 # the stream of copy_dtoh_ready
        with self.context():
            self.stream = PycudaStream(self, self.cuda.Stream())

    def context(self):
        """``with backend.context():`` -- the GPU's primary context current on this thread."""
        return driver.current_context(self.index)

    # -- memory ----------------------------------------------------------------------------------
    def reserve(self, nbytes):
        with self.context():
            try:
                alloc = self.cuda.mem_alloc(nbytes)
            except self.cuda.MemoryError as e:
                raise OutOfDeviceMemory(nbytes, f"cuMemAlloc: {e}") from None
        return int(alloc), alloc

    def release(self, handle):
        with self.context():
            handle.free()

    def mem_info(self):
        total, free = driver.memory_info(self.index)
        return total, free

    # -- copies ----------------------------------------------------------------------------------
    def _stage(self, nbytes):
        # the page-locked buffer, once its previous copy is done
        if self._staged is not None:
            self._staged.synchronize()
            self._staged = None
        if self._staging is None or self._staging.nbytes < nbytes:
            self._staging = self.cuda.pagelocked_empty(nbytes, np.uint8)
        return self._staging[:nbytes]

    def copy_htod(self, address, host_array):
        n = host_array.nbytes
        if not n:
            return
        with self.context():
            if n >= self.pinned_threshold:
                with self._lock:
                    stage = self._stage(n)
                    stage[:] = host_array.reshape(-1).view(np.uint8)
                    self.cuda.memcpy_htod_async(int(address), stage, self.stream.raw)
                    self._staged = PycudaEvent(self).record()
            else:
                # pageable memory: the driver copies it before returning
                self.cuda.memcpy_htod_async(int(address), host_array, self.stream.raw)

    def copy_dtoh(self, host_array, address):
        n = host_array.nbytes
        if not n:
            return
        with self.context():
            if n >= self.pinned_threshold:
                with self._lock:
                    stage = self._stage(n)
                    self.cuda.memcpy_dtoh_async(stage, int(address), self.stream.raw)
                    self.stream.raw.synchronize()
                    host_array.reshape(-1).view(np.uint8)[:] = stage
            else:
                self.cuda.memcpy_dtoh_async(host_array, int(address), self.stream.raw)
                self.stream.raw.synchronize()

    def _copy_stream(self):
        # the second stream of ``copy_dtoh_ready`` (made on first use)
        if self._copies is None:
            with self.context():
                self._copies = PycudaStream(self, self.cuda.Stream())
        return self._copies

    def copy_dtoh_ready(self, host_array, address):
        """A device-to-host copy of bytes whose writer's event has passed, on a second stream:
        it does not wait for the kernels queued after that writer."""
        n = host_array.nbytes
        if not n:
            return
        copies = self._copy_stream()
        with self.context():
            if n >= self.pinned_threshold:
                with self._lock:
                    stage = self._stage(n)
                    self.cuda.memcpy_dtoh_async(stage, int(address), copies.raw)
                    copies.raw.synchronize()
                    host_array.reshape(-1).view(np.uint8)[:] = stage
            else:
                self.cuda.memcpy_dtoh_async(host_array, int(address), copies.raw)
                copies.raw.synchronize()

    def copy_dtod(self, dst, src, nbytes):
        if nbytes:
            with self.context():
                self.cuda.memcpy_dtod_async(int(dst), int(src), int(nbytes), self.stream.raw)

    def memset(self, address, byte, nbytes):
        if nbytes:
            with self.context():
                self.cuda.memset_d8_async(int(address), int(byte), int(nbytes), self.stream.raw)

    # -- kernels ---------------------------------------------------------------------------------
    def load(self, kernels):
        kernels = list(kernels)
        options = tuple(dict.fromkeys(o for k in kernels
                                      for o in getattr(k, "nvrtc_options", NVRTC_OPTIONS)))
        ptx = nvrtc.compile_ptx(program(kernels), f"{kernels[0].name}.cu", self.arch, options)
        with self.context():
            module = self.cuda.module_from_buffer(ptx.encode())
        return _Module(module, {k.name: k.params for k in kernels})

    def launch(self, module, name, grid, block, args, shared_bytes=0):
        fn = module.function(name)
        buf = launch_buffer(module.params[name], args, name)
        with self.context():
            fn(*([buf] if buf is not None else []), grid=tuple(grid), block=tuple(block),
               stream=self.stream.raw, shared=int(shared_bytes))

    # -- GEMM ------------------------------------------------------------------------------------
    def _blas(self):
        if self._cublas is None:
            from .cublas import Cublas
            with self.context():
                self._cublas = Cublas(self.allow_tf32)
                self._cublas.set_stream(self.stream.handle)
        return self._cublas

    def gemm(self, g, a, b, c):
        """``cublasGemmStridedBatchedEx`` of the ``launch.Gemm`` ``g`` (``backend.check_gemm``)
        on the device addresses ``a``, ``b``, ``c``, on the backend's stream."""
        check_gemm(g)
        if g.batch == 0 or g.m == 0 or g.n == 0:
            return
        with self._lock, self.context():
            blas = self._blas()
            status = blas.lib.cublasGemmStridedBatchedEx(*gemm_ex_args(g, a, b, c, blas.handle,
                                                                       blas.allow_tf32))
        if status != 0:
            from .cublas import CublasError, status_name
            raise CublasError(f"cublasGemmStridedBatchedEx failed: {status_name(status)}",
                              status_name(status), "cublasGemmStridedBatchedEx")

    # -- ordering --------------------------------------------------------------------------------
    def event(self, timing=True):
        return PycudaEvent(self, timing)

    def synchronize(self):
        with self.context():
            self.cuda.Context.synchronize()


class _Module:
    """A loaded pycuda module and its kernels' parameter declarations."""

    def __init__(self, module, params):
        self.module, self.params, self._functions = module, params, {}

    def function(self, name):
        fn = self._functions.get(name)
        if fn is None:
            fn = self._functions[name] = self.module.get_function(name)
        return fn
