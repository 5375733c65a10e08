"""How the members of the on-policy loop (``rlcore.trainers.on_policy``) act and learn: two forms of one interface.

- :class:`StackedActing`: the seeds' MLP actor-critics stacked (``rlcore.nets.stacked_actor_critic``), one forward
  pass per vector step over (N, E, obs) for every seed's envs, each seed's actions drawn from its own generator, one
  ``update_members`` over ``StackedMembers`` for all, the evaluations due at one step run together
  (``rlcore.evaluation.batched``). Chosen when the runs' network kind stacks (:func:`stacking_problem`).
- :class:`EachMemberActing`: every member's own policy (recurrent state, action mask) and update in turn; any
  policy. One run is this form. Why not ``torch.func.vmap`` for the other kinds: ``docs/members-design.md``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, cast

import numpy as np
import torch

from rlcore.algos.members import MemberUpdate, StackedMembers
from rlcore.config.sections import Params
from rlcore.data.rollouts import stack_acting_fields
from rlcore.envs.observations import obs_tensor
from rlcore.evaluation.batched import BatchedAct, evaluate_together, evaluation_mismatch
from rlcore.evaluation.evaluator import EvalResult
from rlcore.nets.policy import Policy
from rlcore.nets.stacked_actor_critic import StackedActorCritic, batching_problem

if TYPE_CHECKING:
    from rlcore.trainers.on_policy_runs import Run


class Acting(ABC):
    """The runs' members acting (a vector step's actions, the values after the rollout) and learning (the update)."""

    description: str
    """What the training log says of the form."""

    def __init__(self, runs: list[Run]) -> None:
        self.runs = runs

    @abstractmethod
    def begin_rollout(self) -> None:
        """Before a rollout's first step (the members' normalizer statistics may have changed)."""

    @abstractmethod
    def act(self, t: int) -> list[list[torch.Tensor]]:
        """Every member's actions (R, ...) at vector step ``t`` of each run (per run, per member), recorded in its
        rollout with their observations, log-probabilities and values."""

    @abstractmethod
    def values(self) -> list[list[torch.Tensor]]:
        """Every member's state values (R,) of its rows' observations after the rollout (per run, per member)."""

    @abstractmethod
    def update(self) -> list[list[dict[str, float]]]:
        """Every member's update on its rollout (advantages in place); its metrics (per run, per member)."""

    def evaluate(self, indices: list[int]) -> dict[int, EvalResult]:
        """The evaluations of the runs at ``indices`` (of :attr:`runs`) the form runs itself, by index; a run
        left out is evaluated by its session (by default every one: its own evaluator's loop)."""
        return {}

    @abstractmethod
    def before_checkpoints(self, indices: list[int]) -> None:
        """Before the runs at ``indices`` may checkpoint: what they save is theirs (optimizer state)."""

    def restack(self, runs: list[Run]) -> None:
        """Go on with ``runs`` (the others finished)."""
        self.runs = runs


def stacking_problem(params: Params, policy: Policy, device: torch.device) -> str | None:
    """Why the seeds of ``params`` (each with a policy as ``policy``, learning on ``device``) do not act and learn
    stacked (:class:`StackedActing`), or None when they do."""
    reasons = {
        "policy.groups": params.policy.groups is not None,
        "algo.behavioral_cloning": getattr(params.algo, "behavioral_cloning", None) is not None,
        f"train.precision {params.train.precision}": params.train.precision != "fp32",
        f"train.device {device.type}": device.type != "cpu",
        "env.self_play": params.env.self_play is not None,
    }
    found = next((reason for reason, applies in reasons.items() if applies), None)
    return found or batching_problem(policy)


def acting_form(runs: list[Run]) -> Acting:
    """:class:`StackedActing` where the runs' network kind stacks, else :class:`EachMemberActing`."""
    session = runs[0].session
    problem = "one run" if len(runs) < 2 else stacking_problem(session.params, session.policy, session.device)
    if problem is None:
        return StackedActing(runs)
    return EachMemberActing(runs, problem)


