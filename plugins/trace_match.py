"""The replay's per-op path (compiled): matching ops against a recording, making placeholders.

A hot module (see ``mge._core._accel``); ``mge_plugins.trace`` is the plugin around it.  ``Match``
holds one replaying call's state: the next recorded op (``pos``), each var's handle in this call
(``vi``), the placeholders handed out (``holders``).  A placeholder's handle is *virtual*:
``deleted`` is set (dropping the tensor frees nothing) and ``producer`` holds its var (a virtual
handle never reaches the channel, whose field that is).  ``top`` answers a whole top-level call; ``apply`` is the trace segment's layer, one op at
a time.  What is not the common case -- a divergence, a rebound capture -- goes back to the
Python side (``owner``), which raises ``TraceError`` with the details.

A replay makes two objects per op (the placeholder and its virtual handle) and holds them until
the call ends, and CPython's collector counts each: a chain of a thousand ops ran a young
collection every few hundred ops, whose survivors went on to the older generations and their full
collections -- a quarter of the replay's time.  The compiled Match therefore keeps them out of
the collector (``_untrack``) while the call runs: they hold nothing that could close a cycle but
the user's own references, and every one still held when the call's placeholders are taken
(``take_alive``, or the Match going) goes back in (``_retrack``).
"""
import sys

import cython

import mge
from mge._core import _accel

_accel.guard(__name__)
if cython.compiled:
    from cython.cimports.mge._core.channel.handles_c import TensorInfo
    from cython.cimports.mge._core.device.cpu.handoff_c import Handoff
    from cython.cimports.mge._core.cpython_gc import (PyObject_GC_IsTracked, PyObject_GC_Track,
                                                      PyObject_GC_UnTrack)
    from cython.cimports.mge._core.cpython_new import get_slot, new_instance, set_slot, slot_offset
    from cython.cimports.mge._core.dispatch_c import TopHook
else:
    TensorInfo = _accel.load("mge._core.channel.handles").TensorInfo
    Handoff = _accel.load("mge._core.device.cpu.handoff").Handoff
    TopHook = _accel.load("mge._core.dispatch").TopHook

__all__ = ["Match"]

_refcount = sys.getrefcount


def _sole_refs():
    # getrefcount of an object held only by a list, read the way take_alive reads it
    holders = [object()]
    for t in holders:
        return _refcount(t)


_SOLE = _sole_refs()

_Tensor = mge.Tensor
_Parameter = mge.Parameter
_new = _Tensor.__new__  # (looked up once: a placeholder per op)
# compiled: a Tensor's handle is read and written at its slot's offset (cpython_new.pxd), for
# the classes whose layout is Tensor's own (a subclass of the user's goes through getattr)
_INFO = cython.declare(cython.Py_ssize_t, slot_offset(_Tensor.__dict__["_info"])
                       if cython.compiled else -1)
_dispatch = _accel.load("mge._core.dispatch")
_apply_tuple = _dispatch.apply_tuple
_get_channel = _accel.load("mge._core.channel.channel").get_channel


@cython.cfunc
@cython.inline
def _untrack(obj: object) -> cython.void:
    if cython.compiled:
        PyObject_GC_UnTrack(obj)


@cython.cfunc
@cython.inline
def _retrack(obj: object) -> cython.void:
    if cython.compiled:
        if not PyObject_GC_IsTracked(obj):
            PyObject_GC_Track(obj)


@cython.cfunc
@cython.inline
def _new_tensor():
    # a new Tensor without a handle yet (``Tensor.__new__(Tensor)``)
    if cython.compiled:
        return new_instance(_Tensor)
    return _new(_Tensor)


@cython.cfunc
@cython.inline
def _set_info(t, info) -> cython.void:
    if cython.compiled:
        if type(t) is _Tensor or type(t) is _Parameter:
            set_slot(t, _INFO, info)
            return
    t._info = info


@cython.cfunc
@cython.inline
def _info_of(x) -> TensorInfo:
    # x's handle (x is a Tensor); AttributeError when it has none
    if cython.compiled:
        if type(x) is _Tensor or type(x) is _Parameter:
            p = get_slot(x, _INFO)
            if p != cython.NULL:
                return cython.cast(TensorInfo, cython.cast(object, p))
    return x._info


