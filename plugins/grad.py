"""grad: reverse-mode automatic differentiation as a transformation (MegEngine's ``GradKey``).

A :class:`GradKey` records while it is entered: ``enter()`` puts one :class:`GradTransformation`
for that key on the stack's ``grad`` segment (the newest key on top) and ``exit()`` takes it off
and frees what it recorded.  Loading the plugin puts nothing on the stack (``on_demand``); the
front-ends (``mge.autodiff.GradManager`` and ``Function``) reach this module through
``mge.core.get_plugin("grad")``, whose attributes are the functions below.

Recording.  A tensor that a key tracks carries a *slot* (attribute ``_gslot``): the recorded node
that produced it and its output index, chained with the slots of other keys.  ``attach`` gives a
tensor a slot whose node calls a callback with the tensor's gradient.  While a key records, an op
with at least one input tracked by that key becomes a node: the op, its input tensors (the rule
reads them), the inputs' slots, and its outputs: a single output is held weakly, so that no
reference cycle keeps the tape alive, unless the op's rule was registered with
``keeps_outputs`` (it reads the output: sigmoid, exp, softmax, max pooling...); the outputs of a
multi-output op are held too, and those cycles are broken by backward or exit.  Each float
output gets a slot.  An op none of whose inputs
is tracked costs one attribute read per input.  A tensor holds its slot, a slot its node and a node
the slots of its inputs, so the tape lives exactly as long as the tensors that can still reach it.

Backward.  ``backward(key, ys, dys)`` collects the nodes reachable from ``ys``, keeps those through
which a gradient can reach an attached tensor, and runs them in reverse topological order.  A
node calls its op's rule, ``BACKWARD[type(op)](op, inputs, outputs, grads, needs)`` (the tables of
``mge/_core/autodiff``); gradients that reach the same slot are summed.  The rules' ops, and the
sums, go to the layers *below* the key's own (``stack.below``): the channel runs them as any op,
the key itself does not see them (it is frozen once its backward starts), and a key recording
further down -- an outer GradManager -- records them: nested GradManagers give higher-order
gradients that way.  A key's backward runs once.

In-place updates.  ``Tensor._reset`` (``x += 1``, ``x[i] = v``, optimizer steps) is the op
``Assign(x, value)``: afterwards ``x`` holds the value and the op's output the old value.  Each
entered key's layer moves its slot with the value (``x`` takes ``value``'s, the old value keeps
``x``'s), and the old value is kept (not freed) until the last key exits: a recorded op that read
the old value still finds it.  Every such update bumps an epoch; a node remembers the epoch it was
recorded in and finds the values of its tensors as they were then.
"""
import weakref

import numpy as np

import mge
from mge._core.autodiff import gradutil
from mge._core.autodiff.registry import BACKWARD, KEEPS_OUTPUTS, READS_INPUTS
from mge._core.plugins import stack
from mge.core import Transformation, get_channel as _get_channel, ops

__all__ = [
    "GradTransformation", "GradKey", "backward", "get_backward_closure", "set_grad",
    "get_grad_key", "is_grad_attached", "snapshot", "set_backward_hook",
]

Tensor = mge.Tensor
_Detach = ops.Detach
_Assign = ops.Assign
_ADD = ops.elemwise_op("add")
_IDENTITY = ops.Identity()
_ref = weakref.ref

_entered = []              # the keys on the stack, oldest first
_hook = None               # a running jit.trace's layer: sees each backward (set_backward_hook)
_epoch = 0                 # bumped by each in-place update while a key is entered
_retired = {}              # id(tensor) -> [tensor, (epoch, holder of its value before), ...]

# A slot is a tuple ``(key, node, index, next)``: the value is output ``index`` of ``node`` for
# ``key``; ``next`` is the value's slot for another key (nested keys), or None.  Tuples because a
# slot is made for every recorded output and must be cheap.


