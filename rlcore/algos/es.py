"""OpenAI evolution strategies (Salimans et al., 2017, "Evolution Strategies as a Scalable Alternative to RL").

The policy's parameters theta (a flat vector: ``parameters_to_vector`` of any of our policies) are the mean of
a Gaussian search distribution. Per iteration, with P = population_size / 2 antithetic pairs:

    offsets o_1..o_P <- uniform windows of the shared noise table (rlcore.algos.noise_table); eps_i = noise[o_i:]
    R_i^+, R_i^- <- the returns of greedy rollouts of theta + sigma * eps_i and theta - sigma * eps_i
                    (pair i's two rollouts start from the same env seed; workers run them, results by offset)
    F <- centered ranks of all 2P returns, in [-0.5, 0.5] (ties share their mean rank)
    g = 1/(2P) * sum_i (F_i^+ - F_i^-) * eps_i              (divided by the number of rollouts; the 1/sigma of the
                                                             estimator is in the learning rate, as in OpenAI's code)
    theta <- optimizer step on -g + weight_decay * theta    (OpenAI's Adam or SGD with momentum,
                                                             rlcore.algos.es_optimizers; weight_decay is l2coeff)
    observation statistics <- merged with each rollout's, in pair order (Welford; when policy.normalize_obs)

This is OpenAI's ``es_distributed`` (``es.py``: ``g /= returns_n2.size``, then
``optimizer.update(-g + config.l2coeff * theta)``; ``optimizers.py``), step for step.

Discrete actions: a categorical actor acting greedily (argmax); bounded Box actions: a deterministic tanh actor.
"""

from __future__ import annotations

from typing import Any, Literal, cast

import numpy as np
import torch
from gymnasium import spaces
from pydantic import Field, field_validator
from torch import nn
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from rlcore.algos.base import PopulationAlgorithm, PopulationConfig
from rlcore.algos.es_optimizers import OpenAIAdam, OpenAISGD
from rlcore.algos.noise_table import noise_rows, noise_table, sample_offsets
from rlcore.algos.population_tasks import PairResults, PerturbedPairs, RolloutResult, RolloutTask
from rlcore.common.errors import CheckpointError, ConfigError
from rlcore.config.sections import PolicyConfig
from rlcore.nets.blocks import ObsNormalizer
from rlcore.nets.policies import CategoricalActor, DeterministicActor, require_bounded
from rlcore.nets.policy import Policy
from rlcore.objectives.schedules import ScheduleName, scheduled

MAX_NOISE_TABLE = 2**28
"""The largest noise table (1 GiB of float32 in every worker process and the learner)."""


class ESConfig(PopulationConfig):
    name: Literal["es"] = "es"
    population_size: int = Field(64, ge=2, le=1_000_000)
    """Rollouts per iteration: population_size / 2 antithetic pairs (even)."""
    pairs_per_task: int = Field(8, ge=1, le=4096)
    """Pairs in one rollout task, run side by side in one worker (the unit that is sent, and re-issued when lost).
    Tasks are the same whatever the number of workers, so results are too."""
    noise_std: float = Field(0.02, gt=0)
    """sigma: the standard deviation of the parameter perturbations."""
    noise_table_size: int = Field(2**24, ge=1, le=MAX_NOISE_TABLE)
    """float32 values in the shared noise table (2**24: 64 MB per process); at least the policy's parameters."""
    noise_seed: int = Field(0, ge=0, lt=2**32)
    """Seeds the noise table: the same table in every process (and in every run with this seed)."""
    optimizer: Literal["adam", "sgd"] = "adam"
    """OpenAI's ``adam``, or OpenAI's ``sgd`` with ``momentum`` (an exponential moving average of the gradient that
    starts at 0; ``rlcore.algos.es_optimizers``)."""
    lr: float = Field(0.01, gt=0)
    """The optimizer's step size at the start of training; the estimator's 1/sigma is folded into it, as in OpenAI's
    code."""
    lr_schedule: ScheduleName = "constant"
    """``linear`` anneals the learning rate to 0 at ``train.max_steps``."""
    momentum: float = Field(0.9, ge=0, lt=1)
    """SGD's momentum (unused by Adam)."""
    weight_decay: float = Field(0.005, ge=0)
    """L2 coefficient: the optimizer steps on ``-g + weight_decay * theta`` (OpenAI's ``l2coeff``)."""
    max_rollout_steps: int | None = Field(None, ge=1)
    """Env steps after which a rollout is aborted (its return so far counts; ``train/aborted_rollouts``); null:
    only the env's own time limit (an env without one needs this)."""

    @field_validator("population_size")
    @classmethod
    def _even(cls, size: int) -> int:
        if size % 2:
            raise ValueError(f"must be even (antithetic pairs), got {size}")
        return size


