"""``megengine.functional.utils``: ``_assert_equal``, a traceable equality check."""
from .._core.channel import get_channel
from .._core.ops.misc import AssertEqual
from ..core import apply
from ..tensor import Tensor

__all__ = []

_dispatch = None


def _is_graph_var(x):
    """Whether ``x`` is a var of a MegBrain-style graph (``megbrain_graph.VarNode``): the
    functions take such vars as tensors (their ops become graph operators)."""
    global _dispatch
    if _dispatch is None:
        from .._core import _accel
        _dispatch = _accel.load("mge._core.dispatch")
    g = _dispatch._graph_var
    return g is not None and isinstance(x, g)


def _tensor_like(x):
    """``isinstance(x, Tensor)``, graph vars included."""
    return isinstance(x, Tensor) or _is_graph_var(x)


def _assert_equal(expect, actual, *, maxerr=0.0001, verbose=False):
    """Check that ``actual`` equals ``expect`` and return ``expect`` (MegEngine's
    ``F.utils._assert_equal``).

    The error is ``max(|expect - actual| / max(min(|expect|, |actual|), 1))`` -- the smaller of
    the absolute and relative errors -- and must be at most ``maxerr``, or a ``RuntimeError``
    (:class:`mge._core.ops.misc.AssertEqualError`) is raised.  It is an op, so it also runs
    inside ``mge.jit.trace`` programs; the call waits for the check (as MegEngine's syncs).
    """
    from . import elemwise as E

    if not isinstance(expect, Tensor):
        expect = Tensor(expect)
    if not isinstance(actual, Tensor):
        actual = Tensor(actual)
    one = Tensor(1.0, dtype="float32", device=expect.device)
    err = (E.abs(expect - actual) / E.maximum(E.minimum(E.abs(expect), E.abs(actual)), one)).max()
    result = apply(AssertEqual(float(maxerr), bool(verbose)), expect, actual, err)[0]
    get_channel().sync()  # the check has run: its error is raised here
    return result


def _simulate_error():
    """A tensor whose computation fails (MegEngine's ``F.utils._simulate_error``, for testing
    error paths): an ``AssertEqual`` of zeros against ones, whose ``RuntimeError`` surfaces
    where the runtime reports kernel errors -- at the call with ``async_level`` 0, else as an
    ``AsyncError`` (a ``RuntimeError``) when the value is read."""
    x1 = Tensor([0.0] * 100, dtype="float32")
    x2 = Tensor([1.0] * 100, dtype="float32")
    err = Tensor(1.0, dtype="float32")
    return apply(AssertEqual(0.0, False), x1, x2, err)[0]
