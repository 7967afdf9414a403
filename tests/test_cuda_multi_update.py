"""Optimizer updates of many parameters in one launch in ``jit.trace`` programs for the CUDA
device (``MultiUpdate``, ``ops/program.py``; kernels ``cuda/kernels/multi_update.py``; launcher
``cuda/launch/multi_update.py``; groups found by ``mge/jit/program.py``'s ``_group_updates``).

* the multi-tensor kernels compile with NVRTC for ``compute_90`` and an older architecture,
  ptxas assembles them for ``sm_90``, their parameters fit CUDA's 4 KB, and they hold the very
  statements of the single updates' kernels;
* on ``cudahost0`` a group of every optimizer gives the CPU kernels' bits member by member --
  empty and one-element parameters, float16 parameters with float32 states, float64 -- in one
  launch (two with step counters), in chunks past a table's capacity, in place over donated
  inputs; a traced training step (SGD with and without momentum, Nesterov, weight decay; Adam)
  equals the eager step bit for bit step after step, with fewer launches;
* the grouping pass moves only independent updates, never past another op;
* a device that runs the CPU's kernels (the opaque test device) computes the op too.
"""
import re

import numpy as np
import pytest

import mge
import mge.functional as F
import mge.optimizer as optim
from mge.autodiff import GradManager
from mge.jit import trace
from mge.jit import program as jp
from mge._core.device.cpu.table import KERNELS
from mge._core.device.cuda import nvrtc
from mge._core.device.cuda.backend import marshal_args, pack_params, parse_param
from mge._core.device.cuda.kernels import multi_update as mk
from mge._core.device.cuda.kernels import optimizer as ok
from mge._core.device.cuda.kernels.elemwise import program
from mge._core.ops.base import INFER, TensorDesc
from mge._core.ops.elemwise import Elemwise
from mge._core.ops.optimizer import (
    AdadeltaUpdate, AdagradUpdate, AdamUpdate, RMSpropUpdate, SGDUpdate,
)
from mge._core.ops.program import MultiUpdate

from cuda_device_fixtures import DEV, cuda, on  # noqa: F401 (fixtures by name)
from cuda_toolchain import fast_options, missing, nvrtc_ready, old_arch  # noqa: F401

F16, F32, F64 = (np.dtype(d) for d in ("float16", "float32", "float64"))

SGD_PLAIN = SGDUpdate(0.1, 0.0, 0.0, False)
SGD_MOMENTUM = SGDUpdate(0.05, 0.9, 1e-3, False)
OPS = [
    SGD_PLAIN, SGD_MOMENTUM, SGDUpdate(0.05, 0.9, 0.0, True),
    AdamUpdate(1e-2, 0.9, 0.999, 1e-8, 0.01, False), AdamUpdate(1e-2, 0.9, 0.999, 1e-8, 0.01, True),
    AdagradUpdate(0.1, 0.01, 1e-10, 0.0), AdadeltaUpdate(1.0, 0.9, 1e-6, 0.01),
    RMSpropUpdate(0.01, 0.99, 1e-8, 0.0, 0.9, True),
]
#: (op, parameter dtype, state dtype): every op in float32, two in float16 and float64 too
CASES = ([(op, F32, F32) for op in OPS]
         + [(op, d, s) for op in (SGD_MOMENTUM, OPS[3]) for d, s in ((F16, F32), (F64, F64))])
SHAPES = [(3, 5), (0,), (1,), (40,), (2, 1, 3)]


def _member(op, shape, p_dt, s_dt, rng):
    """One parameter's inputs of update ``op``: (param, grad, *states) in the op's order."""
    p = rng.normal(size=shape).astype(p_dt)
    g = rng.normal(size=shape).astype(p_dt)

    def state(lo=0.0):
        return (np.abs(rng.normal(size=shape)) + lo).astype(s_dt)
    step = np.asarray(3.0, s_dt)
    cls = type(op)
    if cls is SGDUpdate:
        return [p, g] + ([state()] if op.momentum else [])
    if cls is AdamUpdate or cls is AdadeltaUpdate:
        return [p, g, state(), state(), step]
    if cls is AdagradUpdate:
        return [p, g, state(), step]
    ins = [p, g, state(1.0), step]  # square_avg above g_avg ** 2: a real centered RMSprop
    if op.momentum:
        ins.append(state())
    if op.centered:
        ins.append(state() * 0.1)
    return ins


def _group(op, p_dt, s_dt, shapes, seed=0):
    rng = np.random.default_rng(seed)
    return [_member(op, s, p_dt, s_dt, rng) for s in shapes]


