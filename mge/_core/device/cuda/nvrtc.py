"""NVRTC (CUDA C -> PTX) through ctypes, and ``ptxas`` (PTX -> SASS) through a subprocess.

Neither needs a GPU or a CUDA driver: the CUDA device generates its kernels' CUDA C at run time
(``kernels/``) and compiles them here, and the tests compile every generated kernel on machines
without a GPU.  ``libnvrtc`` comes from the ``nvidia-cuda-nvrtc-cu12`` wheel (or a CUDA toolkit),
``ptxas`` from ``nvidia-cuda-nvcc-cu12`` (or a toolkit on ``PATH``).

Nothing is loaded at import: ``import mge`` must work without CUDA, so the library is opened on
the first call that needs it, and a missing one is an error of that call (``available()`` and
``why_unavailable()`` ask without raising).

* ``compile_ptx(source, name, arch, options) -> str`` -- PTX, cached in memory per
  (source, arch, options), so a kernel compiles once per process;
* ``assemble(ptx, arch) -> bytes`` -- a cubin from ptxas, to check PTX (or load SASS directly);
* ``nvrtc_version()``, ``supported_archs()``, ``find_ptxas()``;
* ``CudaCompileError`` -- a failed compile or assembly, with the program's name, the
  architecture and the compiler's log.
"""
import ctypes
import ctypes.util
import glob
import os
import shutil
import subprocess
import tempfile
import threading

__all__ = ["CudaCompileError", "compile_ptx", "assemble", "nvrtc_version", "supported_archs",
           "find_ptxas", "find_nvrtc", "nvrtc_candidates", "available", "why_unavailable",
           "clear_cache"]


class CudaCompileError(RuntimeError):
    """NVRTC or ptxas rejected a program: ``name`` (the program's name), ``arch`` (the target
    architecture) and ``log`` (the compiler's messages) say which and why."""

    def __init__(self, tool, name, arch, log):
        self.tool, self.name, self.arch, self.log = tool, name, arch, log
        super().__init__(f"{tool} could not compile {name!r} for {arch}:\n{log.strip()}")


# -- finding and opening libnvrtc -----------------------------------------------------------------

def _wheel_dirs(package, sub):
    """The folders ``sub`` of a namespace package's portions (``nvidia.cuda_nvrtc`` may be
    spread over several site-packages), without importing anything heavy."""
    try:
        module = __import__(package, fromlist=["__path__"])
    except ImportError:
        return []
    return [os.path.join(p, sub) for p in getattr(module, "__path__", ())]


def _toolkit_roots():
    """CUDA toolkits on this machine: ``CUDA_HOME``/``CUDA_PATH``, the one the ``nvcc`` on
    ``PATH`` belongs to, ``/usr/local/cuda``."""
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")]
    nvcc = shutil.which("nvcc")
    if nvcc:
        roots.append(os.path.dirname(os.path.dirname(os.path.realpath(nvcc))))
    roots.append("/usr/local/cuda")
    return [r for r in dict.fromkeys(roots) if r]


def nvrtc_candidates():
    """Where libnvrtc may be, in the order tried: ``MGE_NVRTC_LIBRARY``, the wheels (CUDA 12's
    ``nvidia/cuda_nvrtc``, CUDA 13's ``nvidia/cu13``), the linker's search path, the toolkits."""
    env = os.environ.get("MGE_NVRTC_LIBRARY")
    if env:
        return [env]  # an explicit choice is the only one tried: a wrong path is an error
    dirs = (_wheel_dirs("nvidia.cuda_nvrtc", "lib") + _wheel_dirs("nvidia.cuda_nvrtc", "bin")
            + _wheel_dirs("nvidia", os.path.join("cu13", "lib")))
    found = []
    for d in dirs:
        # libnvrtc.so.12 (Linux) or nvrtc64_120_0.dll (Windows); never libnvrtc-builtins
        found += sorted(glob.glob(os.path.join(d, "libnvrtc.so*")))
        found += sorted(glob.glob(os.path.join(d, "nvrtc64_*.dll")))
    name = ctypes.util.find_library("nvrtc")
    if name:
        found.append(name)
    for root in _toolkit_roots():
        for sub in ("lib64", os.path.join("targets", "*", "lib")):
            found += sorted(glob.glob(os.path.join(root, sub, "libnvrtc.so*")))
    return list(dict.fromkeys(found))


