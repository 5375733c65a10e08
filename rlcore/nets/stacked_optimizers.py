"""Optimizers over N stacked members' parameters (N, *shape), each member with its own step count and state.

Torch's Adam, AdamW and RMSprop (:class:`StackedAdam`, :class:`StackedRMSprop`), built from the members' own
(:func:`stacked_optimizer`), each member's state in its own optimizer's format. A member's step is its own
optimizer's up to summation order.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, ClassVar, cast

import torch
from torch.optim.adam import adam


def stacked_optimizer(params: list[torch.Tensor], own: Sequence[torch.optim.Optimizer]) -> StackedOptimizer:
    """The members' own optimizers ``own`` (one kind and configuration: Adam, AdamW or RMSprop) as one over their
    stacked ``params`` (N, *shape), each member's state loaded from its own."""
    first, count = own[0], len(own)
    group = first.param_groups[0]
    stacked: StackedOptimizer
    if isinstance(first, torch.optim.RMSprop):
        stacked = StackedRMSprop(params, count, lr=group["lr"], alpha=group["alpha"], eps=group["eps"])
    elif isinstance(first, torch.optim.Adam | torch.optim.AdamW):
        betas = (float(group["betas"][0]), float(group["betas"][1]))
        decay = float(group["weight_decay"]) if isinstance(first, torch.optim.AdamW) else 0.0  # decoupled (BC's)
        fused = bool(group.get("fused"))  # SAC's alpha optimizer is not: the same kernel, the same ulps
        stacked = StackedAdam(params, count, group["lr"], betas, group["eps"], weight_decay=decay, fused=fused)
    else:
        raise ValueError(f"optimizers: expected Adam, AdamW or RMSprop, got {type(first).__name__}")
    stacked.load_seed_state_dicts([optimizer.state_dict() for optimizer in own])
    return stacked


class StackedOptimizer(torch.optim.Optimizer):
    """Base of the optimizers over stacked parameters (N, *shape): a step count per member, the state tensors named
    in ``moments``, and each member's state in torch's own optimizer's format (:meth:`seed_state_dict`,
    :meth:`load_seed_state_dicts`, :meth:`write_seed`), so a per-seed checkpoint resumes unbatched too. A param
    group's ``lr`` is a float or a float64 tensor (N,) of per-member rates (schedules of each member's progress)."""

    moments: ClassVar[tuple[str, ...]] = ()
    """The per-element state tensors, named as torch's optimizer names them."""

    def __init__(self, params: Iterable[torch.Tensor], count: int, defaults: dict[str, Any]) -> None:
        """``params``: tensors (``count``, *shape) whose dim 0 is the member."""
        super().__init__(params, defaults)
        self.count = count
        for group in self.param_groups:
            for param in group["params"]:
                if param.dim() == 0 or param.shape[0] != count:
                    raise ValueError(f"params: expected a leading seed dimension of {count}, got {tuple(param.shape)}")

    def step(self, closure: None = None, active: torch.Tensor | None = None) -> None:  # type: ignore[override]
        """One step for the seeds where ``active`` (N,) bool is True (None: all of them); the others' weights and
        state stay as they are (whatever their gradients hold, NaN included)."""
        raise NotImplementedError

    def _state_of(self, param: torch.Tensor) -> dict[str, torch.Tensor]:
        state = self.state[param]
        if not state:
            state["step"] = torch.zeros(self.count)  # float32, as torch's optimizers count
            for name in self.moments:
                state[name] = torch.zeros_like(param)
        return state

    def seed_state_dict(self, k: int) -> dict[str, Any]:
        """Seed ``k``'s state in the format of torch's optimizer (its ``state_dict()``; ``step`` a float32 scalar),
        for the parameters of one plain policy in the same order."""
        index = 0
        state: dict[int, dict[str, torch.Tensor]] = {}
        groups = []
        for group in self.param_groups:
            ids = []
            for param in group["params"]:
                saved = self.state.get(param)
                if saved:
                    state[index] = {
                        "step": torch.tensor(float(saved["step"][k])),
                        **{name: saved[name][k].clone() for name in self.moments},
                    }
                ids.append(index)
                index += 1
            lr = group["lr"]
            lr = float(lr[k]) if isinstance(lr, torch.Tensor) else lr
            options = {key: value for key, value in group.items() if key not in ("params", "lr")}
            groups.append({**options, "lr": lr, "params": ids})
        return {"state": state, "param_groups": groups}

    def write_seed(self, k: int, own: torch.optim.Optimizer) -> None:
        """Seed ``k``'s state and learning rate into its own optimizer ``own`` (over one member's parameters in the
        same order), as ``own`` would hold them after its own steps."""
        saved = self.seed_state_dict(k)
        params = [param for group in own.param_groups for param in group["params"]]
        for index, param in enumerate(params):
            if index in saved["state"]:
                own.state[param] = saved["state"][index]
        for group, mine in zip(own.param_groups, saved["param_groups"], strict=True):
            group["lr"] = mine["lr"]

    def load_seed_state_dicts(self, states: Sequence[dict[str, Any]]) -> None:
        """The inverse of :meth:`seed_state_dict` for every seed (e.g. resuming from per-seed checkpoints written by
        unbatched runs or by :meth:`seed_state_dict`). A seed without a state for a parameter (a fresh run beside
        resumed ones) starts it as torch's optimizer does: step 0, zero state."""
        if len(states) != self.count:
            raise ValueError(f"states: expected {self.count} optimizer states, got {len(states)}")
        params = [param for group in self.param_groups for param in group["params"]]
        for index, param in enumerate(params):
            per_seed = [seed_state["state"].get(index) for seed_state in states]
            if all(entry is None for entry in per_seed):
                continue
            fresh = torch.zeros_like(param[0])
            steps = [0.0 if entry is None else float(entry["step"]) for entry in per_seed]
            self.state[param] = {"step": torch.tensor(steps)}
            for name in self.moments:
                stacked = [fresh if entry is None else entry[name] for entry in per_seed]
                self.state[param][name] = torch.stack(stacked).to(param.dtype)


