"""``GradManager``: MegEngine 1.13's front-end of reverse-mode autodiff.

The work is done by the ``grad`` transformation plugin (``plugins/grad.py``), reached through
``mge.core.get_plugin("grad")``: a disabled or missing plugin is a clear error at ``record()``.
``_Grad`` is MegEngine's ``core.autodiff.grad.Grad``: one recording (a ``GradKey`` on the stack)
and the group of recordings entered together (``gm1 | gm2``), which do not record each other's
backward passes.
"""
import weakref
from collections.abc import Callable

from .._core.channel import get_channel
from ..core import get_plugin
from ..tensor import Tensor

__all__ = ["GradManager", "GradManagerGroup", "get_backwarding_grad_manager"]

backwarding_grad_manager = None
_grad_count = 0


def get_backwarding_grad_manager():
    """The ``GradManager`` whose ``backward`` is running, or ``None``."""
    return backwarding_grad_manager


def _as_list(x):
    """``y`` or ``dy`` of ``backward`` as a list: None is no tensor, a tuple or list is kept."""
    if x is None:
        return []
    if isinstance(x, (tuple, list)):
        return x
    return [x]


def _plugin():
    return get_plugin("grad")


class _Grad:
    """One recording: a ``GradKey`` entered on the stack, and the group it was entered with."""

    stack = []                                   # groups of recordings, innermost last
    grouping = False
    key2grad = weakref.WeakValueDictionary()     # GradKey -> _Grad (for Function)

    def __init__(self, name=None):
        global _grad_count
        if name is None:
            name = "grad_%d" % _grad_count
            _grad_count += 1
        self._impl = _plugin().GradKey(name)
        _Grad.key2grad[self._impl] = self
        self._group = [weakref.ref(self)]

    def wrt(self, *tensors, callback=None):
        for x in tensors:
            self._impl.attach(x, callback)
        return self

    def __call__(self, ys, dys):
        # The other recordings of the group must not record this backward pass.
        group = [ref() for ref in self._group]
        others = [g for g in group if g is not None and g is not self]
        for g in others:
            g.suppress()
        try:
            _plugin().backward(self._impl, ys, dys)
        finally:
            for g in others:
                g.resume()

    def __enter__(self):
        ref = weakref.ref(self)
        self._impl.enter()
        if _Grad.grouping:
            group = _Grad.stack[-1]
            self._group = group
            group.append(ref)
        else:
            _Grad.stack.append(self._group)
        return self

    def __exit__(self, *exc):
        self._impl.exit()
        _Grad.key2grad.pop(self._impl, None)
        group = self._group
        for i, ref in enumerate(group):
            if ref() is self:
                del group[i]
                break
        if not group:
            for i, g in enumerate(_Grad.stack):
                if g is group:
                    del _Grad.stack[i]
                    break
        self._impl = None

    @staticmethod
    def begin_group():
        assert not _Grad.grouping
        _Grad.grouping = True

    @staticmethod
    def end_group():
        assert _Grad.grouping
        _Grad.grouping = False

    def suppress(self):
        if self._impl is not None:
            self._impl.suppress()

    def resume(self):
        if self._impl is not None:
            self._impl.resume()


class _AttachSpec:
    __slots__ = ("tensor", "callbacks")


