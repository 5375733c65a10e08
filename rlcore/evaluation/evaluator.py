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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from rlcore.common.errors import ConfigError
from rlcore.common.numbers import interval_decimals, score
from rlcore.envs.actions import to_env_actions
from rlcore.envs.agent_groups import group_layout
from rlcore.envs.config import EnvConfig
from rlcore.envs.return_reduction import mean_of_acting, reduce_returns
from rlcore.envs.stepping import NonFiniteError, check_finite, finite
from rlcore.envs.turn_based import learner_seat
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


WILSON_Z = 1.959963984540054
"""The standard normal's 0.975 quantile: Wilson intervals are 95% ones."""


def game_outcomes(returns: list[float] | np.ndarray, seats: list[int] | np.ndarray) -> dict[str, Any]:
    """Win, draw and loss rates of a two-player game's episodes (``rlcore.envs.turn_based``): a return above 0 is a
    win, 0 a draw, below 0 a loss; ``seats`` (E,) is the learner's seat in each (0: it moved first).

    Each rate ``p = k / n`` (and ``win_or_draw``'s) comes with its 95% Wilson score interval, ``(p + z²/2n ± z
    sqrt(p(1-p)/n + z²/4n²)) / (1 + z²/n)``, z = 1.96: unlike the normal approximation it stays inside [0, 1] and is
    not empty at 0 or n wins. Returned for all episodes, and apart for those played ``first`` and ``second``."""
    values = np.asarray(returns, dtype=np.float64)
    seat = np.asarray(seats, dtype=np.int64)
    z2 = WILSON_Z**2

    def rates(chosen: np.ndarray) -> dict[str, Any]:
        n = int(len(chosen))
        found: dict[str, Any] = {"episodes": n}
        for name, hits in (
            ("win", chosen > 0),
            ("draw", chosen == 0),
            ("loss", chosen < 0),
            ("win_or_draw", chosen >= 0),
        ):
            if n == 0:
                found[f"{name}_rate"], found[f"{name}_ci95"] = None, None
                continue
            p = float(hits.sum()) / n
            centre = (p + z2 / (2 * n)) / (1 + z2 / n)
            half = WILSON_Z * np.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
            found[f"{name}_rate"] = p
            found[f"{name}_ci95"] = [max(0.0, float(centre - half)), min(1.0, float(centre + half))]
        return found

    return {**rates(values), "first": rates(values[seat == 0]), "second": rates(values[seat == 1])}


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

    A multi-agent env's (``rlcore.envs.multiagent``) ``returns`` are its episodes' scores (``eval.return_reduction``
    of its agents' returns), ``agent_returns`` each agent's returns by name, and an episode's length is its longest
    agent's.
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
    agent_returns: dict[str, list[float]] | None = None
    """Multi-agent envs: agent name -> its return in each episode (E,), 0 in an episode it never acted in; None for a
    single-agent env."""
    group_returns: dict[str, list[float]] | None = None
    """Multi-agent envs with ``policy.groups``: group name -> the mean return of its agents that acted in each
    episode (E,; 0 when none did); None otherwise."""
    outcomes: dict[str, Any] | None = None
    """Two-player games against a fixed opponent: win, draw and loss rates with 95% intervals, for all episodes and
    by seat (:func:`game_outcomes`); None for other envs."""

    @classmethod
    def from_episodes(
        cls,
        returns: list[float],
        lengths: list[int],
        truncated: int = 0,
        agent_returns: dict[str, list[float]] | None = None,
        seats: list[int] | None = None,
        group_returns: dict[str, list[float]] | None = None,
    ) -> EvalResult:
        """``seats``: a two-player game's learner seat in each episode, for :attr:`outcomes`."""
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
            agent_returns=None
            if agent_returns is None
            else {k: [float(r) for r in v] for k, v in agent_returns.items()},
            outcomes=None if seats is None else game_outcomes(values, seats),
            group_returns=None
            if group_returns is None
            else {k: [float(r) for r in v] for k, v in group_returns.items()},
        )

    def to_dict(self) -> dict[str, Any]:
        """Every field; ``agent_returns`` only for a multi-agent env, ``outcomes`` only for a two-player game."""
        fields = dataclasses.asdict(self)
        for key in ("agent_returns", "outcomes", "group_returns"):
            if fields[key] is None:
                del fields[key]
        return fields

    def scores(self) -> dict[str, Any]:
        """:data:`SCORE_KEYS`: everything but the per-episode lists; for a multi-agent env also
        ``agent_mean_returns``, each agent's mean return by name; for a two-player game ``outcomes``."""
        scores = {key: getattr(self, key) for key in SCORE_KEYS}
        if self.agent_returns is not None:
            scores["agent_mean_returns"] = {name: float(np.mean(r)) for name, r in self.agent_returns.items()}
        if self.group_returns is not None:
            scores["group_mean_returns"] = {name: float(np.mean(r)) for name, r in self.group_returns.items()}
        if self.outcomes is not None:
            scores["outcomes"] = self.outcomes
        return scores

    def summary(self) -> str:
        places = interval_decimals(self.mean_return, self.ci95_low, self.ci95_high)
        mean, low, high, iqm = (
            score(x, places) for x in (self.mean_return, self.ci95_low, self.ci95_high, self.iqm_return)
        )
        return f"{mean} (95% CI {low} to {high}; IQM {iqm}) over {self.episodes} episodes"


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

    A multi-agent env's episode runs until all its agents have left; its score is ``return_reduction`` of the
    returns of the agents that acted in it (``rlcore.envs.return_reduction``: an agent absent at reset that joins
    later counts, one that never acts does not), each agent's kept in :attr:`EvalResult.agent_returns` (0 for an
    episode it was absent from).
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
        return_reduction: str = "mean",
        groups: Mapping[str, Sequence[str]] | None = None,
        opponent_key: str = "env.opponent",
    ) -> None:
        """``groups``: ``policy.groups`` (group -> agent-name patterns), whose mean returns are kept and may be the
        ``return_reduction``; None: no groups. ``opponent_key``: the params key of a turn-based game's
        ``env.opponent`` (``eval.opponents.<name>`` when one of those plays it), which its errors name."""
        self.env_id = env.id
        agents = env.agents()
        self.agents: tuple[str, ...] = agents.names if agents is not None else ()
        """A multi-agent env's agents (each a row of every episode's copy of the env); empty for one agent."""
        self.groups = (
            None
            if agents is None or groups is None
            else {g.name: g.agents for g in group_layout(agents, groups, env.id, env.agent_id is not False).groups}
        )
        """Group name -> its agents' indices (``rlcore.envs.agent_groups``); None without groups."""
        self.return_reduction = return_reduction
        self.turn_based = env.turn_based()
        """A two-player game against a fixed opponent: results carry win/draw/loss rates (:func:`game_outcomes`)."""
        self.label = label
        self.episodes = episodes
        self.seed = seed
        self.deterministic = deterministic
        self.max_episode_steps = episode_cap(env, max_episode_steps)
        self.batch = min(episodes, max_parallel_envs)
        self.env: gym.vector.VectorEnv = make_vector_env(env, self.batch, settings, opponent_key=opponent_key)

    def use_settings(self, settings: EpisodeSettings) -> None:
        """Evaluate under ``settings`` from the next call on (an evaluator built with settings: a curriculum's)."""
        use_settings(self.env, settings)

    @property
    def seeds(self) -> range:
        """The seed of every episode, in order."""
        return range(self.seed, self.seed + self.episodes)

    def close(self) -> None:
        self.env.close()

    @property
    def batch_seeds(self) -> list[int]:
        """The reset seed of every batch of at most ``batch`` episodes, in order (episode ``k``'s seed is
        ``seed + k``)."""
        return list(range(self.seed, self.seed + self.episodes, self.batch))

    @torch.no_grad()
    def evaluate(self, policy: Policy) -> EvalResult:
        generator = torch.Generator().manual_seed(self.seed)
        outcomes: list[BatchOutcome] = []
        for seed in self.batch_seeds:
            episodes = EpisodeBatch(self, seed)
            state = policy.initial_state(episodes.size)  # episodes of a batch start together, are never restarted
            while not episodes.done:
                actions, state = policy.act(episodes.observations(), state, self.deterministic, generator)
                episodes.step(actions)
            outcomes.append(episodes.outcome())
        return self.score(outcomes)

    def score(self, outcomes: list[BatchOutcome]) -> EvalResult:
        """The result of one call from the outcomes of its batches (:attr:`batch_seeds`' order)."""
        returns: list[np.ndarray] = []  # (A,) each: every agent's return (one agent: the return)
        acted: list[np.ndarray] = []  # (A,) each: which agents acted in the episode
        lengths: list[int] = []
        truncated = 0
        agents = max(len(self.agents), 1)
        for batch_returns, batch_lengths, batch_truncated, batch_acted in outcomes:
            wanted = min(self.batch, self.episodes - len(returns))
            # Row i * A + a is agent a of episode i: an episode lasts as long as its longest agent.
            returns += list(np.reshape(batch_returns, (-1, agents))[:wanted])
            acted += list(np.reshape(batch_acted, (-1, agents))[:wanted])
            lengths += np.reshape(batch_lengths, (-1, agents)).max(axis=1)[:wanted].tolist()
            cut = np.asarray(np.reshape(batch_truncated, (-1, agents)).any(axis=1))
            truncated += int(cut[:wanted].sum())
        if not self.agents:
            seats = [learner_seat(seed) for seed in self.seeds] if self.turn_based else None
            return EvalResult.from_episodes([float(r[0]) for r in returns], lengths, truncated, seats=seats)
        table, took_part = np.stack(returns), np.stack(acted)  # (E, A) each
        scores = reduce_returns(table, self.agents, self.return_reduction, self.groups, took_part).tolist()
        by_agent = {name: table[:, index].tolist() for index, name in enumerate(self.agents)}
        by_group = (
            None
            if self.groups is None
            else {
                name: mean_of_acting(table[:, list(members)], took_part[:, list(members)]).tolist()
                for name, members in self.groups.items()
            }
        )
        return EvalResult.from_episodes(scores, lengths, truncated, by_agent, group_returns=by_group)


