"""An auxiliary behavioural-cloning loss for on-policy algorithms (``algo.behavioral_cloning``), as ML-Agents has.

PPO and A2C add, to every loss they minimize,

    w(t) * L_bc,    L_bc = -E_{(s, a) ~ D}[log pi(a | s)]     (a minibatch of ``batch_size`` dataset transitions)
    w(t) = strength * max(0, 1 - t / steps)                    (``steps: 0``: w = strength throughout)

where D is a Parquet dataset of our schema (``rlcore.data.schema``, e.g. the ``collect`` stage's) and t the env steps
the run took before the rollout being trained on: the policy is pulled toward the demonstrations early and is free
of them after ``steps`` env steps. The dataset is read whole and checked against this run's spaces when the
algorithm is built (one line on a mismatch); its transitions are sampled with the update's torch generator, so a
run stays reproducible. The env-step counter is a buffer, saved and restored with the algorithm's state.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from pydantic import Field
from torch import nn

from rlcore.common.errors import ConfigError
from rlcore.common.files import sha256_file
from rlcore.common.strict_model import StrictModel
from rlcore.data.demonstrations import check_header, load_demonstrations
from rlcore.nets.policy import Policy

KEY = "algo.behavioral_cloning"


class BehavioralCloningConfig(StrictModel):
    """``algo.behavioral_cloning: {dataset, strength, steps, batch_size}`` (PPO and A2C)."""

    dataset: str
    """The demonstrations: a Parquet dataset of this env (``collect``'s schema), relative to the project."""
    strength: float = Field(0.5, gt=0, le=1000)
    """Weight of the BC loss at the start, relative to the algorithm's own loss."""
    steps: int = Field(50_000, ge=0)
    """Env steps over which the weight decays linearly to 0; 0 keeps it at ``strength`` for the whole run."""
    batch_size: int = Field(256, ge=1)
    """Dataset transitions per gradient step."""


def bc_weight(strength: float, steps: int, env_steps: int) -> float:
    """w(t) = strength * max(0, 1 - t / steps), or ``strength`` when ``steps`` is 0."""
    if steps == 0:
        return strength
    return strength * max(0.0, 1.0 - env_steps / steps)


def check_demonstrations(algo: Any, policy: Policy) -> dict[str, Any]:
    """What can be refused before a run starts (a missing file, metadata naming other spaces, a recurrent policy),
    then the dataset's sha256 for the run's fingerprint (a re-collected dataset starts a fresh run); {} without
    ``algo.behavioral_cloning``. The rows are read and checked when the algorithm is built."""
    config = getattr(algo, "behavioral_cloning", None)
    if config is None:
        return {}
    path = Path(config.dataset)
    _check_header(path, policy)
    return {"behavioral_cloning_sha256": sha256_file(path)}


def _check_header(path: Path, policy: Policy) -> None:
    """A feed-forward policy, and a dataset whose recorded spaces are this run's."""
    if policy.initial_state(1) is not None:
        raise ConfigError(f"{KEY}: needs a feed-forward policy (the dataset's transitions have no recurrent state)")
    check_header(f"{KEY}.dataset", path, policy.observation_space, policy.action_space)


class BCRegularizer(nn.Module):
    """The demonstrations in memory and the schedule's env-step counter (the one saved tensor)."""

    env_steps: torch.Tensor

    def __init__(self, policy: Policy, config: BehavioralCloningConfig) -> None:
        super().__init__()
        self.config = config
        path = Path(config.dataset)
        _check_header(path, policy)
        data = load_demonstrations(f"{KEY}.dataset", path, policy.observation_space, policy.action_space)
        self.obs = torch.from_numpy(data.obs)
        self.actions = torch.from_numpy(data.actions)
        """(N, *obs_shape) and (N,) / (N, k): plain attributes, not buffers, so checkpoints do not carry them."""
        self.register_buffer("env_steps", torch.zeros((), dtype=torch.int64))
        self._losses: list[float] = []

    @classmethod
    def of(cls, policy: Policy, algo: Any) -> BCRegularizer | None:
        """The regularizer ``algo.behavioral_cloning`` asks for, or None."""
        config = getattr(algo, "behavioral_cloning", None)
        return None if config is None else cls(policy, config)

    @property
    def weight(self) -> float:
        return bc_weight(self.config.strength, self.config.steps, int(self.env_steps))

    def loss(self, policy: Policy, generator: torch.Generator) -> torch.Tensor:
        """w(t) * -mean log pi(a | s) over a minibatch of demonstrations (a 0-d tensor; exactly 0 once w is 0)."""
        weight = self.weight
        if weight == 0.0:
            return torch.zeros(())
        rows = torch.randint(len(self.obs), (self.config.batch_size,), generator=generator)
        device = next(policy.parameters()).device
        obs, actions = self.obs[rows].to(device), self.actions[rows].to(device)
        nll = -policy.distribution(obs).log_prob(actions).mean()
        self._losses.append(nll.item())
        return weight * nll

    def end_update(self, env_steps: int) -> dict[str, float]:
        """After an update on a rollout of ``env_steps`` env steps: count them; the update's metrics."""
        metrics = {"bc_weight": self.weight}
        if self._losses:
            metrics["bc_loss"] = sum(self._losses) / len(self._losses)
        self._losses = []
        self.env_steps += env_steps
        return metrics
