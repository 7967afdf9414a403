"""What the GPU-only test modules (``tests/test_cuda_gpu*.py``, marker ``gpu``) share: the device
they test and two autouse fixtures -- skip the module, with the device's own reason, unless it
can hold tensors, and leave no errors or queued work behind after each test.

``MGE_GPU_TEST_DEVICE`` names the device (default ``gpu0``); ``cpu0`` there runs the tests on the
CPU as a check of the tests themselves on a machine without a GPU.  A module imports the fixtures
by name (``from cuda_gpu_fixtures import DEV, _gpu_or_skip, _sync_after``).
"""
import os

import pytest

import mge

__all__ = ["DEV", "_gpu_or_skip", "_sync_after"]

DEV = os.environ.get("MGE_GPU_TEST_DEVICE", "gpu0")


@pytest.fixture(scope="module", autouse=True)
def _gpu_or_skip():
    """Skips the module, with the device's own reason, unless ``DEV`` can hold tensors."""
    if DEV.startswith("cpu"):
        return
    if not mge.is_cuda_available():
        try:
            mge.tensor([0.0], device=DEV).numpy()
        except Exception as e:  # the device names what is missing: pycuda, the driver, the GPU
            pytest.skip(f"{DEV} is not usable: {type(e).__name__}: {e}")
        pytest.skip(f"mge.is_cuda_available() is False, so {DEV} is not usable")


@pytest.fixture(autouse=True)
def _sync_after():
    """No test leaves errors or work behind for the next one."""
    yield
    mge._full_sync()