class _Node:
    """A recorded op: the tape's step from its outputs' gradients to its inputs' gradients."""

    __slots__ = ("op", "inputs", "outputs", "in_slots", "epoch", "__weakref__")

    def __init__(self, op, inputs, outputs, in_slots):
        self.op = op
        self.inputs = inputs      # the input tensors (the rule reads them)
        self.outputs = outputs    # weakref to the one output, or the tuple of outputs
        self.in_slots = in_slots  # one slot (or None: not tracked) per input
        self.epoch = _epoch

    @property
    def nout(self):
        outputs = self.outputs
        return 1 if type(outputs) is _ref else len(outputs)

    def name(self):
        return self.op.name

    def clear(self):
        self.inputs = self.outputs = self.in_slots = None


class _AttachNode(_Node):
    """Where an attached tensor's gradient arrives: calls the callback, and passes the gradient
    on to the tensor's previous slot when it was already tracked."""

    __slots__ = ("callback", "target")
    nout = 1

    def name(self):
        return "attach"

    def clear(self):
        self.in_slots = self.callback = None


class _CustomNode(_Node):
    """A ``set_grad`` group: ``rule(*output_grads)`` gives the input gradients."""

    __slots__ = ("rule", "shapes", "n")

    @property
    def nout(self):
        return self.n

    def name(self):
        return "set_grad backward"

    def clear(self):
        self.in_slots = self.rule = None


def _slot_of(x, key):
    s = getattr(x, "_gslot", None)
    while s is not None and s[0] is not key:
        s = s[3]
    return s


def _set_slot(t, key, node, index):
    """Give ``t`` the slot ``(key, node, index)`` (none when ``node`` is None), dropping its old
    slot for ``key`` and those of keys that exited."""
    keep = []
    s = getattr(t, "_gslot", None)
    while s is not None:
        if s[0] is not key and not s[0]._exited:
            keep.append(s)
        s = s[3]
    chain = None
    for s in reversed(keep):
        chain = (s[0], s[1], s[2], chain)
    if node is not None:
        chain = (key, node, index, chain)
    t._gslot = chain


class _Meta:
    """What a backward rule that reads no values needs of an input: its shape, dtype and device
    (the tensor itself is not kept alive by the recording)."""

    __slots__ = ("shape", "dtype", "device")

    def __init__(self, x):
        info = x._info
        shape = info.shape
        self.shape = tuple(shape) if shape is not None else x.shape
        self.dtype = info.dtype
        self.device = x.device

    @property
    def _info(self):
        # (rules read ``x._info.dtype`` of tensors: a _Meta is its own info -- as a property,
        # not an attribute, so that it is no reference cycle for the garbage collector)
        return self

    @property
    def ndim(self):
        return len(self.shape)


def _records_paths():
    """Whether the channel records computing paths (DTR, ``drop``): then a recording keeps every
    input.  DTR evicts and recomputes kept inputs; inputs the recording let go would be released
    tensors that DTR evicts first, and a later recomputation would regenerate (and pin) the whole
    chain of them, above the budget."""
    return _get_channel().options.values["record_computing_path"]


def _keep_values(inputs, reads):
    """The inputs a node keeps: those the rule reads (``reads``: indices, None for all) as they
    are, the others as their :class:`_Meta`."""
    if reads is None:
        return inputs
    return tuple(x if i in reads else _Meta(x) for i, x in enumerate(inputs))


def _is_float(t):
    return t._info.dtype.kind == "f"


def _in_slots(key, inputs):
    # each input's slot for ``key`` (None for an untracked one), or None if no input is tracked
    in_slots = None
    i = 0
    for x in inputs:
        s = getattr(x, "_gslot", None)
        if s is not None:
            while s is not None and s[0] is not key:
                s = s[3]
            if s is not None:
                if in_slots is None:
                    in_slots = [None] * len(inputs)
                in_slots[i] = s
        i += 1
    return in_slots


