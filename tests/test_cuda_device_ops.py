"""The kernel families' ops on the CUDA device, through the public functional API, against cpu0.

``cudahost0`` (``tests/devices/cuda_host.py``) is the CUDA device's code over the host backend:
every op below runs its family's launch plan (``kernels/<family>.py``'s ``PLANS``) through the
device's one executor, ``cuda/launch/plans.py``'s ``run_plan`` -- the pool's outputs and
workspace, the checks' words, the kernels built with g++ and launched with the plan's grid,
block and arguments -- and its result is compared with the CPU device's:

* the executor itself on hand-made plans: every kind of step, checks of one and two parameters,
  a readback and the outputs it sizes, a ``Buf`` outside its buffer, an in-place alias; the
  registration of every family's table (explicit launchers win; ``STRIDED`` ops take views);
* per family (``CASES``: reduce, softmax, relayout, indexing, norm, conv, pool): the functional
  ops, forward and, where the op has a gradient, backward through ``GradManager`` -- bit for bit
  where the kernels compute in the CPU's order (extrema, sorts, copies, indexing, max pooling),
  else within float32 rounding (sums in a tree, GEMMs);
* the checks' errors: a label or an index out of range, a distribution's parameter -- the CPU
  device's exception and message, at the call (async level 0) or the next read (level 2);
* random numbers by their properties (the generator is the device's own), every optimizer's
  fused update in place, and a small conv net's training step.

Without g++ the tests are skipped with the reason, except under ``CI``.  Host compute is off, so
every op runs the device's kernels.  Each family's kernels are built once per process (the host
backend's build cache): the first test of a family pays its g++ runs (about 0.3 s each).
"""
import gc

import numpy as np
import pytest

import mge
import mge.functional as F
from mge.autodiff import GradManager
from mge.core import AsyncError

from cuda_device_fixtures import DEV, cuda, level, on  # noqa: F401 (fixtures by name)
from cuda_toolchain import missing as _missing
from mge._core.device.cuda import hostbuild
from mge._core.device.cuda.kernels import elemwise as ek
from mge._core.device.cuda.kernels import launch as lk
from mge._core.device.cuda.launch import CUDA_KERNELS, lookup, plans
from mge._core.ops.base import TensorDesc

F32 = np.dtype("float32")






def rng(seed=0):
    return np.random.default_rng(seed)


def both(fn):
    """``fn(device)`` on cudahost0 and cpu0: two lists of host arrays (same dtypes and shapes,
    and every cudahost0 result on cudahost0)."""
    outs = list(fn(DEV))
    assert all(o.device == DEV for o in outs)
    got = [o.numpy() for o in outs]
    ref = [o.numpy() for o in fn("cpu0")]
    assert len(got) == len(ref)
    for g, r in zip(got, ref):
        assert g.dtype == r.dtype and g.shape == r.shape, (g.dtype, g.shape, r.dtype, r.shape)
    return got, ref


def close(fn, rtol=1e-5, atol=1e-6):
    """``both(fn)``, each pair equal within ``rtol``/``atol`` (exact for integers)."""
    got, ref = both(fn)
    for g, r in zip(got, ref):
        if g.dtype.kind in "fc":
            np.testing.assert_allclose(g, r, rtol=rtol, atol=atol)
        else:
            np.testing.assert_array_equal(g, r)
    return got, ref


def ran(dev, fn):
    """``fn()`` run, and the names of the op classes the device executed meanwhile."""
    before = dict(dev.executed)
    fn()
    return {k.split(".")[0] for k, v in dev.executed.items() if v > before.get(k, 0)}


def family(name):
    """The kernels module ``name`` if its ``PLANS`` table is in launch.py's format (registered)."""
    for m in plans.family_modules():
        if m.__name__.rsplit(".", 1)[-1] == name:
            return m
    return None


# == the executor on hand-made plans ===============================================================
def _add():
    return ek.elemwise_kernel("add", (F32, F32), contiguous=True)


def _copy_i32():
    return ek.typecvt_kernel(np.dtype("int32"), np.dtype("int32"), contiguous=True)


def _n(v):
    return np.int64(v)


