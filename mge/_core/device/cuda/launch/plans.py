"""The CUDA device's executor of launch plans (``kernels/launch.py``), and a launcher for every op
of every kernel family that states its ops as plans.

**Running a plan** (``run_plan(device, plan, inputs, descs)``), all on the device's one stream:

1. *Buffers.*  ``"in0"``... are the op's input buffers as the launcher got them (dense ones, or
   views with their strides for a family's ``STRIDED`` ops: a ``Buf`` of an input is its element
   0 plus the ``Buf``'s byte offset, as ``CudaBuffer.address`` is element 0's); ``"out0"``... are
   new dense buffers of the descs' shapes and dtypes from the pool -- or, for an op of a family's
   ``INPLACE`` table, the donated input buffer itself (the update written over a parameter that
   nothing else sees any more, as the CPU device's in-place kernels do); ``"ws"`` is one pool
   block of ``plan.workspace`` bytes, freed when the plan is done.  Every ``Buf`` is resolved to
   an address once, checked to lie in its buffer's bytes (a plan's bug is a ``ValueError`` naming
   the kernel, not an illegal address on the GPU).
2. *Checks' words* are zeroed first (one ``memset`` each), then the *kernels* are loaded --
   every kernel of the plan not loaded yet in one ``backend.load`` (one NVRTC program, or one g++
   build on the host), cached by the device per kernel source -- and the *steps* issued in order:
   ``Launch`` through ``backend.launch`` with the plan's grid, block and dynamic shared bytes
   (``Buf`` -> address, ``None`` -> NULL; the backend marshals the scalars and structs to the
   kernel's parameter types), ``Gemm`` through ``backend.gemm(g, a, b, c)`` (cuBLAS's
   strided-batched GEMM as the plan states it, with its operands' addresses), ``Memset``
   through ``backend.memset``.
3. *Checks* are read back after the steps in one small device-to-host copy (the span of all the
   words, when they lie close together, as a plan's workspace puts them), which waits for the
   stream; a word that is not 0 raises ``check.error(value)`` -- or ``check.error(value, read)``,
   ``read(buf, dtype, count)`` copying ``count`` elements at a ``Buf`` to the host, for a message
   that names the bad value.  So an op with checks synchronises the host with the device: the
   price of raising the CPU device's exception (``IndexError`` for a label out of range...) from
   the op that caused it; the channel reports it at the next sync, as on the CPU.
4. A ``Readback`` copies its scalar to the host (after the steps) and runs ``then(value)``'s plan
   on the same ``in``/``out`` buffers with its own workspace; and so on while plans read back.
   Outputs of a data-dependent size (``CondTake``; a mask index: the descs have no shape, and
   the plan function gets an empty ``Layout`` of the dtype) are allocated only when a
   ``Readback``'s ``outs(value)`` gives their ``Layout``s; a plan with such a readback runs before
   any output is allocated.

**Registration** (``register_families``, called by ``launch.load_all`` after every launcher
module is imported): each module of ``cuda/kernels/`` whose ``PLANS`` table is in launch.py's
format (the module uses launch.py's ``Plan``/``Launch``/``Buf``...: a table of an older format is
left alone) gets, for every op class of the table that has no explicit launcher in
``cuda/launch/*.py``, a launcher that builds the ``Layout``s -- the inputs' strides for the
family's ``STRIDED`` ops (registered ``strided=True``), dense inputs otherwise (the device's
``execute`` makes views dense first, one relayout kernel each) and the descs' shapes and dtypes
for the outputs -- asks the plan function ``PLANS[cls](op, ins, outs)`` for the plan (cached by
op and layouts: a plan is a pure function of them) and runs it.
A family whose table lands later needs no change here: the loop runs over every kernel module.
"""
import importlib
import inspect
import pkgutil

import numpy as np

from ....ops.reduce import Argmax, Argmin, Reduce, normalize_axes
from .. import kernels as _kernels_pkg
from ..kernels import launch as L
from . import CUDA_KERNELS, def_launcher