def _kernels(cases=CASES):
    out = []
    for op, p_dt, s_dt in cases:
        dts = [a.dtype for a in _member(op, (2,), p_dt, s_dt, np.random.default_rng(0))]
        out.extend(mk.multi_update_kernels(op, dts).kernels)
    return list(dict.fromkeys(out))


def _entry_bodies(ptx):
    """Kernel name -> its PTX (up to the next kernel or device function: CUDA's pow, which
    Adam's corrections call, has a local frame of its own)."""
    out, name, lines = {}, None, []
    for line in ptx.splitlines():
        m = re.search(r"\.(entry|func)\s.*?(\w+)\(", line)
        if m:
            if name is not None:
                out[name] = "\n".join(lines)
            name, lines = (m.group(2) if m.group(1) == "entry" else None), []
        lines.append(line)
    if name is not None:
        out[name] = "\n".join(lines)
    return out


# -- the kernels, without a GPU --------------------------------------------------------------------

def test_multi_update_kernels_compile_for_hopper_and_an_older_arch(old_arch):
    kernels = _kernels()
    source = program(kernels)
    for arch in ("compute_90", old_arch):
        ptx = nvrtc.compile_ptx(source, "multi_update.cu", arch, fast_options(mk.NVRTC_OPTIONS))
        entries = set(re.findall(r"\.entry\s+(\w+)", ptx))
        assert not [k.name for k in kernels if k.name not in entries]
        # the table is read where the launch put it, not copied to each thread's local memory
        # (a __grid_constant__ parameter: at any optimisation level)
        bodies = _entry_bodies(ptx)
        assert not [k.name for k in kernels if "__local_depot" in bodies[k.name]]
    nvrtc.clear_cache()


def test_ptxas_assembles_the_multi_update_kernels_for_sm90(nvrtc_ready):
    if nvrtc.find_ptxas() is None:
        missing("ptxas is needed to assemble PTX: pip install nvidia-cuda-nvcc-cu12")
    ptx = nvrtc.compile_ptx(program(_kernels()), "multi_update.cu", "compute_90",
                            mk.NVRTC_OPTIONS)
    assert nvrtc.assemble(ptx, "sm_90", name="multi_update.ptx")[:4] == b"\x7fELF"
    bodies = _entry_bodies(ptx)
    assert not [name for name, body in bodies.items() if "__local_depot" in body]
    # no contraction into fused multiply-adds: each operation rounds as the CPU's
    sgd = mk.multi_update_kernels(SGD_PLAIN, (F32, F32)).update
    ptx = nvrtc.compile_ptx(program([sgd]), "sgd.cu", "compute_90", mk.NVRTC_OPTIONS)
    assert "mul.rn.f32" in ptx and ("add.rn.f32" in ptx or "sub.rn.f32" in ptx)
    assert "fma" not in ptx
    nvrtc.clear_cache()


@pytest.mark.parametrize("case", range(len(CASES)))
def test_a_full_table_and_the_parameters_fit_cudas_4kb(case):
    op, p_dt, s_dt = CASES[case]
    dts = [a.dtype for a in _member(op, (2,), p_dt, s_dt, np.random.default_rng(0))]
    ks = mk.multi_update_kernels(op, dts)
    cap = ks.capacity
    assert cap >= 32  # (a ResNet-18's 62 parameters take one or two launches)
    table = mk.pack_table(ks, list(range(1, cap + 1)),
                          [[4096 * (m + 1)] * len(ks.columns) for m in range(cap)])
    args = [table, np.int32(cap), np.int64(cap)] + [np.float64(1.0)] * len(ks.scalars)
    params = [parse_param(p) for p in ks.update.params]
    assert len(pack_params(marshal_args(params, args))) <= mk.PARAM_BYTES
    # one member more does not fit: the capacity is the most a launch takes
    wider = mk.capacity_for(len(ks.columns), len(ks.scalars)) + 1
    assert wider * 8 * (1 + len(ks.columns)) + 16 + 8 * len(ks.scalars) > mk.PARAM_BYTES
    with pytest.raises(ValueError, match="table of"):
        mk.pack_table(ks, [1] * (cap + 1), [[0] * len(ks.columns)] * (cap + 1))


@pytest.mark.parametrize("case", range(len(CASES)))
def test_the_group_kernel_runs_the_single_updates_statements(case):
    op, p_dt, s_dt = CASES[case]
    dts = [a.dtype for a in _member(op, (2,), p_dt, s_dt, np.random.default_rng(0))]
    single = ok.update_kernels(op, dts)["update"].source
    multi = mk.multi_update_kernels(op, dts).update.source
    for line in ok.update_text(op, dts).lines:
        assert line in single and line in multi