def _record(key, op, inputs, outputs, in_slots):
    # one node for ``op`` on ``key``'s tape; each output that may get a gradient gets a slot
    node = None
    i = 0
    int_flow = None
    for y in outputs:
        kind = y._info.dtype.kind
        if kind != "f" and kind in "iu":
            # an integer output gets gradients only from an attached integer tensor (as
            # MegEngine's integer gradients): indices computed from floats never do
            if int_flow is None:
                int_flow = any(s is not None and x._info.dtype.kind in "iu"
                               for x, s in zip(inputs, in_slots))
            kind = "f" if int_flow else kind
        if kind == "f":  # bool values, and integers of float inputs, never get gradients
            if node is None:
                keep = KEEPS_OUTPUTS.get(type(op))
                if len(outputs) == 1 and (keep is None or not keep(op)):
                    held = _ref(outputs[0])
                else:
                    held = tuple(outputs)
                reads = READS_INPUTS.get(type(op))
                if reads is None or _records_paths():
                    kept = inputs
                else:
                    kept = _keep_values(inputs, reads(op))
                node = _Node(op, kept, held, in_slots)
                tape = key._tape
                tape.append(_ref(node))
                if len(tape) > key._tape_limit:
                    key._compact()
            y._gslot = (key, node, i, getattr(y, "_gslot", None))
        i += 1


class GradTransformation(Transformation):
    """The layer of one :class:`GradKey` on the ``grad`` segment: records the ops it tracks.

    The instance made by the plugin loader (``key=None``) is the plugin's face; it never goes on
    the stack.  Its attributes are this module's API: ``GradKey``, ``backward``, ``set_grad``...
    """

    name = "grad"
    on_demand = True

    def __init__(self, key=None):
        self.key = key

    def apply(self, op, inputs, next):
        key = self.key
        if type(op) is _Assign:
            return _assign(key, op, inputs, next)
        if key is None or key._paused or type(op) is _Detach:
            return next(op, inputs)
        in_slots = _in_slots(key, inputs)
        outputs = next(op, inputs)
        if in_slots is not None:
            _record(key, op, inputs, outputs, in_slots)
        return outputs

    def replayed(self, op, inputs, outputs):
        """``jit.trace`` answered ``op`` on ``inputs`` with ``outputs`` from its recording,
        without walking the stack: record it as :meth:`apply` would have (the tape a backward
        that is not the recorded one needs)."""
        key = self.key
        if key._paused or type(op) is _Detach:
            return
        in_slots = _in_slots(key, inputs)
        if in_slots is not None:
            _record(key, op, inputs, outputs, in_slots)

    def __repr__(self):
        return f"<GradTransformation {'(plugin)' if self.key is None else self.key.name!r}>"


