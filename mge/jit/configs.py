"""The option objects of ``trace`` (MegEngine's ``DTRConfig``, ``SublinearMemoryConfig``,
``GraphOptimizationConfig``), with MegEngine's fields, defaults and checks."""
import os

__all__ = ["DTRConfig", "SublinearMemoryConfig", "GraphOptimizationConfig"]


class DTRConfig:
    """DTR inside a traced function: ``eviction_threshold`` (bytes, > 0),
    ``evictee_minimum_size`` (bytes), ``recomp_memory_factor``, ``recomp_time_factor``."""

    def __init__(self, eviction_threshold: int = 0, evictee_minimum_size: int = 1 << 20,
                 recomp_memory_factor: float = 1, recomp_time_factor: float = 1):
        if not eviction_threshold > 0:
            raise ValueError("eviction_threshold must be greater to zero")
        if not evictee_minimum_size >= 0:
            raise ValueError("evictee_minimum_size must be greater or equal to zero")
        if not recomp_memory_factor >= 0:
            raise ValueError("recomp_memory_factor must be greater or equal to zero")
        if not recomp_time_factor >= 0:
            raise ValueError("recomp_time_factor must be greater or equal to zero")
        self.eviction_threshold = eviction_threshold
        self.evictee_minimum_size = evictee_minimum_size
        self.recomp_memory_factor = recomp_memory_factor
        self.recomp_time_factor = recomp_time_factor


class SublinearMemoryConfig:
    """MegBrain's sublinear memory search (accepted; mge's memory saving is DTR):
    ``thresh_nr_try``, ``genetic_nr_iter``, ``genetic_pool_size``, ``lb_memory_mb``,
    ``num_worker``."""

    def __init__(self, thresh_nr_try: int = 10, genetic_nr_iter: int = 0,
                 genetic_pool_size: int = 20, lb_memory_mb: int = 0,
                 num_worker: int = max(1, (os.cpu_count() or 2) // 2)):
        for name, value, low in (("thresh_nr_try", thresh_nr_try, 0),
                                 ("genetic_nr_iter", genetic_nr_iter, 0),
                                 ("genetic_pool_size", genetic_pool_size, 0),
                                 ("lb_memory_mb", lb_memory_mb, 0), ("num_worker", num_worker, 1)):
            if value < low:
                raise ValueError(f"{name} must be greater or equal to {low}")
        self.thresh_nr_try = thresh_nr_try
        self.genetic_nr_iter = genetic_nr_iter
        self.genetic_pool_size = genetic_pool_size
        self.lb_memory_mb = lb_memory_mb
        self.num_worker = num_worker


class GraphOptimizationConfig:
    """MegBrain's JIT fusion switches (accepted): ``jit_fuse_dimshuffle``, ``jit_fuse_reduce``
    (``None``: unset, ``False``: off, ``True``: on)."""

    def __init__(self):
        self.jit_fuse_dimshuffle = None
        self.jit_fuse_reduce = None

    def __repr__(self):
        val2str = {None: "UNSET", False: "OFF", True: "ON"}
        return (f"GraphOptimizationConfig {{ jit_fuse_dimshuffle = "
                f"{val2str[self.jit_fuse_dimshuffle]}, jit_fuse_reduce = "
                f"{val2str[self.jit_fuse_reduce]} }}")
