"""The on-policy loop over members: collect a rollout -> advantages -> the algorithm's update, repeated, for one run or
for several seeds' runs (``train.seeds``) in lockstep.

Runs and members (``rlcore.trainers.on_policy_runs``): a run is one training session with its own random streams
(one run is the single-seed run; ``train.seeds`` one run per seed, each the run with ``seed: k``), its members its
policy or, with ``policy.groups``, one policy per group on its agents' rows.

Per iteration: ``algo.n_steps`` vector steps of every run (of a PettingZoo env: over each agent of each copy,
``rlcore.envs.multiagent``), every member acting for its rows through the acting form
(``rlcore.trainers.on_policy_acting``: the seeds' MLPs stacked, or each member's own policy); then per member its
algorithm's advantage estimator (GAE by default; ``algo.reward_signals`` add the strength-weighted advantages of
their signals, ``rlcore.reward_signals``, which then train their own networks on the rollout) and its update (the
acting form's: the stacked seeds' ``update_members``, or each member's ``update``). Evaluation, checkpoints, logging
and stop conditions are each run's session's: a run that stops finishes, and the others go on.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import cast

import torch

from rlcore.data.sequences import SequenceRollout
from rlcore.trainers.on_policy_acting import acting_form
from rlcore.trainers.on_policy_runs import Run
from rlcore.trainers.seed_sessions import SeedSession, log_program
from rlcore.trainers.sources import EnvSource

log = logging.getLogger("rlcore")


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


def run_on_policy(seeds: Sequence[SeedSession[EnvSource]]) -> None:
    """The loop of open sessions (one run's, or every seed's of ``train.seeds`` in lockstep, each seed's run its
    one-seed run with its own random streams), each to its end."""
    alone = seeds[0].one_seed_run
    runs = [Run(seed.session, None if alone else seed.torch_rng, None if alone else seed.seed) for seed in seeds]
    loop = OnPolicyLoop(runs)
    log_program(seeds, loop.acting.description)
    try:
        loop.run()
    finally:  # what finished is kept; an error abandons the others' sessions (``run_together``)
        for seed, run in zip(seeds, runs, strict=True):
            seed.finished, seed.summary = run.finished, run.summary
