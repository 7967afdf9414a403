"""Launchers of ``MatrixMul`` and ``BatchedMatrixMul``: cuBLAS's strided-batched GEMM.

cuBLAS is column-major; mge's arrays are row-major.  A row-major ``C = A' @ B'`` (``A'`` M x K,
``B'`` K x N, each its input transposed when the op says so) is, read column-major, ``C^T = B'^T
@ A'^T`` -- an N x M column-major product with ``C``'s rows as its columns (``ldc = N``).  So the
GEMM's ``A`` is our ``B'`` and its ``B`` our ``A'``, with ``m = N``, ``n = M``, ``k = K``.  Each
operand goes to cuBLAS *as it lies in memory*, whatever its strides, when cuBLAS can read it
(``operand_layout``): a matrix whose rows are dense is the transpose of a column-major matrix
with ``ld`` = its row stride (op ``N``); one whose columns are dense -- a transposed view, or a
``transposeA``/``transposeB`` input -- is a column-major matrix with ``ld`` = its column stride
(op ``T``).  Only a matrix neither way (a broadcast inside the matrix, negative or overlapping
strides) is made dense first.

Batch dims (``BatchedMatrixMul``: numpy's broadcasting, a 1-D operand a row on the left or a
column on the right) become one strided batch when they merge (``simplify_layout``: a
broadcast operand's batch stride is 0, which cuBLAS allows); what does not merge loops over the
outer batch dims, one strided-batched GEMM each.  ``plan_matmul`` makes the plan from shapes and
strides alone (no device, no GPU: the tests check it, and ``HostBackend.gemm`` runs it with
cuBLAS's semantics): its calls are ``kernels/launch.py`` ``Gemm``s on the buffers ``"in0"`` (the
left input, cuBLAS's B), ``"in1"`` (the right one, cuBLAS's A) and ``"out0"``, byte offsets from
each buffer's element 0; the launcher resolves them to addresses (``backend.gemm_addresses``)
and calls ``backend.gemm(g, a, b, c)``.

Dtypes: float16, float32, float64 (``backend.GEMM_DTYPES``; cuBLAS has no integer GEMM for these
types): other dtypes raise ``NotImplementedError`` naming the op.  float16 accumulates in
float32 (``CUBLAS_COMPUTE_32F``) whatever ``compute_mode`` says; float32 runs without TF32 unless
the backend was asked to allow it.  ``K == 0`` is a zero fill (no GEMM); an empty output, nothing.
"""
import itertools
from typing import NamedTuple

import numpy as np

from ....ops.matmul import BatchedMatrixMul, MatrixMul
from ..backend import GEMM_DTYPES, gemm_addresses
from ..kernels.elemwise import simplify_layout
from ..kernels.launch import Buf, Gemm
from . import def_launcher

__all__ = ["MatmulPlan", "plan_matmul", "operand_layout", "NeedsDense",
           "DIFFERENCES"]

#: Where the products may differ from the CPU device's.
DIFFERENCES = """\
* cuBLAS sums the K products in its own order and blocking (a GPU's float32 GEMM is not numpy's
  OpenBLAS): float32 results differ in the last bits, within K * eps * sum|a*b|.
* float16 accumulates in float32 and rounds once (cuBLAS's CUBLAS_COMPUTE_32F); numpy's float16
  matmul rounds differently, so results may differ by an ulp of float16.
* Integer matrix products have no CUDA kernel (NotImplementedError); the CPU computes them.
"""

_INT_MAX = 2 ** 31 - 1


class MatmulPlan(NamedTuple):
    """``out_shape`` and the ``calls`` (``launch.Gemm``s) that compute it (none when the output
    is empty or K is 0: then ``zero_fill`` says whether the output must be zeroed)."""

    out_shape: tuple
    calls: tuple
    zero_fill: bool


class NeedsDense(ValueError):
    """``plan_matmul``: cuBLAS cannot read the operands at ``which`` (0: left, 1: right) as they
    lie; make them dense and plan again."""

    def __init__(self, which):
        super().__init__(f"operands {which} need a dense copy")
        self.which = which


def operand_layout(rows, cols, row_stride, col_stride):
    """How cuBLAS reads the row-major ``rows`` x ``cols`` matrix ``L`` with these element strides
    as ``op(X) = L^T`` (a cols x rows matrix): ``("N", ld)`` when its rows are dense (memory is
    ``L^T`` column-major), ``("T", ld)`` when its columns are (memory is ``L`` column-major), or
    ``None`` when neither (then it must be made dense).  ``ld`` satisfies cuBLAS's rule
    ``ld >= max(1, rows of the stored matrix)``; the stride of a size-1 dim does not matter."""
    if (cols == 1 or col_stride == 1) and (rows == 1 or row_stride >= max(1, cols)):
        return "N", (row_stride if rows > 1 else max(1, cols))
    if (rows == 1 or row_stride == 1) and (cols == 1 or col_stride >= max(1, rows)):
        return "T", (col_stride if cols > 1 else max(1, rows))
    return None


def _dense_strides(shape):
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


def _matrix(shape, strides, transpose, left):
    """(rows, cols, row stride, col stride, batch shape, batch strides) of an operand."""
    if len(shape) == 1:  # a vector: a row on the left, a column on the right
        if left:
            return 1, shape[0], 0, strides[0], (), ()
        return shape[0], 1, strides[0], 0, (), ()
    rows, cols = shape[-2:]
    rs, cs = strides[-2:]
    if transpose:
        rows, cols, rs, cs = cols, rows, cs, rs
    return rows, cols, rs, cs, tuple(shape[:-2]), tuple(strides[:-2])


