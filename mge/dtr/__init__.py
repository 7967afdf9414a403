"""Dynamic Tensor Rematerialization: train in less memory than the activations need.

MegEngine's ``megengine.dtr``.  After :func:`enable`, the channel records how every large tensor
was computed; before each op, while the device's used memory is over :data:`eviction_threshold`,
it evicts the tensor with the smallest score (recompute cost over bytes times staleness, the DTR
paper's heuristic) and recomputes evicted tensors from their producers when they are used again.
Results are bit-identical to a run without DTR.

Unlike MegEngine's, mge's DTR works on the CPU device: the budget is compared with the CPU's live
tensor bytes (``mge.device.get_allocated_memory()``).  See the guide ``docs/guides/dtr.rst``.

The options are module attributes, as in MegEngine::

    >>> import mge
    >>> mge.dtr.eviction_threshold = "2GB"
    >>> mge.dtr.eviction_threshold
    2147483648
    >>> mge.dtr.evictee_minimum_size = "1MB"
    >>> mge.dtr.enable()
    >>> mge.dtr.disable()
    >>> mge.dtr.eviction_threshold = 0
"""
import numbers
import re
import sys
import types

from .._core.channel import get_channel

__all__ = ["enable", "disable", "eviction_threshold", "evictee_minimum_size",
           "enable_sqrt_sampling", "stats", "reset_stats"]


_UNITS = ("b", "kb", "mb", "gb")
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([kmg]?b)", re.IGNORECASE)


def _str2bytes(text):
    found = _SIZE.findall(text)
    if len(found) != 1:
        raise ValueError(
            "Formatting of `value` only supports bytes(B), kilobyte(KB), megabyte(MB) and "
            "gigabyte(GB) units")
    number, unit = found[0]
    return int(float(number) * 1024 ** _UNITS.index(unit.lower()))


def _bytes(value, what):
    # MegEngine's rules: a string with a unit, or an int (bool is an int, as in Python).
    if isinstance(value, str):
        n = _str2bytes(value)
    elif isinstance(value, numbers.Integral):
        n = int(value)
    else:
        raise TypeError("`value` should be a str or an int")
    if n < 0:
        # MegEngine stores the negative number, then fails in set_option with a TypeError
        raise TypeError(f"`value` should not be negative: got {value!r} for {what}")
    return n


def _set(name, value):
    get_channel().set_option(name, value)


def _get(name):
    return get_channel().get_option(name)


def _get_eviction_threshold(mod):
    return _get("dtr_eviction_threshold")


def _set_eviction_threshold(mod, value):
    _set("dtr_eviction_threshold", _bytes(value, "eviction_threshold"))


def _get_evictee_minimum_size(mod):
    return _get("dtr_evictee_minimum_size")


def _set_evictee_minimum_size(mod, value):
    _set("dtr_evictee_minimum_size", _bytes(value, "evictee_minimum_size"))


def _get_enable_sqrt_sampling(mod):
    return bool(_get("enable_dtr_sqrt_sampling"))


def _set_enable_sqrt_sampling(mod, value):
    if not isinstance(value, numbers.Integral):  # bool is an Integral
        raise TypeError(f"`value` should be a bool, got {type(value).__name__}")
    _set("enable_dtr_sqrt_sampling", int(bool(value)))


def enable():
    r"""Enable to record computing path of tensors and to perform DTR policy.

    Sets the channel options ``enable_dtr_auto_drop``, ``enable_drop`` and
    ``record_computing_path``.  Tensors computed from now on can be evicted; set
    :data:`eviction_threshold` too, or nothing is evicted (a threshold of 0 means no budget).
    """
    _set("enable_dtr_auto_drop", 1)
    _set("enable_drop", 1)
    _set("record_computing_path", 1)


def disable():
    r"""Stop recording computing path of tensors and performing DTR policy.

    Also clears the candidates: nothing is evicted any more.  Tensors evicted earlier are still
    recomputed when they are used.
    """
    _set("enable_dtr_auto_drop", 0)
    _set("enable_drop", 0)
    _set("record_computing_path", 0)
    ch = get_channel()
    ch.wait_idle()  # the worker is idle: its DTR state can be changed from here
    ch.dtr.clear_candidates()


def stats():
    r"""DTR's counters since the start or the last :func:`reset_stats` (not in MegEngine).

    Waits for the ops issued so far, then returns a dict:

    * ``evictions``: tensors evicted to keep memory under :data:`eviction_threshold`;
    * ``evicted_bytes``: the bytes those evictions freed;
    * ``recomputations``: ops run again to regenerate evicted (or ``_drop``-ped) tensors;
    * ``recomputed_bytes``: the bytes they regenerated;
    * ``recompute_time``: seconds spent in those recomputations;
    * ``candidates``: tensors that can be evicted now.

    Example::

        >>> import mge
        >>> sorted(mge.dtr.stats())
        ['candidates', 'evicted_bytes', 'evictions', 'recomputations', 'recompute_time', 'recomputed_bytes']
    """
    ch = get_channel()
    ch.wait_idle()
    return ch.dtr.stats()


def reset_stats():
    r"""Start the counters of :func:`stats` afresh (not in MegEngine)."""
    ch = get_channel()
    ch.wait_idle()
    ch.dtr.reset_stats()


class _DtrModule(types.ModuleType):
    # MegEngine makes these module attributes properties (with ``mprop``); a module subclass does
    # the same without the dependency.
    eviction_threshold = property(_get_eviction_threshold, _set_eviction_threshold, doc=(
        "The eviction threshold in bytes (an int, or a string such as ``\"2GB\"`` or "
        "``\"500MB\"``; units B, KB, MB, GB).  While the used memory of the device exceeds it, "
        "DTR evicts tensors before each op.  0 (the default): no budget."))
    evictee_minimum_size = property(_get_evictee_minimum_size, _set_evictee_minimum_size, doc=(
        "Only tensors strictly larger than this (bytes, or a string with a unit; default 1MB) "
        "become candidates for eviction."))
    enable_sqrt_sampling = property(_get_enable_sqrt_sampling, _set_enable_sqrt_sampling, doc=(
        "Whether to score only about sqrt(N) of the N candidates, drawn at random, when choosing "
        "a tensor to evict (faster with very many candidates).  Default False."))


sys.modules[__name__].__class__ = _DtrModule
