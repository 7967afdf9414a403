"""Matrix products and linear algebra: ``MatrixMul``, ``BatchedMatrixMul``, ``Dot``, ``MatInv``,
``SVD``, and their shape/dtype rules.

* ``MatrixMul(transposeA, transposeB, compute_mode)``: 2-D x 2-D.
* ``BatchedMatrixMul(transposeA, transposeB, compute_mode)``: ``numpy.matmul`` semantics -- leading
  (batch) dimensions broadcast, a 1-D operand is a vector (a row on the left, a column on the
  right; the transpose flags only apply to operands with at least 2 dimensions).
* ``Dot``: inner product of two vectors (0-d result).
* ``MatInv``: inverse of square matrices, batched over leading dimensions.
* ``SVD(full_matrices, compute_uv)``: outputs ``(U, S, Vh)``, or ``(S,)`` without ``compute_uv``.

Inputs of a product have one dtype (the dtype_promote plugin casts mixed inputs first).
``compute_mode="float32"`` accumulates float16 products in float32 (the result stays float16).
The matrix products are long-running when large (``long_product``): the worker thread runs them
beside the caller's Python.  Kernels: ``device/cpu/kernels/matmul.py``; backward rules:
``autodiff/rules/matmul.py``.
"""
import numpy as np

from ..dtype import common_dtype
from .base import OpDef, TensorDesc, def_infer, op_error

__all__ = ["MatrixMul", "BatchedMatrixMul", "Dot", "MatInv", "SVD"]

_float32 = np.dtype("float32")
_int32 = np.dtype("int32")
_COMPUTE_MODES = ("default", "float32")
MIN_WORKER_WORK = 1 << 18  # multiply-adds: a product this large runs on the worker thread


def long_product(op, inputs, outputs):
    """Whether a matrix product is long: ``m * n * k`` of at least ``MIN_WORKER_WORK``
    (unknown shapes count as long)."""
    out, a = outputs[0].shape, inputs[0].shape
    if out is None or a is None or not a:
        return True
    k = a[-2] if op.transposeA and len(a) >= 2 else a[-1]
    n = k
    for s in out:
        n *= s
    return n >= MIN_WORKER_WORK


class MatrixMul(OpDef):
    """``A @ B`` for 2-D ``A`` and ``B`` (each transposed first when its flag is set)."""

    _fields = ("transposeA", "transposeB", "compute_mode")
    _defaults = {"transposeA": False, "transposeB": False, "compute_mode": "default"}
    # a plain function of (op, inputs, outputs), not a method
    long_running = staticmethod(long_product)

    def __init__(self, transposeA=False, transposeB=False, compute_mode="default"):
        _check_mode(type(self).__name__, compute_mode)
        super().__init__(bool(transposeA), bool(transposeB), compute_mode)


class BatchedMatrixMul(MatrixMul):
    """``numpy.matmul`` of the (optionally transposed) inputs, with broadcast batch dimensions."""

    long_running = staticmethod(long_product)


class Dot(OpDef):
    """Inner product of two vectors of equal length (a 0-d input counts as one element)."""

    long_running = False


class MatInv(OpDef):
    """Inverse of each square matrix in the last two dimensions."""

    long_running = False


class SVD(OpDef):
    """Singular value decomposition of each matrix in the last two dimensions."""

    _fields = ("full_matrices", "compute_uv")
    _defaults = {"full_matrices": False, "compute_uv": True}
    long_running = False


def _check_mode(name, mode):
    if mode not in _COMPUTE_MODES:
        raise ValueError(f"{name}: compute_mode must be one of {_COMPUTE_MODES}, got {mode!r}")


def _two_inputs(op, descs):
    if len(descs) != 2:
        raise op_error(TypeError, op, f"expects 2 inputs, got {len(descs)}", descs)
    a, b = descs
    if a[1].kind == "b" or b[1].kind == "b":
        raise op_error(TypeError, op, "bool inputs are not supported", descs)
    dtype = a[1] if a[1] == b[1] else common_dtype([a[1], b[1]])
    return a, b, product_dtype(dtype, a[1], b[1])


def product_dtype(dtype, a=None, b=None):
    """The dtype of a product of two ``dtype`` matrices: integers narrower than 32 bits
    accumulate and answer in int32 (MegEngine: int8 by int8 is int32).  Two quantized int8
    inputs ``a``, ``b`` (dtype metadata ``QuantizedS8``) answer in MegEngine's ``QuantizedS32``
    with the product of their scales."""
    if a is not None and b is not None:
        qa, qb = _qs8_scale(a), _qs8_scale(b)
        if qa is not None and qb is not None:
            return np.dtype("int32", metadata={"mgb_dtype": {
                "name": "QuantizedS32", "scale": float(np.float32(qa) * np.float32(qb))}})
    if dtype.kind in "iu" and dtype.itemsize < 4:
        return _int32
    return dtype