def test_the_kernels_refuse_what_the_single_updates_refuse():
    with pytest.raises(TypeError, match="unsupported dtype int32"):
        mk.multi_update_kernels(SGD_PLAIN, (F32, np.dtype("int32")))
    with pytest.raises(TypeError, match="3 inputs expected"):
        mk.multi_update_kernels(SGD_MOMENTUM, (F32, F32))


# -- on cudahost0 ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def built(cuda):
    """``cudahost0`` with every kernel of the module built in one g++ run."""
    cuda.backend.preload(_kernels())
    return cuda


def _descs(op, member):
    return list(INFER[type(op)](op, [TensorDesc(a.shape, a.dtype) for a in member]))


def _cpu(op, members):
    return [[np.asarray(o) for o in KERNELS[type(op)](op, *[a.copy() for a in m])]
            for m in members]


def _launches(dev, prefix=""):
    return sum(n for name, n in dev.backend.launches.items() if name.startswith(prefix))


def _run_group(dev, op, members, reuse=None):
    group = MultiUpdate(op, len(members))
    descs = [d for m in members for d in _descs(op, m)]
    bufs = [dev.from_host(a) for m in members for a in m]
    outs = dev.execute(group, bufs, descs, reuse)
    return [dev.to_host(b) for b in outs]


def _split(flat, members):
    n = len(flat) // len(members)
    return [flat[m * n:(m + 1) * n] for m in range(len(members))]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_a_group_gives_the_cpu_kernels_bits_in_one_launch(built, case):
    op, p_dt, s_dt = CASES[case]
    members = _group(op, p_dt, s_dt, SHAPES, seed=case)
    want = _cpu(op, members)
    before, multi = _launches(built), _launches(built, "mge_multi_opt_")
    got = _split(_run_group(built, op, members), members)
    has_step = type(op) is not SGDUpdate
    assert _launches(built) - before == _launches(built, "mge_multi_opt_") - multi == 1 + has_step
    for m, (g, w) in enumerate(zip(got, want)):
        assert len(g) == len(w)
        for k, (a, b) in enumerate(zip(g, w)):
            assert a.shape == b.shape and a.dtype == members[m][0 if k == 0 else k + 1].dtype
            np.testing.assert_array_equal(a, b.astype(a.dtype), err_msg=f"{op} member {m} out {k}")
    assert not np.array_equal(got[0][0], members[0][0])  # (the update moved the parameter)


def test_a_group_past_the_tables_capacity_runs_in_chunks(built):
    op = SGD_MOMENTUM
    cap = mk.multi_update_kernels(op, (F32, F32, F32)).capacity
    shapes = [((m * 7) % 5,) for m in range(cap + 3)]  # empty members among them
    members = _group(op, F32, F32, shapes, seed=5)
    before = _launches(built, "mge_multi_opt_")
    got = _split(_run_group(built, op, members), members)
    assert _launches(built, "mge_multi_opt_") - before == 2
    for g, w in zip(got, _cpu(op, members)):
        for a, b in zip(g, w):
            np.testing.assert_array_equal(a, b)


def test_a_group_of_empty_parameters_still_counts_its_steps(built):
    op = OPS[3]  # Adam
    members = _group(op, F32, F32, [(0,), (0, 3)], seed=2)
    before = _launches(built, "mge_multi_opt_step_")
    got = _split(_run_group(built, op, members), members)
    assert _launches(built, "mge_multi_opt_step_") - before == 1
    assert [float(g[-1]) for g in got] == [4.0, 4.0]


def test_a_group_writes_over_its_donated_parameters_and_states(built):
    op = OPS[3]  # Adam: parameter, both moments and the counter in place
    members = _group(op, F32, F32, SHAPES, seed=3)
    want = _cpu(op, members)
    n = len(members[0])
    reuse = [m * n + k for m in range(len(members)) for k in (0, 2, 3, 4)]
    group = MultiUpdate(op, len(members))
    descs = [d for m in members for d in _descs(op, m)]
    bufs = [built.from_host(a) for m in members for a in m]
    addresses = [b.address for b in bufs]
    before = built.inplace
    outs = built.execute(group, bufs, descs, reuse)
    del bufs
    assert built.inplace - before == 4 * len(members)
    for m in range(len(members)):
        mine = outs[m * (n - 1):(m + 1) * (n - 1)]
        # the new parameter over the old one, state j over input j + 1
        assert [b.address for b in mine] == [addresses[m * n + k] for k in (0, 2, 3, 4)]
        for k, (b, w) in enumerate(zip(mine, want[m])):
            np.testing.assert_array_equal(built.to_host(b), w, err_msg=f"member {m} out {k}")


