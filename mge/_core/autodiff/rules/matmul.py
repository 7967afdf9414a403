"""Backward rules of the matrix products and linear algebra.

A product's gradients are one product each (``_MM_GRADS``); ``MatInv`` and ``SVD`` compute theirs
with products and elementwise ops of the factors.
"""
from ...ops.creation import Eye
from ...ops.indexing import Subtensor
from ...ops.matmul import SVD, BatchedMatrixMul, Dot, MatInv, MatrixMul
from ...ops.shape import Dimshuffle
from ..gradutil import ew, fit, output, reshape, run, runs
from ..registry import def_backward

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
            product = cls.get(ta, tb, op.compute_mode)
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
        mm = MatrixMul.get(True, False, op.compute_mode)
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
    left = run(BatchedMatrixMul.get(True, False, "default"), y, ew("neg", g))
    return [fit(run(BatchedMatrixMul.get(False, True, "default"), left, y), x)]


def _mm(a, b, ta=False, tb=False):
    # op(a) @ op(b): the 2-D product for matrices, the batched one for stacks of them
    cls = MatrixMul if len(a.shape) == 2 and len(b.shape) == 2 else BatchedMatrixMul
    return run(cls.get(ta, tb, "default"), a, b)


def _mT(x):
    # x with its last two axes exchanged
    n = len(x.shape)
    return run(Dimshuffle.get(tuple(range(n - 2)) + (n - 1, n - 2)), x)


def _row(v):
    # (..., k) -> (..., 1, k): v along the rows of a matrix
    shape = tuple(v.shape)
    return reshape(v, shape[:-1] + (1,) + shape[-1:])


def _col(v):
    # (..., k) -> (..., k, 1): v along the columns of a matrix
    return reshape(v, tuple(v.shape) + (1,))


_ALL = ("slice", None, None, None)  # a whole axis, in Subtensor items


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
    m, n = x.shape[-2:]
    k = min(m, n)
    if op.compute_uv:
        u, s, vh = runs(op, x) if any(o is None for o in outputs) else outputs
        gu, gs, gvh = grads
    else:
        u, s, vh = runs(SVD.get(False, True), x)
        gu, gs, gvh = None, grads[0], None
    if op.full_matrices and m != n:
        if gu is not None or gvh is not None:
            raise NotImplementedError(
                f"SVD: gradient of U or Vh with full_matrices=True needs a square input, got shape "
                f"{tuple(x.shape)}; use full_matrices=False")
        first_k = ("slice", None, k, None)
        u = run(Subtensor.get((("ell",), first_k)), u)               # u[..., :k]
        vh = run(Subtensor.get((("ell",), first_k, _ALL)), vh)       # vh[..., :k, :]
    eye = run(Eye.get(k, k, 0, x.dtype, x.device))
    ret = None if gs is None else ew("mul", _col(gs), eye)  # diag(gS)
    if gu is not None or gvh is not None:
        s2 = ew("mul", s, s)
        # e[j, i] = s_i^2 - s_j^2 off the diagonal, 1 on it (the skew parts vanish there)
        e = ew("add", ew("sub", _row(s2), _col(s2)), eye)
        row, col = _row(s), _col(s)
        if gu is not None:
            j = _mm(u, gu, ta=True)
            skew_u = ew("true_div", ew("sub", j, _mT(j)), e)
        if gvh is not None:
            kk = _mm(vh, gvh, tb=True)
            skew_v = ew("true_div", ew("sub", kk, _mT(kk)), e)
        if gu is not None and gvh is not None:
            inner = ew("add", ew("mul", skew_u, row), ew("mul", col, skew_v))
        elif gu is not None:
            inner = ew("mul", skew_u, row)
        else:
            inner = ew("mul", col, skew_v)
        ret = inner if ret is None else ew("add", ret, inner)
    if gu is not None and m > k:
        gu_s = ew("true_div", gu, row)
        ga = _mm(ew("sub", ew("add", _mm(u, ret), gu_s), _mm(u, _mm(u, gu_s, ta=True))), vh)
    elif gvh is not None and n > k:
        gvh_s = ew("true_div", gvh, col)
        ga = _mm(u, ew("sub", ew("add", _mm(ret, vh), gvh_s), _mm(_mm(gvh_s, vh, tb=True), vh)))
    else:
        ga = _mm(u, _mm(ret, vh))
    return [fit(ga, x)]