_lock = threading.Lock()
_state = {}  # "lib": the opened library, or "error": why it could not be opened


def _declare(lib):
    c_int, c_size_t, c_char_p, c_void_p = (ctypes.c_int, ctypes.c_size_t, ctypes.c_char_p,
                                           ctypes.c_void_p)
    p_int, p_size = ctypes.POINTER(c_int), ctypes.POINTER(c_size_t)
    p_prog = ctypes.POINTER(c_void_p)
    sigs = {
        "nvrtcVersion": (p_int, p_int),
        "nvrtcCreateProgram": (p_prog, c_char_p, c_char_p, c_int, ctypes.POINTER(c_char_p),
                               ctypes.POINTER(c_char_p)),
        "nvrtcCompileProgram": (c_void_p, c_int, ctypes.POINTER(c_char_p)),
        "nvrtcDestroyProgram": (p_prog,),
        "nvrtcGetPTXSize": (c_void_p, p_size),
        "nvrtcGetPTX": (c_void_p, c_char_p),
        "nvrtcGetProgramLogSize": (c_void_p, p_size),
        "nvrtcGetProgramLog": (c_void_p, c_char_p),
    }
    for fname, argtypes in sigs.items():
        fn = getattr(lib, fname)
        fn.argtypes, fn.restype = argtypes, c_int
    lib.nvrtcGetErrorString.argtypes, lib.nvrtcGetErrorString.restype = (c_int,), c_char_p
    if hasattr(lib, "nvrtcGetNumSupportedArchs"):  # CUDA 11.2 and later
        for fname in ("nvrtcGetNumSupportedArchs", "nvrtcGetSupportedArchs"):
            getattr(lib, fname).argtypes, getattr(lib, fname).restype = (p_int,), c_int
    return lib


def _load():
    """The opened libnvrtc, opened on first use; an ``OSError`` saying where it was looked for."""
    with _lock:
        if "lib" not in _state and "error" not in _state:
            tried = []
            for path in nvrtc_candidates():
                try:
                    _state["lib"] = _declare(ctypes.CDLL(path))
                    _state["path"] = path
                    break
                except (OSError, AttributeError) as e:
                    tried.append(f"{path}: {e}")
            else:
                where = "; ".join(tried) or "no candidate found"
                _state["error"] = ("libnvrtc not found (set MGE_NVRTC_LIBRARY, or pip install "
                                   f"nvidia-cuda-nvrtc-cu12): {where}")
        if "error" in _state:
            raise OSError(_state["error"])
        return _state["lib"]


def find_nvrtc():
    """The path of the libnvrtc that ``compile_ptx`` uses (opening it), or ``None``."""
    return _state.get("path") if available() else None


def available():
    """Whether libnvrtc can be opened (it is opened by this call if it was not yet)."""
    try:
        _load()
        return True
    except OSError:
        return False


def why_unavailable():
    """``None`` when NVRTC can be used, else the reason (for a test's skip message)."""
    try:
        _load()
        return None
    except OSError as e:
        return str(e)


def _check(lib, result, what):
    if result != 0:
        raise RuntimeError(f"{what} failed: {lib.nvrtcGetErrorString(result).decode()}")


def nvrtc_version():
    """``(major, minor)`` of the libnvrtc in use, e.g. ``(12, 9)``."""
    lib = _load()
    major, minor = ctypes.c_int(), ctypes.c_int()
    _check(lib, lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)), "nvrtcVersion")
    return major.value, minor.value


def supported_archs():
    """The SM versions this NVRTC compiles for, as ints (``[50, ..., 90, ...]``), oldest first."""
    lib = _load()
    if not hasattr(lib, "nvrtcGetNumSupportedArchs"):
        raise NotImplementedError("this NVRTC (before CUDA 11.2) cannot list its architectures")
    n = ctypes.c_int()
    _check(lib, lib.nvrtcGetNumSupportedArchs(ctypes.byref(n)), "nvrtcGetNumSupportedArchs")
    archs = (ctypes.c_int * n.value)()
    _check(lib, lib.nvrtcGetSupportedArchs(archs), "nvrtcGetSupportedArchs")
    return sorted(archs)


# -- compiling ------------------------------------------------------------------------------------

