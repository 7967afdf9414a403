"""``Module``: the base of every layer (MegEngine 1.13's ``megengine.module.Module``).

A module finds its parameters, buffers and submodules by scanning its attributes, as MegEngine
does: a :class:`~mge.Parameter` is a parameter, any other :class:`~mge.Tensor` a buffer, and a
``Module`` a submodule, also when they sit in (nested) lists, tuples and dicts.  Keys are the
dotted attribute paths (``"layers.0.weight"``, ``"blocks.conv.bias"`` for a dict entry), and the
attributes are visited in sorted order, so the order of ``parameters()`` and of ``state_dict()``
keys is MegEngine's.
"""
import logging
import warnings
from abc import ABCMeta, abstractmethod
from collections import OrderedDict

import numpy as np

from ..tensor import Parameter, Tensor
from ..utils.naming import AutoNaming
from .hooks import HookHandler

__all__ = ["Module"]

logger = logging.getLogger(__name__)


# The naming scopes (AutoNaming's stack; the same list object for good): a module call pushes
# its scope, so that a jit.trace recording names its ops after the modules around them.
_SCOPES = AutoNaming.scopes

# -- scanning attributes ---------------------------------------------------------------------------

def _expand_structure(prefix, obj):
    """``[(key, leaf)]`` for the tensors and modules in ``obj`` (a leaf, or containers of them)."""
    if isinstance(obj, (Tensor, Module)):
        return [(prefix, obj)]
    if not isinstance(obj, (list, tuple, dict)):
        return []
    if isinstance(obj, dict):
        entries = ((k, obj[k]) for k in sorted(obj))
    else:
        entries = ((str(i), v) for i, v in enumerate(obj))
    found = []
    for key, value in entries:
        inner = _expand_structure(key, value)
        if inner and not isinstance(key, str):
            # A key becomes part of a dotted state_dict key, so it must be a string.
            raise AssertionError(f"keys for Tensor and Module must be str, error key: {key}")
        found.extend((prefix + "." + k, leaf) for k, leaf in inner)
    return found


def _access_structure(obj, key, callback=None):
    """Follow the dotted ``key`` (as :func:`_expand_structure` makes them: attribute names, list
    indices, dict keys) from ``obj``; return ``callback(parent, last_key, leaf)``, or the leaf
    itself without a callback.  List and tuple steps take integer indices."""
    parent, cur, k = None, obj, None
    for k in key.split("."):
        parent = cur
        if isinstance(cur, (list, tuple)):
            k = int(k)
            cur = cur[k]
        elif isinstance(cur, dict):
            cur = cur[k]
        else:
            cur = getattr(cur, k)
    if callback is None:
        return cur
    return callback(parent, k, cur)


def _is_parameter(obj):
    return isinstance(obj, Parameter)


def _is_buffer(obj):
    return isinstance(obj, Tensor) and not isinstance(obj, Parameter)


def _is_tensor(obj):
    return isinstance(obj, Tensor)


def _is_module(obj):
    return isinstance(obj, Module)


def _deprecated(name, version):
    warnings.warn(f"Call to deprecated method {name}. -- Deprecated since version {version}.",
                  category=DeprecationWarning, stacklevel=3)


