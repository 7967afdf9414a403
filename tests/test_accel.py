"""The switch between compiled and pure-Python hot modules."""
import os
import subprocess
import sys

import mge
from mge.core import compiled_modules

from mge._core._accel import HOT_MODULES

HOT = set(HOT_MODULES)


def _modes(**env):
    e = dict(os.environ)
    e.pop("MGE_PUREPYTHON", None)
    e.pop("MGE_REQUIRE_COMPILED", None)
    e.update(env)
    code = "import mge, json; print(json.dumps(mge.core.compiled_modules()))"
    r = subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    import json
    return json.loads(r.stdout)


def test_every_hot_module_is_selected():
    assert set(compiled_modules()) == HOT


def test_purepython_switch_selects_pure_modules():
    assert set(_modes(MGE_PUREPYTHON="1").values()) == {"pure"}


def test_compiled_modules_are_used_when_built():
    import importlib.util
    built = {m for m in HOT if importlib.util.find_spec(m + "_c") is not None}
    modes = _modes()
    assert {m for m, mode in modes.items() if mode == "compiled"} == built
    if os.environ.get("MGE_REQUIRE_COMPILED") == "1":  # CI: everything must have been built
        assert built == HOT


def test_importing_a_pure_twin_beside_its_compiled_module_is_refused():
    if compiled_modules()["mge._core.tensor"] != "compiled":
        return  # nothing to shadow in pure mode
    code = "import mge; import mge._core.tensor"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "_accel.load" in r.stderr


def test_tensor_class_is_the_selected_one():
    mod = "mge._core.tensor_c" if compiled_modules()["mge._core.tensor"] == "compiled" else "mge._core.tensor"
    assert mge.Tensor.__module__ == mod
