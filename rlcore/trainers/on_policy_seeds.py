"""The on-policy loop for N seeds as one batched program (``train.seeds`` with ``train.batch_seeds``): each seed
keeps its own run, the networks of all are stacked and act and learn together.

Per seed, as in its unbatched run (``rlcore.trainers.on_policy``): a :class:`TrainingSession` (its run directory
``runs/<name>/seed_<k>/``, envs, evaluator, checkpoints, metrics, stop conditions, minibatch generator), and its own
stream of torch's global random numbers (a ``torch.Generator`` holding the state the unbatched run's global generator
would have: its action samples are drawn from it, and it is what its checkpoints save). Together: one forward pass per
vector step over (N, E, obs) with the stacked weights (``rlcore.nets.stacked_actor_critic``), one GAE over every
seed's envs side by side, and one update (the algorithm's ``update_members`` over
``rlcore.algos.members.StackedMembers``). After each update each seed's weights are copied back into its session's
policy, so checkpoints and export are the unbatched ones. The periodic (and final) evaluations of the seeds due at the
same step run together (``rlcore.evaluation.batched``): one forward pass per step over every seed's evaluation
episodes, each seed's episodes and result its own evaluator's.

A seed that reaches its stop condition (budget, target return, wall-clock limit, the evaluation callback) finishes
(final checkpoint, summary): its envs are closed and the others go on with one seed fewer stacked. A seed whose run
finished with the same train params is kept; an interrupted one resumes from its checkpoint (each seed from its own
step: schedules follow each seed's progress).

What does not batch (:func:`unbatched_reason`) trains the seeds one after another, each exactly its unbatched run,
with one log line saying why: recurrent policies, observations other than flat vectors (pixels, Dict, Discrete),
actions other than Discrete and Box, categorical or transformed value heads, ``algo.reward_signals``,
``algo.behavioral_cloning``, ``algo.normalize_rewards``, ``algo.grad_accumulation`` > 1, ``train.precision`` other
than fp32, ``train.device: cuda`` and ``env.curriculum``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any, cast

import numpy as np
import torch

from rlcore.algos.base import OnPolicyAlgorithm
from rlcore.algos.members import MemberRollout, MemberUpdate, StackedMembers, stacked_optimizer
from rlcore.config.sections import Params
from rlcore.data.rollouts import RolloutBuffer
from rlcore.envs.actions import action_layout
from rlcore.envs.ids import is_multiagent
from rlcore.envs.observations import obs_tensor
from rlcore.envs.vector import make_vector_env
from rlcore.evaluation.batched import BatchedAct, evaluate_together
from rlcore.evaluation.evaluator import EvalResult
from rlcore.nets.policies import ActorCritic
from rlcore.nets.stacked_actor_critic import StackedActorCritic, batching_problem
from rlcore.registry import algorithm_class
from rlcore.trainers.finished_runs import RunFinishedError
from rlcore.trainers.on_policy import train_on_policy
from rlcore.trainers.seed_sessions import SeedRun, abandoned_on_error, open_seed_sessions
from rlcore.trainers.session import TrainingSession
from rlcore.trainers.sources import EnvSource
from rlcore.trainers.stopping import EvaluationCallback

log = logging.getLogger("rlcore")


def unbatched_reason(params: Params) -> str | None:
    """Why ``params``' seeds cannot train as one batched program (read from the params alone), or None."""
    algo, train = params.algo, params.train
    reasons = {
        "policy.memory (a recurrent policy)": params.policy.memory is not None,
        "algo.reward_signals": getattr(algo, "reward_signals", None) is not None,
        "algo.behavioral_cloning": getattr(algo, "behavioral_cloning", None) is not None,
        "algo.normalize_rewards": bool(getattr(algo, "normalize_rewards", False)),
        "algo.grad_accumulation > 1": getattr(algo, "grad_accumulation", 1) > 1,
        f"train.precision {train.precision}": train.precision != "fp32",
        "train.device cuda": train.device == "cuda",
        "env.curriculum": bool(params.env.curriculum),
        "env.action_mask (the batched losses take no masks)": params.env.action_mask is not None,
        "a PettingZoo env (agents as rows, or a two-player game)": is_multiagent(params.env.id),
    }
    return next((reason for reason, applies in reasons.items() if applies), None)


