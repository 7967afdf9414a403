"""trace: record the ops of a traced function, and replay them as compiled programs.

``mge.jit.trace`` reaches this module through ``mge.core.get_plugin("trace")``; loading the
plugin puts nothing on the stack (``on_demand``).  A trace puts one of two transformations on the
stack's ``trace`` segment for the length of a call (below grad and scalar, above eval), so it sees
every op the function issues, the backward and optimizer ops included:

* ``Recorder`` (the first call): runs each op eagerly and writes it down in a ``Recording`` --
  the op, the *vars* of its inputs and outputs.  A var is a value of the traced function: an
  argument, a captured tensor (a parameter, a constant; an *external*), or an op's output.
  ``Assign`` (in-place updates: optimizer steps, ``x += 1``) binds the target to its new value's
  var; the program needs no instruction for it.
* ``Replayer`` (later calls): the function runs again, but no op executes.  Each op is checked
  against the recording (the same op, inputs holding the recorded vars) and answered with
  placeholder tensors: their shapes and dtypes are the recorded ones, their values come from the
  compiled program (``mge.jit.program``), which runs as one op on the channel when the function
  returns -- or earlier, up to the current op, when Python reads a placeholder's value.  A
  difference raises ``TraceError`` naming the op and what differed.

Whole calls.  Most ops come from a top-level ``apply`` (``x * 2``, ``F.relu``) that the layers above
the trace segment (scalar, dtype promotion, dim expansion) turn into the same recorded ops every
time, given the same input shapes and dtypes.  The recorder notes, per top-level call, the ops it
issued (``Recording.calls``); while the stack above holds only those layers, the replayer answers
such a call at once, from ``apply``'s hook, without walking the stack (``Replayer.top``).  With a
``GradManager`` recording (or any other layer) on the stack, every op walks the stack as usual.

Placeholders hold *virtual* channel handles (``deleted`` set, so dropping one costs nothing);
a launch gives the tensors still alive real handles, the program's outputs.
"""
import sys
import weakref

import mge
from mge._core import _accel
from mge._core.channel import get_channel, infer_outputs
from mge._core.errors import TraceError
from mge._core.plugins import stack
from mge.core import Transformation, ops
from mge._core.ops.base import INFER
from mge._core.ops.rng import same_but_seed
from mge.jit.program import compile_program
from mge.utils.naming import AutoNaming, tensor_name

__all__ = ["TraceTransformation", "Recording", "Recorder", "LazyRecorder", "Replayer",
           "SymbolicValueError"]

Tensor = mge.Tensor
TensorInfo = _accel.load("mge._core.channel.handles").TensorInfo
_Assign = ops.Assign
_IDENTITY = ops.Identity()
_channel = get_channel()
_dispatch = _accel.load("mge._core.dispatch")
Match = _accel.load("mge_plugins.trace_match").Match
_apply_tuple = _dispatch.apply_tuple
_NUMBERS = (float, int, bool)
# Layers above the trace segment that turn a call into ops by its input shapes and dtypes alone
# (dtype promotion also by the AMP switch, which a call records): calls under them replay whole.
_PURE_LAYERS = frozenset({"scalar", "dtype_promote", "dim_expansion"})
# _Purity.check(): whether a top-level call can be recorded and replayed whole -- with the
# grad keys' layers told of it in a replay (GradTransformation.replayed)
IMPURE, PURE, GRAD_ONLY = 0, 1, 2
_SCOPES = AutoNaming.scopes  # the module scopes around the op being recorded (naming)


def _mismatch(reason, detail):
    """A replay's divergence: MegEngine's ``TraceError`` text (``trace error because <reason>``,
    its reasons), with mge's account of what differed as the exception's note."""
    e = TraceError(f"trace error because {reason}")
    e.add_note(detail)
    return e


def _amp_state():
    try:
        from mge.core import get_plugin
        amp = get_plugin("dtype_promote").amp
    except Exception:  # dtype promotion switched off: nothing to record
        return None
    return amp


class _Purity:
    """What the stack above the trace segment holds (per stack version): ``check()`` is
    ``PURE`` (only ``_PURE_LAYERS``), ``GRAD_ONLY`` (those and grad keys' layers: ``grads``,
    bottom to top, in the order an op's outputs pass them) or ``IMPURE``."""

    def __init__(self, layer):
        self._layer = weakref.ref(layer)  # (weakly: the layer holds this; no cycle to collect)
        self.version = -1
        self.state = IMPURE
        self.grads = ()

    def check(self):
        if stack.version != self.version:
            self.version = stack.version
            state, grads = PURE, []
            layer = self._layer()
            for t in stack.active():
                if t.name in _PURE_LAYERS or t is layer or t.name == "eval":
                    continue
                if t.name == "grad" and getattr(t, "key", None) is not None:
                    grads.append(t)
                    state = GRAD_ONLY
                    continue
                state = IMPURE
                break
            self.state = state
            self.grads = tuple(reversed(grads)) if state == GRAD_ONLY else ()
        return self.state