class GradManager:
    r"""Computes gradients (vector-Jacobian products) by reverse-mode automatic differentiation.

    :meth:`attach` the tensors to differentiate with respect to, then, while the manager records
    (:meth:`record`, or a ``with`` block), compute and call :meth:`backward`: the gradients are
    accumulated into the ``.grad`` attributes of the attached tensors.  Computation on a tensor
    before it is attached (or outside a recording) is not seen.

    .. code-block:: python

        gm = GradManager()
        gm.attach(model.parameters())
        for data, label in dataset:
            with gm:
                loss = loss_fn(model(data), label)
                gm.backward(loss)        # gradients go to p.grad; the history is freed
            opt.step().clear_grad()

    ``record()``/``release()`` are the same as the ``with`` block.  A manager records one history at
    a time; for several at once, or higher-order gradients, use several managers (a manager
    that records while another one's ``backward`` runs records that backward pass).  ``gm1 | gm2``
    records with both, as one :class:`GradManagerGroup` whose members do not record each other's
    backward.

    Attached tensors are held weakly, so attaching temporary tensors on every step does not leak.
    A tensor attached before :meth:`record` is taken as it is at ``record()``; attached while
    recording, as it is at ``attach``.

    Example:

        >>> import mge
        >>> from mge.autodiff import GradManager
        >>> x = mge.tensor([1.0, 2.0, 3.0])
        >>> gm = GradManager().attach(x)
        >>> with gm:
        ...     y = (x * x).sum()
        ...     gm.backward(y)
        >>> x.grad.numpy()
        array([2., 4., 6.], dtype=float32)
    """

    def __init__(self):
        self._attach_specs = {}  # id(tensor) -> _AttachSpec
        self._recording = False
        self._grad = None
        self._after_backward_callback = []
        self._gradients = {}

    def attached_tensors(self):
        r"""The tensors attached with :meth:`attach` (that are still alive), a list."""
        out = []
        for spec in self._attach_specs.values():
            t = spec.tensor()
            if t is not None:
                out.append(t)
        return out

    def attach(self, tensors, callbacks=None):
        r"""Track ``tensors`` (a tensor or a list of tensors) to get their gradients.

        ``callbacks`` (a callable or a list) are called during :meth:`backward` as
        ``grad = callback(tensor, grad)``, in order; the last result is accumulated into
        ``tensor.grad``.  Attaching a tensor again adds the new callbacks after its old ones.
        Attachment persists across recordings; tensors are held by weak references (a callback
        that holds an attached tensor keeps it alive).  Only floating point tensors can be
        attached.  Returns ``self``.

        Example:

            >>> import mge
            >>> from mge.autodiff import GradManager
            >>> w = mge.tensor([1.0, 2.0])
            >>> gm = GradManager().attach(w, callbacks=lambda t, g: g * 10)
            >>> with gm:
            ...     gm.backward((w * 3).sum())
            >>> w.grad.numpy()
            array([30., 30.], dtype=float32)
        """
        if callbacks is None:
            callbacks = []
        if isinstance(callbacks, Callable):
            callbacks = [callbacks]
        if isinstance(tensors, Tensor):
            tensors = [tensors]

        def make_spec(tensor):
            selfref = weakref.ref(self)
            key = id(tensor)

            def deleter(_):
                self = selfref()
                if self is not None:
                    self._attach_specs.pop(key, None)

            spec = _AttachSpec()
            spec.tensor = weakref.ref(tensor, deleter)
            spec.callbacks = []
            return spec

        for x in tensors:
            assert isinstance(x, Tensor), "Object to be attached should be Tensor"
            assert x.dtype.kind == "f", (
                "Only tensors of floating point dtype can be attached to get gradients, "
                "get tensor dtype: {} and shape: {}".format(x.dtype, x.shape)
            )
            spec = self._attach_specs.get(id(x))
            new_attach = spec is None
            if spec is None:
                spec = make_spec(x)
                self._attach_specs[id(x)] = spec
            spec.callbacks.extend(callbacks)
            if new_attach and self._recording:
                self._do_record(spec)
        return self

    def _register_after_backward_callback(self, callback):
        self._after_backward_callback.append(callback)
        return self

    def backward(self, y=None, dy=None):
        r"""Compute the gradients of ``y`` for the attached tensors and accumulate them into
        their ``.grad``; then release the recording (always, even when it fails).

        Computes the vector-Jacobian product :math:`dx_j = \sum_i dy_i J_{ij}`, with
        :math:`J_{ij} = \partial y_i / \partial x_j` and :math:`x` the attached tensors.  ``y``
        and ``dy`` are a tensor or lists of tensors; ``dy`` defaults to ones (the gradient of
        ``y.sum()``).  An attached tensor that ``y`` does not depend on gets no gradient (its
        ``.grad`` is unchanged).

        Args:
            y: tensor or list of tensors.
            dy: tensor or list of tensors, of ``y``'s shapes. Defaults to ones.
        """
        global backwarding_grad_manager
        from ..functional import ones_like

        if not self._recording:
            raise RuntimeError(
                "no computation history. "
                "did you forget record() or "
                "call a method that clears the history?"
            )
        assert self._grad is not None
        channel = get_channel()
        channel.push_scope("backward")
        cache = backwarding_grad_manager
        backwarding_grad_manager = self
        try:
            ys = _as_list(y)
            dys = [ones_like(t) for t in ys] if dy is None else _as_list(dy)
            self._grad(ys, dys)
            for callback in self._after_backward_callback:
                callback()
            for id_, grad in self._gradients.items():
                spec = self._attach_specs.get(id_)
                tensor = spec and spec.tensor()
                if tensor is not None:
                    if tensor.grad is None:
                        tensor.grad = grad
                    else:
                        tensor.grad += grad
        finally:
            self.release()
            backwarding_grad_manager = cache
            channel.pop_scope("backward")

    def record(self):
        r"""Start recording operations; :meth:`backward` can be called afterwards."""
        if self._recording:
            raise RuntimeError("already recording")
        grad = _Grad()
        self._recording = True
        self._grad = grad
        grad.__enter__()
        for spec in self._attach_specs.values():
            self._do_record(spec)

    def _do_record(self, spec):
        tensor = spec.tensor()
        if tensor is None:
            return

        def callback(grad, callbacks=spec.callbacks):
            for cb in callbacks:
                grad = cb(tensor, grad)
            self._gradients[id(tensor)] = grad

        self._grad.wrt(tensor, callback=callback)

    def release(self):
        r"""Stop recording and free what was recorded (safe to call when not recording)."""
        if self._grad is not None:
            self._grad.__exit__(None, None, None)
            self._grad = None
        self._recording = False
        self._gradients = dict()

    def __enter__(self):
        self.record()
        return self

    def __exit__(self, exc_type, exc_val, exc_tb):
        self.release()

    def __or__(self, other):
        if isinstance(other, GradManager):
            return GradManagerGroup([self, other])
        return NotImplemented

    __ror__ = __or__


