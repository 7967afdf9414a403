"""World size and rank for samplers: from ``mge.distributed`` when it exists and is initialised, else 1 and 0."""
import sys


def world_size_and_rank():
    """``(world_size, rank)`` of the distributed group, or ``(1, 0)``."""
    dist = sys.modules.get("mge.distributed")
    if dist is not None:
        try:
            if dist.is_distributed():
                return dist.get_world_size(), dist.get_rank()
        except Exception:  # a partial distributed module: treat as single-process
            pass
    return 1, 0


def is_distributed():
    """Whether more than one rank runs."""
    return world_size_and_rank()[0] > 1