class Module(metaclass=ABCMeta):
    r"""Base class of all modules: subclass it, assign layers and tensors as attributes in
    ``__init__`` and define ``forward``.

    Args:
        name: the module's name (a non-empty string), or ``None``.

    Example:
        >>> import mge, mge.module as M, mge.functional as F
        >>> class Net(M.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.fc1 = M.Linear(4, 8)
        ...         self.fc2 = M.Linear(8, 2)
        ...     def forward(self, x):
        ...         return self.fc2(F.relu(self.fc1(x)))
        >>> net = Net()
        >>> [name for name, _ in net.named_parameters()]
        ['fc1.bias', 'fc1.weight', 'fc2.bias', 'fc2.weight']
        >>> net(mge.tensor([[1.0, 2.0, 3.0, 4.0]])).shape
        (1, 2)
    """

    # The parameters of batch, group, layer and instance norm keep extra axes inside the module
    # ((1, C, 1, 1) for batch norm) but are saved flat, and a flat array of the right size loads
    # back into them (MegEngine's rule): those classes say so.
    _saved_flat = False

    def __init__(self, name=None):
        # Attribute names holding a module or a container (MegEngine's bookkeeping; __repr__
        # lists them in assignment order).
        self._modules = []
        if name is not None and not (isinstance(name, str) and name.strip()):
            raise AssertionError("Module's name must be a non-empty string")
        self.name = name
        self.training = True
        self.quantize_disabled = False
        self._forward_pre_hooks = OrderedDict()
        self._forward_hooks = OrderedDict()
        # Dotted path from the module this one was first attached to, and the last attribute
        # name: MegEngine uses them to name traced ops; mge keeps them for the same purpose.
        self._name = None
        self._short_name = None

    @abstractmethod
    def forward(self, inputs):
        """The computation of the module; called by ``module(*inputs)`` (with hooks)."""

    # -- hooks and calling -------------------------------------------------------------------------
    def register_forward_pre_hook(self, hook):
        """Register ``hook(module, inputs)``, run before ``forward``; it may return new inputs
        (a tuple, or one value) or ``None`` to keep them.

        Returns:
            a :class:`~mge.module.hooks.HookHandler` whose ``remove()`` unregisters the hook.
        """
        return HookHandler(self._forward_pre_hooks, hook)

    def register_forward_hook(self, hook):
        """Register ``hook(module, inputs, outputs)``, run after ``forward``; it may return new
        outputs or ``None`` to keep them.

        Returns:
            a :class:`~mge.module.hooks.HookHandler` whose ``remove()`` unregisters the hook.
        """
        return HookHandler(self._forward_hooks, hook)

    def __call__(self, *inputs, **kwargs):
        # The naming scope (MegEngine's AutoNaming.push_scope): the module's name, else the
        # attribute name it was first given; None (an unnamed top module) adds nothing.  Popped
        # also when forward raises (MegEngine leaves it pushed then).
        name = self.name
        _SCOPES.append(name if name is not None else self._short_name)
        try:
            for hook in list(self._forward_pre_hooks.values()):
                modified = hook(self, inputs)
                if modified is not None:
                    inputs = modified if isinstance(modified, tuple) else (modified,)
            outputs = self.forward(*inputs, **kwargs)
            for hook in list(self._forward_hooks.values()):
                modified = hook(self, inputs, outputs)
                if modified is not None:
                    outputs = modified
        finally:
            if _SCOPES:  # (AutoNaming.clear() inside forward empties it)
                _SCOPES.pop()
        return outputs

    # -- traversal ---------------------------------------------------------------------------------
    def _flatten(self, *, recursive=True, with_key=False, with_parent=False, prefix=None,
                 predicate=lambda _: True, seen=None):
        """Yield the tensors and modules under this module that satisfy ``predicate``.

        Attributes are visited in sorted order and each object once (the first path that reaches
        it wins), so repeated calls give the same order while the modules do not change.
        """
        if seen is None:
            seen = {id(self)}
        attrs = vars(self)
        dotted = "" if prefix is None else prefix + "."
        for attr in sorted(attrs):
            for key, leaf in _expand_structure(attr, attrs[attr]):
                if id(leaf) in seen:
                    continue
                seen.add(id(leaf))
                if predicate(leaf):
                    if with_key and with_parent:
                        yield dotted + key, leaf, self
                    elif with_key:
                        yield dotted + key, leaf
                    elif with_parent:
                        yield leaf, self
                    else:
                        yield leaf
                if recursive and isinstance(leaf, Module):
                    yield from leaf._flatten(
                        recursive=True, with_key=with_key, with_parent=with_parent,
                        prefix=dotted + key if with_key else None, predicate=predicate, seen=seen)

    @staticmethod
    def _drop_requires_grad(kwargs):
        if "requires_grad" in kwargs:
            del kwargs["requires_grad"]
            logger.warning("Tensor currently has no requires_grad attribute "
                           "so requires_grad argument is ignored here")

    def parameters(self, recursive=True, **kwargs):
        """Iterate over the :class:`~mge.Parameter` s of this module (and, if ``recursive``, of
        its submodules), each once."""
        self._drop_requires_grad(kwargs)
        yield from self._flatten(with_key=False, predicate=_is_parameter, recursive=recursive,
                                 **kwargs)

    def named_parameters(self, prefix=None, recursive=True, **kwargs):
        """Iterate over ``(key, parameter)`` pairs; ``key`` is the dotted path from this module,
        after ``prefix + "."`` when a ``prefix`` is given."""
        self._drop_requires_grad(kwargs)
        yield from self._flatten(with_key=True, prefix=prefix, predicate=_is_parameter,
                                 recursive=recursive, **kwargs)

    def buffers(self, recursive=True, **kwargs):
        """Iterate over the buffers: the :class:`~mge.Tensor` attributes that are not
        parameters (batch norm's running statistics, for example)."""
        yield from self._flatten(with_key=False, predicate=_is_buffer, recursive=recursive,
                                 **kwargs)

    def named_buffers(self, prefix=None, recursive=True, **kwargs):
        """Iterate over ``(key, buffer)`` pairs (see :meth:`named_parameters`)."""
        yield from self._flatten(with_key=True, prefix=prefix, predicate=_is_buffer,
                                 recursive=recursive, **kwargs)

    def tensors(self, recursive=True, **kwargs):
        """Iterate over every tensor: parameters and buffers."""
        yield from self._flatten(with_key=False, predicate=_is_tensor, recursive=recursive,
                                 **kwargs)

    def named_tensors(self, prefix=None, recursive=True, **kwargs):
        """Iterate over ``(key, tensor)`` pairs of parameters and buffers."""
        yield from self._flatten(with_key=True, prefix=prefix, predicate=_is_tensor,
                                 recursive=recursive, **kwargs)

    def children(self, **kwargs):
        """Iterate over the direct submodules."""
        yield from self._flatten(with_key=False, predicate=_is_module, recursive=False, **kwargs)

    def named_children(self, **kwargs):
        """Iterate over ``(key, submodule)`` pairs of the direct submodules."""
        yield from self._flatten(with_key=True, predicate=_is_module, recursive=False, **kwargs)

    def modules(self, **kwargs):
        """Iterate over this module and every module under it."""
        if kwargs.get("with_parent"):
            yield self, None
        else:
            yield self
        yield from self._flatten(with_key=False, predicate=_is_module, **kwargs)

    def named_modules(self, prefix=None, **kwargs):
        """Iterate over ``(key, module)`` pairs, this module first with key ``prefix`` (``""``
        without one)."""
        own = "" if prefix is None else prefix
        if kwargs.get("with_parent"):
            yield own, self, None
        else:
            yield own, self
        yield from self._flatten(with_key=True, prefix=prefix, predicate=_is_module, **kwargs)

    def apply(self, fn):
        """Call ``fn(module)`` on this module and every module under it."""
        for module in self.modules():
            fn(module)

    # -- modes and gradients -----------------------------------------------------------------------
    def train(self, mode=True, recursive=True):
        """Set ``training`` to ``mode`` on this module and (if ``recursive``) every submodule.

        Only some modules behave differently (:class:`~mge.module.Dropout`, batch norm).
        """
        if not recursive:
            self.training = mode
            return

        def set_mode(module):
            module.train(mode, recursive=False)

        self.apply(set_mode)

    def eval(self):
        """``train(False)``: inference behaviour for every module under this one."""
        self.train(False)

    def disable_quantize(self, value=True):
        """Set ``quantize_disabled`` on every module under this one (kept for MegEngine code;
        mge has no quantization)."""
        def set_flag(module):
            module.quantize_disabled = value

        self.apply(set_flag)

    def zero_grad(self):
        """Set every parameter's ``grad`` to zeros (deprecated since MegEngine 1.0: use
        ``GradManager`` / the optimizer's ``clear_grad``)."""
        _deprecated("zero_grad", "1.0")
        from ..functional import zeros_like
        for param in self.parameters():
            if param.grad is not None:
                param.grad._reset(zeros_like(param.grad))

    def replace_param(self, params, start_pos, seen=None):
        """Replace this module's parameters, in traversal order, by ``params[start_pos + i]``
        where present (deprecated since MegEngine 1.0).  Returns the number of parameters."""
        offset = 0
        if seen is None:
            seen = {id(self)}
        attrs = vars(self)
        for key in sorted(attrs):
            value = attrs[key]
            if id(value) in seen:
                continue
            seen.add(id(value))
            if isinstance(value, Parameter):
                if start_pos + offset in params:
                    new = params[start_pos + offset]
                    if tuple(value.shape) != tuple(new.shape):
                        raise ValueError(f"replace_param: parameter {key!r} has shape "
                                         f"{tuple(value.shape)}, the replacement "
                                         f"{tuple(new.shape)}")
                    attrs[key] = new
                offset += 1
            if isinstance(value, Module):
                offset += value.replace_param(params, start_pos + offset, seen)
        return offset

    # -- state_dict --------------------------------------------------------------------------------
    def state_dict(self, rst=None, prefix="", keep_var=False):
        """An ``OrderedDict`` from dotted key to the value of every parameter and buffer.

        Values are numpy arrays (copies: changing them does not change the module), or the
        tensors themselves with ``keep_var=True``.  The parameters of normalization layers are
        saved flat (batch norm's ``(1, C, 1, 1)`` weight as ``(C,)``), as in MegEngine.
        """
        out = OrderedDict()
        for (owner, key), value in self._state_dict(rst, prefix, keep_var).items():
            if owner._saved_flat:
                value = value.reshape(-1)
            out[key] = value
        return out

    def _state_dict(self, rst=None, prefix="", keep_var=False, _keys=None):
        # Keys are (type of the owning module, dotted key): the owner decides the flat rule.
        if rst is None:
            rst = OrderedDict()
        if _keys is None:
            _keys = {k for _, k in rst}
        owner = type(self)
        for key, value in self._flatten(recursive=False, with_key=True, predicate=_is_tensor):
            if prefix + key in _keys:
                raise AssertionError(f"duplicated state: {key}")
            _keys.add(prefix + key)
            rst[(owner, prefix + key)] = value if keep_var else np.array(value.numpy())
        for key, sub in self._flatten(recursive=False, with_key=True, predicate=_is_module):
            sub._state_dict(rst, prefix + key + ".", keep_var, _keys)
        return rst

    def load_state_dict(self, state_dict, strict=True):
        r"""Load parameters and buffers from ``state_dict``.

        Args:
            state_dict: a dict from dotted key (as :meth:`state_dict` makes) to a numpy array
                (or a :class:`~mge.Tensor`), or a callable ``closure(key, tensor)`` returning the
                array to load for ``key`` or ``None`` to skip it.
            strict: when ``True``, a key of the dict that matches nothing (``KeyError``
                "Unused params violate `strict=True`...") or a state the dict does not provide
                ("Missing params violate `strict=True`...") is an error; when ``False`` they are
                logged as warnings.

        A loaded value must have the tensor's shape (``ValueError`` "param `k` shape mismatch");
        normalization layers also accept a flat array of the right size.  Loaded tensors take the
        array's dtype (float64 and int64 arrays become float32 and int32, as with
        :func:`mge.tensor`).  Unlike MegEngine, nothing is changed when the call raises: every value is
        checked before any is loaded.

        Example:
            >>> import mge.module as M
            >>> a, b = M.Linear(3, 2), M.Linear(3, 2)
            >>> b.load_state_dict(a.state_dict())
            >>> bool((a.weight.numpy() == b.weight.numpy()).all())
            True
        """
        if isinstance(state_dict, dict):
            given = state_dict

            def closure(key, _):
                return given.get(key)

            offered = set(state_dict.keys())
        elif callable(state_dict):
            closure = state_dict
            offered = set()
        else:
            raise ValueError(f"`state_dict` must load a dict or callable, got {type(state_dict)}")

        pending, skipped = self._collect_state(closure)
        unused = offered - {key for key, _, _ in pending}
        if unused:
            if strict:
                raise KeyError(f"Unused params violate `strict=True`, unused={unused}")
            logger.warning("Unused params in `strict=False` mode, unused=%s", unused)
        if skipped:
            if strict:
                raise KeyError(f"Missing params violate `strict=True`, missing={skipped}")
            logger.warning("Missing params in `strict=False` mode, missing=%s", skipped)
        _assign(pending)

    def _load_state_dict_with_closure(self, closure):
        """Load what ``closure(key, tensor)`` gives for each state (``None``: skip it).

        Returns ``(loaded keys, skipped keys)``.
        """
        pending, skipped = self._collect_state(closure)
        _assign(pending)
        return {key for key, _, _ in pending}, skipped

    def _collect_state(self, closure):
        # Every value is fetched and checked before anything is assigned, so an error leaves the
        # module as it was.
        if not callable(closure):
            raise AssertionError("closure must be a function")
        pending, skipped = [], set()
        for (owner, key), var in self._state_dict(keep_var=True).items():
            value = closure(key, var)
            if value is None:
                skipped.add(key)
                continue
            if isinstance(value, Tensor):
                value = np.array(value.numpy())
            if not isinstance(value, np.ndarray):
                raise AssertionError(f"closure should return a `np.ndarray`, now `{key}` get "
                                     f"{value}")
            want, got = tuple(var.shape), tuple(value.shape)
            if want != got:
                if not owner._saved_flat:
                    raise ValueError(f"param `{key}` shape mismatch, should be {want}, get {got}")
                if int(np.prod(want)) != int(np.prod(got)):
                    raise ValueError(f"param `{key}` size mismatch, should be "
                                     f"{int(np.prod(want))}, get {int(np.prod(got))}")
                value = value.reshape(want)
            pending.append((key, var, value))
        return pending, skipped

    # -- attribute bookkeeping ---------------------------------------------------------------------
    def __setattr__(self, name, value):
        module_like = _is_module(value) or isinstance(value, (list, tuple, dict))
        if name != "_modules":
            modules = self.__dict__.get("_modules")
            if modules is None and module_like:
                raise AttributeError("cannot assign module before Module.__init__() call")
            if module_like:
                if name not in modules:
                    modules.append(name)
            elif modules is not None and name in modules:
                modules.remove(name)
        if module_like or isinstance(value, Tensor):
            # the dotted names of the modules and tensors it holds (MegEngine's set_name)
            prefix = self.__dict__.get("_name") or self.__dict__.get("name")
            for key, leaf in _expand_structure(name, value):
                _set_module_name(self, prefix, key, leaf)
        super().__setattr__(name, value)

    def __delattr__(self, name):
        if name in self.__dict__ and _is_module(self.__dict__[name]):
            modules = self.__dict__.get("_modules")
            if modules is not None and name in modules:
                modules.remove(name)
        super().__delattr__(name)

    def __setstate__(self, state):
        # Modules pickled before _short_name existed kept the short name in _name.
        if "_short_name" not in state:
            state["_short_name"] = state.get("_name")
            state["_name"] = None
        self.__dict__.update(state)

    # -- printing ----------------------------------------------------------------------------------
    def _module_info_string(self):
        """The extra text inside ``ClassName(...)`` in ``repr`` (subclasses override it)."""
        return ""

    def __repr__(self):
        def indent(text):
            first, *rest = text.split("\n")
            return "\n".join([first] + ["  " + line for line in rest])

        extra = self._module_info_string()
        extra_lines = extra.split("\n") if extra else []
        child_lines = []
        for name in self._modules:
            value = self.__dict__.get(name)
            if _is_module(value):
                child_lines.append(f"({name}): {indent(repr(value))}")
            else:
                for key, leaf in _expand_structure(name, value):
                    if _is_module(leaf):
                        child_lines.append(f"({key}): {indent(repr(leaf))}")
        text = type(self).__name__ + "("
        if len(extra_lines) == 1 and not child_lines:
            text += extra_lines[0]
        elif extra_lines or child_lines:
            text += "\n  " + "\n  ".join(extra_lines + child_lines) + "\n"
        return text + ")"


