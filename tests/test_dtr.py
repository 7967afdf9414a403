"""DTR (mge.dtr): training under a memory budget gives bit-identical results.

The models are small (activations of 32-128 KB, ``evictee_minimum_size`` lowered to match) so
that a budget of a fraction of the no-DTR peak forces many evictions in a few milliseconds.
"""
import doctest
import gc
import importlib
import sys
import warnings

import numpy as np
import pytest

import mge
import mge.device as D
import mge.functional as F
import mge.module as M
import mge.optimizer as optim
from mge.autodiff import GradManager
from mge.core import get_option
from mge._core.device.base import Device

ch = mge.core.get_channel()


@pytest.fixture(autouse=True)
def _dtr_off():
    yield
    mge.dtr.disable()
    mge.dtr.eviction_threshold = 0
    mge.dtr.evictee_minimum_size = "1MB"
    mge.dtr.enable_sqrt_sampling = False
    mge.dtr.reset_stats()
    mge.config.async_level = 2


def _base():
    # the live bytes now (other tests' garbage included): budgets are set above it
    gc.collect()
    mge._full_sync()
    return D.get_allocated_memory()


def _dtr(budget, minimum=1024):
    mge.dtr.evictee_minimum_size = minimum
    mge.dtr.eviction_threshold = int(budget)
    mge.dtr.enable()
    mge.dtr.reset_stats()


class _MLP(M.Module):
    def __init__(self, depth=6, width=32):
        super().__init__()
        self.layers = [M.Linear(width, width) for _ in range(depth)]
        self.head = M.Linear(width, 10)

    def forward(self, x):
        for layer in self.layers:
            x = F.relu(layer(x))
        return self.head(x)


class _Block(M.Module):
    def __init__(self, c):
        super().__init__()
        self.conv1 = M.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn1 = M.BatchNorm2d(c)
        self.conv2 = M.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn2 = M.BatchNorm2d(c)

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        return F.relu(x + self.bn2(self.conv2(y)))


class _ResNet(M.Module):
    def __init__(self, c=8, blocks=3):
        super().__init__()
        self.stem = M.Conv2d(3, c, 3, padding=1)
        self.blocks = [_Block(c) for _ in range(blocks)]
        self.pool = M.AdaptiveAvgPool2d(1)
        self.fc = M.Linear(c, 10)

    def forward(self, x):
        x = F.relu(self.stem(x))
        for b in self.blocks:
            x = b(x)
        return self.fc(F.flatten(self.pool(x), 1))


def _mlp_case():
    rng = np.random.RandomState(0)
    data = mge.tensor(rng.randn(256, 32).astype("float32"))       # activations of 32 KB
    label = mge.tensor(rng.randint(0, 10, size=(256,)).astype("int32"))
    return _MLP, data, label, dict(lr=0.05, momentum=0.9)


def _resnet_case():
    rng = np.random.RandomState(1)
    data = mge.tensor(rng.randn(16, 3, 16, 16).astype("float32"))  # activations of 128 KB
    label = mge.tensor(rng.randint(0, 10, size=(16,)).astype("int32"))
    return _ResNet, data, label, dict(lr=0.05, momentum=0.9, weight_decay=1e-4)


