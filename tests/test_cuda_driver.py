"""Finding pycuda, the CUDA driver and the GPUs (``mge/_core/device/cuda/driver.py``).

No test here needs a GPU: each probe branch runs against a small test double of
``pycuda.driver`` put into ``sys.modules`` (``fake_pycuda``), or against this machine as it is.
``driver._reset_for_tests()`` forgets the probe between tests, and the registry's caches are
restored, so that the other tests see the machine's own state.
"""
import importlib.util
import json
import os
import sys
import threading
import types

import pytest

import mge
import mge.device as D
from mge._core.device import registry
from mge._core.device.cuda import driver

from helpers import run_script

GIB = 1 << 30


@pytest.fixture(autouse=True)
def fresh_probe():
    """Each test probes afresh; the registry's caches and the pycuda modules are as before."""
    cache, impls = dict(registry._cache), dict(registry.DEVICE_KINDS["cuda"].impls)
    modules = {k: v for k, v in sys.modules.items() if k.split(".")[0] == "pycuda"}
    driver._reset_for_tests()
    yield
    driver._reset_for_tests()
    registry._cache.clear()
    registry._cache.update(cache)
    registry.DEVICE_KINDS["cuda"].impls.clear()
    registry.DEVICE_KINDS["cuda"].impls.update(impls)
    for k in [k for k in sys.modules if k.split(".")[0] == "pycuda"]:
        del sys.modules[k]
    sys.modules.update(modules)


class Error(Exception):
    """The fake's ``pycuda.driver.Error``."""


class LogicError(Error):
    """The fake's ``pycuda.driver.LogicError``."""


TWO_GPUS = (("NVIDIA A10", 8, 6, 24 * GIB), ("NVIDIA H100", 9, 0, 80 * GIB))


def fake_pycuda(monkeypatch, gpus=TWO_GPUS, init_error=None):
    """Install a test double of ``pycuda`` / ``pycuda.driver`` with these GPUs (name, major,
    minor, bytes); ``init()`` raises ``drv.init_error`` when it is set.  Returns the driver
    module, whose ``calls`` lists what was asked of it."""
    drv = types.ModuleType("pycuda.driver")
    drv.calls = []
    drv.init_error = init_error
    stack = []  # this fake's context stack (one thread is enough for the tests)

    class Context:
        def __init__(self, index):
            self.index = index

        def push(self):
            drv.calls.append(("push", self.index))
            stack.append(self)

        @staticmethod
        def pop():  # pycuda: a static method that pops this thread's current context
            drv.calls.append(("pop", stack.pop().index))

        def __del__(self):  # pycuda releases a primary context when its object goes
            drv.calls.append(("release", self.index))

    class Device:
        def __init__(self, index):
            if not 0 <= index < len(gpus):
                raise LogicError("cuDeviceGet failed: invalid device ordinal")
            self.index = index

        @staticmethod
        def count():
            drv.calls.append(("count",))
            return len(gpus)

        def name(self):
            return gpus[self.index][0]

        def compute_capability(self):
            return gpus[self.index][1:3]

        def total_memory(self):
            return gpus[self.index][3]

        def get_attribute(self, attr):
            return {"MULTIPROCESSOR_COUNT": 72 + self.index}[attr]

        def retain_primary_context(self):
            drv.calls.append(("retain", self.index))
            return Context(self.index)

        def make_context(self, flags=0):
            raise AssertionError("mge must use the primary context, not make_context()")

    def init(flags=0):
        drv.calls.append(("init",))
        if drv.init_error is not None:
            raise drv.init_error

    def mem_get_info():
        assert stack, "cuMemGetInfo needs a current context"
        total = gpus[stack[-1].index][3]
        return total - GIB, total

    drv.Error, drv.LogicError, drv.Context, drv.Device = Error, LogicError, Context, Device
    drv.init, drv.mem_get_info = init, mem_get_info
    drv.device_attribute = types.SimpleNamespace(MULTIPROCESSOR_COUNT="MULTIPROCESSOR_COUNT")
    drv.get_version = lambda: (12, 4, 0)
    drv.get_driver_version = lambda: 12080
    pkg = types.ModuleType("pycuda")
    pkg.__path__ = []
    pkg.driver = drv
    monkeypatch.setitem(sys.modules, "pycuda", pkg)
    monkeypatch.setitem(sys.modules, "pycuda.driver", drv)
    return drv


