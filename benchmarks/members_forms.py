"""The member-axis update written once (issue 39's groundwork): layers, losses and the optimizer step over a leading
member dimension, each algorithm's loss one function that serves both batched forms of ``members.py``.

Every function here takes parameters with an optional leading member dimension ``*S`` (() or (M,)) and reduces over
the samples' axis only, so the same code runs

- ``bmm``: on the stacked parameters (M, ...) directly, each linear layer one ``torch.baddbmm`` (M = 1 included), the
  members' losses (M,) summed and back-propagated once;
- ``vmap``: on one member's slice under ``torch.func.vmap(torch.func.grad(...))`` (the PyTorch model-ensembling
  recipe: ``stack_module_state`` + a functional forward + ``vmap``), each linear layer ``F.linear``.

:func:`mlp` and :func:`twin` dispatch on the input's rank (3: members stacked; 2: one member, as vmap shows it), so a
layer is one function, not two. :class:`Step` is what follows the loss in both forms: per-member gradient-norm
clipping (the members' norms at once, no ``.item()``) and one fused Adam over the stacked tensors.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributions import Categorical, TanhTransform
from torch.func import grad, stack_module_state, vmap

from rlcore.algos.bc import bc_loss
from rlcore.algos.dqn import dqn_loss
from rlcore.algos.ppo import clipped_surrogate
from rlcore.algos.sac import alpha_loss, box_actor_loss, box_soft_value, critic_td_loss
from rlcore.nets.blocks import EnsembleLinear
from rlcore.nets.policies import SquashedGaussianActor, squashed_gaussian, squashed_sample

Params = dict[str, torch.Tensor]
Batch = dict[str, torch.Tensor]


def stacked(modules: Sequence[nn.Module], prefix: str = "") -> Params:
    """The modules' parameters stacked along a new leading member dimension, as leaf tensors that require grad."""
    params, _ = stack_module_state(list(modules))
    return {prefix + name: value.detach().clone().requires_grad_(True) for name, value in params.items()}


def mlp(params: Params, prefix: str, layers: nn.Sequential, x: torch.Tensor) -> torch.Tensor:
    """``layers`` (``rlcore.nets.blocks.mlp``: Linear and activations) with ``params[prefix.i.weight]``: ``x``
    (M, B, in) with weights (M, out, in) -> one ``baddbmm`` per layer; ``x`` (B, in) (one member) -> ``F.linear``."""
    for index, layer in enumerate(layers):
        if isinstance(layer, nn.Linear):
            weight, bias = params[f"{prefix}.{index}.weight"], params[f"{prefix}.{index}.bias"]
            if x.dim() == 3:
                x = torch.baddbmm(bias.unsqueeze(1), x, weight.transpose(1, 2))
            else:
                x = F.linear(x, weight, bias)
        else:
            x = layer(x)
    return x


def twin(params: Params, prefix: str, layers: nn.ModuleList, x: torch.Tensor) -> torch.Tensor:
    """SAC's twin critics (``TwinQ``'s ensemble layers, weights (*S, 2, in, out)) on ``x`` (*S, B, in) ->
    (*S, 2, B, out): members and twins flattened into one ``baddbmm`` batch."""
    lead, batch = x.shape[:-2], x.shape[-2]
    x = x.unsqueeze(-3).expand(*lead, 2, *x.shape[-2:]).reshape(-1, batch, x.shape[-1])
    for index, layer in enumerate(layers):
        if isinstance(layer, EnsembleLinear):
            weight = params[f"{prefix}.{index}.weight"]
            bias = params[f"{prefix}.{index}.bias"]
            x = torch.baddbmm(bias.reshape(-1, 1, bias.shape[-1]), x, weight.reshape(-1, *weight.shape[-2:]))
        else:
            x = layer(x)
    return x.view(*lead, 2, batch, -1)


# Each loss: (params, batch, constants) -> (loss (*S,), diagnostics (*S, k)); reductions over the samples' axis only.


