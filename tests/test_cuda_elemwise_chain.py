"""Elementwise chains in ``jit.trace`` programs for the CUDA device (``ElemwiseChain``,
``ops/program.py``; kernels ``cuda/kernels/elemwise_chain.py``; launcher
``cuda/launch/elemwise_chain.py``; chains found by ``mge/jit/program.py``).

* the chain kernels compile with NVRTC for ``compute_90`` and an older architecture and ptxas
  assembles them for ``sm_90`` (contiguous and broadcasting forms, every storage type);
* on ``cudahost0`` a traced function's replays equal its eager runs bit for bit -- float16
  rounded at every step as the single ops round, float64, integers, comparisons to bool,
  broadcast biases and statistics, several outputs -- with fewer launches than eagerly and
  freed inputs written over in place;
* the chains stop where an op cannot join (a reduction, another shape), and a device without
  chain kernels of its own (the opaque test device, which runs the CPU's) computes them too.
"""
import re

import numpy as np
import pytest

import mge
import mge.functional as F
from mge.jit import trace
from mge.jit import program as jp
from mge._core.device.cuda import nvrtc
from mge._core.device.cuda.kernels.elemwise import program
from mge._core.device.cuda.kernels.elemwise_chain import NVRTC_OPTIONS, chain_kernel
from mge._core.ops.program import ElemwiseChain

from cuda_device_fixtures import DEV, cuda, on  # noqa: F401 (fixtures by name)
from cuda_toolchain import fast_options, missing, nvrtc_ready, old_arch  # noqa: F401

F16, F32, F64, I32, B = (np.dtype(d) for d in ("float16", "float32", "float64", "int32", "bool"))


def _chains():
    """Representative chains: (op, scalar inputs)."""
    return [
        (ElemwiseChain((("mul", (0, 1)), ("add", (2, 1))), (F32,) * 4, 2, (3,), (8,)),
         (False, True)),
        (ElemwiseChain((("mul", (0, 1)), ("exp", (2,)), ("gt", (3, 0))), (F16, F16, F16, F16, B),
                       2, (3, 4), (4, 5)), (False, False)),
        (ElemwiseChain((("floor_div", (0, 1)), ("mod", (2, 1))), (I32,) * 4, 2, (2, 3), (6,)),
         (False, False)),
        (ElemwiseChain((("sub", (0, 1)), ("true_div", (2, 1))), (F64,) * 4, 2, (3,), (3, 3)),
         (False, False)),
    ]


def _kernels():
    out = []
    for op, scalar in _chains():
        out.append(chain_kernel(op, scalar))
        out.append(chain_kernel(op, [False] * op.n_in, contiguous=False, index_bits=32))
        out.append(chain_kernel(op, [False] * op.n_in, contiguous=False, index_bits=64))
    return out


def test_chain_kernels_compile_for_hopper_and_an_older_arch(old_arch):
    kernels = _kernels()
    source = program(kernels)
    for arch in ("compute_90", old_arch):
        ptx = nvrtc.compile_ptx(source, "chain.cu", arch, fast_options(NVRTC_OPTIONS))
        entries = set(re.findall(r"\.entry\s+(\w+)", ptx))
        assert not [k.name for k in kernels if k.name not in entries]
    nvrtc.clear_cache()


def test_ptxas_assembles_the_chain_kernels_for_sm90(nvrtc_ready):
    if nvrtc.find_ptxas() is None:
        missing("ptxas is needed to assemble PTX: pip install nvidia-cuda-nvcc-cu12")
    ptx = nvrtc.compile_ptx(program(_kernels()), "chain.cu", "compute_90", NVRTC_OPTIONS)
    assert nvrtc.assemble(ptx, "sm_90", name="chain.ptx")[:4] == b"\x7fELF"
    # no contraction of x * a + b into a fused multiply-add: each step rounds as the op alone
    op, scalar = _chains()[0]
    ptx = nvrtc.compile_ptx(program([chain_kernel(op, scalar)]), "muladd.cu", "compute_90",
                            NVRTC_OPTIONS)
    assert "mul.rn.f32" in ptx and "add.rn.f32" in ptx and "fma" not in ptx
    nvrtc.clear_cache()


def test_a_chain_kernel_names_a_step_of_the_wrong_dtype():
    bad = ElemwiseChain((("add", (0, 1)),), (F32, F32, F16), 2, (2,), (3,))
    with pytest.raises(TypeError, match=r"step 0 \(add of float32, float32\) gives float32, "
                                        r"the chain says float16"):
        chain_kernel(bad, (False, False))


# -- on cudahost0 --------------------------------------------------------------------------------

def _launches(dev):
    return sum(dev.backend.launches.values())


