r"""``multi_head_attention`` (MegEngine 1.13's ``megengine.functional.nn.multi_head_attention``),
composed from mge ops (``matmul``, ``softmax``, ``dropout``, reshapes), so autodiff, tracing and
every device see it as ordinary ops.

The weights come in one tensor, ``io_weight_bias``, as in MegEngine: flattened, in the order query
weight ``(embed_dim, qproj_size)``, key weight ``(kdim, kproj_size)``, value weight
``(vdim, vproj_size)``, output weight ``(vproj_size or vdim * num_heads, oproj_size)``, then the
query, key, value and output biases; an item is there only when its size (and bias flag) says so.
Projections are ``Y = X @ W + B`` (not ``X @ W.T`` as in PyTorch).

Where MegEngine 1.13 (whose CPU kernel is a proxy of the cuDNN one) is weaker, mge does what its
documentation says: ``is_causal`` without a mask applies the causal mask (MegEngine's CPU kernel
fails), a boolean ``key_padding_mask`` masks (MegEngine ignores it), 2-D unbatched inputs work
(MegEngine raises ``IndexError``), and ``bias_k``/``bias_v``, ``add_zero_attn`` and ``reslink``
are implemented (MegEngine asserts they are off).  cuDNN-style masks
(``maybe_cudnn_style_mask=True``) raise ``NotImplementedError``.
"""
import numpy as np

from ..tensor import Tensor
from .math import matmul
from .tensor import broadcast_to, concat, expand_dims, full, where, zeros

__all__ = ["multi_head_attention"]

_NAME = "multi_head_attention"


def _error(msg):
    return ValueError(f"{_NAME}: {msg}")


def _shape_check(query, key, value, key_padding_mask, attn_mask, num_heads):
    """Whether the input is batched (3-D) or not (2-D); ValueError naming the shapes otherwise."""
    qd, kd, vd = query.ndim, key.ndim, value.ndim
    if qd == 3:
        if kd != 3 or vd != 3:
            raise _error(f"for batched (3-D) query, key and value must be 3-D, got {kd}-D and "
                         f"{vd}-D")
        n, lq, _ = query.shape
        if key.shape[0] != n or value.shape[0] != n:
            raise _error(f"the batch sizes of query {tuple(query.shape)}, key "
                         f"{tuple(key.shape)} and value {tuple(value.shape)} differ")
        if key.shape[1] != value.shape[1]:
            raise _error(f"the sequence lengths of key {tuple(key.shape)} and value "
                         f"{tuple(value.shape)} differ")
        s = key.shape[1]
        if key_padding_mask is not None and tuple(key_padding_mask.shape) != (n, s):
            raise _error(f"key_padding_mask has shape {tuple(key_padding_mask.shape)}, expected "
                         f"{(n, s)}")
        if attn_mask is not None:
            shape = tuple(attn_mask.shape)
            if shape not in ((lq, s), (n * num_heads, lq, s)):
                raise _error(f"attn_mask has shape {shape}, expected {(lq, s)} or "
                             f"{(n * num_heads, lq, s)}")
        return True
    if qd == 2:
        if kd != 2 or vd != 2:
            raise _error(f"for unbatched (2-D) query, key and value must be 2-D, got {kd}-D and "
                         f"{vd}-D")
        lq = query.shape[0]
        if key.shape[0] != value.shape[0]:
            raise _error(f"the sequence lengths of key {tuple(key.shape)} and value "
                         f"{tuple(value.shape)} differ")
        s = key.shape[0]
        if key_padding_mask is not None and tuple(key_padding_mask.shape) != (s,):
            raise _error(f"key_padding_mask has shape {tuple(key_padding_mask.shape)}, expected "
                         f"{(s,)}")
        if attn_mask is not None:
            shape = tuple(attn_mask.shape)
            if shape not in ((lq, s), (num_heads, lq, s)):
                raise _error(f"attn_mask has shape {shape}, expected {(lq, s)} or "
                             f"{(num_heads, lq, s)}")
        return False
    raise _error(f"query must be a 2-D (unbatched) or 3-D (batched) tensor, got {qd}-D "
                 f"{tuple(query.shape)}")


def _float_mask(mask, name, dtype):
    """A float mask as it is; a boolean one as ``-inf`` where True and 0 elsewhere."""
    if mask is None:
        return None
    kind = np.dtype(mask.dtype).kind
    if kind == "b":
        neg = full(tuple(mask.shape), float("-inf"), dtype=dtype, device=mask.device)
        return where(mask, neg, zeros(tuple(mask.shape), dtype=dtype, device=mask.device))
    if kind != "f":
        raise TypeError(f"{_NAME}: {name} must be bool or floating point, got {mask.dtype}")
    return mask.astype(dtype) if mask.dtype != dtype else mask


