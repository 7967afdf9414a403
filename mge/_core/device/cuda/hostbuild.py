"""Generated CUDA kernels built as host C++ (g++) and called through ctypes: a GPU-free runner.

Every source in ``kernels/`` compiles both as CUDA (NVRTC) and as host C++: under g++ the
prelude's ``MGE_KERNEL`` is a plain ``extern "C"`` function and its grid-stride loop a serial
loop.  ``build`` turns a list of ``KernelSource`` into a shared library and ``HostLibrary`` calls
its kernels on host memory, so the very text a GPU would run is checked against the CPU device's
kernels on machines without one (the tests), and the CUDA device's launch logic can run on a
host emulation of the device.

Nothing is optimised: the build uses ``-O0`` (fastest to compile; IEEE arithmetic is the same at
any level, and contraction into FMA is off, as in the kernels' NVRTC flags).
"""
import ctypes
import os
import shutil
import subprocess
import tempfile

__all__ = ["find_gxx", "why_unavailable", "have_float16", "build", "HostLibrary",
           "HostBuildError"]

#: g++ flags of a host build (C++17 for the prelude's templates).
GXX_FLAGS = ("-O0", "-ffp-contract=off", "-std=c++17", "-fPIC")


class HostBuildError(RuntimeError):
    """g++ refused a generated program: the message holds its diagnostics."""


def find_gxx():
    """The g++ to build with: ``MGE_GXX`` when set, else ``g++`` on ``PATH`` (``None``: none)."""
    env = os.environ.get("MGE_GXX")
    if env:
        return env if shutil.which(env) else None
    return shutil.which("g++")


def why_unavailable():
    """Why no host build can be made here (``None`` when it can)."""
    if find_gxx() is None:
        env = os.environ.get("MGE_GXX")
        return (f"MGE_GXX={env} is no executable" if env else
                "g++ is needed to build the generated CUDA kernels for the host (none on PATH; "
                "set MGE_GXX)")
    return None


def have_float16(gxx=None):
    """Whether ``gxx`` has ``_Float16`` (GCC 12+ on x86-64): the host build of the float16
    kernels needs it."""
    gxx = gxx or find_gxx()
    if gxx is None:
        return False
    macros = subprocess.run([gxx, "-dM", "-E", "-x", "c++", "-"], input="",
                            capture_output=True, text=True).stdout
    return "__FLT16_MAX__" in macros


class HostLibrary:
    """A host build: ``function(name, argtypes)`` is one kernel as a ctypes function (returning
    nothing); ``path`` is the shared library, ``float16`` whether float16 kernels could be built
    with this compiler."""

    def __init__(self, path, float16):
        self.path = path
        self.float16 = float16
        self.lib = ctypes.CDLL(path)
        self._functions = {}

    def function(self, name, argtypes):
        """The kernel ``name`` taking ``argtypes`` (ctypes types, in its parameters' order)."""
        key = (name, tuple(argtypes))
        fn = self._functions.get(key)
        if fn is None:
            fn = self.lib[name]  # (a function object of its own: ``getattr`` shares one per name)
            fn.argtypes, fn.restype = list(argtypes), None
            self._functions[key] = fn
        return fn

    def __contains__(self, name):
        return hasattr(self.lib, name)

    def __repr__(self):
        return f"<HostLibrary {self.path}>"


def build(texts, directory=None, jobs=None, name="kernels"):
    """Compile ``texts`` (translation units: ``program(...)`` of kernel sources, each
    self-contained) side by side, ``jobs`` at a time (default: the cores, at most 4), and link
    them into one shared library in ``directory`` (default: a new temporary one).  Returns a
    ``HostLibrary``; a ``HostBuildError`` with g++'s messages if a unit does not compile."""
    gxx = find_gxx()
    if gxx is None:
        raise HostBuildError(why_unavailable())
    directory = directory or tempfile.mkdtemp(prefix="mge_cuda_host_")
    jobs = jobs or min(4, os.cpu_count() or 1)
    objects = []
    pending = list(enumerate(texts))
    while pending:
        batch, pending = pending[:jobs], pending[jobs:]
        procs = []
        for k, text in batch:
            src = os.path.join(directory, f"{name}{k}.cpp")
            obj = os.path.join(directory, f"{name}{k}.o")
            with open(src, "w") as f:
                f.write(text)
            procs.append((src, subprocess.Popen(
                [gxx, *GXX_FLAGS, "-c", "-x", "c++", src, "-o", obj],
                stderr=subprocess.PIPE, text=True)))
            objects.append(obj)
        for src, proc in procs:
            _, err = proc.communicate()
            if proc.returncode != 0:
                raise HostBuildError(f"g++ refused {src}:\n{err[-5000:]}")
    path = os.path.join(directory, f"{name}.so")
    done = subprocess.run([gxx, "-shared", *objects, "-o", path], capture_output=True, text=True)
    if done.returncode != 0:
        raise HostBuildError(f"g++ could not link {path}:\n{done.stderr[-5000:]}")
    return HostLibrary(path, have_float16(gxx))
