"""The pass machinery: a registry of passes, a context that can disable some, and the two
ways of walking a graph (:class:`ForwardPass` visits producers before users,
:class:`BackwardPass` users before producers)."""
from collections import OrderedDict

from ...logger import get_logger
from .utils import register_obj

__all__ = ["PassContext", "BasePass", "ForwardPass", "BackwardPass", "register_pass",
           "get_registered_pass", "get_default_pass_context"]

logger = get_logger(__name__)


class PassContext:
    """Options shared by the passes of one optimization: which passes are disabled and a
    free-form ``pass_config``."""

    def __init__(self, disabled_pass=None, pass_config=None):
        self._disabled_pass = set()
        self._config = pass_config
        if disabled_pass:
            self.add_diabled_pass(disabled_pass)

    def add_diabled_pass(self, passes):
        """Disable the pass named ``passes`` (or each of several names).  (MegEngine's
        spelling.)"""
        for p in ([passes] if isinstance(passes, str) else passes):
            self._disabled_pass.add(p)

    add_disabled_pass = add_diabled_pass

    def pass_enabled(self, pas):
        """Whether the pass (a :class:`BasePass` or its name) may run."""
        return (pas.name if isinstance(pas, BasePass) else pas) not in self._disabled_pass


_default_context = PassContext()


def get_default_pass_context():
    """The context :func:`~mge.traced_module.optimize` uses."""
    return _default_context


_pass_dict = OrderedDict()

def register_pass(names):
    """``@register_pass("Name")`` enters a pass class in the registry under ``Name`` (a list of
    names registers it under each); :func:`get_registered_pass` and ``optimize`` find it."""
    return register_obj(names, _pass_dict)


def get_registered_pass(pass_name):
    """The pass class registered under ``pass_name``."""
    pas = _pass_dict.get(pass_name)
    assert pas is not None, \
        f"{pass_name} is not found, please call `register_pass` to register it"
    return pas


class BasePass:
    """A graph pass.  Calling it on a TracedModule first runs each of ``required_pass``, then
    walks the graph calling :meth:`run_transform` on expressions (``run_once = False``: again
    while something changed, at most 100 times).  It changes the module in place and
    returns it."""

    run_once = True
    required_pass = []
    name = ""

    def __call__(self, mod, pass_ctx=None):
        pass_ctx = get_default_pass_context() if pass_ctx is None else pass_ctx
        assert isinstance(pass_ctx, PassContext)
        return self.apply_optimization(mod, pass_ctx)

    def apply_optimization(self, mod, pass_ctx):
        """Run the required passes and then this one on ``mod``'s graph."""
        for pass_name in list(self.required_pass) + [self.name]:
            if not pass_ctx.pass_enabled(pass_name):
                logger.warning(f"Since {pass_name} is disabled, {self.name} will skipped")
                return mod
        for pass_name in self.required_pass:
            mod = get_registered_pass(pass_name)()(mod, pass_ctx)
        changed = self.visit_graph(mod.graph)
        n = 1
        while not self.run_once and changed:
            changed = self.visit_graph(mod.graph)
            n += 1
            if n == 100:
                break
        assert n < 100, f"{self.name} was run 100 times, please check for pass conflict."
        return mod

    def visit_graph(self, graph):
        """Walk ``graph`` once; returns whether it changed."""
        raise NotImplementedError

    def before_visit_graph(self, graph):
        """Called before each walk of a graph."""

    def run_transform(self, expr):
        """Rewrite around ``expr``; return the expression to look at next (``expr`` itself
        when nothing changed)."""
        return expr

    def __repr__(self):
        return self.name


def _sub_graph(expr):
    return getattr(expr, "graph", None)


class ForwardPass(BasePass):
    """A pass that transforms an expression after all producers of its inputs."""

    def visit_graph(self, graph):
        """Transform producers before users (sub-graphs of called TracedModules too)."""
        self.before_visit_graph(graph)
        changed = False
        # (expr, children expanded) entries; an expr is transformed once its inputs' are
        stack = [[n.expr, False] for n in graph.outputs]
        done, done_graphs = set(), set()
        while stack:
            top = stack[-1]
            expr = top[0]
            if expr in done:
                stack.pop()
                continue
            if not top[1]:
                top[1] = True
                for i in expr.inputs:
                    e = i.expr
                    if e not in done and all(e is not s[0] for s in stack):
                        stack.append([e, False])
                continue
            if expr not in graph._exprs:
                stack.pop()
                continue
            new = self.run_transform(expr)
            if new is not expr:
                changed = True
                assert new not in done
                stack.append([new, False])
                continue
            sub = _sub_graph(expr)
            if sub is not None and sub not in done_graphs:
                changed |= self.visit_graph(sub)
                done_graphs.add(sub)
            done.add(expr)
        return changed


class BackwardPass(BasePass):
    """A pass that transforms an expression before the producers of its inputs."""

    def visit_graph(self, graph):
        """Transform users before producers (sub-graphs of called TracedModules too)."""
        self.before_visit_graph(graph)
        changed = False
        queue = [n.expr for n in graph.outputs]
        done, done_graphs = set(), set()
        while queue:
            expr = queue.pop()
            if expr is None or expr in done:
                continue
            if expr in graph._exprs:
                new = self.run_transform(expr)
                if new is not expr:
                    changed = True
                    queue.append(new)
                    continue
                if expr not in graph._exprs:
                    # the transform removed it (an identity fold): what fed it is visited next
                    changed = True
                else:
                    sub = _sub_graph(expr)
                    if sub is not None and sub not in done_graphs:
                        changed |= self.visit_graph(sub)
                        done_graphs.add(sub)
            done.add(expr)
            for i in expr.inputs:
                if i.expr is not None and i.expr not in done:
                    queue.append(i.expr)
        return changed
