"""Deep Q-Networks (Mnih et al., 2015) with double-Q targets (van Hasselt et al., 2016) and an optional
dueling head (Wang et al., 2016).

For each gradient step on a replay batch (s, a, R, s', discount):
    a* = argmax_a' Q(s', a')                    (double DQN: the online net picks the action ...)
    y  = R + discount * Q_target(s', a*)        (... the target net values it; plain DQN: max_a' Q_target)
    L  = Huber(Q(s, a) - y)
    every target_update_interval steps: Q_target <- tau * Q + (1 - tau) * Q_target
Acting: epsilon-greedy, epsilon annealed linearly over the first exploration_fraction of the budget.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence
from typing import Literal, cast

import torch
import torch.nn.functional as F
from gymnasium import spaces
from pydantic import Field

from rlcore.algos.base import OffPolicyAlgorithm, OffPolicyConfig
from rlcore.algos.fused_adam import FusedAdam
from rlcore.algos.value_members import Networks, OneNetwork
from rlcore.config.sections import PolicyConfig
from rlcore.nets.policies import QPolicy
from rlcore.objectives.schedules import scheduled


class DQNConfig(OffPolicyConfig):
    name: Literal["dqn"] = "dqn"
    lr: float = Field(1e-3, gt=0)
    """Adam learning rate of the Q-network (constant)."""
    double_dqn: bool = True
    """Double DQN (van Hasselt et al., 2016): the online network picks argmax_a' Q(s', a') and the target network values
    it; false: max_a' Q_target(s', a')."""
    dueling: bool = False
    """Dueling head (Wang et al., 2016): Q(s, a) = V(s) + A(s, a) - mean_a' A(s, a'); false: one output per action."""
    exploration_fraction: float = Field(0.1, gt=0, le=1)
    """Share of ``train.max_steps`` over which epsilon falls from its initial to its final value."""
    exploration_initial_eps: float = Field(1.0, ge=0, le=1)
    """epsilon of epsilon-greedy acting at the start of training (1: uniformly random actions)."""
    exploration_final_eps: float = Field(0.05, ge=0, le=1)
    """epsilon once ``exploration_fraction`` of ``train.max_steps`` is trained, kept to the end."""
    target_update_interval: int = Field(250, ge=1)
    """Gradient steps between target-network updates (with ``tau`` 1, the default: a copy of the online network every
    this many steps)."""


class DQN(OffPolicyAlgorithm[DQNConfig, QPolicy]):
    name = "dqn"
    Config = DQNConfig
    action_spaces = (spaces.Discrete,)
    capabilities = frozenset({"action_mask", "multiagent"})

    def __init__(self, policy: QPolicy, config: DQNConfig) -> None:
        super().__init__(policy, config)
        self.target = copy.deepcopy(policy).requires_grad_(False)
        self.optimizer = dqn_optimizer(policy.parameters(), config)

    @staticmethod
    def make_policy(
        observation_space: spaces.Space, action_space: spaces.Space, config: PolicyConfig, algo: DQNConfig
    ) -> QPolicy:
        return QPolicy(observation_space, action_space, config, dueling=algo.dueling)

    def epsilon(self, progress: float) -> float:
        cfg = self.config
        return scheduled(
            cfg.exploration_initial_eps, "linear", progress / cfg.exploration_fraction, final=cfg.exploration_final_eps
        )

    @torch.no_grad()
    def explore(self, obs: torch.Tensor, progress: float, generator: torch.Generator) -> torch.Tensor:
        return self.policy.sample_action(obs, generator, epsilon=self.epsilon(progress))

    def update(self, batch: dict[str, torch.Tensor], progress: float) -> dict[str, float]:
        return self.update_members(OneNetwork(self, batch), [progress])[0]

    @staticmethod
    def update_members(members: Networks, progress: Sequence[float]) -> list[dict[str, float]]:
        """One gradient step of every member (``rlcore.algos.value_members``: one policy, or N seeds stacked) on its
        batch, and its target network's update when due; member k's epsilon follows ``progress[k]``. Returns each
        member's metrics."""
        cfg = cast(DQNConfig, members.algorithms[0].config)
        with torch.no_grad():
            next_target = members.scores("target", "next_obs")
            next_online = members.scores("online", "next_obs") if cfg.double_dqn else None
        loss, q = dqn_loss(members.scores("online", "obs"), next_online, next_target, members.batch)
        members.step(loss, cfg.max_grad_norm)
        members.update_targets(cfg.target_update_interval, cfg.tau)
        return [
            {"loss": member_loss, "q_mean": q_mean, "epsilon": cast(DQN, algorithm).epsilon(p)}
            for member_loss, q_mean, algorithm, p in zip(
                members.values(loss), members.values(q.mean(-1)), members.algorithms, progress, strict=True
            )
        ]


def dqn_loss(
    q_values: torch.Tensor,
    next_online: torch.Tensor | None,
    next_target: torch.Tensor,
    batch: dict[str, torch.Tensor],
) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss (*S,), Q(s, a) (*S, B)) of one seed's batch or of N seeds' at once (``*S`` = () or (N,)).

    ``q_values``: Q(s, .) (*S, B, n_actions); ``next_target``: Q_target(s', .), same shape; ``next_online``: the
    online net's Q(s', .) (double DQN picks a* with it) or None (plain DQN: the target's max). ``batch``:
    ``actions`` (*S, B) int64, ``rewards`` and ``discounts`` (*S, B). The loss is the Huber loss's mean over the B
    samples."""
    q = q_values.gather(-1, batch["actions"].unsqueeze(-1)).squeeze(-1)
    with torch.no_grad():
        if next_online is not None:
            next_q = next_target.gather(-1, next_online.argmax(dim=-1, keepdim=True)).squeeze(-1)
        else:
            next_q = next_target.max(dim=-1).values
        td_target = batch["rewards"] + batch["discounts"] * next_q
    return F.smooth_l1_loss(q, td_target, reduction="none").mean(-1), q


def dqn_optimizer(parameters: Iterable[torch.Tensor], config: DQNConfig) -> torch.optim.Adam:
    """DQN's optimizer over one policy's ``parameters``: torch's fused Adam, stepped directly (``FusedAdam``). N seeds
    stacked step a ``StackedAdam`` loaded from theirs (``rlcore.algos.value_members.NetworkStack``)."""
    return FusedAdam(parameters, lr=config.lr)