class Recording:
    """One call of a traced function, op by op: what a replay must repeat.

    ``ops`` -- ``(op, input vars, output vars)``; ``descs`` -- per var, ``(shape, dtype,
    device)``; ``externals`` -- var -> the captured tensor; ``args`` -- the vars of the tensor
    arguments, in order; ``outputs`` -- the vars of the function's tensor results.

    For naming (``trace.dump``, ``mge.jit.naming``), noted while recording only: ``op_scopes``
    -- per op, the dotted module scopes it ran in (``"simple.linear"``, ``""`` outside
    modules); ``var_names`` -- var -> the name of its tensor (``mge.utils.naming.tensor_name``:
    an argument's when bound, a captured tensor's and a renamed op output's when the call
    returns).
    """

    def __init__(self, capture_as_const=False):
        self.capture_as_const = capture_as_const
        self.ops = []
        self.descs = []
        self.externals = {}
        self.snapshots = {}  # var -> a copy of the external as recorded (capture_as_const)
        self.args = []
        self.outputs = []
        self.last_use = []   # var -> index of the last op that reads it (-1: none)
        self.calls = {}      # first op -> (op, input specs, end, output vars, AMP on): see top
        self.backwards = {}  # first op -> a backward pass, for replaying it whole (or None)
        self.assigned = []   # (captured tensor, var of its value after the call)
        self.cut_vars = set()  # externals that were op outputs before an excluded block
        self.op_scopes = []  # per op: its module scopes, joined by dots (naming)
        self.var_names = {}  # var -> its tensor's name (naming; see the class)
        self._var_of = {}    # id(handle) -> var, while recording
        self._keep = []      # the handles seen: their ids stay unique while recording
        self._cut = set()    # id(handle) of the op outputs an excluded block cut off
        self._call_list = None

    def call_list(self):
        """``calls`` as a list indexed by first op (``None``: no whole call starts there), for
        the replay's per-op lookup; made again when the recording has grown."""
        made_from = (len(self.ops), len(self.calls))
        if self._call_list is None or self._call_list[0] != made_from:
            cl = [None] * (len(self.ops) + 1)
            for k, call in self.calls.items():
                cl[k] = call
            self._call_list = (made_from, cl)
        return self._call_list[1]

    def _new_var(self, info):
        v = len(self.descs)
        self.descs.append((info.shape, info.dtype, info.device))
        self._var_of[id(info)] = v
        self._keep.append(info)
        return v

    def var_of(self, x, make_external=True):
        """The var of tensor ``x`` now (a new external one if nothing produced it)."""
        info = x._info
        v = self._var_of.get(id(info))
        if v is None and make_external:
            v = self._new_var(info)
            self.externals[v] = x
            if id(info) in self._cut:
                self.cut_vars.add(v)  # taken as it is in each call (see cut)
            elif self.capture_as_const:  # a copy of the value as first read
                self.snapshots[v] = Tensor(x.numpy(), dtype=x.dtype, device=x.device)
        return v

    def cut(self):
        """An ``exclude_from_trace`` block starts: the ops recorded so far have run, and the
        values they computed enter the trace again, when an op reads them after the block, as
        externals taken as they are in each call (``cut_vars``) -- as MegEngine's trace unwraps
        its values when an excluded region begins.  Arguments and captured tensors keep their
        vars."""
        keep = {}
        args = set(self.args)
        self._note_names()  # (the op outputs' names, before their handles are forgotten)
        for i, v in self._var_of.items():
            if v in self.externals or v in args:
                keep[i] = v
            else:
                self._cut.add(i)
        self._var_of = keep

    def bind_arg(self, x):
        v = self._var_of.get(id(x._info))
        if v is None:
            v = self._new_var(x._info)
        self.args.append(v)
        name = tensor_name(x)  # (MegEngine: an argument's name is its name when the call starts)
        if name:
            self.var_names[v] = name
        return v

    def input_vars(self, inputs):
        """The vars ``inputs`` hold now (before the op runs: ``Assign`` rebinds its target)."""
        return tuple([self.var_of(x) for x in inputs])

    def add(self, op, inputs, ins, outputs):
        if type(op) is _Assign:
            # The target now holds the value's value (a new handle), the output its old one.
            self._alias(inputs[0]._info, ins[1])
            self._alias(outputs[0]._info, ins[0])
            self.ops.append((op, ins, ()))
            self.op_scopes.append(".".join([s for s in _SCOPES if s is not None]) if _SCOPES
                                  else "")
            return
        outs = tuple(self._new_var(y._info) for y in outputs)
        self.ops.append((op, ins, outs))
        self.op_scopes.append(".".join([s for s in _SCOPES if s is not None]) if _SCOPES else "")

    def _alias(self, info, v):
        self._var_of[id(info)] = v
        self._keep.append(info)

    def finish(self, output_tensors):
        """The function returned ``output_tensors``: note their vars and drop the id map."""
        self.outputs = [self.var_of(t) for t in output_tensors]
        self._note_names()
        for v, t in self.externals.items():
            name = tensor_name(t)
            if name:
                self.var_names[v] = name
        # the captured tensors the call assigned (parameters, optimizer states): their last value
        self.assigned = []
        for v, t in self.externals.items():
            now = self._var_of.get(id(t._info))
            if now is not None and now != v:
                self.assigned.append((t, now))
        last = [-1] * len(self.descs)
        for k, (_, ins, _) in enumerate(self.ops):
            for v in ins:
                last[v] = k
        self.last_use = last
        self._var_of = None
        self._keep = None

    def _note_names(self):
        # the names users gave op outputs (``y.name = ...``: on the handle) -> var_names
        var_of, names, args = self._var_of, self.var_names, self.args
        for info in self._keep:
            name = info.name
            if name:
                v = var_of.get(id(info))
                if v is not None and v not in self.externals and v not in args:
                    names[v] = name

    def describe(self, k):
        op, ins, outs = self.ops[k]
        shapes = ", ".join(str(self.descs[v][0]) for v in ins)
        return f"op #{k} of the recording, {op.name}, on inputs of shapes ({shapes})"


