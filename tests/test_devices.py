"""The device layer is real: the same behaviours on ``cpu0`` and on ``opaque0``, a test-only device
whose buffers are not numpy arrays (``tests/devices/opaque.py``).

Every test runs on both devices and compares with the ``cpu0`` result bit for bit
(``assert_array_equal``) and with numpy.  On ``opaque0`` a numpy assumption above the device layer
(channel, swap/drop, DTR, memory statistics) fails: those components see an ``OpaqueBuffer``.
The opaque device's counters show that the kernels ran there.  Most tests run at async level 2
(the worker) and 0 (synchronous, inline).
"""
import gc
import warnings

import numpy as np
import pytest

import mge
import mge.device as D
import mge.functional as F
import mge.module as M
import mge.optimizer as optim
from mge.autodiff import GradManager
from mge.core import get_option, set_option

from devices.opaque import OpaqueBuffer, OpaqueDevice, device as opaque_device, register

register()
ch = mge.core.get_channel()

DEVICES = ["cpu0", "opaque0"]
N = 4096  # float32: 16 KB, above the tiny-value limit and DTR's 1 KB minimum below


@pytest.fixture(params=DEVICES)
def dev(request):
    return request.param


@pytest.fixture(params=[2, 0], ids=["async2", "async0"])
def level(request):
    old = mge.config.async_level
    mge.config.async_level = request.param
    yield request.param
    mge.config.async_level = old


@pytest.fixture
def options():
    """Restores the channel options a test sets (swap, drop, DTR)."""
    names = ("enable_swap", "enable_drop", "record_computing_path", "enable_host_compute")
    saved = {n: get_option(n) for n in names}
    yield
    mge.dtr.disable()
    mge.dtr.eviction_threshold = 0
    mge.dtr.evictee_minimum_size = "1MB"
    mge.dtr.reset_stats()
    for n, v in saved.items():
        set_option(n, v)


def rng(seed=0):
    return np.random.RandomState(seed)


def executed(dev):
    """Kernels run by ``dev``'s kernel door so far (the opaque device counts; the CPU: 0)."""
    impl = mge._core.device.as_device(dev).impl
    return impl.executed if isinstance(impl, OpaqueDevice) else 0


def values(ts):
    return [np.array(t.numpy() if isinstance(t, mge.Tensor) else t) for t in ts]


def same_as_cpu(fn, d):
    """``fn(d)`` (a list of tensors) read back through ``.numpy()``: bit-identical to ``fn("cpu0")``
    (same dtypes and shapes); on an opaque device its kernels ran.  Returns the values."""
    before = executed(d)
    got = values(fn(d))
    if d != "cpu0":
        assert executed(d) > before, f"no kernel ran on {d}"
    ref = values(fn("cpu0"))
    assert len(got) == len(ref)
    for a, b in zip(got, ref):
        assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, a.shape, b.dtype, b.shape)
        np.testing.assert_array_equal(a, b)
    return got


def on(d, array):
    return mge.tensor(array, device=d)


