"""The CUDA device (``mge/_core/device/cuda/device.py``) under the whole runtime, without a GPU.

``cudahost0`` (``tests/devices/cuda_host.py``) is ``CudaDevice`` over ``HostBackend``: host memory
at real addresses, the generated kernel sources built with g++, cuBLAS's GEMM emulated in numpy
with its column-major semantics.  Here, through ``mge.tensor(..., device="cudahost0")``:

* transfers both ways (every dtype, 0-d and empty shapes), and the buffers are the device's own;
* elementwise ops of every arity, broadcasting, strided views, mixed dtypes and TypeCvt, against
  the CPU device (bit for bit where the formulas are the same; transcendental functions within a
  few ulp, ``kernels/elemwise.py``'s ``DIFFERENCES``);
* matrix products with transposes and batches against a float64 reference, and the
  row-major -> column-major plan itself (``launch/matmul.py``);
* the views (no kernel, shared storage), in-place reuse of a freed input;
* the pool: exact memory figures, ``free_beside``, the out-of-memory path and the OOM callbacks,
  an op without a CUDA kernel -- each leaving the runtime usable;
* a small MLP's forward and backward with ``GradManager``, equal to cpu0's;
* the GPU-free parts of the pycuda/cuBLAS backend (argument buffers, status names, the library
  search and its message).

Without g++ the tests that run kernels are skipped with the reason, except under ``CI``.
Host compute (tiny values computed at dispatch on the CPU) is switched off here, so every op
runs the device's kernels.
"""
import contextlib
import ctypes
import gc
import os
import sys

import numpy as np
import pytest

import mge
import mge.device as D
import mge.functional as F
import mge.module as M
import mge.optimizer as optim
from mge.autodiff import GradManager
from mge.core import AsyncError, get_option, set_option

from devices import cuda_host
from mge._core.device.cuda import backend as B
from mge._core.device.cuda import cublas, hostbuild, pycuda_backend
from mge._core.device.cuda.device import CudaBuffer, CudaDevice, CudaOutOfMemory
from mge._core.device.cuda.host_backend import HostBackend, HostMemoryError, LaunchError
from mge._core.device.cuda.kernels import elemwise as ek
from mge._core.device.cuda.launch import CUDA_KERNELS, lookup
from mge._core.device.cuda.kernels.launch import Buf, Gemm
from mge._core.device.cuda.launch.matmul import NeedsDense, operand_layout, plan_matmul
from mge._core.device.cuda.pool import Block
from mge._core.ops.base import OpDef, TensorDesc, def_infer

DEV = "cudahost0"
DTYPES = ("bool", "int8", "uint8", "int16", "uint16", "int32", "int64", "float16", "float32",
          "float64")


def _missing(message):
    if os.environ.get("CI"):  # CI installs g++: there a missing one fails
        pytest.fail(message)
    pytest.skip(message)


# The kernels the tests below launch, built into one library up front (one g++ run instead of
# one per kernel): (mode, input dtypes) for Elemwise, (src, dst) for TypeCvt; each in the
# contiguous and the 32-bit general variant.
_ELEMWISE = [
    ("add", ("float32", "float32")), ("sub", ("float32", "float32")),
    ("mul", ("float32", "float32")), ("true_div", ("float32", "float32")),
    ("max", ("float32", "float32")), ("lt", ("float32", "float32")),
    ("exp", ("float32",)), ("relu", ("float32",)), ("neg", ("float32",)), ("tanh", ("float32",)),
    ("switch_gt0", ("float32", "float32")), ("abs", ("int32",)), ("add", ("int32", "int32")),
    ("mul", ("int32", "int32")), ("floor_div", ("int32", "int32")),
    ("clip", ("float32", "float32", "float32")),
    ("cond_leq_mov", ("float32", "float32", "float32")), ("add", ("float16", "float16")),
    ("mul", ("float16", "float16")), ("add", ("float64", "float64")), ("and", ("bool", "bool")),
    ("add", ("int16", "int16")), ("mul", ("float64", "float64")), ("pow", ("float32", "float32")),
]
_TYPECVT = [("int32", "float32"), ("uint8", "int16"), ("float32", "float16"),
            ("float16", "float32"), ("float32", "int32"), ("bool", "float32"),
            ("float64", "float32"), ("int32", "float16"), ("int8", "float32"),
            ("float32", "float64")] + [(d, d) for d in DTYPES]


@pytest.fixture(scope="module")
def cuda():
    """``cudahost0``'s ``CudaDevice``, with the tests' kernels built; host compute off."""
    why = hostbuild.why_unavailable()
    if why:
        _missing(f"g++ is needed to run the CUDA kernels on the host: {why}")
    dev = cuda_host.device(DEV)
    kernels = []
    for mode, ins in _ELEMWISE:
        for contiguous, bits in ((True, 64), (False, 32)):
            kernels.append(ek.elemwise_kernel(mode, ins, contiguous=contiguous, index_bits=bits))
    for src, dst in _TYPECVT:
        for contiguous, bits in ((True, 64), (False, 32)):
            kernels.append(ek.typecvt_kernel(src, dst, contiguous=contiguous, index_bits=bits))
    if not hostbuild.have_float16():
        kernels = [k for k in kernels if "f16" not in k.name]
    dev.backend.preload(kernels)
    saved = get_option("enable_host_compute")
    set_option("enable_host_compute", 0)
    yield dev
    set_option("enable_host_compute", saved)


@pytest.fixture(params=[2, 0], ids=["async2", "async0"])
def level(request):
    old = mge.config.async_level
    mge.config.async_level = request.param
    yield request.param
    mge.config.async_level = old