class _NoPycuda:
    """A finder that answers as Python does where pycuda is not installed."""

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "pycuda":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


def _raises(fn, exc):
    with pytest.raises(exc) as info:
        fn()
    return str(info.value)


# ---- this machine, and a machine without pycuda --------------------------------------------

def test_import_mge_loads_no_cuda_code():
    """``import mge``, a tensor on the default device and ``is_cuda_available()`` import neither
    pycuda nor (for the first) mge's CUDA package."""
    r = run_script("""
        import sys, mge
        loaded = sorted(m for m in sys.modules if "cuda" in m)
        x = mge.tensor([1.0]) + 1
        print(loaded, mge.is_cuda_available(), x.device.physical_name,
              sorted(m for m in sys.modules if m.split(".")[0] == "pycuda"))
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["[]", "False", "cpu0:0", "[]"]


def _check_no_pycuda():
    assert not D.is_cuda_available() and not mge.is_cuda_available()
    assert D.get_device_count("gpu") == 0 and D.get_device_count("cuda") == 0
    assert D.as_device("xpux").physical_name == "cpu0:0"
    for ask in (lambda: mge.tensor(1, device="gpu0"), lambda: D.as_device("cuda0"),
                lambda: D.get_cuda_compute_capability(0), lambda: D.get_cuda_device_property(0),
                D.get_cuda_version, D.get_cuda_driver_version,
                lambda: D.get_mem_status_bytes("gpu0")):
        msg = _raises(ask, RuntimeError)
        assert "pycuda is not installed" in msg and 'pip install "mge[cuda]"' in msg, msg
    assert D.get_cudnn_version() == -1  # MegEngine's answer when built without cuDNN


def test_without_pycuda(monkeypatch):
    """Where pycuda is not installed (made so here on any machine), every use of the GPU says so
    and names the extra; the default device is the CPU."""
    for k in [k for k in sys.modules if k.split(".")[0] == "pycuda"]:
        monkeypatch.delitem(sys.modules, k)
    monkeypatch.setattr(sys, "meta_path", [_NoPycuda()] + sys.meta_path)
    _check_no_pycuda()
    assert "mge[cuda]" in driver.probe().reason


@pytest.mark.skipif(importlib.util.find_spec("pycuda") is not None, reason="pycuda is installed")
def test_this_machine_has_no_pycuda():
    """This machine as it is (CI has no pycuda): the same answers, and the probe is cached."""
    _check_no_pycuda()
    assert driver.probe() is driver.probe()


def test_messages_of_each_device_name(monkeypatch):
    """The error names the device asked for (``gpux``, ``cuda3:1``)."""
    monkeypatch.setattr(sys, "meta_path", [_NoPycuda()] + sys.meta_path)
    for k in [k for k in sys.modules if k.split(".")[0] == "pycuda"]:
        monkeypatch.delitem(sys.modules, k)
    for name in ("gpux", "cuda3:1", "gpu0:2"):
        assert _raises(lambda: D.as_device(name), RuntimeError).startswith(
            f"device {name!r} needs CUDA, which is not available here: pycuda is not installed")


# ---- the probe's branches, on the fake -----------------------------------------------------

def test_pycuda_fails_to_import(monkeypatch, tmp_path):
    """pycuda is there but its driver module does not import: the exception is in the message,
    and a missing libcuda is named as the driver."""
    pkg = tmp_path / "pycuda"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "driver.py").write_text(
        'raise ImportError("libcuda.so.1: cannot open shared object file: No such file")\n')
    for k in [k for k in sys.modules if k.split(".")[0] == "pycuda"]:
        monkeypatch.delitem(sys.modules, k)
    monkeypatch.syspath_prepend(str(tmp_path))
    msg = _raises(lambda: D.as_device("gpu0"), RuntimeError)
    assert "pycuda is installed but 'import pycuda.driver' failed (ImportError: libcuda.so.1" in msg
    assert "the NVIDIA driver library (libcuda.so) is missing" in msg
    assert D.get_device_count("gpu") == 0
    assert "libcuda.so" in _raises(D.get_cuda_driver_version, RuntimeError)

    driver._reset_for_tests()
    (pkg / "driver.py").write_text('raise ImportError("undefined symbol: cuMemAlloc_v2")\n')
    monkeypatch.delitem(sys.modules, "pycuda.driver", raising=False)
    msg = _raises(lambda: D.get_cuda_compute_capability(0), RuntimeError)
    assert msg.startswith("get_cuda_compute_capability(0) needs CUDA")
    assert "undefined symbol: cuMemAlloc_v2" in msg and "reinstall pycuda" in msg


def test_driver_fails_to_start(monkeypatch):
    """``cuInit`` fails: the message carries pycuda's error; the versions still answer (they
    need the driver library, not a started driver), as MegEngine's do without a GPU."""
    fake_pycuda(monkeypatch, init_error=LogicError("cuInit failed: unknown error"))
    msg = _raises(lambda: D.as_device("gpu0"), RuntimeError)
    assert msg == ("device 'gpu0' needs CUDA, which is not available here: the CUDA driver failed "
                   "to start (pycuda.driver.init() raised LogicError: cuInit failed: unknown "
                   "error); nvidia-smi shows whether the NVIDIA driver works")
    assert D.get_device_count("gpu") == 0 and not D.is_cuda_available()
    assert D.get_cuda_driver_version() == 12080 and D.get_cuda_version() == 12040