_cache = {}  # (source, arch, options) -> PTX text


def clear_cache():
    """Forget every compiled PTX (tests that measure compiling use it)."""
    with _lock:
        _cache.clear()


def compile_ptx(source, name="kernel.cu", arch="compute_90", options=()):
    """Compile CUDA C ``source`` to PTX for virtual architecture ``arch`` (``compute_XY``) with
    NVRTC; ``options`` are further NVRTC flags.  The PTX is cached per (source, arch, options),
    so the same kernel compiles once per process.  A program that does not compile raises
    ``CudaCompileError`` with NVRTC's log; an NVRTC that cannot be found, ``OSError``."""
    options = tuple(options)
    key = (source, arch, options)
    ptx = _cache.get(key)
    if ptx is not None:
        return ptx
    lib = _load()
    flags = [f"--gpu-architecture={arch}", *options]
    argv = (ctypes.c_char_p * len(flags))(*[f.encode() for f in flags])
    prog = ctypes.c_void_p()
    _check(lib, lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(), 0,
                                       None, None), "nvrtcCreateProgram")
    try:
        result = lib.nvrtcCompileProgram(prog, len(flags), argv)
        if result != 0:
            log = _log(lib, prog) or lib.nvrtcGetErrorString(result).decode()
            raise CudaCompileError("NVRTC", name, arch, log)
        size = ctypes.c_size_t()
        _check(lib, lib.nvrtcGetPTXSize(prog, ctypes.byref(size)), "nvrtcGetPTXSize")
        buf = ctypes.create_string_buffer(size.value)
        _check(lib, lib.nvrtcGetPTX(prog, buf), "nvrtcGetPTX")
        ptx = buf.value.decode()
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))
    with _lock:
        _cache[key] = ptx
    return ptx


def _log(lib, prog):
    size = ctypes.c_size_t()
    if lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size)) != 0 or size.value <= 1:
        return ""
    buf = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(prog, buf)
    return buf.value.decode(errors="replace")


# -- assembling -----------------------------------------------------------------------------------

def find_ptxas():
    """The path of a ``ptxas``: ``MGE_PTXAS``, the ``nvidia-cuda-nvcc-cu12`` (or CUDA 13) wheel's
    (which matches the wheel NVRTC's PTX version), else one on ``PATH`` or in a toolkit; ``None``
    if there is none (or ``MGE_PTXAS`` names no executable: an explicit choice is the only one)."""
    env = os.environ.get("MGE_PTXAS")
    if env:
        return env if os.path.isfile(env) and os.access(env, os.X_OK) else None
    exe = "ptxas.exe" if os.name == "nt" else "ptxas"
    cu13 = os.path.join("cu13", "bin")
    for d in _wheel_dirs("nvidia.cuda_nvcc", "bin") + _wheel_dirs("nvidia", cu13):
        path = os.path.join(d, exe)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return shutil.which(exe) or shutil.which(
        exe, path=os.pathsep.join(os.path.join(r, "bin") for r in _toolkit_roots()))


def assemble(ptx, arch="sm_90", options=(), name="kernel.ptx"):
    """Assemble ``ptx`` into a cubin for real architecture ``arch`` (``sm_XY``) with ptxas and
    return its bytes.  A PTX that ptxas rejects raises ``CudaCompileError`` with ptxas' messages;
    no ptxas at all, ``FileNotFoundError``."""
    ptxas = find_ptxas()
    if ptxas is None:
        env = os.environ.get("MGE_PTXAS")
        raise FileNotFoundError(f"ptxas not found: MGE_PTXAS={env} is no executable" if env else
                                "ptxas not found (set MGE_PTXAS, or pip install "
                                "nvidia-cuda-nvcc-cu12)")
    with tempfile.TemporaryDirectory(prefix="mge-ptxas-") as tmp:
        src, out = os.path.join(tmp, "in.ptx"), os.path.join(tmp, "out.cubin")
        with open(src, "w") as f:
            f.write(ptx)
        proc = subprocess.run([ptxas, f"-arch={arch}", *options, "-o", out, src],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            log = (proc.stderr + proc.stdout).replace(src, name)
            raise CudaCompileError("ptxas", name, arch, log or f"exit status {proc.returncode}")
        with open(out, "rb") as f:
            return f.read()
