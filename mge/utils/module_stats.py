"""Parameters, flops and activations of a module, from forward hooks (MegEngine 1.13's
``megengine.utils.module_stats``)::

    from mge.utils.module_stats import module_stats
    total, details = module_stats(net, input_shapes=[(1, 3, 32, 32)])
    total.param_size, total.flops, total.act_size

``module_stats`` runs the model once in eval mode with a forward hook on every module of a kind it
can count (convolutions, linear layers, batch matmul, normalisations, pooling;
``register_hook_module`` adds kinds), and returns the totals and a row per parameter, per counted
op and per activation.  The flops are MegEngine's formulas (one per multiply-add).
"""
import collections
import contextlib
import functools
import logging
from collections import namedtuple
from typing import Iterable

import numpy as np

__all__ = ["module_stats", "register_flops", "register_hook_module", "hook_modules", "get_param_stats",
           "get_activation_stats", "get_op_stats", "sizeof_fmt", "dict2table",
           "sum_param_stats", "sum_op_stats", "sum_activations_stats", "print_param_stats",
           "print_op_stats", "print_activations_stats", "print_summary", "get_dtype_bit",
           "flops_convNd", "flops_convNdTranspose", "flops_linear", "flops_norm", "flops_pool",
           "flops_adaptivePool", "flops_batchmatmul", "set_module_mode_safe",
           "enable_receptive_field", "disable_receptive_field", "register_receptive_field",
           "preprocess_receptive_field", "get_logger", "MegEngineLogFormatter", "Tensor"]

from ..logger import MegEngineLogFormatter, get_logger  # noqa: E402,F401 (MegEngine's names)
from ..tensor import Tensor  # noqa: E402,F401

logger = logging.getLogger(__name__)

_calc_flops_dict = {}
_calc_receptive_field_dict = {}
_receptive_field_enabled = False


def enable_receptive_field():
    """Let ``get_op_stats`` add ``receptive_field`` and ``stride`` to the rows of modules a
    ``register_receptive_field`` rule covers (``module_stats`` itself turns it off, as
    MegEngine's does)."""
    global _receptive_field_enabled
    _receptive_field_enabled = True


def disable_receptive_field():
    """See ``enable_receptive_field``."""
    global _receptive_field_enabled
    _receptive_field_enabled = False


def register_receptive_field(*modules):
    """Decorator: ``fn(module, inputs, outputs) -> (receptive_field, stride)`` for ``modules``
    (read by ``get_op_stats`` while receptive fields are enabled)."""
    def deco(fn):
        for m in modules:
            _calc_receptive_field_dict[m] = fn
        return fn
    return deco


def preprocess_receptive_field(module, inputs, outputs):
    """``(receptive_field, stride)`` the inputs bring: the largest ``_rf`` / ``_stride`` of the
    modules that produced them (an input's ``owner``), ``(1, 1)`` for model inputs.  mge's
    tensors do not record the module that produced them, so outside a graph that does, every
    input counts as a model input."""
    owners = [getattr(i, "owner", None) for i in inputs]
    rfs = [getattr(o, "_rf", (1, 1)) for o in owners] or [(1, 1)]
    strides = [getattr(o, "_stride", (1, 1)) for o in owners] or [(1, 1)]
    return ((max(r[0] for r in rfs), max(r[1] for r in rfs)),
            (max(t[0] for t in strides), max(t[1] for t in strides)))


def get_dtype_bit(dtype_name):
    """Bits of one element of the dtype named ``dtype_name``."""
    return np.dtype(dtype_name).itemsize * 8


def register_flops(*modules):
    """Decorator: ``fn(module, inputs, outputs) -> flops`` counts the flops of ``modules``."""
    def deco(fn):
        for m in modules:
            _calc_flops_dict[m] = fn
        return fn
    return deco


def _M():
    from .. import module as M
    return M


def _shape(t):
    return tuple(int(s) for s in t.shape)


def flops_convNd(module, inputs, outputs):
    """Flops of a convolution: ``in_channels / groups * prod(kernel_size)`` multiply-adds (plus
    one with a bias) per output element (MegEngine's formula; also for ``LocalConv2d``)."""
    bias = 1 if module.bias is not None else 0
    per = module.in_channels // module.groups * int(np.prod(module.kernel_size))
    return int(np.prod(_shape(outputs[0]))) * (per + bias)