class GradKey:
    """One differentiation: the tensors it tracks and the ops recorded on them.

    ``GradKey(name=None)``.  ``attach`` marks the tensors to differentiate with respect to,
    ``enter()`` starts recording, :func:`backward` computes the gradients (once), ``exit()``
    stops recording and frees the tape.  ``suppress()``/``resume()`` pause recording (nestable).

    Example::

        >>> import mge
        >>> grad = mge.core.get_plugin("grad")
        >>> x = mge.tensor([1.0, 2.0, 3.0])
        >>> key = grad.GradKey("k")
        >>> key.enter()
        >>> got = []
        >>> key.attach(x, got.append)
        >>> y = x * x
        >>> grad.backward(key, [y], [mge.tensor([1.0, 1.0, 1.0])])
        >>> key.exit()
        >>> got[0].numpy()
        array([2., 4., 6.], dtype=float32)
    """

    def __init__(self, name=None):
        self._name = name or ""
        self._layer = None       # our GradTransformation while entered
        self._paused = 0         # suppress() depth, +1 once frozen: the layer records when 0
        self._frozen = False     # backward started: nothing more is recorded
        self._exited = False
        self._tape = []          # weakrefs to our nodes, to free what they hold on exit
        self._tape_limit = 1024

    @property
    def name(self):
        """The key's name (for messages)."""
        return self._name

    @name.setter
    def name(self, value):
        self._name = value

    def __repr__(self):
        return f"<GradKey {self._name!r}>"

    def _compact(self):
        # Drop the references to nodes that already died (the tape of a long recording).
        tape = self._tape
        tape[:] = [r for r in tape if r() is not None]
        self._tape_limit = max(1024, 2 * len(tape))

    def _check_alive(self, what):
        if self._exited:
            raise RuntimeError(f"GradKey {self._name!r}: {what} after exit()")

    def attach(self, tensor, callback=None):
        """Track ``tensor``; at backward, ``callback(grad)`` is called with its gradient.

        Attaching a tensor this key already tracks as an op's output makes the gradient flow on
        to that op as well; attaching an attached tensor again replaces its callback.
        """
        self._check_alive("attach")
        if not isinstance(tensor, Tensor):
            raise TypeError(f"GradKey.attach: expected a Tensor, got {type(tensor).__name__}")
        if tensor._info.dtype.kind not in "fiu":
            raise TypeError(
                f"GradKey.attach: only float and integer tensors can get gradients, got a tensor "
                f"of dtype {tensor.dtype} and shape {tensor.shape}"
            )
        if callback is not None and not callable(callback):
            raise TypeError(f"GradKey.attach: callback must be callable, got {type(callback).__name__}")
        prev = _slot_of(tensor, self)
        if prev is not None and type(prev[1]) is _AttachNode:
            prev[1].callback = callback
            return
        node = _AttachNode(None, None, None, () if prev is None else (prev,))
        node.callback = callback
        node.target = _ref(tensor)
        self._tape.append(_ref(node))
        _set_slot(tensor, self, node, 0)

    def is_attached_to(self, tensor):
        """Whether this key tracks ``tensor`` (attached, or computed from attached tensors)."""
        return not self._exited and _slot_of(tensor, self) is not None

    def enter(self):
        """Start recording: put this key's layer on the ``grad`` segment of the stack."""
        self._check_alive("enter")
        if self._layer is not None:
            raise RuntimeError(f"GradKey {self._name!r} is already entered")
        self._layer = GradTransformation(self)
        stack.register(self._layer, "grad")
        _entered.append(self)

    def exit(self):
        """Stop recording and free the tape (calling it again does nothing)."""
        self._exited = True
        if self._layer is not None:
            stack.unregister(self._layer)
            self._layer = None
            _entered.remove(self)
            if not _entered:
                _retired.clear()  # the holders of old values die: those values are freed
        tape, self._tape = self._tape, []
        for ref in tape:
            node = ref()
            if node is None:
                continue
            if type(node) is _AttachNode:
                t = node.target()
                if t is not None:
                    _set_slot(t, self, None, 0)
            node.clear()

    def suppress(self):
        """Pause recording (``resume`` undoes it; the calls nest)."""
        self._paused += 1

    def resume(self):
        """Undo one ``suppress``."""
        if self._paused > int(self._frozen):
            self._paused -= 1

    def _freeze(self):
        if self._frozen:
            raise RuntimeError(
                f"GradKey {self._name!r}: backward was already called; a key computes gradients "
                "once (record again for another backward)"
            )
        self._check_alive("backward")
        self._frozen = True
        self._paused += 1


# -- backward ----------------------------------------------------------------------------------

def _as_list(v, what):
    if isinstance(v, (list, tuple)):
        return list(v)
    raise TypeError(f"backward: {what} must be a list of tensors, got {type(v).__name__}")


def backward(key, ys, dys):
    """Compute the gradients of ``ys`` (seeded with ``dys``) for the tensors ``key`` tracks.

    Each attached tensor's callback is called with its gradient (tensors no gradient reaches get
    no call).  ``ys`` that the key does not track contribute nothing.  The key is frozen: it
    records nothing more, and a second backward is an error.
    """
    ys = _as_list(ys, "ys")
    dys = _as_list(dys, "dys")
    if len(ys) != len(dys):
        raise ValueError(f"backward: got {len(ys)} ys but {len(dys)} dys")
    _run(key, [(_slot_of(y, key), y, dy) for y, dy in zip(ys, dys)])


