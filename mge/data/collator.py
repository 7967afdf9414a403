"""``Collator``: merges a list of samples into one batch (MegEngine's ``megengine.data.collator``)."""
import collections.abc
import re

import numpy as np

__all__ = ["Collator"]

# numpy dtype strings of arrays that cannot be stacked into a numeric batch: strings, objects
_STR_OBJ_DTYPE = re.compile(r"[aSUO]")
_ERR = ("Collator: samples must hold numpy arrays, numbers, strings, bytes, dicts, lists or tuples; "
        "found {}")


class Collator:
    r"""Merges a list of samples into a mini-batch.

    ``apply(inputs)`` looks at the first sample and recurses through its structure:

    * numpy arrays are stacked along a new first axis (``np.stack``, C-contiguous);
      numpy scalars become a 1-d array;
    * Python ``float`` s become a float64 array, ``int`` s an int array;
    * ``str`` and ``bytes`` are kept as the list of samples;
    * a mapping becomes a dict of collated values (keys of the first sample);
    * a namedtuple becomes the same namedtuple of collated fields;
    * other sequences (tuples, lists) are transposed and collated position by position,
      giving a list.

    Anything else raises ``TypeError``.

    Example:
        >>> import numpy as np
        >>> from mge.data import Collator
        >>> batch = Collator().apply([(np.zeros(2), 1), (np.ones(2), 2)])
        >>> batch[0].shape, batch[1].tolist()
        ((2, 2), [1, 2])
    """

    def apply(self, inputs):
        """Collate ``inputs``, a non-empty list of samples of one structure, into a batch."""
        if len(inputs) == 0:
            raise ValueError("Collator.apply: got an empty list of samples")
        elem = inputs[0]
        if isinstance(elem, np.ndarray):
            if _STR_OBJ_DTYPE.search(elem.dtype.str) is not None:
                raise TypeError(_ERR.format(elem.dtype))
            return np.ascontiguousarray(np.stack(inputs))
        if isinstance(elem, np.generic) and not isinstance(elem, (np.str_, np.bytes_)):
            return np.array(inputs)
        if isinstance(elem, bool):
            return np.array(inputs)
        if isinstance(elem, float):
            return np.array(inputs, dtype=np.float64)
        if isinstance(elem, int):
            return np.array(inputs)
        if isinstance(elem, (str, bytes)):
            return inputs
        if isinstance(elem, collections.abc.Mapping):
            return {key: self.apply([d[key] for d in inputs]) for key in elem}
        if isinstance(elem, tuple) and hasattr(elem, "_fields"):  # namedtuple
            return type(elem)(*(self.apply(list(samples)) for samples in zip(*inputs)))
        if isinstance(elem, collections.abc.Sequence):
            n = len(elem)
            if any(len(s) != n for s in inputs):
                raise ValueError("Collator.apply: samples are sequences of different lengths "
                                 f"({sorted({len(s) for s in inputs})})")
            return [self.apply(list(samples)) for samples in zip(*inputs)]
        raise TypeError(_ERR.format(type(elem)))