BatchOutcome = tuple[list[float], list[int], np.ndarray, np.ndarray]
"""One batch of episodes: every row's return and length, which rows were truncated, and which acted (a
multi-agent env's agent absent from an episode did not; a single agent always does), (B,) each."""


class EpisodeBatch:
    """One batch of an :class:`Evaluator`'s episodes in its vector env, reset with ``seed`` (sub-env ``i`` with
    ``seed + i``) and stepped until every episode has ended or reached the step cap. Whoever chooses the actions
    (:meth:`Evaluator.evaluate`, ``rlcore.evaluation.batched``) reads :meth:`observations` and calls :meth:`step`
    while not :attr:`done`; a row whose episode is over is stepped on but no longer counted."""

    def __init__(self, evaluator: Evaluator, seed: int) -> None:
        self.evaluator = evaluator
        self.seed = seed
        obs, _ = evaluator.env.reset(seed=seed)
        self.obs: np.ndarray = np.asarray(obs)
        self.size = n = evaluator.env.num_envs
        self.lengths = np.zeros(n, dtype=np.int64)
        if not finite(self.obs):
            check_finite(evaluator.env_id, self.where, observations=self.obs)
        self.totals = np.zeros(n, dtype=np.float64)
        self.finished = np.zeros(n, dtype=bool)
        self.cut = np.zeros(n, dtype=bool)
        self.acted = np.zeros(n, dtype=bool) if evaluator.agents else np.ones(n, dtype=bool)
        """Rows whose agent acted in the episode: a multi-agent env's agent may be absent at reset and join later,
        or never (``rlcore.envs.multiagent``)."""
        self.done = False

    def where(self, index: int) -> str:
        """Row ``index`` in errors: the evaluation, the episode's seed, its sub-env (and agent), its step."""
        agents = self.evaluator.agents
        episode = index // max(len(agents), 1)  # a multi-agent env's rows: each agent of each episode
        agent = f", agent {agents[index % len(agents)]}" if agents else ""
        return (
            f"{self.evaluator.label}, episode seed {self.seed + episode} (sub-env {index}{agent}), "
            f"episode step {self.lengths[index]}"
        )

    def observations(self) -> torch.Tensor:
        """The current observations, (B, *obs_shape) float32."""
        return torch.as_tensor(self.obs, dtype=torch.float32)

    def step(self, actions: torch.Tensor | np.ndarray) -> None:
        """One step of every row with ``actions`` (B,) or (B, action_dim), the policy's convention."""
        evaluator, env = self.evaluator, self.evaluator.env
        actions = np.asarray(actions)
        if not finite(actions):  # would come back as NaN observations, blamed on the env
            check_finite(evaluator.env_id, self.where, actions=actions)
        obs, rewards, terminated, truncated, info = env.step(to_env_actions(actions, env.single_action_space))
        self.obs = obs
        running = ~self.finished
        if evaluator.agents:  # an agent that never acted is over when its copy's episode is
            self.acted |= running & info["valid"]
            self.finished |= running & ~self.acted & info["episode_over"]
            running = ~self.finished
        lengths = self.lengths
        if not (finite(obs) and finite(rewards)):  # only running episodes are scored: only theirs count
            lengths += running  # the step the values came from
            rows = np.flatnonzero(running)
            check_finite(evaluator.env_id, functools.partial(_row_where, self.where, rows), obs[rows], rewards[rows])
            lengths -= running
        with np.errstate(over="ignore"):  # a return that overflows is refused in one line by outcome()
            self.totals[running] += rewards[running]
        lengths[running] += 1
        ended = np.asarray(terminated, dtype=bool)
        stopped = running & ~ended & (np.asarray(truncated, dtype=bool) | (lengths >= evaluator.max_episode_steps))
        self.cut |= stopped
        self.finished |= running & ended | stopped
        self.done = bool(self.finished.all())

    def outcome(self) -> BatchOutcome:
        """Every row's return and length and which were truncated; refuses a return that overflowed."""
        totals = self.totals
        if not finite(totals):  # finite rewards whose sum overflowed
            index = int(np.flatnonzero(~np.isfinite(totals))[0])
            raise NonFiniteError(
                f"{self.evaluator.env_id} ({self.where(index)}): the episode's return is {totals[index]} (its rewards "
                "are finite, their sum is not): scale the rewards down"
            )
        return totals.tolist(), self.lengths.tolist(), self.cut, self.acted
