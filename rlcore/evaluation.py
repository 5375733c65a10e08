"""Rollout evaluation: N full episodes on seeded envs, run side by side in a vector env."""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from rlcore.actions import to_env_actions
from rlcore.config import EnvConfig
from rlcore.envs import make_vector_env
from rlcore.policies import Policy


@dataclass(frozen=True)
class EvalResult:
    """Returns and lengths of ``episodes`` complete episodes (undiscounted returns, lengths in env steps)."""

    episodes: int
    mean_return: float
    std_return: float
    median_return: float
    min_return: float
    max_return: float
    mean_length: float
    returns: list[float]
    lengths: list[int]

    @classmethod
    def from_episodes(cls, returns: list[float], lengths: list[int]) -> EvalResult:
        values = np.asarray(returns, dtype=np.float64)
        return cls(
            episodes=len(returns),
            mean_return=float(values.mean()),
            std_return=float(values.std()),
            median_return=float(statistics.median(returns)),
            min_return=float(values.min()),
            max_return=float(values.max()),
            mean_length=float(np.mean(lengths)),
            returns=[float(r) for r in returns],
            lengths=[int(n) for n in lengths],
        )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def summary(self) -> str:
        return f"{self.mean_return:.1f} ± {self.std_return:.1f} over {self.episodes} episodes"


class Evaluator:
    """Evaluates policies on the same seeded episodes every call, so scores are comparable.

    Episode ``i`` of a call always starts from the same state: batch ``b`` of at most
    ``max_parallel_envs`` episodes is reset with seed ``seed + b``.
    """

    def __init__(
        self,
        env: EnvConfig,
        episodes: int,
        seed: int,
        deterministic: bool = True,
        max_parallel_envs: int = 32,
    ) -> None:
        self.episodes = episodes
        self.seed = seed
        self.deterministic = deterministic
        self.batch = min(episodes, max_parallel_envs)
        self.env: gym.vector.VectorEnv = make_vector_env(env, self.batch)

    def close(self) -> None:
        self.env.close()

    @torch.no_grad()
    def evaluate(self, policy: Policy) -> EvalResult:
        generator = torch.Generator().manual_seed(self.seed)
        returns: list[float] = []
        lengths: list[int] = []
        batch_index = 0
        while len(returns) < self.episodes:
            wanted = min(self.batch, self.episodes - len(returns))
            batch_returns, batch_lengths = self._run_batch(policy, self.seed + batch_index, generator)
            returns += batch_returns[:wanted]
            lengths += batch_lengths[:wanted]
            batch_index += 1
        return EvalResult.from_episodes(returns, lengths)

    def _run_batch(self, policy: Policy, seed: int, generator: torch.Generator) -> tuple[list[float], list[int]]:
        env = self.env
        obs, _ = env.reset(seed=seed)
        n = env.num_envs
        totals = np.zeros(n, dtype=np.float64)
        lengths = np.zeros(n, dtype=np.int64)
        finished = np.zeros(n, dtype=bool)
        state = policy.initial_state(n)  # episodes of a batch start together and are never restarted
        while not finished.all():
            obs_tensor = torch.as_tensor(obs, dtype=torch.float32)
            actions, state = policy.act(obs_tensor, state, self.deterministic, generator)
            obs, rewards, terminated, truncated, _ = env.step(to_env_actions(actions, env.single_action_space))
            running = ~finished
            totals[running] += rewards[running]
            lengths[running] += 1
            finished |= np.asarray(terminated) | np.asarray(truncated)
        return totals.tolist(), lengths.tolist()
