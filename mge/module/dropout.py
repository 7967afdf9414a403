"""``Dropout``."""
from ..functional.nn import dropout
from .module import Module

__all__ = ["Dropout"]


class Dropout(Module):
    r"""In training, zero each element with probability ``drop_prob`` and scale the others by
    :math:`1 / (1 - \text{drop_prob})`; in eval mode, the identity.

    Args:
        drop_prob: the probability of dropping each element, in ``[0, 1)``. Default: 0.0

    Example:
        >>> import mge, mge.module as M
        >>> m = M.Dropout(0.5)
        >>> y = m(mge.tensor(np.ones((1000,), "float32")))
        >>> sorted(set(y.numpy().tolist()))
        [0.0, 2.0]
        >>> m.eval()
        >>> m(mge.tensor([1.0, 2.0])).numpy()
        array([1., 2.], dtype=float32)
    """

    def __init__(self, drop_prob=0.0, **kwargs):
        super().__init__(**kwargs)
        if not 0 <= drop_prob < 1:
            raise ValueError(f"Dropout: drop_prob must be in [0, 1), got {drop_prob}")
        self.drop_prob = drop_prob

    def forward(self, inputs):
        if self.training:
            return dropout(inputs, self.drop_prob, training=True)
        return inputs

    def _module_info_string(self):
        return "drop_prob={drop_prob}".format(drop_prob=self.drop_prob)
