"""``Function``: a block of operations with a user-defined gradient (MegEngine 1.13's)."""
from ..core import get_plugin
from ..tensor import Tensor
from .grad_manager import _Grad

__all__ = ["Function"]


class Function:
    r"""Defines a block of operations with customizable differentiation.

    Subclass it, define the computation in :meth:`forward` and its gradient in :meth:`backward`,
    and call an instance on tensors.  While a :class:`~mge.autodiff.GradManager` records, the
    operations of ``forward`` are not recorded: the gradient of the outputs with respect to the
    inputs is whatever ``backward`` returns.  Use each instance for one call (``forward`` may keep
    what ``backward`` needs on ``self``).

    Example:

        >>> import mge
        >>> import mge.functional as F
        >>> from mge.autodiff import Function, GradManager
        >>> class Sigmoid(Function):
        ...     def forward(self, x):
        ...         y = 1 / (1 + F.exp(-x))
        ...         self.y = y
        ...         return y
        ...     def backward(self, dy):
        ...         y = self.y
        ...         return dy * y * (1 - y)
        >>> x = mge.tensor([0.0, 2.0])
        >>> gm = GradManager().attach(x)
        >>> with gm:
        ...     gm.backward(Sigmoid()(x).sum())
        >>> x.grad.numpy().round(4)
        array([0.25 , 0.105], dtype=float32)
    """

    def forward(self, *args, **kwargs):
        r"""Applies operations to the inputs and returns the results.  Must be overridden.

        Args:
            args: the input tensors (positional arguments must all be tensors).

        Returns:
            a tensor, or a tuple of tensors.
        """
        raise NotImplementedError

    def backward(self, *output_grads):
        r"""The gradients of the inputs, given those of the outputs.  Must be overridden.

        Args:
            output_grads: one gradient per output of :meth:`forward`; ``None`` for an output
                that the differentiated result does not depend on.

        Returns:
            a tuple with one gradient per input of :meth:`forward`, in order (a single tensor
            when there is one input); ``None`` for an input that gets no gradient.
        """
        raise NotImplementedError

    def _default_rule(self, *args):
        ret = self.forward(*args)
        self.__single_output = isinstance(ret, Tensor)
        return ret

    def _grad_rule(self, *args):
        return self._default_rule(*args), self.backward

    def __call__(self, *args):
        for arg in args:
            if not isinstance(arg, Tensor):
                raise TypeError(
                    "op Function expect type Tensor as inputs, got {}".format(type(arg))
                )

        plugin = get_plugin("grad")
        grad_key = plugin.get_grad_key(args)
        if grad_key is None:
            return self._default_rule(*args)

        grad = _Grad.key2grad.get(grad_key)
        group = [] if grad is None else [ref() for ref in grad._group]
        group = [g for g in group if g is not None]
        # The inputs as they are now: forward may update them in place.
        origin_args = [plugin.snapshot(arg) for arg in args]

        for g in group:
            g.suppress()
        try:
            outputs, backward = self._grad_rule(*args)
        finally:
            for g in reversed(group):
                g.resume()

        name = type(self).__name__

        def normalized_backward(*output_grads):
            input_grads = backward(*output_grads)
            if isinstance(input_grads, Tensor) or input_grads is None:
                input_grads = (input_grads,)
            if not isinstance(input_grads, (tuple, list)):
                raise TypeError(f"{name}.backward must return a Tensor, None or a tuple of them, "
                                f"got {type(input_grads).__name__}")
            if len(input_grads) != len(origin_args):
                raise ValueError(f"{name}.backward returned {len(input_grads)} gradients for "
                                 f"{len(origin_args)} inputs of forward")
            return input_grads

        if self.__single_output:
            outputs = (outputs,)
        outputs = plugin.set_grad(normalized_backward, origin_args, outputs)
        if self.__single_output:
            (outputs,) = outputs
        else:
            outputs = tuple(outputs)
        return outputs

    def __getstate__(self):
        return self.__dict__

    def __setstate__(self, state):
        self.__dict__.update(state)
