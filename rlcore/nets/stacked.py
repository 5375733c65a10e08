"""N members' networks of one architecture stacked along a leading member dimension, and their optimizers.

:class:`StackedModules` is the one stacked form every family uses: named parts (each member's module, stacked
parameters and buffers (M, *shape)), each ``nn.Linear`` of an MLP one ``torch.baddbmm`` (:meth:`StackedPolicies.mlp`:
(M, B, in) -> (M, B, out)), the members' own optimizers as one :class:`StackedOptimizer` each, member k written back
into its own modules and optimizers. :func:`stacking_problem` is the one rule of what stacks; :func:`masked_step` is
the members' optimizer step. Why ``baddbmm`` and not ``torch.func.vmap``: ``docs/members-design.md``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, ClassVar, Generic, Protocol, TypeVar, cast

import torch
from torch import nn
from torch.func import stack_module_state
from torch.optim.adam import adam

PolicyT = TypeVar("PolicyT", bound=nn.Module)


class StackedPolicies(Generic[PolicyT]):
    """N modules of one architecture with their parameters and buffers stacked along dim 0 (the member).

    ``params``: leaf tensors (N, *shape) that require grad; ``buffers`` (normalizer statistics, fixed supports) are
    stacked too. The modules given are copied, not kept: training changes the stacked tensors only."""

    def __init__(self, policies: Sequence[PolicyT]) -> None:
        if not policies:
            raise ValueError("policies: expected at least one policy")
        kinds = {type(policy) for policy in policies}
        if len(kinds) != 1:
            raise ValueError(f"policies: expected one class, got {sorted(kind.__name__ for kind in kinds)}")
        self.count = len(policies)
        """N, the number of stacked members."""
        # The architecture only, on the meta device: a name missing from the stacked dicts fails loudly.
        self.template: PolicyT = copy.deepcopy(policies[0]).to("meta")
        params, buffers = stack_module_state(list(policies))
        self.params: dict[str, torch.Tensor] = params
        self.buffers: dict[str, torch.Tensor] = buffers

    def parameters(self) -> list[torch.Tensor]:
        """The stacked parameters, (N, *shape) each, in the module's ``named_parameters`` order."""
        return list(self.params.values())

    def clip_grad_norms_(self, max_norm: float) -> torch.Tensor:
        """Clip each member's gradient to the global 2-norm ``max_norm`` (:func:`clip_member_grad_norms_`); returns
        the norms before clipping, (N,)."""
        return clip_member_grad_norms_(self.parameters(), self.count, max_norm)

    def mlp(self, name: str, x: torch.Tensor) -> torch.Tensor:
        """The ``nn.Sequential`` MLP ``name`` (``rlcore.nets.blocks.mlp``'s, e.g. ``"actor"``, ``"critic.net"``) of
        every member: ``x`` (N, B, in) -> (N, B, out), each ``nn.Linear`` one ``torch.baddbmm``. Differentiable."""
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

    @torch.no_grad()
    def write_weights(self, k: int, module: nn.Module) -> None:
        """Member ``k``'s stacked parameters into ``module`` (its buffers are left: the module keeps them)."""
        for name, param in module.named_parameters():
            param.copy_(self.params[name][k])

    @torch.no_grad()
    def load_buffers(self, k: int, module: nn.Module) -> None:
        """``module``'s buffers (its normalizer's statistics) into member ``k``'s stacked buffers."""
        for name, buffer in module.named_buffers():
            if name in self.buffers:
                self.buffers[name][k].copy_(buffer)


def stacking_problem(
    module: nn.Module, kinds: Collection[type[nn.Module]], refused: Mapping[str, Callable[[Any], bool]]
) -> str | None:
    """Why N members' ``module`` do not stack, or None: the one rule is an MLP head (a class in ``kinds``) on an
    encoder without weights; ``refused`` states what else a family leaves to each member's own module (a
    description -> whether it applies to ``module``), tested in order."""
    if type(module) not in kinds:
        return f"a {type(module).__name__}"
    problem = next((reason for reason, applies in refused.items() if applies(module)), None)
    encoder = getattr(module, "encoder", None)
    if problem is None and encoder is not None and any(True for _ in encoder.parameters()):
        return "an encoder with weights"
    return problem


