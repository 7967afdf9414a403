"""What the CUDA device needs from "a GPU": the ``Backend`` interface, and the GPU-free pieces
both backends share (kernel parameters and their marshalling, cuBLAS's argument rules).

``device.py``'s ``CudaDevice`` runs on a backend and never on pycuda directly.  Two exist:

* ``PycudaBackend`` (``pycuda_backend.py``): a real GPU through pycuda's driver API and cuBLAS;
* ``HostBackend`` (``host_backend.py``): an emulation on the host that the tests use -- host
  memory at real addresses, the same generated kernel sources built with g++, cuBLAS's GEMM
  emulated with numpy on views of that memory.

So the device's code -- buffers, views, the pool, the launchers' index arithmetic and the
row-major -> column-major mapping of matrix products -- runs for real on machines without a GPU.

The interface (every method may be called from the channel's worker and from the caller's
thread; a backend serialises what must be serialised):

* memory: ``reserve(nbytes) -> (address, handle)`` / ``release(handle)`` -- the ``AddressSpace``
  of ``pool.py``'s ``CachingPool`` (the device allocates only through its pool);
  ``mem_info() -> (total, free)``;
* copies: ``copy_htod(address, host_array)``, ``copy_dtoh(host_array, address)`` (a C-contiguous
  host array; both return once the host array may be reused or read), ``copy_dtoh_ready``
  (the same for bytes whose event has passed: it does not wait for later work), ``copy_dtod(dst,
  src, nbytes)``, ``memset(address, byte, nbytes)`` (ordered on the backend's stream);
* kernels: ``load(kernels) -> module`` (a list of ``KernelSource``-like objects: ``name``,
  ``parts``, ``params``; one module for all of them), ``launch(module, name, grid, block, args,
  shared_bytes=0)`` with ``args`` one Python value per declared parameter (``marshal_args``);
* ``gemm(g, a, b, c)``: one ``kernels/launch.py`` ``Gemm`` (a strided-batched GEMM in cuBLAS's
  column-major terms, per-operand dtypes, its compute dtype; ``check_gemm`` states the rules)
  with ``a``, ``b``, ``c`` the device addresses of its ``Buf``s ``g.a``, ``g.b``, ``g.c``, offsets
  included: the caller resolves them (the plan executor from its bound buffers, the matmul
  launcher through ``gemm_addresses``), so a backend never sees buffer names;
* ordering: ``stream`` (the backend's ``Stream``: ``synchronize()``; the device issues all work
  on it), ``event()`` -> an ``Event`` (``record(stream=None)``, ``query()``, ``synchronize()``,
  ``elapsed_ms(end)``), ``synchronize()`` (the whole device); ``asynchronous`` says whether
  work runs after it is issued (a GPU, ``HostBackend(asynchronous=True)``) or at once.

Work on one stream runs in issue order, so a block freed by a buffer may be handed to the next
kernel at once (that kernel runs after every earlier use of the memory), as in PyTorch's caching
allocator; only the host waits, in ``copy_dtoh``.
"""
import ctypes
import re
import time

import numpy as np

from .pool import AddressSpace

__all__ = ["Backend", "Stream", "Event", "KernelParam", "parse_param", "marshal_args",
           "pack_params", "ctypes_struct", "check_gemm", "gemm_addresses", "GemmError",
           "GEMM_DTYPES", "GEMM_TYPES", "ELEMENTWISE_BLOCK", "elementwise_grid"]

#: Threads per block of the grid-stride (elementwise) kernels: 8 warps, a good occupancy on
#: every architecture from Volta on, and a multiple of any warp-shuffle tree's width.
ELEMENTWISE_BLOCK = 256

#: The dtypes ``gemm`` takes (float16 accumulates in float32, as cuBLAS's CUBLAS_COMPUTE_32F).
GEMM_DTYPES = tuple(np.dtype(d) for d in ("float16", "float32", "float64"))


