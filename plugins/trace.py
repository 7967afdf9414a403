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

Placeholders hold *virtual* channel handles (``deleted`` set, so dropping one costs nothing);
a launch gives the tensors still alive real handles, the program's outputs.
"""
import weakref

import mge
from mge._core import _accel
from mge._core.channel import get_channel
from mge._core.errors import TraceError
from mge._core.plugins import stack
from mge.core import Transformation, ops

__all__ = ["TraceTransformation", "Recording", "Recorder", "Replayer"]

Tensor = mge.Tensor
TensorInfo = _accel.load("mge._core.channel.handles").TensorInfo
_Assign = ops.Assign
_channel = get_channel()
_ref = weakref.ref


class Recording:
    """One call of a traced function, op by op: what a replay must repeat.

    ``ops`` -- ``(op, input vars, output vars)``; ``descs`` -- per var, ``(shape, dtype,
    device)``; ``externals`` -- var -> the captured tensor; ``args`` -- the vars of the tensor
    arguments, in order; ``outputs`` -- the vars of the function's tensor results.
    """

    def __init__(self):
        self.ops = []
        self.descs = []
        self.externals = {}
        self.snapshots = {}  # var -> the external's handle when recorded (capture_as_const)
        self.args = []
        self.outputs = []
        self.last_use = []   # var -> index of the last op that reads it (-1: none)
        self._var_of = {}    # id(handle) -> var, while recording
        self._keep = []      # the handles seen: their ids stay unique while recording

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
            self.snapshots[v] = info
        return v

    def bind_arg(self, x):
        v = self._var_of.get(id(x._info))
        if v is None:
            v = self._new_var(x._info)
        self.args.append(v)
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
            return
        outs = tuple(self._new_var(y._info) for y in outputs)
        self.ops.append((op, ins, outs))

    def _alias(self, info, v):
        self._var_of[id(info)] = v
        self._keep.append(info)

    def finish(self, output_tensors):
        """The function returned ``output_tensors``: note their vars and drop the id map."""
        self.outputs = [self.var_of(t) for t in output_tensors]
        last = [-1] * len(self.descs)
        for k, (_, ins, _) in enumerate(self.ops):
            for v in ins:
                last[v] = k
        self.last_use = last
        self._var_of = None
        self._keep = None

    def describe(self, k):
        op, ins, outs = self.ops[k]
        shapes = ", ".join(str(self.descs[v][0]) for v in ins)
        return f"op #{k} of the recording, {op.name}, on inputs of shapes ({shapes})"


class Recorder(Transformation):
    """The first call: every op runs as usual and is recorded."""

    name = "trace"

    def __init__(self, recording):
        self.recording = recording

    def apply(self, op, inputs, next):
        rec = self.recording
        ins = rec.input_vars(inputs)
        outputs = next(op, inputs)
        rec.add(op, inputs, ins, outputs)
        return outputs


class Replayer(Transformation):
    """A later call: ops are matched against the recording and answered with placeholders."""

    name = "trace"

    def __init__(self, recording, compiled, capture_as_const=False):
        self.rec = recording
        self.compiled = compiled  # the front-end's cache of programs (mge.jit.program.Programs)
        self.capture_as_const = capture_as_const
        self.pos = 0            # the next recorded op
        self.launched = 0       # ops [0, launched) are on the channel
        self.vi = [None] * len(recording.descs)  # var -> its handle in this call
        self.holders = []       # (weakref to a tensor, its virtual handle, var)
        self.temps = []         # real handles no tensor holds (read by a later program)
        self.real = {}          # id(virtual handle) -> the real one, once launched
        self.var_of = {}        # id(handle) -> (var, handle): every handle this call made

    # -- binding ---------------------------------------------------------------------------------
    def bind(self, args):
        rec = self.rec
        vi = self.vi
        for v, x in zip(rec.args, args):
            vi[v] = x._info
        for v, t in rec.externals.items():
            vi[v] = rec.snapshots[v] if self.capture_as_const else t._info

    # -- matching --------------------------------------------------------------------------------
    def apply(self, op, inputs, next):
        k = self.pos
        rec = self.rec
        if k >= len(rec.ops):
            raise TraceError(f"the traced function issued more ops than it did when recorded: "
                             f"{op.name} after the {len(rec.ops)} recorded ops")
        rop, ins, outs = rec.ops[k]
        if op is not rop and op != rop:
            if type(op) is type(rop) and op.trace_parameters and len(inputs) == len(ins):
                rec.ops[k] = (op, ins, outs)  # new hyperparameters: recompile from here on
                self.compiled.clear()
            else:
                raise TraceError(f"the traced function diverged at {rec.describe(k)}: it now "
                                 f"issues {op!r} where {rop!r} was recorded")
        if len(inputs) != len(ins):
            raise TraceError(f"the traced function diverged at {rec.describe(k)}: "
                             f"{len(inputs)} inputs instead of {len(ins)}")
        vi = self.vi
        for j in range(len(ins)):
            if inputs[j]._info is not vi[ins[j]]:
                self._rebind(k, j, inputs[j])
        self.pos = k + 1
        if type(op) is _Assign:
            # The target takes a placeholder of the value's var; the old value, which the
            # programs may still read, is this call's to free once they have run.
            target = inputs[0]
            old = target._info
            if not old.deleted:
                self.temps.append(old)
            target._info = self._virtual(ins[1], target)
            t = Tensor.__new__(Tensor)
            t._info = self._virtual(ins[0], t)
            return (t,)
        result = []
        for v in outs:
            t = Tensor.__new__(Tensor)
            info = self._virtual(v, t)
            vi[v] = info
            result.append(t)
        return tuple(result)

    def _virtual(self, v, tensor):
        # a placeholder's handle for var v: virtual (``deleted``), so dropping it frees nothing
        info = TensorInfo(*self.rec.descs[v])
        info.deleted = True
        tensor._info = info
        self.holders.append((_ref(tensor), info, v))
        self.var_of[id(info)] = (v, info)
        return info

    def _rebind(self, k, j, x):
        # Input j of op k is not the recorded var's handle.  A captured tensor the function made
        # afresh (``mge.tensor(...)`` inside it) or changed outside the trace is taken as it is
        # now, if its shape and dtype are the recorded ones; anything else is a divergence.
        rec = self.rec
        v = rec.ops[k][1][j]
        info = x._info
        known = self.var_of.get(id(info))
        if known is not None and known[1] is info and known[0] == v:
            return  # another holder of the var (an Assign target, a launched placeholder)
        if v in rec.externals and not self.capture_as_const:
            shape, dtype, _ = rec.descs[v]
            if info.shape == shape and info.dtype == dtype:
                if k < self.launched:
                    raise TraceError(f"input {j} of {rec.describe(k)} changed after the op ran")
                self.vi[v] = info
                return
        what = "a captured constant" if v in rec.externals else (
            "an argument" if v in rec.args else "an op's output")
        raise TraceError(
            f"the traced function diverged at {rec.describe(k)}: input {j} is not the tensor "
            f"recorded there ({what}, shape {rec.descs[v][0]}, {rec.descs[v][1]}; got shape "
            f"{info.shape}, {info.dtype})")

    # -- running ---------------------------------------------------------------------------------
    def resolve(self, info):
        """Python needs the value of a placeholder now: run the program up to the current op."""
        real = self.real.get(id(info))
        if real is None:
            self.launch(self.pos)
            real = self.real.get(id(info))
            if real is None:
                raise TraceError("a tensor of the traced function's previous call was read "
                                 "while the function was replaying")
        return real

    def launch(self, upto):
        """Queue ops [launched, upto) as one program; alive placeholders get real handles."""
        start = self.launched
        if upto <= start:
            return
        rec = self.rec
        alive = []
        for ref, info, v in self.holders:
            t = ref()
            if t is not None and t._info is info:
                alive.append((t, info, v))
        self.holders = []  # every alive one is launched now; the others are gone
        # outputs: the vars the alive tensors hold, then those later ops still read
        out_vars = [v for _, _, v in alive]
        produced = set()
        for _, _, outs in rec.ops[start:upto]:
            produced.update(outs)
        last = rec.last_use
        later = sorted(v for v in produced if last[v] >= upto and v not in out_vars)
        program = self.compiled.get(rec, start, upto, tuple(out_vars) + tuple(later))
        inputs = [self.vi[v] for v in program.in_vars]
        for info in inputs:
            if info.deleted:
                raise TraceError(f"a value the program reads was lost (var shape {info.shape})")
        real = _channel.apply_op(program, inputs)
        n = len(out_vars)
        for (t, info, v), r in zip(alive, real[:n]):
            t._info = r
            self.real[id(info)] = r
            self.vi[v] = r
            self.var_of[id(r)] = (v, r)
        for v, r in zip(later, real[n:]):
            self.vi[v] = r
            self.temps.append(r)
        self.launched = upto

    def check_complete(self):
        """The function returned: it must have issued every recorded op."""
        if self.pos != len(self.rec.ops):
            raise TraceError(f"the traced function issued {self.pos} ops where "
                             f"{len(self.rec.ops)} were recorded (next expected: "
                             f"{self.rec.describe(self.pos)})")

    def holds(self, t, v):
        """Whether tensor ``t`` is a placeholder of var ``v`` in this call."""
        info = t._info
        for ref, hinfo, hv in self.holders:
            if hinfo is info:
                return hv == v and ref() is t
        return self.vi[v] is info

    def release(self):
        for info in self.temps:
            _channel.del_(info)
        self.temps = []


class TraceTransformation(Transformation):
    """The plugin's entry point: the front-end's access to this module (on demand only)."""

    name = "trace"
    on_demand = True
    Recording = Recording
    Recorder = Recorder
    Replayer = Replayer
    stack = stack
