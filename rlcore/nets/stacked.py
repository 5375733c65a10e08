"""N members' networks of one architecture stacked along a leading member dimension, and their optimizers.

:class:`StackedModules` is the one stacked form every family uses: named parts (each member's module, stacked
parameters and buffers (M, *shape)), each ``nn.Linear`` of an MLP one ``torch.baddbmm`` and each tanh
:func:`stacked_tanh` (:meth:`StackedPolicies.mlp`: (M, B, in) -> (M, B, out)), the members' own optimizers as one each
(``rlcore.nets.stacked_optimizers``), member k written back into its own modules and optimizers. :func:`unstackable`
is the one rule of what stacks; :func:`masked_step` the members' optimizer step (a member absent, or whose loss or
gradient norm is not finite, sits out while the others step).
Why ``baddbmm`` and not ``torch.func.vmap``: ``docs/members-design.md``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, Generic, Protocol, TypeVar, cast

import torch
from torch import nn
from torch.func import stack_module_state

from rlcore.nets.stacked_optimizers import StackedOptimizer, stacked_optimizer

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
        self._mlps: dict[str, list[str | nn.Module]] = {}

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
        for layer in self._layers(name):
            if isinstance(layer, str):
                weight = self.params[f"{layer}.weight"]  # (N, out, in)
                bias = self.params[f"{layer}.bias"]  # (N, out)
                x = torch.baddbmm(bias.unsqueeze(1), x, weight.transpose(1, 2))
            elif type(layer) is nn.Tanh:
                x = stacked_tanh(x)
            else:
                x = layer(x)  # an activation
        return x

    def _layers(self, name: str) -> list[str | nn.Module]:
        """The layers of the MLP ``name``: an ``nn.Linear`` as its parameters' prefix, an activation as itself. Read
        from the template once per name (walking its modules at every call cost ~10% of a stacked PPO update)."""
        if name not in self._mlps:
            module = self.template.get_submodule(name)
            if not isinstance(module, nn.Sequential):
                raise TypeError(f"{name}: expected an nn.Sequential MLP, got {type(module).__name__}")
            layers: list[str | nn.Module] = []
            for index, layer in enumerate(module):
                if isinstance(layer, nn.Linear):
                    layers.append(f"{name}.{index}")
                elif any(True for _ in layer.parameters()) or any(True for _ in layer.buffers()):
                    raise TypeError(
                        f"{name}.{index}: only nn.Linear layers may hold tensors, got {type(layer).__name__}"
                    )
                else:
                    layers.append(layer)
            self._mlps[name] = layers
        return self._mlps[name]

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


def stacked_tanh(x: torch.Tensor) -> torch.Tensor:
    """tanh of the members' activations (M, B, width) as ``2 sigmoid(2x) - 1``; differentiable.

    Why not ``torch.tanh``: on CPU it runs SLEEF's 1-ulp tanh, ~5x the cost of a sigmoid here (torch 2.13, AVX-512,
    one thread: 337 us for 8 x 256 x 64 floats against 63 us for a sigmoid and 89 us this way, 438 against 207 us
    with the backward pass), and the members' stacked activations are large enough for that to show (under cProfile
    the tanh calls took 2.56 s of 8 PPO CartPole seeds' run, which takes ~12 CPU s unprofiled). The sigmoid form is
    within 1.8e-7 of tanh in absolute terms (tanh itself within 3e-8 of float64), well inside the member contract's
    tolerance. One member's own modules keep ``torch.tanh``: on its rows (an acting step's 16, a minibatch's 256)
    the two cost the same with the backward pass, and its results stay as they were."""
    if torch.is_grad_enabled() and x.requires_grad:
        return cast(torch.Tensor, _SigmoidTanh.apply(x))
    return _sigmoid_tanh(x)


def _sigmoid_tanh(x: torch.Tensor) -> torch.Tensor:
    y = x.mul(2)  # in place from here: one buffer, three more passes over it
    y.sigmoid_()
    return y.mul_(2).sub_(1)


class _SigmoidTanh(torch.autograd.Function):
    """:func:`_sigmoid_tanh` with tanh's own backward, ``grad (1 - y^2)`` in one kernel (autograd through the four
    ops would take four)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        y = _sigmoid_tanh(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        (y,) = ctx.saved_tensors
        return torch.ops.aten.tanh_backward(grad, y)


def unstackable(
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

    def head(self, part: str, mlp: str, inputs: Sequence[torch.Tensor] | torch.Tensor) -> torch.Tensor:
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


def each_member(
    functions: Sequence[Callable[[torch.Tensor], torch.Tensor]],
    inputs: Sequence[torch.Tensor] | torch.Tensor,
    same: bool,
) -> torch.Tensor:
    """Each member's ``functions[k]`` of its ``inputs[k]`` (B, ...; or all of them stacked, (M, B, ...)), stacked:
    (M, B, ...). ``same``: every member's function is one function (an encoder without weights or statistics), run
    once over every member's rows."""
    if not same:
        return torch.stack([function(x) for function, x in zip(functions, inputs, strict=True)])
    x = inputs if isinstance(inputs, torch.Tensor) else torch.stack(list(inputs))
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