__all__ = ["run_plan", "register_families", "family_modules", "plan_launcher", "inplace_aliases",
           "DIFFERENCES", "REGISTERED", "UNAVAILABLE"]

#: Where running a plan on the CUDA device differs from the CPU device (beyond each family's own
#: ``DIFFERENCES``: summation orders and the like).
DIFFERENCES = """\
* An op whose plan has checks (an index or a label out of range, a distribution's parameter)
  waits for the device to finish it before the host goes on (the checks' words are copied back);
  the CPU device raises the same exception, from the same op, at the same point of the program.
* When a check fails, the outputs (and, for an in-place update, the donated input) may already
  hold partial results; they are dropped with the error, as the CPU device drops its outputs.
* A data-dependent size (a ``Readback``) also waits for the device, once per read-back value.
"""

#: op class -> the kernels module whose ``PLANS`` gave it its launcher (``register_families``).
REGISTERED = {}
#: kernel module name -> why it could not be imported (its ops then have no CUDA launcher).
UNAVAILABLE = {}

_CHECK_SPAN = 4096  # check words within this many bytes are read back in one copy


class _Bound:
    """The buffers of one plan run: name -> (CudaBuffer, lowest byte, highest byte + 1), bytes
    relative to element 0."""

    def __init__(self, device, inputs, outputs, workspace):
        self.device = device
        self.buffers = {}
        for k, b in enumerate(inputs):
            self.buffers[f"in{k}"] = (b,) + _span(b)
        for k, b in enumerate(outputs):
            if b is not None:  # (not allocated yet: a readback's ``outs`` will size it)
                self.buffers[f"out{k}"] = (b,) + _span(b)
        if workspace is not None:
            self.buffers["ws"] = (workspace, 0, workspace.size)

    def address(self, buf, nbytes, what):
        """The device address of ``buf`` (a ``Buf``), checked: ``nbytes`` from there lie in the
        buffer."""
        entry = self.buffers.get(buf.name)
        if entry is None:
            names = ", ".join(sorted(self.buffers))
            raise ValueError(f"{what}: the plan names buffer {buf.name!r}, which it does not have "
                             f"(it has {names})")
        b, lo, hi = entry
        if not (lo <= buf.offset and buf.offset + max(int(nbytes), 0) <= hi):
            raise ValueError(f"{what}: {buf} ({nbytes} bytes) lies outside {buf.name!r} "
                             f"({b.dtype} {b.shape}, bytes {lo}..{hi} of element 0)")
        return b.address + buf.offset

    def read(self, buf, dtype, count):
        """``count`` elements of ``dtype`` at ``buf``, copied to the host (waits for the
        stream)."""
        dtype = np.dtype(dtype)
        out = np.empty(int(count), dtype)
        if out.nbytes:
            self.device.backend.copy_dtoh(out, self.address(buf, out.nbytes, "read"))
        return out


def _span(b):
    # bytes [lo, hi) of a buffer relative to its element 0 (negative strides reach below it)
    isz = b.dtype.itemsize
    if b.size == 0:
        return 0, 0
    lo = sum((n - 1) * s for n, s in zip(b.shape, b.strides) if s < 0) * isz
    hi = sum((n - 1) * s for n, s in zip(b.shape, b.strides) if s > 0) * isz + isz
    return lo, hi


def _pointer(bound, a, what):
    if a is None:
        return 0
    if isinstance(a, L.Buf):
        return bound.address(a, 0, what)
    return a


