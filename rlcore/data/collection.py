"""Roll out a policy (or uniformly random actions) over a vector env and stream the episodes to a dataset."""

from __future__ import annotations

import logging
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from tqdm import tqdm

from rlcore.common.numbers import score
from rlcore.data.writer import DatasetWriter
from rlcore.envs.action_masks import legal_actions, random_legal_actions
from rlcore.envs.actions import random_actions, sub_action_sizes
from rlcore.envs.agent_groups import group_layout
from rlcore.envs.config import EnvConfig
from rlcore.envs.observations import obs_tensor
from rlcore.envs.stepping import VectorStepper
from rlcore.envs.vector import describe_space, make_vector_env
from rlcore.nets.policy import Policy, reset_state

log = logging.getLogger("rlcore")


EpisodeArrays = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]
"""obs, actions, rewards, next_obs, terminated, truncated, log_probs of one episode (T rows each)."""


class _Episode:
    """The transitions of one env's episode in progress."""

    def __init__(self) -> None:
        self.rows: list[tuple[np.ndarray, Any, float, np.ndarray, bool, bool, float]] = []

    def arrays(self, force_truncated: bool) -> EpisodeArrays:
        obs, actions, rewards, next_obs, terminated, truncated, log_probs = (
            np.asarray(c) for c in zip(*self.rows, strict=True)
        )
        truncated = truncated.copy()
        if force_truncated:
            truncated[-1] = True
        return obs, actions, rewards, next_obs, terminated, truncated, log_probs


def random_log_prob(action_space: spaces.Space) -> float:
    """log-probability of any action under the uniform policy (of :func:`rlcore.envs.actions.random_actions`)."""
    if isinstance(action_space, spaces.Discrete):
        return -math.log(int(action_space.n))
    sizes = sub_action_sizes(action_space)
    if sizes is not None:  # independent uniform sub-actions
        return -float(np.sum(np.log(sizes)))
    assert isinstance(action_space, spaces.Box)
    return -float(np.sum(np.log(action_space.high - action_space.low)))


@dataclass(frozen=True)
class CollectionPlan:
    """How :func:`collect_dataset` rolls out: how many envs, how much (``steps`` transitions or ``episodes``
    episodes, the other None), how it picks actions, its seed, and the Parquet row groups' size."""

    num_envs: int
    steps: int | None
    episodes: int | None
    epsilon: float
    """The probability of replacing each action by a uniformly random one."""
    deterministic: bool
    seed: int
    row_group_size: int


def collect_dataset(
    path: Path,
    env_config: EnvConfig,
    policy: Policy | None,
    provenance: dict[str, Any],
    plan: CollectionPlan,
    extra_metadata: dict[str, Any] | None = None,
    groups: Mapping[str, Sequence[str]] | None = None,
) -> dict[str, Any]:
    """Collect ``plan.steps`` transitions or ``plan.episodes`` episodes into the Parquet file ``path``; returns its
    metadata.

    ``policy`` None means uniformly random actions. With ``plan.epsilon`` > 0, each action is replaced by a random
    one with that probability (log-probabilities are then unknown and left null). A PettingZoo Parallel env's
    ``plan.num_envs`` copies step every agent (``rlcore.envs.multiagent``): each agent's part of an episode is an
    episode of the dataset, its rows named by the ``agent`` column (``rlcore.data.schema``); ``plan.steps`` counts
    agent steps. ``groups`` (``policy.groups``: group name -> agent-name patterns) adds each row's agent's group in
    the ``group`` column and the groups' agents to the metadata (:func:`group_members`).
    """
    num_envs, epsilon, deterministic, seed = plan.num_envs, plan.epsilon, plan.deterministic, plan.seed
    members = group_members(env_config, groups)  # before the env: a misfit is refused with nothing to close
    env = make_vector_env(env_config, num_envs)
    action_space = env.single_action_space
    rng = np.random.default_rng(seed)
    generator = torch.Generator().manual_seed(seed)
    metadata = {
        "env": env_record(env_config),
        "observation_space": describe_space(env.single_observation_space),
        "action_space": describe_space(action_space),
        "policy": {**provenance, "epsilon": epsilon, "deterministic": deterministic},
        "seed": seed,
        "num_envs": num_envs,
        **(extra_metadata or {}),
    }
    # Observations are written in their storage dtype: uint8 frames as bytes (rlcore.data.schema).
    multiagent = env_config.agents()  # a PettingZoo Parallel env's agents: the rows of each copy, in order
    agents = None if multiagent is None else multiagent.names
    writer = DatasetWriter(
        path, env.single_observation_space, action_space, metadata, plan.row_group_size, agents, members
    )
    try:
        # Distribution.sample() draws from torch's global generator: seed it for this collection alone, so a
        # shard's data depend on its seed only, not on what ran before it in the process.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            _roll_out(VectorStepper(env), writer, policy, action_space, plan, rng, generator)
    except BaseException:
        writer.abort()
        raise
    finally:
        env.close()
    result = writer.close()
    log.info(
        "collected %d transitions in %d episodes (mean return %s) -> %s",
        result["transitions"],
        result["episodes"],
        score(result["episode_return"]["mean"]),
        path,
    )
    return result