@cython.cclass
class Match(TopHook):
    """One replaying call's matching state (see the module docstring); a ``TopHook``: a
    compiled ``apply`` calls its ``top`` as a C method."""

    owner = cython.declare(object, visibility="public")    # the Replayer (slow paths)
    ops = cython.declare(list, visibility="public")        # the recording's ops
    descs = cython.declare(list, visibility="public")
    calls = cython.declare(list, visibility="public")      # first op -> a whole call, or None
    vi = cython.declare(list, visibility="public")
    var_of = cython.declare(dict, visibility="public")     # id(launched handle) -> (var, it)
    holders = cython.declare(list, visibility="public")
    temps = cython.declare(list, visibility="public")
    pos = cython.declare(cython.Py_ssize_t, visibility="public")
    assign = cython.declare(object, visibility="public")   # the Assign op class
    purity = cython.declare(object, visibility="public")   # has .check(): stack above is pure
    amp = cython.declare(object, visibility="public")      # dtype_promote's AMP state, or None
    stack = cython.declare(object)
    handoff = cython.declare(Handoff)                      # the channel's worker's GIL hand-off
    version = cython.declare(object)                       # the stack version purity was for
    pure = cython.declare(cython.int)                      # purity.check(): 0, 1, 2 (grad keys)
    grads = cython.declare(tuple)                          # then: their layers, bottom to top

    def __init__(self, owner, rec, assign, purity, amp):
        self.owner = owner
        self.ops = rec.ops
        self.descs = rec.descs
        self.calls = rec.call_list()
        self.vi = [None] * len(rec.descs)
        self.var_of = {}
        self.holders = []
        self.temps = []
        self.pos = 0
        self.assign = assign
        self.purity = purity
        self.amp = amp
        self.stack = _dispatch.stack
        self.handoff = _get_channel().handoff
        self.version = None
        self.pure = 0
        self.grads = ()

    @cython.cfunc
    def _virtual(self, v: cython.Py_ssize_t, tensor) -> TensorInfo:
        # a placeholder's handle for var v: virtual (``deleted``), so dropping it frees nothing
        d = cython.cast(tuple, self.descs[v])
        info: TensorInfo = TensorInfo.__new__(TensorInfo) if cython.compiled else TensorInfo(*d)
        info.shape = d[0]
        info.dtype = d[1]
        info.device = d[2]
        info.deleted = True
        info.producer = v
        _untrack(info)
        _set_info(tensor, info)
        self.holders.append(tensor)
        return info

    @cython.cfunc
    def _placeholders(self, outs: tuple) -> tuple:
        # one new placeholder per output var, each var's handle in this call.  A replay issues
        # no channel op per op; like one, it lets a worker that is running an earlier program
        # (and needs the GIL between its matrix products) go on first (handoff.py).
        self.handoff.yield_to_worker()
        v: cython.Py_ssize_t
        if len(outs) == 1:  # (most ops: no list)
            t = _new_tensor()
            _untrack(t)
            v = outs[0]
            self.vi[v] = self._virtual(v, t)
            return (t,)
        result = []
        j: cython.Py_ssize_t
        for j in range(len(outs)):
            t = _new_tensor()
            _untrack(t)
            v = outs[j]
            self.vi[v] = self._virtual(v, t)
            result.append(t)
        return tuple(result)

    def placeholder(self, v):
        """A new placeholder of var ``v`` (a value the replay hands out itself: a gradient)."""
        t = _new_tensor()
        _untrack(t)
        self.vi[v] = self._virtual(v, t)
        return t

    @cython.cfunc
    def _holds(self, x, v) -> cython.bint:
        info: TensorInfo = _info_of(x)
        if info is self.vi[v]:
            return True
        if info.deleted and info.producer is not None:
            return info.producer == v  # a placeholder of this call
        known = self.var_of.get(id(info))
        return known is not None and cython.cast(tuple, known)[1] is info and \
            cython.cast(tuple, known)[0] == v

    def take_alive(self):
        """The placeholders someone else still holds, once each, with their virtual handle and
        var; the list of placeholders is emptied (the others go)."""
        alive = []
        seen = set()
        holders = self.holders
        self.holders = []
        t: object
        for t in holders:
            # references: the list, the loop variable and this call's argument to getrefcount
            if _refcount(t) > _SOLE and id(t) not in seen:
                seen.add(id(t))
                _retrack(t)
                info: TensorInfo = t._info
                if info.deleted and info.producer is not None:
                    _retrack(info)  # (it may take an error, and its traceback, later)
                    alive.append((t, info, info.producer))
        return alive

    def __dealloc__(self):
        # (a call that ended without taking its placeholders, by an error: those still held go
        # back to the collector)
        t: object
        if self.holders is not None:
            for t in self.holders:
                if _refcount(t) > _SOLE:
                    _retrack(t)
                    _retrack(t._info)

    @cython.ccall
    def top(self, op, inputs: tuple):
        """A top-level ``apply``: answered whole when it is the recorded call at this point."""
        pos: cython.Py_ssize_t = self.pos
        c = self.calls[pos] if pos < len(self.calls) else None
        if c is None:
            return _apply_tuple(op, inputs)
        call = cython.cast(tuple, c)
        if call[0] is not op:
            return _apply_tuple(op, inputs)
        version = self.stack.version
        if version != self.version:  # (the stack changed: is it still pure above us?)
            self.version = version
            self.pure = self.purity.check()
            self.grads = self.purity.grads
        if self.pure == 0:
            return _apply_tuple(op, inputs)
        specs: tuple = call[1]
        n: cython.Py_ssize_t = len(specs)
        if len(inputs) != n:
            return _apply_tuple(op, inputs)
        if self.amp is not None and self.amp.autocast != call[4]:
            return _apply_tuple(op, inputs)
        if self.pure == 2 and not self._grads_see_it(op, specs, call):
            return _apply_tuple(op, inputs)
        is_assign: cython.bint = type(op) is self.assign
        if is_assign and (self.pure != 1 or call[2] != self.pos + 1):
            return _apply_tuple(op, inputs)  # (grad keys move slots with the value: their way)
        j: cython.Py_ssize_t
        for j in range(n):
            spec = specs[j]
            x = inputs[j]
            if type(spec) is int:
                if not isinstance(x, _Tensor) or not self._holds(x, spec):
                    return _apply_tuple(op, inputs)  # the stack's way decides
            elif type(x) is not cython.cast(tuple, spec)[0] or x != cython.cast(tuple, spec)[1]:
                return _apply_tuple(op, inputs)
        if is_assign:
            ins: tuple = cython.cast(tuple, self.ops[self.pos])[1]
            self.pos += 1
            return self._assign(inputs[0], ins)
        self.pos = call[2]
        outputs = self._placeholders(call[3])
        if self.pure == 2:
            for g in self.grads:  # (bottom to top, as the outputs would pass their layers)
                g.replayed(op, inputs, outputs)
        return outputs

    @cython.cfunc
    def _grads_see_it(self, op, specs: tuple, call: tuple) -> cython.bint:
        # With grad keys recording, a call is answered whole only when their layers would have
        # seen it as it is: one recorded op, this op on these tensors (no cast or reshape that
        # dtype promotion or dim expansion added), so that they can record it from here.
        k: cython.Py_ssize_t = self.pos
        if call[2] != k + 1:
            return False
        rec_op: tuple = self.ops[k]
        if rec_op[0] is not op or type(op) is self.assign:
            return False
        j: cython.Py_ssize_t
        for j in range(len(specs)):
            if type(specs[j]) is not int:
                return False
        return rec_op[1] == specs

    def apply(self, op, inputs, next):
        """The trace segment's layer: op ``pos`` of the recording, checked and answered."""
        k: cython.Py_ssize_t = self.pos
        if k >= len(self.ops):
            return self.owner.too_many(op)
        rec_op: tuple = self.ops[k]
        rop = rec_op[0]
        ins: tuple = rec_op[1]
        if op is not rop and op != rop:
            self.owner.other_op(k, op, inputs)  # raises, or takes the op's new parameters
        if len(inputs) != len(ins):
            self.owner.other_arity(k, inputs)
        j: cython.Py_ssize_t
        for j in range(len(ins)):
            if not self._holds(inputs[j], ins[j]):
                self.owner.rebind(k, j, inputs[j])
        self.pos = k + 1
        if type(op) is self.assign:
            return self._assign(inputs[0], ins)
        return self._placeholders(rec_op[2])

    @cython.cfunc
    def _assign(self, target, ins: tuple) -> tuple:
        # An in-place update: the target takes a placeholder of the value's var; the old value,
        # which the programs may still read, is this call's to free once they have run.
        old: TensorInfo = target._info
        if not old.deleted:
            self.temps.append(old)
        self._virtual(ins[1], target)
        t = _new_tensor()
        self._virtual(ins[0], t)
        return (t,)