def test_a_plan_of_launches_gemms_and_memsets_runs_on_the_device(cuda):
    """Outputs allocated dense, the workspace laid out and freed, every step in stream order: a
    kernel into the workspace, a GEMM reading it, a memset of a second output."""
    r = rng(1)
    a = r.standard_normal((6, 4)).astype(F32)
    b = r.standard_normal((6, 4)).astype(F32)
    ws = lk.Workspace()
    tmp = ws.add(a.nbytes)
    # tmp = a + b (row-major 6 x 4 = column-major 4 x 6); out0 (4 x 4) = (a + b)^T (a + b):
    # column-major C = op(A) @ op(B) with A = tmp^T stored (transa) ... C^T = C (symmetric)
    steps = (lk.Launch(_add(), lk.grid_for(a.size), lk.THREADS,
                       (tmp, lk.Buf("in0"), lk.Buf("in1"), _n(a.size))),
             lk.Gemm(False, True, 4, 4, 6, tmp, 4, 0, tmp, 4, 0, lk.Buf("out0"), 4, 0, 1,
                     F32, F32, F32, F32),
             lk.Memset(lk.Buf("out1"), 12, 0))
    plan = lk.Plan(steps, ws.size)
    dev = cuda
    x, y = dev.from_host(a), dev.from_host(b)
    gc.collect()  # (an earlier test's tensors, freed now and not while the plan runs)
    mge._full_sync()
    before = dev.pool.stats()["allocated"]
    out, zero = plans.run_plan(dev, plan, [x, y], [TensorDesc((4, 4), F32),
                                                   TensorDesc((3,), F32)])
    s = (a + b).astype(np.float64)
    np.testing.assert_allclose(dev.to_host(out), s.T @ s, rtol=1e-5, atol=1e-5)
    assert (dev.to_host(zero) == 0).all()
    # only the outputs stay allocated: the workspace went back to the pool
    assert dev.pool.stats()["allocated"] == before + out.block.size + zero.block.size


def _flag_plan(value, error):
    # a kernel writes ``value`` (read from in0) into the check's word in the workspace
    ws = lk.Workspace()
    flag = ws.add(4)
    step = lk.Launch(_copy_i32(), (1, 1, 1), (32, 1, 1), (flag, lk.Buf("in0"), _n(1)))
    return lk.Plan((step,), ws.size, (lk.Check(flag, error),)), flag


def test_a_check_raises_its_error_and_may_read_the_device(cuda):
    dev = cuda
    plan, _ = _flag_plan(7, lambda v: IndexError(f"bad {v}"))
    seven = dev.from_host(np.array([7], np.int32))
    with pytest.raises(IndexError, match="bad 7"):
        plans.run_plan(dev, plan, [seven], [])
    zero = dev.from_host(np.array([0], np.int32))
    assert plans.run_plan(dev, plan, [zero], []) == ()
    # an error of two parameters reads the device's memory for its message
    plan2, _ = _flag_plan(7, lambda v, read: ValueError(
        f"bad {v}: {read(lk.Buf('in0'), np.int32, 1).tolist()}"))
    with pytest.raises(ValueError, match=r"bad 7: \[7\]"):
        plans.run_plan(dev, plan2, [seven], [])
    # the word is zeroed before the steps: a plan that does not write it raises nothing
    quiet = lk.Plan((), 256, (lk.Check(lk.Buf("ws"), lambda v: AssertionError(v)),))
    assert plans.run_plan(dev, quiet, [], []) == ()


def test_a_readback_continues_with_the_plan_its_value_chooses(cuda):
    dev = cuda
    seen = []
    ws = lk.Workspace()
    word = ws.add(4)
    fill = lk.Plan((lk.Memset(lk.Buf("out0"), 8, 0),))
    first = lk.Plan((lk.Launch(_copy_i32(), (1, 1, 1), (32, 1, 1), (word, lk.Buf("in0"), _n(1))),),
                    ws.size, readback=lk.Readback(word, np.dtype("int32"),
                                                  lambda v: seen.append(v) or fill))
    x = dev.from_host(np.array([5], np.int32))
    (out,) = plans.run_plan(dev, first, [x], [TensorDesc((2,), F32)])
    assert seen == [5] and (dev.to_host(out) == 0).all()


