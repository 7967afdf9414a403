"""Backward rules of ``Collective``: each collective's gradient is its adjoint collective.

all_reduce_sum <-> all_reduce_sum, all_gather <-> reduce_scatter_sum, broadcast <-> reduce_sum
(to the root), gather <-> scatter, all_to_all <-> all_to_all, send <-> recv (the gradient goes
back to the sender under the tag's gradient twin).  all_reduce_max/min pass the summed gradient
to the ranks whose value was the extreme.  Every rank of the group must run its backward: the
adjoint is a collective too.
"""
from ...ops.distributed import Collective
from ..gradutil import cast, ew, run
from ..registry import def_backward

_ADJOINT = {"all_reduce_sum": "all_reduce_sum", "all_gather": "reduce_scatter_sum",
            "reduce_scatter_sum": "all_gather", "broadcast": "reduce_sum",
            "reduce_sum": "broadcast", "gather": "scatter", "scatter": "gather",
            "all_to_all": "all_to_all", "all_reduce_max": "all_reduce_sum",
            "all_reduce_min": "all_reduce_sum", "send": "recv", "recv": "send"}
GRAD_TAG = 1 << 20  # gradient messages of a send/recv pair


def _with(op, mode, **kw):
    f = dict(zip(op._fields, op._key))
    f["mode"] = mode
    f.update(kw)
    return Collective.get(*(f[k] for k in Collective._fields))


@def_backward(Collective)
def _collective_backward(op, inputs, outputs, grads, needs):
    mode = op.mode
    g = grads[0]
    if mode == "recv":  # send the gradient back to the sender (nothing to return)
        if g is not None:
            run(_with(op, "send", tag=op.tag + GRAD_TAG), g)
        return []
    if not needs[0]:
        return [None]
    x = inputs[0]
    if mode == "send":  # the receiver's gradient comes back
        return [run(_with(op, "recv", tag=op.tag + GRAD_TAG, dtype=x.dtype))]
    if g is None:  # an unused output (a non-root rank's reduce_sum): it still takes part
        g = ew("mul", outputs[0] if outputs[0] is not None else x, 0.0)
    dx = run(_with(op, _ADJOINT[mode]), g)
    if mode in ("all_reduce_max", "all_reduce_min"):
        y = outputs[0] if outputs[0] is not None else run(op, x)
        dx = ew("mul", dx, cast(ew("eq", x, y), dx.dtype))
    return [dx]