def flops_convNdTranspose(module, inputs, outputs):
    """Flops of a transposed convolution (over its input)."""
    bias = 1 if module.bias is not None else 0
    w = module.weight.shape
    return int(np.prod(_shape(inputs[0]))) * int(np.prod(w[1:])) + \
        int(np.prod(_shape(outputs[0]))) * bias


def flops_norm(module, inputs, outputs):
    """Flops of a normalisation: 7 per input element (MegEngine's estimate)."""
    return int(np.prod(_shape(inputs[0]))) * 7


def flops_pool(module, inputs, outputs):
    """Flops of pooling: the window's size per output element."""
    k = module.kernel_size
    k = (k, k) if isinstance(k, int) else tuple(k)
    return int(np.prod(_shape(outputs[0]))) * int(np.prod(k))


def flops_adaptivePool(module, inputs, outputs):
    """Flops of adaptive pooling: the window it amounts to per output element."""
    ih, iw = _shape(inputs[0])[-2:]
    oh, ow = _shape(outputs[0])[-2:]
    return int(np.prod(_shape(outputs[0]))) * (ih // oh) * (iw // ow)


def flops_linear(module, inputs, outputs):
    """Flops of a linear layer: ``in_features`` per output element, plus ``out_features`` with
    a bias (MegEngine's formula)."""
    bias = module.out_features if module.bias is not None else 0
    return int(np.prod(_shape(outputs[0]))) * module.in_features + bias


def flops_batchmatmul(module, inputs, outputs):
    """Flops of ``BatchMatMulActivation``."""
    bias = 1 if module.bias is not None else 0
    x = _shape(inputs[0])
    w = _shape(module.weight)
    return x[0] * x[1] * (x[2] + bias) * w[-1]


def _default_rules():
    M = _M()
    rules = [("_ConvNd", None, flops_convNd), ("ConvTranspose2d", None, flops_convNdTranspose),
             ("Linear", None, flops_linear), ("BatchMatMulActivation", None, flops_batchmatmul),
             ("_BatchNorm", None, flops_norm), ("LayerNorm", None, flops_norm),
             ("GroupNorm", None, flops_norm), ("InstanceNorm", None, flops_norm),
             ("_PoolNd", None, flops_pool), ("_AdaptivePoolNd", None, flops_adaptivePool)]
    found = []
    for name, _, fn in rules:
        cls = getattr(M, name, None)
        if cls is None:
            for sub in ("conv", "batchnorm", "pooling", "adaptive_pooling", "normalization"):
                cls = getattr(getattr(M, sub, None), name, None)
                if cls is not None:
                    break
        if cls is not None:
            found.append((cls, fn))
    return found


class _HookModules(list):
    """The module classes ``module_stats`` puts a forward hook on (MegEngine's ``hook_modules``):
    the kinds it has a flops rule for, then those ``register_hook_module`` added.  The default
    kinds are found on first use, so importing this module does not import ``mge.module``."""

    _filled = False

    def _fill(self):
        if not self._filled:
            self._filled = True
            list.__init__(self, [cls for cls, _ in _default_rules()] + list(self))

    def __iter__(self):
        self._fill()
        return list.__iter__(self)

    def __contains__(self, item):
        self._fill()
        return list.__contains__(self, item)

    def __len__(self):
        self._fill()
        return list.__len__(self)

    def __getitem__(self, index):
        self._fill()
        return list.__getitem__(self, index)

    def __repr__(self):
        self._fill()
        return list.__repr__(self)


hook_modules = _HookModules()


def register_hook_module(module):
    """Put a forward hook on modules of class ``module`` (or of each class in a list) too; their
    parameters and activations are counted, and their flops where a rule (``register_flops``)
    covers them."""
    if isinstance(module, (tuple, list)):
        for m in module:
            register_hook_module(m)
    elif isinstance(module, type) and issubclass(module, _M().Module):
        hook_modules.append(module)
    else:
        raise TypeError("register_hook_module: the param type should be in [list, tuple, "
                        f"M.Module subclass], got {module!r}")


def _hooked_classes():
    return tuple(list(hook_modules) + list(_calc_flops_dict))


def _flops_of(module, inputs, outputs):
    for cls, fn in list(_calc_flops_dict.items()) + _default_rules():
        if isinstance(module, cls):
            return fn(module, inputs, outputs)
    return None


def sizeof_fmt(num, suffix="B"):
    """``num`` with a binary (bytes) or decimal unit: ``sizeof_fmt(2048) == "2.000 KiB"``."""
    if suffix == "B":
        scale, units = 1024.0, ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "Zi", "Yi"]
    else:
        scale, units = 1000.0, ["", "K", "M", "G", "T", "P", "E", "Z", "Y"]
    for unit in units:
        if abs(num) < scale or unit == units[-1]:
            return "{:3.3f} {}{}".format(num, unit, suffix)
        num /= scale


