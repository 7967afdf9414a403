"""Expression patterns: ``is_op(target)`` matches a call of a module class, a function, a
Tensor method (by name) or an OpDef class; calling a pattern with argument patterns
(``is_op(F.conv2d)(is_var(), is_const())``) matches the inputs too; ``a | b`` matches either.
Arithmetic on patterns builds Tensor-method patterns (``is_var() * is_const()``); a
non-pattern operand (``is_var() * "*"``) matches an argument that is no node."""
from ..._core.ops.base import OpDef as _BaseOpDef
from ...core.ops.builtin import OpDef
from ...logger import get_logger
from ...module import Module

__all__ = ["ExprPattern", "CallPattern", "OrPattern", "ModulePattern", "FunctionPattern",
           "TensorMethodPattern", "ApplyDefPattern", "VarPattern", "ConstantPattern",
           "AnyPattern", "is_op", "is_const", "is_var", "any_node"]

logger = get_logger(__name__)


class ExprPattern:
    """Base of the patterns.  ``check_users(True)`` (the default) also requires that every
    user of the matched expression's output is matched by the pattern (used inside a larger
    pattern: the expression may then be rewritten away)."""

    def __init__(self):
        self._check_users = True
        self._users = []

    def __call__(self, *args):
        if len(args) == 1 and args[0] is None:
            args = ()
        return CallPattern(self, *args)

    def __or__(self, other):
        assert isinstance(other, ExprPattern), f"cannot or a pattern with {type(other)}"
        return OrPattern(self, other)

    def __getitem__(self, index):
        return is_op("__getitem__")(self, index)

    def check_users(self, check=True):
        """Whether the matched expression's users must all be part of the match."""
        self._check_users = check
        return self

    def _add_users(self, pattern):
        self._users.append(pattern)

    def _clear_users(self):
        self._users.clear()

    def has_attr(self, **attrs):
        """Only module patterns check attributes."""
        logger.warning("has_attr only support ModulePattern")
        return self

    def has_param(self, **params):
        """Only function patterns check parameters."""
        logger.warning("has_param only support FunctionPattern")
        return self

    def __repr__(self):
        return type(self).__name__


def _binary(method):
    def op(self, other):
        return is_op(method)(self, other)
    op.__name__ = method
    return op


for _m in ("__add__", "__iadd__", "__radd__", "__sub__", "__isub__", "__rsub__", "__mul__",
           "__imul__", "__rmul__", "__truediv__", "__itruediv__", "__rtruediv__"):
    setattr(ExprPattern, _m, _binary(_m))


class CallPattern(ExprPattern):
    """``op`` applied to arguments matching ``args`` (non-pattern arguments are dropped: they
    stand for constants that are no input node)."""

    def __init__(self, op, *args):
        super().__init__()
        self.op = op
        self.args = [a for a in args if isinstance(a, ExprPattern)]
        self._match_all_args = True

    def not_all_args(self):
        """Match when the expression has at least (not exactly) ``len(args)`` inputs."""
        self._match_all_args = False
        return self

    def check_users(self, check=True):
        """Set the users check on this pattern and its op."""
        self._check_users = check
        self.op.check_users(check)
        return self

    def _add_users(self, pattern):
        self._users.append(pattern)
        self.op._add_users(pattern)

    def _clear_users(self):
        self._users.clear()
        self.op._clear_users()

    def __repr__(self):
        return f"{self.op}({','.join(map(str, self.args))})"


class OrPattern(ExprPattern):
    """``left`` or else ``right``."""

    def __init__(self, left, right):
        super().__init__()
        self.left, self.right = left, right

    def check_users(self, check=True):
        """Set the users check on both alternatives."""
        self._check_users = check
        self.left.check_users(check)
        self.right.check_users(check)
        return self

    def _clear_users(self):
        self._users.clear()
        self.left._clear_users()
        self.right._clear_users()

    def __repr__(self):
        return f"({self.left}|{self.right})"


class ModulePattern(ExprPattern):
    """A call of a module of class ``target`` (subclasses too) whose attributes equal those
    given to :meth:`has_attr`."""

    def __init__(self, module_cls):
        super().__init__()
        self.target = module_cls
        self.attrs = {}

    def has_attr(self, **attrs):
        """Require these attribute values of the called module."""
        self.attrs.update(attrs)
        return self

    def __repr__(self):
        return self.target.__name__


class FunctionPattern(ExprPattern):
    """A call of the function ``target`` whose named arguments equal those given to
    :meth:`has_params`."""

    def __init__(self, func):
        super().__init__()
        self.target = func
        self.params = {}

    def has_params(self, **params):
        """Require these argument values."""
        self.params.update(params)
        return self

    has_param = has_params

    def __repr__(self):
        return getattr(self.target, "__name__", repr(self.target))


class TensorMethodPattern(ExprPattern):
    """A call of the Tensor method named ``target``."""

    def __init__(self, method):
        super().__init__()
        self.target = method

    def __repr__(self):
        return self.target


class ApplyDefPattern(ExprPattern):
    """An ``Apply`` of an op of OpDef class ``target``."""

    def __init__(self, opdef):
        super().__init__()
        self.target = opdef

    def __repr__(self):
        return self.target.__name__


class VarPattern(ExprPattern):
    """Any expression that is not a Constant."""

    def __repr__(self):
        return "var"


class ConstantPattern(ExprPattern):
    """A Constant expression."""

    def __repr__(self):
        return "const"


class AnyPattern(ExprPattern):
    """Any expression."""

    def __repr__(self):
        return "any"


def is_op(target):
    """The pattern of a call of ``target``: a Module class, an OpDef class, a function, or a
    Tensor method name."""
    if isinstance(target, type):
        if issubclass(target, Module):
            return ModulePattern(target)
        if issubclass(target, (OpDef, _BaseOpDef)):
            return ApplyDefPattern(target)
    if isinstance(target, str):
        return TensorMethodPattern(target)
    if callable(target):
        return FunctionPattern(target)
    raise ValueError(f"is_op: cannot make a pattern of {target!r} (a Module or OpDef class, "
                     "a function or a Tensor method name)")


def is_const():
    """A Constant expression (its users are not checked)."""
    return ConstantPattern().check_users(False)


def any_node():
    """Any expression."""
    return AnyPattern()


def is_var():
    """Any non-Constant expression."""
    return VarPattern()
