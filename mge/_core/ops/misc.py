"""Ops that move or relabel values: ``Identity``, ``Detach`` (cut from autodiff), ``Copy`` (to a
device), and their shape/dtype rule (the input's).  Kernels: ``device/cpu/kernels/misc.py``;
backward rules: ``autodiff/rules/misc.py``."""
from .base import OpDef, TensorDesc, def_infer

__all__ = ["Detach", "Copy", "Identity"]


class Identity(OpDef):
    """Returns its input unchanged (the storage is shared; storage is never written in place)."""

    long_running = False


class Detach(OpDef):
    """Like ``Identity``, but autodiff does not look through it."""

    long_running = False


class Copy(OpDef):
    """Copy to ``device`` (a ``CompNode``)."""

    _fields = ("device",)
    sets_device = True
    long_running = False


def _same(op, descs):
    return [TensorDesc(descs[0][0], descs[0][1])]


for _cls in (Identity, Detach, Copy):
    def_infer(_cls)(_same)