def test_outputs_of_a_data_dependent_size_come_with_the_readback(cuda):
    """An output the descs do not size is allocated from ``Readback.outs(value)``, after the
    first plan ran (it names no output) and before the plan ``then(value)`` gives."""
    dev = cuda
    ws = lk.Workspace()
    word = ws.add(4)
    count = lk.Launch(_copy_i32(), (1, 1, 1), (32, 1, 1), (word, lk.Buf("in0"), _n(1)))

    def then(v):  # out0 = in1[:v] + in1[:v]; out1 (a known shape) zeroed
        return lk.Plan((lk.Launch(_add(), lk.grid_for(v), lk.THREADS,
                                  (lk.Buf("out0"), lk.Buf("in1"), lk.Buf("in1"), _n(v))),
                        lk.Memset(lk.Buf("out1"), 8, 0)))

    plan = lk.Plan((count,), ws.size, readback=lk.Readback(
        word, np.dtype("int32"), then, lambda v: [lk.Layout((v,), F32), lk.Layout((2,), F32)]))
    n = dev.from_host(np.array([3], np.int32))
    x = dev.from_host(np.arange(5, dtype=F32))
    out, zero = plans.run_plan(dev, plan, [n, x], [TensorDesc(None, F32), TensorDesc((2,), F32)])
    assert out.shape == (3,)
    np.testing.assert_array_equal(dev.to_host(out), [0, 2, 4])
    assert (dev.to_host(zero) == 0).all()
    # without a readback that sizes it, an output of unknown shape is an error naming it
    with pytest.raises(ValueError, match="output 0 .* no known shape"):
        plans.run_plan(dev, lk.Plan(()), [], [TensorDesc(None, F32)])


def test_a_buffer_outside_the_plan_is_refused_by_name(cuda):
    dev = cuda
    x = dev.from_host(np.zeros(4, F32))
    far = lk.Plan((lk.Memset(lk.Buf("in0", 8), 16, 0),))
    with pytest.raises(ValueError, match="outside 'in0'"):
        plans.run_plan(dev, far, [x], [])
    nowhere = lk.Plan((lk.Memset(lk.Buf("out3"), 4, 0),))
    with pytest.raises(ValueError, match="'out3'"):
        plans.run_plan(dev, nowhere, [x], [])
    assert (dev.to_host(x) == 0).all()


def test_an_alias_writes_the_output_into_the_input(cuda):
    dev = cuda
    a = np.arange(8, dtype=F32)
    x = dev.from_host(a)
    plan = lk.Plan((lk.Launch(_add(), lk.grid_for(8), lk.THREADS,
                              (lk.Buf("out0"), lk.Buf("in0"), lk.Buf("in0"), _n(8))),))
    (out,) = plans.run_plan(dev, plan, [x], [TensorDesc((8,), F32)], {0: x})
    assert out is x
    np.testing.assert_array_equal(dev.to_host(x), 2 * a)


def test_every_family_table_in_the_plan_format_is_registered(cuda):
    """Each op class of a ported family's ``PLANS`` has a launcher: the plan one, or an explicit
    one from ``cuda/launch/*.py``; ``STRIDED`` ops take views."""
    for m in plans.family_modules():
        for cls in m.PLANS:
            launcher = lookup(cls)
            assert launcher is not None, (m.__name__, cls)
            if plans.REGISTERED.get(cls) is m:
                assert launcher.fn.__module__ == plans.__name__
                assert launcher.strided == (cls in getattr(m, "STRIDED", ()))
                assert launcher.reuse == bool(getattr(m, "INPLACE", {}).get(cls))
    assert set(plans.REGISTERED) <= set(CUDA_KERNELS)
    # the view ops of relayout's table keep their explicit launchers (views, no kernel)
    relayout = family("relayout")
    if relayout is not None:
        from mge._core.ops.shape import Dimshuffle
        assert Dimshuffle in relayout.PLANS and Dimshuffle not in plans.REGISTERED
        assert lookup(Dimshuffle).fn.__module__.endswith("launch.shape")


def test_a_strided_family_op_reads_views_in_place(cuda):
    """A ``STRIDED`` op (relayout's Concat) gets a transposed view as it is -- no relayout copy
    first; a dense-only one (reduce's) gets it made dense by the device."""
    a, b = on(DEV, X), on(DEV, X * 2)
    ta, tb = F.transpose(a, (0, 2, 1)), F.transpose(b, (0, 2, 1))
    before = cuda.relayouts
    got = F.concat([ta, tb], axis=1).numpy()
    assert cuda.relayouts == before
    np.testing.assert_array_equal(got, np.concatenate([X.transpose(0, 2, 1),
                                                       (X * 2).transpose(0, 2, 1)], axis=1))
    got = F.sum(ta, axis=2).numpy()
    assert cuda.relayouts == before + 1
    np.testing.assert_allclose(got, X.transpose(0, 2, 1).sum(axis=2), rtol=1e-6, atol=1e-6)


