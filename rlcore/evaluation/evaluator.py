"""Rollout evaluation: N full episodes, each with its own seed, run side by side in a vector env, with
robust scores (interquartile mean) and a bootstrap confidence interval of the mean.

Which seeds each evaluation uses (periodic, validation, test) is decided in ``rlcore.common.seeds``. A NaN or infinite
observation, reward or return is never scored: it stops with ``rlcore.envs.stepping.NonFiniteError`` naming the env,
the setting, the episode's seed and its step.
"""

from __future__ import annotations

import dataclasses
import functools
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from rlcore.common.errors import ConfigError
from rlcore.envs.actions import to_env_actions
from rlcore.envs.config import EnvConfig
from rlcore.envs.stepping import NonFiniteError, check_finite, finite
from rlcore.envs.vector import EpisodeSettings, make_vector_env, use_settings
from rlcore.nets.policy import Policy

BOOTSTRAP_RESAMPLES = 10_000
"""Resamples of the percentile bootstrap of the mean return."""
BOOTSTRAP_SEED = 0
"""The bootstrap's own RNG seed: the same returns always give the same interval."""


def interquartile_mean(values: list[float] | np.ndarray) -> float:
    """The mean of the middle 50% of the sorted values: ``floor(n/4)`` are cut from each end (rliable's IQM,
    ``scipy.stats.trim_mean(values, 0.25)``). Robust to a few outlying episodes, less noisy than the median."""
    ordered = np.sort(np.asarray(values, dtype=np.float64))
    cut = int(0.25 * len(ordered))
    return float(ordered[cut : len(ordered) - cut].mean())


