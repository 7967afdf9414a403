"""``F.distributed``: the collectives of :mod:`mge.distributed.functional` (MegEngine's
``megengine.functional.distributed``)."""
from ..distributed.functional import (  # noqa: F401
    all_gather,
    all_reduce_max,
    all_reduce_min,
    all_reduce_sum,
    all_to_all,
    broadcast,
    collective_comm,
    gather,
    reduce_scatter_sum,
    reduce_sum,
    remote_recv,
    remote_send,
    scatter,
)
