"""The CPU device's BLAS: numpy's own CBLAS ``sgemm``/``dgemm``, for products without the GIL.

numpy does its matrix products with the BLAS library it was built against (OpenBLAS in the wheels
on PyPI, MKL in some distributions) and loads it when it is imported.  The worker calls the same
library's CBLAS functions directly (``mge._core.device.cpu.handoff``), so that it knows when a
product ends and can take the GIL back at once; the results are those of ``np.matmul``.

``install(blas)`` looks for the functions in the libraries mapped into the process, checks
them against ``np.matmul`` on small products in every layout, and gives their addresses to
``handoff.CPU``; ``MGE_CPU_BLAS=0`` turns this off.  Where nothing is found (another OS, another BLAS
naming), kernels keep using ``np.matmul``.
"""
import ctypes
import os

import numpy as np

__all__ = ["find", "install", "threads", "INFO"]

# (sgemm, dgemm, 64-bit integers): suffixed names say their integer size; plain CBLAS names are
# LP64 unless numpy's build says its BLAS is ILP64.
_SYMBOLS = (
    ("scipy_cblas_sgemm64_", "scipy_cblas_dgemm64_", True),   # numpy >= 2 wheels (scipy-openblas)
    ("cblas_sgemm64_", "cblas_dgemm64_", True),               # numpy 1.2x wheels
    ("scipy_cblas_sgemm", "scipy_cblas_dgemm", False),
    ("cblas_sgemm", "cblas_dgemm", None),                     # MKL, system OpenBLAS
)

INFO = {"library": None, "sgemm": None, "ilp64": None, "reason": "not searched"}
# the libraries' own calls for their thread count (OpenBLAS in its names, MKL)
_THREAD_SYMBOLS = ("scipy_openblas_get_num_threads64_", "scipy_openblas_get_num_threads",
                   "openblas_get_num_threads64_", "openblas_get_num_threads", "MKL_Get_Max_Threads")


def threads():
    """The number of threads the BLAS in use runs one product on (None: not known).  With one,
    the CPU device may run two independent products at once (``CpuKernels.gemm2``)."""
    path = INFO.get("library")
    if not path or INFO.get("reason") != "in use":
        return None
    try:
        lib = ctypes.CDLL(path)
    except OSError:
        return None
    for name in _THREAD_SYMBOLS:
        fn = getattr(lib, name, None)
        if fn is not None:
            fn.restype = ctypes.c_int
            try:
                return int(fn())
            except Exception:
                return None
    return None


def _mapped_libraries():
    # Shared objects mapped into this process whose names say BLAS; numpy's own first.
    try:
        with open("/proc/self/maps") as f:
            fields = [line.split(None, 5) for line in f]
        paths = {f[5].strip() for f in fields if len(f) == 6}
    except OSError:
        return []
    names = ("blas", "mkl_rt", "libmkl")
    libs = [p for p in paths if p.startswith("/") and any(n in os.path.basename(p).lower() for n in names)]
    np_dir = os.path.dirname(os.path.dirname(np.__file__))
    return sorted(libs, key=lambda p: (not p.startswith(np_dir), p))


def _numpy_blas_is_ilp64():
    try:
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
    except Exception:  # numpy < 1.25, or a build without the section
        return None
    text = " ".join(str(v) for v in blas.values()).lower()
    return "use64bitint" in text or "ilp64" in text


def find():
    """``(library path, sgemm address, dgemm address, ilp64)`` or None."""
    for path in _mapped_libraries():
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for sname, dname, ilp64 in _SYMBOLS:
            try:
                s, d = getattr(lib, sname), getattr(lib, dname)
            except AttributeError:
                continue
            if ilp64 is None:
                ilp64 = _numpy_blas_is_ilp64()
                if ilp64 is None:
                    continue  # cannot tell the integer size: a wrong guess would crash
            addr = ctypes.cast(s, ctypes.c_void_p).value, ctypes.cast(d, ctypes.c_void_p).value
            return path, addr[0], addr[1], ilp64, sname
    return None


def _agrees(blas):
    # Every layout and transposition against np.matmul, in both precisions.
    rng = np.random.RandomState(0)
    for dtype, tol in ((np.float32, 1e-4), (np.float64, 1e-10)):
        for ta in (False, True):
            for tb in (False, True):
                for order in ("C", "F"):
                    a = rng.randn(*((47, 33) if ta else (33, 47))).astype(dtype, order=order)
                    b = rng.randn(*((29, 47) if tb else (47, 29))).astype(dtype, order=order)
                    got = blas.gemm(a, b, ta, tb)
                    want = np.matmul(a.T if ta else a, b.T if tb else b)
                    if got is None or got.dtype != want.dtype or not np.allclose(got, want, rtol=tol, atol=tol):
                        return False
    return True


def install(blas):
    """Give ``blas`` numpy's CBLAS if it is found and agrees with ``np.matmul``; returns INFO."""
    if os.environ.get("MGE_CPU_BLAS", "1") in ("0", ""):
        INFO.update(library=None, sgemm=None, ilp64=None, reason="MGE_CPU_BLAS=0")
        return INFO
    try:
        found = find()
    except Exception as e:  # an odd platform must not stop mge from starting: numpy does the work
        INFO.update(library=None, sgemm=None, ilp64=None, reason=f"search failed: {e!r}")
        return INFO
    if found is None:
        INFO.update(library=None, sgemm=None, ilp64=None, reason="no CBLAS found")
        return INFO
    path, s, d, ilp64, sname = found
    blas.set_blas(s, d, ilp64)
    if not blas.has_blas:
        INFO.update(library=path, sgemm=sname, ilp64=ilp64, reason="pure-Python modules")
        return INFO
    if not _agrees(blas):
        blas.set_blas(0, 0, False)
        INFO.update(library=path, sgemm=sname, ilp64=ilp64, reason="disagreed with np.matmul")
        return INFO
    INFO.update(library=path, sgemm=sname, ilp64=ilp64, reason="in use")
    return INFO
