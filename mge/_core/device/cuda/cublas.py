"""A small ctypes binding of cuBLAS: the handle, the stream, the math mode and one GEMM.

Only what the CUDA device uses: ``cublasCreate_v2``/``cublasDestroy_v2``, ``cublasSetStream_v2``,
``cublasSetMathMode`` and ``cublasGemmStridedBatchedEx`` (every dtype of ``backend.GEMM_DTYPES``
in one entry point; a single product is a batch of one).  Importing this module loads nothing:
the library is found and opened by ``load()`` on first use, from (in this order)
``MGE_CUBLAS_LIBRARY``, the ``nvidia-cublas-cu12`` wheel's ``nvidia/cublas/lib``, the linker's
search path and ``/usr/local/cuda/lib64``; a library that cannot be found is a ``CublasError``
naming where it was looked for and how to get it.

**TF32.**  The handle's math mode is ``CUBLAS_DEFAULT_MATH`` and float32 GEMMs compute in
``CUBLAS_COMPUTE_32F``, so float32 products round as float32 arithmetic does (as on the CPU);
``Cublas(allow_tf32=True)`` selects ``CUBLAS_COMPUTE_32F_FAST_TF32`` and
``CUBLAS_TF32_TENSOR_OP_MATH`` (Ampere and later: tensor cores, 10-bit mantissas in the
products).  float16 accumulates in float32, float64 in float64.

Every call's status is checked: a failure raises ``CublasError`` with the status's name
(``STATUS_NAMES``).
"""
import ctypes
import ctypes.util
import glob
import os
import threading

import numpy as np

__all__ = ["CublasError", "Cublas", "STATUS_NAMES", "status_name", "candidates", "load",
           "gemm_types", "OP", "CUDA_R", "COMPUTE"]

#: cublasStatus_t -> its name
STATUS_NAMES = {
    0: "CUBLAS_STATUS_SUCCESS", 1: "CUBLAS_STATUS_NOT_INITIALIZED",
    3: "CUBLAS_STATUS_ALLOC_FAILED", 7: "CUBLAS_STATUS_INVALID_VALUE",
    8: "CUBLAS_STATUS_ARCH_MISMATCH", 11: "CUBLAS_STATUS_MAPPING_ERROR",
    13: "CUBLAS_STATUS_EXECUTION_FAILED", 14: "CUBLAS_STATUS_INTERNAL_ERROR",
    15: "CUBLAS_STATUS_NOT_SUPPORTED", 16: "CUBLAS_STATUS_LICENSE_ERROR",
}
OP = {"N": 0, "T": 1}                                       # cublasOperation_t
CUDA_R = {np.dtype("float16"): 2, np.dtype("float32"): 0, np.dtype("float64"): 1}  # cudaDataType
COMPUTE = {"32F": 68, "32F_FAST_TF32": 77, "64F": 70}       # cublasComputeType_t
_GEMM_DEFAULT = -1                                          # cublasGemmAlgo_t
_DEFAULT_MATH, _TF32_TENSOR_OP_MATH = 0, 3                  # cublasMath_t


def status_name(status):
    """The name of a ``cublasStatus_t`` (``"CUBLAS_STATUS_<unknown 42>"`` for an unknown one)."""
    return STATUS_NAMES.get(status, f"CUBLAS_STATUS_<unknown {status}>")


class CublasError(RuntimeError):
    """A cuBLAS call failed (``status`` its name, ``call`` the function), or the library is
    missing (``status`` is ``None``)."""

    def __init__(self, message, status=None, call=None):
        super().__init__(message)
        self.status, self.call = status, call


def _wheel_lib_dirs():
    try:
        import nvidia  # a namespace package of the nvidia-*-cu12 wheels
    except ImportError:
        return []
    return [os.path.join(p, "cublas", "lib") for p in getattr(nvidia, "__path__", ())]


def candidates():
    """Where libcublas may be, in the order tried (see the module docstring)."""
    env = os.environ.get("MGE_CUBLAS_LIBRARY")
    if env:
        return [env]  # an explicit choice is the only one tried
    found = []
    for d in _wheel_lib_dirs():
        found += sorted(glob.glob(os.path.join(d, "libcublas.so*")), reverse=True)
    name = ctypes.util.find_library("cublas")
    if name:
        found.append(name)
    found += sorted(glob.glob("/usr/local/cuda/lib64/libcublas.so*"), reverse=True)
    return [f for f in found if "libcublasLt" not in f]


_lock = threading.Lock()
_state = {}


