"""N copies of one network, one per seed (the members of a batched run), stacked along a leading member dimension,
and the one optimizer step of stacked members.

:class:`StackedPolicies` holds the stacked parameters; :meth:`StackedPolicies.mlp` runs each ``nn.Linear`` of an MLP
as one ``torch.baddbmm`` over them, for losses written over the member dimension with every reduction over a
member's own samples. :func:`masked_step` is the members' optimizer step: their losses (M,) back-propagated where
present and finite, each member's gradient clipped to its own norm, one step of a :class:`StackedOptimizer` (a step
count per member) for the members whose norm is finite.

The gradient of ``sum_k loss_k`` with respect to member k's slice of a stacked parameter is the gradient of
``loss_k`` alone, and Adam is elementwise, so each member's step is its own optimizer's up to the summation order of
the batched matrix products (a float32 ulp or two in the weight gradients; ``tests/test_stacked.py`` measures it).
``torch.func.vmap`` over ``functional_call`` (PyTorch's model-ensembling recipe) is not used: its rule for a linear
layer with stacked weights costs ~3x a ``baddbmm``, so a vmapped update is ~1.5x an unbatched one for one seed
(``benchmarks/seeds_batching.py`` and ``benchmarks/members.py``, their tables in ``benchmarks/README.md``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Sequence
from typing import Any, ClassVar, Generic, Protocol, TypeVar, cast

import torch
from torch import nn
from torch.func import stack_module_state
from torch.optim.adam import adam

PolicyT = TypeVar("PolicyT", bound=nn.Module)


class StackedPolicies(Generic[PolicyT]):
    """N policies of one architecture with their parameters and buffers stacked along dim 0 (the seed).

    ``params`` are leaf tensors (N, *shape) that require grad: pass :meth:`parameters` to an optimizer. ``buffers``
    (normalizer statistics, fixed supports) are stacked too, so each seed keeps its own. The policies given are
    copied, not kept: training changes the stacked tensors only (their owners copy slice k back into a seed's own
    module).
    """

    def __init__(self, policies: Sequence[PolicyT]) -> None:
        if not policies:
            raise ValueError("policies: expected at least one policy")
        kinds = {type(policy) for policy in policies}
        if len(kinds) != 1:
            raise ValueError(f"policies: expected one class, got {sorted(kind.__name__ for kind in kinds)}")
        self.count = len(policies)
        """N, the number of stacked seeds."""
        # The architecture only: its own tensors live on the meta device, so a name missing from the stacked
        # dicts fails loudly instead of silently using one seed's value.
        self.template: PolicyT = copy.deepcopy(policies[0]).to("meta")
        params, buffers = stack_module_state(list(policies))
        self.params: dict[str, torch.Tensor] = params
        self.buffers: dict[str, torch.Tensor] = buffers

    def parameters(self) -> list[torch.Tensor]:
        """The stacked parameters, (N, *shape) each, in the policy's ``named_parameters`` order."""
        return list(self.params.values())

    def clip_grad_norms_(self, max_norm: float) -> torch.Tensor:
        """Clip each seed's gradient to the global 2-norm ``max_norm`` (:func:`clip_member_grad_norms_`); returns the
        norms before clipping, (N,)."""
        return clip_member_grad_norms_(self.parameters(), self.count, max_norm)

    def mlp(self, name: str, x: torch.Tensor) -> torch.Tensor:
        """The policy's ``nn.Sequential`` MLP ``name`` (e.g. ``"actor"``, ``"critic.net"``; built by
        ``rlcore.nets.blocks.mlp``) for every seed without vmap: ``x`` (N, B, in) -> (N, B, out), each
        ``nn.Linear`` as one ``torch.baddbmm`` over the stacked weights. Differentiable: for losses written batched
        by hand, with every reduction over dim 1 (the seed's samples)."""
        module = self.template.get_submodule(name)
        if not isinstance(module, nn.Sequential):
            raise TypeError(f"{name}: expected an nn.Sequential MLP, got {type(module).__name__}")
        for index, layer in enumerate(module):
            if isinstance(layer, nn.Linear):
                weight = self.params[f"{name}.{index}.weight"]  # (N, out, in)
                bias = self.params[f"{name}.{index}.bias"]  # (N, out)
                x = torch.baddbmm(bias.unsqueeze(1), x, weight.transpose(1, 2))
            elif any(True for _ in layer.parameters()) or any(True for _ in layer.buffers()):
                raise TypeError(f"{name}.{index}: only nn.Linear layers may hold tensors, got {type(layer).__name__}")
            else:
                x = layer(x)  # an activation
        return x