def _gemm(device, g, bound):
    """One ``Gemm`` step through the backend: ``backend.gemm(g, a, b, c)`` with the operands'
    device addresses (the backend checks ``g`` as cuBLAS does: ``backend.check_gemm``).  A
    backend of the older signature (cuBLAS's arguments one by one, one dtype for A, B and C)
    gets them so, when the plan's dtypes allow it."""
    a = bound.address(g.a, 0, "gemm A")
    b = bound.address(g.b, 0, "gemm B")
    c = bound.address(g.c, 0, "gemm C")
    gemm = device.backend.gemm
    if len(_gemm_params(gemm)) == 4:
        gemm(g, a, b, c)
        return
    dtypes = {np.dtype(g.a_dtype), np.dtype(g.b_dtype), np.dtype(g.c_dtype)}
    compute = np.dtype(g.compute_dtype)
    (dtype,) = dtypes if len(dtypes) == 1 else (None,)
    default = np.dtype("float64") if dtype == np.float64 else np.dtype("float32")
    if dtype is None or compute != default:
        raise NotImplementedError(
            f"a GEMM of {g.a_dtype} x {g.b_dtype} -> {g.c_dtype} computing in {compute} on "
            f"{device.name}: the backend's gemm takes one dtype for A, B and C")
    gemm("T" if g.transa else "N", "T" if g.transb else "N", g.m, g.n, g.k, g.alpha, a, g.lda,
         g.stride_a, b, g.ldb, g.stride_b, g.beta, c, g.ldc, g.stride_c, g.batch, dtype)


_gemm_signatures = {}


def _gemm_params(fn):
    key = getattr(fn, "__func__", fn)
    params = _gemm_signatures.get(key)
    if params is None:
        try:
            params = frozenset(inspect.signature(fn).parameters)
        except (TypeError, ValueError):
            params = frozenset()
        _gemm_signatures[key] = params
    return params


def _run_steps(device, plan, bound):
    backend = device.backend
    for check in plan.checks:
        isz = np.dtype(check.dtype).itemsize
        backend.memset(bound.address(check.flag, isz, "check"), 0, isz)
    modules = device.load_kernels(plan.kernels) if plan.kernels else {}
    for step in plan.steps:
        if isinstance(step, L.Launch):
            name = step.kernel.name
            args = [_pointer(bound, a, f"{name} argument {i}") for i, a in enumerate(step.args)]
            backend.launch(modules[name], name, step.grid, step.block, args, step.shared_bytes)
        elif isinstance(step, L.Gemm):
            _gemm(device, step, bound)
        elif isinstance(step, L.Memset):
            if step.nbytes:
                backend.memset(bound.address(step.buf, step.nbytes, "memset"), step.value,
                               step.nbytes)
        else:
            raise TypeError(f"a launch plan step must be a Launch, Gemm or Memset, got "
                            f"{type(step).__name__}")
    if plan.checks:
        _raise_checks(plan.checks, bound)


def _raise_checks(checks, bound):
    # one copy of the span holding every word when they lie close (they share the workspace)
    words = [(bound.address(c.flag, np.dtype(c.dtype).itemsize, "check"), c) for c in checks]
    lo = min(a for a, _ in words)
    hi = max(a + np.dtype(c.dtype).itemsize for a, c in words)
    values = []
    if hi - lo <= _CHECK_SPAN:
        raw = np.empty(hi - lo, np.uint8)
        bound.device.backend.copy_dtoh(raw, lo)
        for a, c in words:
            dt = np.dtype(c.dtype)
            values.append(int(raw[a - lo:a - lo + dt.itemsize].view(dt)[0]))
    else:
        values = [int(bound.read(c.flag, c.dtype, 1)[0]) for _, c in words]
    for (_, check), value in zip(words, values):
        if value:
            error = check.error
            raise (error(value, bound.read) if _takes_two(error) else error(value))


def _takes_two(fn):
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 2 or any(p.kind == p.VAR_POSITIONAL for p in params)