class EachMemberActing(Acting):
    """Every member's own policy and update, in turn (each run's under its own global random numbers)."""

    def __init__(self, runs: list[Run], reason: str) -> None:
        super().__init__(runs)
        self.description = f"each seed's own policy in turn: {reason} does not stack"

    def begin_rollout(self) -> None:
        """Nothing: each policy acts with its own statistics."""

    def before_checkpoints(self, indices: list[int]) -> None:
        """Nothing: each algorithm's optimizer is the one its checkpoint saves."""

    def act(self, t: int) -> list[list[torch.Tensor]]:
        acted = []
        for run in self.runs:
            with run.global_random():
                actions = []
                for member, obs in zip(run.members, run.observations(), strict=True):
                    policy = member.policy
                    features, member.next_state = policy.step_features(obs, member.state)  # once for both heads
                    action, log_prob = policy.draw_of(features, policy.action_mask(obs))
                    actions.append(action)
                    member.record(t, obs, action, log_prob, policy.value_of(features))
                acted.append(actions)
        return acted

    def values(self) -> list[list[torch.Tensor]]:
        found = []
        for run in self.runs:
            pairs = zip(run.members, run.observations(), strict=True)
            found.append(
                [member.policy.value_of(member.policy.step_features(obs, member.state)[0]) for member, obs in pairs]
            )
        return found

    def update(self) -> list[list[dict[str, float]]]:
        metrics = []
        for run in self.runs:
            session = run.session
            with run.global_random():
                metrics.append(
                    [
                        member.algorithm.update(
                            member.rollout.to(session.device), session.progress_fraction, session.generator
                        )
                        for member in run.members
                    ]
                )
        return metrics


class StackedActing(Acting):
    """The seeds' MLP actor-critics stacked: one forward pass per vector step, one update for all."""

    description = "the seeds' networks stacked"

    def __init__(self, runs: list[Run]) -> None:
        super().__init__(runs)
        self._stack()

    def _stack(self) -> None:
        """Stack the runs' policies and optimizer states (at the start, and when a run finishes)."""
        members = [run.members[0] for run in self.runs]
        self.policies = [member.policy for member in members]
        self.algorithms = [member.algorithm for member in members]
        own = [getattr(algorithm, "optimizer") for algorithm in self.algorithms]  # noqa: B009 (PPO's, A2C's)
        self.stacked = StackedActorCritic(self.policies, own)
        self.recorded = stack_acting_fields([member.rollout for member in members])

    def _load_buffers(self) -> None:
        """The policies' normalizer statistics (updated after each update) into the stacked buffers."""
        for k in range(self.stacked.count):
            self.stacked.load_buffers(k)

    def begin_rollout(self) -> None:
        self._load_buffers()

    def _observations(self) -> torch.Tensor:
        """Every run's observations now, (N, E, *obs_shape)."""
        return obs_tensor(np.stack([run.session.source.stepper.obs for run in self.runs]))

    def act(self, t: int) -> list[list[torch.Tensor]]:
        stacked, obs = self.stacked, self._observations()
        features = stacked.features(obs)
        dist = stacked.distribution(stacked.scores(features))
        actions = stacked.sample_seeds(dist, [cast(torch.Generator, run.random) for run in self.runs])
        recorded = {
            "obs": obs,
            "actions": actions,
            "log_probs": dist.log_prob(actions),
            "values": stacked.values(features),
        }
        for name, storage in self.recorded.items():  # every seed's rollout at once (Member.record's fields)
            storage[:, t] = recorded[name]
        return [[actions[k]] for k in range(len(self.runs))]

    def values(self) -> list[list[torch.Tensor]]:
        values = self.stacked.values(self.stacked.features(self._observations()))
        return [[values[k]] for k in range(len(self.runs))]

    def update(self) -> list[list[dict[str, float]]]:
        rollouts = [run.members[0].rollout for run in self.runs]
        members = StackedMembers(self.algorithms, self.stacked, rollouts)
        progress = [run.session.progress_fraction for run in self.runs]
        generators = [run.session.generator for run in self.runs]
        algorithm = cast(type[MemberUpdate], type(self.algorithms[0]))
        metrics = algorithm.update_members(members, progress, generators)
        for k in range(self.stacked.count):
            self.stacked.write_weights(k)
        return [[mine] for mine in metrics]

    def evaluate(self, indices: list[int]) -> dict[int, EvalResult]:
        evaluators = [self.runs[k].session.evaluator for k in indices]
        if not indices or evaluation_mismatch(evaluators) is not None:
            return {}
        self._load_buffers()
        results = evaluate_together(evaluators, greedy_of_seeds(self.stacked, indices))
        return dict(zip(indices, results, strict=True))

    def before_checkpoints(self, indices: list[int]) -> None:
        """Seed k's stacked optimizer state into its algorithm's own optimizer (what its checkpoint saves, in the
        one-seed format), for k in ``indices``."""
        for k in indices:
            self.stacked.write_optimizers(k)

    def restack(self, runs: list[Run]) -> None:
        changed = len(runs) != len(self.runs)
        super().restack(runs)
        if runs and changed:
            self._stack()


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
