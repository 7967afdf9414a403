"""Shared test setup: deterministic seeds, and which mode (compiled or pure Python) runs."""
import numpy as np
import pytest

import mge


@pytest.fixture(autouse=True)
def _seed():
    np.random.seed(0)
    mge.random.seed(0) if hasattr(mge.random, "seed") else None
    yield
    # a test that labelled a tensor "nhwc" put the format layer on the stack: the next test
    # starts with the stack as it was
    from mge.core import _format
    _format.uninstall()


def pytest_report_header(config):
    from mge.core import compiled_modules
    return f"mge modules: {compiled_modules()}"


import os as _os
import sys as _sys

_sys.path.insert(0, _os.path.dirname(__file__))  # tests/helpers.py
