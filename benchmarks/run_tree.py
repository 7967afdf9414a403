"""Run a script against the mge of another checkout: A/B timings of two commits.

    python benchmarks/run_tree.py PATH script.py [args...]

``PATH`` is a folder holding ``mge`` and ``mge_plugins`` (e.g. symlinks to another worktree's
``mge/`` and ``plugins/``, built with ``python setup.py build_ext --inplace`` there).  Setting
``PYTHONPATH`` is not enough: the editable install's import finder takes precedence over it,
so this drops that finder before putting ``PATH`` first.
"""
import runpy
import sys


def main():
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    path = sys.argv[1]
    sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
    sys.path.insert(0, path)
    sys.argv = sys.argv[2:]
    runpy.run_path(sys.argv[0], run_name="__main__")


if __name__ == "__main__":
    main()