def architecture_reason(params: Params) -> str | None:
    """Why the policy of ``params`` cannot be stacked (its spaces, read from one env), or None."""
    env = make_vector_env(params.env, 1)
    try:
        observation_space, action_space = env.single_observation_space, env.single_action_space
    finally:
        env.close()
    with torch.random.fork_rng(devices=[]):
        policy = algorithm_class(params.algo.name).make_policy(
            observation_space, action_space, params.policy, params.algo
        )
    return batching_problem(cast(ActorCritic, policy))


def train_on_policy_seeds(runs: list[SeedRun], on_evaluation: EvaluationCallback | None) -> None:
    """Train every seed's run of an on-policy algorithm: batched when :func:`unbatched_reason` and
    :func:`architecture_reason` allow, else one after another."""
    reason = unbatched_reason(runs[0].params) or architecture_reason(runs[0].params)
    if reason is not None:
        log.info("train.seeds: the seeds train one after another, not batched: %s does not batch", reason)
        for run in runs:
            try:
                train_on_policy(run.params, run.run_dir, on_evaluation, keep_finished=True)
            except RunFinishedError:
                log.info("seed %d: finished in %s with these train params; kept", run.seed, run.run_dir)
        return
    sessions = open_seed_sessions(runs, on_evaluation, lambda p, *_: EnvSource(p))
    seeds = [Seed(opened.seed, opened.session, opened.torch_rng) for opened in sessions]
    with abandoned_on_error(seeds):
        if seeds:
            log.info("train.seeds: training seeds %s as one batched program", [seed.seed for seed in seeds])
            BatchedLoop(seeds).run()


def greedy_of_seeds(stacked: StackedActorCritic, indices: list[int]) -> BatchedAct:
    """The deterministic actions of the stacked seeds at ``indices``: observations (len(indices), B, obs_dim) ->
    actions (len(indices), B, ...), one forward pass over every stacked seed (the others' rows fed zeros)."""

    def act(obs: torch.Tensor) -> torch.Tensor:
        if indices == list(range(stacked.count)):
            return stacked.greedy(obs)
        every = obs.new_zeros((stacked.count, *obs.shape[1:]))
        every[indices] = obs
        return stacked.greedy(every)[indices]

    return act


class Seed:
    """One seed of a batched run: its session and its stream of torch's global random numbers."""

    def __init__(self, seed: int, session: TrainingSession[EnvSource], torch_rng: torch.Tensor) -> None:
        self.seed = seed
        self.session = session
        self.policy = cast(ActorCritic, session.policy)
        self.algorithm = cast(OnPolicyAlgorithm[Any, ActorCritic], session.algorithm)
        self.random = torch.Generator()
        self.random.set_state(torch_rng)  # as the session seeded and built (or restored) it
        self.finished = False

    @contextlib.contextmanager
    def global_random(self) -> Iterator[None]:
        """Inside the block torch's global generator is this seed's (what its session draws or saves)."""
        torch.set_rng_state(self.random.get_state())
        try:
            yield
        finally:
            self.random.set_state(torch.get_rng_state())


