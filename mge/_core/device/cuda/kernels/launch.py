"""Launch plans: what the CUDA device runs for one op, as data -- the one format of every family.

A kernel family (``reduce.py``, ``conv.py``...) turns an op and the layouts of its inputs and
outputs into a ``Plan``; the device (``cuda/launch/plans.py``) binds the plan's buffers to
device memory and runs its steps on its stream; the tests run the very same plan on the host
build of the kernels (``cuda/host_backend.py``).  Nothing here needs a GPU.

A plan's function is registered in its module's ``PLANS`` table, ``op class -> plan(op, ins,
outs)``, where ``ins`` and ``outs`` are ``Layout`` objects: the shapes and dtypes the op's rule
gave, and (inputs only, where the family's table says it reads strides, ``STRIDED``) the strides
of the buffers the device holds; other inputs arrive dense (the device copies them first).

Steps, in stream order:

* ``Launch`` -- a kernel on a 3-D grid of 3-D blocks with its arguments (``Buf`` for pointers,
  ``None`` for NULL, numpy scalars of each parameter's C type, ``numpy.void`` for structs);
* ``Gemm`` -- one ``cublasGemmStridedBatchedEx`` in cuBLAS's column-major terms;
* ``Memset`` -- bytes of a buffer set to one value (``cuMemsetD8``).

Buffers are named: ``"in0"``, ``"in1"``... (the op's inputs), ``"out0"``... (its outputs, which the
device allocates dense before the steps), ``"ws"`` (the plan's one workspace of ``workspace``
bytes, allocated for the plan and freed after it; ``Workspace`` lays out arrays in it).  A
``Buf`` is a buffer plus a byte offset.

Kernels cannot raise: where one finds bad input (an index out of range, a label, a parameter of a
distribution) it sets a word in the workspace, and the plan lists a ``Check`` for it; the device
zeroes those words before the steps and reads them after, raising the check's error when one is
set.  A data-dependent size (``CondTake``'s count) is a ``Readback``: the device runs the steps,
reads the value, and asks the plan's ``then(value)`` for the plan that follows.
"""
from dataclasses import dataclass, field

import numpy as np

__all__ = ["Layout", "Buf", "Launch", "Gemm", "Memset", "Check", "Readback", "Plan", "Workspace",
           "grid_for", "THREADS", "MAX_GRID_X", "MAX_GRID_YZ", "dense_strides"]

#: Threads of a block in the grid-stride kernels.
THREADS = 256
#: The largest grid the driver launches (x; y and z).
MAX_GRID_X = 2 ** 31 - 1
MAX_GRID_YZ = 65535
# Grid-stride kernels stop growing the grid here: each thread then takes several elements,
# which costs nothing on a GPU that is full anyway.
_GRID_STRIDE_BLOCKS = 65535


def dense_strides(shape):
    """C-contiguous strides of ``shape``, in elements."""
    strides, step = [], 1
    for n in reversed(tuple(shape)):
        strides.append(step)
        step *= max(int(n), 1)
    return tuple(reversed(strides))


@dataclass(frozen=True)
class Layout:
    """An input or output of a plan: ``shape``, ``dtype`` and ``strides`` in elements (``None``:
    C-contiguous)."""

    shape: tuple
    dtype: np.dtype
    strides: tuple = None

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(int(n) for n in self.shape))
        object.__setattr__(self, "dtype", np.dtype(self.dtype))
        if self.strides is not None:
            object.__setattr__(self, "strides", tuple(int(s) for s in self.strides))

    @property
    def size(self):
        """The number of elements."""
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def element_strides(self):
        """The strides in elements (the dense ones when ``strides`` is ``None``)."""
        return dense_strides(self.shape) if self.strides is None else self.strides

    @property
    def contiguous(self):
        """Whether the elements lie C-contiguous."""
        if self.strides is None:
            return True
        return all(n == 1 or s == d for n, s, d in
                   zip(self.shape, self.strides, dense_strides(self.shape)))


@dataclass(frozen=True)
class Buf:
    """A pointer argument: the plan's buffer ``name`` (``"in0"``, ``"out0"``, ``"ws"``) plus
    ``offset`` bytes."""

    name: str
    offset: int = 0

    def __add__(self, nbytes):
        return Buf(self.name, self.offset + int(nbytes))


@dataclass(frozen=True)
class Launch:
    """One kernel launch: ``kernel`` (a ``KernelSource``) on ``grid`` blocks of ``block``
    threads (3-tuples), ``shared_bytes`` of dynamic shared memory, with ``args`` in the order of
    ``kernel.params``."""

    kernel: object
    grid: tuple
    block: tuple
    args: tuple
    shared_bytes: int = 0

    def __post_init__(self):
        object.__setattr__(self, "grid", _dim3(self.grid, "grid"))
        object.__setattr__(self, "block", _dim3(self.block, "block"))


