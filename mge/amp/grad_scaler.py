"""``GradScaler``: loss scaling for mixed-precision training (MegEngine's ``amp.GradScaler``)."""
from .. import functional as F
from ..autodiff.grad_manager import _as_list
from .check_non_finite import check_non_finite

__all__ = ["GradScaler"]


class GradScaler:
    r"""A helper class that performs grad scaling to prevent from data overflow in
    :class:`~.autocast` mode.

    The loss's gradient is multiplied by ``scale_factor`` before backward, so that small float16
    gradients do not underflow to zero; :meth:`unscale` divides the parameters' gradients by it
    again and drops them all (sets ``grad`` to ``None``, so ``opt.step()`` skips the step) when
    any of them is NaN or infinite.  :meth:`update` then halves the scale after an overflow and
    doubles it after ``growth_interval`` good steps in a row.

    Args:
        init_scale: Initial scale factor.
        growth_factor: Factor that the scale is multiplied by in actual :meth:`update` stage.
            If growth_factor is 0, scale_factor will not update.
        backoff_factor: Factor that the scale is multiplied by when encountering overflow grad.
        growth_interval: The interval between two scale update stages.  With 0 the scale never
            changes and gradients are unscaled without checking them.

    Example:
        .. code-block:: python

           gm = GradManager()
           opt = ...
           scaler = GradScaler()

           gm.attach(model.parameters())

           @autocast()
           def train_step(image, label):
               with gm:
                   logits = model(image)
                   loss = F.nn.cross_entropy(logits, label)
                   scaler.backward(gm, loss)
               opt.step().clear_grad()
               return loss

        For more flexible use, ``scaler.backward`` splits into three lines:

        .. code-block:: python

           @autocast()
           def train_step(image, label):
               with gm:
                   logits = model(image)
                   loss = F.nn.cross_entropy(logits, label)
                   gm.backward(loss, dy=megengine.tensor(scaler.scale_factor))
               scaler.unscale(gm.attached_tensors())
               scaler.update()
               opt.step().clear_grad()
               return loss

        This is useful to accumulate gradients over several batches.
    """

    def __init__(self, init_scale=2.0 ** 4, growth_factor=2.0, backoff_factor=0.5,
                 growth_interval=2000):
        self.scale_factor = float(init_scale)
        self.growth_factor = float(growth_factor)
        self.backoff_factor = float(backoff_factor)
        self.growth_interval = growth_interval

        self._growth_tracker = 0
        self._found_non_finite = False

    def backward(self, gm, y=None, dy=None, *, unscale_grad=True, update_scale="if_unscale_grad"):
        r"""A wrapper of GradManager's :meth:`~.GradManager.backward`: scales ``y``'s gradient and
        unscales the parameters' gradients.

        Args:
            gm: The GradManager to run backward with.
            y: Same as GradManager backward's ``y``.
            dy: Same as GradManager backward's ``dy``. Will be multiplied by ``scale_factor``.
            unscale_grad: Whether do :meth:`unscale` at the same time. Could be ``False`` if
                needs to accumulate grads.
            update_scale: Same as :meth:`unscale`'s ``update``. Will be ignored if
                ``unscale_grad`` is ``False``.
        """
        # y and dy as GradManager.backward takes them; the default dy is the scale itself
        ys = _as_list(y)
        if dy is None:
            dys = [F.full_like(y_, self.scale_factor) for y_ in ys]
        else:
            dys = [dy_ * self.scale_factor for dy_ in _as_list(dy)]

        gm.backward(y=ys, dy=dys)

        if unscale_grad:
            self.unscale(gm.attached_tensors())
            if update_scale:
                self.update()

    def unscale(self, grad_tensors):
        r"""Unscale the gradients of all ``grad_tensors``.

        When one of them is NaN or infinite, every gradient is dropped instead (set to ``None``)
        and the next :meth:`update` backs the scale off.

        Args:
            grad_tensors: Tensors needed to unscale grads. Should be all tensors that are affected
                by ``target`` tensor in GradManager's backward.

        Returns:
            the scaler.
        """
        grad_tensors = [t for t in grad_tensors if t is not None and getattr(t, "grad", None) is not None]
        if self.growth_interval == 0:
            inv_scale = 1.0 / self.scale_factor
            for tensor in grad_tensors:
                tensor.grad *= inv_scale
            return self

        if self._check_gradients([x.grad for x in grad_tensors], 1.0 / self.scale_factor):
            self._found_non_finite = True
            for tensor in grad_tensors:
                tensor.grad = None
        return self

    def _check_gradients(self, grads, scale):
        if len(grads) == 0:
            return False
        return bool(check_non_finite(grads, scale).item())

    def update(self, new_scale=None):
        r"""Update the scale factor according to whether an overflowing gradient was met.

        If ``new_scale`` is provided, it becomes the scale and the internal rule is skipped.
        """
        if self.growth_interval == 0:
            return

        if new_scale is not None:
            self.scale_factor = float(new_scale)
        else:
            if self._found_non_finite:
                self.scale_factor *= self.backoff_factor
                self._growth_tracker = 0
            else:
                self._growth_tracker += 1
                if self._growth_tracker >= self.growth_interval:
                    self.scale_factor *= self.growth_factor
                    self._growth_tracker = 0
        self._found_non_finite = False

    def state_dict(self):
        """The scaler's state: its factors, interval and growth tracker."""
        return {
            "scale_factor": self.scale_factor,
            "growth_factor": self.growth_factor,
            "backoff_factor": self.backoff_factor,
            "growth_interval": self.growth_interval,
            "_growth_tracker": self._growth_tracker,
        }

    def load_state_dict(self, state):
        """Load a state returned by :meth:`state_dict`."""
        self.scale_factor = state["scale_factor"]
        self.growth_factor = state["growth_factor"]
        self.backoff_factor = state["backoff_factor"]
        self.growth_interval = state["growth_interval"]
        self._growth_tracker = state["_growth_tracker"]
