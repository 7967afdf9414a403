"""The transform base classes."""
from abc import ABC, abstractmethod
from typing import Sequence, Tuple

__all__ = ["Transform", "PseudoTransform", "CudaTransform"]


class Transform(ABC):
    r"""Base class of transforms: subclasses define ``apply(input)`` for one sample;
    ``apply_batch(inputs)`` maps it over a batch (a tuple of results)."""

    def apply_batch(self, inputs: Sequence[Tuple]):
        """``tuple(self.apply(input) for input in inputs)``."""
        return tuple(self.apply(input) for input in inputs)

    @abstractmethod
    def apply(self, input: Tuple):
        """Transform one sample."""

    def __repr__(self):
        return self.__class__.__name__


class PseudoTransform(Transform):
    r"""The identity transform (a DataLoader's default)."""

    def apply(self, input: Tuple):
        """Return ``input`` unchanged."""
        return input


class CudaTransform(Transform):
    r"""A transform the DataLoader applies in the main process to the collated batch instead of in
    the workers (MegEngine runs it on the device); the base class is the identity."""

    def apply(self, input: Tuple):
        """Return ``input`` unchanged (subclasses transform the whole batch)."""
        return input