def _dim3(v, what):
    v = (v,) if isinstance(v, (int, np.integer)) else tuple(v)
    if not 1 <= len(v) <= 3 or any(int(x) < 1 for x in v):
        raise ValueError(f"CUDA launch: {what} {v!r} must be 1 to 3 positive sizes")
    return tuple(int(x) for x in v) + (1,) * (3 - len(v))


@dataclass(frozen=True)
class Gemm:
    """One ``cublasGemmStridedBatchedEx``: for ``i < batch``, ``C_i = alpha * op(A_i) @ op(B_i) +
    beta * C_i`` with column-major ``m x k``, ``k x n`` and ``m x n`` operands after ``op``
    (``transa``/``transb``: the stored matrix is transposed); ``A_i`` starts at ``a`` plus
    ``i * stride_a`` elements, its columns ``lda`` elements apart (likewise B and C).  Operand
    dtypes and the compute dtype (float32 for float16 and float32, float64 for float64; never
    TF32) are numpy dtypes.  ``beta == 0`` never reads C."""

    transa: bool
    transb: bool
    m: int
    n: int
    k: int
    a: Buf
    lda: int
    stride_a: int
    b: Buf
    ldb: int
    stride_b: int
    c: Buf
    ldc: int
    stride_c: int
    batch: int
    a_dtype: np.dtype
    b_dtype: np.dtype
    c_dtype: np.dtype
    compute_dtype: np.dtype
    alpha: float = 1.0
    beta: float = 0.0


@dataclass(frozen=True)
class Memset:
    """``nbytes`` bytes at ``buf`` set to the byte ``value``."""

    buf: Buf
    nbytes: int
    value: int = 0


@dataclass(frozen=True)
class Check:
    """A word the kernels set on bad input: ``flag`` (``dtype`` int32 or int64, in the workspace),
    zeroed by the device before the steps.  Non-zero afterwards: the device raises
    ``error(value)`` -- an exception (the CPU device's, with its message), given the word's
    value (kernels that know more, e.g. which element was bad, encode it there).  An ``error``
    that takes two parameters is called ``error(value, read)``, with ``read(buf, dtype, count)``
    giving ``count`` elements at ``buf`` as a numpy array (the bad index itself, for the
    message), so the rare error path may read the device's memory."""

    flag: Buf
    error: object
    dtype: np.dtype = np.dtype(np.int32)


@dataclass(frozen=True)
class Readback:
    """After the steps, the device reads the ``dtype`` scalar at ``buf`` and runs the plan
    ``then(value)`` (the same buffers; its own workspace).  ``outs``, where the outputs' sizes
    depend on the value (``CondTake``, a mask index): ``outs(value)`` gives the output
    ``Layout``s, and the device allocates the outputs then, after the readback, not before the
    steps (the plan function's own ``outs`` are then not read for their shapes)."""

    buf: Buf
    dtype: np.dtype
    then: object
    outs: object = None


@dataclass(frozen=True)
class Plan:
    """What the device runs for one op: ``steps`` (``Launch``, ``Gemm``, ``Memset``) in stream
    order, a ``workspace`` of that many bytes (named ``"ws"``), ``checks`` read after the steps,
    an optional ``readback`` that continues the plan, and ``notes`` (why it looks as it does:
    fast paths taken, chunks)."""

    steps: tuple
    workspace: int = 0
    checks: tuple = ()
    readback: Readback = None
    notes: tuple = field(default=())

    @property
    def kernels(self):
        """The distinct kernels the steps launch, in order of first use."""
        seen = {}
        for s in self.steps:
            if isinstance(s, Launch):
                seen.setdefault(s.kernel.name, s.kernel)
        return tuple(seen.values())

    @property
    def launches(self):
        """The ``Launch`` steps."""
        return tuple(s for s in self.steps if isinstance(s, Launch))


class Workspace:
    """Lays out arrays in a plan's workspace at ``alignment``-byte offsets: ``add(nbytes)`` gives
    the ``Buf`` of a new array; ``size`` is the bytes needed so far."""

    def __init__(self, alignment=256):
        self.alignment = alignment
        self.size = 0

    def add(self, nbytes):
        """A new array of ``nbytes`` bytes; its ``Buf``."""
        offset = -(-self.size // self.alignment) * self.alignment
        self.size = offset + int(nbytes)
        return Buf("ws", offset)


def grid_for(n, threads=THREADS):
    """The grid of a grid-stride launch over ``n`` items (at least one block)."""
    return (max(1, min(_GRID_STRIDE_BLOCKS, -(-int(n) // threads))), 1, 1)
