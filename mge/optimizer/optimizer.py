"""``Optimizer``: the base of every optimizer (MegEngine 1.13's ``megengine.optimizer.Optimizer``).

An optimizer holds *parameter groups* (dicts with a ``"params"`` list and the hyperparameters)
and a per-parameter *state* (dicts of tensors such as ``"momentum_buffer"``).  ``step()`` updates
every parameter whose ``.grad`` is set.

Each optimizer updates one parameter with **one fused op** (``SGDUpdate``, ``AdamUpdate``...,
subclasses of ``UpdateOp`` in ``mge/_core/ops/optimizer.py``, shared between steps with
``cls.get``): its inputs are the parameter, its gradient and its state tensors, its outputs the
new parameter and the new states.  The op goes through ``apply`` and the transformation stack
like every op, and the results are swapped into the existing
``Parameter`` and state objects with ``Tensor._reset``, so a parameter keeps its identity (a
``Module`` still holds it) and a step costs one op per parameter instead of ten or more
elementwise ops (MegEngine fuses LAMB the same way, with ``LAMBUpdate``).
"""
import copy
import warnings
from abc import ABCMeta, abstractmethod
from collections.abc import Iterable

import numpy as np

from .._core.channel import get_channel
from .._core.ops.optimizer import UpdateOp  # noqa: F401  (the update ops' base, as before)
from ..core import apply
from ..tensor import Parameter, Tensor

__all__ = ["Optimizer", "required"]


class _RequiredParameter:
    def __repr__(self):
        return "<required parameter>"


#: Marks a hyperparameter without a default: every group must give it.
required = _RequiredParameter()

_float64 = np.dtype("float64")


def _float(value, name):
    # Hyperparameters may be numpy numbers or 0-d tensors; ops want plain floats (hashable, and
    # 1 and 1.0 must not make two different ops).
    try:
        return float(value)
    except (TypeError, ValueError):
        raise TypeError(f"optimizer hyperparameter {name!r} must be a number, got {value!r}") from None