class SkipCounts(Protocol):
    """An algorithm's counters of skipped optimizer steps (``rlcore.algos.base.Algorithm``'s)."""

    skipped_steps: int
    consecutive_skips: int


class StackedModules:
    """N members stacked: each part (``parts[name]``: each member's module of one architecture) a
    :class:`StackedPolicies`, each member's loose tensors (``tensors[name]``: SAC's log alpha) stacked as leaves
    (N, *shape), and each optimizer (``optimizers[name]``: each member's own, and the parts and tensors it steps)
    one :func:`stacked_optimizer` with each member's state loaded from its own. The members' modules, tensors and
    optimizers are kept: :meth:`write_weights` and :meth:`write_optimizers` put member k's state back into them."""

    def __init__(
        self,
        parts: Mapping[str, Sequence[nn.Module]],
        optimizers: Mapping[str, tuple[Sequence[torch.optim.Optimizer], Sequence[str]]] | None = None,
        tensors: Mapping[str, Sequence[torch.Tensor]] | None = None,
    ) -> None:
        self.members = {name: list(modules) for name, modules in parts.items()}
        self.parts: dict[str, StackedPolicies[nn.Module]] = {name: StackedPolicies(m) for name, m in parts.items()}
        self.count = len(next(iter(self.members.values())))
        """N."""
        normalizers = [getattr(module, "obs_normalizer", None) for own in parts.values() for module in own]
        self.same_features = not any(normalizer is not None and normalizer.enabled for normalizer in normalizers)
        """Whether every member's features are one function of its observations (no normalizer statistics)."""
        self.own_tensors = {name: list(own) for name, own in (tensors or {}).items()}
        self.tensors = {
            name: torch.stack([tensor.detach() for tensor in own]).requires_grad_(own[0].requires_grad)
            for name, own in self.own_tensors.items()
        }
        self.own_optimizers = {name: list(own) for name, (own, _) in (optimizers or {}).items()}
        self.optimizers = {
            name: stacked_optimizer([param for part in steps for param in self.parameters(part)], own)
            for name, (own, steps) in (optimizers or {}).items()
        }

    def parameters(self, name: str) -> list[torch.Tensor]:
        """The stacked parameters of part or tensor ``name``, (N, *shape) each."""
        return [self.tensors[name]] if name in self.tensors else self.parts[name].parameters()

    def head(self, part: str, mlp: str, inputs: Sequence[torch.Tensor]) -> torch.Tensor:
        """Each member's MLP ``mlp`` of part ``part`` on its own module's ``features`` of ``inputs[k]`` (B, ...): (N,
        B, out). The features (encoders without weights, each member's normalizer statistics) carry no gradient."""
        with torch.no_grad():
            functions = [cast(Callable[[torch.Tensor], torch.Tensor], module.features) for module in self.members[part]]
            features = each_member(functions, inputs, self.same_features)
        return self.parts[part].mlp(mlp, features)

    def step(
        self, name: str, losses: torch.Tensor, present: Sequence[bool], clip: float | None, by: Sequence[SkipCounts]
    ) -> None:
        """One :func:`masked_step` of optimizer ``name`` on the members' ``losses`` (N,) for those ``present``, each
        gradient clipped to ``clip``, each member's skipped step counted on its algorithm in ``by``."""
        mask = None if all(present) else torch.tensor(list(present))
        count_skips(by, masked_step(self.optimizers[name], losses, mask, clip), present)

    @torch.no_grad()
    def update_target(self, target: str, source: str, due: Sequence[bool], tau: float) -> None:
        """``polyak_update`` of part ``target`` toward part ``source`` for the members ``due`` (N,): the stacked
        parameters in one ``torch._foreach_*`` call, each due member's own buffers copied."""
        members = [k for k, is_due in enumerate(due) if is_due]
        targets, sources = self.parts[target].parameters(), self.parts[source].parameters()
        if not members:
            return
        if len(members) < self.count:  # only the due members' slices
            targets = [tensor[k] for k in members for tensor in targets]
            sources = [tensor[k] for k in members for tensor in sources]
        if tau >= 1.0:
            torch._foreach_copy_(targets, sources)
        else:
            torch._foreach_lerp_(targets, sources, tau)
        for k in members:
            buffers = zip(self.members[target][k].buffers(), self.members[source][k].buffers(), strict=True)
            for target_buffer, source_buffer in buffers:
                target_buffer.copy_(source_buffer)

    @torch.no_grad()
    def write_weights(self, k: int) -> None:
        """Member ``k``'s stacked parameters and tensors into its own modules and tensors."""
        for name, stacked in self.parts.items():
            stacked.write_weights(k, self.members[name][k])
        for name, tensor in self.tensors.items():
            self.own_tensors[name][k].copy_(tensor[k])

    def write_optimizers(self, k: int) -> None:
        """Member ``k``'s optimizer states and learning rates into its own optimizers (what its checkpoint saves)."""
        for name, stacked in self.optimizers.items():
            stacked.write_seed(k, self.own_optimizers[name][k])

    def load_buffers(self, k: int) -> None:
        """Member ``k``'s own modules' buffers (normalizer statistics) into the stacked buffers."""
        for name, stacked in self.parts.items():
            stacked.load_buffers(k, self.members[name][k])


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