# == ops ==========================================================================================
def test_elementwise(dev, level):
    """Binary and unary elementwise ops, broadcasting, a Python scalar operand, comparisons and
    integer dtypes give numpy's values, the same bits on both devices, on the tensor's device."""
    r = rng()
    a = r.randn(8, 16).astype("float32")
    b = r.randn(16).astype("float32")
    i = r.randint(-5, 5, size=(8, 16)).astype("int32")

    def run(d):
        x, y, k = on(d, a), on(d, b), on(d, i)
        outs = [x + y, x * 2.5, 3 - x, F.exp(x), F.relu(x), F.maximum(x, y), x > y,
                F.where(x > 0, x, y), k * 3 + 1, k // 2, F.abs(k)]
        assert all(o.device == d for o in outs)
        return outs

    got = same_as_cpu(run, dev)
    ref = [a + b, a * np.float32(2.5), np.float32(3) - a, np.exp(a), np.maximum(a, 0),
           np.maximum(a, b), a > b, np.where(a > 0, a, b), i * 3 + 1, i // 2, np.abs(i)]
    for g, e in zip(got, ref):
        np.testing.assert_allclose(g, e, rtol=1e-6)
        assert g.dtype == e.dtype


def test_reductions(dev, level):
    """sum/mean/max/min/prod over all axes, one axis and with keepdims, and argmax, match numpy
    and agree bit for bit between the devices."""
    a = rng(1).randn(6, 32).astype("float32")

    def run(d):
        x = on(d, a)
        return [x.sum(), x.mean(axis=1), x.max(axis=0), x.min(axis=1, keepdims=True),
                F.prod(x[:, :4], axis=1), F.argmax(x, axis=1)]

    got = same_as_cpu(run, dev)
    ref = [a.sum(), a.mean(axis=1), a.max(axis=0), a.min(axis=1, keepdims=True),
           a[:, :4].prod(axis=1), a.argmax(axis=1)]
    for g, e in zip(got, ref):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5)
        assert g.shape == e.shape


@pytest.mark.parametrize("n", [5, 128], ids=["small", "worker"])
def test_matmul(dev, level, n):
    """matmul of a small and of a 128x128 product (a long-running op: the worker thread runs it
    at async level 2) and a batched product."""
    r = rng(2)
    a = r.randn(n, n + 3).astype("float32")
    b = r.randn(n + 3, n).astype("float32")
    c = r.randn(3, n, 4).astype("float32")

    def run(d):
        x, y, z = on(d, a), on(d, b), on(d, c)
        return [F.matmul(x, y), F.matmul(F.matmul(x, y), z)]

    got = same_as_cpu(run, dev)
    if n == 128 and level == 2 and dev != "cpu0":  # a long-running op: the worker ran it
        assert ch.worker_thread() in opaque_device(dev).threads["MatrixMul"]
    np.testing.assert_allclose(got[0], a @ b, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got[1], (a @ b) @ c, rtol=1e-3, atol=1e-3)


def test_conv2d(dev, level):
    """A small conv2d with bias, padding and stride matches a direct float64 convolution."""
    r = rng(3)
    x = r.randn(2, 3, 8, 8).astype("float32")
    w = r.randn(4, 3, 3, 3).astype("float32")
    bias = r.randn(1, 4, 1, 1).astype("float32")

    def run(d):
        return [F.conv2d(on(d, x), on(d, w), on(d, bias), stride=2, padding=1)]

    (got,) = same_as_cpu(run, dev)
    xp = np.pad(x.astype("float64"), ((0, 0), (0, 0), (1, 1), (1, 1)))
    ref = np.zeros((2, 4, 4, 4))
    for i in range(4):
        for j in range(4):
            patch = xp[:, :, 2 * i:2 * i + 3, 2 * j:2 * j + 3]
            ref[:, :, i, j] = np.einsum("nchw,ochw->no", patch, w)
    ref += bias
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def test_indexing_get(dev, level):
    """Slices with steps, an integer index, an index tensor and a boolean mask (an output shape
    known only after the kernel) read numpy's elements."""
    a = rng(4).randn(6, 10).astype("float32")
    idx = np.array([4, 0, 2, 2], "int32")
    mask = a > 0.3

    def run(d):
        x = on(d, a)
        return [x[1:, ::2], x[:, 3], x[on(d, idx)], x[idx], x[on(d, mask)], x[-1]]

    got = same_as_cpu(run, dev)
    ref = [a[1:, ::2], a[:, 3], a[idx], a[idx], a[mask], a[-1]]
    for g, e in zip(got, ref):
        np.testing.assert_array_equal(g, e)


def test_indexing_set(dev, level):
    """``x[1:, ::2] = v``, ``x[idx] = v`` and ``x[mask] = v`` update the tensor in place as numpy
    does; the values are read back from the device."""
    a = rng(5).randn(6, 10).astype("float32")
    v = rng(6).randn(5, 5).astype("float32")
    idx = np.array([0, 3], "int32")
    mask = a < -0.5

    def run(d):
        x = on(d, a)
        x[1:, ::2] = on(d, v)
        y = on(d, a)
        y[on(d, idx)] = 7.0
        z = on(d, a)
        z[on(d, mask)] = 0.0
        return [x, y, z]

    got = same_as_cpu(run, dev)
    ex, ey, ez = a.copy(), a.copy(), a.copy()
    ex[1:, ::2] = v
    ey[idx] = 7.0
    ez[mask] = 0.0
    for g, e in zip(got, [ex, ey, ez]):
        np.testing.assert_array_equal(g, e)


def test_tiny_values_are_computed_on_the_host_then_put_on_the_device(dev, level):
    """Ops on tiny values (4 elements) run at once on the host; their results live on the
    tensor's device (given by ``from_host``), and mix with values computed by its kernels."""
    a = np.array([1.0, -2.0, 3.5, 4.0], "float32")
    big = rng(7).randn(16, 4).astype("float32")
    d_impl = mge._core.device.as_device(dev).impl
    puts = getattr(d_impl, "from_host_calls", 0)
    kernels = executed(dev)
    x = on(dev, a)
    y = (x * 2 + 1) * x
    s = y.sum()
    assert y.device == dev and s.device == dev
    np.testing.assert_array_equal(y.numpy(), (a * 2 + 1) * a)
    assert s.item() == float(((a * 2 + 1) * a).sum())
    if dev != "cpu0":
        assert executed(dev) == kernels                 # the host ran them, not the device
        assert d_impl.from_host_calls >= puts + 5       # x, x*2, +1, *x, sum: put on the device
    z = on(dev, big) + y                                # a device kernel reads a host result
    np.testing.assert_array_equal(z.numpy(), big + (a * 2 + 1) * a)
    if dev != "cpu0":
        assert executed(dev) == kernels + 1


# == training =====================================================================================
def _train_steps(d, steps=3):
    r = rng(8)
    data = r.randn(32, 16).astype("float32")
    label = r.randint(0, 5, size=(32,)).astype("int32")
    w1 = (r.randn(24, 16) * 0.25).astype("float32")
    w2 = (r.randn(5, 24) * 0.25).astype("float32")
    # Module has no .to(): the model is made with the device as the default one (its
    # initialisation runs there), then given fixed weights with Parameter(..., device=d)
    old = D.get_default_device()
    D.set_default_device(d)
    try:
        net = M.Sequential(M.Linear(16, 24), M.Linear(24, 5))
    finally:
        D.set_default_device(old)
    for layer, w in zip((net[0], net[1]), (w1, w2)):
        layer.weight = mge.Parameter(w, device=d)
        layer.bias = mge.Parameter(np.zeros(w.shape[0], "float32"), device=d)
    params = list(net.parameters())
    assert all(p.device == d for p in params)
    gm = GradManager().attach(params)
    opt = optim.SGD(params, lr=0.1, momentum=0.9)
    x, y = on(d, data), on(d, label)
    losses = []
    for _ in range(steps):
        with gm:
            loss = F.nn.cross_entropy(net[1](F.relu(net[0](x))), y)
            gm.backward(loss)
        opt.step().clear_grad()
        losses.append(loss)
    assert all(p.device == d for p in params)
    buffers = [opt._state[p]["momentum_buffer"] for p in params]
    assert all(b.device == d for b in buffers)
    return losses + params + buffers


def test_training_step_with_grad_manager_and_sgd_momentum(dev, level):
    """Three steps of a two-layer model (parameters on the device) with GradManager and
    SGD(momentum=0.9): losses fall, and losses, parameters and momentum buffers are
    bit-identical to the same training on cpu0."""
    got = same_as_cpu(_train_steps, dev)
    losses = [float(v) for v in got[:3]]
    assert losses[2] < losses[0]


# == swap, drop, DTR ==============================================================================
def _settle():
    # garbage of earlier tests must not be freed between two memory readings
    gc.collect()
    mge._full_sync()


def test_swap_out_and_in_keep_values_and_move_memory(dev, level, options):
    """``_swap_out`` frees the device storage (a host copy stays), ``_swap_in`` and a use bring the
    value back through the device's ``from_host``; the values never change."""
    set_option("enable_swap", 1)
    a = rng(9).rand(N).astype("float32")
    x = on(dev, a)
    _settle()
    before = D.get_allocated_memory(dev)
    x._swap_out()
    assert D.get_allocated_memory(dev) == before - 4 * N
    x._swap_in()
    assert D.get_allocated_memory(dev) == before
    np.testing.assert_array_equal(x.numpy(), a)
    x._swap_out()
    y = x * 2                                   # a use swaps it in
    np.testing.assert_array_equal(y.numpy(), a * 2)
    np.testing.assert_array_equal(x.numpy(), a)
    x._swap_out()
    np.testing.assert_array_equal(x.numpy(), a)  # a read swaps it in
    assert y.device == dev and x.device == dev


def test_drop_recomputes_bit_identically_on_the_device(dev, level, options):
    """A dropped tensor is recomputed from its recorded producer, by the device's kernel door, with
    the same bits; its storage goes and comes back in the device's memory statistics."""
    set_option("enable_drop", 1)
    set_option("record_computing_path", 1)
    x = on(dev, rng(10).rand(N).astype("float32"))
    a = F.sin(x)                # named: a deleted temporary would end the recorded path
    b = F.exp(a)
    ea, eb = a.numpy().copy(), b.numpy().copy()
    _settle()
    gc.disable()
    try:
        before = D.get_allocated_memory(dev)
        recomputed = ch.counters()["recomputed"]
        a._drop()
        b._drop()
        mge._full_sync()
        assert D.get_allocated_memory(dev) == before - 2 * 4 * N
        kernels = executed(dev)
        np.testing.assert_array_equal(b.numpy(), eb)    # b from a from x
        assert ch.counters()["recomputed"] == recomputed + 2
        if dev != "cpu0":
            assert executed(dev) == kernels + 2          # the recomputations ran on the device
        np.testing.assert_array_equal(a.numpy(), ea)
        assert D.get_allocated_memory(dev) == before
    finally:
        gc.enable()
    np.testing.assert_array_equal(eb, same_as_cpu(lambda d: [F.exp(F.sin(on(d, x.numpy())))],
                                                  dev)[0])


def _chain(d, budget=None):
    """20 steps of ``sin(y) * 1.5`` from a 16 KB tensor on ``d``; with ``budget``, under DTR with
    that many bytes above the live ones.  Returns the values (read last to first: evicted ones are
    regenerated on reading) and the peak of live bytes above the start while the chain ran."""
    x = on(d, rng(11).rand(N).astype("float32"))
    _settle()
    base = D.get_allocated_memory(d)
    if budget is not None:
        mge.dtr.evictee_minimum_size = 1024
        mge.dtr.eviction_threshold = base + int(budget)
        mge.dtr.enable()
        mge.dtr.reset_stats()
    D.reset_max_memory_stats(d)
    ys = [x]
    for _ in range(20):
        ys.append(F.sin(ys[-1]) * 1.5)      # the temporary sin() is a released tensor
    mge._full_sync()
    peak = D.get_max_allocated_memory(d) - base
    return [y.numpy().copy() for y in reversed(ys)], peak


def test_dtr_chain_under_a_small_budget_is_bit_identical(dev, level, options):
    """A chain of 20 ops under a budget of 5 tensors on the device evicts and recomputes (on the
    device), keeps the live bytes near the budget, and gives the bits of the same chain without
    DTR (and of cpu0)."""
    plain, plain_peak = _chain(dev)
    kernels = executed(dev)
    with warnings.catch_warnings():
        warnings.simplefilter("error")      # "no tensors ... can be evicted" would be a failure
        under, peak = _chain(dev, budget=5 * 4 * N)
    st = mge.dtr.stats()
    mge.dtr.disable()
    for p, u in zip(plain, under):
        np.testing.assert_array_equal(p, u)
    assert st["evictions"] > 10 and st["evicted_bytes"] == st["evictions"] * 4 * N, st
    assert st["recomputations"] > 0, st
    if dev != "cpu0":
        assert executed(dev) >= kernels + 40 + st["recomputations"]
    assert plain_peak >= 20 * 4 * N
    assert peak <= 5 * 4 * N + 2 * 4 * N, peak   # the budget, then one op's inputs and output
    np.testing.assert_array_equal(plain[0], _chain("cpu0")[0][0])


def test_dtr_training_under_a_budget_is_bit_identical(dev, options):
    """The training steps of test_training_step... under DTR with a budget below their peak give
    the same losses, parameters and momentum buffers."""
    _settle()
    D.reset_max_memory_stats(dev)
    base = D.get_allocated_memory(dev)
    plain = values(_train_steps(dev, steps=2))
    _settle()
    peak = D.get_max_allocated_memory(dev) - base
    mge.dtr.evictee_minimum_size = 256
    mge.dtr.eviction_threshold = D.get_allocated_memory(dev) + peak // 2
    mge.dtr.enable()
    mge.dtr.reset_stats()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # at times only pinned tensors are left: not a failure
        under = values(_train_steps(dev, steps=2))
    st = mge.dtr.stats()
    mge.dtr.disable()
    for p, u in zip(plain, under):
        np.testing.assert_array_equal(p, u)
    assert st["evictions"] > 0, st


# == memory statistics ============================================================================
def test_allocated_memory_grows_and_falls_with_tensors(dev, level):
    """``get_allocated_memory(dev)`` counts a new tensor's bytes and gives them back when it is
    deleted; the peak saw it; other devices are untouched."""
    other = "opaque1" if dev == "cpu0" else "cpu0"
    warm = on(dev, np.zeros((1,), "float32")) + 1  # (the number 1 becomes a cached constant)
    del warm
    _settle()
    before, before_other = D.get_allocated_memory(dev), D.get_allocated_memory(other)
    D.reset_max_memory_stats(dev)
    x = on(dev, np.zeros((64, 64), "float32"))
    y = x + 1
    mge._full_sync()
    assert D.get_allocated_memory(dev) == before + 2 * 64 * 64 * 4
    assert D.get_allocated_memory(other) == before_other
    del y
    mge._full_sync()
    assert D.get_allocated_memory(dev) == before + 64 * 64 * 4
    del x
    mge._full_sync()
    assert D.get_allocated_memory(dev) == before
    assert D.get_max_allocated_memory(dev) == before + 2 * 64 * 64 * 4


def test_one_byte_tensors_count_their_own_storage(dev, level):
    """Tensors of one byte each (bool, int8) are counted once each: their storages are distinct."""
    _settle()
    before = D.get_allocated_memory(dev)
    ts = [on(dev, np.array([k % 2], "bool")) for k in range(3)] + [on(dev, np.int8(5))]
    ts.append(ts[0] | ts[1])
    mge._full_sync()
    assert D.get_allocated_memory(dev) == before + 5
    assert [bool(t.numpy().reshape(-1)[0]) for t in ts[:3]] == [False, True, False]
    del ts
    mge._full_sync()
    assert D.get_allocated_memory(dev) == before


# == transfers ====================================================================================
@pytest.mark.parametrize("src,dst", [("cpu0", "opaque0"), ("opaque0", "cpu0"),
                                     ("opaque0", "opaque1"), ("opaque0", "opaque0")])
def test_to_moves_values_between_devices(src, dst, level):
    """``Tensor.to`` copies a value between cpu0 and opaque0 both ways and between two opaque
    devices: the copy is on the target device, equal, independent of the source, and ops on it
    run there; memory is counted on the target."""
    a = rng(12).randn(32, 8).astype("float32")
    x = on(src, a) * 1.0
    _settle()
    before = D.get_allocated_memory(dst)
    target = mge._core.device.as_device(dst).impl
    kernels = executed(dst)
    y = x.to(dst)
    assert y.device == dst
    np.testing.assert_array_equal(y.numpy(), a)
    assert D.get_allocated_memory(dst) == before + a.nbytes
    if isinstance(target, OpaqueDevice):
        assert executed(dst) == kernels + 1       # the Copy ran on the target's kernel door
    x[0] = 0.0                                    # the copy does not see later updates
    np.testing.assert_array_equal(y.numpy(), a)
    z = (y * 2).to(src)
    assert z.device == src
    np.testing.assert_array_equal(z.numpy(), a * 2)


@pytest.mark.parametrize("first,second,size", [("cpu0", "opaque0", 16), ("opaque0", "opaque1", 16),
                                                ("opaque0", "cpu0", 4)],
                         ids=["cpu0+opaque0", "opaque0+opaque1", "tiny-opaque0+cpu0"])
def test_mixed_device_operands_are_an_error_at_the_call(first, second, size, level):
    """An op on tensors of two devices is refused by the call (as the seed's "cannot decide
    output comp node"), naming the devices; it never hands one device's buffer to the other's
    kernel, nor computes silently on one of them (tiny values included)."""
    x = on(first, np.ones(size, "float32"))
    y = on(second, np.ones(size, "float32"))
    try:
        with pytest.raises((ValueError, RuntimeError), match="device") as info:
            x + y
        assert not isinstance(info.value, mge.core.AsyncError)
        assert first in str(info.value) and second in str(info.value)
    finally:
        try:  # an error left pending by the kernel must not reach the next test
            mge._full_sync()
        except Exception:
            pass


# == the device really is the device ==============================================================
def test_kernels_run_through_the_opaque_devices_door(level):
    """Each op on opaque0 tensors is one call of opaque0's ``execute`` (with the op's name), and
    its results go to the host only when read (``to_host``)."""
    d = opaque_device("opaque0")
    a = rng(13).randn(16, 16).astype("float32")
    x = on("opaque0", a)
    mge._full_sync()
    runs, ops, reads = d.executed, dict(d.ops), d.to_host_calls
    y = F.matmul(F.exp(x), x) + x
    mge._full_sync()
    assert d.executed == runs + 3
    for name, n in (("MatrixMul", 1), ("Elemwise.exp", 1), ("Elemwise.add", 1)):
        hits = sum(v - ops.get(k, 0) for k, v in d.ops.items() if k.startswith(name))
        assert hits == n, (name, d.ops)
    assert d.to_host_calls == reads                 # nothing read yet
    np.testing.assert_allclose(y.numpy(), np.exp(a) @ a + a, rtol=1e-5)
    assert d.to_host_calls == reads + 1


def test_read_values_are_read_only_host_arrays(dev):
    """``.numpy()`` gives a read-only ndarray on every device; writing it raises."""
    x = on(dev, np.arange(32, dtype="float32")) + 1
    v = x.numpy()
    assert isinstance(v, np.ndarray) and not v.flags.writeable
    with pytest.raises(ValueError):
        v[0] = 5
    np.testing.assert_array_equal(x.numpy(), np.arange(32, dtype="float32") + 1)


def test_opaque_buffers_are_never_ndarrays(level, options):
    """White-box check (reads ``Tensor._info.value``, the channel's buffer): every way a value
    reaches opaque0 -- put, a kernel, a tiny host-computed value, a transfer, swap in, recompute
    after drop -- leaves an ``OpaqueBuffer`` there, never an ndarray."""
    set_option("enable_swap", 1)
    set_option("enable_drop", 1)
    set_option("record_computing_path", 1)
    a = rng(14).rand(N).astype("float32")
    x = on("opaque0", a)
    y = F.exp(x)
    tiny = on("opaque0", np.ones(4, "float32")) * 3
    moved = on("cpu0", a).to("opaque0")
    swapped = x * 2
    swapped._swap_out()
    swapped._swap_in()
    y._drop()
    (y + 0).numpy()
    mge._full_sync()
    for t in (x, y, tiny, moved, swapped):
        assert t.device == "opaque0"
        assert type(t._info.value) is OpaqueBuffer, type(t._info.value)
    np.testing.assert_array_equal(swapped.numpy(), a * 2)


def test_a_kernel_error_on_the_device_is_reported_once_and_the_channel_goes_on(dev, level):
    """An error only the kernel can find (an index tensor out of range) is raised by the call at
    async level 0 and at the next sync point as ``AsyncError`` at level 2, once; later ops on the
    device work."""
    from helpers import raises_at_run
    x = on(dev, np.arange(32, dtype="float32").reshape(8, 4))
    bad = on(dev, np.array([1, 100], "int32"))
    raises_at_run(IndexError, "100", lambda: x[bad].numpy())
    mge._full_sync()                                    # reported once: nothing more
    np.testing.assert_array_equal((x * 2)[on(dev, np.array([7], "int32"))].numpy(),
                                  [[56.0, 58.0, 60.0, 62.0]])


def test_compnode_constructs_from_a_name_as_in_megengine():
    """``CompNode("xpux")`` is the device of that name: it equals ``as_device``'s node, keeps the
    logical name, and tensors accept it; a non-name is a ``TypeError``, a bad name a
    ``ValueError``."""
    cn = D.CompNode("xpux")
    assert isinstance(cn, D.CompNode)
    assert cn == D.CompNode("cpu0") == "cpu0:0"
    assert str(cn) == cn.logical_name == "xpux:0" and cn.physical_name == "cpu0:0"
    assert repr(cn) == 'CompNode("cpu0:0" from "xpux:0")'
    assert D.CompNode(cn) is cn
    t = mge.tensor([1.0, 2.0], device=D.CompNode("cpu0:1"))
    assert str(t.device) == "cpu0:1"
    np.testing.assert_array_equal(t.numpy(), [1.0, 2.0])
    with pytest.raises(TypeError, match="device name"):
        D.CompNode(3)
    with pytest.raises(ValueError, match="invalid device name 'nope0x'"):
        D.CompNode("nope0x")