def _train(case, budget=None, steps=3, sqrt_sampling=False):
    """Train ``steps`` steps; returns losses, parameters and buffers, the peak of live bytes and
    the largest working set (input plus output bytes) of one op.  ``budget=0``: DTR on without a
    budget (computing paths recorded, nothing evicted)."""
    make, data, label, opt_args = case()
    mge.random.seed(0)
    net = make()
    gm = GradManager().attach(net.parameters())
    opt = optim.SGD(net.parameters(), **opt_args)
    _base()
    if budget is not None:
        mge.dtr.enable_sqrt_sampling = sqrt_sampling
        _dtr(budget)
    largest = [0]
    apply = ch._do_apply

    def watch(op, inputs, outputs, dels):  # the working set of every op the worker runs
        apply(op, inputs, outputs, dels)
        n = sum(i.value.nbytes for i in inputs if i.value is not None)
        largest[0] = max(largest[0], n + sum(o.value.nbytes for o in outputs if o.value is not None))

    ch._do_apply = watch
    try:
        D.reset_max_memory_stats()
        losses = []
        for _ in range(steps):
            with gm:
                loss = F.nn.cross_entropy(net(data), label)
                gm.backward(loss)
            opt.step().clear_grad()
            losses.append(loss.numpy().copy())
        mge._full_sync()
        peak = D.get_max_allocated_memory()
    finally:
        del ch._do_apply
    state = [p.numpy().copy() for p in net.parameters()] + [b.numpy().copy() for b in net.buffers()]
    stats = mge.dtr.stats()
    mge.dtr.disable()
    return losses, state, peak, largest[0], stats


def _dtr_peak(case, steps=3):
    # The budgets are fractions of the peak of the same training under DTR without a budget: with
    # computing paths recorded, an autodiff recording keeps every input of its ops (plugins/grad:
    # DTR evicts and recomputes them), where without DTR it keeps only what the backward rules
    # read.  The plain run's lower peak would put the budgets under what DTR can reach here (a
    # recomputation pins its whole chain of evicted inputs).
    return _train(case, 0, steps=steps)[2]


def _same(a, b):
    return len(a) == len(b) and all(x.dtype == y.dtype and np.array_equal(x, y) for x, y in zip(a, b))


# == bit-identical training under a budget ==========================================================
@pytest.mark.parametrize("case", [_mlp_case, _resnet_case], ids=["mlp", "resnet"])
@pytest.mark.parametrize("fraction", [0.5, 0.3])
def test_training_under_a_budget_is_bit_identical(case, fraction):
    losses, state, _, _, _ = _train(case)
    peak = _dtr_peak(case)
    budget = int(peak * fraction)
    d_losses, d_state, d_peak, largest, stats = _train(case, budget)
    assert _same(losses, d_losses)
    assert _same(state, d_state)
    assert stats["evictions"] > 20 and stats["recomputations"] > 5, stats
    # memory is brought under the budget before each op; the op then adds its outputs
    assert d_peak <= budget + largest, (d_peak, budget, largest)
    assert d_peak < peak * (fraction + 0.2)
    assert stats["candidates"] == 0  # everything recorded in the steps was freed with them


def test_sqrt_sampling_trains_bit_identically():
    losses, state, _, _, _ = _train(_mlp_case)
    peak = _dtr_peak(_mlp_case)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a poor sample can leave only pinned tensors for a while
        d_losses, d_state, d_peak, _, stats = _train(_mlp_case, peak * 0.4, sqrt_sampling=True)
    assert _same(losses, d_losses) and _same(state, d_state)
    assert stats["evictions"] > 20 and d_peak < peak * 0.7


def test_training_under_a_budget_at_async_level_0():
    mge.config.async_level = 0
    losses, state, _, _, _ = _train(_mlp_case, steps=2)
    peak = _dtr_peak(_mlp_case, steps=2)
    d_losses, d_state, _, _, stats = _train(_mlp_case, peak * 0.3, steps=2)
    assert _same(losses, d_losses) and _same(state, d_state) and stats["evictions"] > 0


def test_memory_is_returned_after_training_with_dtr():
    before = _base()
    _train(_mlp_case, before + 300_000, steps=2)
    gc.collect()
    assert D.get_allocated_memory() == before  # no tensor kept only for recomputation leaks
    assert mge.dtr.stats()["candidates"] == 0


# == the mechanism on plain ops =====================================================================
N = 4096  # float32: 16 KB


