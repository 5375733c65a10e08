"""The on-policy loop over members: collect a rollout -> advantages -> the algorithm's update, repeated, for one run or
for several seeds' runs (``train.seeds``) in lockstep.

A run (:class:`Run`) is one training session (its run directory, envs, evaluator, stop conditions, checkpoints,
curriculum lesson and self-play pool) and its stream of torch's global random numbers. Its members (:class:`Member`)
are the sets of parameters acting on its env rows: its policy, or with ``policy.groups`` one policy per group on its
agents' rows (``rlcore.envs.agent_groups``), each with its own algorithm (optimizer, reward normalizer, reward
signals, BC regularizer), rollout and recurrent state. One run is the single-seed run; ``train.seeds`` is one run
per seed, each the run with ``seed: k``.

Per iteration: ``algo.n_steps`` vector steps of every run (of a PettingZoo env: over each agent of each copy,
``rlcore.envs.multiagent``), every member acting for its rows through the acting form
(``rlcore.trainers.on_policy_acting``: the seeds' MLPs stacked, or each member's own policy); then per member its
algorithm's advantage estimator (GAE by default; ``algo.reward_signals`` add the strength-weighted advantages of
their signals, ``rlcore.reward_signals``, which then train their own networks on the rollout) and its update (the
acting form's: the stacked seeds' ``update_members``, or each member's ``update``). Evaluation, checkpoints, logging
and stop conditions are each run's session's: a run that stops finishes, and the others go on.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import torch

from rlcore.algos.base import OnPolicyAlgorithm
from rlcore.algos.grouped import GroupedAlgorithm
from rlcore.config.sections import Params
from rlcore.data.rollouts import RolloutBuffer
from rlcore.data.sequences import SequenceRollout, make_rollout
from rlcore.envs.actions import action_layout
from rlcore.envs.observations import obs_tensor
from rlcore.envs.stepping import VectorStep
from rlcore.nets.grouped import GroupedActorCritic
from rlcore.nets.policies import ActorCritic
from rlcore.nets.policy import reset_state
from rlcore.nets.precision import copy_weights
from rlcore.trainers.critic_rows import CriticRows
from rlcore.trainers.on_policy_acting import acting_form
from rlcore.trainers.seed_sessions import OpenSeed, SeedRun, abandoned_on_error, open_seed_sessions
from rlcore.trainers.self_play import attach_self_play
from rlcore.trainers.session import TrainingSession
from rlcore.trainers.sources import EnvSource
from rlcore.trainers.stopping import EvaluationCallback

log = logging.getLogger("rlcore")


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
        rollout = member.rollout
        rollout.rewards[t] = torch.as_tensor(rewards, dtype=torch.float32)
        rollout.terminated[t] = torch.as_tensor(terminated)
        rollout.episode_end[t] = torch.as_tensor(ended)
        rollout.valid[t] = torch.as_tensor(valid)
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


class OnPolicyLoop:
    """The collect -> advantages -> update loop over the runs still training."""

    def __init__(self, runs: list[Run]) -> None:
        self.runs = runs
        self.acting = acting_form(runs)

    def run(self) -> None:
        budget = [(run, run.session.stops.budget(run.session.state)) for run in self.runs]
        self._finish([(run, stop) for run, stop in budget if stop is not None])
        while self.runs:
            self._collect()
            self._learn()
            due = [k for k, run in enumerate(self.runs) if run.session.evaluation_due]
            results = self.acting.evaluate(due)  # together where the acting form can; else each session its own
            self.acting.before_checkpoints(due)
            stopping = []
            for k, run in enumerate(self.runs):
                with run.global_random():
                    stop = run.session.checkpoint_due_or_stop(results.get(k))
                if stop is not None:
                    stopping.append((run, stop))
            self._finish(stopping)

    @torch.no_grad()
    def _collect(self) -> None:
        """One rollout of ``n_steps`` vector steps of every run."""
        runs, acting = self.runs, self.acting
        acting.begin_rollout()
        for t in range(runs[0].members[0].rollout.num_steps):
            for run in runs:
                for member in run.members:
                    if member.state is not None:
                        cast(SequenceRollout, member.rollout).keep_state(t, member.state)
            for run, actions in zip(runs, acting.act(t), strict=True):
                run.step(t, actions)
        # V(s_{t+1}) is the next step's V(s_t); at an episode end that is the value of its last observation
        # (next-step autoreset), which is what a truncated episode bootstraps from.
        for run, values in zip(runs, acting.values(), strict=True):
            for member, value in zip(run.members, values, strict=True):
                member.rollout.next_values[:-1] = member.rollout.values[1:]
                member.rollout.next_values[-1] = value

    def _learn(self) -> None:
        signals = []
        for run in self.runs:
            with run.global_random():
                last = run.observations()
                signals.append([run.prepare(member, obs) for member, obs in zip(run.members, last, strict=True)])
        updates = self.acting.update()
        for run, run_signals, run_updates in zip(self.runs, signals, updates, strict=True):
            with run.global_random():
                run.after_update(run_signals, run_updates)

    def _finish(self, stopping: list[tuple[Run, str]]) -> None:
        """Finish the runs that stopped (their final checkpoint and summary); the others go on."""
        if not stopping:
            return
        reasons = dict(stopping)
        ending = [k for k, run in enumerate(self.runs) if run in reasons]
        self.acting.before_checkpoints(list(range(len(self.runs))))
        results = self.acting.evaluate([k for k in ending if self.runs[k].session.final_evaluation_due])  # together
        for k in ending:
            run = self.runs[k]
            with run.global_random():
                run.summary = run.session.finish(reasons[run], results.get(k))
            run.finished = True
            if run.seed is not None:
                log.info("seed %d: finished (%s)", run.seed, reasons[run])
        self.runs = [run for run in self.runs if not run.finished]
        self.acting.restack(self.runs)


def train_on_policy(
    params: Params,
    run_dir: Path,
    on_evaluation: EvaluationCallback | None = None,
    resume_from: Path | None = None,
    *,
    keep_finished: bool = False,
) -> dict[str, Any]:
    """Train ``params.algo`` (an on-policy algorithm) into ``run_dir``; returns the train summary.
    ``keep_finished``: a finished run in ``run_dir`` with these train params is kept (:class:`RunFinishedError`).
    """
    with TrainingSession(
        params, run_dir, on_evaluation, resume_from, lambda p, *_: EnvSource(p), keep_finished=keep_finished
    ) as session:
        run = Run(session, None, None)
        OnPolicyLoop([run]).run()
        assert run.summary is not None
        return run.summary


def train_on_policy_seeds(runs: list[SeedRun], on_evaluation: EvaluationCallback | None) -> None:
    """Train every seed's run (``train.seeds``) of an on-policy algorithm as one program: the runs in lockstep, each
    seed's run its one-seed run (its own random streams). A seed whose run finished with these train params is kept;
    an interrupted one resumes from its own checkpoint."""
    sessions = open_seed_sessions(runs, on_evaluation, lambda p, *_: EnvSource(p))
    opened: list[OpenSeed] = list(sessions)
    with abandoned_on_error(opened):
        for k, seed in enumerate(sessions):
            opened[k] = Run(seed.session, seed.torch_rng, seed.seed)
        if not opened:
            return
        loop = OnPolicyLoop(cast(list[Run], opened))
        seeds = [seed.seed for seed in sessions]
        log.info("train.seeds: training seeds %s as one program (%s)", seeds, loop.acting.description)
        loop.run()
