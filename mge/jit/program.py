"""Compiled programs: a slice of a recording as one op that the channel runs like any other.

A ``TracedProgram`` is a flat list of kernel calls through the device's kernel door
(``Device.execute``), over numbered *slots* instead of tensors: no transformation stack, no
``Tensor`` objects, no shape rules at run time (the recording has every shape).  Compiling a slice
of a ``Recording`` (``compile_program``) does, in order:

* **dead-code elimination** -- only the ops that the requested outputs depend on are kept (a
  replay still checks every op the function issues; the program runs only those that matter);
* **a buffer plan** -- each intermediate is dropped right after its last reader, and that reader
  is told it may write its output into the freed buffer (the door's in-place ``reuse``), so a
  chain of elementwise ops runs in one or two buffers;
* **the thread** -- the program runs on the worker thread when one of its ops would
  (``long_running``: matrix products, convolutions), overlapping the caller's Python, and on the
  caller's thread otherwise.

``Programs`` caches compiled programs by ``(start, stop, outputs)``: a replay that asks for the
same outputs as the last one compiles nothing.  An error in a kernel names the recorded op.
"""
from .._core.device.cpu.table import def_kernel
from .._core.ops.base import OpDef, TensorDesc, def_infer

__all__ = ["TracedProgram", "Programs", "compile_program"]


class TracedProgram(OpDef):
    """Ops ``[start, stop)`` of a recording as one op (see the module docstring)."""

    _fields = ()
    never_recompute = True  # DTR cannot recompute a program's outputs piecemeal

    def __init__(self, plan, n_slots, in_vars, out_vars, out_slots, out_descs, long_running, label):
        d = self.__dict__
        d["plan"] = plan            # [(op, input slots, output slots, descs, reuse, frees)]
        d["n_slots"] = n_slots
        d["in_vars"] = in_vars      # the recording's vars the inputs hold, in order
        d["out_vars"] = out_vars
        d["out_slots"] = out_slots
        d["out_descs"] = out_descs
        d["long_running"] = long_running
        d["label"] = label
        d["_key"] = (id(self),)
        d["_types"] = ()
        d["_hash"] = id(self)

    def __eq__(self, other):
        return self is other

    def __hash__(self):
        return self._hash

    def __reduce__(self):
        raise TypeError("a TracedProgram is not picklable; dump the trace instead")

    @property
    def name(self):
        return f"TracedProgram[{self.label}]"

    def __repr__(self):
        return f"<TracedProgram {self.label}: {len(self.plan)} kernel calls>"


@def_infer(TracedProgram)
def _infer_program(op, descs):
    return list(op.out_descs)


_cpu = None


@def_kernel(TracedProgram)
def _run_program(op, *inputs):
    global _cpu
    if _cpu is None:
        from .._core.device import as_device
        _cpu = as_device("cpu0").impl
    execute = _cpu.execute
    env = [None] * op.n_slots
    env[:len(inputs)] = inputs
    del inputs
    for kop, ins, outs, descs, reuse, frees in op.plan:
        args = [env[i] for i in ins]
        for f in frees:
            env[f] = None  # the last reader: the buffer may take this op's output
        try:
            res = execute(kop, args, descs, reuse)
        except Exception as e:
            _name_the_op(e, kop, op)
            raise
        del args
        for k in range(len(outs)):
            env[outs[k]] = res[k]
    return tuple([env[s] for s in op.out_slots])


def _name_the_op(e, kop, program):
    note = f"(in {program.name}, at the traced op {kop.name})"
    if hasattr(e, "add_note"):
        e.add_note(note)
    elif e.args and isinstance(e.args[0], str):
        e.args = (f"{e.args[0]} {note}",) + e.args[1:]


def _op_runs_long(op, descs_in, descs_out):
    rule = op.long_running
    if rule is True or rule is False:
        return rule
    try:
        return bool(rule(op, descs_in, descs_out))
    except Exception:
        return True


def compile_program(rec, start, stop, out_vars):
    """Ops ``[start, stop)`` of ``rec`` as a ``TracedProgram`` giving ``out_vars``."""
    ops = rec.ops
    descs = rec.descs
    # dead-code elimination, backwards from the outputs
    needed = set(out_vars)
    keep = []
    for k in range(stop - 1, start - 1, -1):
        op, ins, outs = ops[k]
        if not outs or not needed.intersection(outs):
            continue
        keep.append(k)
        needed.update(ins)
    keep.reverse()
    produced = set()
    for k in keep:
        produced.update(ops[k][2])
    in_vars = []
    seen = set()
    for k in keep:
        for v in ops[k][1]:
            if v not in produced and v not in seen:
                seen.add(v)
                in_vars.append(v)
    for v in out_vars:  # an output the slice does not compute: an input passed through
        if v not in produced and v not in seen:
            seen.add(v)
            in_vars.append(v)
    slot = {v: i for i, v in enumerate(in_vars)}
    n_slots = len(in_vars)
    last = {}
    for k in keep:
        for v in ops[k][1]:
            last[v] = k
    keep_alive = set(out_vars) | set(in_vars)  # inputs belong to their tensors
    plan = []
    long_running = False
    for k in keep:
        op, ins, outs = ops[k]
        in_slots = tuple(slot[v] for v in ins)
        frees = []
        for v in set(ins):
            if last[v] == k and v not in keep_alive:
                frees.append(slot[v])
        reuse = [j for j, v in enumerate(ins) if slot[v] in frees] or None
        out_slots = []
        for v in outs:
            slot[v] = n_slots
            out_slots.append(n_slots)
            n_slots += 1
        out_descs = [TensorDesc(descs[v][0], descs[v][1]) for v in outs]
        in_descs = [TensorDesc(descs[v][0], descs[v][1]) for v in ins]
        if not long_running and _op_runs_long(op, in_descs, out_descs):
            long_running = True
        plan.append((op, in_slots, tuple(out_slots), out_descs, reuse, tuple(frees)))
    label = f"ops {start}..{stop - 1}"
    return TracedProgram(plan, n_slots, in_vars, tuple(out_vars),
                         tuple(slot[v] for v in out_vars),
                         tuple(TensorDesc(descs[v][0], descs[v][1]) for v in out_vars),
                         long_running, label)


class Programs:
    """A trace's compiled programs, by the slice of the recording and the outputs asked for."""

    def __init__(self):
        self._cache = {}
        self.compiled = 0

    def clear(self):
        """Forget every program (the recording changed)."""
        self._cache.clear()

    def get(self, rec, start, stop, out_vars):
        key = (start, stop, out_vars)
        p = self._cache.get(key)
        if p is None:
            if len(self._cache) > 64:
                self._cache.clear()
            p = self._cache[key] = compile_program(rec, start, stop, out_vars)
            self.compiled += 1
        return p