class Recorder(Transformation):
    """The first call: every op runs as usual and is recorded."""

    name = "trace"

    def __init__(self, recording):
        self.recording = recording
        self.depth = 0
        self.purity = _Purity(self)
        self.amp = _amp_state()
        self.grads = None    # during a backward pass: the gradients given to attached tensors
        self.custom = False  # whether a Function's Python backward ran in it

    def top(self, op, inputs):
        """A top-level ``apply``: note the ops it issues, for replaying it whole."""
        state = IMPURE if self.depth else self.purity.check()
        if state == IMPURE or (type(op) is _Assign and state != PURE):
            return _apply_tuple(op, inputs)
        rec = self.recording
        specs = []
        for x in inputs:
            if isinstance(x, Tensor):
                specs.append(rec.var_of(x))
            elif type(x) in _NUMBERS:
                specs.append((type(x), x))
            else:
                specs = None  # arrays and the like: converted anew each time, not replayed whole
                break
        start = len(rec.ops)
        amp_on = None if self.amp is None else self.amp.autocast
        self.depth = 1
        try:
            outputs = _apply_tuple(op, inputs)
        finally:
            self.depth = 0
        end = len(rec.ops)
        if specs is not None and end > start:
            outs = tuple([rec.var_of(y, False) for y in outputs])
            produced = set()
            for _, _, os in rec.ops[start:end]:
                produced.update(os)
            if all(v in produced for v in outs) or (type(op) is _Assign and end == start + 1):
                # (an Assign produces no var: its output, the old value, is its target's var)
                rec.calls[start] = (op, tuple(specs), end, outs, amp_on)
        return outputs

    def apply(self, op, inputs, next):
        rec = self.recording
        ins = rec.input_vars(inputs)
        outputs = next(op, inputs)
        rec.add(op, inputs, ins, outputs)
        return outputs

    def cut(self):
        """An ``exclude_from_trace`` block starts (see ``Recording.cut``)."""
        self.recording.cut()

    # -- backward passes (the grad plugin's hook) -------------------------------------------------
    def backward(self, key, seeds, run, attached, alone):
        """A backward pass: it runs as usual; noted so that replays can skip its rules.

        Noted: its ops ``[start, end)``, which gradient (var) reached which attached tensor after
        which op, the attached tensors, and the vars of the seeds.  A pass that another key
        records (higher order) or that runs a ``Function``'s Python backward is not replayed
        whole."""
        rec = self.recording
        start = len(rec.ops)
        seed_vars = []
        for slot, y, dy in seeds:
            vy = rec.var_of(y, False) if isinstance(y, Tensor) else None
            vdy = rec.var_of(dy, False) if isinstance(dy, Tensor) else None
            seed_vars.append((vy, vdy, slot is None, dy is None))
        outer, self.grads, self.custom = self.grads, [], False
        try:
            run(key, seeds)
        finally:
            grads, self.grads = self.grads, outer
        whole = (alone and not self.custom and all(v is not None for v, _, _, _ in seed_vars)
                 and all(vdy is not None or no_dy for _, vdy, _, no_dy in seed_vars)
                 and all(v is not None for _, _, v in grads))
        rec.backwards[start] = (len(rec.ops), tuple(grads), frozenset(id(t) for t, _ in attached),
                                tuple(seed_vars)) if whole else None

    def gave_grad(self, tensor, grad):
        if self.grads is not None:
            rec = self.recording
            self.grads.append((len(rec.ops), id(tensor), rec.var_of(grad, False)))

    def ran_custom(self):
        self.custom = True

    # (``mge.jit.SymbolVar``'s questions; the values exist: the ops ran)
    def var_of(self, tensor):
        """The var ``tensor`` holds in this recording (``None``: not a value of it)."""
        return self.recording.var_of(tensor, make_external=False)

    def producer_of(self, v):
        """The index of the op that computes var ``v`` (``None`` for arguments and captures)."""
        return _producer_of(self.recording, v)

    def inferable(self, v):
        """Whether var ``v``'s value can be read now."""
        return True