def centered_ranks(values: np.ndarray) -> np.ndarray:
    """Ranks of ``values`` (any shape) mapped linearly onto [-0.5, 0.5]: the lowest -0.5, the highest 0.5; tied
    values share the mean of their ranks (so mirrored rollouts with equal returns cancel). Same shape, float64."""
    flat = np.asarray(values, dtype=np.float64).reshape(-1)
    _, inverse, counts = np.unique(flat, return_inverse=True, return_counts=True)
    first = np.cumsum(counts) - counts
    ranks = (first + (counts - 1) / 2.0)[inverse]
    return (ranks / (flat.size - 1) - 0.5).reshape(np.shape(values))


def merge_moments(normalizer: ObsNormalizer, count: int, mean: np.ndarray, var: np.ndarray) -> None:
    """Merge ``count`` observations with ``mean`` and (population) ``var`` into the normalizer's statistics
    (Chan et al.'s parallel update, as ``ObsNormalizer.update`` does for a batch)."""
    if count == 0:
        return
    batch_mean = torch.as_tensor(mean, dtype=torch.float64)
    batch_var = torch.as_tensor(var, dtype=torch.float64)
    with torch.no_grad():
        delta = batch_mean - normalizer.mean
        total = normalizer.count + count
        m2 = normalizer.var * normalizer.count + batch_var * count + delta.square() * normalizer.count * count / total
        normalizer.mean += delta * count / total
        normalizer.var.copy_(m2 / total)
        normalizer.count.copy_(total)


