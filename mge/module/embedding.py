"""``Embedding``."""
import numpy as np

from ..functional.nn import embedding as embedding_func
from ..tensor import Parameter, Tensor
from . import init
from .module import Module

__all__ = ["Embedding"]


class Embedding(Module):
    r"""A lookup table: row ``i`` of ``weight`` (``(num_embeddings, embedding_dim)``) for each
    integer index ``i`` of the input; the output has shape ``inp.shape + (embedding_dim,)``.

    Args:
        num_embeddings: number of rows (indices must be below it).
        embedding_dim: size of each row.
        padding_idx: must be ``None`` (not supported, as in MegEngine).
        max_norm: must be ``None`` (not supported).
        norm_type: must be ``None`` (not supported).
        initial_weight: a ``(num_embeddings, embedding_dim)`` tensor to start from (copied);
            without it the rows are drawn from :math:`\mathcal{N}(0, 1)`.
        freeze: if ``True``, no gradient flows into ``weight``. Default: ``False``

    Example:
        >>> import mge, mge.module as M
        >>> weight = mge.tensor([[1.2, 2.3, 3.4, 4.5, 5.6]])
        >>> embedding = M.Embedding(1, 5, initial_weight=weight)
        >>> embedding(mge.tensor([[0, 0]], dtype="int32")).shape
        (1, 2, 5)
    """

    def __init__(self, num_embeddings, embedding_dim, padding_idx=None, max_norm=None,
                 norm_type=None, initial_weight=None, freeze=False, **kwargs):
        super().__init__(**kwargs)
        if padding_idx is not None:
            raise ValueError("Not support padding index now.")
        if max_norm is not None or norm_type is not None:
            raise ValueError("Not support weight normalize now.")
        self.padding_idx = padding_idx
        self.max_norm = max_norm
        self.norm_type = norm_type
        self.num_embeddings = num_embeddings
        self.embedding_dim = embedding_dim
        self.freeze = freeze
        if initial_weight is None:
            self.weight = Parameter(np.zeros((num_embeddings, embedding_dim), dtype=np.float32))
            self.reset_parameters()
        else:
            value = initial_weight.numpy() if isinstance(initial_weight, Tensor) else \
                np.asarray(initial_weight)
            if value.shape != (num_embeddings, embedding_dim):
                raise ValueError("The weight shape should match num_embeddings and embedding_dim")
            self.weight = Parameter(value)

    def reset_parameters(self):
        """Draw ``weight`` from :math:`\\mathcal{N}(0, 1)`."""
        init.normal_(self.weight)

    def forward(self, inputs):
        weight = self.weight.detach() if self.freeze else self.weight
        return embedding_func(inputs, weight)

    @classmethod
    def from_pretrained(cls, embeddings, freeze=True, padding_idx=None, max_norm=None,
                        norm_type=None):
        r"""An ``Embedding`` whose ``weight`` is a copy of the 2-D ``embeddings``; frozen by
        default.

        Example:
            >>> import mge, mge.module as M
            >>> emb = M.Embedding.from_pretrained(mge.tensor([[1.0, 2.0], [3.0, 4.0]]))
            >>> emb(mge.tensor([1, 0], dtype="int32")).numpy()
            array([[3., 4.],
                   [1., 2.]], dtype=float32)
        """
        shape = tuple(embeddings.shape)
        if len(shape) != 2:
            raise ValueError("Embeddings parameter is expected to be 2-dimensional")
        return cls(num_embeddings=shape[0], embedding_dim=shape[1], initial_weight=embeddings,
                   padding_idx=padding_idx, max_norm=max_norm, norm_type=norm_type,
                   freeze=freeze)