# == the families' ops through the functional API ==================================================
def _x(shape=(4, 5, 6), seed=0, dtype="float32"):
    return rng(seed).standard_normal(shape).astype(dtype)


X = _x()
IMG = _x((2, 3, 8, 8), 1)
WEIGHT = _x((4, 3, 3, 3), 2)


def _i32(d, a):
    return mge.tensor(np.asarray(a), dtype="int32", device=d)


def _grads(d, f, *arrays):
    """``[f(*params), d loss / d param...]`` with loss ``sum(f(...) ** 2)`` through GradManager."""
    ps = [mge.Parameter(a, device=d) for a in arrays]
    gm = GradManager().attach(ps)
    with gm:
        y = f(*ps)
        gm.backward(F.sum(y * y))
    return [y] + [p.grad for p in ps]


def _setitem(t, index, value):
    t[index] = value
    return t


def _bn(d, a, w, b):
    c = a.shape[1]
    mean = mge.tensor(np.zeros((1, c, 1, 1), "float32"), device=d)
    var = mge.tensor(np.ones((1, c, 1, 1), "float32"), device=d)
    return F.batch_norm(a, mean, var, w, b, training=True)


_C = np.ones((1, 3, 1, 1), "float32")
_INDEX = rng(5).integers(0, 5, (4, 3, 6))
_PERM = np.tile(np.arange(5)[None, :, None], (4, 1, 6))[:, :3]  # distinct targets per column
_LN_W, _LN_B = _x((8, 8), 3), _x((8, 8), 4)

