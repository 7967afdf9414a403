"""Matrix products and linear algebra: ``MatrixMul``, ``BatchedMatrixMul``, ``Dot``, ``MatInv``, ``SVD``.

* ``MatrixMul(transposeA, transposeB, compute_mode)``: 2-D x 2-D.
* ``BatchedMatrixMul(transposeA, transposeB, compute_mode)``: ``numpy.matmul`` semantics -- leading
  (batch) dimensions broadcast, a 1-D operand is a vector (a row on the left, a column on the
  right; the transpose flags only apply to operands with at least 2 dimensions).
* ``Dot``: inner product of two vectors (0-d result).
* ``MatInv``: inverse of square matrices, batched over leading dimensions.
* ``SVD(full_matrices, compute_uv)``: outputs ``(U, S, Vh)``, or ``(S,)`` without ``compute_uv``.

Inputs of a product have one dtype (the dtype_promote plugin casts mixed inputs first).
``compute_mode="float32"`` accumulates float16 products in float32 (the result stays float16).

Backward rules are at the end; a product's gradients are one product each (``_MM_GRADS``).
"""
import numpy as np

from .._accel import load
from .base import OpDef, TensorDesc, def_backward, def_infer, def_kernel, def_on_worker, op_error
from .gradutil import cached_op, ew, fit, output, reshape, run, runs

__all__ = ["MatrixMul", "BatchedMatrixMul", "Dot", "MatInv", "SVD"]

_CPU = load("mge._core.device.cpu.handoff").CPU  # float32/64 GEMMs without the GIL
_float32 = np.dtype("float32")
_float16 = np.dtype("float16")
_COMPUTE_MODES = ("default", "float32")


class MatrixMul(OpDef):
    """``A @ B`` for 2-D ``A`` and ``B`` (each transposed first when its flag is set)."""

    _fields = ("transposeA", "transposeB", "compute_mode")
    _defaults = {"transposeA": False, "transposeB": False, "compute_mode": "default"}

    def __init__(self, transposeA=False, transposeB=False, compute_mode="default"):
        _check_mode(type(self).__name__, compute_mode)
        super().__init__(bool(transposeA), bool(transposeB), compute_mode)


class BatchedMatrixMul(MatrixMul):
    """``numpy.matmul`` of the (optionally transposed) inputs, with broadcast batch dimensions."""


class Dot(OpDef):
    """Inner product of two vectors of equal length (a 0-d input counts as one element)."""


class MatInv(OpDef):
    """Inverse of each square matrix in the last two dimensions."""


class SVD(OpDef):
    """Singular value decomposition of each matrix in the last two dimensions."""

    _fields = ("full_matrices", "compute_uv")
    _defaults = {"full_matrices": False, "compute_uv": True}


def _check_mode(name, mode):
    if mode not in _COMPUTE_MODES:
        raise ValueError(f"{name}: compute_mode must be one of {_COMPUTE_MODES}, got {mode!r}")


def _two_inputs(op, descs):
    if len(descs) != 2:
        raise op_error(TypeError, op, f"expects 2 inputs, got {len(descs)}", descs)
    a, b = descs
    if a[1].kind == "b" or b[1].kind == "b":
        raise op_error(TypeError, op, "bool inputs are not supported", descs)
    dtype = a[1] if a[1] == b[1] else np.promote_types(a[1], b[1])
    return a, b, dtype


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


def _matmul_kernel(op, a, b):
    if a.ndim == 2 and b.ndim == 2:
        out = _CPU.gemm(a, b, op.transposeA, op.transposeB)  # BLAS without the GIL
        if out is not None:
            return (out,)
    if op.transposeA and a.ndim >= 2:
        a = np.swapaxes(a, -1, -2)
    if op.transposeB and b.ndim >= 2:
        b = np.swapaxes(b, -1, -2)
    dtype = a.dtype
    if op.compute_mode == "float32" and dtype == _float16:
        return (np.matmul(a.astype(_float32), b.astype(_float32)).astype(dtype),)
    return (np.asarray(np.matmul(a, b), dtype=dtype),)


def_kernel(MatrixMul)(_matmul_kernel)
def_kernel(BatchedMatrixMul)(_matmul_kernel)

MIN_WORKER_WORK = 1 << 18  # multiply-adds: a product this large runs on the worker thread


def _long_product(op, inputs, outputs):
    # m * n * k of the product (unknown shapes: assume long)
    out, a = outputs[0].shape, inputs[0].shape
    if out is None or a is None or not a:
        return True
    k = a[-2] if op.transposeA and len(a) >= 2 else a[-1]
    n = k
    for s in out:
        n *= s
    return n >= MIN_WORKER_WORK


