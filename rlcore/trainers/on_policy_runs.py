"""The runs and members of the on-policy loop (``rlcore.trainers.on_policy``): a run is one training session in the
loop (one, or one per seed of ``train.seeds``) with its stream of torch's global random numbers; its members are the
sets of parameters acting on its env rows (its policy, or one policy per group of ``policy.groups``), each with its
algorithm, rollout and recurrent state."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, cast

import torch

from rlcore.algos.base import OnPolicyAlgorithm
from rlcore.algos.grouped import GroupedAlgorithm
from rlcore.data.rollouts import RolloutBuffer
from rlcore.data.sequences import make_rollout
from rlcore.envs.actions import action_layout
from rlcore.envs.observations import obs_tensor
from rlcore.envs.stepping import VectorStep
from rlcore.nets.grouped import GroupedActorCritic
from rlcore.nets.policies import ActorCritic
from rlcore.nets.policy import reset_state
from rlcore.nets.precision import copy_weights
from rlcore.trainers.critic_rows import CriticRows
from rlcore.trainers.self_play import attach_self_play
from rlcore.trainers.session import TrainingSession
from rlcore.trainers.sources import EnvSource


@dataclass
class Member:
    """One set of parameters of a run: its acting policy, its algorithm (learning on ``algorithm.policy``: the policy
    itself, or its copy on ``train.device``), its rows of the run's vector env (None: all of them; a group's: its
    agents' rows, and its columns of them through the grouped policy's ``member_obs``) and its rollout (``n_steps`` x
    its rows) and recurrent state (None: feed-forward)."""

    name: str
    """"": the run's one policy; else its group's name (its metrics are logged as ``<group>/<key>``)."""
    policy: ActorCritic
    algorithm: OnPolicyAlgorithm[Any, ActorCritic]
    rows: torch.Tensor | None
    index: int
    rollout: RolloutBuffer
    state: torch.Tensor | None
    next_state: torch.Tensor | None = None

    def record(
        self, t: int, obs: torch.Tensor, action: torch.Tensor, log_prob: torch.Tensor, value: torch.Tensor
    ) -> None:
        """What the member's policy saw and did at vector step ``t``: its rows' observations and actions, (R, ...)."""
        rollout = self.rollout
        rollout.obs[t] = obs
        rollout.actions[t] = action
        rollout.log_probs[t] = log_prob
        rollout.values[t] = value


class Run:
    """One session in the loop: its members, its env, its self-play, and its stream of torch's global random numbers
    (``torch_rng``: the state its one-seed run's global generator would have; None: the global generator is this
    run's, the only one)."""

    def __init__(self, session: TrainingSession[EnvSource], torch_rng: torch.Tensor | None, seed: int | None) -> None:
        self.session = session
        self.seed = seed
        self.finished = False
        self.summary: dict[str, Any] | None = None
        self.random: torch.Generator | None = None
        if torch_rng is not None:
            self.random = torch.Generator()
            self.random.set_state(torch_rng)  # as the session seeded and built (or restored) it
        params = session.params
        self.rows = params.env.rows(params.env.num_envs)  # a multi-agent env: agents x copies
        with self.global_random():
            self.self_play = attach_self_play(session)  # env.self_play: the opponents are this policy's snapshots
            obs = obs_tensor(session.source.reset(session.state.env_steps))
            self.critic_rows = CriticRows.of(session.policy, session.source)  # policy.critic: centralized
            self.members = self._members(obs.dtype)
            for member in self.members:
                member.policy.obs_normalizer.update(self.member_obs(member, obs, None))

    def _members(self, obs_dtype: torch.dtype) -> list[Member]:
        session = self.session
        n_steps: int = session.params.algo.n_steps  # type: ignore[attr-defined]
        policy, algorithm = session.policy, session.algorithm
        action_shape, action_dtype = action_layout(session.action_space)  # Box actions of any shape are flat

        def member(name: str, acting: ActorCritic, learning: Any, rows: torch.Tensor | None, index: int) -> Member:
            count = self.rows if rows is None else int(rows.numel())
            space = acting.observation_space
            shape = tuple(space.shape or ())
            if self.critic_rows is not None:
                shape = self.critic_rows.shape(shape)
            # obs_dtype: the storage dtype (rlcore.envs.observations): uint8 frames stay uint8
            rollout = make_rollout(acting, n_steps, count, shape, action_shape, action_dtype, obs_dtype)
            return Member(name, acting, learning, rows, index, rollout, acting.initial_state(count))

        if isinstance(policy, GroupedActorCritic):
            assert isinstance(algorithm, GroupedAlgorithm)
            rows = policy.group_rows(self.rows)
            return [
                member(group.name, policy.members[group.name], algorithm.members[group.name], rows[index], index)  # type: ignore[arg-type]
                for index, group in enumerate(policy.layout.groups)
            ]
        assert isinstance(policy, ActorCritic)
        return [member("", policy, algorithm, None, 0)]

    @contextlib.contextmanager
    def global_random(self) -> Iterator[None]:
        """Inside the block torch's global generator is this run's (what its session draws or saves)."""
        if self.random is None:
            yield
            return
        torch.set_rng_state(self.random.get_state())
        try:
            yield
        finally:
            self.random.set_state(torch.get_rng_state())

    def member_obs(self, member: Member, obs: torch.Tensor, critic: torch.Tensor | None) -> torch.Tensor:
        """``member``'s training rows from the env rows ``obs`` (rows, ...): its rows and columns, followed by their
        centralized critic inputs ``critic`` (rows, critic width) when given."""
        mine = obs
        if member.rows is not None:
            mine = cast(GroupedActorCritic, self.session.policy).member_obs(obs, member.index, member.rows)
        if critic is None:
            return mine
        return torch.cat([mine, (critic if member.rows is None else critic[member.rows]).to(mine.dtype)], dim=1)

    def observations(self) -> list[torch.Tensor]:
        """Each member's training rows of the env's current step."""
        obs = obs_tensor(self.session.source.stepper.obs)
        critic = None if self.critic_rows is None else self.critic_rows.inputs()  # policy.critic: centralized
        return [self.member_obs(member, obs, critic) for member in self.members]

    def step(self, t: int, actions: list[torch.Tensor]) -> None:
        """Step the env with each member's actions (R, ...) of its rows; record the step in the members' rollouts."""
        if len(self.members) == 1 and self.members[0].rows is None:
            env_actions = actions[0]
        else:
            env_actions = actions[0].new_zeros((self.rows, *actions[0].shape[1:]))
            for member, action in zip(self.members, actions, strict=True):
                env_actions[member.rows] = action
        step = self.session.source.stepper.step(env_actions.numpy())
        for member in self.members:
            self._record_step(member, t, step)
        self.session.episodes.step(step.rewards, step.valid, step.ended)
        if self.self_play is not None:
            self.self_play.step(step.rewards, step.valid, step.ended)

    @staticmethod
    def _record_step(member: Member, t: int, step: VectorStep) -> None:
        rows = None if member.rows is None else member.rows.numpy()
        rewards, terminated, ended, valid = step.rewards, step.terminated, step.ended, step.valid
        if rows is not None:
            rewards, terminated, ended, valid = rewards[rows], terminated[rows], ended[rows], valid[rows]
        member.rollout.record_step(t, rewards, terminated, ended, valid)
        member.state = reset_state(member.policy, member.next_state, ~valid)  # the step after a reset starts anew

    def prepare(self, member: Member, last_obs: torch.Tensor) -> dict[str, float]:
        """Before ``member``'s update: its advantages, its reward signals (they learn here; their metrics returned)
        from the rows ``last_obs`` after the rollout's last step, and its acting normalizer's statistics given to
        its learner."""
        rollout, algorithm = member.rollout, member.algorithm
        rollout.advantages, rollout.returns = algorithm.advantages(rollout)
        metrics: dict[str, float] = {}
        if algorithm.reward_signals is not None:  # the observation after the last step is s_{T} of step T - 1
            rollout.advantages, metrics = algorithm.reward_signals.learn(
                rollout, last_obs, rollout.advantages, self.session.generator
            )
        copy_weights(member.policy.obs_normalizer, algorithm.policy.obs_normalizer)  # updated on the acting one
        return metrics

    def after_update(self, signals: list[dict[str, float]], updates: list[dict[str, float]]) -> None:
        """After the members' updates: the session logs their metrics (``signals`` and ``updates`` per member),
        the observation normalizers learn the rollout's statistics, and the env steps are counted."""
        metrics: dict[str, float] = {}
        for member, signal, update in zip(self.members, signals, updates, strict=True):
            copy_weights(member.algorithm.policy, member.policy)  # act with the new weights
            mine = {**update, **signal}
            metrics.update({f"{member.name}/{key}": value for key, value in mine.items()} if member.name else mine)
            # Statistics change only between updates, so each rollout's log-probabilities stay consistent.
            if member.policy.obs_normalizer.enabled:
                rollout = member.rollout
                seen = rollout.flat("obs")[rollout.flat_valid_indices()]
                member.policy.obs_normalizer.update(
                    seen if self.critic_rows is None else self.critic_rows.actor_part(seen)
                )
        if isinstance(self.session.algorithm, GroupedAlgorithm):
            self.session.algorithm.count()
        self.session.after_update({**metrics, **(self.self_play.metrics() if self.self_play else {})})
        self.session.after_env_steps(self.members[0].rollout.num_steps * self.rows)
