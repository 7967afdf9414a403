r"""``MultiHeadAttention`` (MegEngine 1.13's ``megengine.module.multiheadattn``)."""
import numpy as np

from ..functional.attention import multi_head_attention
from ..tensor import Parameter
from .init import xavier_uniform_
from .module import Module

__all__ = ["MultiHeadAttention"]


class MultiHeadAttention(Module):
    r"""Multi-head attention (`Attention Is All You Need <https://arxiv.org/abs/1706.03762>`_),
    over :func:`~mge.functional.nn.multi_head_attention`.

    Args:
        embed_dim: the total dimension of the model.
        num_heads: the number of parallel heads (``embed_dim`` is split among them:
            ``head_dim = embed_dim // num_heads``).
        attn_dropout: dropout probability on the attention weights. Default: 0.0
        out_dropout: dropout probability on the output. Default: 0.0
        bias: whether the input and output projections have biases. Default: ``True``
        add_bias_kv: add the learnt rows ``bias_k`` / ``bias_v`` ``(1, 1, embed_dim)`` to the
            projected keys and values along the sequence. Default: ``False``
        add_zero_attn: add a row of zeros to the keys and values of every head. Default: ``False``
        kdim: the number of features of the keys (``None``: ``embed_dim``).
        vdim: the number of features of the values (``None``: ``embed_dim``).

    All projection weights and biases are one parameter, ``io_weight_bias`` of shape
    ``(1, (embed_dim + kdim + vdim + embed_dim) * embed_dim + 4 * embed_dim)`` (the biases only with
    ``bias``): the query, key, value and output weights (``Y = X @ W``, each ``(in, embed_dim)``),
    then the four biases, as MegEngine keeps them (so its checkpoints load).  It starts
    Xavier-uniform, the biases at zero.

    Unlike MegEngine 1.13, whose ``reset_parameters`` sets both dropouts back to 0 and which
    asserts ``add_bias_kv`` and ``add_zero_attn`` are off, mge keeps the dropouts it is given and
    implements both options.

    Example:
        >>> import numpy as np, mge, mge.module as M
        >>> x = mge.tensor(np.random.rand(2, 4, 8).astype("float32"))
        >>> attn = M.MultiHeadAttention(8, 2)
        >>> out, weights = attn(x, x, x, need_weights=True)
        >>> out.shape, weights.shape
        ((2, 4, 8), (4, 4, 4))
    """

    def __init__(self, embed_dim, num_heads, attn_dropout=0.0, out_dropout=0.0, bias=True,
                 add_bias_kv=False, add_zero_attn=False, kdim=None, vdim=None, **kwargs):
        super().__init__(**kwargs)
        self.embed_dim = embed_dim
        self.kdim = kdim if kdim is not None else embed_dim
        self.vdim = vdim if vdim is not None else embed_dim
        self.add_bias_kv = add_bias_kv
        self.add_zero_attn = add_zero_attn
        self.num_heads = num_heads
        self.attn_dropout = attn_dropout
        self.out_dropout = out_dropout
        self.head_dim = embed_dim // num_heads
        if self.head_dim * num_heads != self.embed_dim:
            raise ValueError(f"MultiHeadAttention: embed_dim must be divisible by num_heads, got "
                             f"embed_dim={embed_dim} and num_heads={num_heads}")
        self.bias = bias
        self.weight_bias_len = (
            (self.embed_dim + self.kdim + self.vdim + self.embed_dim) * self.embed_dim
            + (4 * self.embed_dim if self.bias else 0))
        self.io_weight_bias = Parameter(np.empty((1, self.weight_bias_len), dtype="float32"))
        self.bias_k = (Parameter(np.empty((1, 1, embed_dim), dtype="float32"))
                       if self.add_bias_kv else None)
        self.bias_v = (Parameter(np.empty((1, 1, embed_dim), dtype="float32"))
                       if self.add_bias_kv else None)
        self.reset_parameters()

    def reset_parameters(self):
        """``io_weight_bias`` (and ``bias_k``/``bias_v``) Xavier-uniform, the biases zero."""
        xavier_uniform_(self.io_weight_bias)
        if self.bias:
            weight_len = (self.embed_dim + self.kdim + self.vdim + self.embed_dim) * self.embed_dim
            self.io_weight_bias[0, weight_len:] = 0
        if self.add_bias_kv:
            xavier_uniform_(self.bias_k)
            xavier_uniform_(self.bias_v)

    def forward(self, query, key, value, key_padding_mask=None, attn_mask=None,
                need_weights=False, average_attn_weights=False, is_causal=False,
                maybe_cudnn_style_mask=False):
        r"""Attend from ``query`` ``(N, L, embed_dim)`` to ``key`` ``(N, S, kdim)`` /
        ``value`` ``(N, S, vdim)`` (2-D inputs: unbatched).

        ``key_padding_mask`` ``(N, S)`` and ``attn_mask`` ``(L, S)`` or
        ``(N * num_heads, L, S)`` are bool (True masks out) or float (added to the scores);
        ``is_causal`` applies the causal mask when no mask is given.  Returns ``(out, weights)``:
        ``out`` ``(N, L, embed_dim)``; ``weights`` ``(N * num_heads, L, S)`` (``(N, L, S)`` with
        ``average_attn_weights``) with ``need_weights``, else ``None``.
        """
        return multi_head_attention(
            query, key, value, self.embed_dim, self.num_heads, self.attn_dropout,
            self.out_dropout, self.io_weight_bias, qproj_size=self.embed_dim,
            kproj_size=self.embed_dim, vproj_size=self.embed_dim, oproj_size=self.embed_dim,
            qbias=self.bias, kbias=self.bias, vbias=self.bias, obias=self.bias,
            bias_k=self.bias_k, bias_v=self.bias_v, add_zero_attn=self.add_zero_attn,
            training=self.training, key_padding_mask=key_padding_mask, need_weights=need_weights,
            attn_mask=attn_mask, average_attn_weights=average_attn_weights, is_causal=is_causal,
            maybe_cudnn_style_mask=maybe_cudnn_style_mask)

    def _module_info_string(self):
        return ("embed_dim={}, num_heads={}, attn_dropout={}, out_dropout={}, bias={}, kdim={}, "
                "vdim={}").format(self.embed_dim, self.num_heads, self.attn_dropout,
                                  self.out_dropout, self.bias, self.kdim, self.vdim)