def test_eviction_keeps_memory_under_the_budget_and_recomputes_bit_identically():
    x = mge.tensor(np.random.rand(N).astype("float32"))
    base = _base()
    _dtr(base + 5 * 4 * N)
    D.reset_max_memory_stats()
    ys = [x]
    for k in range(20):
        ys.append(F.sin(ys[-1]) * 1.5)   # the temporary sin() is a released tensor
    expected = [x.numpy()]
    for k in range(20):
        expected.append(np.sin(expected[-1]) * np.float32(1.5))
    mge._full_sync()
    assert D.get_max_allocated_memory() <= base + 5 * 4 * N + 2 * 4 * N
    st = mge.dtr.stats()
    assert st["evictions"] > 10 and st["evicted_bytes"] == st["evictions"] * 4 * N
    for y, e in zip(reversed(ys), reversed(expected)):   # regenerated on reading
        np.testing.assert_array_equal(y.numpy(), e)
    st = mge.dtr.stats()
    assert st["recomputations"] > 0 and st["recomputed_bytes"] >= 4 * N
    assert st["recompute_time"] > 0


def test_a_released_input_is_kept_for_recomputation_then_freed():
    _dtr(0)  # recording only: nothing is evicted automatically
    x = mge.tensor(np.random.rand(N).astype("float32"))
    ex = x.numpy().copy()
    y = F.exp(x)
    mge._full_sync()
    base = D.get_allocated_memory()
    del x               # y may need it: it stays (it has no producer to recompute it from)
    mge._full_sync()
    assert D.get_allocated_memory() == base
    y._drop()
    np.testing.assert_array_equal(y.numpy(), np.exp(ex))
    info = y._info
    del y               # the last tensor that needed x: both go
    mge._full_sync()
    assert D.get_allocated_memory() == base - 2 * 4 * N
    assert ch.dtr.get(info) is None and info.producer is None


def test_a_released_intermediate_is_evicted_at_once_without_a_budget():
    _dtr(0)
    x = mge.tensor(np.random.rand(N).astype("float32"))
    a = F.sin(x)
    b = a * 2
    mge._full_sync()
    base = D.get_allocated_memory()
    del a               # b may need it: dropped (recomputable from x), not kept
    mge._full_sync()
    assert D.get_allocated_memory() == base - 4 * N
    b._drop()
    np.testing.assert_array_equal(b.numpy(), np.sin(x.numpy()) * np.float32(2))


def test_a_long_chain_of_evicted_tensors_regenerates_without_recursion_error():
    _dtr(0)
    x = mge.tensor(np.random.rand(512).astype("float32"))   # 2 KB, above the 1 KB minimum
    chain = [x]
    for _ in range(3 * sys.getrecursionlimit()):
        chain.append(chain[-1] + 1)
    last = chain[-1]
    expected = x.numpy()
    for _ in range(len(chain) - 1):
        expected = expected + np.float32(1)
    for t in chain[1:]:
        t._drop()
    mge._full_sync()
    assert all(t._info.value is None for t in chain[1:])
    np.testing.assert_array_equal(last.numpy(), expected)
    assert mge.dtr.stats()["recomputations"] == len(chain) - 1


def test_nothing_to_evict_warns_once_and_the_run_goes_on():
    mge.config.async_level = 0
    _dtr(1)   # one byte: nothing can ever be under it
    x = mge.tensor(np.random.rand(N).astype("float32"))
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        y = x
        for _ in range(10):
            y = F.relu(y - 0.5)
        out = y.numpy()
    msgs = [str(m.message) for m in w if "can be evicted" in str(m.message)]
    assert len(msgs) == 1, msgs
    assert msgs[0].startswith("No tensors on ") and "Maybe memory budget is too small." in msgs[0]
    ref = x.numpy()
    for _ in range(10):
        ref = np.maximum(ref - np.float32(0.5), 0)
    np.testing.assert_array_equal(out, ref)