def each_member(
    functions: Sequence[Callable[[torch.Tensor], torch.Tensor]], inputs: Sequence[torch.Tensor], same: bool
) -> torch.Tensor:
    """Each member's ``functions[k]`` of its ``inputs[k]`` (B, ...), stacked: (M, B, ...). ``same``: every member's
    function is one function of its input (an encoder without weights, no statistics of its own), so it runs once
    over every member's rows (measured: a third of stacked DQN's forward time went to M separate calls)."""
    if not same:
        return torch.stack([function(x) for function, x in zip(functions, inputs, strict=True)])
    x = torch.stack(list(inputs))
    out = functions[0](x.flatten(0, 1))
    return out.view(x.shape[0], x.shape[1], *out.shape[1:])


@torch.no_grad()
def clip_member_grad_norms_(parameters: Sequence[torch.Tensor], count: int, max_norm: float) -> torch.Tensor:
    """Clip each member's gradient (the slices [k] of the stacked ``parameters``' gradients, (M, *shape)) to the
    global 2-norm ``max_norm`` over that member's slices, with ``nn.utils.clip_grad_norm_``'s arithmetic: a norm per
    tensor, their norm, ``max_norm / (norm + 1e-6)`` clamped to 1, every gradient multiplied by it. Each member's
    per-tensor norms are a contiguous row (M, T) reduced along it, which sums as ``clip_grad_norm_`` sums one model's
    (measured bitwise equal: SAC's clipped runs amplify an ulp there to 1e-2 in a few hundred steps). Returns the
    norms before clipping, (M,): a non-finite one marks a member whose step a one-member run would skip."""
    grads = [param.grad for param in parameters if param.grad is not None]
    if not grads:
        return torch.zeros(count)
    per_tensor = torch.stack([torch.linalg.vector_norm(grad.reshape(count, -1), dim=1) for grad in grads], dim=1)
    norms = torch.linalg.vector_norm(per_tensor, dim=1)
    coefficients = torch.clamp(max_norm / (norms + 1e-6), max=1.0)
    for grad in grads:
        grad.mul_(coefficients.view(-1, *([1] * (grad.dim() - 1))))
    return norms


class SkipCounts(Protocol):
    """An algorithm's counters of skipped optimizer steps (``rlcore.algos.base.Algorithm``'s)."""

    skipped_steps: int
    consecutive_skips: int


def count_skips(members: Sequence[SkipCounts], applied: Sequence[bool], present: Sequence[bool] | None = None) -> None:
    """Each member's optimizer step counted as ``Algorithm.apply_gradients`` counts its own: a skipped one adds to
    ``skipped_steps`` and ``consecutive_skips``, a taken one resets ``consecutive_skips``; a member not ``present``
    (None: every one is) took no part in the step and is not counted."""
    for k, (member, took) in enumerate(zip(members, applied, strict=True)):
        if present is not None and not present[k]:
            continue
        if took:
            member.consecutive_skips = 0
        else:
            member.skipped_steps += 1
            member.consecutive_skips += 1


def masked_backward(losses: torch.Tensor, present: torch.Tensor | None = None) -> torch.Tensor:
    """Accumulate the gradients of the members' ``losses`` (M,) where ``present`` (M,) bool (None: every member) and
    the loss is finite; the others' are replaced by 0, so no NaN reaches another member's slices (a member's
    gradient is its own loss's: the stacked weights' slices do not mix). Returns those members, (M,) bool."""
    backward = torch.isfinite(losses.detach())
    if present is not None:
        backward &= present
    torch.where(backward, losses, 0.0).sum().backward()
    return backward


