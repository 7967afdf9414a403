"""``mge/_core/device/cuda/hostbuild.py``: generated kernels built with g++ and called through
ctypes (what the CUDA kernels' host checks and the host backend stand on)."""
import ctypes
import os

import numpy as np
import pytest

from mge._core.device.cuda import hostbuild

_SOURCE = """
extern "C" void mge_test_scale(float* out, const float* x, float a, long long n)
{ for (long long i = 0; i < n; ++i) out[i] = a * x[i]; }
extern "C" void mge_test_store(int* out, long long v) { *out = (int)v; }
"""


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    why = hostbuild.why_unavailable()
    if why:
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    return hostbuild.build([_SOURCE], str(tmp_path_factory.mktemp("hostbuild")))


def test_a_built_kernel_runs_on_numpy_arrays(lib):
    fn = lib.function("mge_test_scale", [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_float,
                                          ctypes.c_longlong])
    x = np.arange(5, dtype=np.float32)
    out = np.empty_like(x)
    fn(out.ctypes.data, x.ctypes.data, 2.5, x.size)
    np.testing.assert_array_equal(out, np.float32(2.5) * x)
    assert "mge_test_scale" in lib and "mge_missing" not in lib


def test_two_argument_lists_for_one_kernel_do_not_overwrite_each_other(lib):
    as_address = lib.function("mge_test_store", [ctypes.c_void_p, ctypes.c_longlong])
    as_pointer = lib.function("mge_test_store", [ctypes.POINTER(ctypes.c_int), ctypes.c_longlong])
    box = ctypes.c_int(0)
    as_pointer(ctypes.byref(box), 7)
    assert box.value == 7
    as_address(ctypes.addressof(box), 9)  # (still takes an address after the other was made)
    assert box.value == 9


def test_units_build_side_by_side_into_one_library(tmp_path):
    if hostbuild.why_unavailable():
        pytest.skip(hostbuild.why_unavailable())
    units = [f'extern "C" int mge_unit{k}(void) {{ return {k}; }}' for k in range(3)]
    lib = hostbuild.build(units, str(tmp_path), jobs=2)
    for k in range(3):
        fn = lib.function(f"mge_unit{k}", [])
        fn.restype = ctypes.c_int
        assert fn() == k


def test_a_unit_gxx_refuses_raises_with_its_diagnostics(tmp_path):
    if hostbuild.why_unavailable():
        pytest.skip(hostbuild.why_unavailable())
    with pytest.raises(hostbuild.HostBuildError, match="mge_undeclared_name"):
        hostbuild.build(['extern "C" void f() { mge_undeclared_name(); }'], str(tmp_path))


def test_a_missing_compiler_is_explained(monkeypatch):
    monkeypatch.setenv("MGE_GXX", "/nonexistent/g++")
    assert hostbuild.find_gxx() is None
    assert "MGE_GXX=/nonexistent/g++" in hostbuild.why_unavailable()
    with pytest.raises(hostbuild.HostBuildError, match="MGE_GXX"):
        hostbuild.build(["int x;"])