def test_pinned_inputs_are_never_evicted():
    # budget below one op's inputs: every candidate but the op's own inputs goes
    mge.config.async_level = 0
    a = mge.tensor(np.random.rand(N).astype("float32"))
    b = mge.tensor(np.random.rand(N).astype("float32"))
    _dtr(_base() + 4 * N)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p, q = a * 2, b * 3
        r = p + q                # p and q are pinned while this runs
        np.testing.assert_array_equal(r.numpy(), a.numpy() * 2 + b.numpy() * 3)


def test_random_and_update_ops_are_not_recorded():
    _dtr(0)
    u = mge.random.uniform(size=(N,))
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        u._drop()            # no recorded producer: MegEngine's warning, value kept
        mge._full_sync()
    assert u._info.value is not None and any("this drop is ignored" in str(m.message) for m in w)
    v = u * 2                # an ordinary op on it is recorded
    mge._full_sync()
    assert v._info.producer is not None and u._info.producer is None
    # the fact is the op's own (the seed's is_bad_op)
    from mge._core.ops import rng
    from mge._core.ops.elemwise import Elemwise
    assert rng.UniformRNG.never_recompute and rng.GaussianRNG.never_recompute
    assert optim.sgd.SGDUpdate.never_recompute and optim.adam.AdamUpdate.never_recompute
    assert not Elemwise.never_recompute


def test_no_inplace_reuse_of_a_freed_input_under_dtr():
    _dtr(0)
    x = mge.tensor(np.random.rand(N).astype("float32"))
    inplace = ch.counters()["inplace"]
    y = F.exp(x) * 2          # the Del of exp(x) is fused into the mul
    y._drop()
    np.testing.assert_array_equal(y.numpy(), np.exp(x.numpy()) * np.float32(2))
    assert ch.counters()["inplace"] == inplace


def test_ops_that_are_not_recorded_still_reuse_a_freed_input_in_place():
    mge.dtr.evictee_minimum_size = "1MB"   # 16 KB outputs: never recorded
    mge.dtr.enable()
    x = mge.tensor(np.random.rand(N).astype("float32"))
    inplace = ch.counters()["inplace"]
    y = F.exp(x) * 2
    np.testing.assert_array_equal(y.numpy(), np.exp(x.numpy()) * np.float32(2))
    assert ch.counters()["inplace"] == inplace + 1


def test_reading_an_evicted_tensor_while_ops_are_queued():
    x = mge.tensor(np.random.rand(N).astype("float32"))
    _dtr(_base() + 6 * 4 * N)
    ys = [x * float(k) for k in range(30)]   # the early ones are evicted while later ones run
    for k, y in enumerate(ys):
        np.testing.assert_array_equal(y.numpy(), x.numpy() * np.float32(k))


def test_disable_clears_candidates_and_evicted_tensors_still_regenerate():
    x = mge.tensor(np.random.rand(N).astype("float32"))
    _dtr(0)
    y = x * 3
    z = y + 1
    mge._full_sync()
    assert mge.dtr.stats()["candidates"] == 2
    y._drop()
    mge.dtr.disable()
    assert mge.dtr.stats()["candidates"] == 0
    assert get_option("enable_dtr_auto_drop") == 0 and get_option("record_computing_path") == 0
    np.testing.assert_array_equal(y.numpy(), x.numpy() * np.float32(3))
    w = z * 2                  # not recorded any more
    mge._full_sync()
    assert w._info.producer is None


def test_stats_and_reset():
    st = mge.dtr.stats()
    assert set(st) == {"evictions", "evicted_bytes", "recomputations", "recomputed_bytes",
                       "recompute_time", "candidates"}
    x = mge.tensor(np.random.rand(N).astype("float32"))
    _dtr(0)
    y = F.exp(x)
    y._drop()
    y.numpy()
    st = mge.dtr.stats()
    assert st["recomputations"] == 1 and st["recomputed_bytes"] == 4 * N
    assert st["evictions"] == 0   # a user's _drop is not an automatic eviction
    mge.dtr.reset_stats()
    st = mge.dtr.stats()
    assert st["recomputations"] == 0 and st["recompute_time"] == 0.0