# family -> (case id, fn(device) -> tensors, the op classes it must run through the family's plans
# on the device, tolerance: 0 for bit for bit, else (rtol, atol))
CASES = {
    "reduce": [
        ("sum", lambda d: [F.sum(on(d, X), axis=1)], {"Reduce"}, (1e-6, 1e-6)),
        ("mean_not_adjacent", lambda d: [F.mean(on(d, X), axis=(0, 2), keepdims=True)],
         {"Reduce"}, (1e-6, 1e-6)),
        ("max", lambda d: [F.max(on(d, X), axis=2)], {"Reduce"}, 0),
        ("min_all", lambda d: [F.min(on(d, X))], {"Reduce"}, 0),
        ("prod", lambda d: [F.prod(on(d, X), axis=0)], {"Reduce"}, (1e-6, 1e-7)),
        ("sum_int", lambda d: [F.sum(_i32(d, np.arange(60).reshape(3, 4, 5)), axis=(1, 2))],
         {"Reduce"}, 0),
        ("argmax", lambda d: [F.argmax(on(d, X), axis=1)], {"Argmax"}, 0),
        ("argmin_not_adjacent", lambda d: [F.argmin(on(d, X), axis=(0, 2))], {"Argmin"}, 0),
        ("argsort", lambda d: list(F.argsort(on(d, X.reshape(20, 6)), descending=True)),
         {"Argsort"}, 0),
        ("topk", lambda d: list(F.topk(on(d, X.reshape(20, 6)), 3)), {"TopK"}, 0),
        ("sum_backward", lambda d: _grads(d, lambda a: F.sum(a, axis=(1, 3)), IMG), {"Reduce"},
         (1e-5, 1e-5)),
        ("cumsum", lambda d: [F.cumsum(on(d, X), axis=1),
                              F.cumsum(_i32(d, np.arange(60).reshape(3, 4, 5)), axis=2)],
         {"CumSum"}, (1e-6, 1e-6)),
    ],
    "softmax": [
        ("softmax", lambda d: [F.softmax(on(d, X), axis=1)], {"Softmax"}, (1e-6, 1e-7)),
        ("logsoftmax", lambda d: [F.logsoftmax(on(d, X), axis=-1)], {"LogSoftmax"},
         (1e-6, 1e-6)),
        ("cross_entropy", lambda d: _grads(d, lambda a: F.nn.cross_entropy(
            a, _i32(d, np.arange(20) % 6)), X.reshape(20, 6)), {"SoftmaxCrossEntropy"},
         (1e-5, 1e-6)),
        ("softmax_backward", lambda d: _grads(d, lambda a: F.softmax(a, axis=1), IMG),
         {"Softmax"}, (1e-5, 1e-6)),
    ],
    "relayout": [
        ("transpose", lambda d: [F.transpose(on(d, X), (2, 0, 1)) + 0], set(), 0),
        ("broadcast_to", lambda d: [F.broadcast_to(on(d, X[:, :1]), (4, 5, 6)) * 1], set(), 0),
        ("slicing", lambda d: [F.copy(on(d, X)[1:3, ::-2, 1])], {"Subtensor"}, 0),
        ("setitem", lambda d: [_setitem(on(d, X) + 0, (slice(1, 3), 2), 7.0)],
         {"SetSubtensor"}, 0),
        ("concat", lambda d: [F.concat([on(d, X), on(d, X) * 2], axis=1)], {"Concat"}, 0),
        ("stack", lambda d: [F.stack([on(d, X), on(d, X)], axis=2)], {"Stack"}, 0),
        ("split", lambda d: list(F.split(on(d, X), 3, axis=2)), {"Split"}, 0),
        ("tile", lambda d: [F.tile(on(d, X), (2, 1, 3))], {"Tile"}, 0),
        ("repeat", lambda d: [F.repeat(on(d, X), 2, axis=1)], {"Repeat"}, 0),
        ("roll", lambda d: [F.roll(on(d, X), (1, -2), (0, 2))], {"Roll"}, 0),
        ("diag", lambda d: [F.diag(on(d, X[0, 0])), F.diag(on(d, X[0, 0]), k=1)], {"Diag"}, 0),
        ("creation", lambda d: [F.zeros((3, 4), device=d), F.ones((3, 4), device=d),
                                F.full((3, 4), 2.5, device=d)], set(), 0),
        ("arange_linspace_eye", lambda d: [F.arange(0, 10, 0.5, device=d),
                                           F.linspace(0, 1, 11, device=d), F.eye(4, 5, device=d)],
         {"Arange", "Linspace", "Eye"}, 0),
    ],
    "indexing": [
        ("advanced_get", lambda d: [on(d, X)[_i32(d, [0, 2, 3]), :, _i32(d, [1, -1, 5])],
                                    on(d, X)[_i32(d, [-1, 0])]], {"IndexingMultiAxisVec"}, 0),
        ("advanced_set", lambda d: [_setitem(on(d, X) + 0, (_i32(d, [0, 2]), 1), 9.0)],
         {"IndexingSetMultiAxisVec"}, 0),
        ("advanced_backward", lambda d: _grads(
            d, lambda a: a[_i32(d, [0, 2, 2]), :, _i32(d, [1, 1, 5])], X),
         {"IndexingMultiAxisVec", "IndexingIncrMultiAxisVec"}, 0),
        ("gather", lambda d: _grads(d, lambda a: F.gather(a, 1, _i32(d, _INDEX)), X),
         {"Gather", "ScatterAdd"}, 0),
        ("scatter", lambda d: [F.scatter(on(d, X), 1, _i32(d, _PERM), on(d, X)[:, :3] * 10)],
         {"Scatter"}, 0),
        ("indexing_one_hot", lambda d: [F.indexing_one_hot(
            on(d, X.reshape(20, 6)), _i32(d, np.arange(20) % 6), 1)], {"IndexingOneHot"}, 0),
        ("where", lambda d: [F.where(on(d, X) > 0, on(d, X), on(d, X) * 0.1)], {"Where"}, 0),
        ("cond_take", lambda d: list(F.cond_take(on(d, X) > 0, on(d, X))), {"CondTake"}, 0),
        ("mask_get", lambda d: [on(d, X)[on(d, X) > 0.5]], {"IndexingMultiAxisVec"}, 0),
        ("mask_set", lambda d: [_setitem(on(d, X) + 0, on(d, X) < 0, 0.0)],
         {"IndexingSetMultiAxisVec"}, 0),
    ],
    "norm": [
        ("batch_norm", lambda d: _grads(d, lambda a, w, b: _bn(d, a, w, b), IMG, 1.5 * _C,
                                        0.2 * _C), {"BatchNorm", "BatchNormBackward"},
         (1e-4, 1e-4)),
        ("layer_norm", lambda d: _grads(d, lambda a, w, b: F.layer_norm(a, (8, 8), True, w, b),
                                        IMG, _LN_W, _LN_B), {"LayerNorm", "LayerNormBackward"},
         (1e-4, 1e-4)),
    ],
    "conv": [
        ("conv2d", lambda d: _grads(d, lambda a, w: F.conv2d(a, w, padding=1), IMG, WEIGHT),
         {"Convolution", "ConvolutionBackwardData", "ConvolutionBackwardFilter"}, (1e-4, 1e-4)),
        ("conv2d_strided", lambda d: _grads(d, lambda a, w: F.conv2d(a, w, stride=2), IMG,
                                            WEIGHT), {"Convolution"}, (1e-4, 1e-4)),
    ],
    "pool": [
        ("max_pool2d", lambda d: _grads(d, lambda a: F.max_pool2d(a, 2, 2), IMG), {"Pooling"},
         0),
        ("avg_pool2d", lambda d: _grads(d, lambda a: F.avg_pool2d(a, 3, 2, 1), IMG),
         {"Pooling", "PoolingBackward"}, (1e-6, 1e-6)),
        ("adaptive", lambda d: _grads(d, lambda a: F.adaptive_avg_pool2d(a, (3, 3))
                                      + F.adaptive_max_pool2d(a, (3, 3)), IMG),
         {"AdaptivePooling"}, (1e-6, 1e-6)),
    ],
}