def test_no_gpu(monkeypatch):
    """A driver without a GPU (``cuInit``'s "no CUDA-capable device", or a count of 0): the
    message says so, and names CUDA_VISIBLE_DEVICES where it is set."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    fake_pycuda(monkeypatch, gpus=(),
                init_error=Error("cuInit failed: no CUDA-capable device is detected"))
    msg = _raises(lambda: D.as_device("gpu0"), RuntimeError)
    assert ("the CUDA driver found no GPU (pycuda.driver.init(): cuInit failed: no CUDA-capable "
            "device is detected); nvidia-smi lists the GPUs the driver sees") in msg
    assert D.get_device_count("gpu") == 0

    driver._reset_for_tests()
    fake_pycuda(monkeypatch, gpus=())
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    msg = _raises(lambda: D.get_cuda_device_property(0), RuntimeError)
    assert msg.endswith("the CUDA driver found no GPU (pycuda.driver.Device.count() is 0); "
                        "CUDA_VISIBLE_DEVICES='' may hide them")
    assert D.get_device_count("gpu") == 0


def test_two_gpus_queries(monkeypatch):
    """With two GPUs the queries of ``mge.device`` give the driver's values, MegEngine's way:
    compute capability ``major * 10 + minor``, properties with read-only fields, versions as
    ``major * 1000 + minor * 10``.  The probe runs once."""
    drv = fake_pycuda(monkeypatch)
    assert D.get_device_count("gpu") == 2 and D.get_device_count("cuda") == 2
    assert D.get_cuda_compute_capability(0) == 86 and D.get_cuda_compute_capability(1) == 90
    prop = D.get_cuda_device_property(1)
    assert (prop.name, prop.total_memory, prop.major, prop.minor) == ("NVIDIA H100", 80 * GIB, 9, 0)
    assert repr(prop) == ("DeviceProperties(name='NVIDIA H100', major=9, minor=0, "
                          f"total_memory={80 * GIB})")
    with pytest.raises(AttributeError):
        prop.major = 7
    assert D.get_cuda_version() == 12040 and D.get_cuda_driver_version() == 12080
    assert D.get_cudnn_version() == -1
    assert driver.compute_capability(1) == (9, 0) and driver.name(0) == "NVIDIA A10"
    assert driver.total_memory(0) == 24 * GIB
    assert driver.attribute(1, "MULTIPROCESSOR_COUNT") == 73
    assert drv.calls == [("init",), ("count",)]  # once, and no context for a query


def test_query_errors(monkeypatch):
    """An index beyond the GPUs names the count (MegEngine's "out of valid range"); another
    device type than CUDA has no properties; the index must be an int."""
    fake_pycuda(monkeypatch)
    msg = _raises(lambda: D.get_cuda_compute_capability(2), RuntimeError)
    assert msg == ("get_cuda_compute_capability(2): request gpu 2 out of valid range [0, 2) "
                   "(this machine has 2 CUDA devices)")
    assert "[0, 2)" in _raises(lambda: D.get_cuda_device_property(-1), RuntimeError)
    assert "unsupported device type DeviceType.CPU" in _raises(
        lambda: D.get_cuda_device_property(0, D.DeviceType.CPU), RuntimeError)
    with pytest.raises(TypeError):
        D.get_cuda_compute_capability("gpu0")


def test_the_unverified_device_is_off_unless_asked_for():
    """Off by default; ``MGE_CUDA_UNVERIFIED=1`` (what ``benchmarks/gpu/run.sh`` sets) turns it
    on, for its first runs on a GPU."""
    import subprocess
    import sys
    code = "from mge._core.device.cuda import driver; print(driver.DEVICE_IMPLEMENTED)"
    env = {k: v for k, v in os.environ.items() if k != "MGE_CUDA_UNVERIFIED"}
    off = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    on = subprocess.run([sys.executable, "-c", code], env=dict(env, MGE_CUDA_UNVERIFIED="1"),
                        capture_output=True, text=True)
    assert (off.stdout.strip(), on.stdout.strip()) == ("False", "True"), off.stderr + on.stderr


def test_gpu_not_implemented_yet(monkeypatch):
    """A GPU is there, but mge's CUDA device is not written: ``gpu0`` raises NotImplementedError
    (issue 16), ``is_cuda_available()`` is False and ``xpux`` is the CPU; an index beyond the
    GPUs says how many there are."""
    monkeypatch.setattr(driver, "DEVICE_IMPLEMENTED", False)
    fake_pycuda(monkeypatch)
    for name in ("gpu0", "cuda1", "gpux"):
        msg = _raises(lambda: D.as_device(name), NotImplementedError)
        assert msg.startswith(f"device {name!r}: gpu") and "see issue 16" in msg
        assert "MGE_CUDA_UNVERIFIED=1" in msg
    assert "gpu1 (NVIDIA H100) is there" in _raises(
        lambda: mge.tensor([1.0], device="gpu1"), NotImplementedError)
    assert not D.is_cuda_available()
    assert D.as_device("xpux").physical_name == "cpu0:0"
    msg = _raises(lambda: D.as_device("gpu5"), RuntimeError)
    assert msg == ("device 'gpu5': request gpu 5 out of valid range [0, 2) (this machine has 2 "
                   "CUDA devices)")
    assert not any(node.kind == "cuda" for node in registry._cache.values())


def test_available_needs_the_device_and_a_gpu(monkeypatch):
    """``is_cuda_available()`` is "implemented and a GPU found"; while the device is not
    implemented it probes nothing (so it imports no pycuda)."""
    monkeypatch.setattr(driver, "DEVICE_IMPLEMENTED", False)
    drv = fake_pycuda(monkeypatch)
    assert not D.is_cuda_available() and drv.calls == []
    monkeypatch.setattr(driver, "DEVICE_IMPLEMENTED", True)
    assert D.is_cuda_available() and driver.usable()
    driver._reset_for_tests()
    fake_pycuda(monkeypatch, gpus=())
    assert not D.is_cuda_available()


def test_primary_context_is_retained_not_created(monkeypatch):
    """The primary context is retained once per GPU (never ``make_context``, never
    ``pycuda.autoinit``) and made current for a block; the memory query runs inside it."""
    drv = fake_pycuda(monkeypatch)
    with driver.current_context(1) as ctx:
        assert ctx is driver.primary_context(1)
    assert driver.memory_info(1) == (80 * GIB, 79 * GIB)
    assert [c for c in drv.calls if c[0] != "count"] == [
        ("init",), ("retain", 1), ("push", 1), ("pop", 1), ("push", 1), ("pop", 1)]
    assert "pycuda.autoinit" not in sys.modules
    assert "[0, 2)" in _raises(lambda: driver.primary_context(2), RuntimeError)


def test_probe_runs_once_across_threads(monkeypatch):
    """Threads that ask at once share one probe (one ``cuInit``)."""
    drv = fake_pycuda(monkeypatch)
    barrier = threading.Barrier(8)
    found = []

    def ask():
        barrier.wait()
        found.append(driver.probe())

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(found) == 8 and all(p is found[0] for p in found) and found[0].count == 2
    assert drv.calls.count(("init",)) == 1


# ---- fork ------------------------------------------------------------------------------------

def _error(fn):
    try:
        fn()
    except Exception as e:
        return [type(e).__name__, str(e)]
    return None


def _in_child(report):
    """Fork; the child sends ``report()`` (JSON) back through a pipe and exits at once."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never return into pytest
        try:
            os.close(r)
            try:
                out = json.dumps(report())
            except BaseException as e:
                out = json.dumps({"child failed": repr(e)})
            with os.fdopen(w, "w") as f:
                f.write(out)
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        data = f.read()
    os.waitpid(pid, 0)
    return json.loads(data)


fork_only = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


@fork_only
def test_forked_child_of_an_initialised_parent_cannot_use_cuda(monkeypatch):
    """After ``cuInit`` (and a retained context) in the parent, a forked child -- and its own
    children -- get a clear error for every use of the GPU instead of the parent's context;
    the parent's context is not released in the child."""
    drv = fake_pycuda(monkeypatch)
    driver.primary_context(0)
    parent, calls_before = os.getpid(), len(drv.calls)

    def report():
        import gc
        gc.collect()
        out = {
            "available": D.is_cuda_available(), "count": D.get_device_count("gpu"),
            "gpu0": _error(lambda: D.as_device("gpu0")),
            "capability": _error(lambda: D.get_cuda_compute_capability(0)),
            "context": _error(lambda: driver.primary_context(0)),
            "version": _error(D.get_cuda_version),
            "grandchild": _in_child(lambda: _error(lambda: D.as_device("gpu0"))),
        }
        out["driver calls"] = drv.calls[calls_before:]
        return out

    out = _in_child(report)
    hint = (f"CUDA cannot be used in a process forked from one that initialised CUDA (parent pid "
            f"{parent}); start the processes that use the GPU with the \"spawn\" start method")
    assert out["available"] is False and out["count"] == 0
    for key in ("gpu0", "capability", "context", "version"):
        assert out[key][0] == "RuntimeError" and hint in out[key][1], out
    assert out["gpu0"][1].startswith("device 'gpu0' needs CUDA, which is not available here")
    assert out["grandchild"][0] == "RuntimeError" and "forked from one that initialised" in out[
        "grandchild"][1]
    assert out["driver calls"] == []  # no cuInit, no retain, no release in the child
    assert D.get_cuda_compute_capability(0) == 86  # the parent is unaffected


@fork_only
def test_forked_child_of_an_untouched_parent_probes(monkeypatch):
    """A parent that never initialised CUDA (here: never probed, or its probe failed before
    ``cuInit``) leaves its child free to probe for itself."""
    drv = fake_pycuda(monkeypatch)

    def report():
        return {"count": D.get_device_count("gpu"),
                "gpu0": _error(lambda: D.as_device("gpu0"))[0], "calls": drv.calls}

    assert _in_child(report) == {"count": 2, "gpu0": "NotImplementedError",
                                 "calls": [["init"], ["count"]]}
    assert drv.calls == []

    driver._reset_for_tests()
    failing = fake_pycuda(monkeypatch, init_error=Error("cuInit failed: unknown error"))
    assert D.get_device_count("gpu") == 0
    failing.init_error = None  # in the child the driver starts
    assert _in_child(lambda: D.get_device_count("gpu")) == 2


@fork_only
def test_forked_child_resolves_gpu_names_again(monkeypatch):
    """Names the parent resolved to a GPU (once the device exists) are not reused by a forked
    child: resolving them again gives the fork error."""
    fake_pycuda(monkeypatch)
    driver.probe()
    node = registry.CompNode._make("gpu0:0", "gpu0:0", "cuda", 0)
    registry._cache["gpu0"] = registry._cache["xpux"] = node
    assert D.as_device("gpu0") is node
    out = _in_child(lambda: [_error(lambda: D.as_device("gpu0")),
                             D.as_device("xpux").physical_name])
    assert out[0][0] == "RuntimeError" and "forked from one that initialised CUDA" in out[0][1]
    assert out[1] == "cpu0:0"