def _f16(cuda):
    if not hostbuild.have_float16():
        _missing("float16 kernels need g++ 12+ (_Float16) for the host build")


def on(d, a):
    """``a`` on device ``d`` with its own dtype (mge.tensor alone makes float64 float32)."""
    a = np.asarray(a)
    return mge.tensor(a, dtype=a.dtype, device=d)


def rng(seed=0):
    return np.random.default_rng(seed)


def both(fn):
    """``fn(device)`` on cudahost0 and cpu0: two lists of host arrays (checked: same dtypes and
    shapes, and every cudahost0 result was on cudahost0)."""
    outs = fn(DEV)
    assert all(o.device == DEV for o in outs)
    got = [o.numpy() for o in outs]
    ref = [o.numpy() for o in fn("cpu0")]
    for g, r in zip(got, ref):
        assert g.dtype == r.dtype and g.shape == r.shape, (g.dtype, g.shape, r.dtype, r.shape)
    return got, ref


# == transfers ====================================================================================
@pytest.mark.parametrize("dtype", DTYPES)
def test_values_go_to_the_device_and_back_bit_for_bit(cuda, dtype):
    """Every dtype and 0-d, empty and ordinary shapes: ``numpy()`` returns the very bits put, read
    only, from a ``CudaBuffer`` whose storage is a pool block; ``.to`` moves both ways."""
    r = rng(1)
    for shape in [(), (0,), (3, 0, 2), (5,), (4, 7)]:
        a = np.asarray(r.standard_normal(shape) * 100).astype(dtype)
        t = on(DEV, a)
        buf = t._info.value
        assert isinstance(buf, CudaBuffer) and buf.shape == shape and buf.dtype == a.dtype
        owner, nbytes = cuda.storage(buf)
        assert isinstance(owner, Block) and nbytes == max(512, -(-a.nbytes // 512) * 512)
        got = t.numpy()
        assert got.dtype == a.dtype and got.shape == shape and not got.flags.writeable
        np.testing.assert_array_equal(got.reshape(-1).view(np.uint8), a.reshape(-1).view(np.uint8))
        back = t.to("cpu0")
        assert back.device == "cpu0"
        np.testing.assert_array_equal(back.numpy(), a)
        again = on("cpu0", a).to(DEV)
        np.testing.assert_array_equal(again.numpy(), a)
        assert again.device == DEV and isinstance(again._info.value, CudaBuffer)


def test_a_copy_on_the_device_is_its_own_storage(cuda):
    """``Copy`` to the same device copies (dense: device to device; a view: the relayout kernel),
    and a value moves between two cudahost devices through the host."""
    a = rng(2).standard_normal((6, 5)).astype("float32")
    t = on(DEV, a)
    c = t.to(DEV)
    tt = t.T.to(DEV)
    other = t.to("cudahost1")
    for x, want in ((c, a), (tt, a.T), (other, a)):
        np.testing.assert_array_equal(x.numpy(), want)
    assert cuda.storage(c._info.value)[0] is not cuda.storage(t._info.value)[0]
    assert tt._info.value.is_contiguous and other.device == "cudahost1"


# == elementwise ==================================================================================
def test_elementwise_of_every_arity_as_on_the_cpu(cuda, level):
    """Unary, binary and ternary modes (float and integer) give the CPU device's values: the same
    bits for arithmetic, within a few ulp for exp/tanh/pow (CUDA's and numpy's libm differ)."""
    r = rng(3)
    a = r.standard_normal((8, 16)).astype("float32")
    b = r.standard_normal((8, 16)).astype("float32") + 3
    i = r.integers(-50, 50, (8, 16)).astype("int32")
    j = r.integers(1, 9, (8, 16)).astype("int32")

    def exact(d):
        x, y, k, m = on(d, a), on(d, b), on(d, i), on(d, j)
        return [x + y, x - y, x * y, x / y, F.maximum(x, y), x < y, F.relu(x), -x, F.abs(k),
                k * m + k, k // m, F.clip(x, -0.5, 0.5)]

    def close(d):
        x, y = on(d, a), on(d, b)
        return [F.exp(x), F.tanh(x), y ** x]

    got, ref = both(exact)
    for g, e in zip(got, ref):
        np.testing.assert_array_equal(g, e)
    got, ref = both(close)
    for g, e in zip(got, ref):
        np.testing.assert_allclose(g, e, rtol=4e-7 * 8, atol=0)
    assert cuda.backend.launches["mge_ew_exp_f32_to_f32_c"] > 0


def test_broadcasting_and_views_take_the_general_kernel(cuda):
    """Broadcast shapes, a Python scalar, a transposed view and a broadcast view are read in place
    by the strided kernel (no relayout), with the CPU's values."""
    r = rng(4)
    a = r.standard_normal((4, 1, 5)).astype("float32")
    b = r.standard_normal((3, 1)).astype("float32")
    c = r.standard_normal((5, 4)).astype("float32")
    before = cuda.relayouts

    def run(d):
        x, y, z = on(d, a), on(d, b), on(d, c)
        return [x + y, x * 2.5, z.T - F.squeeze(x, 1), F.broadcast_to(y, (2, 3, 6)) * y]

    got, ref = both(run)
    for g, e in zip(got, ref):
        np.testing.assert_array_equal(g, e)
    assert cuda.relayouts == before
    assert cuda.backend.launches["mge_ew_add_f32_f32_to_f32_s32"] > 0


def test_mixed_dtypes_promote_as_on_the_cpu(cuda):
    """Mixed inputs (the dtype_promote plugin's TypeCvt, then the kernel) give the CPU's dtypes
    and values; integer arithmetic wraps as numpy's does."""
    r = rng(5)
    i8 = r.integers(-128, 127, 40).astype("int8")
    u8 = r.integers(0, 255, 40).astype("uint8")
    i32 = r.integers(-1000, 1000, 40).astype("int32")
    f = r.standard_normal(40).astype("float32")
    bb = r.random(40) > 0.5
    big = np.full(40, 2 ** 30, "int32")

    def run(d):
        return [on(d, i8) + on(d, f), on(d, u8).astype("int16") + on(d, i8).astype("int16"),
                on(d, i32) * on(d, f),
                on(d, big) + on(d, big), on(d, bb) & on(d, r.random(40) > 2), on(d, bb) + 1.5]

    got, ref = both(run)
    for g, e in zip(got, ref):
        np.testing.assert_array_equal(g, e)


@pytest.mark.parametrize("src,dst", [("int32", "float32"), ("uint8", "int16"),
                                     ("float32", "float16"), ("float16", "float32"),
                                     ("float32", "int32"), ("bool", "float32"),
                                     ("float64", "float32"), ("int32", "float16")])
def test_typecvt_is_astype(cuda, src, dst):
    """``astype`` between dtypes is numpy's (contiguous and strided inputs); to the same dtype it
    is the input's own storage."""
    if "float16" in (src, dst):
        _f16(cuda)
    a = (rng(6).standard_normal((6, 9)) * 300).astype(src)
    t = on(DEV, a)
    np.testing.assert_array_equal(t.astype(dst).numpy(), a.astype(dst))
    np.testing.assert_array_equal(t.T.astype(dst).numpy(), a.T.astype(dst))
    same = t.astype(src)
    same.numpy()
    assert cuda.storage(same._info.value)[0] is cuda.storage(t._info.value)[0]


def test_float16_elementwise(cuda):
    """float16 computes in float and rounds once (kernels/elemwise.py's DIFFERENCES): within one
    float16 ulp of the CPU's."""
    _f16(cuda)
    a = rng(7).standard_normal(64).astype("float16")
    b = rng(8).standard_normal(64).astype("float16")
    got, ref = both(lambda d: [on(d, a) + on(d, b), on(d, a) * on(d, b)])
    for g, e in zip(got, ref):
        np.testing.assert_allclose(g.astype("float32"), e.astype("float32"), rtol=1e-3, atol=1e-3)


def test_unsupported_dtypes_are_refused_by_name(cuda):
    """An elementwise op on uint32 raises a TypeError naming the op, the device and dtypes."""
    x = on(DEV, np.ones(10, "uint32"))
    with pytest.raises((TypeError, AsyncError)) as info:
        (x + x).numpy()
    err = info.value if isinstance(info.value, TypeError) else info.value.__cause__
    assert isinstance(err, TypeError)
    assert "Elemwise.add" in str(err) and DEV in str(err) and "uint32" in str(err)
    np.testing.assert_array_equal((on(DEV, np.ones(9, "float32")) * 2).numpy(), 2)


def test_a_freed_input_takes_the_output_in_place(cuda):
    """``y = f(x)`` that frees ``x`` writes into ``x``'s buffer when nothing else sees it; never
    while a view or another tensor shares it."""
    a = rng(9).standard_normal(4096).astype("float32")
    before = cuda.inplace
    x = on(DEV, a)
    y = F.exp(F.relu(x) * 2)  # the temporaries are freed by the ops that use them last
    np.testing.assert_allclose(y.numpy(), np.exp(np.maximum(a, 0) * 2), rtol=4e-6)
    assert cuda.inplace > before
    keep = x.reshape(64, 64)   # a view of x: x's buffer is not donated
    n = cuda.inplace
    z = x + 1
    del x
    np.testing.assert_array_equal(z.numpy(), a + 1)
    np.testing.assert_array_equal(keep.numpy(), a.reshape(64, 64))
    assert cuda.inplace == n


# == views ========================================================================================
def test_view_ops_share_storage_and_launch_nothing(cuda):
    """Dimshuffle, Broadcast, AddAxis, RemoveAxis and Reshape of a dense value are views (same
    block, no kernel); reshaping a transposed view copies once; values are the CPU's."""
    a = rng(10).standard_normal((3, 1, 4)).astype("float32")
    x = on(DEV, a)
    launches = sum(cuda.backend.launches.values())
    views = [x.transpose(2, 1, 0), F.broadcast_to(x, (2, 3, 5, 4)), F.expand_dims(x, (0, 3)),
             F.squeeze(x, 1), x.reshape(12), x.reshape(4, 3)]
    vals = [v.numpy() for v in views]
    assert sum(cuda.backend.launches.values()) == launches
    owner = cuda.storage(x._info.value)[0]
    assert all(cuda.storage(v._info.value)[0] is owner for v in views)
    for v, e in zip(vals, [a.transpose(2, 1, 0), np.broadcast_to(a, (2, 3, 5, 4)),
                           np.expand_dims(a, (0, 3)), a.squeeze(1), a.reshape(12), a.reshape(4, 3)]):
        np.testing.assert_array_equal(v, e)
    r = cuda.relayouts
    flat = x.transpose(2, 1, 0).reshape(12)
    np.testing.assert_array_equal(flat.numpy(), a.transpose(2, 1, 0).reshape(12))
    assert cuda.relayouts == r + 1


# == matrix products ==============================================================================
def _ref(a, b, ta, tb):
    a, b = a.astype("float64"), b.astype("float64")
    if ta and a.ndim >= 2:
        a = np.swapaxes(a, -1, -2)
    if tb and b.ndim >= 2:
        b = np.swapaxes(b, -1, -2)
    return np.matmul(a, b)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_matmul_with_transposes_matches_float64(cuda, dtype):
    """``MatrixMul`` with every transpose combination, float16/32/64, within the dtype's rounding
    of a float64 reference; a transposed operand goes to cuBLAS as it lies (op T, no copy)."""
    r = rng(11)
    tol = {"float16": 2e-2, "float32": 2e-6, "float64": 1e-13}[dtype]
    for ta in (False, True):
        for tb in (False, True):
            a = r.standard_normal((7, 5) if ta else (5, 7)).astype(dtype)
            b = r.standard_normal((6, 7) if tb else (7, 6)).astype(dtype)
            got = F.matmul(on(DEV, a), on(DEV, b), transpose_a=ta, transpose_b=tb).numpy()
            assert got.dtype == np.dtype(dtype) and got.shape == (5, 6)
            want = _ref(a, b, ta, tb)
            np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(want).max())
    before = cuda.relayouts
    a = r.standard_normal((7, 5)).astype(dtype)
    np.testing.assert_allclose(F.matmul(on(DEV, a).T, on(DEV, a)).numpy(), _ref(a.T, a, 0, 0),
                               rtol=tol, atol=tol * 10)
    assert cuda.relayouts == before
    assert (cuda.backend.gemms[-1].transa, cuda.backend.gemms[-1].transb) == (False, True)


def test_batched_matmul_broadcasts_and_takes_vectors(cuda):
    """``BatchedMatrixMul``: broadcast batch dims (stride 0), batches that do not merge (a loop of
    strided-batched GEMMs), 1-D operands on either side, transposes; a broadcast inside a matrix
    is copied dense first.  Within float32 rounding of float64."""
    r = rng(12)
    cases = [((4, 3, 5), (5, 2), False, False), ((2, 1, 3, 5), (4, 5, 6), False, False),
             ((6, 3, 5), (6, 2, 5), False, True), ((2, 5, 3), (5,), True, False),
             ((5,), (3, 5, 2), False, False), ((2, 3, 4, 5), (2, 3, 5, 6), False, False)]
    for sa, sb, ta, tb in cases:
        a = r.standard_normal(sa).astype("float32")
        b = r.standard_normal(sb).astype("float32")
        got = F.matmul(on(DEV, a), on(DEV, b), transpose_a=ta, transpose_b=tb).numpy()
        want = _ref(a, b, ta, tb)
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    a = r.standard_normal((4, 3, 5)).astype("float32")
    x = on(DEV, a)
    tr = F.matmul(x.transpose(0, 2, 1), x)  # a batch of transposed views: op T, no copy
    np.testing.assert_allclose(tr.numpy(), _ref(a, a, True, False), rtol=1e-5, atol=1e-5)
    before = cuda.relayouts
    row = F.broadcast_to(on(DEV, a[0, 0]), (3, 5))  # every row the same: stride 0
    np.testing.assert_allclose(F.matmul(row, on(DEV, a[0].T)).numpy(),
                               _ref(np.broadcast_to(a[0, 0], (3, 5)), a[0].T, 0, 0), rtol=1e-5)
    assert cuda.relayouts == before + 1


def test_matmul_edge_shapes_and_dtypes(cuda):
    """K == 0 gives zeros, an empty output nothing; an integer product has no CUDA kernel."""
    z = F.matmul(on(DEV, np.ones((3, 0), "float32")), on(DEV, np.ones((0, 4), "float32")))
    np.testing.assert_array_equal(z.numpy(), np.zeros((3, 4), "float32"))
    e = F.matmul(on(DEV, np.ones((0, 3), "float32")), on(DEV, np.ones((3, 4), "float32")))
    assert e.numpy().shape == (0, 4)
    with pytest.raises((NotImplementedError, AsyncError)) as info:
        F.matmul(on(DEV, np.ones((3, 3), "int32")), on(DEV, np.ones((3, 3), "int32"))).numpy()
    err = info.value if isinstance(info.value, NotImplementedError) else info.value.__cause__
    assert "MatrixMul" in str(err) and "int32" in str(err)


def test_the_row_major_plan_in_cublas_terms():
    """C = A @ B (row-major M x K by K x N) is cuBLAS's N x M product B^T A^T: m = N, n = M; a
    dense operand is op N with ld = its row stride, a transposed view op T with ld = its column
    stride; a broadcast batch has stride 0; dims that do not merge loop."""
    plan = plan_matmul((5, 7), (7, 1), (7, 6), (6, 1))
    assert plan.out_shape == (5, 6) and not plan.zero_fill
    f32 = np.dtype("float32")
    assert plan.calls == (Gemm(False, False, 6, 5, 7, Buf("in1"), 6, 0, Buf("in0"), 7, 0,
                               Buf("out0"), 6, 30, 1, f32, f32, f32, f32),)
    (c,) = plan_matmul((5, 7), (1, 5), (6, 7), (7, 1), False, True).calls  # A a view, B^T
    assert (c.transa, c.transb, c.lda, c.ldb) == (True, True, 7, 5)
    (c,) = plan_matmul((4, 3, 5), (15, 5, 1), (5, 2), (2, 1)).calls
    assert (c.batch, c.stride_a, c.stride_b, c.stride_c) == (4, 0, 15, 6)
    calls = plan_matmul((2, 3, 4, 5), (60, 20, 5, 1), (2, 3, 5, 6), (90, 30, 6, 1)).calls
    assert len(calls) == 1 and calls[0].batch == 6  # merged: every operand steps (2, 3) alike
    calls = plan_matmul((2, 3, 4, 5), (60, 20, 5, 1), (2, 1, 5, 6), (30, 30, 6, 1)).calls
    assert [c.batch for c in calls] == [3, 3] and calls[1].b == Buf("in0", 60 * 4)
    assert calls[1].a == Buf("in1", 30 * 4) and calls[0].stride_a == 0
    with pytest.raises(NeedsDense) as info:
        plan_matmul((3, 5), (0, 1), (5, 2), (1, 5))  # rows broadcast: the left one needs a copy
    assert info.value.which == [0]
    assert operand_layout(1, 1, 0, 0) == ("N", 1) and operand_layout(4, 1, 3, 0) == ("N", 3)
    assert operand_layout(3, 4, 1, 3) == ("T", 3) and operand_layout(3, 4, 2, 2) is None
    assert plan_matmul((3, 0), (0, 1), (0, 4), (4, 1)) == ((3, 4), (), True)


def test_host_gemm_follows_cublas_rules():
    """HostBackend's GEMM is column-major with cuBLAS's argument rules: lda below the rows of the
    stored matrix is CUBLAS_STATUS_INVALID_VALUE, beta == 0 never reads C (NaN there is
    ignored), beta != 0 accumulates, and an operand outside device memory is an illegal address."""
    be = HostBackend(capacity=1 << 22)
    a_addr, _ = be.reserve(4096)
    a = np.arange(6, dtype="float32")            # column-major 2 x 3: [[0, 2, 4], [1, 3, 5]]
    be.copy_htod(a_addr, a)
    c_addr = a_addr + 1024
    be.copy_htod(c_addr, np.full(4, np.nan, "float32"))
    f32 = np.dtype("float32")

    def gemm(ta, tb, m, n, k, alpha, lda, ldb, beta, ldc, dtype=f32):
        g = Gemm(ta, tb, m, n, k, Buf("a"), lda, 0, Buf("a"), ldb, 0, Buf("c"), ldc, 0, 1,
                 dtype, dtype, dtype, f32, alpha, beta)
        be.gemm(g, a_addr, a_addr, c_addr)

    gemm(False, True, 2, 2, 3, 1.0, 2, 2, 0.0, 2)
    out = np.empty(4, "float32")
    be.copy_dtoh(out, c_addr)
    m = a.reshape(3, 2).T
    np.testing.assert_array_equal(out.reshape(2, 2).T, m @ m.T)
    gemm(False, True, 2, 2, 3, 2.0, 2, 2, 1.0, 2)
    be.copy_dtoh(out, c_addr)
    np.testing.assert_array_equal(out.reshape(2, 2).T, 3 * (m @ m.T))
    with pytest.raises(B.GemmError, match="CUBLAS_STATUS_INVALID_VALUE: lda = 1"):
        gemm(False, False, 2, 2, 3, 1.0, 1, 3, 0.0, 2)
    with pytest.raises(B.GemmError, match="NOT_SUPPORTED"):
        gemm(False, False, 1, 1, 1, 1.0, 1, 1, 0.0, 1, np.dtype("int32"))
    with pytest.raises(HostMemoryError):
        gemm(False, False, 64, 64, 64, 1.0, 64, 64, 0.0, 64)


# == memory =======================================================================================
@pytest.fixture
def fresh():
    """A new kind ``cudamem`` (its own devices and pools, 8 MiB each): exact figures from zero."""
    cuda_host.register_kind("cudamem", capacity=8 << 20)
    gc.collect()
    yield mge._core.device.as_device("cudamem0").impl
    mge._full_sync()


def test_memory_statistics_are_the_pools_exactly(cuda, fresh):
    """``get_allocated_memory`` is the bytes of the live blocks (requests rounded to 512), equal
    to the pool's figure; the peak and the pool's reserved segments follow exactly."""
    dev = fresh
    name = "cudamem0"
    base = D.get_allocated_memory(name)
    assert base == dev.memory_stats()["allocated"] == 0
    a = on(name, np.zeros(1000, "float32"))           # 4000 bytes -> 4096
    # 1.2 MB: a large segment of 2 MiB, whose rest (under 1 MiB) stays part of the block
    b = on(name, np.zeros(300_000, "float32"))
    big = 2 << 20
    stats = dev.memory_stats()
    assert D.get_allocated_memory(name) == stats["allocated"] == 4096 + big
    assert stats["requested"] == 4000 + 1_200_000
    assert stats["reserved"] == (2 << 20) + (2 << 20) and stats["segments"] == 2
    assert D.get_reserved_memory(name) == D.get_max_reserved_memory(name) == 4 << 20
    c = a + a
    c.numpy()
    assert D.get_allocated_memory(name) == dev.memory_stats()["allocated"] == 2 * 4096 + big
    peak = D.get_max_allocated_memory(name)
    del b
    gc.collect()
    mge._full_sync()
    assert D.get_allocated_memory(name) == dev.memory_stats()["allocated"] == 2 * 4096
    assert D.get_max_allocated_memory(name) == peak == dev.memory_stats()["peak_allocated"]
    D.coalesce_free_memory()  # (the free large segment goes back)
    assert D.get_reserved_memory(name) == dev.memory_stats()["reserved"] == 2 << 20
    assert D.get_max_reserved_memory(name) == 4 << 20
    D.reset_max_memory_stats(name)
    assert D.get_max_reserved_memory(name) == 2 << 20
    assert D.get_max_allocated_memory(name) == 2 * 4096
    assert dev.empty_cache() == 0
    del a, c


def test_free_beside_is_the_pools_figure(cuda, fresh):
    """``free_beside`` of a tensor's buffer is the free bytes of the pool blocks next to it."""
    dev = fresh
    ts = [on("cudamem0", np.zeros(n, "float32")) for n in (256, 512, 1024)]  # 1, 2, 4 KiB
    bufs = [t._info.value for t in ts]
    rest = (2 << 20) - 7 * 1024
    assert [dev.free_beside(b) for b in bufs] == [0, 0, rest]
    del ts[1], bufs[1]
    gc.collect()
    assert [dev.free_beside(b) for b in bufs] == [2048, 2048 + rest]


def test_out_of_memory_is_a_clear_error_and_the_runtime_goes_on(cuda, fresh):
    """Past the device's memory the pool calls its OOM callbacks, empties its cache, then raises
    a MemoryError naming the device, what was allocated and the pool's figures -- from a put at
    once, from an op at the next read; afterwards ops run as before.  A callback that frees
    device memory (as DTR's eviction would) lets the allocation succeed."""
    dev = fresh
    name = "cudamem0"
    spare = [dev.from_host(np.ones(1 << 20, "float32"))]   # 4 MiB of 8, outside the channel
    with pytest.raises(MemoryError) as info:
        on(name, np.ones(1 << 21, "float32"))                # 8 MiB more
    assert isinstance(info.value, CudaOutOfMemory)
    assert "cudamem0" in str(info.value) and "out of memory" in str(info.value)
    x = on(name, np.ones(1 << 20, "float32"))  # 4 MiB: fits beside the other
    with pytest.raises((MemoryError, AsyncError)) as info:
        (x * x).numpy()                        # the output cannot fit
    err = info.value if isinstance(info.value, MemoryError) else info.value.__cause__
    assert isinstance(err, CudaOutOfMemory)
    assert "the output of Elemwise.mul" in str(err) and "4.00 MiB" in str(err)
    spare.pop()  # 4 MiB free again (cached: the next segment empties the cache first)
    small = on(name, np.ones(10, "float32"))
    np.testing.assert_array_equal((small * 2).numpy(), 2)
    spare.append(dev.from_host(np.ones(300_000, "float32")))  # full again: 2 MiB of it here
    calls = []

    def evict(nbytes):
        calls.append(nbytes)
        if spare:
            spare.pop()  # the buffer's block goes back to the pool now
            return True
        return False

    one = on(name, np.ones(1, "float32"))
    dev.add_oom_callback(evict)
    try:
        np.testing.assert_array_equal((F.broadcast_to(one, (300_000,)) * one).numpy()[:3], 1)
    finally:
        dev.remove_oom_callback(evict)
    assert calls == [1_200_128]  # the rounded request, once: the freed block served it
    assert dev.memory_stats()["ooms"] == 2


class _NoCudaKernel(OpDef):
    """A test-only op that no device has a kernel for."""

    long_running = False


@def_infer(_NoCudaKernel)
def _infer_no_kernel(op, descs):
    return [TensorDesc(descs[0][0], descs[0][1])]


def test_an_op_without_a_launcher_names_itself_and_the_runtime_goes_on(cuda, level):
    """An op with no CUDA launcher raises NotImplementedError naming the op and the device (at the
    call at async level 0, at the next read at level 2); other ops still run."""
    assert lookup(_NoCudaKernel) is None
    x = on(DEV, np.arange(16, dtype="float32"))
    with pytest.raises((NotImplementedError, AsyncError)) as info:
        (y,) = mge.core.apply(_NoCudaKernel(), x)
        y.numpy()
    err = info.value if isinstance(info.value, NotImplementedError) else info.value.__cause__
    assert isinstance(err, NotImplementedError)
    assert "_NoCudaKernel has no CUDA kernel yet" in str(err) and DEV in str(err)
    np.testing.assert_array_equal((x * 2).numpy(), np.arange(16) * 2)


# == training =====================================================================================
def _mlp(d, steps=3):
    # the benchmarks' MLP step in small: Linear layers with biases, relu, cross entropy (its mean
    # inside), GradManager and optimizer.SGD with momentum -- every op on the device
    r = rng(13)
    x = on(d, r.standard_normal((16, 20)).astype("float32"))
    label = mge.tensor(r.integers(0, 4, 16).astype("int32"), dtype="int32", device=d)
    with _default_device(d):
        net = M.Sequential(M.Linear(20, 12), M.ReLU(), M.Linear(12, 4))
    for p in net.parameters():
        p._reset(on(d, _MLP_INIT[tuple(p.shape)]))
    gm = GradManager().attach(net.parameters())
    opt = optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for _ in range(steps):
        with gm:
            loss = F.nn.cross_entropy(net(x), label)
            gm.backward(loss)
        opt.step().clear_grad()
        losses.append(loss.numpy())
    return losses + [p.numpy() for p in net.parameters()]


_MLP_INIT = {shape: rng(14 + k).standard_normal(shape).astype("float32") * 0.3
             for k, shape in enumerate([(12, 20), (12,), (4, 12), (4,)])}


@contextlib.contextmanager
def _default_device(d):
    old = mge.get_default_device()
    mge.set_default_device(d)
    try:
        yield
    finally:
        mge.set_default_device(old)


def test_a_small_mlp_trains_as_on_the_cpu(cuda, level):
    """Forward, backward (GradManager) and SGD steps on cudahost0 equal cpu0's within float32
    rounding."""
    got, ref = _mlp(DEV), _mlp("cpu0")
    for g, e in zip(got, ref):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)
    assert got[2] < got[0]


# == the pycuda/cuBLAS backend's GPU-free parts ===================================================
def test_kernel_arguments_are_marshalled_at_their_c_alignment():
    """The parameter buffer puts each value at its C alignment (an int before a double or a
    struct of long longs is padded), checks counts, kinds and ranges, and passes structs by
    value; the host build gets the same values through ctypes."""
    params = ("float* out", "const unsigned short* in0", "int n", "double x",
              "mge_layout<2, long long> layout")
    layout = ek.pack_layout((3, 4), [(4, 1), (0, 1)], 64)
    buf = pycuda_backend.launch_buffer(params, [0x1000, 0x2000, 7, 0.5, layout])
    raw = buf.tobytes()
    assert len(raw) == 8 + 8 + 4 + 4 + 8 + layout.dtype.itemsize
    assert np.frombuffer(raw[16:20], np.int32)[0] == 7 and raw[20:24] == b"\0" * 4
    assert np.frombuffer(raw[24:32], np.float64)[0] == 0.5 and raw[32:] == layout.tobytes()
    parsed = [B.parse_param(p) for p in params]
    assert [p.kind for p in parsed] == ["pointer", "pointer", "scalar", "scalar", "struct"]
    with pytest.raises(TypeError, match="5 parameter"):
        pycuda_backend.launch_buffer(params, [1, 2, 3])
    with pytest.raises(TypeError, match="does not fit int32"):
        pycuda_backend.launch_buffer(params, [1, 2, 2 ** 31, 0.5, layout])
    with pytest.raises(TypeError, match="struct passed by value"):
        pycuda_backend.launch_buffer(params, [1, 2, 3, 0.5, b"bytes"])
    st = B.ctypes_struct(layout.dtype)
    assert ctypes.sizeof(st) == layout.dtype.itemsize and ctypes.alignment(st) == 8
    assert pycuda_backend.arch_of((9, 0)) == "compute_90"


def test_host_launches_are_checked_as_the_driver_does(cuda):
    """Launch limits (block <= 1024 threads, shared memory) and pointers outside device memory
    are errors; the grid of a grid-stride kernel does not change its result."""
    k = ek.elemwise_kernel("add", ["float32", "float32"])
    be = cuda.backend
    mod = be.load([k])
    addr, handle = be.reserve(4096)
    be.copy_htod(addr, np.arange(8, dtype="float32"))
    be.launch(mod, k.name, (1, 1, 1), (1024, 1, 1), [addr + 64, addr, addr, 8])
    out = np.empty(8, "float32")
    be.copy_dtoh(out, addr + 64)
    np.testing.assert_array_equal(out, np.arange(8) * 2)
    with pytest.raises(LaunchError, match="1024 threads"):
        be.launch(mod, k.name, (1, 1, 1), (2048, 1, 1), [addr, addr, addr, 8])
    with pytest.raises(LaunchError, match="shared memory"):
        be.launch(mod, k.name, 1, 256, [addr, addr, addr, 8], shared_bytes=1 << 20)
    with pytest.raises(HostMemoryError):
        be.launch(mod, k.name, 1, 256, [16, addr, addr, 8])
    be.release(handle)
    with pytest.raises(HostMemoryError):
        be.copy_htod(addr, np.zeros(4, "float32"))


def test_cublas_status_names_and_gemm_arguments():
    """Status codes have cuBLAS's names; ``Cublas.gemm`` passes cublasGemmStridedBatchedEx's
    arguments in order (checked on a fake library), float32 without TF32 unless allowed."""
    assert cublas.status_name(0) == "CUBLAS_STATUS_SUCCESS"
    assert cublas.status_name(7) == "CUBLAS_STATUS_INVALID_VALUE"
    assert cublas.status_name(42) == "CUBLAS_STATUS_<unknown 42>"
    calls = []

    class FakeLib:
        def __getattr__(self, name):
            def fn(*args):
                calls.append((name, args))
                return 13 if name == "cublasDestroy_v2" else 0
            return fn

    h = cublas.Cublas(lib=FakeLib())
    assert [c[0] for c in calls] == ["cublasCreate_v2", "cublasSetMathMode"]
    assert calls[1][1][1] == 0  # CUBLAS_DEFAULT_MATH
    h.gemm("T", "N", 6, 5, 7, 1.0, 0x10, 7, 0, 0x20, 7, 35, 0.0, 0x30, 6, 30, 4, "float32")
    name, args = calls[-1]
    assert name == "cublasGemmStridedBatchedEx"
    assert args[1:6] == (1, 0, 6, 5, 7) and args[8:11] == (0, 7, 0) and args[12:15] == (0, 7, 35)
    assert args[17:20] == (0, 6, 30) and args[20:] == (4, 68, -1)
    assert cublas.gemm_types("float32", allow_tf32=True)[1] == 77
    assert cublas.gemm_types("float16")[1] == 68 and cublas.gemm_types("float64")[1] == 70
    with pytest.raises(cublas.CublasError, match="cublasDestroy_v2 failed: "
                                                 "CUBLAS_STATUS_EXECUTION_FAILED"):
        h.close()


def test_a_missing_cublas_is_explained(monkeypatch):
    """Without libcublas the first use says where it was looked for and how to get it."""
    monkeypatch.setenv("MGE_CUBLAS_LIBRARY", "/nonexistent/libcublas.so.12")
    cublas._reset_for_tests()
    try:
        assert cublas.candidates() == ["/nonexistent/libcublas.so.12"]
        with pytest.raises(cublas.CublasError, match="pip install nvidia-cublas-cu12.*"
                                                     "/nonexistent/libcublas.so.12"):
            cublas.load()
    finally:
        cublas._reset_for_tests()


def test_the_real_backend_needs_pycuda_and_says_so():
    """``CudaDevice(0)`` (the pycuda backend) on a machine without pycuda or a GPU raises the
    driver probe's reason; nothing CUDA is imported by the device's modules."""
    if "pycuda" in sys.modules or mge._core.device.cuda.driver.probe().ok:
        pytest.skip("this machine has pycuda and a GPU")
    with pytest.raises(RuntimeError, match="needs CUDA, which is not available here"):
        CudaDevice(0)
    assert "pycuda" not in sys.modules


# == DTR ==========================================================================================
def _tanh_chain(d, x, steps=20):
    ys = [on(d, x)]
    for _ in range(steps):
        ys.append(F.tanh(ys[-1]) * 1.5)  # (the temporary tanh() is a released tensor)
    return ys


def test_dtr_on_the_cuda_device_evicts_under_its_budget_and_recomputes_bit_identically(cuda,
                                                                                       fresh):
    # The mechanism of the CPU device, on the pool's blocks: its score counts the pool's free
    # bytes beside each block.
    name, n = "cudamem0", 64 * 1024  # 256 KiB a tensor
    x = rng(3).standard_normal(n).astype("float32")
    plain = [y.numpy() for y in _tanh_chain(name, x)]
    gc.collect()
    mge._full_sync()
    base = D.get_allocated_memory(name)
    try:
        mge.dtr.evictee_minimum_size = 1024
        mge.dtr.eviction_threshold = base + 5 * 4 * n
        mge.dtr.enable()
        mge.dtr.reset_stats()
        D.reset_max_memory_stats(name)
        ys = _tanh_chain(name, x)
        mge._full_sync()
        assert D.get_max_allocated_memory(name) <= base + 7 * 4 * n
        st = mge.dtr.stats()
        assert st["evictions"] > 10, st
        for y, want in zip(reversed(ys), reversed(plain)):  # regenerated on reading
            np.testing.assert_array_equal(y.numpy(), want)
        assert mge.dtr.stats()["recomputations"] > 0
    finally:
        mge.dtr.disable()
        mge.dtr.eviction_threshold = 0
        mge.dtr.evictee_minimum_size = "1MB"
        mge.dtr.reset_stats()


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # (the tiny budget on cpu0: DTR says so)
def test_dtr_switched_off_on_one_device_manages_the_next_device_it_meets(cuda, fresh):
    # DTR manages the device of its first candidate; switched off, it forgets it (MegEngine's
    # clear_candidates), so a DTR session on cpu0 whose tensors are still alive does not keep it
    # from managing the CUDA device next (it did: the order of two test files showed it)
    n = 64 * 1024
    x = rng(5).standard_normal(n).astype("float32")
    plain = _tanh_chain("cudamem0", x)[-1].numpy()
    gc.collect()
    mge._full_sync()
    from mge.jit import DTRConfig, trace
    try:
        # a traced function with DTR on cpu0: DTR on during its calls only
        f = trace(lambda t: _tanh_chain("cpu0", t, steps=8)[-1],
                  dtr_config=DTRConfig(eviction_threshold=1 << 12, evictee_minimum_size=1024))
        on_cpu = [f(mge.tensor(x[:512])) for _ in range(2)]  # alive through the next session
        mge._full_sync()
        mge.dtr.evictee_minimum_size = 1024
        base = D.get_allocated_memory("cudamem0")
        mge.dtr.eviction_threshold = base + 5 * 4 * n
        mge.dtr.enable()
        mge.dtr.reset_stats()
        D.reset_max_memory_stats("cudamem0")
        ys = _tanh_chain("cudamem0", x)
        mge._full_sync()
        assert D.get_max_allocated_memory("cudamem0") <= base + 7 * 4 * n
        assert mge.dtr.stats()["evictions"] > 10
        np.testing.assert_array_equal(ys[-1].numpy(), plain)
        assert on_cpu[-1].numpy().shape == (512,)
    finally:
        mge.dtr.disable()
        mge.dtr.eviction_threshold = 0
        mge.dtr.evictee_minimum_size = "1MB"
        mge.dtr.reset_stats()


def test_dtr_evicts_when_the_pool_runs_out_without_a_budget(cuda, fresh):
    # Without a budget (eviction_threshold 0) DTR evicts when an allocation fails, as MegEngine
    # does: the pool's out-of-memory callback evicts the best candidate and the pool tries
    # again.  40 tensors of 256 KiB do not fit the 8 MiB pool together.
    name, n = "cudamem0", 64 * 1024
    x = rng(4).standard_normal(n).astype("float32")
    want = [y.numpy() for y in _tanh_chain(DEV, x, steps=40)]  # (the big device: room for all)
    assert 41 * 4 * n > fresh.backend.mem_info()[0]  # (the chain does not fit the pool)
    try:
        mge.dtr.evictee_minimum_size = 1024
        mge.dtr.eviction_threshold = 0
        mge.dtr.enable()
        mge.dtr.reset_stats()
        ys = _tanh_chain(name, x, steps=40)
        mge._full_sync()
        assert mge.dtr.stats()["evictions"] > 5
        for y, w in zip(reversed(ys), reversed(want)):
            np.testing.assert_array_equal(y.numpy(), w)
    finally:
        mge.dtr.disable()
        mge.dtr.evictee_minimum_size = "1MB"
        mge.dtr.reset_stats()
