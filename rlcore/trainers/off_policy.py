"""The off-policy loop: act -> store in replay -> gradient steps on replay batches, repeated.

Per vector step: uniformly random actions during the first ``algo.learning_starts`` env steps, the
algorithm's exploration policy after; every ``algo.train_freq`` env steps, ``algo.gradient_steps_per_sample``
gradient steps per env step collected since the last phase (fractions carry over). Credit for gradient steps
accrues only from ``learning_starts`` on, and only once the replay holds a batch: the first phase is one phase's
worth, as in SB3 and CleanRL, not a burst of ``learning_starts x gradient_steps_per_sample`` steps on the
warm-up's random data (and ``learning_starts: 0`` with n-step returns never samples an empty replay).
Evaluation, checkpoints, logging and stop conditions are the session's; the replay buffer is the source's.

One loop serves one seed's run and ``train.seeds``' N seeds trained as one program (:func:`run_off_policy` over
their open sessions, ``rlcore.trainers.lockstep``): per vector step every seed steps its own envs into its own replay
with its own exploration (:class:`Collector`); when an update phase is due, the seeds' gradient steps run together.
Where their networks' kind stacks (DQN's and SAC's MLPs on vector observations) both are stacked: one forward pass
acts for every seed (``MemberSteps.explore``, each seed's epsilon-greedy or Gaussian draw from its own generator)
and one update steps them; otherwise each seed's own network acts and steps in turn (CNN and Dict encoders, the
dueling head). Stacked seeds' replays share one storage (``rlcore.data.replay_stack``): each seed writes its own slice,
and a gradient step draws each seed's slots from its own generator and gathers every seed's batch at once. Seed k is
the run with ``seed: k``: its envs, exploration draws, replay batches, evaluations,
checkpoints and stop conditions are its own, and its actions and gradient steps equal that run's up to the float32
rounding of the stacked products (each its own network: bitwise).

A PettingZoo Parallel env (``rlcore.envs.multiagent``) trains independent learners with parameter sharing: each agent
of each env copy is a row of the vector env, so every agent's transition (its observation with its one-hot, its
action, its reward, its next observation, its own termination or truncation) is a transition of the one replay
buffer, one Q-network acts for every agent (epsilon-greedy per row), and an agent that left before the others adds
no transitions until its copy resets (the step's ``valid`` mask). This is independent Q-learning (Tan, 1993) with the
parameter sharing of Gupta, Egorov & Kochenderfer (2017, PS-DQN) and the agent indication of Terry et al. (2020,
"Revisiting Parameter Sharing in Multi-Agent Deep RL"): the recipe of PettingZoo's docs (SuperSuit's
``pettingzoo_env_to_vec_env_v1`` under SB3's DQN) rather than Tianshou's ``MultiAgentPolicyManager`` (a policy per
agent, each batch dispatched by agent id, over AEC envs where one agent acts per step). Env steps count agent steps
(rows), as PPO's multi-agent runs do.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from rlcore.algos.base import OffPolicyAlgorithm, OffPolicyConfig
from rlcore.data.replay_stack import ReplayStack
from rlcore.envs.action_masks import legal_actions, random_legal_actions
from rlcore.envs.actions import random_actions
from rlcore.envs.observations import obs_tensor
from rlcore.trainers.lockstep import Lockstep, StackedBatch
from rlcore.trainers.seed_sessions import SeedSession
from rlcore.trainers.session import TrainingSession
from rlcore.trainers.sources import ReplaySource


def run_off_policy(seeds: Sequence[SeedSession[ReplaySource]]) -> None:
    """The loop of open sessions, each to its end: act and store, gradient steps when due, evaluations and
    checkpoints when due, until each one's stop condition."""
    members = Lockstep(seeds)
    collectors = {id(seed): Collector(seed.session) for seed in members.live}
    # Stacked members' replays share one storage: one gather draws every seed's batch (each from its own generator).
    stack = ReplayStack([c.session.source.replay for c in collectors.values()]) if members.steps.stacked else None
    position = {id(seed): k for k, seed in enumerate(members.live)}
    while members.live:
        live = [collectors[id(seed)] for seed in members.live]
        # The stacked forms act for every seed at once; each its own network acts inside its Collector.step.
        stacked_acting = members.steps.stacked and all(c.exploring for c in live)
        explored = members.steps.explore([c.observations() for c in live]) if stacked_acting else None
        due = [c.step(None if explored is None else explored[k]) for k, c in enumerate(live)]
        for step in range(max(due)):  # a seed due for fewer gradient steps sits out the rest
            present = [step < d for d in due]
            if stack is not None and members.steps.stacked:
                rngs = [c.session.rng if taking else None for c, taking in zip(live, present, strict=True)]
                seats = [position[id(seed)] for seed in members.live]
                members.step(StackedBatch(stack.sample(seats, live[0].config.batch_size, rngs), present))
            else:
                members.step([c.sample() if taking else None for c, taking in zip(live, present, strict=True)])
        members.checkpoints()


