"""CPU kernels of the matrix products and linear algebra (``MatrixMul``, ``BatchedMatrixMul``,
``Dot``, ``MatInv``, ``SVD``).

2-D float32/float64 products run in the CBLAS GEMM of ``handoff.CPU`` without the GIL (the worker
thread runs large ones beside the caller's Python); the rest is numpy.
"""
import numpy as np

from .... import _accel
from ....ops.matmul import (
    SVD, BatchedMatrixMul, Dot, MatInv, MatrixMul, float_dtype, product_dtype,
)
from ..table import def_kernel

_CPU = _accel.load("mge._core.device.cpu.handoff").CPU  # float32/64 GEMMs without the GIL
_float32 = np.dtype("float32")
_float16 = np.dtype("float16")


def _matmul_kernel(op, a, b):
    if a.ndim == 2 and b.ndim == 2:
        out = _CPU.gemm(a, b, op.transposeA, op.transposeB)  # BLAS without the GIL
        if out is not None:
            return (out,)
    if op.transposeA and a.ndim >= 2:
        a = np.swapaxes(a, -1, -2)
    if op.transposeB and b.ndim >= 2:
        b = np.swapaxes(b, -1, -2)
    dtype = product_dtype(a.dtype, a.dtype, b.dtype)
    if op.compute_mode == "float32" and dtype == _float16:
        return (np.matmul(a.astype(_float32), b.astype(_float32)).astype(dtype),)
    if dtype != a.dtype:  # narrow integers accumulate in int32
        a, b = a.astype(dtype), b.astype(dtype)
    out = np.asarray(np.matmul(a, b), dtype=dtype)
    # (a quantized product's dtype carries its scale as metadata, which asarray may drop)
    return (out.view(dtype) if dtype.metadata and out.dtype.metadata != dtype.metadata else out,)


def_kernel(MatrixMul)(_matmul_kernel)
def_kernel(BatchedMatrixMul)(_matmul_kernel)


@def_kernel(Dot)
def _cpu_dot(op, a, b):
    dtype = product_dtype(a.dtype)
    return (np.asarray(np.dot(a.reshape(-1).astype(dtype), b.reshape(-1).astype(dtype)), dtype=dtype),)


def _work(x, dtype):
    # LAPACK has no float16 and no integer routines: those are computed in float32.
    return x.astype(np.float32) if x.dtype == _float16 or dtype != x.dtype else x


@def_kernel(MatInv)
def _cpu_matinv(op, x):
    dtype = float_dtype(x.dtype)
    try:
        r = np.linalg.inv(_work(x, dtype))
    except np.linalg.LinAlgError as e:
        raise ValueError(f"MatInv: matrix is singular (input shape {x.shape}): {e}") from None
    return (r.astype(dtype, copy=False),)


@def_kernel(SVD)
def _cpu_svd(op, x):
    dtype = float_dtype(x.dtype)
    try:
        out = np.linalg.svd(_work(x, dtype), full_matrices=op.full_matrices,
                            compute_uv=op.compute_uv)
    except np.linalg.LinAlgError as e:
        raise ValueError(f"SVD: did not converge (input shape {x.shape}): {e}") from None
    if not op.compute_uv:
        return (out.astype(dtype, copy=False),)
    return tuple(o.astype(dtype, copy=False) for o in out)