class BatchedLoop:
    """The collect -> GAE -> update loop over the seeds still training, stacked."""

    def __init__(self, seeds: list[Seed]) -> None:
        params = seeds[0].session.params
        self.cfg = params.algo
        self.n_steps, self.num_envs = self.cfg.n_steps, params.env.num_envs  # type: ignore[attr-defined]
        self.seeds = seeds
        for seed in seeds:
            obs = obs_tensor(seed.session.source.reset(seed.session.state.env_steps))
            seed.policy.obs_normalizer.update(obs)
        self._stack()

    def _stack(self) -> None:
        """Stack the training seeds' policies and optimizer states (at the start, and when a seed finishes)."""
        seeds = self.seeds
        self.stacked = StackedActorCritic([seed.policy for seed in seeds])
        self.optimizer = stacked_optimizer([seed.algorithm for seed in seeds], self.stacked)
        session = seeds[0].session
        action_shape, action_dtype = action_layout(session.action_space)
        obs_shape = tuple(session.observation_space.shape or ())
        obs_dtype = obs_tensor(session.source.stepper.obs).dtype
        # Every seed's envs side by side: seed k's are columns k * E ... (k + 1) * E - 1 (GAE is per column).
        self.rollout = RolloutBuffer(
            self.n_steps, len(seeds) * self.num_envs, obs_shape, action_shape, action_dtype, obs_dtype
        )

    def run(self) -> None:
        stops = [seed.session.stops.budget(seed.session.state) for seed in self.seeds]
        self._finish([(seed, stop) for seed, stop in zip(self.seeds, stops, strict=True) if stop is not None])
        while self.seeds:
            self._collect()
            rollout = self._seeds_rollout()
            progress = [seed.session.progress_fraction for seed in self.seeds]
            generators = [seed.session.generator for seed in self.seeds]
            algorithms = [seed.algorithm for seed in self.seeds]
            members = StackedMembers(algorithms, self.stacked, self.optimizer, rollout)
            metrics = cast(type[MemberUpdate], type(algorithms[0])).update_members(members, progress, generators)
            for k, seed in enumerate(self.seeds):
                session = seed.session
                self.stacked.copy_weights_to(k, seed.policy)
                session.after_update(metrics[k])
                if seed.policy.obs_normalizer.enabled:  # after the update, as unbatched: statistics of the rollout
                    seed.policy.obs_normalizer.update(rollout.obs[k][rollout.valid_indices(k)])
                    self.stacked.load_buffers_from(k, seed.policy)
                session.after_env_steps(self.n_steps * self.num_envs)
            results = self._evaluate([k for k, seed in enumerate(self.seeds) if seed.session.evaluation_due])
            stopping = []
            for k, seed in enumerate(self.seeds):
                if k in results:
                    self._sync_optimizer(k)  # the checkpoint saves it
                with seed.global_random():
                    stop = seed.session.checkpoint_due_or_stop(results.get(k))
                if stop is not None:
                    stopping.append((seed, stop))
            self._finish(stopping)

    def _evaluate(self, indices: list[int]) -> dict[int, EvalResult]:
        """The periodic evaluations of the seeds at ``indices`` (of :attr:`seeds`), run together
        (``rlcore.evaluation.batched``): seed k's result is its evaluator's for its policy, whose weights and
        normalizer statistics the stacked ones are."""
        if not indices:
            return {}
        evaluators = [self.seeds[k].session.evaluator for k in indices]
        results = evaluate_together(evaluators, greedy_of_seeds(self.stacked, indices))
        return dict(zip(indices, results, strict=True))

    @torch.no_grad()
    def _collect(self) -> None:
        """One rollout of ``n_steps`` vector steps for every seed (the unbatched loop's, seed by seed the same)."""
        rollout, stacked, seeds, envs = self.rollout, self.stacked, self.seeds, self.num_envs
        steppers = [seed.session.source.stepper for seed in seeds]
        generators = [seed.random for seed in seeds]
        for t in range(self.n_steps):
            obs = obs_tensor(np.stack([stepper.obs for stepper in steppers]))  # (N, E, *obs)
            features = stacked.features(obs)
            dist = stacked.distribution(stacked.scores(features))
            actions = stacked.sample_seeds(dist, generators)
            rollout.obs[t] = obs.reshape(len(seeds) * envs, *obs.shape[2:])
            rollout.actions[t] = actions.reshape(len(seeds) * envs, *actions.shape[2:])
            rollout.log_probs[t] = dist.log_prob(actions).reshape(-1)
            rollout.values[t] = stacked.values(features).reshape(-1)
            steps = [stepper.step(chosen) for stepper, chosen in zip(steppers, actions.numpy(), strict=True)]
            for seed, step in zip(seeds, steps, strict=True):
                seed.session.episodes.step(step.rewards, step.valid, step.ended)
            # Seed k's envs are columns k * E ... (k + 1) * E - 1: each field of every seed's step in one copy.
            rollout.rewards[t] = torch.as_tensor(np.concatenate([step.rewards for step in steps]), dtype=torch.float32)
            rollout.terminated[t] = torch.as_tensor(np.concatenate([step.terminated for step in steps]))
            rollout.episode_end[t] = torch.as_tensor(np.concatenate([step.ended for step in steps]))
            rollout.valid[t] = torch.as_tensor(np.concatenate([step.valid for step in steps]))
        rollout.next_values[:-1] = rollout.values[1:]
        last = obs_tensor(np.stack([stepper.obs for stepper in steppers]))
        rollout.next_values[-1] = stacked.values(stacked.features(last)).reshape(-1)
        rollout.advantages, rollout.returns = seeds[0].algorithm.advantages(rollout)  # GAE per column: per seed

    def _seeds_rollout(self) -> MemberRollout:
        """The rollout as (N, T * E, ...) per seed, each seed's flat order its unbatched rollout's."""
        rollout, count, steps, envs = self.rollout, len(self.seeds), self.n_steps, self.num_envs

        def per_seed(tensor: torch.Tensor) -> torch.Tensor:
            rest = tensor.shape[2:]
            return tensor.reshape(steps, count, envs, *rest).transpose(0, 1).reshape(count, steps * envs, *rest)

        return MemberRollout(
            obs=per_seed(rollout.obs),
            actions=per_seed(rollout.actions),
            log_probs=per_seed(rollout.log_probs),
            values=per_seed(rollout.values),
            advantages=per_seed(rollout.advantages),
            returns=per_seed(rollout.returns),
            valid=rollout.valid.reshape(steps, count, envs).transpose(0, 1),
        )

    def _sync_optimizer(self, k: int) -> None:
        """Seed ``k``'s stacked optimizer state into its algorithm's own optimizer (what its checkpoint saves, in the
        unbatched format)."""
        optimizer: torch.optim.Optimizer = getattr(self.seeds[k].algorithm, "optimizer")  # noqa: B009 (PPO's, A2C's)
        saved = self.optimizer.seed_state_dict(k)
        params = [param for group in optimizer.param_groups for param in group["params"]]
        for index, param in enumerate(params):
            if index in saved["state"]:
                optimizer.state[param] = saved["state"][index]
        for group, stacked_group in zip(optimizer.param_groups, saved["param_groups"], strict=True):
            group["lr"] = stacked_group["lr"]

    def _finish(self, stopping: list[tuple[Seed, str]]) -> None:
        """Finish the seeds that stopped (their final checkpoint and summary) and stack the others anew."""
        if not stopping:
            return
        for k in range(len(self.seeds)):  # what the finishing seeds save, and what the others are stacked anew from
            self._sync_optimizer(k)
        reasons = dict(stopping)
        ending = [k for k, seed in enumerate(self.seeds) if seed in reasons]
        results = self._evaluate([k for k in ending if self.seeds[k].session.final_evaluation_due])  # together
        for k in ending:
            seed = self.seeds[k]
            with seed.global_random():
                seed.session.finish(reasons[seed], results.get(k))
            seed.finished = True
            log.info("seed %d: finished (%s)", seed.seed, reasons[seed])
        self.seeds = [seed for seed in self.seeds if not seed.finished]
        if self.seeds:
            self._stack()
