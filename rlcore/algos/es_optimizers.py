"""The optimizers of OpenAI's ``es_distributed`` (``optimizers.py``): SGD with an exponential moving average of the
gradient, and Adam with its bias correction folded into the step size, as ``torch.optim.Optimizer`` subclasses (so
their state is in every checkpoint and a resumed run steps bitwise as an uninterrupted one).

Each descends along its parameters' ``.grad`` (ES puts ``-g + l2coeff * theta`` there, as OpenAI's ``update``):

- :class:`OpenAISGD`: ``v <- momentum * v + (1 - momentum) * grad`` (``v`` starts at 0), ``theta <- theta - lr * v``.
  Not ``torch.optim.SGD(momentum=m, dampening=m)``: torch's buffer starts at the first gradient, so its first step is
  ``1 / (1 - m)`` times OpenAI's (10x at m = 0.9).
- :class:`OpenAIAdam`: at step t, ``a = lr * sqrt(1 - beta2^t) / (1 - beta1^t)``, ``m <- beta1 m + (1 - beta1) grad``,
  ``v <- beta2 v + (1 - beta2) grad^2``, ``theta <- theta - a * m / (sqrt(v) + eps)``. ``torch.optim.Adam`` steps
  ``lr * m_hat / (sqrt(v_hat) + eps)`` = ``a * m / (sqrt(v) + eps * sqrt(1 - beta2^t))``: the same but for where eps
  sits (torch's is smaller by ``sqrt(1 - beta2^t)``: 0.03 at t = 1, 1 for large t).

The state keys are torch's (``momentum_buffer``; ``step``, ``exp_avg``, ``exp_avg_sq``): the same quantities, so
checkpoints written with torch's optimizers load.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import torch


class OpenAISGD(torch.optim.Optimizer):
    """OpenAI's ``es_distributed.optimizers.SGD`` (see the module docstring)."""

    def __init__(self, params: Iterable[torch.Tensor], lr: float, momentum: float = 0.9) -> None:
        if not 0.0 <= momentum < 1.0:
            raise ValueError(f"momentum must be in [0, 1), got {momentum}")
        super().__init__(params, {"lr": lr, "momentum": momentum})

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        loss = None if closure is None else closure()
        for group in self.param_groups:
            lr, momentum = group["lr"], group["momentum"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = torch.zeros_like(p)
                velocity = state["momentum_buffer"]
                velocity.mul_(momentum).add_(p.grad, alpha=1.0 - momentum)
                p.add_(velocity, alpha=-lr)
        return loss


class OpenAIAdam(torch.optim.Optimizer):
    """OpenAI's ``es_distributed.optimizers.Adam`` (see the module docstring for how it differs from torch's)."""

    def __init__(
        self,
        params: Iterable[torch.Tensor],
        lr: float,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
    ) -> None:
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps})

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        loss = None if closure is None else closure()
        for group in self.param_groups:
            lr, (beta1, beta2), eps = group["lr"], group["betas"], group["eps"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state: dict[str, Any] = self.state[p]
                if "step" not in state:
                    state["step"] = torch.tensor(0.0)
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                state["step"] += 1
                t = int(state["step"])
                a = lr * math.sqrt(1.0 - beta2**t) / (1.0 - beta1**t)
                m, v = state["exp_avg"], state["exp_avg_sq"]
                m.mul_(beta1).add_(p.grad, alpha=1.0 - beta1)
                v.mul_(beta2).addcmul_(p.grad, p.grad, value=1.0 - beta2)
                p.addcdiv_(m, v.sqrt().add_(eps), value=-a)
        return loss