def _qs8_scale(dtype):
    meta = dtype.metadata.get("mgb_dtype") if dtype.metadata else None
    if meta is not None and meta.get("name") == "QuantizedS8":
        return meta["scale"]
    return None


@def_infer(MatrixMul)
def _infer_matmul(op, descs):
    a, b, dtype = _two_inputs(op, descs)
    if a[0] is None or b[0] is None:
        return [TensorDesc(None, dtype)]
    if len(a[0]) != 2 or len(b[0]) != 2:
        raise op_error(ValueError, op, "expects two 2-D inputs", descs)
    m, k = a[0][::-1] if op.transposeA else a[0]
    k2, n = b[0][::-1] if op.transposeB else b[0]
    if k != k2:
        raise op_error(ValueError, op, f"inner dimensions do not match ({k} != {k2}; "
                       f"transposeA={op.transposeA}, transposeB={op.transposeB})", descs)
    return [TensorDesc((m, n), dtype)]


@def_infer(BatchedMatrixMul)
def _infer_batched(op, descs):
    a, b, dtype = _two_inputs(op, descs)
    if a[0] is None or b[0] is None:
        return [TensorDesc(None, dtype)]
    sa, sb = a[0], b[0]
    if not sa or not sb:
        raise op_error(ValueError, op, "0-d inputs are not matrices", descs)
    if len(sa) >= 2 and op.transposeA:
        sa = sa[:-2] + (sa[-1], sa[-2])
    if len(sb) >= 2 and op.transposeB:
        sb = sb[:-2] + (sb[-1], sb[-2])
    k = sa[-1]
    k2 = sb[-2] if len(sb) >= 2 else sb[0]
    if k != k2:
        raise op_error(ValueError, op, f"inner dimensions do not match ({k} != {k2}; "
                       f"transposeA={op.transposeA}, transposeB={op.transposeB})", descs)
    try:
        batch = tuple(np.broadcast_shapes(sa[:-2], sb[:-2]))
    except ValueError:
        raise op_error(ValueError, op, f"batch dimensions {sa[:-2]} and {sb[:-2]} cannot be "
                       "broadcast together", descs) from None
    shape = batch + (sa[-2:-1] if len(sa) >= 2 else ()) + (sb[-1:] if len(sb) >= 2 else ())
    return [TensorDesc(shape, dtype)]


@def_infer(Dot)
def _infer_dot(op, descs):
    a, b, dtype = _two_inputs(op, descs)
    if a[0] is None or b[0] is None:
        return [TensorDesc((), dtype)]
    if len(a[0]) > 1 or len(b[0]) > 1:
        raise op_error(ValueError, op, "expects 1-D (or 0-d) inputs", descs)
    na = a[0][0] if a[0] else 1
    nb = b[0][0] if b[0] else 1
    if na != nb:
        raise op_error(ValueError, op, f"vector lengths differ ({na} != {nb})", descs)
    return [TensorDesc((), dtype)]


def float_dtype(dtype):
    """The dtype ``MatInv`` and ``SVD`` answer in: the input's if it is a float, else float32."""
    return dtype if dtype.kind == "f" else _float32


def _square_matrices(op, descs, square=True):
    if len(descs) != 1:
        raise op_error(TypeError, op, f"expects 1 input, got {len(descs)}", descs)
    d = descs[0]
    if d[1].kind == "b":
        raise op_error(TypeError, op, "bool input is not supported", descs)
    if d[0] is not None:
        if len(d[0]) < 2:
            raise op_error(ValueError, op, "expects matrices (at least 2 dimensions)", descs)
        if square and d[0][-1] != d[0][-2]:
            raise op_error(ValueError, op, "expects square matrices in the last two dimensions", descs)
    return d


@def_infer(MatInv)
def _infer_matinv(op, descs):
    d = _square_matrices(op, descs)
    return [TensorDesc(d[0], float_dtype(d[1]))]


@def_infer(SVD)
def _infer_svd(op, descs):
    d = _square_matrices(op, descs, square=False)
    dtype = float_dtype(d[1])
    if d[0] is None:
        n_out = 3 if op.compute_uv else 1
        return [TensorDesc(None, dtype)] * n_out
    batch, (m, n) = d[0][:-2], d[0][-2:]
    k = min(m, n)
    s = TensorDesc(batch + (k,), dtype)
    if not op.compute_uv:
        return [s]
    if op.full_matrices:
        return [TensorDesc(batch + (m, m), dtype), s, TensorDesc(batch + (n, n), dtype)]
    return [TensorDesc(batch + (m, k), dtype), s, TensorDesc(batch + (k, n), dtype)]