def _roll_out(
    stepper: VectorStepper,
    writer: DatasetWriter,
    policy: Policy | None,
    action_space: spaces.Space,
    plan: CollectionPlan,
    rng: np.random.Generator,
    generator: torch.Generator,
) -> None:
    num_envs, steps, episodes = stepper.env.num_envs, plan.steps, plan.episodes  # rows: one per agent of each copy
    epsilon, deterministic = plan.epsilon, plan.deterministic
    agents = writer.agents  # a multi-agent env's, in row order within each copy
    uniform_log_prob = random_log_prob(action_space)
    observation_space = stepper.env.single_observation_space  # with an action mask, random actions are legal ones
    in_progress = [_Episode() for _ in range(num_envs)]
    obs = stepper.reset(plan.seed)
    state = policy.initial_state(num_envs) if policy is not None else None

    def collected() -> int:
        if episodes is not None:
            return writer.episodes
        return writer.transitions + sum(len(e.rows) for e in in_progress)

    total = episodes if episodes is not None else steps
    assert total is not None
    bar = tqdm(
        total=total,
        unit=" episodes" if episodes is not None else " transitions",
        unit_scale=True,
        dynamic_ncols=True,
        disable=not sys.stderr.isatty(),  # on a terminal only: not in logs, DVC stages or Dask workers
        desc=writer.path.name,
    )
    try:
        while (count := collected()) < total:
            bar.update(count - bar.n)
            log_probs = np.full(num_envs, np.nan, dtype=np.float32)
            legal = legal_actions(observation_space, obs)
            if policy is None and legal is not None:
                actions, log_probs = random_legal_actions(legal, rng)
            elif policy is None:
                actions = random_actions(action_space, num_envs, rng)
                log_probs[:] = uniform_log_prob
            else:
                obs_t = obs_tensor(obs)
                with torch.no_grad():
                    if deterministic or state is not None or not policy.has_distribution:
                        action_t, state = policy.act(obs_t, state, deterministic, generator)
                    else:  # a stateless stochastic policy: record the behaviour's log-probabilities
                        dist = policy.distribution(obs_t)
                        action_t = dist.sample()
                        log_probs = dist.log_prob(action_t).numpy().astype(np.float32)
                actions = action_t.numpy()
            if epsilon > 0:
                explore = rng.random(num_envs) < epsilon
                if legal is None:
                    random = random_actions(action_space, num_envs, rng)
                else:
                    random = random_legal_actions(legal, rng)[0]
                actions = np.where(explore.reshape(-1, *([1] * (np.ndim(actions) - 1))), random, actions)
                log_probs[:] = np.nan
            if isinstance(action_space, spaces.Box):  # store what the env executes
                low, high = action_space.low.reshape(-1), action_space.high.reshape(-1)  # actions are flat
                actions = np.clip(actions, low, high).astype(np.float32)
            step = stepper.step(actions)
            for i in np.flatnonzero(step.valid):
                in_progress[i].rows.append(
                    (
                        obs[i],
                        actions[i],
                        float(step.rewards[i]),
                        step.next_obs[i],
                        bool(step.terminated[i]),
                        bool(step.truncated[i]),
                        float(log_probs[i]),
                    )
                )
                if step.ended[i]:
                    writer.add_episode(*in_progress[i].arrays(force_truncated=False), agent=_agent(agents, int(i)))
                    in_progress[i] = _Episode()
                    if episodes is not None and writer.episodes >= episodes:
                        break
            obs = step.next_obs
            if policy is not None:
                state = reset_state(policy, state, ~step.valid)  # those envs just began a new episode
        bar.update(min(collected(), total) - bar.n)  # the last step may overshoot by up to num_envs - 1
    finally:
        bar.close()
    if episodes is None:
        for row, episode in enumerate(in_progress):  # collection ended mid-episode: keep it, marked truncated
            if episode.rows:
                writer.add_episode(*episode.arrays(force_truncated=True), agent=_agent(agents, row))


def _agent(agents: tuple[str, ...] | None, row: int) -> str | None:
    """The agent of vector-env row ``row`` (``copy * len(agents) + index``), or None for a single-agent env."""
    return None if agents is None else agents[row % len(agents)]


def group_members(env: EnvConfig, groups: Mapping[str, Sequence[str]] | None) -> dict[str, list[str]] | None:
    """The agents of each of ``groups`` (``policy.groups``: group name -> ``fnmatch`` patterns of agent names) in
    ``env``, as a dataset's metadata records them (group name -> agent names); None without ``groups``.
    ``ValueError`` (one line naming ``policy.groups``) where the groups do not fit the env's agents."""
    if groups is None:
        return None
    agents = env.agents()
    if agents is None:
        raise ValueError(f"policy.groups: only for PettingZoo envs' agents; {env.id} has one agent")
    return group_layout(agents, groups, env.id, env.agent_id is not False).members()


def env_record(env: EnvConfig) -> dict[str, Any]:
    """How a dataset's metadata names its env: id and kwargs, and the wrappers where there are any."""
    record: dict[str, Any] = {"id": env.id, "kwargs": env.kwargs}
    if env.wrappers:
        record["wrappers"] = [item.model_dump(mode="json") for item in env.wrappers]
    return record
