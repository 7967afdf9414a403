r"""``LAMB`` and ``LAMBFp16`` (MegEngine 1.13's ``megengine.optimizer.lamb``).

MegEngine fuses a LAMB step of one parameter into its ``LAMBUpdate`` op.  mge composes the step
from elementwise and reduction ops (no fused update op exists for it in ``mge/_core`` yet), each
through :func:`mge.core.apply`, and swaps the results into the parameter and its states with
``Tensor._reset``, so a parameter keeps its identity and a traced step records the update.

The trust ratio uses the true norm of the parameter, as MegEngine's CUDA kernel does; MegEngine's
CPU kernel accumulates the squares of the parameter in an ``int`` (``std::accumulate`` with the
initial value ``0``), so on the CPU its trust ratio is off whenever it is used (``weight_decay > 0``
or ``always_adapt``).  MegEngine 1.13's ``LAMB`` and ``LAMBFp16`` also fail when they are built
(``_add_state`` gets a ``dtype`` argument it does not take); mge's work.
"""
from ..functional import copy, full_like, sqrt, sum as _sum, where
from .optimizer import Optimizer, _float

__all__ = ["LAMB", "LAMBFp16"]


def _check_lamb_args(lr, betas, weight_decay):
    if lr < 0.0:
        raise ValueError("Invalid learning rate: {}".format(lr))
    if weight_decay < 0.0:
        raise ValueError("Invalid weight_decay value: {}".format(weight_decay))
    if not 0.0 <= betas[0] < 1.0:
        raise ValueError("Invalid beta parameter at index 0: {}".format(betas[0]))
    if not 0.0 <= betas[1] < 1.0:
        raise ValueError("Invalid beta parameter at index 1: {}".format(betas[1]))


def _lamb_step(param, grad, exp_avg, exp_avg_sq, step, lr, beta0, beta1, eps, weight_decay,
               bias_correction, always_adapt):
    """One LAMB step in ops: ``(new_param, new_exp_avg, new_exp_avg_sq, new_step)``.

    ``param`` and the states are float32 (float64 for float64 parameters); ``grad`` may be
    float16 (it is read in the states' precision, as MegEngine's kernel reads it).
    """
    if grad.dtype != exp_avg.dtype:
        grad = grad.astype(exp_avg.dtype)
    step = step + 1.0
    exp_avg = exp_avg * beta0 + grad * (1.0 - beta0)
    exp_avg_sq = exp_avg_sq * beta1 + (grad * grad) * (1.0 - beta1)
    if bias_correction:
        bc1 = 1.0 - beta0 ** step
        bc2 = 1.0 - beta1 ** step
        delta = (exp_avg / bc1) / (sqrt(exp_avg_sq / bc2) + eps)
    else:
        delta = exp_avg / (sqrt(exp_avg_sq) + eps)
    if weight_decay != 0.0:
        delta = delta + param * weight_decay
    if always_adapt or weight_decay > 0:
        p_norm = sqrt(_sum(param * param))
        d_norm = sqrt(_sum(delta * delta))
        ok = (p_norm > 0) & (d_norm > 0)
        one = full_like(p_norm, 1.0)
        trust = where(ok, p_norm / where(ok, d_norm, one), one)
        new_param = param - delta * (trust * lr)
    else:
        new_param = param - delta * lr
    return new_param, exp_avg, exp_avg_sq, step