class StackedAdam(StackedOptimizer):
    """Adam (torch's form, no AMSGrad; AdamW's decoupled decay) over stacked parameters, a step count per member,
    so a member can sit out steps (:meth:`step` with ``active``: stopped early, a non-finite gradient) and keep its
    weights, moments and bias correction. The arithmetic is torch's Adam kernel (fused, as the members' own): over
    the stacked tensors at once while every member steps with one count and one rate, else over the stepping
    members' views, one call per distinct rate (timings: ``docs/members-design.md``)."""

    moments = ("exp_avg", "exp_avg_sq")

    def __init__(
        self,
        params: Iterable[torch.Tensor],
        count: int,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        *,
        weight_decay: float = 0.0,
        fused: bool = True,
    ) -> None:
        """``params``: tensors (``count``, *shape). ``fused``: False runs torch's single-tensor kernel, for members
        whose own optimizer is not fused (the two differ by ulps, which a few hundred steps amplify)."""
        super().__init__(params, count, {"lr": lr, "betas": betas, "eps": eps})
        self.weight_decay = weight_decay
        self.fused = fused

    @torch.no_grad()
    def step(self, closure: None = None, active: torch.Tensor | None = None) -> None:  # type: ignore[override]
        """One Adam step for the seeds where ``active`` (N,) bool is True (None: all of them); the others' weights,
        moments and step counts stay as they are (whatever their gradients hold, NaN included)."""
        if closure is not None:
            raise ValueError("closure: not supported")
        stepping = list(range(self.count)) if active is None else torch.nonzero(active).flatten().tolist()
        for group in self.param_groups:
            params = [param for param in group["params"] if param.grad is not None]
            states = [self._state_of(param) for param in params]
            if not params or not stepping:
                continue
            lr = group["lr"]
            rates = lr.tolist() if isinstance(lr, torch.Tensor) else [float(lr)] * self.count
            steps = torch.stack([state["step"] for state in states])  # (tensors, N)
            together = len(stepping) == self.count and len(set(rates)) == 1 and bool((steps == steps[:, :1]).all())
            if together:  # one kernel call over the stacked tensors; its step counts are every seed's
                counts = [state["step"][0].clone() for state in states]
                grads = [cast(torch.Tensor, param.grad) for param in params]
                avgs, squares = [state["exp_avg"] for state in states], [state["exp_avg_sq"] for state in states]
                self._fused(group, rates[0], params, grads, avgs, squares, counts)
                for state, count in zip(states, counts, strict=True):
                    state["step"].fill_(float(count))
                continue
            by_rate: dict[float, list[int]] = {}
            for k in stepping:
                by_rate.setdefault(rates[k], []).append(k)
            for rate, seeds in by_rate.items():  # one call per rate over its seeds' views, each with its own count
                views = [(param, state, k) for k in seeds for param, state in zip(params, states, strict=True)]
                self._fused(
                    group,
                    rate,
                    [param[k] for param, _, k in views],
                    [cast(torch.Tensor, param.grad)[k] for param, _, k in views],
                    [state["exp_avg"][k] for _, state, k in views],
                    [state["exp_avg_sq"][k] for _, state, k in views],
                    [state["step"][k] for _, state, k in views],  # views: the kernel advances them in place
                )

    def _fused(
        self,
        group: dict[str, Any],
        lr: float,
        params: list[torch.Tensor],
        grads: list[torch.Tensor],
        exp_avgs: list[torch.Tensor],
        exp_avg_sqs: list[torch.Tensor],
        counts: list[torch.Tensor],
    ) -> None:
        beta1, beta2 = group["betas"]
        adam(
            params,
            grads,
            exp_avgs,
            exp_avg_sqs,
            [],
            counts,
            fused=True if self.fused else None,
            foreach=None if self.fused else False,
            decoupled_weight_decay=bool(self.weight_decay),
            amsgrad=False,
            beta1=beta1,
            beta2=beta2,
            lr=lr,
            weight_decay=self.weight_decay,
            eps=group["eps"],
            maximize=False,
        )