def_on_worker(MatrixMul, _long_product)
def_on_worker(BatchedMatrixMul, _long_product)


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


@def_kernel(Dot)
def _cpu_dot(op, a, b):
    return (np.asarray(np.dot(a.reshape(-1), b.reshape(-1)), dtype=a.dtype),)


def _float_dtype(dtype):
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
    return [TensorDesc(d[0], _float_dtype(d[1]))]


@def_kernel(MatInv)
def _cpu_matinv(op, x):
    dtype = _float_dtype(x.dtype)
    work = x.astype(np.float32) if x.dtype == _float16 or dtype != x.dtype else x
    try:
        r = np.linalg.inv(work)
    except np.linalg.LinAlgError as e:
        raise ValueError(f"MatInv: matrix is singular (input shape {x.shape}): {e}") from None
    return (r.astype(dtype, copy=False),)


@def_infer(SVD)
def _infer_svd(op, descs):
    d = _square_matrices(op, descs, square=False)
    dtype = _float_dtype(d[1])
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


@def_kernel(SVD)
def _cpu_svd(op, x):
    dtype = _float_dtype(x.dtype)
    work = x.astype(np.float32) if x.dtype == _float16 or dtype != x.dtype else x
    try:
        out = np.linalg.svd(work, full_matrices=op.full_matrices, compute_uv=op.compute_uv)
    except np.linalg.LinAlgError as e:
        raise ValueError(f"SVD: did not converge (input shape {x.shape}): {e}") from None
    if not op.compute_uv:
        return (out.astype(dtype, copy=False),)
    return tuple(o.astype(dtype, copy=False) for o in out)


# -- backward rules ------------------------------------------------------------------------------
# (transposeA, transposeB) -> how to get (dA, dB) from C = op(A) @ op(B) and its gradient G:
# (left operand, right operand, transposeA, transposeB) of one more product each.
_MM_GRADS = {
    (False, False): (("g", "b", False, True), ("a", "g", True, False)),    # G B^T, A^T G
    (True, False): (("b", "g", False, True), ("a", "g", False, False)),    # B G^T, A G
    (False, True): (("g", "b", False, False), ("g", "a", True, False)),    # G B, G^T A
    (True, True): (("b", "g", True, True), ("g", "a", True, True)),        # B^T G^T, G^T A^T
}


def _products(cls, op, a, b, g, flags, needs, inputs):
    operands = {"a": a, "b": b, "g": g}
    out = []
    for i, (left, right, ta, tb) in enumerate(_MM_GRADS[flags]):
        if needs[i] and inputs[i].dtype.kind == "f":
            product = cached_op(cls, ta, tb, op.compute_mode)
            out.append(run(product, operands[left], operands[right]))
        else:
            out.append(None)
    return out


@def_backward(MatrixMul)
def _matmul_backward(op, inputs, outputs, grads, needs):
    g = grads[0]
    if g is None:
        return [None, None]
    a, b = inputs
    out = _products(MatrixMul, op, a, b, g, (op.transposeA, op.transposeB), needs, inputs)
    return [None if r is None else fit(r, x) for r, x in zip(out, inputs)]


@def_backward(BatchedMatrixMul)
def _batched_backward(op, inputs, outputs, grads, needs):
    # A 1-D operand is a matrix of one row (left) or one column (right) whose axis is missing from
    # the output; put it back, take the matrix gradients, sum the broadcast batch axes away.
    g = grads[0]
    if g is None:
        return [None, None]
    a, b = inputs
    sa, sb = a.shape, b.shape
    ta, tb = op.transposeA, op.transposeB
    gshape = list(g.shape)
    if len(sb) == 1:
        b = reshape(b, (sb[0], 1))
        tb = False
        gshape.append(1)
    if len(sa) == 1:
        a = reshape(a, (1, sa[0]))
        ta = False
        gshape.insert(len(gshape) - 1, 1)
    g = reshape(g, gshape)
    flat_b = None
    if needs[1] and len(sb) == 2 and len(sa) > 2 and not ta and b.dtype.kind == "f":
        # A batch of inputs times one matrix (a linear layer on a 3-D input): fold the batch into
        # the rows, one 2-D product instead of a batched product and a sum over the batch.
        a2, g2 = reshape(a, (-1, sa[-1])), reshape(g, (-1, gshape[-1]))
        mm = cached_op(MatrixMul, True, False, op.compute_mode)
        flat_b = run(mm, g2, a2) if tb else run(mm, a2, g2)   # G^T A or A^T G
        needs = (needs[0], False)
    out = _products(BatchedMatrixMul, op, a, b, g, (ta, tb), needs, inputs)
    result = []
    for r, x, x2 in zip(out, inputs, (a, b)):
        if r is not None:
            r = fit(r, x2)
            if x2 is not x:
                r = reshape(r, x.shape)
        result.append(r)
    if flat_b is not None:
        result[1] = fit(flat_b, inputs[1])
    return result