class Collector:
    """A session's acting and storing, and the gradient steps it earns (the module docstring's schedule)."""

    def __init__(self, session: TrainingSession[ReplaySource]) -> None:
        cfg = session.params.algo
        assert isinstance(cfg, OffPolicyConfig) and isinstance(session.algorithm, OffPolicyAlgorithm)
        self.session, self.config, self.algorithm = session, cfg, session.algorithm
        session.source.reset(session.state.env_steps)
        self.collected_since_update, self.gradient_credit = 0, 0.0

    @property
    def exploring(self) -> bool:
        """Whether this vector step acts by the algorithm's exploration (the warm-up's random actions are over)."""
        return self.session.state.env_steps >= self.config.learning_starts

    def observations(self) -> torch.Tensor:
        """The envs' current observations, as the algorithm's ``explore`` reads them."""
        return obs_tensor(self.session.source.stepper.obs)

    def step(self, explored: torch.Tensor | None = None) -> int:
        """One vector step of the envs into the replay; the gradient steps due now (0 between update phases).
        ``explored``: this step's exploration actions drawn for the session elsewhere (its members' stacked forward
        pass), else its algorithm draws them. The observation normalizer takes a replay sample at the start of each
        phase."""
        session, cfg, state = self.session, self.config, self.session.state
        stepper, replay = session.source.stepper, session.source.replay
        num_envs = stepper.env.num_envs  # rows: a multi-agent env has one per agent of each copy
        legal = legal_actions(session.observation_space, stepper.obs)  # None: no action mask
        if not self.exploring and legal is not None:
            actions = random_legal_actions(legal, session.rng)[0]
        elif not self.exploring:
            actions = random_actions(session.action_space, num_envs, session.rng)
        else:
            if explored is None:
                explored = self.algorithm.explore(self.observations(), session.progress_fraction, session.generator)
            actions = explored.numpy()
        steps_before = state.env_steps
        step = stepper.step(actions)
        replay.add(
            step.obs,
            step.actions,
            step.rewards.astype(np.float32),
            step.next_obs,
            step.terminated,
            step.truncated,
            step.valid,
        )
        session.episodes.step(step.rewards, step.valid, step.ended)
        session.after_env_steps(num_envs)

        if len(replay) >= cfg.batch_size:  # env steps from learning_starts on earn gradient steps
            self.collected_since_update += max(0, state.env_steps - max(steps_before, cfg.learning_starts))
        if self.collected_since_update < cfg.train_freq:
            return 0
        self.gradient_credit += self.collected_since_update * cfg.gradient_steps_per_sample
        self.collected_since_update = 0
        policy = session.policy
        if policy.obs_normalizer.enabled:
            policy.obs_normalizer.update(torch.as_tensor(replay.sample(1024, session.rng)["obs"]))
        due = int(self.gradient_credit)
        self.gradient_credit -= due
        return due

    def sample(self) -> dict[str, torch.Tensor]:
        """A replay batch for one gradient step, drawn with the session's generator."""
        return self.session.source.replay.sample(self.config.batch_size, self.session.rng)
