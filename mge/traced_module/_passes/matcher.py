"""Matching an :mod:`~mge.traced_module._passes.pattern` against an expression and the
expressions producing its inputs."""
from collections import OrderedDict

from ...logger import get_logger
from ..expr import (is_apply_def, is_call_function, is_call_module, is_call_tensor_method,
                    is_constant)
from .pattern import (AnyPattern, ApplyDefPattern, CallPattern, ConstantPattern,
                      FunctionPattern, ModulePattern, OrPattern, TensorMethodPattern,
                      VarPattern)

__all__ = ["PatternMatcher"]

logger = get_logger(__name__)


class PatternMatcher:
    """``match(pattern, expr)`` says whether ``expr`` matches; afterwards
    ``matched_exprs`` maps each matched (sub)pattern to its expression and
    ``matched_patterns`` lists them in the order they matched."""

    def __init__(self):
        self.matched_patterns = []
        self.matched_exprs = OrderedDict()

    def match(self, pattern, expr):
        """Whether ``expr`` matches ``pattern`` (the outermost pattern's users are free)."""
        self.matched_exprs.clear()
        self.matched_patterns.clear()
        pattern.check_users(False)
        ok = self.visit_pattern(pattern, expr)
        if ok and not self._users_ok():
            self._rollback(0)
            ok = False
        for p in self.matched_patterns:
            p._clear_users()
        return ok

    def _rollback(self, mark):
        while len(self.matched_patterns) > mark:
            p = self.matched_patterns.pop()
            self.matched_exprs.pop(p, None)
            p._clear_users()

    def _users_ok(self):
        for pat, expr in self.matched_exprs.items():
            if not pat._check_users:
                continue
            if len(expr.outputs) != 1:
                logger.warning("only support single output, and the matching result may be "
                               "wrong")
                continue
            users = expr.outputs[0].users
            if len(pat._users) != len(users):
                return False
            for up, ue in zip(pat._users, users):
                if self.matched_exprs.get(up) is not ue:
                    return False
        return True

    def visit_pattern(self, pattern, expr):
        """Match one (sub)pattern, recording it when it matches."""
        if pattern in self.matched_exprs:
            if self.matched_exprs[pattern] is not expr:
                return False
            if isinstance(pattern, OrPattern):
                self._visit_or(pattern, expr)
            return True
        mark = len(self.matched_patterns)
        visit = self._VISITORS.get(type(pattern))
        if visit is None:
            for klass, fn in self._VISITORS.items():
                if isinstance(pattern, klass):
                    visit = fn
                    break
        if visit is None:
            raise TypeError(f"PatternMatcher: no rule for pattern type {type(pattern).__name__}")
        ok = visit(self, pattern, expr)
        if ok:
            self.matched_patterns.append(pattern)
            self.matched_exprs[pattern] = expr
        else:
            self._rollback(mark)
        return ok

    def _visit_or(self, pattern, expr):
        for side in (pattern.left, pattern.right):
            if self.visit_pattern(side, expr):
                if pattern._users:
                    side._add_users(pattern._users[-1])
                return True
        return False

    def _visit_call(self, pattern, expr):
        mark = len(self.matched_patterns)
        if not self.visit_pattern(pattern.op, expr):
            self._rollback(mark)
            return False
        inputs = expr.inputs[1:] if isinstance(pattern.op, ModulePattern) else expr.inputs
        n = len(pattern.args)
        if (pattern._match_all_args and n != len(inputs)) or n > len(inputs):
            self._rollback(mark)
            return False
        for arg, node in zip(pattern.args, inputs):
            arg._add_users(pattern)
            if node.expr is None or not self.visit_pattern(arg, node.expr):
                arg._clear_users()
                self._rollback(mark)
                return False
        return True

    def _visit_module(self, pattern, expr):
        if not is_call_module(expr, pattern.target):
            return False
        owner = expr.inputs[0].owner
        return all(getattr(owner, k, None) == v for k, v in pattern.attrs.items())

    def _visit_function(self, pattern, expr):
        if not is_call_function(expr, pattern.target):
            return False
        if not pattern.params:
            return True
        named = expr.named_args
        return all(named.get(k) == v for k, v in pattern.params.items())

    _VISITORS = {
        OrPattern: _visit_or,
        CallPattern: _visit_call,
        ModulePattern: _visit_module,
        FunctionPattern: _visit_function,
        TensorMethodPattern: lambda self, p, e: is_call_tensor_method(e, p.target),
        ApplyDefPattern: lambda self, p, e: is_apply_def(e, p.target),
        ConstantPattern: lambda self, p, e: is_constant(e),
        VarPattern: lambda self, p, e: not is_constant(e),
        AnyPattern: lambda self, p, e: True,
    }
