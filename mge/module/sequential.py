"""``Sequential``."""
from collections import OrderedDict

from .module import Module

__all__ = ["Sequential"]


class Sequential(Module):
    r"""Modules called one after the other, each on the previous one's output.

    ``Sequential(m0, m1, ...)`` names the layers ``"0"``, ``"1"``...;
    ``Sequential(OrderedDict([("fc", m0), ...]))`` uses the dict's keys.  The layers are
    attributes under those names, so their parameters are ``"0.weight"``, ``"fc.bias"``...
    Indexing gives a layer (negative indices count from the end), a slice a new ``Sequential``
    of the same layers (keeping their names); ``len`` and iteration go over the layers.

    Example:
        >>> from collections import OrderedDict
        >>> import mge, mge.module as M
        >>> net = M.Sequential(M.Linear(4, 8), M.ReLU(), M.Linear(8, 2))
        >>> net(mge.tensor(np.zeros((3, 4), "float32"))).shape
        (3, 2)
        >>> len(net), type(net[1]).__name__, len(net[1:])
        (3, 'ReLU', 2)
        >>> named = M.Sequential(OrderedDict([("fc", M.Linear(4, 2)), ("act", M.ReLU())]))
        >>> [k for k, _ in named.named_parameters()]
        ['fc.bias', 'fc.weight']
    """

    def __init__(self, *args, **kwargs):
        super().__init__(**kwargs)
        self.layer_keys = []
        if len(args) == 1 and isinstance(args[0], OrderedDict):
            items = list(args[0].items())
        else:
            items = [(str(i), m) for i, m in enumerate(args)]
        for key, module in items:
            if not isinstance(module, Module):
                raise TypeError(f"Sequential: layer {key!r} is a {type(module).__name__}, "
                                f"not a Module")
            setattr(self, key, module)
            self.layer_keys.append(key)

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return self.__class__(OrderedDict(zip(self.layer_keys[idx], self.layer_values[idx])))
        return getattr(self, self.layer_keys[idx])

    def __setitem__(self, idx, module):
        if not isinstance(module, Module):
            raise TypeError(f"Sequential: a layer must be a Module, got {type(module).__name__}")
        setattr(self, self.layer_keys[idx], module)

    def __delitem__(self, idx):
        keys = self.layer_keys[idx] if isinstance(idx, slice) else [self.layer_keys[idx]]
        for key in keys:
            delattr(self, key)
        self.layer_keys = [k for k in self.layer_keys if k not in keys]

    def __len__(self):
        return len(self.layer_keys)

    def __iter__(self):
        return iter(self.layer_values)

    @property
    def layer_values(self):
        """The layers, in order."""
        return [getattr(self, key) for key in self.layer_keys]

    def forward(self, inp):
        for key in self.layer_keys:
            inp = getattr(self, key)(inp)
        return inp