def run_plan(device, plan, inputs, descs, aliases=None):
    """Run ``plan`` (a ``launch.Plan``) on ``device`` (a ``CudaDevice``) with ``inputs`` (its
    ``CudaBuffer``s ``"in0"``...); the outputs, one per desc of ``descs`` (see the module
    docstring).  ``aliases`` maps an output position to the input buffer it is written into."""
    if not isinstance(plan, L.Plan):
        raise TypeError(f"run_plan: a launch.Plan is needed, got {type(plan).__name__}")
    aliases = aliases or {}
    outputs = [aliases.get(k) for k in range(len(descs))]
    while plan is not None:
        rb = plan.readback
        if rb is None or rb.outs is None:
            _allocate(device, outputs, descs, pending=rb is not None)
        ws = device.workspace(plan.workspace) if plan.workspace else None
        bound = _Bound(device, inputs, outputs, ws)
        _run_steps(device, plan, bound)
        if rb is None:
            break
        value = bound.read(rb.buf, rb.dtype, 1)[0].item()
        if rb.outs is not None:  # data-dependent sizes: the outputs are allocated now
            layouts = list(rb.outs(value))
            if len(layouts) != len(descs):
                raise TypeError(f"run_plan: Readback.outs gave {len(layouts)} layouts for "
                                f"{len(descs)} outputs")
            for k, lay in enumerate(layouts):
                if k not in aliases and (outputs[k] is None or outputs[k].shape != lay.shape):
                    outputs[k] = device.empty(lay.shape, lay.dtype)
        plan = rb.then(value)
        if plan is not None and not isinstance(plan, L.Plan):
            raise TypeError(f"run_plan: a Readback's then() gave {type(plan).__name__}, not a "
                            f"launch.Plan")
        del bound, ws  # the workspace goes back to the pool (the stream orders its reuse)
    _allocate(device, outputs, descs, pending=False)  # (a plan that ended without writing them)
    return tuple(outputs)


def _allocate(device, outputs, descs, pending):
    # the outputs not allocated yet whose shapes the descs know; one of unknown shape may wait
    # for a readback's ``outs`` while plans still read values back (``pending``)
    for k, d in enumerate(descs):
        if outputs[k] is not None:
            continue
        if d.shape is None:
            if pending:
                continue
            raise ValueError(f"run_plan on {device.name}: output {k} ({d.dtype}) has no known "
                             f"shape, and no Readback's outs gave one")
        outputs[k] = device.empty(d.shape, d.dtype)


# -- registration ----------------------------------------------------------------------------------

_FORMAT = frozenset(id(v) for v in (L, L.Plan, L.Launch, L.Buf, L.Layout, L.Workspace, L.Gemm,
                                     L.Memset, L.Check, L.Readback))


def _uses_launch_format(module):
    return any(id(v) in _FORMAT for v in vars(module).values())


def family_modules():
    """The kernel modules (``cuda/kernels/*``) with a ``PLANS`` table in launch.py's format,
    imported, in name order."""
    out = []
    for info in sorted(pkgutil.iter_modules(_kernels_pkg.__path__), key=lambda m: m.name):
        if info.name == "launch":
            continue
        try:
            module = importlib.import_module(f"{_kernels_pkg.__name__}.{info.name}")
        except Exception as e:  # a family that does not import leaves the others working
            UNAVAILABLE[info.name] = f"{type(e).__name__}: {e}"
            continue
        plans = getattr(module, "PLANS", None)
        if isinstance(plans, dict) and _uses_launch_format(module):
            out.append(module)
    return out


def _describe(inputs):
    return ", ".join(f"{b.dtype} {b.shape}" for b in inputs)


def _adjacent_axes(device, op, inputs):
    """``(op, inputs)`` with the reduced axes of a ``Reduce``/``Argmax``/``Argmin`` made adjacent
    when they are not: the kernels reduce one run of axes (``reduce_view``), so the input is
    copied with the kept axes first and the reduced ones last, each in their order (one
    relayout kernel), and the op reduces the trailing axes.  The output's elements keep their
    order (the kept axes' order) and an arg-extremum's flat index its meaning (the reduced axes'
    order)."""
    (x,) = inputs
    axes = normalize_axes(op.axis, x.ndim)
    if axes is None or not axes:
        return op, inputs   # the plan names the bad axis
    big = [a for a in axes if x.shape[a] != 1]
    if not big or all(x.shape[a] == 1 or a in axes for a in range(big[0], big[-1] + 1)):
        return op, inputs
    kept = [a for a in range(x.ndim) if a not in axes]
    perm = kept + list(axes)
    view = device.view(x, tuple(x.shape[a] for a in perm), tuple(x.strides[a] for a in perm))
    op = op.replace(axis=tuple(range(len(kept), x.ndim)))
    return op, [device.relayout(view)]


