"""What the CUDA kernel tests need of the toolchain -- NVRTC, ptxas, g++ -- as fixtures.

A missing tool skips the tests that need it, with the reason, except under ``CI`` (which
installs the ``cuda-check`` extra's wheels and has g++), where that is a failure.
"""
import os

import pytest

from mge._core.device.cuda import hostbuild, nvrtc


def missing(message):
    """Skip with ``message``; under ``CI`` fail with it."""
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="module")
def nvrtc_ready():
    why = nvrtc.why_unavailable()
    if why:
        missing(f"NVRTC is needed to compile the CUDA kernels: {why}")


@pytest.fixture(scope="module")
def ptxas_ready():
    if nvrtc.find_ptxas() is None:
        env = os.environ.get("MGE_PTXAS")
        missing(f"ptxas is needed to assemble PTX: MGE_PTXAS={env} is no executable" if env else
                "ptxas is needed to assemble PTX: pip install nvidia-cuda-nvcc-cu12 (or set "
                "MGE_PTXAS)")


@pytest.fixture(scope="module")
def gxx_ready():
    why = hostbuild.why_unavailable()
    if why:
        missing(why)


@pytest.fixture(scope="module")
def old_arch(nvrtc_ready):
    """The oldest architecture from Volta on that this NVRTC compiles for (70 in CUDA 12, 75 in
    CUDA 13)."""
    return f"compute_{min(a for a in nvrtc.supported_archs() if a >= 70)}"


def fast_options(options=()):
    """``options`` plus ``-Ofc=max`` where NVRTC has it (12.8+): the same front end and code
    generator with little optimisation, several times faster -- for the sweeps, which check that
    every kernel compiles; representatives compile with the kernels' own flags."""
    return tuple(options) + (("-Ofc=max",) if nvrtc.nvrtc_version() >= (12, 8) else ())
