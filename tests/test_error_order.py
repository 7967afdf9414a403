"""The first error the user sees is the real one.

A kernel fails; whatever uses its output next -- an op, a read, ``GradManager.backward`` --
raises the failure's own report (``AsyncError`` whose cause is the original ``IndexError``) once,
and afterwards an ``UnusableTensorError`` whose cause is the original.  Errors of ops queued
before a switch to ``async_level`` 0 are reported as asynchronous ones, not as the next op's own.
"""
import numpy as np
import pytest

import mge
import mge.functional as F
from helpers import bad_index_pair, busy_worker, clean_channel  # noqa: F401 (a fixture)
from mge._core.channel import get_channel
from mge.core import AsyncError, UnusableTensorError

pytestmark = pytest.mark.usefixtures("clean_channel")


def _failed():
    x, idx = bad_index_pair()
    y = F.nn.indexing_one_hot(x, idx)        # the kernel finds index 7 out of range
    get_channel().wait_idle()                # it has run (not a sync point: nothing raised)
    return y


def test_an_op_on_a_failed_output_raises_the_real_error_first():
    y = _failed()
    z = mge.tensor(np.ones(16, "float32")) * 2   # unrelated work in between
    with pytest.raises(AsyncError) as info:
        y + 1
    assert isinstance(info.value.__cause__, IndexError)
    np.testing.assert_array_equal(z.numpy(), np.full(16, 2, "float32"))
    with pytest.raises(UnusableTensorError) as again:   # reported once; then the cause
        y + 1
    assert isinstance(again.value.__cause__, IndexError)
    mge._full_sync()                                    # nothing left to report


def test_reading_a_failed_output_raises_the_real_error_first():
    y = _failed()
    with pytest.raises(AsyncError) as info:
        y.numpy()
    assert isinstance(info.value.__cause__, IndexError)
    with pytest.raises(UnusableTensorError) as again:
        y.numpy()
    assert isinstance(again.value.__cause__, IndexError)


def test_backward_through_a_failed_output_reports_the_real_error_first():
    # The backward ops need only the index, not the failed value: nothing misleading is raised
    # by backward, and the next sync point reports the original failure first.
    w = mge.Parameter(np.ones((4, 5), "float32"))
    gm = mge.autodiff.GradManager().attach([w])
    _, idx = bad_index_pair()
    with gm:
        with busy_worker():  # (both ops queued before the first runs: the sum sees no error)
            loss = F.nn.indexing_one_hot(w * 2, idx).sum()
        get_channel().wait_idle()            # the kernel has failed; loss inherits it silently
        gm.backward(loss)
    with pytest.raises(AsyncError) as info:
        mge._full_sync()
    assert isinstance(info.value.__cause__, IndexError)
    assert "IndexingOneHot" in str(info.value.errors[0])


def test_a_failure_queued_before_a_switch_to_level_0_is_reported_as_asynchronous():
    saved = mge.config.async_level
    try:
        y = _failed()
        mge.config.async_level = 0
        with pytest.raises(AsyncError) as info:      # not a raw IndexError from the next op
            mge.tensor(np.ones(16, "float32")) * 3
        assert isinstance(info.value.__cause__, IndexError)
        ok = mge.tensor(np.ones(16, "float32")) * 3  # the runtime goes on
        np.testing.assert_array_equal(ok.numpy(), np.full(16, 3, "float32"))
        with pytest.raises(UnusableTensorError):
            y.numpy()
    finally:
        mge.config.async_level = saved