def get_backward_closure(key, ys):
    """A function ``f(dys)`` that runs :func:`backward` for ``ys`` as they are now."""
    ys = _as_list(ys, "ys")
    slots = [(_slot_of(y, key), y) for y in ys]

    def closure(dys):
        dys = _as_list(dys, "dys")
        if len(dys) != len(slots):
            raise ValueError(f"backward closure: got {len(dys)} dys for {len(slots)} ys")
        _run(key, [(s, y, dy) for (s, y), dy in zip(slots, dys)])
    return closure


def _seed(y, dy, k):
    if not isinstance(dy, Tensor):
        dy = Tensor(dy, dtype=y.dtype, device=y.device)
    if tuple(dy.shape) != tuple(y.shape):
        # as in MegEngine, a dy that broadcasts to y's shape is broadcast
        try:
            np.broadcast_shapes(tuple(dy.shape), tuple(y.shape))
            ok = len(dy.shape) <= len(y.shape) and np.broadcast_shapes(
                tuple(dy.shape), tuple(y.shape)) == tuple(y.shape)
        except ValueError:
            ok = False
        if not ok:
            raise ValueError(f"backward: dy[{k}] has shape {tuple(dy.shape)} but y[{k}] has "
                             f"shape {tuple(y.shape)}")
        dy = mge.functional.broadcast_to(dy, tuple(y.shape))
    return dy


def _value_at(t, epoch):
    # The value ``t`` had when a node of ``epoch`` was recorded (see the module docstring).
    hist = _retired.get(id(t))
    if hist is None:
        return t
    for k in range(1, len(hist)):
        e, holder = hist[k]
        if e > epoch:
            return holder
    return t


def _toposort(roots):
    """The nodes reachable from ``roots``, each after the producers of its inputs."""
    order = []
    seen = set()
    for root in roots:
        if root in seen or root.in_slots is None:
            continue
        seen.add(root)
        todo = [(root, iter(root.in_slots))]
        while todo:
            node, rest = todo[-1]
            for s in rest:
                if s is not None:
                    m = s[1]
                    if m not in seen and m.in_slots is not None:
                        seen.add(m)
                        todo.append((m, iter(m.in_slots)))
                        break
            else:
                todo.pop()
                order.append(node)
    return order


def set_backward_hook(hook):
    """Install ``hook`` (``None`` removes it); returns the previous one.  ``mge.jit.trace``
    uses it to record which ops a backward pass issued and which gradients reached which
    attached tensors, and to replay the pass from its recording without running the rules.

    ``hook.backward(key, seeds, run, attached, alone)`` is called for each backward: ``seeds``
    as ``run(key, seeds)`` takes them (``run`` is the backward itself), ``attached`` the
    ``(tensor, callback)`` pairs of the key's attached tensors, ``alone`` whether no other key
    records (the key is frozen already).  During ``run``, ``hook.gave_grad(tensor, grad)`` is called before an attached
    tensor's callback, and ``hook.ran_custom()`` when a ``set_grad`` rule (a ``Function``'s
    Python backward) runs."""
    global _hook
    prev = _hook
    _hook = hook
    return prev


def _run(key, seeds):
    key._freeze()
    hook = _hook
    if hook is None:
        return _run_tape(key, seeds)
    attached = []
    for ref in key._tape:
        node = ref()
        if type(node) is _AttachNode and node.callback is not None:
            t = node.target()
            if t is not None:
                attached.append((t, node.callback))
    return hook.backward(key, seeds, _run_tape, attached, len(_entered) == 1)


def _run_tape(key, seeds):
    bw = _Pass(stack.below(key._layer))
    roots = []
    for k, (slot, y, dy) in enumerate(seeds):
        if slot is None or dy is None:
            continue
        dy = _seed(y, dy, k)
        bw.hold(dy)  # the caller's tensor: never hand it to a callback as it is
        bw.accumulate(slot[1], slot[2], dy)
        roots.append(slot[1])
    order = _toposort(roots)
    # A node is useful when a gradient through it can reach an attached tensor's callback.
    useful = bw.useful
    for n in order:
        if type(n) is _AttachNode and n.callback is not None:
            useful.add(n)
            continue
        for s in n.in_slots:
            if s is not None and s[1] in useful:
                useful.add(n)
                break
    grads = bw.grads
    for n in reversed(order):
        g = grads.pop(n, None)
        if g is not None:
            if n in useful:
                bw.step(n, g)
            for x in g:
                if x is not None:
                    bw.release(x)
        n.clear()  # free what the tape held as soon as the node is done