def bootstrap_interval(
    values: list[float] | np.ndarray,
    confidence: float = 0.95,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean: resample the episodes with replacement ``resamples`` times and
    take the ``(1 - confidence) / 2`` and ``(1 + confidence) / 2`` quantiles of the resampled means. Seeded."""
    data = np.asarray(values, dtype=np.float64)
    rng = np.random.default_rng(seed)
    means = np.empty(resamples, dtype=np.float64)
    chunk = max(1, 2**22 // max(len(data), 1))  # resamples per draw: bounded memory for many episodes
    for start in range(0, resamples, chunk):
        stop = min(start + chunk, resamples)
        means[start:stop] = data[rng.integers(0, len(data), size=(stop - start, len(data)))].mean(axis=1)
    tail = (1.0 - confidence) / 2
    low, high = np.quantile(means, [tail, 1.0 - tail])
    return float(low), float(high)


SCORE_KEYS = (
    "mean_return",
    "iqm_return",
    "ci95_low",
    "ci95_high",
    "std_return",
    "median_return",
    "min_return",
    "max_return",
    "mean_length",
    "episodes",
    "truncated",
)
"""The scores of an evaluation, without its per-episode lists (what metrics and summaries carry)."""


@dataclass(frozen=True)
class EvalResult:
    """Returns and lengths of ``episodes`` complete episodes (undiscounted returns, lengths in env steps).

    ``iqm_return`` is the interquartile mean; ``[ci95_low, ci95_high]`` the 95% percentile-bootstrap interval of
    ``mean_return``; ``truncated`` counts the episodes cut by a time limit or the evaluation's step cap rather than
    ended by the env (CartPole's 500-step episodes are truncated).
    """

    episodes: int
    mean_return: float
    iqm_return: float
    ci95_low: float
    ci95_high: float
    std_return: float
    median_return: float
    min_return: float
    max_return: float
    mean_length: float
    truncated: int
    returns: list[float]
    lengths: list[int]

    @classmethod
    def from_episodes(cls, returns: list[float], lengths: list[int], truncated: int = 0) -> EvalResult:
        values = np.asarray(returns, dtype=np.float64)
        low, high = bootstrap_interval(values)
        return cls(
            episodes=len(returns),
            mean_return=float(values.mean()),
            iqm_return=interquartile_mean(values),
            ci95_low=low,
            ci95_high=high,
            std_return=float(values.std()),
            median_return=float(statistics.median(returns)),
            min_return=float(values.min()),
            max_return=float(values.max()),
            mean_length=float(np.mean(lengths)),
            truncated=int(truncated),
            returns=[float(r) for r in returns],
            lengths=[int(n) for n in lengths],
        )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def scores(self) -> dict[str, Any]:
        """:data:`SCORE_KEYS`: everything but the per-episode lists."""
        return {key: getattr(self, key) for key in SCORE_KEYS}

    def summary(self) -> str:
        return (
            f"{self.mean_return:.1f} (95% CI {self.ci95_low:.1f} to {self.ci95_high:.1f}; "
            f"IQM {self.iqm_return:.1f}) over {self.episodes} episodes"
        )


def episode_cap(env: EnvConfig, max_episode_steps: int | None) -> int:
    """The step cap of every evaluation episode: ``max_episode_steps`` (``eval.max_episode_steps``), else the
    env's time limit; a one-line :class:`ConfigError` when neither exists (an evaluation must end)."""
    if max_episode_steps is not None:
        if max_episode_steps < 1:
            raise ConfigError(f"eval.max_episode_steps: must be >= 1, got {max_episode_steps}")
        return int(max_episode_steps)
    limit = env.time_limit()
    if limit is None:
        raise ConfigError(
            f"eval.max_episode_steps: {env.id} has no time limit (none registered, none in env.kwargs): "
            "set eval.max_episode_steps so evaluation episodes end"
        )
    return limit


def _row_where(where: Callable[[int], str], rows: np.ndarray, index: int) -> str:
    """``where`` of row ``index`` of a selection of rows (``rows``: their indices in the batch)."""
    return where(int(rows[index]))


class Evaluator:
    """Evaluates policies on the same seeded episodes every call, so scores are comparable.

    Episode ``k`` of a call always has seed ``seed + k``: batch ``b`` of at most ``max_parallel_envs`` episodes
    is reset with ``seed + b * batch`` (the vector env adds the sub-env's index). No episode runs longer than
    ``max_episode_steps`` (null: the env's time limit; see :func:`episode_cap`): one that reaches it is
    stopped and counted as truncated.

    Episodes run under ``settings`` (per-episode env parameters, drawn from each episode's seed: the same draws every
    call), by default the training distribution's (``rlcore.envs.vector.training_settings``); ``label`` names them in
    errors (e.g. ``eval setting 'heavy'``).
    """

    def __init__(
        self,
        env: EnvConfig,
        episodes: int,
        seed: int,
        deterministic: bool = True,
        max_parallel_envs: int = 32,
        max_episode_steps: int | None = None,
        settings: EpisodeSettings | None = None,
        label: str = "evaluation",
    ) -> None:
        self.env_id = env.id
        self.label = label
        self.episodes = episodes
        self.seed = seed
        self.deterministic = deterministic
        self.max_episode_steps = episode_cap(env, max_episode_steps)
        self.batch = min(episodes, max_parallel_envs)
        self.env: gym.vector.VectorEnv = make_vector_env(env, self.batch, settings)

    def use_settings(self, settings: EpisodeSettings) -> None:
        """Evaluate under ``settings`` from the next call on (an evaluator built with settings: a curriculum's)."""
        use_settings(self.env, settings)

    @property
    def seeds(self) -> range:
        """The seed of every episode, in order."""
        return range(self.seed, self.seed + self.episodes)

    def close(self) -> None:
        self.env.close()

    @torch.no_grad()
    def evaluate(self, policy: Policy) -> EvalResult:
        generator = torch.Generator().manual_seed(self.seed)
        returns: list[float] = []
        lengths: list[int] = []
        truncated = 0
        while len(returns) < self.episodes:
            wanted = min(self.batch, self.episodes - len(returns))
            batch_returns, batch_lengths, batch_truncated = self._run_batch(policy, self.seed + len(returns), generator)
            returns += batch_returns[:wanted]
            lengths += batch_lengths[:wanted]
            truncated += int(batch_truncated[:wanted].sum())
        return EvalResult.from_episodes(returns, lengths, truncated)

    def _run_batch(
        self, policy: Policy, seed: int, generator: torch.Generator
    ) -> tuple[list[float], list[int], np.ndarray]:
        env = self.env
        obs, _ = env.reset(seed=seed)
        n = env.num_envs
        lengths = np.zeros(n, dtype=np.int64)

        def where(index: int) -> str:
            return f"{self.label}, episode seed {seed + index} (sub-env {index}), episode step {lengths[index]}"

        if not finite(obs):
            check_finite(self.env_id, where, observations=obs)
        totals = np.zeros(n, dtype=np.float64)
        finished = np.zeros(n, dtype=bool)
        cut = np.zeros(n, dtype=bool)
        state = policy.initial_state(n)  # episodes of a batch start together and are never restarted
        with np.errstate(over="ignore"):  # a return that overflows is refused below in one line, not warned about
            while not finished.all():
                obs_tensor = torch.as_tensor(obs, dtype=torch.float32)
                actions, state = policy.act(obs_tensor, state, self.deterministic, generator)
                if not finite(actions.numpy()):  # would come back as NaN observations, blamed on the env
                    check_finite(self.env_id, where, actions=actions.numpy())
                obs, rewards, terminated, truncated, _ = env.step(to_env_actions(actions, env.single_action_space))
                running = ~finished
                if not (finite(obs) and finite(rewards)):  # only running episodes are scored: only theirs count
                    lengths += running  # the step the values came from
                    rows = np.flatnonzero(running)
                    check_finite(self.env_id, functools.partial(_row_where, where, rows), obs[rows], rewards[rows])
                    lengths -= running
                totals[running] += rewards[running]
                lengths[running] += 1
                ended = np.asarray(terminated, dtype=bool)
                stopped = running & ~ended & (np.asarray(truncated, dtype=bool) | (lengths >= self.max_episode_steps))
                cut |= stopped
                finished |= running & ended | stopped
        if not finite(totals):  # finite rewards whose sum overflowed
            index = int(np.flatnonzero(~np.isfinite(totals))[0])
            raise NonFiniteError(
                f"{self.env_id} ({where(index)}): the episode's return is {totals[index]} (its rewards are finite, "
                "their sum is not): scale the rewards down"
            )
        return totals.tolist(), lengths.tolist(), cut
