"""The optimizers' fused update ops (``SGDUpdate``, ``AdamUpdate``...) and their shape rule.

Each optimizer of ``mge.optimizer`` updates one parameter with one op: its inputs are the
parameter, its gradient and its state tensors, its outputs the new parameter and the new states,
each with its input's shape and dtype.  The updates are never recomputed (DTR and drop keep their
outputs: a recorded update would chain every step's parameters to the previous step's) and have
no backward rule (they run after backward, outside any recording).  Kernels:
``device/cpu/kernels/optimizer.py``.
"""
from .base import OpDef, TensorDesc, def_infer, op_error

__all__ = ["UpdateOp", "SGDUpdate", "AdamUpdate", "AdagradUpdate", "AdadeltaUpdate",
           "RMSpropUpdate"]


class UpdateOp(OpDef):
    """Base of the fused update ops: inputs ``(param, grad, *states)``, outputs
    ``(param, *states)``, each output with its input's shape and dtype."""

    long_running = False
    never_recompute = True
    trace_parameters = True  # a learning-rate schedule changes lr between traced steps


def _infer_update(op, descs):
    if len(descs) < 2:
        raise op_error(TypeError, op, f"needs a parameter and its gradient, got {len(descs)} inputs")
    (pshape, pdtype), (gshape, gdtype) = descs[0], descs[1]
    if pdtype.kind != "f" or gdtype.kind != "f":
        raise op_error(TypeError, op, "parameters and gradients must be floating point", descs)
    if pshape is not None and gshape is not None and pshape != gshape:
        raise op_error(
            ValueError, op,
            f"the gradient's shape {gshape} does not match the parameter's shape {pshape}", descs,
        )
    return [TensorDesc(pshape, pdtype)] + [TensorDesc(s, d) for s, d in descs[2:]]


def def_update_op(cls):
    """Class decorator: register the shape/dtype rule every fused update op shares."""
    def_infer(cls)(_infer_update)
    return cls


@def_update_op
class SGDUpdate(UpdateOp):
    """One SGD step of one parameter: ``(param, grad[, momentum_buffer])`` -> new values."""

    _fields = ("lr", "momentum", "weight_decay", "nesterov")


@def_update_op
class AdamUpdate(UpdateOp):
    """One Adam step of one parameter: ``(param, grad, exp_avg, exp_avg_sq, step)`` -> new values.

    ``decoupled`` selects AdamW's weight decay (added to the update) over Adam's (added to the
    gradient).
    """

    _fields = ("lr", "beta0", "beta1", "eps", "weight_decay", "decoupled")


@def_update_op
class AdagradUpdate(UpdateOp):
    """One Adagrad step of one parameter: ``(param, grad, square_avg, step)`` -> new values."""

    _fields = ("lr", "lr_decay", "eps", "weight_decay")


@def_update_op
class AdadeltaUpdate(UpdateOp):
    """One Adadelta step of one parameter: ``(param, grad, square_avg, acc_delta, step)`` -> new
    values."""

    _fields = ("lr", "rho", "eps", "weight_decay")


@def_update_op
class RMSpropUpdate(UpdateOp):
    """One RMSprop step of one parameter.

    Inputs ``(param, grad, square_avg, step[, momentum_buffer][, grad_avg])``, the optional states
    present when ``momentum != 0`` and when ``centered``; the outputs are their new values.
    """

    _fields = ("lr", "alpha", "eps", "weight_decay", "momentum", "centered")
