"""``Optimizer``: MindSpore's optimizer base, with the update rule delegated to optax.

An optimizer holds the Parameters it updates (a list, or MindSpore's group dicts with per-group ``lr`` and
``weight_decay``), a learning rate (a float, a per-step list, a schedule Cell or any callable of the step), and the
optax state. Subclasses give the core rule in :meth:`core_transform`; this class adds MindSpore's order of
operations around it: weight decay is added to the gradient, then a group with ``grad_centralization`` centralizes
it, then the gradient is divided by ``loss_scale``, then the rule and the learning rate apply.

Calling the optimizer with gradients (``opt(grads)``, as in a hand-written PyNative loop) applies one update to its
Parameters in place; ``TrainOneStepCell`` uses :meth:`transformation` inside the compiled step instead.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from graphpar._logging import notice_once
from graphpar.common.parameter import Parameter
from graphpar.nn.cell import Cell
from graphpar.nn.learning_rate_schedule import LearningRateSchedule


def _centralized(grad: jax.Array) -> jax.Array:
    """MindSpore's gradient centralization of one gradient: minus its mean over every axis but the first, for a
    gradient of two or more dimensions whose second is a multiple of 16 (MindSpore's ``_apply_grad_centralization``
    leaves the others as they are: a bias, a 3-channel first convolution)."""
    if grad.ndim < 2 or grad.shape[1] % 16:
        return grad
    return grad - jnp.mean(grad, axis=tuple(range(1, grad.ndim)), keepdims=True)


def centralize_gradients() -> optax.GradientTransformation:
    """The optax step of a parameter group with ``grad_centralization=True`` (stateless)."""
    return optax.stateless(lambda updates, params=None: jax.tree.map(_centralized, updates))


def learning_rate_schedule(learning_rate: Any) -> Callable[[Any], Any] | float:
    """MindSpore learning-rate forms to an optax schedule (a float stays a float)."""
    if isinstance(learning_rate, bool):
        raise TypeError("learning_rate must be a float, a list, a schedule or a callable, got a bool")
    if isinstance(learning_rate, (int, float)):
        if learning_rate < 0:
            raise ValueError(f"learning_rate must be >= 0, got {learning_rate}")
        return float(learning_rate)
    if isinstance(learning_rate, (list, tuple, np.ndarray, jax.Array)):
        values = jnp.asarray(np.asarray(learning_rate, np.float32).reshape(-1))
        if values.size == 0:
            raise ValueError("learning_rate list is empty")
        if values.size == 1:
            return float(values[0])
        last = values.size - 1
        return lambda count: values[jnp.minimum(count, last)]
    if isinstance(learning_rate, LearningRateSchedule):
        return lambda count: learning_rate(count)
    if callable(learning_rate):
        return learning_rate
    raise TypeError(f"learning_rate must be a float, a list, a LearningRateSchedule or a callable, got "
                    f"{type(learning_rate).__name__}")


class _StateBox:
    """Holds the optax state outside the NNX graph (it is not a Cell's data). ``lent``: whether ``opt_state``
    handed the state out since the train step last wrote it (its arrays may since have been deleted or donated:
    the training loop checks them before the next step, ``compile.runtime.bound_step``). ``handed``: the arrays of
    it a train cell returned from its last step (:meth:`Optimizer.hand_out`)."""

    def __init__(self) -> None:
        self.state: Any = None
        self.lent = False
        self.handed: tuple = ()


class Optimizer(Cell):
    """Base class. ``params`` is an iterable of Parameters or of group dicts
    ``{"params": [...], "lr": ..., "weight_decay": ...}`` (MindSpore's grouped parameters)."""

    def __init__(self, learning_rate: Any, parameters: Iterable[Any], weight_decay: float = 0.0,
                 loss_scale: float = 1.0):
        super().__init__(auto_prefix=False)
        items = list(parameters)
        if not items:
            raise ValueError(f"{type(self).__name__}: the parameter list is empty")
        groups: list[dict] = []
        # MindSpore: grouped parameters decay wherever their group's weight_decay is > 0; ungrouped ones skip
        # the names holding "beta" or "gamma" (BatchNorm/LayerNorm shift and scale)
        self._grouped = isinstance(items[0], dict)
        if self._grouped:
            for g in items:
                unknown = set(g) - {"params", "lr", "weight_decay", "grad_centralization", "order_params"}
                if unknown:
                    raise ValueError(f"{type(self).__name__}: unknown keys {sorted(unknown)} in a parameter "
                                     "group; valid: params, lr, weight_decay, grad_centralization, order_params")
                if not isinstance(g.get("grad_centralization", False), bool):
                    raise TypeError(f"{type(self).__name__}: a parameter group's grad_centralization must be a bool, "
                                    f"got {type(g['grad_centralization']).__name__}")
                if "params" in g:
                    groups.append(g)
        else:
            groups.append({"params": items})
        params: list[Parameter] = []
        seen: set[int] = set()
        for g in groups:
            g_params = list(g["params"])
            for p in g_params:
                if not isinstance(p, Parameter):
                    raise TypeError(f"{type(self).__name__}: params must hold Parameters, got {type(p).__name__}")
                if id(p) in seen:
                    raise ValueError(f"{type(self).__name__}: the Parameter '{p.name}' is in two groups")
                seen.add(id(p))
                params.append(p)
            g["params"] = g_params
        order = [g["order_params"] for g in items if self._grouped and "order_params" in g]
        if order:  # MindSpore's order_params: the optimizer's parameter (and eager gradient) order
            params = self._ordered(params, list(order[-1]))
        if loss_scale <= 0:
            raise ValueError(f"loss_scale must be > 0, got {loss_scale}")
        self._groups = [{k: v for k, v in g.items() if k != "params"} | {"names": [p.name for p in g["params"]]}
                        for g in groups]
        self.parameters = params  # registered with the NNX graph (shared with the network)
        self.learning_rate = learning_rate
        self.weight_decay = float(weight_decay)
        self.loss_scale = float(loss_scale)
        self._box = _StateBox()

    def _ordered(self, params: list[Parameter], order: list[Any]) -> list[Parameter]:
        ids = {id(p) for p in params}
        stray = [p.name if isinstance(p, Parameter) else repr(p) for p in order if id(p) not in ids]
        if stray:
            raise ValueError(f"{type(self).__name__}: order_params holds {stray[:3]}, which no parameter group "
                             "holds; order_params must list exactly the grouped Parameters")
        listed = {id(p) for p in order}
        missing = [p.name for p in params if id(p) not in listed]
        if missing or len(order) != len(params):
            raise ValueError(f"{type(self).__name__}: order_params must list every grouped Parameter once; "
                             f"missing or repeated: {missing[:3] or 'a repeated entry'}")
        return list(order)

    # --- what subclasses provide -------------------------------------------------------------------------------
    def core_transform(self, learning_rate: Any) -> optax.GradientTransformation:
        """The update rule, including the learning rate (an optax GradientTransformation)."""
        raise NotImplementedError

    # --- the optax chain ---------------------------------------------------------------------------------------
    def _group_transform(self, group: dict) -> optax.GradientTransformation:
        lr = learning_rate_schedule(group.get("lr", self.learning_rate))
        wd = float(group.get("weight_decay", self.weight_decay))
        parts = []
        if wd and not self.decoupled_weight_decay:
            if self._grouped:
                parts.append(optax.add_decayed_weights(wd))
            else:
                parts.append(optax.add_decayed_weights(wd, mask=lambda p: {k: _default_decay_filter_name(k)
                                                                            for k in p}))
        if group.get("grad_centralization", False):
            parts.append(centralize_gradients())
        if self.loss_scale != 1.0:
            parts.append(optax.scale(1.0 / self.loss_scale))
        parts.append(self.core_transform(lr, wd) if self.decoupled_weight_decay else self.core_transform(lr))
        return optax.chain(*parts)

    decoupled_weight_decay = False

    def transformation(self) -> optax.GradientTransformation:
        """One optax transformation over ``{parameter name: array}`` for every parameter this optimizer owns."""
        if len(self._groups) == 1:
            return self._group_transform(self._groups[0])
        labels = {name: str(i) for i, g in enumerate(self._groups) for name in g["names"]}
        return optax.multi_transform({str(i): self._group_transform(g) for i, g in enumerate(self._groups)},
                                     lambda params: {k: labels[k] for k in params})

    @property
    def param_names(self) -> list[str]:
        return [p.name for p in self.parameters]

    @property
    def opt_state(self) -> Any:
        self._box.lent = True
        return self._box.state

    @opt_state.setter
    def opt_state(self, value: Any) -> None:
        self._box.state = value

    def hand_out(self, pick: Callable[[Any], tuple]) -> tuple:
        """``pick(state)``: arrays of the state a train cell returns from each step (the loss-scale cell's overflow
        flag and scale), taken without lending the whole state, which would make the next step flatten it to check
        every array (1-3 µs a step); :meth:`before_step` checks just these."""
        box = self._box
        box.handed = handed = pick(box.state)
        return handed

    def before_step(self) -> None:
        """Lend the state (the next train step then checks all of it and names a deleted array) when an array
        :meth:`hand_out` returned has been deleted or donated since."""
        box = self._box
        handed = box.handed  # the step's outputs: arrays of one type, whose own is_deleted is the cheapest call
        if handed and any(map(type(handed[0]).is_deleted, handed)):
            box.lent = True

    def branch_state(self) -> Any:
        """The optax state (None before the first update), as an ``if`` on a traced value reads it to merge its
        branches (``ir.control_flow.BranchState``: ``if is_finite: optimizer(grads)`` keeps it on the other path)."""
        return self._box.state

    def set_branch_state(self, value: Any) -> None:
        self._box.state = value

    def initial_branch_state(self) -> Any:
        """The state the first update starts from (for the path of an ``if`` that made none), without keeping it."""
        return self.transformation().init({p.name: p.get_value() for p in self.parameters})

    def init_state(self, params: dict[str, jax.Array]) -> Any:
        if self._box.state is None:
            self._box.state = self.transformation().init(params)
        return self._box.state

    def warn_if_lr_runs_out(self, steps: int) -> None:
        """Say once when the next ``steps`` updates go past the end of a per-step learning-rate list.

        graphpar then keeps the list's last value; MindSpore indexes the list with ``Gather``, which fails (CPU,
        GPU) or is undefined (Ascend) past its end. A list sized for fewer steps than the run takes (a list built
        for another batch size, say) would otherwise train most of the run at its last, often near-zero, rate."""
        given = [g.get("lr", self.learning_rate) for g in self._groups]
        lists = [np.asarray(lr, np.float32).reshape(-1) for lr in given
                 if isinstance(lr, (list, tuple, np.ndarray, jax.Array))]
        lists = [lr for lr in lists if lr.size > 1]
        if not lists:
            return
        counts = [_host_int(c) for _, c in optax.tree_utils.tree_get_all_with_path(self._box.state, "count")] \
            if self._box.state is not None else []
        done = max(counts, default=0)
        shortest = min(lists, key=len)
        short = len(shortest)
        if done + steps > short:
            notice_once(f"lr-list-short:{id(self)}:{short}",
                        f"{type(self).__name__}: the learning-rate list has {short} values (one per step), but "
                        f"this run takes updates {done}..{done + steps - 1}; updates from {short} on use its last "
                        f"value ({float(shortest[-1]):g}). Build it for every step the run takes (total_step = "
                        "epochs x the dataset's steps per epoch)")

    def get_lr(self) -> Any:
        lr = learning_rate_schedule(self.learning_rate)
        if callable(lr):
            step = optax.tree_utils.tree_get(self._box.state, "count") if self._box.state is not None else 0
            return lr(0 if step is None else step)
        return lr

    # --- eager use: opt(grads) ---------------------------------------------------------------------------------
    def construct(self, gradients: Sequence[Any]) -> bool:
        grads = list(gradients)
        if len(grads) != len(self.parameters):
            raise ValueError(f"{type(self).__name__}: got {len(grads)} gradients for {len(self.parameters)} "
                             "parameters")
        params = {p.name: p.get_value() for p in self.parameters}
        grads = {p.name: jnp.asarray(g) for p, g in zip(self.parameters, grads)}
        state = self.init_state(params)
        updates, self._box.state = self.transformation().update(grads, state, params)
        new = optax.apply_updates(params, updates)
        for p in self.parameters:
            p.set_value(new[p.name])
        return True


def _default_decay_filter_name(name: str) -> bool:
    return "beta" not in name and "gamma" not in name


def _host_int(value: Any) -> int:
    """A replicated scalar as an int, also when the array spans several processes (read this process's copy)."""
    if isinstance(value, jax.Array) and not value.is_fully_addressable:
        value = value.addressable_data(0)
    return int(np.asarray(value))
