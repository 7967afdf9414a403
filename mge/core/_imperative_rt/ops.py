"""``_imperative_rt.ops``: RNG handles and the global seed (MegEngine's ``new_rng_handle``,
``delete_rng_handle``, ``set_global_rng_seed``, ``get_global_rng_seed``), over mge's per-handle
seed streams (``mge/_core/ops/rng.py``), and the op classes of :mod:`mge.core.ops.builtin`."""
import numpy as np

from ..._core.ops import rng as _rng
from ..ops.builtin import *  # noqa: F401,F403

__all__ = ["new_rng_handle", "delete_rng_handle", "set_global_rng_seed", "get_global_rng_seed"]



def new_rng_handle(comp_node, seed):
    """A new RNG handle whose stream starts from ``seed`` (``comp_node`` is accepted for
    MegEngine's signature: mge's streams are not tied to a device)."""
    return _rng.new_handle(int(seed))


def delete_rng_handle(handle):
    """Forget the stream of ``handle``."""
    _rng.delete_handle(handle)


def set_global_rng_seed(seed):
    """Restart the global stream (handle 0) from ``seed``, as ``mge.random.seed``."""
    _rng.seed_handle(0, int(seed))


def get_global_rng_seed():
    """The seed the global stream was last started from (:func:`set_global_rng_seed`,
    ``mge.random.seed``); a fresh random seed, which then starts the stream, if none was given."""
    seed = _rng._seeds.get(0)
    if seed is None:
        seed = int(np.random.SeedSequence().entropy % (2 ** 31))
        _rng.seed_handle(0, seed)
    return seed