class _Pass:
    """The state of one backward pass: the gradients reaching each node's outputs so far.

    Gradients are never changed in place, but a callback's receiver may change what it gets
    (``tensor.grad += g`` is an in-place update).  A rule may return one tensor object for two
    inputs, or pass an output's gradient on unchanged, so ``held`` counts where each gradient
    object sits; one that sits elsewhere too reaches a callback as a fresh tensor object
    (an ``Identity``, which shares the storage).
    """

    __slots__ = ("grads", "held", "useful", "below")

    def __init__(self, below):
        self.grads = {}    # node -> list of output gradients (None: none reached that output)
        self.held = {}     # id(gradient tensor) -> how many places hold it
        self.useful = set()
        self.below = below  # the layers under the key's: where the pass's own ops go

    def hold(self, g):
        held = self.held
        held[id(g)] = held.get(id(g), 0) + 1

    def release(self, g):
        held = self.held
        n = held.get(id(g), 0) - 1
        if n > 0:
            held[id(g)] = n
        else:
            held.pop(id(g), None)

    def accumulate(self, node, index, g):
        acc = self.grads.get(node)
        if acc is None:
            self.grads[node] = acc = [None] * node.nout
        old = acc[index]
        if old is not None:
            self.release(old)
            g = self.below(_ADD, (old, g))[0]
        acc[index] = g
        self.hold(g)

    def step(self, n, out_grads):
        in_slots = n.in_slots
        useful = self.useful
        needs = tuple(s is not None and s[1] in useful for s in in_slots)
        cls = type(n)
        if cls is _AttachNode:
            g = out_grads[0]
            if g is None:
                return
            if n.callback is not None:
                given = g
                if self.held.get(id(g), 0) > 1:
                    given = self.below(_IDENTITY, (g,))[0]
                self.hold(given)  # the receiver's now: it may update it in place
                if _hook is not None:
                    t = n.target()
                    if t is not None:
                        _hook.gave_grad(t, given)
                n.callback(given)
            if in_slots and needs[0]:
                self.accumulate(in_slots[0][1], in_slots[0][2], g)
            return
        if cls is _Node:
            op = n.op
            rule = BACKWARD.get(type(op))
            if rule is None:
                if not any(needs):
                    return
                raise RuntimeError(
                    f"no backward rule for {op.name}: cannot compute the gradient through it "
                    f"(register one with mge.core.def_backward({type(op).__name__}))"
                )
            inputs = n.inputs
            outputs = n.outputs
            outputs = (outputs(),) if type(outputs) is _ref else outputs
            if _retired:
                inputs = tuple(_value_at(x, n.epoch) for x in inputs)
                outputs = tuple(None if y is None else _value_at(y, n.epoch) for y in outputs)
            try:
                with gradutil.below(self.below):
                    result = rule(op, inputs, outputs, tuple(out_grads), needs)
            except Exception as e:
                if hasattr(e, "add_note"):
                    e.add_note(f"(in the backward rule of {op.name})")
                raise
            shapes = [x._info.shape for x in inputs]
        else:
            if _hook is not None:
                _hook.ran_custom()
            result = n.rule(*out_grads)
            if result is None or isinstance(result, Tensor):
                result = (result,)
            shapes = n.shapes
        if len(result) != len(in_slots):
            raise ValueError(f"the backward of {n.name()} returned {len(result)} gradients for "
                             f"{len(in_slots)} inputs")
        for i, g in enumerate(result):
            if g is None or not needs[i]:
                continue
            if not isinstance(g, Tensor):
                raise TypeError(f"the backward of {n.name()} returned a {type(g).__name__} as "
                                f"the gradient of input {i}; expected a Tensor or None")
            shape = g._info.shape
            if shape is not None and shapes[i] is not None and tuple(shape) != tuple(shapes[i]):
                raise ValueError(f"the backward of {n.name()} returned a gradient of shape "
                                 f"{tuple(shape)} for input {i} of shape {tuple(shapes[i])}")
            s = in_slots[i]
            self.accumulate(s[1], s[2], g)