# op class -> ``fn(device, op, inputs) -> (op, inputs)``, run before the plan is asked for
_PREPARE = {Reduce: _adjacent_axes, Argmax: _adjacent_axes, Argmin: _adjacent_axes}


# (plan function, op, ins, outs) -> plan: a plan is a pure function of the op (its parameters,
# an RNG's seed included) and the layouts, and making one costs about as much Python as running
# it; emptied when full (training loops repeat a few hundred distinct ops)
_PLAN_CACHE = {}
_PLAN_CACHE_SIZE = 4096


def _plan(plan_fn, op, ins, outs):
    key = (plan_fn, op, tuple(ins), tuple(outs))
    try:
        plan = _PLAN_CACHE.get(key)
    except TypeError:  # an op with an unhashable parameter
        return plan_fn(op, ins, outs)
    if plan is None:
        plan = plan_fn(op, ins, outs)
        if len(_PLAN_CACHE) >= _PLAN_CACHE_SIZE:
            _PLAN_CACHE.clear()
        _PLAN_CACHE[key] = plan
    return plan


def inplace_aliases(inputs, descs, donated, pairs):
    """``{output position: input buffer}``: the outputs of ``pairs`` (``(out index, in index)``,
    a family's ``INPLACE`` entry) that may be written into their input's buffer -- one of the
    ``donated`` positions, whole (no view, no offset), dense and of the output's shape and dtype;
    each input at most once, pairs past ``descs`` left out."""
    aliases, used = {}, set()
    for o, i in pairs:
        if i in donated and i not in used and o < len(descs):
            b, d = inputs[i], descs[o]
            if (d.shape is not None and b.shape == tuple(d.shape) and b.dtype == d.dtype
                    and b.is_contiguous and b.base is None and b.offset == 0):
                aliases[o] = b
                used.add(i)
    return aliases


def plan_launcher(module, cls):
    """The launcher of op class ``cls`` from kernel ``module``'s tables (``PLANS``, ``STRIDED``,
    ``INPLACE``): ``(fn, strided, reuse)``."""
    plan_fn = module.PLANS[cls]
    strided = cls in getattr(module, "STRIDED", ())
    inplace = tuple(getattr(module, "INPLACE", {}).get(cls, ()))
    prepare = _PREPARE.get(cls)

    def launch(device, op, inputs, descs, donated=()):
        if prepare is not None:
            op, inputs = prepare(device, op, inputs)
        ins = [L.Layout(b.shape, b.dtype, b.strides if strided else None) for b in inputs]
        # an output of unknown shape (CondTake's) is an empty Layout of its dtype: the plan's
        # Readback.outs sizes it
        outs = [L.Layout((0,) if d.shape is None else d.shape, d.dtype) for d in descs]
        plan = _plan(plan_fn, op, ins, outs)
        if not isinstance(plan, L.Plan):
            raise TypeError(f"{op.name}: {module.__name__}.PLANS gave {type(plan).__name__}, "
                            f"not a launch.Plan")
        aliases = inplace_aliases(inputs, descs, donated, inplace)
        device.inplace += len(aliases)
        return run_plan(device, plan, inputs, descs, aliases)

    launch.__name__ = launch.__qualname__ = f"launch_{cls.__name__}"
    launch.__doc__ = f"Run {module.__name__}.PLANS[{cls.__name__}]'s plan (plans.py)."
    return launch, strided, bool(inplace)


def register_families():
    """Register a plan launcher for every op class of every family's ``PLANS`` that has no
    launcher yet (an explicit one in ``cuda/launch/*.py`` wins); the classes registered."""
    done = []
    for module in family_modules():
        for cls in module.PLANS:
            if cls in CUDA_KERNELS and REGISTERED.get(cls) is None:
                continue  # an explicit launcher
            fn, strided, reuse = plan_launcher(module, cls)
            def_launcher(cls, strided=strided, reuse=reuse)(fn)
            REGISTERED[cls] = module
            done.append(cls)
    return done