def elementwise_grid(n, multiprocessors, block=ELEMENTWISE_BLOCK, waves=32):
    """Blocks for a grid-stride loop over ``n`` elements: one element per thread up to
    ``waves`` blocks per multiprocessor (enough to hide memory latency), beyond which each
    thread loops (launching more blocks would only cost scheduling)."""
    need = -(-n // block)
    return max(1, min(need, multiprocessors * waves))


# -- streams and events -------------------------------------------------------------------------

class Stream:
    """An ordered queue of device work.  The base class is the host's: work runs when issued, so
    there is nothing to wait for."""

    def synchronize(self):
        """Wait until every piece of work issued on this stream has run."""

    def query(self):
        """Whether every piece of work issued on this stream has run."""
        return True


class Event:
    """A point in a stream's work: ``record(stream)`` marks it, ``query()`` says whether the
    work before it has run, ``synchronize()`` waits for it, ``elapsed_ms(end)`` is the device
    time from it to the later event ``end``.  The base class is the host's (immediate) event:
    the point is passed when it is recorded."""

    def __init__(self):
        self.recorded = False
        self.time_ns = None

    def record(self, stream=None):
        """Mark the current end of ``stream``'s work (the backend's stream by default)."""
        self.recorded = True
        self.time_ns = time.perf_counter_ns()
        return self

    def elapsed_ms(self, end):
        """Milliseconds from this event to the later event ``end`` (both recorded)."""
        if self.time_ns is None or end.time_ns is None:
            raise RuntimeError("elapsed_ms: both events must be recorded")
        return (end.time_ns - self.time_ns) / 1e6

    def query(self):
        """Whether the work before the recorded point has run (an unrecorded event: True)."""
        return True

    def synchronize(self):
        """Wait for the work before the recorded point."""


# -- the interface --------------------------------------------------------------------------------

class Backend(AddressSpace):
    """The interface of the module docstring.  ``name`` says what the backend is (for messages);
    ``index`` is the GPU's number; ``multiprocessors`` sizes grids (``elementwise_grid``)."""

    name = "backend"
    index = 0
    multiprocessors = 1
    asynchronous = False  # whether issued work runs later (the host then waits where it must)
    stream = Stream()  # the stream all the device's work goes to (a backend sets its own)

    def mem_info(self):
        """``(total, free)`` bytes of device memory."""
        raise NotImplementedError(f"{type(self).__name__}.mem_info")

    def copy_htod(self, address, host_array):
        """Copy the C-contiguous ``host_array``'s bytes to device memory at ``address``."""
        raise NotImplementedError(f"{type(self).__name__}.copy_htod")

    def copy_dtoh(self, host_array, address):
        """Fill the C-contiguous, writeable ``host_array`` from device memory at ``address``;
        returns when the bytes are there."""
        raise NotImplementedError(f"{type(self).__name__}.copy_dtoh")

    def copy_dtoh_ready(self, host_array, address):
        """``copy_dtoh`` of bytes whose writer has finished (its event has passed), without
        waiting for the work issued after it: a GPU copies on a second stream.  By default (a
        backend whose work runs at once) it is ``copy_dtoh``."""
        self.copy_dtoh(host_array, address)

    def copy_dtod(self, dst, src, nbytes):
        """Copy ``nbytes`` bytes from ``src`` to ``dst`` (device addresses; not overlapping)."""
        raise NotImplementedError(f"{type(self).__name__}.copy_dtod")

    def memset(self, address, byte, nbytes):
        """Set ``nbytes`` bytes at ``address`` to ``byte`` (0..255)."""
        raise NotImplementedError(f"{type(self).__name__}.memset")

    def load(self, kernels):
        """One module holding every kernel of ``kernels`` (``KernelSource``-like objects)."""
        raise NotImplementedError(f"{type(self).__name__}.load")

    def launch(self, module, name, grid, block, args, shared_bytes=0):
        """Launch kernel ``name`` of ``module`` on ``grid`` x ``block`` threads (3-tuples) with
        ``args`` (one value per parameter: ``marshal_args``) and ``shared_bytes`` of dynamic
        shared memory, on the backend's stream."""
        raise NotImplementedError(f"{type(self).__name__}.launch")

    def gemm(self, g, a, b, c):
        """cuBLAS's strided-batched GEMM ``g`` (a ``launch.Gemm``; see ``check_gemm``) on the
        device addresses ``a``, ``b``, ``c`` of its operands."""
        raise NotImplementedError(f"{type(self).__name__}.gemm")

    def event(self, timing=True):
        """A new ``Event`` of this backend (``timing=False``: one only waited for, which a GPU
        records more cheaply)."""
        return Event()

    def synchronize(self):
        """Wait until every piece of work issued to the device has run."""
        self.stream.synchronize()


# -- kernel parameters ----------------------------------------------------------------------------

class KernelParam:
    """One parameter of a kernel, parsed from its C declaration (``KernelSource.params``):
    ``kind`` is ``"pointer"``, ``"scalar"`` (then ``dtype`` is its numpy dtype) or ``"struct"``
    (passed by value: the argument is a ``numpy.void`` of the struct's bytes and alignment, as
    ``kernels/elemwise.py``'s ``pack_layout`` makes); ``decl`` is the declaration."""

    __slots__ = ("decl", "name", "kind", "dtype")

    def __init__(self, decl, name, kind, dtype=None):
        self.decl, self.name, self.kind, self.dtype = decl, name, kind, dtype

    def __repr__(self):
        return f"KernelParam({self.decl!r}, {self.kind})"


# C scalar types a kernel may take by value -> their numpy dtype
_SCALARS = {
    "bool": "bool", "char": "int8", "signed char": "int8", "unsigned char": "uint8",
    "short": "int16", "unsigned short": "uint16", "int": "int32", "unsigned int": "uint32",
    "unsigned": "uint32", "long long": "int64", "unsigned long long": "uint64",
    "size_t": "uint64", "float": "float32", "double": "float64",
}
_DECL = re.compile(r"^(.*?)\s*\b([A-Za-z_]\w*)$")


def parse_param(decl):
    """The ``KernelParam`` of the C declaration ``decl`` (``"const float* in0"``, ``"long long
    n"``, ``"mge_layout<3, int> layout"``); a ``ValueError`` for one that is none of those."""
    m = _DECL.match(decl.strip())
    if not m or not m.group(1):
        raise ValueError(f"kernel parameter {decl!r}: not a C declaration 'type name'")
    ctype, name = m.group(1).strip(), m.group(2)
    if "*" in ctype:
        return KernelParam(decl, name, "pointer")
    base = " ".join(w for w in ctype.split() if w != "const")
    if base in _SCALARS:
        return KernelParam(decl, name, "scalar", np.dtype(_SCALARS[base]))
    return KernelParam(decl, name, "struct")


def marshal_args(params, args, kernel="kernel"):
    """``args`` checked against ``params`` (``KernelParam``s) and converted to numpy values:
    pointers to ``numpy.uintp`` (an int address, or anything ``int()`` takes: a pool ``Block``),
    scalars to their dtype (an int must fit it exactly), structs kept as their ``numpy.void``.
    A ``TypeError`` names the kernel and the parameter for a wrong count or kind."""
    if len(args) != len(params):
        raise TypeError(f"{kernel}: {len(params)} parameter(s) "
                        f"({', '.join(p.decl for p in params)}), got {len(args)} argument(s)")
    out = []
    for p, a in zip(params, args):
        if p.kind == "pointer":
            try:
                address = int(a)
            except (TypeError, ValueError):
                raise TypeError(f"{kernel}: parameter {p.decl!r} takes a device address, got "
                                f"{type(a).__name__}") from None
            if address < 0:
                raise TypeError(f"{kernel}: parameter {p.decl!r}: negative address {address}")
            out.append(np.uintp(address))
        elif p.kind == "scalar":
            if p.dtype.kind in "iub":
                if isinstance(a, (float, np.floating)):
                    raise TypeError(f"{kernel}: parameter {p.decl!r} takes an integer, got {a!r}")
                info = np.iinfo(p.dtype) if p.dtype.kind != "b" else None
                v = int(a)
                if info is not None and not info.min <= v <= info.max:
                    raise TypeError(f"{kernel}: parameter {p.decl!r}: {v} does not fit "
                                    f"{p.dtype}")
                out.append(p.dtype.type(v))
            else:
                out.append(p.dtype.type(a))
        else:
            if not isinstance(a, np.void):
                raise TypeError(f"{kernel}: parameter {p.decl!r} is a struct passed by value "
                                f"(a numpy.void of its bytes), got {type(a).__name__}")
            out.append(a)
    return out


def _alignment(value):
    if isinstance(value, np.void):
        return value.dtype.alignment if value.dtype.isalignedstruct else 1
    return value.dtype.itemsize


def pack_params(values):
    """The bytes of a kernel's parameter buffer for ``values`` (``marshal_args``'s output): each
    at its C alignment, as CUDA lays out a ``__global__`` function's parameters (and as
    ``cuLaunchKernel`` takes them with ``CU_LAUNCH_PARAM_BUFFER_POINTER``)."""
    buf = bytearray()
    for v in values:
        align = _alignment(v)
        buf += b"\0" * (-len(buf) % align)
        buf += v.tobytes()
    return bytes(buf)


def ctypes_struct(dtype):
    """A ``ctypes.Structure`` with the fields, sizes and C alignment of the aligned structured
    numpy ``dtype`` (``numpy.ctypeslib.as_ctypes_type`` packs to alignment 1, which is not how C
    passes the struct by value)."""
    fields = []
    for name in dtype.names:
        sub, _ = dtype.fields[name][:2]
        fields.append((name, _ctype_of(sub)))
    t = type(f"Struct_{len(fields)}", (ctypes.Structure,), {"_fields_": fields})
    if ctypes.sizeof(t) != dtype.itemsize:
        raise ValueError(f"struct {dtype}: ctypes lays it out in {ctypes.sizeof(t)} bytes, numpy "
                         f"in {dtype.itemsize} (not an aligned C struct)")
    return t


def _ctype_of(dtype):
    if dtype.subdtype is not None:
        base, shape = dtype.subdtype
        t = _ctype_of(base)
        for n in reversed(shape):
            t = t * n
        return t
    if dtype.names:
        return ctypes_struct(dtype)
    return np.ctypeslib.as_ctypes_type(dtype)


# -- cuBLAS's GEMM ---------------------------------------------------------------------------------

class GemmError(ValueError):
    """A GEMM's arguments that cuBLAS would refuse (``CUBLAS_STATUS_INVALID_VALUE`` and friends):
    ``status`` is the cuBLAS status name."""

    def __init__(self, message, status="CUBLAS_STATUS_INVALID_VALUE"):
        super().__init__(f"{status}: {message}")
        self.status = status


#: The operand and compute dtypes ``gemm`` takes, ``(A, B, C, compute)``: those of
#: ``cublasGemmStridedBatchedEx`` that the kernels use (float16 accumulates in float32, as
#: cuBLAS's CUBLAS_COMPUTE_32F, into float16 or float32).
GEMM_TYPES = frozenset((np.dtype(a), np.dtype(a), np.dtype(c), np.dtype(t)) for a, c, t in (
    ("float16", "float16", "float32"), ("float16", "float32", "float32"),
    ("float32", "float32", "float32"), ("float64", "float64", "float64")))


def check_gemm(g):
    """The rules of ``cublasGemmStridedBatchedEx`` on the ``launch.Gemm`` ``g``, raising
    ``GemmError`` where cuBLAS returns an error; returns ``g``.

    Column-major: ``C_i = alpha * op(A_i) @ op(B_i) + beta * C_i`` for ``i < batch``, with
    ``op(A)`` m x k (``A`` stored m x k with leading dimension ``lda >= max(1, m)``, or k x m with
    ``lda >= max(1, k)`` when ``transa``), ``op(B)`` k x n likewise, ``C`` m x n with
    ``ldc >= max(1, m)``; the i-th matrices start ``i * stride`` elements after the first (a
    stride of 0 reuses one matrix).  ``beta == 0`` means ``C`` is not read (it may hold
    anything, NaN included).  The dtypes must be one of ``GEMM_TYPES``."""
    for name in ("transa", "transb"):
        if not isinstance(getattr(g, name), (bool, np.bool_)):
            raise GemmError(f"{name} must be a bool, got {getattr(g, name)!r}")
    for name in ("m", "n", "k", "batch"):
        if getattr(g, name) < 0:
            raise GemmError(f"{name} = {getattr(g, name)} is negative")
    rows_a = g.k if g.transa else g.m
    rows_b = g.n if g.transb else g.k
    for name, ld, rows in (("lda", g.lda, rows_a), ("ldb", g.ldb, rows_b), ("ldc", g.ldc, g.m)):
        if ld < max(1, rows):
            raise GemmError(f"{name} = {ld} < max(1, {rows}) (transa={g.transa}, "
                            f"transb={g.transb}, m={g.m}, n={g.n}, k={g.k})")
    for name in ("stride_a", "stride_b", "stride_c"):
        if getattr(g, name) < 0:
            raise GemmError(f"{name} = {getattr(g, name)} is negative")
    types = tuple(np.dtype(d) for d in (g.a_dtype, g.b_dtype, g.c_dtype, g.compute_dtype))
    if types not in GEMM_TYPES:
        raise GemmError(f"no GEMM of {types[0]} x {types[1]} -> {types[2]} computing in "
                        f"{types[3]} (cuBLAS here takes "
                        f"{', '.join(str(d) for d in GEMM_DTYPES)}; float16 and float32 compute "
                        f"in float32)", "CUBLAS_STATUS_NOT_SUPPORTED")
    return g


def gemm_addresses(g, bases):
    """``(a, b, c)``: the device addresses of ``g``'s operand ``Buf``s, ``bases`` mapping each
    buffer name (``"in0"``, ``"out0"``...) to its buffer's address."""
    return tuple(int(bases[buf.name]) + buf.offset for buf in (g.a, g.b, g.c))