# -- custom gradients and queries --------------------------------------------------------------

class _Snapshot:
    """A tensor's grad state at one moment (what ``set_grad`` needs of an input)."""

    __slots__ = ("_gslot", "_info")

    def __init__(self, tensor):
        self._gslot = getattr(tensor, "_gslot", None)
        self._info = tensor._info


def snapshot(tensor):
    """An object that stands for ``tensor`` as it is now, as an input of :func:`set_grad`.

    ``Function`` takes snapshots of its inputs before ``forward`` runs, so that a ``forward``
    which updates an input in place still sends the gradient to the input's original value.
    """
    return _Snapshot(tensor)


def set_grad(backward_fn, inputs, outputs):
    """Make ``backward_fn`` the backward of ``outputs`` with respect to ``inputs``.

    For every recording key that tracks one of ``inputs``, the ``outputs`` become the outputs of
    a custom node: at backward, ``backward_fn(*output_grads)`` (``None`` for an output no gradient
    reached) returns one gradient (or ``None``) per input.  Returns ``outputs`` (a list).
    """
    outputs = list(outputs)
    for y in outputs:
        if not isinstance(y, Tensor):
            raise TypeError(f"set_grad: outputs must be Tensors, got {type(y).__name__}")
    for key in reversed(_entered):
        if key._paused:
            continue
        in_slots = [_slot_of(x, key) for x in inputs]
        if not any(s is not None for s in in_slots):
            continue
        node = _CustomNode(None, None, None, in_slots)
        node.rule = backward_fn
        node.shapes = [x._info.shape for x in inputs]
        node.n = len(outputs)
        key._tape.append(_ref(node))
        for i, y in enumerate(outputs):
            if _is_float(y):
                _set_slot(y, key, node, i)
    return outputs


def get_grad_key(tensors):
    """The newest recording key that tracks one of ``tensors``, or ``None``."""
    for key in reversed(_entered):
        if key._paused:
            continue
        for x in tensors:
            if _slot_of(x, key) is not None:
                return key
    return None


def is_grad_attached(tensors):
    """Whether a recording key tracks one of ``tensors``."""
    return get_grad_key(tensors) is not None


# -- in-place updates --------------------------------------------------------------------------

def _assign(key, op, inputs, next):
    """``Assign(target, value)`` under a key's layer: the key's slot moves with the value, and the
    old value is kept for the ops recorded on it (see the module docstring)."""
    global _epoch
    target, value = inputs
    if key is None:
        return next(op, inputs)
    theirs = _slot_of(value, key)
    mine = _slot_of(target, key)
    outputs = next(op, inputs)
    old = outputs[0]  # holds the target's old value now
    hist = _retired.get(id(target))
    if hist is None:
        _retired[id(target)] = hist = [target]
    if hist[-1] is target or hist[-1][1] is not old:  # once per update (each key's layer sees it)
        _epoch += 1
        hist.append((_epoch, old))
    _set_slot(target, key, None if theirs is None else theirs[1], 0 if theirs is None else theirs[2])
    _set_slot(old, key, None if mine is None else mine[1], 0 if mine is None else mine[2])
    return outputs


# The plugin's face: mge.core.get_plugin("grad").<name>
GradTransformation.GradKey = GradKey
GradTransformation.backward = staticmethod(backward)
GradTransformation.get_backward_closure = staticmethod(get_backward_closure)
GradTransformation.set_grad = staticmethod(set_grad)
GradTransformation.get_grad_key = staticmethod(get_grad_key)
GradTransformation.is_grad_attached = staticmethod(is_grad_attached)
GradTransformation.snapshot = staticmethod(snapshot)
GradTransformation.set_backward_hook = staticmethod(set_backward_hook)