class GradManagerGroup:
    r"""Several :class:`GradManager` recording together (``gm1 | gm2 | ...``), as a context
    manager.  A member's ``backward`` is not recorded by the other members.

    Example:

        >>> import mge
        >>> from mge.autodiff import GradManager
        >>> a, b = mge.tensor([1.0, 2.0]), mge.tensor([3.0, 4.0])
        >>> ga, gb = GradManager().attach(a), GradManager().attach(b)
        >>> with ga | gb:
        ...     y = (a * b).sum()
        ...     ga.backward(y)
        ...     gb.backward(y)
        >>> a.grad.numpy(), b.grad.numpy()
        (array([3., 4.], dtype=float32), array([1., 2.], dtype=float32))
    """

    def __init__(self, gms) -> None:
        self._gms = list(gms)

    def merge_with(self, other):
        """The group of this group's managers and ``other`` (a manager or a group)."""
        if isinstance(other, GradManager):
            other = GradManagerGroup([other])
        elif not isinstance(other, GradManagerGroup):
            return NotImplemented
        return GradManagerGroup([*self._gms, *other._gms])

    __or__ = merge_with
    __ror__ = merge_with

    def __enter__(self):
        _Grad.stack.append([])
        _Grad.begin_group()
        try:
            for gm in self._gms:
                gm.record()
                assert gm._grad is not None
        finally:
            _Grad.end_group()

    def __exit__(self, exc_type, exc_val, exc_tb):
        for gm in reversed(self._gms):
            gm.release()
            assert gm._grad is None
