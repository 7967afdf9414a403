"""Ops that move or relabel values: ``Identity``, ``Detach`` (cut from autodiff), ``Copy`` (to a
device), ``AssertEqual`` (a traceable check), and their shape/dtype rules (the input's).  Kernels: ``device/cpu/kernels/misc.py``;
backward rules: ``autodiff/rules/misc.py``."""
from .base import OpDef, TensorDesc, def_infer, op_error

__all__ = ["Detach", "Copy", "Identity", "AssertEqual", "AssertEqualError"]


class Identity(OpDef):
    """Returns its input unchanged (the storage is shared; storage is never written in place)."""

    long_running = False
    complex_ok = True


class Detach(OpDef):
    """Like ``Identity``, but autodiff does not look through it."""

    long_running = False
    complex_ok = True


class Copy(OpDef):
    """Copy to ``device`` (a ``CompNode``)."""

    _fields = ("device",)
    sets_device = True
    long_running = False
    complex_ok = True


def _same(op, descs):
    return [TensorDesc(descs[0][0], descs[0][1])]


for _cls in (Identity, Detach, Copy):
    def_infer(_cls)(_same)


class AssertEqualError(RuntimeError, AssertionError):
    """Raised by ``AssertEqual`` when the error is above ``maxerr`` (a ``RuntimeError`` as in
    MegEngine, and an ``AssertionError``)."""


class AssertEqual(OpDef):
    """``(expect, actual, err) -> expect``: raises :class:`AssertEqualError` when the scalar
    ``err`` (computed by the caller: ``F.utils._assert_equal``) is above ``maxerr``; ``verbose``
    prints ``err``.  An op, so that the check runs inside traced programs too."""

    _fields = ("maxerr", "verbose")


@def_infer(AssertEqual)
def _infer_assert_equal(op, descs):
    if len(descs) != 3:
        raise op_error(TypeError, op, f"takes 3 inputs (expect, actual, err), got {len(descs)}",
                       descs)
    (es, ed), (as_, ad), (rs, rd) = descs
    if es is not None and as_ is not None and tuple(es) != tuple(as_):
        raise op_error(ValueError, op, "expect and actual must have the same shape", descs)
    if rs is not None and len(rs) > 1:
        raise op_error(ValueError, op, "err must be a scalar", descs)
    return [TensorDesc(es, ed)]