def _declare(lib):
    c_int, c_void_p, c_longlong = ctypes.c_int, ctypes.c_void_p, ctypes.c_longlong
    lib.cublasCreate_v2.argtypes = (ctypes.POINTER(c_void_p),)
    lib.cublasDestroy_v2.argtypes = (c_void_p,)
    lib.cublasSetStream_v2.argtypes = (c_void_p, c_void_p)
    lib.cublasSetMathMode.argtypes = (c_void_p, c_int)
    lib.cublasGemmStridedBatchedEx.argtypes = (
        c_void_p, c_int, c_int, c_int, c_int, c_int,
        c_void_p, c_void_p, c_int, c_int, c_longlong,
        c_void_p, c_int, c_int, c_longlong,
        c_void_p, c_void_p, c_int, c_int, c_longlong,
        c_int, c_int, c_int)
    for fn in (lib.cublasCreate_v2, lib.cublasDestroy_v2, lib.cublasSetStream_v2,
               lib.cublasSetMathMode, lib.cublasGemmStridedBatchedEx):
        fn.restype = c_int
    return lib


def load():
    """The opened libcublas (opened on the first call); ``CublasError`` when none can be."""
    with _lock:
        if "lib" not in _state and "error" not in _state:
            tried = []
            for path in candidates():
                try:
                    _state["lib"] = _declare(ctypes.CDLL(path))
                    _state["path"] = path
                    break
                except (OSError, AttributeError) as e:
                    tried.append(f"{path}: {e}")
            else:
                where = "; ".join(tried) or "no candidate found"
                _state["error"] = ("libcublas not found (the CUDA device's matrix products need "
                                   "it: pip install nvidia-cublas-cu12, or set "
                                   f"MGE_CUBLAS_LIBRARY): {where}")
        if "error" in _state:
            raise CublasError(_state["error"])
        return _state["lib"]


def _reset_for_tests():
    with _lock:
        _state.clear()


def gemm_types(dtype, allow_tf32=False):
    """``(cudaDataType, cublasComputeType_t, scalar ctype)`` of a GEMM of ``dtype``; alpha and
    beta are passed in the compute type's precision."""
    dtype = np.dtype(dtype)
    if dtype not in CUDA_R:
        raise CublasError(f"cuBLAS GEMM: no {dtype} (float16, float32, float64)",
                          "CUBLAS_STATUS_NOT_SUPPORTED", "cublasGemmStridedBatchedEx")
    if dtype == np.float64:
        return CUDA_R[dtype], COMPUTE["64F"], ctypes.c_double
    compute = "32F_FAST_TF32" if allow_tf32 and dtype == np.float32 else "32F"
    return CUDA_R[dtype], COMPUTE[compute], ctypes.c_float


class Cublas:
    """A cuBLAS handle (create it with the GPU's context current): ``set_stream(handle)``,
    ``gemm(...)`` in ``backend.check_gemm``'s terms, ``close()``.  ``lib`` defaults to
    ``load()`` (the tests pass a fake)."""

    def __init__(self, allow_tf32=False, lib=None):
        self.lib = lib if lib is not None else load()
        self.allow_tf32 = allow_tf32
        handle = ctypes.c_void_p()
        self._check(self.lib.cublasCreate_v2(ctypes.byref(handle)), "cublasCreate_v2")
        self.handle = handle
        mode = _TF32_TENSOR_OP_MATH if allow_tf32 else _DEFAULT_MATH
        self._check(self.lib.cublasSetMathMode(self.handle, mode), "cublasSetMathMode")

    @staticmethod
    def _check(status, call):
        if status != 0:
            raise CublasError(f"{call} failed: {status_name(status)}", status_name(status), call)

    def set_stream(self, stream_handle):
        """Issue this handle's work on the CUDA stream ``stream_handle`` (an int; 0: default)."""
        self._check(self.lib.cublasSetStream_v2(self.handle, ctypes.c_void_p(stream_handle or None)),
                    "cublasSetStream_v2")

    def gemm(self, transa, transb, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b, beta, c,
             ldc, stride_c, batch, dtype):
        """``cublasGemmStridedBatchedEx`` (device addresses ``a``, ``b``, ``c`` as ints)."""
        data, compute, scalar = gemm_types(dtype, self.allow_tf32)
        alpha_, beta_ = scalar(alpha), scalar(beta)
        self._check(self.lib.cublasGemmStridedBatchedEx(
            self.handle, OP[transa], OP[transb], m, n, k, ctypes.byref(alpha_),
            ctypes.c_void_p(a), data, lda, stride_a, ctypes.c_void_p(b), data, ldb, stride_b,
            ctypes.byref(beta_), ctypes.c_void_p(c), data, ldc, stride_c, batch, compute,
            _GEMM_DEFAULT), "cublasGemmStridedBatchedEx")

    def close(self):
        """Destroy the handle (idempotent)."""
        if self.handle is not None:
            self._check(self.lib.cublasDestroy_v2(self.handle), "cublasDestroy_v2")
            self.handle = None