def test_the_launcher_names_a_member_of_the_wrong_shape(built):
    members = _group(SGD_PLAIN, F32, F32, [(3,), (4,)])
    members[1][1] = members[1][1][:2]  # a gradient shorter than its parameter
    group = MultiUpdate(SGD_PLAIN, 2)
    descs = _descs(SGD_PLAIN, members[0]) + [TensorDesc((4,), F32)]
    bufs = [built.from_host(a) for m in members for a in m]
    with pytest.raises(ValueError, match=r"member 1's input 1 has shape \(2,\), its parameter "
                                         r"\(4,\)"):
        built.execute(group, bufs, descs)


# -- a traced training step ------------------------------------------------------------------------

SHAPES_STEP = [(4, 3), (3,), (1,), (0,), (2, 2, 3)]


def _params(dtype, seed):
    rng = np.random.default_rng(seed)
    return [mge.Parameter(rng.normal(size=s).astype(dtype), dtype=dtype, device=DEV)
            for s in SHAPES_STEP]


def _train_step(params, make_opt):
    gm = GradManager().attach(params)
    opt = make_opt(params)

    def step(x):
        with gm:
            loss = F.sum(params[0] * x)  # every parameter gets a gradient of its shape,
            for p in params[1:]:         # which changes with the parameter
                loss = loss + F.sum(p * p)
            gm.backward(loss)
        opt.step().clear_grad()
        return loss
    return step


OPTIMIZERS = {
    "sgd": lambda ps: optim.SGD(ps, lr=0.1),
    "sgd_momentum_wd": lambda ps: optim.SGD(ps, lr=0.05, momentum=0.9, weight_decay=1e-3),
    "sgd_nesterov": lambda ps: optim.SGD(ps, lr=0.05, momentum=0.9, nesterov=True),
    "adam": lambda ps: optim.Adam(ps, lr=1e-2, weight_decay=0.01),
}


@pytest.mark.parametrize("name, dtype", [(n, "float32") for n in OPTIMIZERS] + [
    (n, "float16") for n in OPTIMIZERS if n != "adam"])
def test_a_traced_training_step_equals_eager_with_fewer_launches(built, name, dtype):
    old = mge.get_default_device()
    mge.set_default_device(DEV)
    try:
        eager_ps, traced_ps = _params(dtype, 1), _params(dtype, 1)
        eager = _train_step(eager_ps, OPTIMIZERS[name])
        traced = trace(symbolic=True)(_train_step(traced_ps, OPTIMIZERS[name]))
        rng = np.random.default_rng(2)
        for call in range(4):
            x = on(DEV, rng.normal(size=(4, 3)).astype(dtype))
            n0 = _launches(built)
            le = eager(x).numpy()
            n1, single = _launches(built), _launches(built, "mge_opt_")
            multi = _launches(built, "mge_multi_opt_")
            lt = traced(x).numpy()
            n2, multi_after = _launches(built), _launches(built, "mge_multi_opt_")
            np.testing.assert_array_equal(lt, le)
            for pe, pt in zip(eager_ps, traced_ps):
                assert pt.dtype == pe.dtype
                np.testing.assert_array_equal(pt.numpy(), pe.numpy())
        # the last replay: a group's kernel, no single update's, fewer launches than eagerly
        assert _launches(built, "mge_opt_") == single and multi_after > multi
        assert n2 - n1 < n1 - n0
    finally:
        mge.set_default_device(old)


# -- where groups begin and end --------------------------------------------------------------------

class _Rec:
    def __init__(self, ops, descs):
        self.ops, self.descs = ops, descs


def test_groups_take_independent_updates_and_stop_at_other_ops():
    d = {v: ((4,), F32, None) for v in range(40)}
    d.update({v: ((4,), F16, None) for v in (30, 31, 32)})
    a, b = SGD_PLAIN, SGDUpdate(0.2, 0.0, 0.0, False)
    ops = [
        (a, (0, 1), (10,)),                  # 0 \  a's group: 0, 2
        (b, (2, 3), (11,)),                  # 1  | b alone (another lr)
        (a, (4, 5), (12,)),                  # 2 /
        (a, (10, 6), (13,)),                 # 3    reads 0's output: a new window
        (a, (7, 8), (14,)),                  # 4    with 3: a group
        (a, (30, 31), (32,)),                # 5    float16: a key of its own, alone
        (Elemwise("add"), (13, 14), (15,)),  # 6    not an update: the window ends
        (a, (9, 16), (17,)),                 # 7    alone after it
        (a, (18, 19), (20,)),                # 8 \  with 7: a group
    ]
    rec = _Rec(ops, d)
    order, groups = jp._group_updates(rec, list(range(len(ops))))
    assert order == [0, 2, 1, 3, 4, 5, 6, 7, 8]
    assert [tuple(g) for g in groups] == [(0, 2), (3, 4), (7, 8)]
    units = jp._with_groups(jp._chain_units(rec, order), groups)
    assert [tuple(u) if isinstance(u, tuple) else u for u in units] == [
        (0, 2), 1, (3, 4), 5, 6, (7, 8)]