class ES(PopulationAlgorithm[ESConfig, Policy]):
    name = "es"
    Config = ESConfig
    action_spaces = (spaces.Discrete, spaces.Box)

    def __init__(self, policy: Policy, config: ESConfig) -> None:
        super().__init__(policy, config)
        self.theta = nn.Parameter(parameters_to_vector(policy.parameters()).detach().clone())
        """The search distribution's mean, the optimizer's one parameter; ``policy`` holds the same values."""
        self.optimizer: torch.optim.Optimizer
        if config.optimizer == "adam":
            self.optimizer = OpenAIAdam([self.theta], lr=config.lr)
        else:
            self.optimizer = OpenAISGD([self.theta], lr=config.lr, momentum=config.momentum)

    @staticmethod
    def make_policy(
        observation_space: spaces.Space, action_space: spaces.Space, config: PolicyConfig, algo: ESConfig
    ) -> Policy:
        policy: Policy
        if isinstance(action_space, spaces.Discrete):
            policy = CategoricalActor(observation_space, action_space, config)
        else:
            require_bounded(action_space, "es")
            policy = DeterministicActor(observation_space, action_space, config)
        dim = sum(p.numel() for p in policy.parameters())
        if dim > algo.noise_table_size:
            raise ConfigError(
                f"algo.noise_table_size: must hold at least the policy's {dim:,} parameters, "
                f"got {algo.noise_table_size:,}"
            )
        return policy

    @classmethod
    def check_params(cls, params: Any) -> None:
        if params.algo.max_rollout_steps is None and params.env.time_limit() is None:
            raise ConfigError(
                f"algo.max_rollout_steps: {params.env.id} has no time limit: set a rollout step budget so rollouts end"
            )

    def members(self) -> list[Policy]:
        return [self.policy]

    def ask(self, seed: int, first_env_seed: int) -> list[RolloutTask]:
        cfg = self.config
        pairs = cfg.population_size // 2
        offsets = sample_offsets(np.random.default_rng(seed), pairs, cfg.noise_table_size, self.theta.numel())
        return [
            PerturbedPairs(
                first_pair=first,
                offsets=tuple(int(o) for o in offsets[first : first + cfg.pairs_per_task]),
                env_seed=first_env_seed + first,
                noise_std=cfg.noise_std,
                noise_seed=cfg.noise_seed,
                noise_table_size=cfg.noise_table_size,
                max_steps=cfg.max_rollout_steps,
            )
            for first in range(0, pairs, cfg.pairs_per_task)
        ]

    def tell(self, tasks: list[RolloutTask], results: list[RolloutResult], progress: float) -> dict[str, float]:
        cfg = self.config
        pair_tasks = cast(list[PerturbedPairs], tasks)
        pair_results = cast(list[PairResults], results)
        offsets = [offset for task in pair_tasks for offset in task.offsets]
        returns = np.concatenate([result.returns for result in pair_results])  # (P, 2), in pair order
        ranks = centered_ranks(returns)
        eps = noise_rows(noise_table(cfg.noise_seed, cfg.noise_table_size), offsets, self.theta.numel())
        # Divided by the number of rollouts (2 per pair), as OpenAI's ``g /= returns_n2.size``.
        gradient = torch.from_numpy((ranks[:, 0] - ranks[:, 1]) @ eps / returns.size).float()  # (dim,)

        lr = scheduled(cfg.lr, cfg.lr_schedule, progress)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        with torch.no_grad():
            self.theta.copy_(parameters_to_vector(self.policy.parameters()))
        before = self.theta.detach().clone()
        self.optimizer.zero_grad(set_to_none=True)
        if bool(torch.isfinite(gradient).all()):
            # The optimizer descends; ES ascends the returns. The L2 term as OpenAI's: on theta, outside the optimizer.
            self.theta.grad = -gradient + cfg.weight_decay * self.theta.detach()
            self.optimizer.step()
            self.consecutive_skips = 0
            vector_to_parameters(self.theta.detach(), self.policy.parameters())
        else:  # a non-finite return: never step on it (the session stops a run that keeps doing this)
            self._skip()
        self.gradient_steps += 1
        self.iterations += 1

        normalizer = self.policy.obs_normalizer
        if normalizer.enabled:  # after the step: this iteration's rollouts acted with the statistics before it
            for result in pair_results:
                for pair in range(len(result.returns)):
                    for sign in (0, 1):
                        merge_moments(
                            normalizer,
                            int(result.lengths[pair, sign]),
                            result.obs_mean[pair, sign],
                            result.obs_var[pair, sign],
                        )

        aborted = sum(int(result.aborted.sum()) for result in pair_results)
        step = self.theta.detach() - before
        return {
            "return_mean": float(returns.mean()),
            "return_max": float(returns.max()),
            "return_min": float(returns.min()),
            "gradient_norm": float(gradient.norm()),
            "update_ratio": float(step.norm() / before.norm().clamp_min(1e-12)),
            "weights_norm": float(self.theta.detach().norm()),
            "aborted_rollouts": float(aborted),
            "learning_rate": lr,
        }

    def state_dict(self) -> dict[str, Any]:
        return {
            **super().state_dict(),
            "noise_table": {"seed": self.config.noise_seed, "size": self.config.noise_table_size},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        saved = state["noise_table"]
        expected = {"seed": self.config.noise_seed, "size": self.config.noise_table_size}
        if {key: int(value) for key, value in saved.items()} != expected:
            raise CheckpointError(f"the checkpoint's noise table {saved} is not this run's {expected}")
        super().load_state_dict(state)