def _producer_of(rec, v):
    for k, (_, _, outs) in enumerate(rec.ops):
        if v in outs:
            return k
    return None


class SymbolicValueError(ValueError):
    """A value (or an unknown shape) read while ``trace(symbolic=True)`` records, that depends
    on the traced function's arguments: it is not computed until the function returns."""


class LazyRecorder(Recorder):
    """``trace(symbolic=True)``'s first call: every op is recorded, none runs.

    Each op's outputs are placeholders (as a replay's are) whose shapes and dtypes come from the
    op's rule (``infer_outputs``); an in-place update gives its target a placeholder of the new
    value.  When the function returns, the recorded ops run as one compiled program and the
    placeholders still alive get its results.

    A value Python reads during the call is computed there when it does not depend on the
    function's arguments -- a constant, a parameter, something made of them: it can be inferred
    statically.  The ops recorded so far that do not depend on an argument then run as one
    program (constant folding; the final program takes their results as inputs, so each op runs
    once).  A value that depends on an argument, or its unknown shape (``cond_take``), raises
    ``SymbolicValueError`` where it is read, as in MegEngine.
    """

    def __init__(self, recording, programs):
        super().__init__(recording)
        self.profile = programs.profile
        self.opt_level = programs.opt_level
        self.vi = []          # per var: a real handle, or None until a program computes it
        self.dynamic = []     # per var: whether it depends on an argument
        self.done = set()     # the ops a folding program ran
        self.holders = []     # the placeholders handed out
        self.temps = []       # handles of this call's own, freed when it ends
        self.real = {}        # id(virtual handle) -> (it, the real one)
        self.updated = {}     # id(tensor) -> (it, its handle before its first update)

    def bind(self, args):
        rec = self.recording
        for x in args:
            v = rec.bind_arg(x)
            self._grow()
            self.vi[v] = x._info
            self.dynamic[v] = True

    def _grow(self):
        # vars the recording made since (externals, outputs): externals are values already
        rec = self.recording
        vi, dynamic = self.vi, self.dynamic
        for v in range(len(vi), len(rec.descs)):
            ext = rec.externals.get(v)
            if ext is None:
                vi.append(None)
            elif v in rec.snapshots:
                vi.append(rec.snapshots[v]._info)
            else:
                vi.append(ext._info)
            dynamic.append(False)

    # -- recording ---------------------------------------------------------------------------------
    def apply(self, op, inputs, next):
        rec = self.recording
        ins = rec.input_vars(inputs)
        self._grow()
        if type(op) is _Assign:
            target = inputs[0]
            old = target._info
            if not old.deleted:
                self.temps.append(old)  # the programs may read it: freed once they have run
            self.updated.setdefault(id(target), (target, old))
            target._info = self._virtual(rec.descs[ins[1]], ins[1], target)
            out = Tensor.__new__(Tensor)
            out._info = self._virtual(rec.descs[ins[0]], ins[0], out)
            rec.add(op, inputs, ins, (out,))
            return (out,)
        outputs = []
        for d in infer_outputs(op, [x._info for x in inputs]):
            t = Tensor.__new__(Tensor)
            t._info = self._virtual(d, None, t)
            outputs.append(t)
        rec.add(op, inputs, ins, outputs)
        dyn = any([self.dynamic[v] for v in ins])
        for t, v in zip(outputs, rec.ops[-1][2]):
            t._info.producer = v
            self.vi.append(None)
            self.dynamic.append(dyn)
        return tuple(outputs)

    def _virtual(self, desc, v, tensor):
        info = TensorInfo(desc[0], desc[1], desc[2])
        info.deleted = True
        info.producer = v
        self.holders.append(tensor)
        return info

    # -- reading and running -----------------------------------------------------------------------
    def resolve(self, info):
        """Python reads a placeholder: its value if it can be inferred (see the class)."""
        entry = self.real.get(id(info))
        if entry is not None and entry[0] is info:
            return entry[1]
        v = info.producer
        if v is None or v >= len(self.vi):
            raise TraceError("a tensor of another call was read while trace(symbolic=True) "
                             "records")
        if self.vi[v] is None:
            if self.dynamic[v]:
                raise self._not_inferable(v, info)
            self._fold()
        return self.vi[v]

    def var_of(self, tensor):
        v = self.recording.var_of(tensor, make_external=False)
        if v is None and tensor._info.deleted:
            v = tensor._info.producer
        return v

    def inferable(self, v):
        """Whether var ``v``'s value can be read now (it does not depend on an argument)."""
        return v < len(self.vi) and (self.vi[v] is not None or not self.dynamic[v])

    def _not_inferable(self, v, info):
        rec = self.recording
        k = _producer_of(rec, v)
        what = "value" if info.shape is not None else "shape"
        return SymbolicValueError(
            f"tensor invalid, can not infer {what} of this tensor under trace(symbolic=True): "
            f"it depends on the traced function's arguments and is computed when the function "
            f"returns (output of {rec.describe(k)}). You can try to use trace(symbolic=False) "
            f"to avoid this issue.")

    def _fold(self):
        # run every recorded op not depending on an argument; keep all their results
        rec = self.recording
        ks = [k for k, (_, _, outs) in enumerate(rec.ops)
              if k not in self.done and outs and not self.dynamic[outs[0]]]
        produced = [v for k in ks for v in rec.ops[k][2]]
        self._run(ks, lambda v: not self.dynamic[v], produced)
        self.done.update(ks)

    def _run(self, ks, wanted, extra):
        # ops ks as one program: alive placeholders of ``wanted`` vars get real handles, and
        # so do the vars ``extra``, for later programs (this call's own: a tensor may go first)
        rec = self.recording
        alive, keep = [], []
        for t in _take_alive(self.holders):
            (alive if wanted(t._info.producer) else keep).append(t)
        self.holders = keep
        if not alive and not extra:
            return
        out_vars = [t._info.producer for t in alive]
        view = _Ops(rec.descs, [rec.ops[k] for k in ks], rec.snapshots)
        program = compile_program(view, 0, len(ks), tuple(out_vars) + tuple(extra), self.profile,
                                  self.opt_level)
        vi = self.vi
        real = _channel.apply_op(program, [vi[v] for v in program.in_vars])
        for t, r in zip(alive, real):
            self.real[id(t._info)] = (t._info, r)
            if rec._var_of is not None:  # (recording still) later ops read it as its var
                rec._alias(r, t._info.producer)
            t._info = r
        for v, r in zip(extra, real[len(alive):]):
            vi[v] = r
            self.temps.append(r)

    def cut(self):
        """An ``exclude_from_trace`` block starts: what was recorded runs now (the block may
        read any value), then ``Recording.cut``."""
        rec = self.recording
        self._grow()
        ks = [k for k in range(len(rec.ops)) if k not in self.done]
        self._run(ks, lambda v: True, ())
        self.done.update(ks)
        rec.cut()

    def finish(self):
        """The function returned (``Recording.finish`` done): run what has not run."""
        rec = self.recording
        try:
            ks = [k for k in range(len(rec.ops)) if k not in self.done]
            self._run(ks, lambda v: True, ())
        finally:
            self.release()

    def abort(self):
        """The function raised: what was recorded runs, so that its tensors have values."""
        self.finish()

    def discard(self):
        """``record_only``: nothing runs.  Tensors the function updated keep their values from
        before the call; the others it made have none (reading one is an error)."""
        kept = set()
        for t, old in self.updated.values():
            if not old.deleted:
                t._info = old  # the update did not run
                kept.add(id(old))
        self.temps = [info for info in self.temps if id(info) not in kept]
        error = TraceError("trace(record_only=True) records without running: this tensor of the "
                           "recorded call has no value")
        for t in _take_alive(self.holders):
            info = t._info
            info.deleted = False
            info.producer = None
            info.error = error
        self.release()

    def release(self):
        temps, self.temps = self.temps, []
        self.holders = []
        for info in temps:
            _channel.del_(info)