def _batch_strides(shape, strides, batch):
    pad = len(batch) - len(shape)
    out = [0] * pad
    for n, s in zip(shape, strides):
        out.append(0 if n == 1 else s)
    return tuple(out)


def plan_matmul(a_shape, a_strides, b_shape, b_strides, transpose_a=False, transpose_b=False,
                dtype="float32"):
    """The GEMMs of ``matmul(A', B')`` for a left input of ``a_shape``/``a_strides`` and a right
    one of ``b_shape``/``b_strides`` (strides in elements; the output dense), both of ``dtype``
    (the output's too), numpy's ``matmul`` semantics (batch dims broadcast; 1-D operands are
    vectors and take no transpose).  A ``MatmulPlan`` of ``launch.Gemm``s on ``"in0"`` (the left
    input), ``"in1"`` and ``"out0"``; ``NeedsDense`` when an operand cannot be read as it lies;
    ``ValueError`` for shapes that do not multiply."""
    dtype = np.dtype(dtype)
    isz = dtype.itemsize
    compute = np.dtype(np.float64) if dtype == np.float64 else np.dtype(np.float32)
    ta = transpose_a and len(a_shape) >= 2
    tb = transpose_b and len(b_shape) >= 2
    M, K, ars, acs, abatch, abst = _matrix(a_shape, a_strides, ta, True)
    K2, N, brs, bcs, bbatch, bbst = _matrix(b_shape, b_strides, tb, False)
    if K != K2:
        raise ValueError(f"matmul: inner dimensions do not match ({K} != {K2})")
    batch = tuple(np.broadcast_shapes(abatch, bbatch))
    out_shape = batch + ((M,) if len(a_shape) >= 2 else ()) + ((N,) if len(b_shape) >= 2 else ())
    if 0 in batch or M == 0 or N == 0:
        return MatmulPlan(out_shape, (), False)
    if K == 0:
        return MatmulPlan(out_shape, (), True)
    # cuBLAS's A is our right operand B' (K x N), its B our left A' (M x K)
    lay_a = operand_layout(K, N, brs, bcs)
    lay_b = operand_layout(M, K, ars, acs)
    abst, bbst = _batch_strides(abatch, abst, batch), _batch_strides(bbatch, bbst, batch)
    need = [w for w, lay, bst in ((0, lay_b, abst), (1, lay_a, bbst))
            if lay is None or any(s < 0 for s in bst)]
    if need:
        raise NeedsDense(need)
    if max(M, N, K, lay_a[1], lay_b[1]) > _INT_MAX:
        raise NotImplementedError(f"matmul: a dimension or leading dimension above 2**31 - 1 "
                                  f"(M={M}, N={N}, K={K}): cuBLAS takes 32-bit ones")
    cst = tuple(s * M * N for s in _dense_strides(batch))
    bshape, (cst, ast, bst) = simplify_layout(batch, [cst, bbst, abst])
    if bshape:
        count, sc, sa, sb = bshape[-1], cst[-1], ast[-1], bst[-1]
        outer = bshape[:-1]
    else:
        count, sc, sa, sb, outer = 1, M * N, 0, 0, ()
    calls = []
    for idx in itertools.product(*(range(n) for n in outer)):
        calls.append(Gemm(
            lay_a[0] == "T", lay_b[0] == "T", N, M, K,
            Buf("in1", isz * sum(i * s for i, s in zip(idx, ast))), lay_a[1], sa,
            Buf("in0", isz * sum(i * s for i, s in zip(idx, bst))), lay_b[1], sb,
            Buf("out0", isz * sum(i * s for i, s in zip(idx, cst))), N, sc, count,
            dtype, dtype, dtype, compute))
    return MatmulPlan(out_shape, tuple(calls), False)


@def_launcher(MatrixMul, strided=True)
@def_launcher(BatchedMatrixMul, strided=True)
def _matmul(device, op, inputs, descs):
    a, b = inputs
    dtype = descs[0].dtype
    if a.dtype != dtype or b.dtype != dtype or dtype not in GEMM_DTYPES:
        raise NotImplementedError(
            f"{op.name} has no CUDA kernel yet for {a.dtype} {a.shape} x {b.dtype} {b.shape} "
            f"-> {dtype} (device {device.name}; cuBLAS GEMM takes "
            f"{', '.join(str(d) for d in GEMM_DTYPES)})")
    try:
        plan = plan_matmul(a.shape, a.strides, b.shape, b.strides, op.transposeA, op.transposeB,
                           dtype)
    except NeedsDense as e:
        if 0 in e.which:
            a = device.relayout(a)
        if 1 in e.which:
            b = device.relayout(b)
        plan = plan_matmul(a.shape, a.strides, b.shape, b.strides, op.transposeA, op.transposeB,
                           dtype)
    out = device.empty(plan.out_shape, dtype, f"the output of {op.name} ({dtype} "
                       f"{plan.out_shape})")
    if plan.zero_fill:
        device.backend.memset(out.address, 0, out.size * dtype.itemsize)
    bases = {"in0": a.address, "in1": b.address, "out0": out.address}
    for g in plan.calls:
        device.backend.gemm(g, *gemm_addresses(g, bases))
    return (out,)