def _pad_last(x, value=0.0):
    """``x`` with one more column (``value``) on its last axis."""
    pad = full(tuple(x.shape[:-1]) + (1,), value, dtype=x.dtype, device=x.device)
    return concat([x, pad], axis=x.ndim - 1)


def _project(x, weight, bias):
    n, s, e = x.shape
    y = matmul(x.reshape(n * s, e), weight)
    if bias is not None:
        y = y + bias
    return y.reshape(n, s, weight.shape[1])


def _to_heads(x, heads):
    # (N, S, P) -> (N * heads, S, P / heads): head h of batch b at b * heads + h (MegEngine's order)
    n, s, p = x.shape
    if p % heads:
        raise _error(f"a projection of size {p} cannot be split into {heads} heads")
    return x.reshape(n, s, heads, p // heads).transpose((0, 2, 1, 3)).reshape(n * heads, s,
                                                                             p // heads)


def _repeat_heads(x, heads):
    # No projection: every head sees the whole input.
    n, s, e = x.shape
    return broadcast_to(expand_dims(x, 1), (n, heads, s, e)).reshape(n * heads, s, e)


def _merge_masks(attn_mask, key_padding_mask, is_causal, n, heads, lq, s, dtype, device):
    """One additive mask of shape ``(L, S)`` or ``(N * heads, L, S)``, or None (MegEngine's
    ``_merge_masks``: ``is_causal`` is a hint that applies only when no ``key_padding_mask`` is
    given, and is replaced by ``attn_mask`` when that is given)."""
    if key_padding_mask is None:
        if attn_mask is not None:
            return attn_mask
        if is_causal:
            causal = np.triu(np.full((lq, s), -np.inf, dtype=np.dtype(dtype)), 1)
            return Tensor(causal, dtype=dtype, device=device)
        return None
    kpm = key_padding_mask.reshape(n, 1, 1, s)
    if attn_mask is None:
        merged = broadcast_to(kpm, (n, heads, lq, s))
    elif attn_mask.ndim == 2:
        merged = broadcast_to(kpm + attn_mask.reshape(1, 1, lq, s), (n, heads, lq, s))
    else:
        merged = attn_mask.reshape(n, heads, lq, s) + kpm
    return merged.reshape(n * heads, lq, s)


def multi_head_attention(query, key, value, embed_dim, num_heads, attn_drop, out_drop,
                         io_weight_bias, qproj_size=None, kproj_size=None, vproj_size=None,
                         oproj_size=None, qbias=False, kbias=False, vbias=False, obias=False,
                         bias_k=None, bias_v=None, add_zero_attn=False, key_padding_mask=None,
                         attn_mask=None, need_weights=False, average_attn_weights=False,
                         is_causal=False, maybe_cudnn_style_mask=False, reslink=False,
                         training=True):
    r"""Multi-head attention (`Attention Is All You Need <https://arxiv.org/abs/1706.03762>`_).

    .. math::
        \text{MultiHeadAttn}(q, k, v) = \text{Concat}(h_0, ..., h_{H-1}) W_O + b_O,\quad
        h_i = \text{Softmax}\Big(\frac{(q W_{Q,i})(k W_{K,i})^T}{\sqrt{d}} + \text{mask}\Big)
        (v W_{V,i})

    with ``d = embed_dim // num_heads`` (``embed_dim`` when ``qproj_size`` is 0).

    Args:
        query: ``(N, L, embed_dim)``, or ``(L, embed_dim)`` unbatched.
        key: ``(N, S, kdim)`` (or ``(S, kdim)``).
        value: ``(N, S, vdim)`` (or ``(S, vdim)``).
        embed_dim: the total dimension of the model.
        num_heads: the number of parallel heads.
        attn_drop: dropout probability on the attention weights (in training).
        out_drop: dropout probability on the output (in training).
        io_weight_bias: all projection weights and biases in one tensor (see the module doc):
            query weight, key weight, value weight, output weight, query bias, key bias, value
            bias, output bias, each present as the sizes and flags below say.
        qproj_size, kproj_size, vproj_size, oproj_size: the sizes of the projections
            (``None``: ``embed_dim``; 0: no projection, no weight in ``io_weight_bias``).
        qbias, kbias, vbias, obias: whether ``io_weight_bias`` has that projection's bias.
        bias_k, bias_v: ``(1, 1, kproj_size)`` / ``(1, 1, vproj_size)`` rows appended to the
            projected keys and values along the sequence (both or neither).
        add_zero_attn: append a row of zeros to the keys and values of every head.
        key_padding_mask: ``(N, S)`` (``(S,)`` unbatched): True (bool) masks a key out; a float
            mask is added to the scores.
        attn_mask: ``(L, S)`` or ``(N * num_heads, L, S)``; bool (True masks) or float (added).
        need_weights: also return the attention weights (after dropout).
        average_attn_weights: average the returned weights over the heads.
        is_causal: a hint that the mask is causal: without any mask, the causal mask
            (``-inf`` above the diagonal) is applied; with ``attn_mask``, that mask is used.
        maybe_cudnn_style_mask: cuDNN-style ``(2, L)`` / ``(2, N)`` masks: ``NotImplementedError``.
        reslink: add ``query`` to the output (their shapes must match).
        training: apply the dropouts.

    Returns:
        ``(out, weights)``: ``out`` ``(N, L, oproj_size)`` (``(L, ...)`` unbatched);
        ``weights`` ``(N * num_heads, L, S)`` (``(N, L, S)`` averaged; ``(num_heads, L, S)`` /
        ``(L, S)`` unbatched) with ``need_weights``, else ``None``.

    Example:
        >>> import numpy as np, mge, mge.functional as F
        >>> E, H = 4, 2
        >>> x = mge.tensor(np.random.rand(2, 3, E).astype("float32"))
        >>> w = mge.tensor(np.random.rand(1, 4 * E * E).astype("float32"))
        >>> out, _ = F.nn.multi_head_attention(x, x, x, E, H, 0.0, 0.0, w)
        >>> out.shape
        (2, 3, 4)
    """
    qproj_size = embed_dim if qproj_size is None else qproj_size
    kproj_size = embed_dim if kproj_size is None else kproj_size
    vproj_size = embed_dim if vproj_size is None else vproj_size
    oproj_size = embed_dim if oproj_size is None else oproj_size
    for flag, size, what in ((qbias, qproj_size, "query"), (kbias, kproj_size, "key"),
                             (vbias, vproj_size, "value"), (obias, oproj_size, "output")):
        if flag and not size > 0:
            raise _error(f"when {what} projection bias is true, {what} projection weight must be "
                         f"given ({what[0] if what != 'output' else 'o'}proj_size > 0)")
    if maybe_cudnn_style_mask:
        raise NotImplementedError(
            f"{_NAME}: maybe_cudnn_style_mask=True (cuDNN-style (2, L)/(2, N) index masks) is not "
            "implemented in mge; give an (L, S) attn_mask and an (N, S) key_padding_mask instead")
    if (bias_k is None) != (bias_v is None):
        raise _error("bias_k and bias_v must be given together")
    if not 0 <= attn_drop < 1 or not 0 <= out_drop < 1:
        raise _error(f"attn_drop and out_drop must be in [0, 1), got {attn_drop} and {out_drop}")
    if num_heads < 1:
        raise _error(f"num_heads must be positive, got {num_heads}")

    batched = _shape_check(query, key, value, key_padding_mask, attn_mask, num_heads)
    if not batched:
        query, key, value = expand_dims(query, 0), expand_dims(key, 0), expand_dims(value, 0)
        if key_padding_mask is not None:
            key_padding_mask = expand_dims(key_padding_mask, 0)
    n, lq, e_q = query.shape
    s, e_k, e_v = key.shape[1], key.shape[2], value.shape[2]
    if e_q != embed_dim:
        raise _error(f"query has shape {tuple(query.shape)}, its last axis must be embed_dim="
                     f"{embed_dim}")
    dtype = query.dtype

    # Slice io_weight_bias (MegEngine's order and offsets).
    w_o_rows = vproj_size if vproj_size > 0 else e_v * num_heads
    parts = [("wq", qproj_size > 0, (embed_dim, qproj_size)),
             ("wk", kproj_size > 0, (e_k, kproj_size)),
             ("wv", vproj_size > 0, (e_v, vproj_size)),
             ("wo", oproj_size > 0, (w_o_rows, oproj_size)),
             ("bq", qbias and qproj_size > 0, (qproj_size,)),
             ("bk", kbias and kproj_size > 0, (kproj_size,)),
             ("bv", vbias and vproj_size > 0, (vproj_size,)),
             ("bo", obias and oproj_size > 0, (oproj_size,))]
    need = sum(int(np.prod(shape)) for _, present, shape in parts if present)
    if need and io_weight_bias is None:
        raise _error("io_weight_bias is None but the projections need weights")
    got = 0 if io_weight_bias is None else int(np.prod(io_weight_bias.shape))
    if got != need:
        shape = None if io_weight_bias is None else tuple(io_weight_bias.shape)
        raise _error(f"io_weight_bias has {got} elements (shape {shape}), "
                     f"the projections (qproj_size={qproj_size}, kproj_size={kproj_size}, "
                     f"vproj_size={vproj_size}, oproj_size={oproj_size}, kdim={e_k}, vdim={e_v}, "
                     f"biases q/k/v/o={qbias}/{kbias}/{vbias}/{obias}) need {need}")
    w = {}
    if need:
        flat = io_weight_bias.reshape(-1)
        offset = 0
        for name, present, shape in parts:
            if present:
                size = int(np.prod(shape))
                w[name] = flat[offset:offset + size].reshape(*shape)
                offset += size

    q = _project(query, w["wq"], w.get("bq")) if qproj_size > 0 else query
    k = _project(key, w["wk"], w.get("bk")) if kproj_size > 0 else key
    v = _project(value, w["wv"], w.get("bv")) if vproj_size > 0 else value

    key_padding_mask = _float_mask(key_padding_mask, "key_padding_mask", dtype)
    attn_mask = _float_mask(attn_mask, "attn_mask", dtype)

    if bias_k is not None:
        k = concat([k, broadcast_to(bias_k.reshape(1, 1, -1), (n, 1, k.shape[2]))], axis=1)
        v = concat([v, broadcast_to(bias_v.reshape(1, 1, -1), (n, 1, v.shape[2]))], axis=1)
        attn_mask = None if attn_mask is None else _pad_last(attn_mask)
        key_padding_mask = None if key_padding_mask is None else _pad_last(key_padding_mask)
        s += 1

    nq = _to_heads(q, num_heads) if qproj_size > 0 else _repeat_heads(q, num_heads)
    nk = _to_heads(k, num_heads) if kproj_size > 0 else _repeat_heads(k, num_heads)
    nv = _to_heads(v, num_heads) if vproj_size > 0 else _repeat_heads(v, num_heads)
    if nq.shape[2] != nk.shape[2]:
        raise _error(f"per-head query size {nq.shape[2]} and key size {nk.shape[2]} differ "
                     f"(qproj_size={qproj_size}, kproj_size={kproj_size}, kdim={e_k})")

    if add_zero_attn:
        nk = concat([nk, zeros((nk.shape[0], 1, nk.shape[2]), dtype=nk.dtype, device=nk.device)],
                    axis=1)
        nv = concat([nv, zeros((nv.shape[0], 1, nv.shape[2]), dtype=nv.dtype, device=nv.device)],
                    axis=1)
        attn_mask = None if attn_mask is None else _pad_last(attn_mask)
        key_padding_mask = None if key_padding_mask is None else _pad_last(key_padding_mask)
        s += 1

    mask = _merge_masks(attn_mask, key_padding_mask, is_causal, n, num_heads, lq, s, dtype,
                        query.device)

    head_dim = embed_dim if qproj_size == 0 else embed_dim // num_heads
    scores = matmul(nq, nk, transpose_b=True) * (head_dim ** -0.5)
    if mask is not None:
        scores = scores + mask
    from .nn import dropout, softmax  # nn re-exports this module: import at call time
    weights = softmax(scores, axis=-1)
    if training and attn_drop > 0:
        weights = dropout(weights, attn_drop, training=True)

    nz = matmul(weights, nv)  # (N * heads, L, dv)
    dv = nz.shape[2]
    z = nz.reshape(n, num_heads, lq, dv).transpose((0, 2, 1, 3)).reshape(n, lq, num_heads * dv)
    out = _project(z, w["wo"], w.get("bo")) if oproj_size > 0 else z
    if reslink:
        if tuple(out.shape) != tuple(query.shape):
            raise _error(f"reslink needs the output {tuple(out.shape)} and the query "
                         f"{tuple(query.shape)} to have one shape")
        out = out + query
    if training and out_drop > 0:
        out = dropout(out, out_drop, training=True)

    if not batched:
        out = out.reshape(*out.shape[1:])
    if not need_weights:
        return out, None
    if average_attn_weights:
        weights = weights.reshape(n, num_heads, lq, s).mean(axis=1)
        if not batched:
            weights = weights.reshape(lq, s)
    return out, weights