# == the user API: MegEngine's names, units and errors ===============================================
def test_defaults():
    assert mge.dtr.eviction_threshold == 0
    assert mge.dtr.evictee_minimum_size == 1024 ** 2
    assert mge.dtr.enable_sqrt_sampling is False


@pytest.mark.parametrize("value, expected", [
    ("2GB", 2 * 1024 ** 3), ("500MB", 500 * 1024 ** 2), ("1.5 kb", 1536), ("10b", 10),
    ("3 Mb", 3 * 1024 ** 2), (123, 123), (0, 0), (True, 1), (np.int64(7), 7),
])
def test_sizes(value, expected):
    mge.dtr.eviction_threshold = value
    assert mge.dtr.eviction_threshold == expected
    assert get_option("dtr_eviction_threshold") == expected
    mge.dtr.evictee_minimum_size = value
    assert mge.dtr.evictee_minimum_size == expected
    assert get_option("dtr_evictee_minimum_size") == expected


@pytest.mark.parametrize("value, exc, match", [
    ("100", ValueError, r"only supports bytes\(B\), kilobyte\(KB\), megabyte\(MB\) and gigabyte\(GB\)"),
    ("1mb 2mb", ValueError, "only supports"),
    ("2 TB", ValueError, "only supports"),
    (1.5, TypeError, "`value` should be a str or an int"),
    (None, TypeError, "`value` should be a str or an int"),
    (-5, TypeError, "should not be negative"),
])
def test_size_errors(value, exc, match):
    for name in ("eviction_threshold", "evictee_minimum_size"):
        before = getattr(mge.dtr, name)
        with pytest.raises(exc, match=match):
            setattr(mge.dtr, name, value)
        assert getattr(mge.dtr, name) == before


def test_sqrt_sampling_option():
    mge.dtr.enable_sqrt_sampling = True
    assert mge.dtr.enable_sqrt_sampling is True and get_option("enable_dtr_sqrt_sampling") == 1
    mge.dtr.enable_sqrt_sampling = 0
    assert mge.dtr.enable_sqrt_sampling is False
    with pytest.raises(TypeError, match="should be a bool"):
        mge.dtr.enable_sqrt_sampling = "x"


def test_enable_and_disable_set_megengines_options():
    mge.dtr.enable()
    assert [get_option(n) for n in ("enable_dtr_auto_drop", "enable_drop", "record_computing_path")] == [1, 1, 1]
    mge.dtr.disable()
    assert [get_option(n) for n in ("enable_dtr_auto_drop", "enable_drop", "record_computing_path")] == [0, 0, 0]