def test_a_gradient_read_after_the_group_is_not_freed_by_it():
    d = {v: ((4,), F32, None) for v in range(20)}
    a = SGD_PLAIN
    ops = [(a, (0, 1), (10,)), (a, (2, 3), (11,))]
    rec = _Rec(ops, d)
    slot = {v: v for v in range(4)}
    plan = []
    # 1 and 3 are intermediates; 3 is read again later (its last reader is op 5)
    n = jp._plan_group(rec, jp._UpdateGroup((0, 1)), slot, 4, {0: 0, 1: 0, 2: 1, 3: 5},
                       {0, 2}, plan)
    (step,) = plan
    assert type(step[0]) is MultiUpdate and step[0].count == 2 and step[0].update is a
    assert step[1] == (0, 1, 2, 3) and step[2] == (4, 5) and n == 6
    assert step[5] == (1,) and step[4] == [1]


class _Compiled:
    """Within ``with``: the names of the steps of every program ``jit.trace`` compiles."""

    def __enter__(self):
        self.names, self._orig = [], jp.compile_program

        def spy(*args, **kw):
            p = self._orig(*args, **kw)
            self.names.extend(type(s[0]).__name__ for s in p.plan if s[0] is not None)
            return p
        jp.compile_program = spy
        return self

    def __exit__(self, *exc):
        jp.compile_program = self._orig


def test_a_program_for_the_cpu_keeps_its_updates_one_by_one():
    params = [mge.Parameter(np.ones(s, "float32"), device="cpu0") for s in ((3,), (2, 2))]
    step = trace(symbolic=True)(_train_step_cpu(params))
    with _Compiled() as seen:
        for _ in range(3):
            step(mge.tensor(np.ones(3, "float32"), device="cpu0")).numpy()
    assert "MultiUpdate" not in seen.names and seen.names.count("SGDUpdate") == 2


def _train_step_cpu(params):
    gm = GradManager().attach(params)
    opt = optim.SGD(params, lr=0.1, momentum=0.9)

    def step(x):
        with gm:
            loss = F.sum(params[0] * x) + F.sum(params[1] * 2)
            gm.backward(loss)
        opt.step().clear_grad()
        return loss
    return step


# -- a device that runs the CPU's kernels ----------------------------------------------------------

def test_a_device_that_runs_the_cpus_kernels_computes_groups_too():
    from devices import opaque
    dev = opaque.device("opaque0")
    op = SGD_MOMENTUM
    members = _group(op, F32, F32, SHAPES, seed=4)
    group = MultiUpdate(op, len(members))
    descs = [d for m in members for d in _descs(op, m)]
    outs = dev.execute(group, [dev.from_host(a) for m in members for a in m], descs)
    for g, w in zip(_split([dev.to_host(b) for b in outs], members), _cpu(op, members)):
        for a, b in zip(g, w):
            np.testing.assert_array_equal(a, b)
    # and in a traced step, whose program holds the group
    rng = np.random.default_rng(3)
    traced_ps = [mge.Parameter(rng.normal(size=s).astype("float32"), device="opaque0")
                 for s in SHAPES_STEP]
    eager_ps = [mge.Parameter(p.numpy(), device="opaque0") for p in traced_ps]
    eager = _train_step(eager_ps, OPTIMIZERS["sgd_momentum_wd"])
    traced = trace(symbolic=True)(_train_step(traced_ps, OPTIMIZERS["sgd_momentum_wd"]))
    with _Compiled() as seen:
        for call in range(3):
            x = mge.tensor(rng.normal(size=(4, 3)).astype("float32"), device="opaque0")
            np.testing.assert_array_equal(traced(x).numpy(), eager(x).numpy())
            for pe, pt in zip(eager_ps, traced_ps):
                np.testing.assert_array_equal(pt.numpy(), pe.numpy())
    assert "MultiUpdate" in seen.names and "SGDUpdate" not in seen.names
