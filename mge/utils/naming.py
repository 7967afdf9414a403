"""``AutoNaming`` (MegEngine's ``megengine.utils.naming``): names for the ops and tensors of a traced
function, from the scopes they ran in.

MegEngine names every op a ``jit.trace`` records after the module scopes around it
(``"fc1.matmul"``), and the tensors the user renamed.  The class keeps that state: a stack of scope
names (each pushed to the channel too, so the profiler shows them), the names users gave to
tensors (by handle), and the ops recorded under each name, so that duplicates get ``[i]``
suffixes.

``mge.module.Module.__call__`` pushes each module's scope here (its ``name``, else the attribute
name it was first given: ``"linear"``, ``"l0.1"``); a ``jit.trace`` recording notes the scope of
every op it records (``Recording.op_scopes``), and ``trace.dump`` names the ops after them
(``mge.jit.naming``).  Module scopes are not sent to the channel (the profiler): the stack is
plain Python, so a module call costs a list append and pop.
"""
from .._core.channel import get_channel

__all__ = ["AutoNaming", "tensor_name"]


def tensor_name(tensor):
    """The name a ``jit.trace`` recording gives ``tensor`` (MegEngine's ``Tensor._name``): its
    user-given ``name``; for a tensor that is an attribute of a module, that name (or the
    attribute's) after the module's dotted path -- ``"simple.k"`` for ``Parameter(name="k")``
    in module ``simple``, ``"linear.weight"`` for an unnamed weight.  ``""`` when it has none.
    """
    custom = tensor.name or ""
    short = getattr(tensor, "_short_name", None)
    if short is None:  # not an attribute of a module
        return custom
    prefix = getattr(tensor, "_prefix", None)
    own = custom or short
    return prefix + "." + own if prefix else own


class AutoNaming:
    r"""Name all executed operators automatically during tracing and record all tensors renamed
    by the user (class-level state, as in MegEngine).

    Example::

        >>> from mge.utils.naming import AutoNaming
        >>> AutoNaming.push_scope("net")
        >>> AutoNaming.push_scope("fc1")
        >>> AutoNaming.get_scope()
        'net.fc1'
        >>> AutoNaming.pop_scope(); AutoNaming.pop_scope()
        >>> AutoNaming.get_scope()
        ''
    """

    scopes = []  # (the list object stays the same: Module.__call__ holds it)
    c_ops = []
    name2ops = {}
    handle2names = {}
    __cls_attributes__ = {"scopes", "c_ops", "name2ops", "handle2names"}

    @classmethod
    def clear(cls):
        """Forget every scope, name and op."""
        for attr in cls.__cls_attributes__:
            getattr(cls, attr).clear()

    @classmethod
    def push_scope(cls, scope):
        """Enter ``scope`` (``None``: an unnamed level, not shown in names)."""
        if scope is not None:
            get_channel().push_scope(scope)
        cls.scopes.append(scope)

    @classmethod
    def pop_scope(cls):
        """Leave the innermost scope."""
        scope = cls.scopes.pop()
        if scope is not None:
            get_channel().pop_scope(scope)

    @classmethod
    def get_scope(cls):
        """The named scopes, outermost first, joined by dots."""
        return ".".join(s for s in cls.scopes if s is not None)

    @classmethod
    def gen_name(cls, x) -> str:
        """The name of ``x`` (an object with ``c_name`` or ``_name``) in the current scope."""
        scope = cls.get_scope()
        name = getattr(x, "c_name", None) or x._name
        return scope + "." + name if scope else name

    @classmethod
    def record_var_name(cls, handle, name):
        """Remember that the tensor of ``handle`` was named ``name``."""
        cls.handle2names[handle] = name

    @classmethod
    def get_var_name(cls, handle):
        """The name recorded for ``handle`` (taken out), or ``None``."""
        return cls.handle2names.pop(handle, None)

    @classmethod
    def record_opnode(cls, op):
        """Note ``op`` (an object with ``name`` and ``outputs``) under its name."""
        ops = cls.name2ops.get(op.name, [])
        if op not in ops:
            ops.append(op)
        cls.name2ops[op.name] = ops

    @classmethod
    def remove_duplicate_names(cls):
        """Give ops that share a name ``name[i]`` and their outputs the matching prefix."""
        for key, ops in cls.name2ops.items():
            if len(ops) == 1:
                continue
            for i, op in enumerate(ops):
                op.name = key + "[%s]" % str(i)
                if len(op.outputs) == 1:
                    continue
                for var in op.outputs:
                    var.name = var.name.replace(key, op.name)
        cls.name2ops.clear()
