#!/usr/bin/env python
"""Run MegEngine 1.13's own Python tests against mge: one line per test file and a total.

Usage::

    python tools/peer_suite.py [--tests DIR] [--python PY] [--json OUT] [--timeout S] [FILE ...]

``DIR`` is MegEngine's test tree (``imperative/python/test`` of the v1.13.0 tag); by default
``$MGE_PEER_TESTS`` or ``../shared/peer/megengine-1.13.0-tests`` beside the checkout.  ``FILE``
paths are relative to it (``unit/core/test_util.py``); without any, every ``test_*.py`` under
``unit/`` and ``integration/`` except the distributed and XLA ones.  The tree is copied to a
temporary directory with a ``conftest.py`` that answers every ``megengine[.x]`` import with
``mge[.x]`` (MegEngine's own root conftest reads interpreter internals and is replaced), and pytest
runs each file in its own process.  Python programs the tests start themselves (``subprocess`` with
``import megengine``, multiprocessing's spawned children) get the alias through a
``sitecustomize`` on their ``PYTHONPATH``.  ``--json`` also writes ``{file: {passed, failed, line}}``.
Exit status: 0 when it ran (whatever the results), 2 when the test tree is missing.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_TESTS = os.path.join(os.path.dirname(ROOT), "shared", "peer", "megengine-1.13.0-tests")

# The import alias: every `megengine[.x]` import is `mge[.x]`.
ALIAS = '''
class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name == "megengine" or name.startswith("megengine."):
            return importlib.util.spec_from_loader(name, self)
        return None

    def create_module(self, spec):
        real = importlib.import_module("mge" + spec.name[len("megengine"):])
        self._spec = real.__spec__
        _mirror()
        return real

    def exec_module(self, module):
        module.__spec__ = self._spec


def _mirror():
    # what mge has loaded is megengine's too, before anything imports it by that name: the import
    # system would set a submodule as an attribute of its package (megengine.tensor, a module,
    # over mge.tensor, the function)
    for name, mod in list(sys.modules.items()):
        if name == "mge" or name.startswith("mge."):
            sys.modules.setdefault("megengine" + name[3:], mod)


sys.meta_path.insert(0, _Alias())
'''

# The conftest written into the copied tree: the import alias and MegEngine's skips for GPUs and
# distributed tests (which need several devices / processes mge's CPU device does not give).
CONFTEST = '''"""Written by mge's tools/peer_suite.py: every `megengine[.x]` import is `mge[.x]`."""
import importlib
import importlib.abc
import importlib.util
import os
import sys

import pytest
''' + ALIAS + '''
importlib.import_module("mge")
_mirror()
sys.path.append(os.path.join(os.path.dirname(__file__), "helpers"))


def pytest_configure(config):
    for m in ("require_ngpu", "isolated_distributed", "distributed_isolated", "skip_if_no_gpu"):
        config.addinivalue_line("markers", m)


@pytest.fixture(autouse=True)
def _skips(request):
    marker = request.node.get_closest_marker("require_ngpu")
    if marker and int(marker.args[0]) > 0:
        pytest.skip("needs a GPU")
    if (request.node.get_closest_marker("isolated_distributed")
            or request.node.get_closest_marker("distributed_isolated")):
        pytest.skip("distributed tests are out of scope")
'''


# Python programs the tests start (``subprocess`` with ``import megengine``, multiprocessing's
# spawned children) get the alias too: this directory leads their PYTHONPATH, and Python imports
# its ``sitecustomize`` at startup.  Only the finder: mge loads when a child imports megengine.
CHILD_DIR = "_mge_alias"
SITECUSTOMIZE = '''"""Written by mge's tools/peer_suite.py: `megengine[.x]` is `mge[.x]` here too."""
import importlib
import importlib.abc
import importlib.util
import sys
''' + ALIAS


def default_files(tests):
    """Every test file of the tree but the distributed and XLA ones, sorted."""
    out = []
    for top in ("unit", "integration"):
        for dirpath, _, names in os.walk(os.path.join(tests, top)):
            for n in names:
                if n.startswith("test_") and n.endswith(".py"):
                    rel = os.path.relpath(os.path.join(dirpath, n), tests)
                    if "distributed" not in rel and "/xla/" not in "/" + rel:
                        out.append(rel)
    return sorted(out)


def parse_summary(line):
    """``(passed, failed_or_errored)`` from pytest's last line."""
    passed = sum(int(n) for n in re.findall(r"(\d+) passed", line))
    failed = sum(int(n) for n in re.findall(r"(\d+) (?:failed|errors?)\b", line))
    return passed, failed


def run_file(work, rel, python, timeout):
    """Run one file with pytest in ``work``; returns pytest's summary line."""
    cmd = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=", rel]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.join(work, CHILD_DIR)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    try:
        proc = subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=timeout,
                              env=env)
    except subprocess.TimeoutExpired:
        return f"timed out after {timeout}s"
    lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()]
    for ln in reversed(lines):  # pytest's summary, unless the process died before it
        if re.search(r"\d+ (passed|failed|errors?|skipped|deselected)\b|no tests ran", ln):
            return ln.strip("= ")
    tail = lines[-1][:100] if lines else "no output"
    return f"1 error: pytest died (exit {proc.returncode}): {tail}"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*", help="test files, relative to the test tree")
    ap.add_argument("--tests", default=os.environ.get("MGE_PEER_TESTS", DEFAULT_TESTS),
                    help="MegEngine's test tree (default: %(default)s)")
    ap.add_argument("--python", default=sys.executable, help="the Python that has mge installed")
    ap.add_argument("--json", help="also write the results as JSON to this file")
    ap.add_argument("--timeout", type=int, default=900, help="seconds per file")
    ap.add_argument("--list", action="store_true", help="print the files and exit")
    args = ap.parse_args(argv)

    if not os.path.isdir(args.tests):
        print(f"peer_suite: MegEngine's test tree is not at {args.tests}; pass --tests DIR or set "
              "MGE_PEER_TESTS (imperative/python/test of MegEngine v1.13.0)", file=sys.stderr)
        return 2
    files = args.files or default_files(args.tests)
    if args.list:
        print("\n".join(files))
        return 0
    work = tempfile.mkdtemp(prefix="mge_peer_")
    results = {}
    total_p = total_f = 0
    try:
        shutil.copytree(args.tests, work, dirs_exist_ok=True)
        with open(os.path.join(work, "conftest.py"), "w") as f:
            f.write(CONFTEST)
        os.makedirs(os.path.join(work, CHILD_DIR), exist_ok=True)
        with open(os.path.join(work, CHILD_DIR, "sitecustomize.py"), "w") as f:
            f.write(SITECUSTOMIZE)
        for rel in files:
            line = run_file(work, rel, args.python, args.timeout)
            p, n = parse_summary(line)
            total_p += p
            total_f += n
            results[rel] = {"passed": p, "failed": n, "line": line}
            print(f"{rel:<52} {line}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"peer suite: {total_p} passed, {total_f} failed or errored")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"files": results, "passed": total_p, "failed": total_f}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