def masked_optimizer_step(
    optimizer: StackedOptimizer, taking: torch.Tensor, max_grad_norm: float | None = None
) -> list[bool]:
    """One step of ``optimizer`` on the accumulated gradients for the members ``taking`` it ((M,) bool), each
    member's gradient clipped to its own ``max_grad_norm`` (None: not clipped); a member whose norm is not finite
    sits out. Returns each member's ``applied`` (one host read)."""
    if max_grad_norm is not None:
        parameters = [param for group in optimizer.param_groups for param in group["params"]]
        taking = taking & torch.isfinite(clip_member_grad_norms_(parameters, optimizer.count, max_grad_norm))
    applied: list[bool] = taking.tolist()
    optimizer.step(active=None if all(applied) else taking)
    return applied


def masked_step(
    optimizer: StackedOptimizer,
    losses: torch.Tensor,
    present: torch.Tensor | None = None,
    max_grad_norm: float | None = None,
) -> list[bool]:
    """One optimizer step of M stacked members on their losses (M,): gradients zeroed, :func:`masked_backward`,
    :func:`masked_optimizer_step`. Returns each member's ``applied``: False for a member absent (``present``) or
    whose loss or clipped gradient norm is not finite (its weights and optimizer state untouched)."""
    optimizer.zero_grad(set_to_none=True)
    return masked_optimizer_step(optimizer, masked_backward(losses, present), max_grad_norm)


class StackedOptimizer(torch.optim.Optimizer):
    """Base of the optimizers over stacked parameters (N, *shape): a step count per seed, the state tensors named in
    ``moments`` of the parameters' shape, and each seed's state in the format of torch's own optimizer
    (:meth:`seed_state_dict`, :meth:`load_seed_state_dicts`), so a per-seed checkpoint resumes unbatched too. A
    param group's ``lr`` is a float or a float64 tensor (N,) of per-seed rates (schedules driven by each seed's
    progress)."""

    moments: ClassVar[tuple[str, ...]] = ()
    """The per-element state tensors, named as torch's optimizer names them."""

    def __init__(self, params: Iterable[torch.Tensor], count: int, defaults: dict[str, Any]) -> None:
        """``params``: tensors (``count``, *shape) whose dim 0 is the seed (:meth:`StackedPolicies.parameters`)."""
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
    """Adam (Kingma & Ba, 2015; torch's default form: no weight decay, no AMSGrad) over stacked parameters, with a
    step counter per seed, so a seed can sit out steps (:meth:`step` with ``active``) and still take exactly the
    steps its unbatched run takes: a seed that stopped early (PPO's target KL, a reached stop condition) or whose
    gradient was not finite keeps its weights, moments and bias correction.

    The arithmetic is torch's fused Adam kernel (``torch.optim.Adam(fused=True)``'s): over the stacked tensors at
    once while every seed steps with one count and one rate (the common case), else over the stepping seeds' views
    of them, each with its own count (one call per distinct rate). Measured on PPO CartPole's 8 stacked actor-critics
    (CPU time per step): 0.7 ms with every seed stepping and 2.4 ms with one sitting out, where the elementwise ops
    written out in Python took 4.0 and 4.9 ms. Adam is elementwise, so a seed's step is its unbatched optimizer's.
    :meth:`seed_state_dict` writes one seed's state as ``torch.optim.Adam`` saves its own, so a per-seed checkpoint
    resumes unbatched too.
    """

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
        """``params``: tensors (``count``, *shape) whose dim 0 is the seed (:meth:`StackedPolicies.parameters`).
        ``weight_decay``: AdamW's decoupled decay (``torch.optim.AdamW``'s); ``fused``: False runs torch's
        single-tensor kernel instead, for a stack that must match an unbatched optimizer that is not fused (SAC's
        alpha: the two differ by ulps, which a few hundred steps amplify). Neither enters the saved state: an unbatched
        run sets them on its own optimizer."""
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