def _assign(pending):
    # The tensor objects stay the same (optimizers and users hold them); only their values change.
    for _, var, value in pending:
        # MegEngine keeps the array's dtype (a float16 checkpoint loads as float16); numpy's
        # 64-bit defaults get Tensor's own rule instead (float32, int32), as mge.tensor does.
        dtype = None if value.dtype in (np.float64, np.int64) else value.dtype
        var._reset(type(var)(value, dtype=dtype, device=var.device, no_cache=True))


def _set_module_name(parent, prefix, name, module):
    """Record the dotted name of ``module`` (a module or a tensor) under ``parent``, and those
    of a module's children, as MegEngine's ``set_name`` does: a module or tensor keeps the first
    attribute name it was given; a tensor with a ``name`` of its own keeps that name, after the
    prefix (``"simple.k"``; :func:`mge.utils.naming.tensor_name` reads it).  Traced ops and
    dumped vars are named after them."""
    if isinstance(module, Tensor):
        if module.name:
            name = module.name
        short = getattr(module, "_short_name", None)
        if short and short != name:
            logger.warning("try setting the submodule `%s` to `%s`'s new attribute `%s`, its "
                           "name `%s` will remain unchanged", short, type(parent), name, short)
            return
        module._prefix = prefix
        module._short_name = name
        return
    full_name = name if not prefix else prefix + "." + name
    if module._short_name and module._short_name != name:
        logger.warning("try setting the submodule `%s` to `%s`'s new attribute `%s`, its name "
                       "`%s` will remain unchanged", module._short_name, type(parent), name,
                       module._short_name)
        return
    module._name = full_name
    module._short_name = name
    for key, leaf in module._flatten(recursive=False, with_key=True):
        _set_module_name(module, full_name, key, leaf)