class LAMB(Optimizer):
    r"""Implements the LAMB algorithm, proposed in `"Large Batch Optimization for Deep Learning:
    Training BERT in 76 minutes" <https://arxiv.org/abs/1904.00962>`_.

    With ``g`` the gradient and ``t`` the parameter's step count:

    .. code-block:: text

        m = beta0 * m + (1 - beta0) * g
        v = beta1 * v + (1 - beta1) * g * g
        r = (m / (1 - beta0**t)) / (sqrt(v / (1 - beta1**t)) + eps) + weight_decay * param
        trust = ||param|| / ||r||   if (weight_decay > 0 or always_adapt) and both norms > 0
                1                   otherwise
        param = param - lr * trust * r

    (without ``bias_correction``, the ``1 - beta**t`` divisors are 1).

    Args:
        params: iterable of parameters to optimize or dicts defining parameter groups.
        lr: learning rate.
        betas: coefficients used for computing running averages of the gradient and its square.
            Default: ``(0.9, 0.999)``
        eps: term added to the denominator to improve numerical stability. Default: ``1e-8``
        bias_correction: enables bias correction by ``1 - beta ** step``. Default: ``True``
        weight_decay: weight decay (L2 penalty). Default: ``0.0``
        always_adapt: apply the adaptive trust ratio also when ``weight_decay`` is 0.
            Default: ``False``

    The state of a parameter is ``exp_avg`` (m), ``exp_avg_sq`` (v) and ``step`` (t).

    Example::

        >>> import mge, mge.optimizer as optim
        >>> w = mge.Parameter([1.0, 2.0])
        >>> opt = optim.LAMB([w], lr=0.1)
        >>> w.grad = mge.tensor([0.5, -3.0])
        >>> opt.step().clear_grad()
        >>> w.numpy().round(4)
        array([0.9, 2.1], dtype=float32)
    """

    def __init__(self, params, lr, betas=(0.9, 0.999), eps=1e-8, bias_correction=True,
                 weight_decay=0.0, always_adapt=False):
        _check_lamb_args(lr, betas, weight_decay)
        defaults = dict(lr=lr, weight_decay=weight_decay, betas=betas, eps=eps)
        super().__init__(params, defaults)
        self.bias_correction = bias_correction
        self.always_adapt = always_adapt
        self._disable_type_convert = True

    def _create_state(self, param_group):
        for param in param_group["params"]:
            self._add_state(param, "exp_avg")
            self._add_state(param, "exp_avg_sq")
            self._add_state(param, "step", initializer=0.0)

    def _hyper(self, param_group):
        beta0, beta1 = param_group["betas"]
        return dict(lr=_float(param_group["lr"], "lr"), beta0=_float(beta0, "betas"),
                    beta1=_float(beta1, "betas"), eps=_float(param_group["eps"], "eps"),
                    weight_decay=_float(param_group["weight_decay"], "weight_decay"),
                    bias_correction=bool(self.bias_correction),
                    always_adapt=bool(self.always_adapt))

    def _updates(self, param_group):
        hyper = self._hyper(param_group)
        for param in param_group["params"]:
            if param.grad is None:
                continue
            st = self._state[param]
            new = _lamb_step(param, param.grad, st["exp_avg"], st["exp_avg_sq"], st["step"],
                             **hyper)
            param._reset(new[0].astype(param.dtype) if new[0].dtype != param.dtype else new[0])
            st["exp_avg"]._reset(new[1])
            st["exp_avg_sq"]._reset(new[2])
            st["step"]._reset(new[3])


class LAMBFp16(LAMB):
    r""":class:`LAMB` for float16 parameters: the optimizer keeps a float32 copy of each parameter
    (state ``param_fp32``) and float32 moments, updates the copy, and writes it back to the
    parameter rounded to float16.  The arguments are :class:`LAMB`'s."""

    def _create_state(self, param_group):
        for param in param_group["params"]:
            self._add_state(param, "exp_avg")
            self._add_state(param, "exp_avg_sq")
            self._add_state(param, "step", initializer=0.0)
            fp32 = param.astype("float32")
            # (astype of a float32 parameter is the parameter itself: the copy must be its own)
            self._state[param]["param_fp32"] = copy(param) if fp32 is param else fp32

    def _updates(self, param_group):
        hyper = self._hyper(param_group)
        for param in param_group["params"]:
            if param.grad is None:
                continue
            st = self._state[param]
            fp32 = st["param_fp32"]
            new = _lamb_step(fp32, param.grad, st["exp_avg"], st["exp_avg_sq"], st["step"],
                             **hyper)
            fp32._reset(new[0])
            param._reset(new[0].astype("float16"))
            st["exp_avg"]._reset(new[1])
            st["exp_avg_sq"]._reset(new[2])
            st["step"]._reset(new[3])