def _cases():
    for fam, cases in CASES.items():
        for case in cases:
            yield pytest.param(fam, *case, id=f"{fam}-{case[0]}")


@pytest.mark.parametrize("fam,name,fn,ops,tol", list(_cases()))
def test_family_ops_match_the_cpu(cuda, fam, name, fn, ops, tol):
    """The op through the functional API on cudahost0 equals cpu0's (bit for bit, or within the
    family's float32 tolerance), and ran through the family's plans."""
    module = family(fam)
    assert module is not None, f"{fam}: no PLANS table in the plan format"
    got = {}
    names = ran(cuda, lambda: got.setdefault("r", both(fn)))
    assert ops <= names, (ops - names, names)
    for op in ops:
        (cls,) = [c for c in module.PLANS if c.__name__ == op]
        assert plans.REGISTERED[cls] is module and lookup(cls).fn.__module__ == plans.__name__
    for g, r in zip(*got["r"]):
        if tol == 0 or g.dtype.kind not in "fc":
            np.testing.assert_array_equal(g, r)
        else:
            np.testing.assert_allclose(g, r, rtol=tol[0], atol=tol[1])


def _h(d, a):
    return mge.tensor(a, dtype="float16", device=d)


# (case id, fn(device) -> tensors, needs float16): float16 computes in float, float64 in double,
# integers exactly, as the CPU kernels do (bit for bit at these sizes)
DTYPE_CASES = [
    ("float16_reduce_softmax_sort", lambda d: [F.sum(_h(d, X), axis=1), F.max(_h(d, X), axis=2),
                                               F.softmax(_h(d, X), axis=1)]
     + list(F.argsort(_h(d, X.reshape(20, 6)))), True),
    ("float16_conv_pool_norm", lambda d: [
        F.conv2d(_h(d, IMG), _h(d, WEIGHT)), F.max_pool2d(_h(d, IMG), 2),
        F.avg_pool2d(_h(d, IMG), 2), F.layer_norm(_h(d, IMG), (8, 8), False)], True),
    ("float64", lambda d: [F.softmax(on(d, X.astype("float64")), axis=0),
                           F.mean(on(d, X.astype("float64")), axis=2)], False),
    ("integers", lambda d: [F.max(on(d, (X * 10).astype("int32")), axis=0),
                            F.sum(on(d, (abs(X) * 10).astype("uint8")), axis=0),
                            F.sum(on(d, X > 0), axis=0)], False),
]


@pytest.mark.parametrize("name,fn,half", DTYPE_CASES, ids=[c[0] for c in DTYPE_CASES])
def test_other_dtypes_match_the_cpu(cuda, name, fn, half):
    if half and not hostbuild.have_float16():
        _missing("float16 kernels need g++ 12+ (_Float16) for the host build")
    got, ref = both(fn)
    for g, r in zip(got, ref):
        if g.dtype == np.float64:
            np.testing.assert_allclose(g, r, rtol=1e-14, atol=1e-15)
        else:
            np.testing.assert_array_equal(g, r)