class _Ops:
    """Some ops of a recording, as ``compile_program`` reads a recording."""

    def __init__(self, descs, ops, snapshots=None):
        self.descs = descs
        self.ops = ops
        self.snapshots = snapshots  # the values captured as constants (capture_as_const)


def _sole_refs():
    holders = [object()]
    for t in holders:
        return _refcount(t)


def _take_alive(holders):
    # the placeholders someone else holds, once each (references: the list, the loop variable
    # and getrefcount's argument), still placeholders
    alive, seen = [], set()
    for t in holders:
        if _refcount(t) > _SOLE and id(t) not in seen:
            seen.add(id(t))
            info = t._info
            if info.deleted and info.producer is not None:
                alive.append(t)
    return alive


_refcount = sys.getrefcount
_SOLE = _sole_refs()


class Replayer(Transformation):
    """A later call: ops are matched against the recording and answered with placeholders.

    The per-op work is ``Match`` (``trace_match.py``, compiled): ``apply`` on the stack and
    ``top`` for the dispatch hook are its methods; this class has the slow paths and launches.
    """

    name = "trace"

    def __init__(self, recording, compiled, capture_as_const=False):
        self.rec = recording
        self.compiled = compiled  # the front-end's cache of programs (mge.jit.program.Programs)
        self.capture_as_const = capture_as_const
        self.launched = 0       # ops [0, launched) are on the channel
        self.real = {}          # id(virtual handle) -> (it, the real one), once launched
        self.kept = []          # tensors rebound to captured vars, alive until the call ends
        self.seeds = {}         # recorded op index -> the random-number op with this call's seed
        self.op_by_op = False   # issue the recorded ops one by one (DTR sees each: dtr_config)
        # (the match holds this layer weakly: a replay leaves no reference cycle to collect)
        m = self.m = Match(weakref.proxy(self), recording, _Assign, _Purity(self), _amp_state())
        self.apply = m.apply    # the stack calls the compiled layer directly
        self.top = m.top        # and so does apply()'s hook

    @property
    def recording(self):
        return self.rec

    @property
    def pos(self):
        return self.m.pos

    @property
    def vi(self):
        return self.m.vi

    # -- binding ---------------------------------------------------------------------------------
    def bind(self, args):
        rec = self.rec
        vi = self.m.vi
        for v, x in zip(rec.args, args):
            vi[v] = x._info
        snapshots = rec.snapshots
        for v, t in rec.externals.items():
            vi[v] = snapshots[v]._info if v in snapshots else t._info

    # -- the slow paths of matching ----------------------------------------------------------------
    def too_many(self, op):
        raise _mismatch("too many instructions",
                        f"the traced function issued more ops than it did when recorded: "
                        f"{op.name} after the {len(self.rec.ops)} recorded ops")

    def other_op(self, k, op, inputs):
        rec = self.rec
        rop, ins, outs = rec.ops[k]
        if same_but_seed(op, rop) and len(inputs) == len(ins):
            self.seeds[k] = op  # this call's random numbers: the programs take its seed
            return
        if (type(op) is type(rop) and op.trace_parameters and len(inputs) == len(ins)
                and self._same_outputs(op, ins, outs)):
            rec.ops[k] = (op, ins, outs)  # new parameters, same outputs: recompile from here on
            self.compiled.clear()
            return
        raise _mismatch("operator mismatch",
                        f"the traced function diverged at {rec.describe(k)}: it now "
                        f"issues {op!r} where {rop!r} was recorded")

    def _same_outputs(self, op, ins, outs):
        # the op with its new parameters must describe the recorded outputs
        descs = self.rec.descs
        try:
            got = INFER[type(op)](op, [(descs[v][0], descs[v][1]) for v in ins])
        except Exception:
            return False
        return [(d[0], d[1]) for d in got] == [(descs[v][0], descs[v][1]) for v in outs]

    def other_arity(self, k, inputs):
        raise _mismatch("input size mismatch",
                        f"the traced function diverged at {self.rec.describe(k)}: "
                        f"{len(inputs)} inputs instead of {len(self.rec.ops[k][1])}")

    def rebind(self, k, j, x):
        """Input j of op k is not the recorded var's handle.  A captured tensor the function
        made afresh (``mge.tensor(...)`` inside it) or changed outside the trace is taken as it
        is now, if its shape and dtype are the recorded ones; anything else is a divergence."""
        rec = self.rec
        v = rec.ops[k][1][j]
        info = x._info
        if self.capture_as_const and rec.externals.get(v) is x:
            return  # the captured tensor itself: its recorded value is used (bind)
        if v in rec.externals and (not self.capture_as_const or v in rec.cut_vars):
            shape, dtype, _ = rec.descs[v]
            if info.shape == shape and info.dtype == dtype:
                if k < self.launched:
                    raise TraceError(f"input {j} of {rec.describe(k)} changed after the op ran")
                self.m.vi[v] = info
                self.kept.append(x)  # (a temporary, such as a setitem's value: the programs read it)
                return
        external = v in rec.externals or v in rec.args
        what = "a captured constant" if v in rec.externals else (
            "an argument" if v in rec.args else "an op's output")
        given = self.var_of(x)  # (the var it holds in this call, when it is one of the trace's)
        if given is not None and (given in rec.externals or given in rec.args):
            given = None  # (not an op's output)
        if external:
            reason = ("expect external node, got internal" if given is not None
                      else "tensors not equals")
        else:
            reason = "expect internal node, got external" if given is None else "input id mismatch"
        raise _mismatch(reason,
            f"the traced function diverged at {rec.describe(k)}: input {j} is not the tensor "
            f"recorded there ({what}, shape {rec.descs[v][0]}, {rec.descs[v][1]}; got "
            f"{'var ' + str(given) + ', ' if given is not None else ''}shape "
            f"{info.shape}, {info.dtype})")

    # -- backward passes (the grad plugin's hook) -------------------------------------------------
    def backward(self, key, seeds, run, attached, alone):
        """A backward pass: replayed whole when it is the recorded one at this point -- the same
        seeds, the same attached tensors, no other key recording.  Its rules do not run: the
        recorded ops are taken as matched (they follow from the ops matched before), and each
        attached tensor's callback gets a placeholder of the gradient recorded for it, in the
        recorded order; what a callback issues is matched as usual.  Otherwise it runs."""
        m = self.m
        seg = self.rec.backwards.get(m.pos)
        if seg is None or not alone:
            return run(key, seeds)
        end, grads, attached_ids, seed_vars = seg
        if len(seeds) != len(seed_vars):
            return run(key, seeds)
        for (slot, y, dy), (vy, vdy, untracked, no_dy) in zip(seeds, seed_vars):
            if ((slot is None) != untracked or (dy is None) != no_dy
                    or not isinstance(y, Tensor) or not self.holds(y, vy)
                    or (dy is not None and (not isinstance(dy, Tensor) or not self.holds(dy, vdy)))):
                return run(key, seeds)
        callbacks = {id(t): cb for t, cb in attached}
        if len(callbacks) != len(attached_ids) or not attached_ids.issuperset(callbacks):
            return run(key, seeds)
        for k, target, v in grads:
            if m.pos > k:
                raise TraceError(f"the traced function diverged in a backward pass: a gradient "
                                 f"callback issued ops up to op #{m.pos - 1} where the next "
                                 f"gradient came after op #{k - 1} when recorded")
            m.pos = k
            callbacks[target](m.placeholder(v))
        if m.pos > end:
            raise TraceError("the traced function diverged in a backward pass: a gradient "
                             f"callback issued ops beyond the recorded pass ({self.rec.describe(end - 1)})")
        m.pos = end

    def gave_grad(self, tensor, grad):
        pass  # (a backward pass that runs in a replay: its ops are matched one by one)

    def ran_custom(self):
        pass

    # (``mge.jit.SymbolVar``'s questions: a replay computes any value read)
    def var_of(self, tensor):
        """The var ``tensor`` holds in this call (``None``: not a value of the recording)."""
        info = tensor._info
        if info.deleted and info.producer is not None:
            return info.producer
        known = self.m.var_of.get(id(info))
        if known is not None and known[1] is info:
            return known[0]
        for v, held in enumerate(self.m.vi):
            if held is info:
                return v
        return None

    def producer_of(self, v):
        """The index of the op that computes var ``v`` (``None`` for arguments and captures)."""
        return _producer_of(self.rec, v)

    def inferable(self, v):
        """Whether var ``v``'s value can be read now."""
        return True

    def holds(self, t, v):
        """Whether tensor ``t`` is a placeholder of var ``v`` in this call."""
        info = t._info
        if self.m.vi[v] is info:
            return True
        if info.deleted and info.producer is not None:
            return info.producer == v
        known = self.m.var_of.get(id(info))
        return known is not None and known[1] is info and known[0] == v

    # -- running ---------------------------------------------------------------------------------
    def resolve(self, info):
        """Python needs the value of a placeholder now: run the program up to the current op."""
        real = self._real_of(info)
        if real is None:
            self.launch(self.m.pos)
            real = self._real_of(info)
            if real is None:
                raise TraceError("a tensor of the traced function's previous call was read "
                                 "while the function was replaying")
        return real

    def _real_of(self, info):
        # (the map holds the virtual handle too: a dead one's id may be reused)
        entry = self.real.get(id(info))
        return entry[1] if entry is not None and entry[0] is info else None

    def launch(self, upto):
        """Queue ops [launched, upto) as one program; alive placeholders get real handles."""
        start = self.launched
        if upto <= start:
            return
        rec = self.rec
        m = self.m
        alive = m.take_alive()
        out_vars = [v for _, _, v in alive]
        # vars that later ops still read: the trace holds a handle of its own on them (a
        # placeholder holding one may be dropped before those ops run)
        later = self.compiled.later(rec, start, upto)
        vi = m.vi
        try:
            if self.op_by_op:
                real = self._issue_ops(start, upto, tuple(out_vars) + tuple(later))
            else:
                program = self.compiled.get(rec, start, upto, tuple(out_vars) + tuple(later))
                if self.seeds:
                    program = program.reseeded(self.seeds)
                real = _channel.apply_op(program, self._inputs(program.in_vars))
        except BaseException as e:
            # (async_level 0: the program failed at once) the tensors waiting for it are
            # unusable, with the failure as the cause, as after any failed op
            for t, info, v in alive:
                info.deleted = False
                info.producer = None
                info.error = e
            self.launched = upto
            raise
        n = len(out_vars)
        for (t, info, v), r in zip(alive, real[:n]):
            t._info = r
            self.real[id(info)] = (info, r)
            vi[v] = r
            m.var_of[id(r)] = (v, r)
        for v, r in zip(later, real[n:]):
            vi[v] = r
            m.temps.append(r)
        self.launched = upto

    def _inputs(self, in_vars):
        vi = self.m.vi
        inputs = [vi[v] for v in in_vars]
        for info in inputs:
            if info is None or info.deleted:
                raise TraceError("a value the traced program reads was lost "
                                 f"({'never bound' if info is None else info.shape})")
        return inputs

    def _issue_ops(self, start, upto, wanted):
        """Ops ``[start, upto)`` issued to the channel one by one, as eagerly (``dtr_config``:
        DTR may evict and recompute each of their outputs); returns a handle per var of
        ``wanted``, as a program would: each the caller's own."""
        rec = self.rec
        vi = self.m.vi
        wanted_set = set(wanted)
        last = {}
        for k in range(start, upto):
            for v in rec.ops[k][1]:
                last[v] = k
        own = {}  # var -> a handle of this call's own
        for k in range(start, upto):
            op, ins, outs = rec.ops[k]
            if not outs:
                continue  # (an in-place update: no instruction)
            infos = _channel.apply_op(self.seeds.get(k, op),
                                      [own[v] if v in own else vi[v] for v in ins])
            for v, info in zip(outs, infos):
                own[v] = info
            for v in set(ins) | set(outs):  # what nothing reads any more goes at once
                if v in own and last.get(v, -1) <= k and v not in wanted_set:
                    _channel.del_(own.pop(v))
        result = []
        given = {}
        for v in wanted:
            if v in own:
                given[v] = own.pop(v)  # the first holder takes ours
                result.append(given[v])
            else:  # another holder of the same var, or an input passed through
                src = given[v] if v in given else vi[v]
                result.append(_channel.apply_op(_IDENTITY, [src])[0])
        for info in own.values():
            _channel.del_(info)
        return result

    def run_without_host(self):
        """``without_host``: run the whole recording as one program, without the function's
        Python; returns the output handles.  Captured tensors the recording assigned take their
        new values, as the function's in-place updates would have given them."""
        rec = self.rec
        assigned = rec.assigned
        out_vars = tuple(rec.outputs) + tuple(v for _, v in assigned)
        program = self.compiled.get(rec, 0, len(rec.ops), out_vars).fresh_seeds()
        vi = self.m.vi
        real = _channel.apply_op(program, [vi[v] for v in program.in_vars])
        n = len(rec.outputs)
        for (t, _), r in zip(assigned, real[n:]):
            old = t._info
            t._info = r
            _channel.del_(old)
        return real[:n]

    def cut(self):
        """An ``exclude_from_trace`` block starts: the ops matched so far run, so that the
        block reads values (after it, the trace takes them as the recording's cut vars)."""
        self.launch(self.m.pos)

    def check_complete(self):
        """The function returned: it must have issued every recorded op."""
        pos = self.m.pos
        if pos != len(self.rec.ops):
            raise _mismatch("mismature end",
                            f"the traced function issued {pos} ops where "
                            f"{len(self.rec.ops)} were recorded (next expected: "
                            f"{self.rec.describe(pos)})")

    def release(self):
        m = self.m
        for info in m.temps:
            _channel.del_(info)
        m.temps = []


class TraceTransformation(Transformation):
    """The plugin's entry point: the front-end's access to this module (on demand only)."""

    name = "trace"
    on_demand = True
    Recording = Recording
    Recorder = Recorder
    LazyRecorder = LazyRecorder
    Replayer = Replayer
    SymbolicValueError = SymbolicValueError
    stack = stack