def _check(dev, fn, make_args, symbolic, calls=3):
    """``fn`` traced equals ``fn`` eager, bit for bit, call after call; returns the launches of
    the last eager call and of the last replay."""
    traced = trace(symbolic=symbolic)(fn)
    for call in range(calls):
        args = make_args(call)
        n0 = _launches(dev)
        eager = [t.numpy() for t in _as_list(fn(*args))]
        n1 = _launches(dev)
        got = [t.numpy() for t in _as_list(traced(*args))]
        n2 = _launches(dev)
        assert len(got) == len(eager)
        for g, e in zip(got, eager):
            assert g.dtype == e.dtype and g.shape == e.shape
            np.testing.assert_array_equal(g, e)
    return n1 - n0, n2 - n1


def _as_list(x):
    return list(x) if isinstance(x, (list, tuple)) else [x]


def _data(seed, shape, dtype):
    r = np.random.default_rng(seed)
    if np.dtype(dtype).kind in "iu":
        return r.integers(-50, 50, shape).astype(dtype)
    return r.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("symbolic", [False, True], ids=["eager_record", "symbolic"])
def test_a_norm_and_activation_chain_replays_with_eagers_bits(cuda, dtype, symbolic):
    def f(x, mean, inv, bias):  # a batch norm's normalisation, its affine and a relu
        y = (x - mean) * inv * 1.5 + bias
        return F.relu(y), y * y

    def args(call):
        return (on(DEV, _data(call, (2, 3, 4, 5), dtype)), on(DEV, _data(10 + call, (1, 3, 1, 1), dtype)),
                on(DEV, np.abs(_data(20 + call, (1, 3, 1, 1), dtype)) + 1),
                on(DEV, _data(30 + call, (1, 3, 1, 1), dtype)))

    eager, replay = _check(cuda, f, args, symbolic)
    assert replay < eager  # six elementwise ops, one or two launches


def test_float16_rounds_at_every_step_as_the_single_ops(cuda):
    def f(x):  # values where float16 per step and float computed in one go differ
        return ((x * 3.3) + 0.7) * x - 1.1

    x = on(DEV, np.linspace(-60, 60, 257).astype("float16"))
    _check(cuda, f, lambda call: (x,), True)


def test_integers_comparisons_and_logic_chain(cuda):
    def f(a, b):
        q = a // b
        r = a % b
        return q * b + r, (q > 0) & (r != 0)

    def args(call):
        a = _data(call, (7, 9), "int32")
        b = _data(50 + call, (9,), "int32")
        b[b == 0] = 3
        return on(DEV, a), on(DEV, b)

    _check(cuda, f, args, True)


def test_a_chain_writes_over_its_freed_input(cuda):
    def f(x):
        y = F.exp(x) + 1  # y: a fresh buffer, freed by the chain that reads it last
        z = F.sum(y)
        return (y * 2 - 1) * y, z

    x = on(DEV, _data(0, (64,), "float32"))
    before = cuda.inplace
    _check(cuda, f, lambda call: (x,), True)
    assert cuda.inplace > before


# -- where chains stop ------------------------------------------------------------------------------

class _Rec:
    def __init__(self, ops, descs):
        self.ops, self.descs = ops, descs


def test_chains_stop_at_other_ops_and_other_shapes():
    from mge._core.ops.elemwise import Elemwise
    from mge._core.ops.reduce import Reduce
    d = {v: ((4, 5), F32, None) for v in range(20)}
    d[10] = ((4,), F32, None)
    d[11] = ((4,), F32, None)
    d[12] = ((4,), F32, None)
    ops = [
        (Elemwise("add"), (0, 1), (2,)),     # 0 \ a chain of two
        (Elemwise("mul"), (2, 1), (3,)),     # 1 /
        (Reduce("sum", 1), (3,), (10,)),     # 2   not elementwise
        (Elemwise("exp"), (10,), (11,)),     # 3 \ another shape: a chain of its own
        (Elemwise("neg"), (11,), (12,)),     # 4 /
        (Elemwise("sub"), (3, 0), (4,)),     # 5   alone: too short
    ]
    units = jp._chain_units(_Rec(ops, d), list(range(len(ops))))
    assert units == [[0, 1], 2, [3, 4], 5]


def test_a_device_that_runs_the_cpus_kernels_computes_chains_too():
    from devices import opaque
    opaque.register()

    def f(x, b):
        return F.relu(x * 2 + b) - 1

    x = mge.tensor(_data(0, (3, 4), "float32"), device="opaque0")
    b = mge.tensor(_data(1, (4,), "float32"), device="opaque0")
    traced = trace(symbolic=True)(f)
    for _ in range(3):
        np.testing.assert_array_equal(traced(x, b).numpy(), f(x, b).numpy())


def test_the_launcher_names_an_input_that_does_not_broadcast(cuda):
    op = ElemwiseChain((("add", (0, 1)),), (F32, F32, F32), 2, (2,), (4,))
    a = cuda.from_host(np.ones(4, F32))
    b = cuda.from_host(np.ones(3, F32))
    from mge._core.ops.base import TensorDesc
    with pytest.raises(ValueError, match=r"broadcast shape \(3,\) to \(4,\)"):
        cuda.execute(op, [a, b], [TensorDesc((4,), F32)])