def dict2table(list_of_dict, header):
    """Rows for a table: ``header`` first, then each dict's values in the header's order."""
    return [list(header)] + [[d.get(h, "") for h in header] for d in list_of_dict]


def _format_table(rows):
    cells = [[str(c) for c in r] for r in rows]
    widths = [max(len(r[k]) for r in cells) for k in range(len(cells[0]))]
    line = "  ".join("-" * w for w in widths)
    out = [line]
    for k, r in enumerate(cells):
        out.append("  ".join(c.ljust(w) for c, w in zip(r, widths)))
        if k == 0:
            out.append(line)
    out.append(line)
    return "\n".join(out)


def get_param_stats(param):
    """A parameter's row: dtype, shape, mean, std, elements, bits, bytes."""
    dtype = np.dtype(param.dtype)
    nbits = get_dtype_bit(dtype.name)
    value = param.numpy().astype(np.float64)
    dim = int(np.prod(param.shape))
    return {"dtype": dtype, "shape": tuple(param.shape), "mean": "{:.3g}".format(value.mean()),
            "std": "{:.3g}".format(value.std()), "param_dim": dim, "nbits": nbits,
            "size": dim * nbits // 8}


def get_activation_stats(output, has_input=False):
    """An activation's row: dtype, shape, elements, bits, bytes (with mean and std when the
    model ran on real inputs)."""
    dtype = np.dtype(output.dtype)
    nbits = get_dtype_bit(dtype.name)
    dim = int(np.prod(output.shape))
    row = {"dtype": dtype, "shape": tuple(output.shape), "act_dim": dim, "nbits": nbits,
           "size": dim * nbits // 8}
    if has_input:
        v = output.numpy().astype(np.float64)
        row["mean"] = "{:.3g}".format(v.mean())
        row["std"] = "{:.3g}".format(v.std())
    return row


def get_op_stats(module, inputs, outputs):
    """A counted module's row: input and output shapes, ``flops_num`` and, while receptive
    fields are enabled, ``receptive_field`` and ``stride`` (``None`` when no rule covers the
    module)."""
    if not isinstance(outputs, (tuple, list)):
        outputs = (outputs,)
    row = {"input_shapes": [_shape(i) for i in inputs],
           "output_shapes": [_shape(o) for o in outputs]}
    flops = _flops_of(module, inputs, outputs)
    found = flops is not None
    if found:
        row["flops_num"] = int(flops)
    if _receptive_field_enabled:
        for cls, fn in _calc_receptive_field_dict.items():
            if isinstance(module, cls):
                row["receptive_field"], row["stride"] = fn(module, inputs, outputs)
                found = True
                break
    return row if found else None


def _bars(rows, key, bar_key, total, bar_length_max):
    top = max([r[key] for r in rows] + [0])
    for r in rows:
        r["ratio"] = r[key] / total if total else 0.0
        r["percentage"] = "{:.2f}%".format(r["ratio"] * 100)
        r[bar_key] = "#" * (int(r[key] / top * bar_length_max) if top else 0)


def sum_param_stats(params, bar_length_max=20):
    """Totals of the parameter rows (which gain cumulative sizes, percentages and bars)."""
    dims = size = 0
    for d in params:
        dims += int(d["param_dim"])
        size += int(d["size"])
        d["size_cum"] = sizeof_fmt(size)
    _bars(params, "size", "size_bar", size, bar_length_max)
    for d in params:
        d["size"] = sizeof_fmt(d["size"])
    params.append(dict(name="total", param_dim=dims, size=sizeof_fmt(size)))
    return dims, size, params


def sum_op_stats(flops, bar_length_max=20):
    """Total flops of the op rows (which gain cumulative flops, percentages and bars)."""
    total = 0
    for d in flops:
        total += int(d.get("flops_num", 0))
        d["flops_cum"] = sizeof_fmt(total, suffix="OPs")
    for d in flops:
        d.setdefault("flops_num", 0)
    _bars(flops, "flops_num", "bar", total, bar_length_max)
    for d in flops:
        d["flops"] = sizeof_fmt(d["flops_num"], suffix="OPs")
    flops.append(dict(name="total", flops=sizeof_fmt(total, suffix="OPs")))
    return total, flops


def sum_activations_stats(activations, bar_length_max=20):
    """Totals of the activation rows."""
    dims = size = 0
    for d in activations:
        dims += int(d["act_dim"])
        size += int(d["size"])
        d["size_cum"] = sizeof_fmt(size)
    _bars(activations, "size", "size_bar", size, bar_length_max)
    for d in activations:
        d["size"] = sizeof_fmt(d["size"])
    activations.append(dict(name="total", act_dim=dims, size=sizeof_fmt(size)))
    return dims, size, activations


def print_param_stats(params):
    """Log the parameter table."""
    header = ["name", "dtype", "shape", "mean", "std", "param_dim", "nbits", "size", "size_cum",
              "percentage", "size_bar"]
    logger.info("param stats: \n" + _format_table(dict2table(params, header)))


def print_op_stats(flops):
    """Log the flops table."""
    header = ["name", "class_name", "input_shapes", "output_shapes", "flops", "flops_cum",
              "percentage", "bar"]
    logger.info("flops stats: \n" + _format_table(dict2table(flops, header)))


def print_activations_stats(activations, has_input=False):
    """Log the activation table."""
    header = ["name", "class_name", "dtype", "shape", "nbits", "act_dim", "size", "size_cum",
              "percentage", "size_bar"]
    if has_input:
        header[4:4] = ["mean", "std"]
    logger.info("activations stats: \n" + _format_table(dict2table(activations, header)))


def print_summary(**kwargs):
    """Log the summary (item, value) table."""
    logger.info("summary\n" + _format_table([["item", "value"]] + [list(kv) for kv in kwargs.items()]))


@contextlib.contextmanager
def set_module_mode_safe(module, training=False):
    """Put ``module`` in training or eval mode for the block, then back as it was."""
    saved = [(m, m.training) for m in module.modules()]
    module.train(training)
    try:
        yield module
    finally:
        for m, t in saved:
            m.training = t


@contextlib.contextmanager
def _record_param_access(module_names, record):
    """While the model runs, a ``weight`` or ``bias`` read from a module of the model is counted
    as a parameter of that module, also when no hook sees it (a module calling another's
    ``calc_conv(x, other.weight, other.bias)``); MegEngine does the same by swapping
    ``Module.__getattribute__`` for the run."""
    if record is None:
        yield
        return
    Module = _M().Module
    had_own = "__getattribute__" in Module.__dict__
    original = Module.__getattribute__

    def recording_getattribute(module, item):
        member = original(module, item)
        if item == "weight" or item == "bias":
            name = module_names.get(id(module))
            if name is not None:
                record(name, item, member)
        return member

    Module.__getattribute__ = recording_getattribute
    try:
        yield
    finally:
        if had_own:
            Module.__getattribute__ = original
        else:
            del Module.__getattribute__


total_stats = namedtuple("total_stats", ["param_size", "param_dims", "flops", "act_size",
                                         "act_dims"])
stats_details = namedtuple("module_stats", ["params", "flops", "activations"])


def module_stats(model, inputs: Iterable[np.ndarray] = None, input_shapes: list = None,
                 cal_params: bool = True, cal_flops: bool = True, cal_activations: bool = True,
                 logging_to_stdout: bool = True, bar_length_max: int = 20):
    """Run ``model`` once (eval mode) and count its parameters, flops and activations.

    Args:
        model: the module.
        inputs: the inputs to run it on (arrays or tensors), or ``input_shapes``: shapes of
            zero float32 inputs.
        cal_params, cal_flops, cal_activations: what to count.
        logging_to_stdout: log the tables (``logging`` at INFO, logger ``mge.utils.module_stats``).
        bar_length_max: the width of the tables' bars.

    Returns ``(total_stats(param_size, param_dims, flops, act_size, act_dims),
    module_stats(params, flops, activations))`` as MegEngine does.
    """
    from .. import Tensor
    from .. import functional as F
    has_inputs = inputs is not None
    if has_inputs:
        if not isinstance(inputs, (tuple, list)):
            inputs = [inputs]

        def load(x):
            if isinstance(x, Tensor):
                return x
            if isinstance(x, np.ndarray):
                return Tensor(x)
            if isinstance(x, collections.abc.Mapping):
                return {k: load(v) for k, v in x.items()}
            if isinstance(x, (list, tuple)):
                return type(x)(load(v) for v in x) if not hasattr(x, "_fields") else \
                    type(x)(*(load(v) for v in x))
            return Tensor(x, dtype=np.float32)

        inputs = [load(x) for x in inputs]
    elif input_shapes:
        if not isinstance(input_shapes[0], (tuple, list)):
            input_shapes = [input_shapes]
        inputs = [F.zeros(tuple(s), dtype=np.float32) for s in input_shapes]
    else:
        raise ValueError("module_stats needs inputs or input_shapes to run the model")
    params, flops, activations, hooks = [], [], [], []
    seen = set()

    def hook(module, ins, outs, name=""):
        class_name = type(module).__name__
        if cal_flops:
            st = get_op_stats(module, ins, outs)
            if st is not None:
                st["name"] = name
                st["class_name"] = class_name
                flops.append(st)
        if cal_params:
            for attr in ("weight", "bias"):
                record_param(name, attr, getattr(module, attr, None))
        if cal_activations:
            out = outs[0] if isinstance(outs, (tuple, list)) else outs
            st = get_activation_stats(out, has_inputs)
            st["name"] = name
            st["class_name"] = class_name
            activations.append(st)

    def record_param(name, attr, p):
        if p is not None and id(p) not in seen and hasattr(p, "numpy"):
            st = get_param_stats(p)
            st["name"] = name + ("-w" if attr == "weight" else "-b")
            params.append(st)
            seen.add(id(p))

    classes = _hooked_classes()
    module_names = {}
    for name, m in model.named_modules():
        module_names.setdefault(id(m), name)
        if isinstance(m, classes):
            hooks.append(m.register_forward_hook(functools.partial(hook, name=name)))
    try:
        with set_module_mode_safe(model, training=False), \
                _record_param_access(module_names, record_param if cal_params else None):
            model(*inputs)
    finally:
        for h in hooks:
            h.remove()
    extra = {"#params": len(params)}
    tf = tpd = tps = tad = tas = 0
    if cal_params:
        tpd, tps, params = sum_param_stats(params, bar_length_max)
        extra["total_param_dims"] = sizeof_fmt(tpd, suffix="")
        extra["total_param_size"] = sizeof_fmt(tps)
        if logging_to_stdout:
            print_param_stats(params)
    if cal_flops:
        tf, flops = sum_op_stats(flops, bar_length_max)
        extra["total_flops"] = sizeof_fmt(tf, suffix="OPs")
        if logging_to_stdout:
            print_op_stats(flops)
    if cal_activations:
        tad, tas, activations = sum_activations_stats(activations, bar_length_max)
        extra["total_act_dims"] = sizeof_fmt(tad, suffix="")
        extra["total_act_size"] = sizeof_fmt(tas)
        if logging_to_stdout:
            print_activations_stats(activations, has_inputs)
    if cal_flops and cal_params and tps:
        extra["flops/param_size"] = "{:3.3f}".format(tf / tps)
    if logging_to_stdout:
        print_summary(**extra)
    return (total_stats(param_size=tps, param_dims=tpd, flops=tf, act_size=tas, act_dims=tad),
            stats_details(params=params, flops=flops, activations=activations))
