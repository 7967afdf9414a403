"""The DataLoader's per-iterator base seed, drawn as MegEngine draws it.

MegEngine keeps ``np.random.MT19937(seed)`` beside its op RNG, reset by ``megengine.random.seed``;
every DataLoader iterator takes its next raw 32-bit value, and worker ``i`` seeds Python's and
numpy's global RNGs with ``base + i``. mge's ``mge.random.seed(s)`` restarts the stream of the
global handle from ``s``; the stream remembers ``s`` (its SeedSequence entropy), so the same
``MT19937(s)`` is rebuilt here whenever that stream is replaced, without drawing from it.
"""
import numpy as np

_state = {"stream": None, "mt": None}


def _global_stream():
    try:
        from .._core.ops import rng as _rng
        return _rng._streams.get(0)
    except Exception:  # a runtime without the stream table: fall back to OS entropy
        return None


def next_loader_seed():
    """The next base seed (an int below 2**32)."""
    stream = _global_stream()
    if _state["mt"] is None or (stream is not None and stream is not _state["stream"]):
        entropy = None
        if stream is not None:
            seq = getattr(stream.bit_generator, "seed_seq", None) or getattr(
                stream.bit_generator, "_seed_seq", None)
            entropy = getattr(seq, "entropy", None)
        _state["stream"] = stream
        _state["mt"] = np.random.MT19937(entropy)
    return int(_state["mt"].random_raw())
