"""Arithmetic simplification of compiled programs: MegBrain's in-place arithmetic optimizations.

MegEngine's graphs rewrite some elementwise expressions when they are built, at every
``graph_opt_level`` above 0 (``trace(opt_level=...)``, 2 by default): a few identities and the
numerically stable forms of ``log`` of ``exp``.  mge's compiled programs (``compile_program``)
apply the same rewrites at ``opt_level >= 1``, so a traced function gives MegEngine's results --
``y / y`` is 1 even where ``y`` is 0 or infinite, and ``log(exp(x) + exp(y))`` does not overflow
for large ``x``.  At ``opt_level=0`` the program computes what the Python computed, op by op.

The rewrites (each only where the result keeps the shape and dtype the recording has for it):

* ``a - a -> 0``, ``a / a -> 1``, ``a // a -> 1`` (``a`` the same value, after common
  subexpressions are merged: ``2 * x`` computed twice is one value);
* ``log(exp(a)) -> a``; ``log(exp(a) + exp(b)) -> logaddexp(a, b)``;
* with a constant known when the program is compiled (a folded constant, or a tensor captured
  with ``capture_as_const=True``): ``a + 0 -> a``, ``a * 1 -> a``, ``a * 0 -> 0``,
  ``a ** 0 -> 1``, ``a ** 1 -> a``, ``log(1 + a) -> log1p(a)``, ``exp(a) - 1 -> expm1(a)``,
  ``a // 1 -> floor(a)`` (integers: ``a``).

Dropping an op this way is safe in a replay: the recording keeps every op for the checks, only
the program computes less.
"""
import numpy as np

from .._core.ops.creation import Fill
from .._core.ops.elemwise import Elemwise

__all__ = ["simplify", "renamed"]


def simplify(ops, keep, descs, known, alias):
    """Rewrite the kept ops ``ops[k]`` (``(op, ins, outs)``; ``keep`` in order) in place.

    ``known``: var -> numpy value of the vars whose values are known now; ``alias``: var ->
    var, extended with the outputs of dropped ops (and read to rename inputs).  Returns the
    ops still kept."""
    producer = {}
    kept = []
    for k in keep:
        op, ins, outs = renamed(ops, k, alias)
        new = _rewrite(op, ins, outs, descs, known, producer, ops) if type(op) is Elemwise else None
        if new is not None:
            if type(new) is int:  # the output is an existing value
                alias[outs[0]] = new
                continue
            ops[k] = new
        for v in ops[k][2]:
            producer[v] = k
        kept.append(k)
    return kept


def renamed(ops, k, alias):
    """``ops[k]`` with its inputs renamed by ``alias`` (var -> var), stored back; returns it."""
    if alias:
        op, ins, outs = ops[k]
        ops[k] = (op, tuple([alias.get(v, v) for v in ins]), outs)
    return ops[k]


def _rewrite(op, ins, outs, descs, known, producer, ops):
    # None: as it is; a var: the output is that value; a tuple: the op to run instead
    if len(outs) != 1:
        return None
    out = outs[0]
    shape, dtype, device = descs[out]
    if shape is None:
        return None
    mode = op.mode

    def same(v):  # the output may be value v as it is
        return descs[v][0] == shape and descs[v][1] == dtype

    def fill(value):
        return (Fill(tuple(shape), value, dtype, device), (), outs)

    def elemwise(new_mode, args):
        return (Elemwise(new_mode), tuple(args), outs)

    def made_by(v, m):  # the inputs of the elementwise op ``m`` that produced v, or None
        k = producer.get(v)
        if k is None:
            return None
        p, p_ins, _ = ops[k]
        return p_ins if type(p) is Elemwise and p.mode == m else None

    def const(v, value):
        x = known.get(v)
        return x is not None and x.size == 1 and float(x.reshape(())) == value

    if len(ins) == 2:
        a, b = ins
        if mode == "sub" and a == b:
            return fill(0)
        if mode in ("true_div", "floor_div") and a == b:
            return fill(1)
        if mode == "add":
            for x, c in ((a, b), (b, a)):
                if const(c, 0) and same(x):
                    return x
        if mode == "mul":
            for x, c in ((a, b), (b, a)):
                if const(c, 1) and same(x):
                    return x
                if const(c, 0) and dtype.kind in "biuf":
                    return fill(0)
        if mode == "pow" and const(b, 0):
            return fill(1)
        if mode == "pow" and const(b, 1) and same(a):
            return a
        if mode == "sub" and const(b, 1):
            e = made_by(a, "exp")
            if e is not None and descs[e[0]][0] == shape:
                return elemwise("expm1", e)
        if mode == "floor_div" and const(b, 1) and descs[a][0] == shape:
            if descs[a][1].kind == "f" and descs[a][1] == dtype:
                return elemwise("floor", (a,))
            if descs[a][1].kind in "iu" and same(a):
                return a
        return None
    if mode == "log" and len(ins) == 1:
        e = made_by(ins[0], "exp")
        if e is not None and same(e[0]):
            return e[0]
        s = made_by(ins[0], "add")
        if s is not None:
            ea, eb = made_by(s[0], "exp"), made_by(s[1], "exp")
            if (ea is not None and eb is not None and descs[ea[0]][1] == dtype
                    and descs[eb[0]][1] == dtype and _broadcast(descs[ea[0]][0],
                                                                descs[eb[0]][0]) == tuple(shape)):
                return elemwise("logaddexp", (ea[0], eb[0]))
            for x, c in ((s[0], s[1]), (s[1], s[0])):
                if const(c, 1) and descs[x][0] == shape and descs[x][1] == dtype:
                    return elemwise("log1p", (x,))
    return None


def _broadcast(s1, s2):
    if s1 is None or s2 is None:
        return None
    try:
        return tuple(np.broadcast_shapes(tuple(s1), tuple(s2)))
    except ValueError:
        return None
