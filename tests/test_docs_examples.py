"""The Python examples of README.md and the docs guides run as written.

Each fenced ``python`` block of README.md and each ``.. code-block:: python`` of the guide pages
runs in a fresh interpreter (so examples that register plugins or set options cannot leak into
other tests), in the same mode (compiled or pure Python) as this test run.
"""
import os
import pathlib
import re
import subprocess
import sys
import textwrap

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PAGES = ["README.md", "docs/index.rst", "docs/quickstart.rst", "docs/guides/plugins.rst", "docs/guides/async.rst",
         "docs/guides/autodiff.rst", "docs/guides/modules.rst", "docs/guides/training.rst", "docs/guides/dtr.rst",
         "docs/guides/devices.rst", "docs/guides/cuda.rst", "docs/guides/threads.rst", "docs/guides/trace.rst",
         "docs/guides/trace_dump.rst", "docs/guides/trace_onnx.rst", "docs/guides/graphs.rst", "docs/guides/data.rst",
         "docs/guides/profiler.rst", "docs/guides/traced_module.rst", "docs/guides/quantization.rst"]


def _markdown_blocks(text):
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


def _rst_blocks(text):
    blocks = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].strip() == ".. code-block:: python":
            i += 1
            body = []
            while i < len(lines) and (not lines[i].strip() or lines[i].startswith("   ")):
                body.append(lines[i])
                i += 1
            blocks.append(textwrap.dedent("\n".join(body)).strip() + "\n")
        else:
            i += 1
    return blocks


def _examples():
    out = []
    for page in PAGES:
        path = ROOT / page
        if not path.exists():
            continue
        text = path.read_text(encoding="utf-8")
        blocks = _markdown_blocks(text) if page.endswith(".md") else _rst_blocks(text)
        for n, code in enumerate(blocks):
            out.append(pytest.param(code, id=f"{page}#{n}"))
    return out


EXAMPLES = _examples()


def test_pages_have_examples():
    assert len(EXAMPLES) >= 5


@pytest.mark.parametrize("code", EXAMPLES)
def test_example_runs(code, tmp_path):
    script = tmp_path / "example.py"
    script.write_text(code, encoding="utf-8")
    env = dict(os.environ)
    env.setdefault("PYTHONPATH", "")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env["PYTHONPATH"]) if p)
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"example failed:\n{code}\n--- stderr ---\n{proc.stderr}"


def test_benchmark_command_runs():
    """The command of benchmarks/README.md works (tiny sizes) and prints its JSON line."""
    cmd = [sys.executable, str(ROOT / "benchmarks" / "bench_chain.py"), "--fw", "mge",
           "--reps", "1", "--small-ops", "20", "--large-steps", "2", "--async-level", "2"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    import json
    record = json.loads(proc.stdout.strip().splitlines()[-1])
    assert record["bench"] == "chain"
    assert set(record["results"]) == {"small_tensor", "small_float", "mid_tensor", "large"}
    for res in record["results"].values():
        assert res["mge"]["us_per_op"] > 0 and res["mge"]["ratio_vs_numpy"] > 0