def test_a_label_out_of_range_raises_the_cpus_index_error_at_the_next_sync(cuda, level):
    """``SoftmaxCrossEntropy``'s check: the CPU device's IndexError (its message), at the call
    (async level 0) or the next read (2); the device goes on."""
    errors = []
    for d in (DEV, "cpu0"):
        logits, label = on(d, np.zeros((3, 4), "float32")), _i32(d, [0, 5, 1])
        with pytest.raises((IndexError, AsyncError)) as info:
            F.nn.cross_entropy(logits, label).numpy()
        err = info.value if isinstance(info.value, IndexError) else info.value.__cause__
        assert isinstance(err, IndexError)
        errors.append(str(err))
        np.testing.assert_array_equal((on(d, np.ones(3, "float32")) * 2).numpy(), [2, 2, 2])
    assert errors[0] == errors[1] and "label out of range" in errors[0]


@pytest.mark.parametrize("case", ["advanced", "gather"])
def test_an_index_out_of_range_raises_the_cpus_index_error(cuda, level, case):
    """The indexing kernels' check: the CPU device's IndexError with its message."""
    errors = []
    for d in (DEV, "cpu0"):
        with pytest.raises((IndexError, AsyncError)) as info:
            if case == "advanced":
                on(d, X)[_i32(d, [0, 7])].numpy()
            else:
                F.gather(on(d, X), 1, _i32(d, np.full((4, 2, 6), 9))).numpy()
        err = info.value if isinstance(info.value, IndexError) else info.value.__cause__
        assert isinstance(err, IndexError)
        errors.append(str(err))
    assert errors[0] == errors[1]


# == random numbers: properties, not values (the generator is the device's own) ===================
def test_uniform_normal_and_dropout_on_the_device(cuda):
    g = mge.random.RNG(seed=3, device=DEV)
    u = g.uniform(-1, 2, size=(20000,))
    assert u.device == DEV and u.dtype == np.float32
    a = u.numpy()
    assert -1 <= a.min() and a.max() < 2 and abs(a.mean() - 0.5) < 0.03
    assert abs(a.var() - 0.75) < 0.03          # (b - a)^2 / 12
    n = g.normal(1, 2, size=(20000,)).numpy()
    assert abs(n.mean() - 1) < 0.05 and abs(n.std() - 2) < 0.05
    # counter-based: the same seed gives the same numbers, a new draw new ones
    again = mge.random.RNG(seed=3, device=DEV).uniform(-1, 2, size=(20000,)).numpy()
    np.testing.assert_array_equal(again, a)
    assert not np.array_equal(g.uniform(-1, 2, size=(20000,)).numpy(), a)
    x = on(DEV, np.ones((20000,), "float32"))
    names = ran(cuda, lambda: F.dropout(x, 0.3, training=True).numpy())
    assert "Dropout" in names
    y = F.dropout(x, 0.3, training=True).numpy()
    assert set(np.unique(y).tolist()) <= {0.0, np.float32(1 / 0.7)}
    assert abs((y == 0).mean() - 0.3) < 0.02


def test_gamma_and_beta_on_the_device_and_their_parameter_checks(cuda):
    """Moments of Gamma(k, theta) and Beta(a, b); a parameter that is not positive raises the
    CPU device's ValueError (the plans' checks), as on cpu0."""
    g = mge.random.RNG(seed=4, device=DEV)
    k = g.gamma(on(DEV, np.full(20000, 2.0, "float32")), 1.5).numpy()
    assert k.min() > 0 and abs(k.mean() - 3.0) < 0.1 and abs(k.var() - 4.5) < 0.4
    b = g.beta(on(DEV, np.full(20000, 2.0, "float32")),
               on(DEV, np.full(20000, 3.0, "float32"))).numpy()
    assert 0 < b.min() and b.max() < 1 and abs(b.mean() - 0.4) < 0.01
    for make in (lambda r, d: r.gamma(on(d, np.array([1.0, -2.0], "float32")), 1.0),
                 lambda r, d: r.beta(on(d, np.array([1.0, 2.0], "float32")),
                                     on(d, np.array([0.0, 1.0], "float32")))):
        errors = []
        for d in (DEV, "cpu0"):
            with pytest.raises((ValueError, AsyncError)) as info:
                make(mge.random.RNG(seed=1, device=d), d).numpy()
            err = info.value if isinstance(info.value, ValueError) else info.value.__cause__
            assert isinstance(err, ValueError)
            errors.append(str(err))
        assert errors[0] == errors[1] and "must be positive" in errors[0]


