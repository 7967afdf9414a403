"""Backward rules of ``Collective`` (``mge/_core/autodiff/rules/distributed.py``) for a group of
one rank, against central differences; the multi-process gradients are checked against numpy in
``tests/test_distributed_mpi.py``."""
import numpy as np
import pytest

from gradcheck import case_id, check_vjp

from mge._core.device import as_device
from mge._core.ops.distributed import Collective

_X = np.random.RandomState(0).randn(4, 3)
_CPU = as_device(None)
_MODES = ["all_reduce_sum", "all_reduce_max", "all_reduce_min", "all_gather",
          "reduce_scatter_sum", "broadcast", "reduce_sum", "gather", "scatter", "all_to_all"]

CASES = [(Collective.get(m, (0,), 0, 0, -1, 0, _CPU), [_X]) for m in _MODES]


@pytest.mark.parametrize("case", CASES, ids=[case_id(c) for c in CASES])
def test_rule_matches_finite_differences(case):
    op, arrays = case
    check_vjp(op, *arrays)