class StackedRMSprop(StackedOptimizer):
    """RMSprop (Tieleman & Hinton, 2012; torch's default form: not centered, no momentum, no weight decay) over
    stacked parameters: v <- alpha v + (1 - alpha) g^2, p <- p - lr * g / (sqrt(v) + eps) per element, for the seeds
    :meth:`step` is told are active; the others keep their weights and state. Equal to ``torch.optim.RMSprop`` per seed
    up to the rounding of the last division (a float32 ulp or two)."""

    moments = ("square_avg",)

    def __init__(
        self, params: Iterable[torch.Tensor], count: int, lr: float = 1e-2, alpha: float = 0.99, eps: float = 1e-8
    ) -> None:
        super().__init__(params, count, {"lr": lr, "alpha": alpha, "eps": eps})

    @torch.no_grad()
    def step(self, closure: None = None, active: torch.Tensor | None = None) -> None:  # type: ignore[override]
        """One RMSprop step for the seeds where ``active`` (N,) bool is True (None: all of them)."""
        if closure is not None:
            raise ValueError("closure: not supported")
        for group in self.param_groups:
            alpha, lr = group["alpha"], group["lr"]
            for param in group["params"]:
                if param.grad is None:
                    continue
                state = self._state_of(param)
                grad, view = param.grad, (-1,) + (1,) * (param.dim() - 1)
                keep = torch.ones(self.count, dtype=torch.bool) if active is None else active
                state["step"] += keep.to(state["step"].dtype)
                square_avg = state["square_avg"].mul(alpha).addcmul_(grad, grad, value=1 - alpha)
                rate = lr.to(param.dtype).view(view) if isinstance(lr, torch.Tensor) else lr
                new_param = param - rate * (grad / square_avg.sqrt().add_(group["eps"]))
                state["square_avg"].copy_(torch.where(keep.view(view), square_avg, state["square_avg"]))
                param.copy_(torch.where(keep.view(view), new_param, param))
