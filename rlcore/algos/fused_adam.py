"""FusedAdam: torch's fused Adam whose step calls the fused kernel directly, for the many small steps of DQN and SAC.

``torch.optim.Adam(fused=True).step`` spends most of a small network's step in Python before its one kernel call
(hooks and profiler records, grad mode, the per-step gathering of every parameter's state into lists, the grouping
by device and dtype): measured here ~8 % of a DQN CartPole run, ten times the kernel's own time. :class:`FusedAdam`
is that optimizer (same state, same ``state_dict``, checkpoints unchanged) whose :meth:`FusedAdam.step` makes the
same two calls (``_foreach_add_`` of the step counts, ``_fused_adam_``) on the same tensors with the same settings,
so its steps are bitwise torch's. Any case outside the plain one (a closure, hooks, a parameter without a gradient
or not yet with state, mixed devices or dtypes, AMSGrad, a tensor learning rate, a ``GradScaler``'s step) takes
torch's own step.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch.optim.optimizer import _global_optimizer_post_hooks, _global_optimizer_pre_hooks


class FusedAdam(torch.optim.Adam):
    """``torch.optim.Adam(..., fused=True)`` (``decoupled_weight_decay``: AdamW) with a direct fused step."""

    def __init__(self, params: Iterable[torch.Tensor], **options: Any) -> None:
        super().__init__(params, fused=True, **options)

    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        calls = self._fused_calls() if closure is None else None
        if calls is None:
            return super().step(closure)
        with torch.no_grad():
            for (params, grads, exp_avgs, exp_avg_sqs, steps), group in calls:
                torch._foreach_add_(steps, 1)
                kernel = torch._fused_adamw_ if group.get("decoupled_weight_decay", False) else torch._fused_adam_
                beta1, beta2 = group["betas"]
                kernel(
                    params,
                    grads,
                    exp_avgs,
                    exp_avg_sqs,
                    [],  # max_exp_avg_sqs: no AMSGrad here
                    steps,
                    amsgrad=False,
                    lr=group["lr"],
                    beta1=beta1,
                    beta2=beta2,
                    weight_decay=group["weight_decay"],
                    eps=group["eps"],
                    maximize=group["maximize"],
                    grad_scale=None,
                    found_inf=None,
                )
        return None

    step.hooked = True  # type: ignore[attr-defined]  # torch wraps an unhooked step in its hooks' and profiler's calls
    # at construction; this one runs them through torch's own step whenever a hook is registered

    def zero_grad(self, set_to_none: bool = True) -> None:
        """torch's ``zero_grad`` without its profiler record: every gradient set to None (``set_to_none``)."""
        if not set_to_none:
            super().zero_grad(set_to_none=False)
            return
        for group in self.param_groups:
            for param in group["params"]:
                param.grad = None

    def _fused_calls(self) -> list[tuple[list[list[torch.Tensor]], dict[str, Any]]] | None:
        """Per parameter group its (params, grads, exp_avgs, exp_avg_sqs, steps) and settings, when the step is the
        plain case of the module docstring; None otherwise."""
        if (
            getattr(self, "grad_scale", None) is not None  # a GradScaler's step (fp16): torch's step unscales
            or getattr(self, "found_inf", None) is not None
            or self._optimizer_step_pre_hooks
            or self._optimizer_step_post_hooks
            or _global_optimizer_pre_hooks
            or _global_optimizer_post_hooks
        ):
            return None
        calls = []
        first: torch.Tensor | None = None
        for group in self.param_groups:
            if group["amsgrad"] or group["differentiable"] or not isinstance(group["lr"], float):
                return None
            tensors: list[list[torch.Tensor]] = [[], [], [], [], []]
            for param in group["params"]:
                grad, state = param.grad, self.state.get(param)
                if grad is None or not state or grad.is_sparse or torch.is_complex(param):
                    return None
                first = param if first is None else first
                if param.device != first.device or param.dtype != first.dtype:
                    return None
                row = (param, grad, state["exp_avg"], state["exp_avg_sq"], state["step"])
                for column, tensor in zip(tensors, row, strict=True):
                    column.append(tensor)
            if tensors[0]:
                calls.append((tensors, group))
        return calls