def each_member(
    functions: Sequence[Callable[[torch.Tensor], torch.Tensor]], inputs: Sequence[torch.Tensor], same: bool
) -> torch.Tensor:
    """Each member's ``functions[k]`` of its ``inputs[k]`` (B, ...), stacked: (M, B, ...). ``same``: every member's
    function is one function (an encoder without weights or statistics), run once over every member's rows."""
    if not same:
        return torch.stack([function(x) for function, x in zip(functions, inputs, strict=True)])
    x = torch.stack(list(inputs))
    out = functions[0](x.flatten(0, 1))
    return out.view(x.shape[0], x.shape[1], *out.shape[1:])


@torch.no_grad()
def clip_member_grad_norms_(parameters: Sequence[torch.Tensor], count: int, max_norm: float) -> torch.Tensor:
    """Clip each member's gradient (the slices [k] of the stacked ``parameters``' gradients, (M, *shape)) to the
    global 2-norm ``max_norm`` over that member's slices, with ``nn.utils.clip_grad_norm_``'s arithmetic and
    summation order (a norm per tensor, their norm; SAC's clipped runs amplify an ulp there). Returns the norms
    before clipping, (M,): a non-finite one marks a member whose step a one-member run would skip."""
    grads = [param.grad for param in parameters if param.grad is not None]
    if not grads:
        return torch.zeros(count)
    per_tensor = torch.stack([torch.linalg.vector_norm(grad.reshape(count, -1), dim=1) for grad in grads], dim=1)
    norms = torch.linalg.vector_norm(per_tensor, dim=1)
    coefficients = torch.clamp(max_norm / (norms + 1e-6), max=1.0)
    for grad in grads:
        grad.mul_(coefficients.view(-1, *([1] * (grad.dim() - 1))))
    return norms


def count_skips(members: Sequence[SkipCounts], applied: Sequence[bool], present: Sequence[bool] | None = None) -> None:
    """Each member's optimizer step counted as ``Algorithm.apply_gradients`` counts its own (a skip adds to
    ``skipped_steps`` and ``consecutive_skips``, a step taken resets ``consecutive_skips``); a member not
    ``present`` (None: every one is) took no part and is not counted."""
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
    the loss is finite (the others' replaced by 0: no NaN reaches another member's slices). Returns those, (M,)."""
    backward = torch.isfinite(losses.detach())
    if present is not None:
        backward &= present
    torch.where(backward, losses, 0.0).sum().backward()
    return backward


def masked_optimizer_step(
    optimizer: StackedOptimizer, taking: torch.Tensor, max_grad_norm: float | None = None
) -> list[bool]:
    """One step of ``optimizer`` for the members ``taking`` it ((M,) bool), each member's gradient clipped to its own
    ``max_grad_norm`` (None: not clipped); a member whose norm is not finite sits out. Returns each one's
    ``applied`` (one host read)."""
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