# == optimizers: the fused updates, in place ========================================================
def _opt_steps(d, make, steps=3):
    r = rng(5)
    w = mge.Parameter(r.standard_normal((7, 3)).astype("float32"), device=d)
    opt = make([w])
    for k in range(steps):
        w.grad = on(d, r.standard_normal((7, 3)).astype("float32"))
        opt.step()
        opt.clear_grad()
    return [w]


@pytest.mark.parametrize("name,make,tol", [
    ("sgd_momentum", lambda p: mge.optimizer.SGD(p, lr=0.01, momentum=0.9, weight_decay=1e-3),
     0),
    ("sgd_nesterov", lambda p: mge.optimizer.SGD(p, lr=0.01, momentum=0.9, nesterov=True), 0),
    # Adam's 1 - beta ** t: the device's pow may differ from Python's in the last bit
    ("adam", lambda p: mge.optimizer.Adam(p, lr=0.01, weight_decay=1e-2), (1e-6, 1e-7)),
    ("adamw", lambda p: mge.optimizer.AdamW(p, lr=0.01), (1e-6, 1e-7)),
    ("adagrad", lambda p: mge.optimizer.Adagrad(p, lr=0.01), (1e-6, 1e-7)),
    ("adadelta", lambda p: mge.optimizer.Adadelta(p), 0),
    ("rmsprop", lambda p: mge.optimizer.RMSprop(p, lr=0.01, momentum=0.5, centered=True), 0),
])
def test_optimizer_steps_match_the_cpu_and_update_in_place(cuda, name, make, tol):
    module = family("optimizer")
    assert module is not None
    before = cuda.inplace
    got = {}
    names = ran(cuda, lambda: got.setdefault("r", both(lambda d: _opt_steps(d, make))))
    assert names & {"SGDUpdate", "AdamUpdate", "AdagradUpdate", "AdadeltaUpdate",
                    "RMSpropUpdate"}
    assert cuda.inplace > before  # the parameter (and states) written over their old values
    (g,), (r,) = got["r"]
    if tol == 0:
        np.testing.assert_array_equal(g, r)
    else:
        np.testing.assert_allclose(g, r, rtol=tol[0], atol=tol[1])


# == a small conv net's training step ===============================================================
class _Net(mge.module.Module):
    def __init__(self):
        super().__init__()
        self.conv = mge.module.Conv2d(3, 4, 3, padding=1)
        self.bn = mge.module.BatchNorm2d(4)
        self.fc = mge.module.Linear(4 * 4 * 4, 5)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn(self.conv(x))), 2)
        return self.fc(F.flatten(x, 1))


def _train(d, init, steps=2):
    old = mge.get_default_device()
    mge.set_default_device(d)  # the module's buffers (BatchNorm's statistics) there too
    try:
        net = _Net()
    finally:
        mge.set_default_device(old)
    for k, p in net.named_parameters():
        p._reset(mge.tensor(init[k], device=d))
    r = rng(9)
    x = on(d, r.standard_normal((4, 3, 8, 8)).astype("float32"))
    y = _i32(d, r.integers(0, 5, 4))
    opt = mge.optimizer.SGD(net.parameters(), lr=0.1, momentum=0.9)
    gm = GradManager().attach(net.parameters())
    losses = []
    for _ in range(steps):
        with gm:
            loss = F.nn.cross_entropy(net(x), y)
            gm.backward(loss)
        opt.step()
        opt.clear_grad()
        losses.append(loss)
    return losses + list(net.parameters()) + [net.bn.running_mean, net.bn.running_var]


def test_a_small_conv_net_trains_as_on_the_cpu(cuda):
    """Conv2d + BatchNorm2d + ReLU + max pooling + Linear + cross_entropy + SGD with momentum:
    two steps on cudahost0 equal cpu0's within float32 rounding (conv's GEMMs and the norms'
    tree sums order their additions differently)."""
    init = {k: p.numpy() for k, p in _Net().named_parameters()}
    got = {}
    names = ran(cuda, lambda: got.setdefault("r", both(lambda d: _train(d, init))))
    assert {"Convolution", "BatchNorm", "Pooling", "SoftmaxCrossEntropy", "SGDUpdate",
            "ConvolutionBackwardFilter", "BatchNormBackward"} <= names, names
    g, r = got["r"]
    for a, b in zip(g, r):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    assert g[1] < g[0]