def test_module_docstring_examples():
    result = doctest.testmod(importlib.import_module("mge.dtr"), optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0


# == the policy on its own (mge/_core/dtr.py) ========================================================
class _Info:
    device = "cpu0"


def _policy_with_chain(n, cost=100.0, nbytes=2.0 ** 20, info=_Info):
    """A chain t0 -> t1 -> ... -> tn recorded in a fresh policy; returns it and the infos."""
    from mge._core import _accel
    dtr = _accel.load("mge._core.dtr").DynamicSublinear()
    infos = [info() for _ in range(n + 1)]
    for k in range(1, n + 1):
        dtr.record([infos[k - 1]], [infos[k]], [nbytes], cost)
        dtr.advance(cost)
    return dtr, infos


def test_policy_scores_with_megengines_formula():
    dtr, infos = _policy_with_chain(3)
    e = dtr.get(infos[1])
    now, last = dtr.clock, e.last_used
    expected = (100.0 + 1e-3) * 1.0001 ** 0 / (1.0 * (now - last + 1e-3))
    assert dtr.score(e) == pytest.approx(expected)
    e.recompute_times = 5
    assert dtr.score(e) == pytest.approx(expected * 1.0001 ** 5)


class _PooledDevice(Device):
    """A device whose allocator knows its blocks' free neighbours (as the CUDA pool does): here
    a buffer is the number of free bytes beside it."""

    kind = "pooled"

    def free_beside(self, buffer):
        return buffer


class _PooledNode:
    impl = _PooledDevice()


class _PooledInfo:
    device = _PooledNode()
    value = 3 * 2 ** 20  # (the buffer: 3 MiB free beside it)


def test_policy_counts_the_free_bytes_beside_a_block_where_the_device_tells_them():
    # MegEngine's eval_func divides by the tensor's bytes plus the free bytes around its block:
    # evicting a tensor next to free memory frees a larger block
    dtr, infos = _policy_with_chain(3, info=_PooledInfo)
    e = dtr.get(infos[1])
    now, last = dtr.clock, e.last_used
    assert dtr.score(e) == pytest.approx((100.0 + 1e-3) / ((1.0 + 3.0) * (now - last + 1e-3)))


def test_policy_joins_an_evicted_chain_into_one_component():
    dtr, infos = _policy_with_chain(6)
    for k in (2, 3, 4):                 # evicted in an order that joins them through children
        dtr.evicted(dtr.get(infos[k]), True)
    # t1 and t5 border the component {t2, t3, t4}: evicting either costs all three again
    assert dtr.neighbor_cost(dtr.get(infos[1])) == pytest.approx(300.0)
    assert dtr.neighbor_cost(dtr.get(infos[5])) == pytest.approx(300.0)
    assert dtr.neighbor_cost(dtr.get(infos[6])) == 0.0
    dtr.recomputed(dtr.get(infos[3]), True)   # back: its cost leaves the component
    assert dtr.neighbor_cost(dtr.get(infos[1])) == pytest.approx(200.0)
    assert dtr.get(infos[3]).recompute_times == 1
    st = dtr.stats()
    assert st["evictions"] == 3 and st["evicted_bytes"] == 3 * 2 ** 20


def test_policy_choice():
    dtr, infos = _policy_with_chain(50)
    cands = [dtr.get(i) for i in infos[1:]]
    assert len(dtr.candidates) == 50
    best = dtr.find_best(False)
    assert best is min(cands, key=dtr.score)
    assert best is dtr.get(infos[1])      # the stalest: used longest ago
    best.pinned += 1                      # pinned: never chosen
    assert dtr.find_best(False) is dtr.get(infos[2])
    cands[30].allow_delete = True         # released tensors go first
    assert dtr.find_best(False) is cands[30]
    for e in cands:
        e.pinned += 1
    assert dtr.find_best(False) is None and dtr.find_best(True) is None
    cands[40].pinned = 0                  # a sample of pinned tensors falls back to all of them
    assert dtr.find_best(True) is cands[40]


def test_policy_sqrt_sampling_draws_a_sample():
    dtr, infos = _policy_with_chain(400)
    ranked = sorted(dtr.candidates, key=dtr.score)
    picks = [dtr.find_best(True) for _ in range(30)]
    assert all(p is not None and p.slot >= 0 for p in picks)
    assert len({id(p) for p in picks}) > 5          # random samples of 20 out of 400
    # the best of 20 random candidates is almost always among the best quarter
    ranks = sorted(ranked.index(p) for p in picks)
    assert ranks[len(ranks) // 2] < 100
    assert dtr.find_best(False) is ranked[0]


def test_policy_candidates_set_is_constant_time():
    dtr, infos = _policy_with_chain(10)
    e = dtr.get(infos[4])
    dtr.erase_candidate(e)
    assert e.slot == -1 and e not in dtr.candidates and len(dtr.candidates) == 9
    assert all(dtr.candidates[k].slot == k for k in range(9))
    dtr.insert_candidate(e)
    dtr.insert_candidate(e)
    assert len(dtr.candidates) == 10 and dtr.candidates[e.slot] is e
    dtr.clear_candidates()
    assert not dtr.candidates and e.slot == -1
