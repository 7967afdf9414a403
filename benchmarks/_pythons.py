"""Which Python runs MegEngine in the benchmarks (MegEngine 1.13 needs its own: Python 3.10 with
``numpy<2``, beside the one that runs mge).

The interpreter is, in this order: the script's ``--megengine-python PATH`` option, the
environment variable ``MGE_BENCH_MEGENGINE_PYTHON``, or the running Python if it can import
``megengine``.  With none of them MegEngine is skipped and one line on stderr says so.
"""
import importlib.util
import os
import shutil
import sys

ENV = {"megengine": "MGE_BENCH_MEGENGINE_PYTHON"}


def add_option(parser, fw="megengine"):
    """Add ``--<fw>-python PATH`` to an argparse parser."""
    parser.add_argument(
        f"--{fw}-python", metavar="PATH", default=None,
        help=f"the Python that runs {fw} (default: ${ENV[fw]}, else this Python if it can "
             f"import {fw}, else {fw} is skipped)")


def find(fw, given, prog, required=False):
    """The interpreter for ``fw``: ``given`` (the option), else ``$ENV[fw]``, else this Python if
    it can import ``fw``; ``None`` (after a one-line note on stderr) when there is none, or, if
    ``required`` (the user asked for ``fw`` by name), the script stops.  A path that was given
    but is not an executable stops the script too."""
    path, source = given, f"--{fw}-python"
    if not path and os.environ.get(ENV[fw]):
        path, source = os.environ[ENV[fw]], ENV[fw]
    if path:
        exe = shutil.which(path)
        if exe is None:
            raise SystemExit(f"{prog}: {source}={path}: no such executable")
        return exe
    if importlib.util.find_spec(fw) is not None:
        return sys.executable
    if required:
        raise SystemExit(f"{prog}: {fw} is not importable here: give --{fw}-python PATH or set "
                         f"{ENV[fw]}")
    print(f"{prog}: {fw} is not importable here and neither --{fw}-python nor {ENV[fw]} is set; "
          f"skipping {fw}", file=sys.stderr)
    return None


def is_this_python(path):
    """Whether ``path`` names the running interpreter (symlinks not followed: two virtual
    environments of one base Python are different interpreters)."""
    return os.path.abspath(path) == os.path.abspath(sys.executable)