class Optimizer(metaclass=ABCMeta):
    r"""Base class for all optimizers.

    Args:
        params: the :class:`~mge.Parameter`\ s to optimize: a Parameter, an iterable of them, or
            dicts defining parameter groups (each with a ``"params"`` entry and optionally its
            own hyperparameters).
        defaults: the default hyperparameters of a group (``required`` for one without a
            default).

    A subclass implements ``_create_state(param_group)`` (make the per-parameter state with
    :meth:`_add_state`) and ``_updates(param_group)`` (update the group's parameters).
    """

    def __init__(self, params, defaults):
        self._state = dict()
        self._defaults = defaults
        self._disable_type_convert = False

        if isinstance(params, (Parameter, dict)):
            params = [params]
        elif not isinstance(params, Iterable):
            raise TypeError(
                "params argument given to the optimizer should be Parameter or dict, or Iterable of them"
            )

        self.param_groups = []

        param_groups = list(params)
        if len(param_groups) == 0:
            raise ValueError("optimizer got an empty parameter list")

        param_type = type(param_groups[0])
        for param in param_groups:
            if not isinstance(param, param_type):
                raise TypeError("types of params argument given to the optimizer shoud be same")

        if not isinstance(param_groups[0], dict):
            param_groups = [{"params": param_groups}]

        for group in param_groups:
            self.add_param_group(group)

        for group in self.param_groups:
            self._create_state(group)
        self._state_ready = True

    _state_ready = False

    def add_param_group(self, param_group):
        r"""Add a parameter group to :attr:`param_groups`.

        Useful when fine-tuning a pre-trained network: frozen layers can be made trainable and
        added to the optimizer as training progresses.  Missing hyperparameters take the
        optimizer's defaults.  The state of a group added after construction is created here
        (MegEngine leaves it out, and the next ``step`` of ``Adam`` fails with a ``KeyError``).

        Args:
            param_group: a dict with ``"params"`` (a Parameter or an iterable of them) and
                optional hyperparameters.
        """
        assert isinstance(param_group, dict), "param group must be a dict"

        if isinstance(param_group["params"], Parameter):
            param_group["params"] = [param_group["params"]]
        else:
            param_group["params"] = list(param_group["params"])

        for param in param_group["params"]:
            if not isinstance(param, Parameter):
                raise TypeError(
                    "optimizer can only optimize Parameters, but one of the params is "
                    + str(type(param))
                )

        for name, default in self._defaults.items():
            if default is required and name not in param_group:
                raise ValueError(
                    "parameter group didn't specify a value of required optimization parameter " + name
                )
            param_group.setdefault(name, default)

        param_set = set()
        for group in self.param_groups:
            param_set.update(set(map(id, group["params"])))
        assert param_set.isdisjoint(set(map(id, param_group["params"]))), (
            "some parameters appear in more than one parameter group"
        )

        self.param_groups.append(param_group)
        if self._state_ready:
            self._create_state(param_group)

    def _add_state(self, param, state_name, initializer=None):
        """Create the state tensor ``state_name`` of ``param`` (zeros of its shape by default).

        States are float32 (float64 for a float64 parameter) on the parameter's device, as
        MegEngine keeps them in float32 also for float16 parameters.
        """
        dtype = _float64 if param.dtype == _float64 else np.float32
        if initializer is None:
            initializer = np.zeros(param.shape, dtype=dtype)
        state_dict = self._state.setdefault(param, {})
        assert state_name not in state_dict
        state_dict[state_name] = Tensor(initializer, dtype=dtype, device=param.device, no_cache=True)

    def _add_states(self, param_group, state_names):
        """:meth:`_add_state` of each of ``state_names`` for every parameter of ``param_group``: a
        state named ``step`` is a 0-d step counter from 0, the others zeros of the parameter's
        shape.  ``state_names`` is also what the update op takes (see :meth:`_apply_updates`)."""
        for param in param_group["params"]:
            for name in state_names:
                self._add_state(param, name, initializer=0.0 if name == "step" else None)

    @abstractmethod
    def _create_state(self, param_group):
        """Create the state of every parameter of ``param_group`` (with :meth:`_add_state`)."""

    @abstractmethod
    def _updates(self, param_group):
        """Update the parameters of ``param_group`` from their gradients."""

    def _apply_updates(self, param_group, op, state_names):
        """Run the fused update ``op`` on every parameter of the group that has a gradient.

        The op's inputs are ``(param, grad, *states)`` in the order of ``state_names``; its
        outputs replace the parameter's and the states' values in place (``_reset``), so the
        objects keep their identity.
        """
        state = self._state
        for param in param_group["params"]:
            grad = param.grad
            if grad is None:  # not reached by backward: MegEngine skips it, states included
                continue
            if state_names:
                st = state[param]
                old = [st[name] for name in state_names]
                new = apply(op, param, grad, *old)
                param._reset(new[0])
                for i in range(len(old)):
                    old[i]._reset(new[i + 1])
            else:
                param._reset(apply(op, param, grad)[0])

    def _get_params(self):
        params = []
        for group in self.param_groups:
            for param in group["params"]:
                params.append(param)
        return params

    def step(self):
        r"""Perform a single optimization step; returns the optimizer (``opt.step().clear_grad()``).

        Parameters whose ``grad`` is ``None`` are left as they are, and so is their state.
        """
        # (the update ops say ``never_recompute``: DTR and drop never record them, which would keep
        # every earlier value of a parameter alive through its producer chain)
        channel = get_channel()
        for group in self.param_groups:
            if isinstance(group["params"], set):
                raise TypeError(
                    "optimized parameters need to be organized in ordered collections, "
                    "but the ordering of parameters in sets will change between runs. "
                    "Please use a list instead."
                )
            channel.push_scope("step")
            try:
                self._updates(group)
            finally:
                channel.pop_scope("step")
        return self

    def zero_grad(self):
        """Set every gradient to zero (deprecated since MegEngine 1.0: use :meth:`clear_grad`)."""
        warnings.warn(
            "Call to deprecated method zero_grad. (use clear_grad instead) -- Deprecated since version 1.0.",
            category=DeprecationWarning, stacklevel=2,
        )
        from .. import functional as F
        for param_group in self.param_groups:
            for param in param_group["params"]:
                if param.grad is not None:
                    param.grad._reset(F.zeros_like(param.grad))

    def clear_grad(self):
        r"""Set the ``grad`` attribute to ``None`` for all parameters."""
        for param_group in self.param_groups:
            for param in param_group["params"]:
                param.grad = None

    def state_dict(self, keep_var=False):
        r"""Export the optimizer state.

        Args:
            keep_var: keep the state values as tensors (the optimizer's own objects) instead of
                numpy copies.

        Returns:
            ``{"param_groups": [...], "state": {index: {name: value}}}``: the groups' hyperparameters
            with their parameters replaced by indices, and each parameter's state under its
            index.  It can be loaded by :meth:`load_state_dict`, also into a fresh optimizer.

        Example::

            >>> import mge, mge.optimizer as optim
            >>> w = mge.Parameter([1.0, 2.0])
            >>> opt = optim.SGD([w], lr=0.1, momentum=0.9)
            >>> w.grad = mge.tensor([1.0, 1.0])
            >>> sd = opt.step().state_dict()
            >>> sd["param_groups"]
            [{'lr': 0.1, 'momentum': 0.9, 'weight_decay': 0.0, 'params': [0]}]
            >>> sd["state"][0]["momentum_buffer"]
            array([1., 1.], dtype=float32)
        """
        param_groups = []
        state = dict()
        param2id = dict()

        cur_id = 0
        for group in self.param_groups:
            for param in group["params"]:
                if param not in param2id:
                    param2id[param] = cur_id
                    cur_id += 1

        for param, st in self._state.items():
            _st = copy.copy(st)
            if not keep_var:
                for k, v in st.items():
                    _st[k] = np.array(v.numpy())  # a writable copy, not a view of the storage
            state[param2id[param]] = _st

        for group in self.param_groups:
            param_group = {k: v for k, v in group.items() if k != "params"}
            param_group["params"] = [param2id[param] for param in group["params"]]
            param_groups.append(param_group)

        return {"param_groups": param_groups, "state": state}

    def load_state_dict(self, state):
        r"""Load the optimizer state.

        Args:
            state: optimizer state, as returned by :meth:`state_dict`.  The optimizer must have
                the same number of groups, of parameters in each group and group keys.
        """
        if len(self.param_groups) != len(state["param_groups"]):
            raise ValueError("loaded state dict has a different number of parameter groups")
        for group_new, group_saved in zip(self.param_groups, state["param_groups"]):
            if len(group_new["params"]) != len(group_saved["params"]):
                raise ValueError(
                    "loaded state dict contains a parameter group that "
                    "doesn't match the size of optimizer's group"
                )
            for param_new, param_saved in zip(group_new["params"], group_saved["params"]):
                p = param_new
                saved = state["state"].get(param_saved)
                if saved is None:
                    # a stateless parameter (plain SGD); MegEngine raises KeyError here
                    self._state.pop(p, None)
                    continue
                current = self._state.get(p, {})
                new = {}
                for k, v in saved.items():
                    new[k] = self._loaded_state(p, k, v, current.get(k))
                self._state[p] = new

            if set(group_new.keys()) != set(group_saved.keys()):
                raise ValueError(
                    "loaded state dict contains a parameter group that "
                    "doesn't match the keys of optimizer's group"
                )
            for key in group_new.keys():
                if key != "params":
                    group_new[key] = group_saved[key]

        if len(self._state.keys()) != len(state["state"].keys()):
            raise ValueError(
                "loaded state dict contains a state that doesn't match the size of optimizer's state"
            )

    @staticmethod
    def _loaded_state(param, name, value, current):
        # A fresh tensor (never the caller's object: the optimizer updates it in place), with the
        # dtype and device the optimizer's own state has; a wrong shape is caught here rather
        # than at the next step.
        dtype = current.dtype if current is not None else None
        t = Tensor(value, dtype=dtype, device=param.device, no_cache=True)
        if current is not None and t.shape != current.shape:
            raise ValueError(
                f"loaded state {name!r} has shape {t.shape}, but the optimizer's state for this "
                f"parameter has shape {current.shape}"
            )
        return t

    def backward(self, loss):
        raise NotImplementedError("use autodiff.GradManager instead")

    def bcast_param(self):
        raise NotImplementedError("use distributed.bcast_list_ instead")