@def_backward(Dot)
def _dot_backward(op, inputs, outputs, grads, needs):
    g = grads[0]
    a, b = inputs
    if g is None:
        return [None, None]
    return [fit(ew("mul", g, b), a) if needs[0] and a.dtype.kind == "f" else None,
            fit(ew("mul", g, a), b) if needs[1] and b.dtype.kind == "f" else None]


@def_backward(MatInv, keeps_outputs=True)
def _matinv_backward(op, inputs, outputs, grads, needs):
    # d(X^-1) = -X^-1 dX X^-1, so dX = -Y^T G Y^T with Y = X^-1.
    x, g = inputs[0], grads[0]
    if g is None or not needs[0] or x.dtype.kind != "f":
        return [None]
    y = output(op, inputs, outputs)
    left = run(cached_op(BatchedMatrixMul, True, False, "default"), y, ew("neg", g))
    return [fit(run(cached_op(BatchedMatrixMul, False, True, "default"), left, y), x)]


def _swap(x):
    return _F().swapaxes(x, -1, -2)


def _F():
    import mge.functional as F
    return F


@def_backward(SVD)
def _svd_backward(op, inputs, outputs, grads, needs):
    """Gradient of the reduced SVD (real case), as in PyTorch's ``svd_backward``.

    With ``compute_uv=False`` the factors are recomputed (MegEngine refuses this case).  With
    ``full_matrices=True`` a non-square input has extra singular vectors that are not functions of
    the input; only gradients of ``S`` are supported there.
    """
    x = inputs[0]
    if not needs[0] or x.dtype.kind != "f" or all(g is None for g in grads):
        return [None]
    F = _F()
    m, n = x.shape[-2:]
    k = min(m, n)
    if op.compute_uv:
        u, s, vh = runs(op, x) if any(o is None for o in outputs) else outputs
        gu, gs, gvh = grads
    else:
        u, s, vh = runs(cached_op(SVD, False, True), x)
        gu, gs, gvh = None, grads[0], None
    if op.full_matrices and m != n:
        if gu is not None or gvh is not None:
            raise NotImplementedError(
                f"SVD: gradient of U or Vh with full_matrices=True needs a square input, got shape "
                f"{tuple(x.shape)}; use full_matrices=False")
        u, vh = u[..., :k], vh[..., :k, :]
    eye = F.eye(k, dtype=x.dtype, device=x.device)
    ret = None if gs is None else F.expand_dims(gs, -1) * eye  # diag(gS)
    if gu is not None or gvh is not None:
        s2 = s * s
        # e[j, i] = s_i^2 - s_j^2 off the diagonal, 1 on it (the skew parts vanish there)
        e = F.expand_dims(s2, -2) - F.expand_dims(s2, -1) + eye
        row, col = F.expand_dims(s, -2), F.expand_dims(s, -1)
        if gu is not None:
            j = F.matmul(_swap(u), gu)
            skew_u = (j - _swap(j)) / e
        if gvh is not None:
            kk = F.matmul(vh, _swap(gvh))
            skew_v = (kk - _swap(kk)) / e
        if gu is not None and gvh is not None:
            inner = skew_u * row + col * skew_v
        elif gu is not None:
            inner = skew_u * row
        else:
            inner = col * skew_v
        ret = inner if ret is None else ret + inner
    if gu is not None and m > k:
        gu_s = gu / F.expand_dims(s, -2)
        ga = F.matmul(F.matmul(u, ret) + gu_s - F.matmul(u, F.matmul(_swap(u), gu_s)), vh)
    elif gvh is not None and n > k:
        gvh_s = gvh / F.expand_dims(s, -1)
        ga = F.matmul(u, F.matmul(ret, vh) + gvh_s - F.matmul(F.matmul(gvh_s, _swap(vh)), vh))
    else:
        ga = F.matmul(u, F.matmul(ret, vh))
    return [fit(ga, x)]
