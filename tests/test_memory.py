"""Memory statistics: exact bytes of live tensor storage per device (``mge.device``)."""
import gc

import numpy as np
import pytest

import mge
from mge.device import get_allocated_memory, get_max_allocated_memory, reset_max_memory_stats


@pytest.fixture(autouse=True)
def _settled():
    gc.collect()
    mge._full_sync()
    yield


@pytest.mark.parametrize("device", [None, "cpu0"])
def test_allocation_is_exact_and_freed(device):
    base = get_allocated_memory(device)
    a = mge.tensor(np.zeros(1000, "float32"), device=device)
    assert get_allocated_memory(device) == base + 4000
    b = mge.tensor(np.zeros((10, 10), "int16"), device=device)
    assert get_allocated_memory(device) == base + 4200
    c = a + a                                    # computed on the worker: counted once it has run
    assert get_allocated_memory(device) == base + 8200
    del a
    assert get_allocated_memory(device) == base + 4200
    del b, c
    assert get_allocated_memory(device) == base


def test_default_device_and_cpu0_are_the_same_storage():
    base = get_allocated_memory()
    base0 = get_allocated_memory("cpu0")
    x = mge.tensor(np.zeros(1000, "float32"), device="cpu0")
    assert get_allocated_memory("cpu0") == base0 + 4000
    assert get_allocated_memory() == base + 4000   # xpux maps to cpu0 on this machine
    del x
    assert get_allocated_memory("cpu0") == base0


def test_views_sharing_a_buffer_count_once():
    base = get_allocated_memory()
    x = mge.tensor(np.zeros(1000, "float32"))
    r = x.reshape(10, 100)
    d = x.detach()
    assert get_allocated_memory() == base + 4000
    del x
    assert get_allocated_memory() == base + 4000   # still held by the views
    del r
    assert get_allocated_memory() == base + 4000
    del d
    assert get_allocated_memory() == base


def test_a_users_numpy_view_does_not_count():
    base = get_allocated_memory()
    x = mge.tensor(np.zeros(1000, "float32"))
    v = x.numpy()
    del x
    assert get_allocated_memory() == base          # the tensor is gone; numpy owns the view
    assert v.sum() == 0


def test_in_place_reuse_does_not_double_count():
    base = get_allocated_memory()
    x = mge.tensor(np.zeros(1000, "float32"))
    y = x * x
    del x                                        # fused: y takes x's buffer
    assert get_allocated_memory() == base + 4000
    del y
    assert get_allocated_memory() == base


def test_peak_tracking_and_reset():
    reset_max_memory_stats()
    base = get_allocated_memory()
    assert get_max_allocated_memory() == base
    x = mge.tensor(np.zeros(1000, "float32"))
    y = x + x
    assert get_max_allocated_memory() == base + 8000
    del x, y
    assert get_allocated_memory() == base
    assert get_max_allocated_memory() == base + 8000
    reset_max_memory_stats()
    assert get_max_allocated_memory() == base
    z = mge.tensor(np.zeros(10, "int8"))
    assert get_max_allocated_memory() == base + 10
    del z
    reset_max_memory_stats("cpu0")
    assert get_max_allocated_memory("cpu0") == get_allocated_memory("cpu0")


def test_tiny_host_computed_values_are_counted_too():
    base = get_allocated_memory()
    t = mge.tensor([1.0, 2.0])
    u = t + t
    assert get_allocated_memory() == base + 16
    del t, u
    assert get_allocated_memory() == base


def test_a_strided_source_is_copied_to_its_exact_size():
    big = np.zeros(10000, "float32")
    base = get_allocated_memory()
    x = mge.tensor(big[::10])
    assert get_allocated_memory() == base + 4000
    del x
    assert get_allocated_memory() == base


def test_a_collection_inside_the_stats_lock_does_not_deadlock():
    # A garbage collection can start inside MemoryStats.hold (it allocates a list) and finalize a
    # Tensor of a reference cycle, whose __del__ releases its buffer on the same thread: the
    # stats' lock is reentrant.  A CI run once hung on that path (seen in gdb); this drives many
    # collections through ops while the worker is busy, in a child process that bounds a hang.
    # (It is not a deterministic reproduction: the original needed a particular collection.)
    import subprocess
    import sys
    import textwrap
    code = textwrap.dedent("""
        import gc
        import numpy as np
        import mge
        gc.set_threshold(1)  # every allocation of a tracked object may collect
        big = mge.tensor(np.ones((200, 200), "float32"))
        x = mge.tensor(np.ones(8, "float32"))
        for i in range(300):
            y = big @ big                   # the worker busy: ops take the locked path
            box = []
            box.append(box)                 # a cycle only the collector frees ...
            box.append(mge.tensor(np.full(8, i, "float32")))  # ... holding a tensor
            del box
            x = x + 1                       # new buffers: MemoryStats.hold
        assert float(x.numpy()[0]) == 301.0
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