def ppo_loss(params: Params, batch: Batch, net: nn.Module, cfg: Any, clip: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``PPO.update``'s minibatch loss (scalar value head, vector observations) for one member or M."""
    logits = mlp(params, "actor", net.actor, batch["obs"])
    values = mlp(params, "critic.net", net.critic.net, batch["obs"]).squeeze(-1)
    dist = Categorical(logits=logits, validate_args=False)
    log_ratio = dist.log_prob(batch["actions"]) - batch["log_probs"]
    ratio = log_ratio.exp()
    adv = batch["advantages"]
    adv = (adv - adv.mean(-1, keepdim=True)) / (adv.std(-1, keepdim=True) + 1e-8)
    policy_loss = -clipped_surrogate(ratio, adv, clip, cfg.dual_clip).mean(-1)
    value_loss = (batch["returns"] - values).square().mean(-1)
    entropy = dist.entropy().mean(-1)
    loss = policy_loss + cfg.vf_coef * value_loss - cfg.ent_coef * entropy
    with torch.no_grad():
        kl = ((ratio - 1) - log_ratio).mean(-1)  # the target-KL stop reads this as a mask, not an .item()
    return loss, torch.stack([policy_loss.detach(), value_loss.detach(), entropy.detach(), kl], dim=-1)


def dqn_member_loss(
    params: Params, batch: Batch, target: Params, net: nn.Module, cfg: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    """``DQN.update``'s loss; ``target`` holds the target network's weights (no gradient)."""
    with torch.no_grad():
        next_target = mlp(target, "q", net.q, batch["next_obs"])
        next_online = mlp(params, "q", net.q, batch["next_obs"]) if cfg.double_dqn else None
    loss, q = dqn_loss(mlp(params, "q", net.q, batch["obs"]), next_online, next_target, batch)
    return loss, q.detach().mean(-1, keepdim=True)


def bc_member_loss(params: Params, batch: Batch, net: nn.Module, cfg: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """``BC.update``'s loss for discrete actions (cross-entropy) and its accuracy."""
    loss, accuracy = bc_loss(mlp(params, "logits", net.logits, batch["obs"]), batch["actions"], None, cfg.loss)
    return loss, accuracy.unsqueeze(-1)


def _squashed(params: Params, actor: nn.Module, obs: torch.Tensor, noise: torch.Tensor) -> tuple[Any, Any]:
    mean, log_std = SquashedGaussianActor.mean_log_std(mlp(params, "trunk", actor.trunk, obs))
    return squashed_sample(squashed_gaussian(mean, log_std, [TanhTransform(cache_size=1)]), noise)


def sac_critic_loss(
    critic: Params, batch: Batch, frozen: Params, nets: tuple[nn.Module, nn.Module], cfg: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    """``SAC.critic_step``'s loss (Box actions, vector observations); ``frozen`` holds the actor's weights, the
    targets' (``target.*``) and ``log_alpha``, none trained by this loss."""
    actor, critic_net = nets
    alpha = frozen["log_alpha"].exp()
    with torch.no_grad():
        target = {name[len("target.") :]: value for name, value in frozen.items() if name.startswith("target.")}
        next_actions, next_log_prob = _squashed(frozen, actor, batch["next_obs"], batch["noise"][..., 0, :, :])
        next_in = torch.cat([batch["next_obs"], next_actions], dim=-1)
        next_q = twin(target, "layers", critic_net.layers, next_in).squeeze(-1)
        y = cfg.reward_scale * batch["rewards"] + batch["discounts"] * box_soft_value(next_q, next_log_prob, alpha)
    unit = (batch["actions"] - actor.action_loc) / actor.action_scale
    q = twin(critic, "layers", critic_net.layers, torch.cat([batch["obs"], unit], dim=-1)).squeeze(-1)
    loss = critic_td_loss(q, y)
    return loss, q.detach().flatten(-2).mean(-1, keepdim=True)


def sac_actor_loss(
    actor_params: Params, batch: Batch, frozen: Params, nets: tuple[nn.Module, nn.Module], cfg: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    """``SAC.actor_step``'s loss; the critics (in ``frozen``) give dQ/da only. Diagnostics: the entropy estimate."""
    actor, critic_net = nets
    alpha = frozen["log_alpha"].exp()
    actions, log_prob = _squashed(actor_params, actor, batch["obs"], batch["noise"][..., 1, :, :])
    q_pi = twin(frozen, "layers", critic_net.layers, torch.cat([batch["obs"], actions], dim=-1)).squeeze(-1)
    loss, entropy = box_actor_loss(q_pi, log_prob, alpha)
    return loss, entropy.detach().unsqueeze(-1)


def alpha_backward(log_alpha: torch.Tensor, target_entropy: float, entropy: torch.Tensor) -> None:
    """SAC's temperature loss for every member (``log_alpha`` and ``entropy`` (*S,)), back-propagated."""
    alpha_loss(log_alpha, target_entropy, entropy).sum().backward()


LossFn = Callable[..., tuple[torch.Tensor, torch.Tensor]]


def backward(form: str, loss_fn: LossFn, params: Params, batch: Batch, *constants: Any) -> torch.Tensor:
    """The members' gradients of ``loss_fn`` into ``params[*].grad`` (``form`` ``bmm`` or ``vmap``); returns the
    diagnostics (M, k). ``constants`` are shared by every member (or, for SAC, a dict of stacked tensors)."""
    if form == "bmm":
        losses, aux = loss_fn(params, batch, *constants)
        torch.autograd.backward(losses.sum(), inputs=list(params.values()))
        return aux
    frozen_dims = tuple(0 if isinstance(c, dict) else None for c in constants)

    def one(member: Params, member_batch: Batch, *member_constants: Any) -> tuple[torch.Tensor, torch.Tensor]:
        return loss_fn(member, member_batch, *member_constants)

    grads, aux = vmap(grad(one, has_aux=True), in_dims=(0, 0, *frozen_dims))(
        {name: value.detach() for name, value in params.items()}, batch, *constants
    )
    for name, value in params.items():
        value.grad = grads[name]
    return aux


class Step:
    """What follows the backward pass in both forms: per-member gradient-norm clipping and one optimizer step over
    the stacked tensors (Adam is elementwise, so each member steps as its own optimizer would). Eager: torch's fused
    Adam; ``compiled``: the clipping and a foreach Adam's step under ``torch.compile`` (inductor fuses them)."""

    def __init__(
        self, params: Sequence[torch.Tensor], max_grad_norm: float | None, compiled: bool = False, **adam: Any
    ) -> None:
        self.params, self.max_grad_norm = list(params), max_grad_norm
        kind = torch.optim.AdamW if "weight_decay" in adam else torch.optim.Adam
        self.optimizer = kind(self.params, **({"foreach": True} if compiled else {"fused": True}), **adam)
        self._clip_and_step = torch.compile(self._eager) if compiled else self._eager

    def __call__(self) -> torch.Tensor | None:
        """Clip each member's gradient to its own global norm, step, zero the gradients; returns the norms before
        clipping (M,) (a non-finite one marks a member whose step a single-seed run skips: the design's mask)."""
        norms = self._clip_and_step()
        self.optimizer.zero_grad(set_to_none=True)
        return norms

    def _eager(self) -> torch.Tensor | None:
        norms = None
        if self.max_grad_norm is not None:  # clip_grad_norm_'s arithmetic, every member's norm at once
            grads = [param.grad for param in self.params if param.grad is not None]
            per_tensor = torch.stack([torch.linalg.vector_norm(g.flatten(1), dim=1) for g in grads])
            norms = torch.linalg.vector_norm(per_tensor, dim=0)
            coefficients = torch.clamp(self.max_grad_norm / (norms + 1e-6), max=1.0)
            for g in grads:
                g.mul_(coefficients.view(-1, *([1] * (g.dim() - 1))))
        self.optimizer.step()
        return norms
