"""One trial of a sweep, as a worker process (or the sweep's own process) runs it: train, evaluate, select.

A trial trains one run per seed of ``sweep.seeds`` (per env of ``sweep.envs``, if given), each in its own
stage root under the trial's folder (``<folder>/seed_<s>/`` or ``<folder>/<env>/seed_<s>/``, each with
``runs/``, ``reports/``, ``models/<name>/``), through the same stage functions as the pipeline. A run's
score is ``sweep.metric`` of its selected checkpoint on the **validation** episodes (the evaluate stage's, what
selection used; normalized per env); the trial's value aggregates them. The selected model's **test** score
(the select stage's test episodes) is recorded beside it (``test_scores``, ``test_value``) and never optimized.

Groups. The runs train in groups (:func:`run_groups`): an env's seeds together (one batched program, or IMPALA, ES
and SVPG sharing their worker processes; ``rlcore.stages.train.train_seed_roots``, the trainer of ``train.seeds``)
when ``train.batch_seeds`` is true (the default); else one run at a time. Seed k of a batched group is the
run with ``seed: k`` (``tests/test_seeds_contract.py``), so the scores are the one-at-a-time trial's.

Pruning. Group ``g``'s i-th evaluation round (every seed of the group evaluated at the same step) is reported at
step ``g * slot + i`` as the aggregate of the seeds' scores (one run: its score; ``slot`` leaves room for every
round), and after each group but the last the aggregate of the scores so far is reported at ``(g + 1) * slot``, so
the pruner can stop a weak trial after its first seed (one at a time) or at any round (batched). A pruned trial
stops training: the run whose evaluation completed the round at once, the other seeds of a batched group at their
next evaluation (the trainer's evaluation callback returns True).

No Prefect here: worker processes import this module, Optuna and rlcore only.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import math
import os
import re
import shlex
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import optuna

from flows.sweep.study import load_study
from rlcore.common.errors import RLCoreError
from rlcore.common.files import read_json, write_json
from rlcore.common.stage_paths import Layout
from rlcore.config.reading import apply_overrides
from rlcore.config.sections import Params
from rlcore.config.sweep import SweepConfig, SweepEnv, overrides_for, yaml_text
from rlcore.evaluation.aggregate import iqm
from rlcore.evaluation.evaluator import EvalResult
from rlcore.evaluation.selection import scores_on_test
from rlcore.params import validate_params
from rlcore.stages import evaluate_stage, select_stage, train_stage
from rlcore.stages.train import not_batched_reason, train_seed_roots
from rlcore.trainers import family_of

AGGREGATES = {"mean": statistics.fmean, "median": statistics.median, "min": min, "iqm": iqm}


@dataclass(frozen=True)
class TrialJob:
    """Everything a worker process needs to run one trial (plain, picklable data)."""

    storage: str
    study_name: str
    trial_id: int
    number: int
    tree: dict[str, Any]
    """The params tree after the sweep's ``--set`` overrides, before the trial's own values."""
    values: dict[str, Any]
    """The trial's sampled params values, by dotted key."""
    folder: str
    params_file: str
    base_overrides: list[str] = field(default_factory=list)
    """The sweep's own ``--set`` overrides (for the reproduction command)."""


@dataclass(frozen=True)
class TrialResult:
    """How a trial ended, as its worker reports it to the process that tells Optuna (plain, picklable data)."""

    number: int
    state: Literal["complete", "pruned", "fail"]
    value: float | None = None
    """The aggregate score of a complete trial."""
    error: str | None = None
    """Why a failed trial failed (its one-line error)."""
    pruned_at: int | None = None
    """The step the pruner stopped a pruned trial at."""
    env_steps: int = 0
    """Env steps trained by all of the trial's runs."""
    counterfactual_env_steps: int = 0
    """Env steps the same runs would have trained unpruned (pruned runs at their full budget)."""
    scores: list[float] = field(default_factory=list)
    """Each finished run's validation score (normalized per env): what the value aggregates."""
    test_scores: list[float] = field(default_factory=list)
    """Each finished run's test score (normalized per env): recorded, never optimized."""
    test_value: float | None = None
    """The aggregate of ``test_scores`` of a complete trial (reported beside ``value``)."""
    folder: str = ""
    worker_pid: int = 0
    wall_seconds: float = 0.0


@dataclass(frozen=True)
class Run:
    """One training run of a trial: a seed, on the params' env or on one of ``sweep.envs``."""

    label: str
    seed: int
    env: SweepEnv | None


def plan_runs(params: Params) -> list[Run]:
    sweep: SweepConfig = params.sweep
    seeds = sweep.seeds if sweep.seeds is not None else [params.seed]
    if not sweep.envs:
        return [Run(f"seed_{seed}", seed, None) for seed in seeds]
    return [Run(f"{_safe(env.id)}/seed_{seed}", seed, env) for env in sweep.envs for seed in seeds]


def run_groups(params: Params) -> list[list[Run]]:
    """The runs of ``plan_runs`` as they train, in its order: each env's seeds in one group when they batch
    (:func:`seeds_batched`), else one group per run."""
    runs = plan_runs(params)
    if not seeds_batched(params):
        return [[run] for run in runs]
    groups: dict[str | None, list[Run]] = {}
    for run in runs:
        groups.setdefault(None if run.env is None else run.env.id, []).append(run)
    return list(groups.values())


def seeds_batched(params: Params) -> bool:
    """Whether a trial of ``params`` trains each env's seeds (two or more) as one batched program."""
    seeds = params.sweep.seeds
    return seeds is not None and len(seeds) > 1 and not_batched_reason(params) is None


def seeds_together_words(params: Params) -> str:
    """How seeds train together for ``params``' algorithm: one batched program, or sharing worker processes."""
    return family_of(params).seeds_together


def seeds_line(params: Params) -> str | None:
    """How a trial's seeds train, for the sweep's log; None with one seed."""
    seeds = params.sweep.seeds
    if seeds is None or len(seeds) < 2:
        return None
    if seeds_batched(params):
        how = seeds_together_words(params)
        return f"sweep.seeds: a trial trains its {len(seeds)} seeds together (train.batch_seeds): {how}"
    return f"sweep.seeds: a trial trains its seeds one after another, not batched: {not_batched_reason(params)}"


def _safe(env_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", env_id)


def run_overrides(values: dict[str, Any], run: Run) -> list[str]:
    """The trial's values plus the run's seed (and env), as ``--set`` overrides."""
    overrides = [*overrides_for(values), f"seed={run.seed}"]
    if run.env is not None:
        overrides.append(f"env.id={yaml_text(run.env.id)}")
    return overrides


def run_params(job: TrialJob, run: Run) -> Params:
    """The params ``run`` of ``job`` trains with."""
    return validate_params(apply_overrides(copy.deepcopy(job.tree), run_overrides(job.values, run)))


def reproduce_command(job: TrialJob, run: Run) -> str:
    """The ``rlcore pipeline`` command that trains and evaluates this run on its own."""
    keep = [o for o in job.base_overrides if not o.startswith("sweep.")]
    sets = [arg for item in [*keep, *run_overrides(job.values, run)] for arg in ("--set", item)]
    return shlex.join(["rlcore", "pipeline", "--params", job.params_file, *sets])


@dataclass(frozen=True)
class GroupSlot:
    """Where a group of runs reports: steps ``offset + 1`` to ``offset + slot - 1``, one per evaluation round of
    ``runs`` runs, their scores normalized to ``env`` (if given)."""

    offset: int
    slot: int
    runs: int
    env: SweepEnv | None


class PruningReporter:
    """The trainer's evaluation callback for a group of runs trained together (one run, or an env's seeds batched):
    once every run of the group has been evaluated at a step (a round; a batched run evaluates its seeds at the same
    steps), the round's aggregate (``sweep.aggregate``; one run: its score) is reported at the round's step; True
    (stop) for every run's evaluation once the trial is pruned. A round some seed never reaches (it stopped at
    ``train.target_return``) is not reported."""

    def __init__(self, trial: optuna.Trial, sweep: SweepConfig, where: GroupSlot):
        self.trial = trial
        self.metric = sweep.metric
        self.aggregate = AGGREGATES[sweep.aggregate]
        self.where = where
        self.rounds: dict[int, list[float]] = {}
        """Step -> the scores of the runs evaluated at it so far."""
        self.evaluations = 0
        """Rounds complete."""
        self.pruned_at: int | None = None

    def __call__(self, step: int, result: EvalResult) -> bool:
        if self.pruned_at is not None:
            return True
        where = self.where
        score = float(getattr(result, self.metric))
        scores = self.rounds.setdefault(step, [])
        scores.append(where.env.normalize(score) if where.env else score)
        if len(scores) < where.runs:
            return False
        del self.rounds[step]
        self.evaluations += 1
        if self.evaluations >= where.slot:
            return False
        at = where.offset + self.evaluations
        self.trial.report(scores[0] if where.runs == 1 else self.aggregate(scores), at)
        if self.trial.should_prune():
            self.pruned_at = at
            return True
        return False


def evaluation_slot(params: Params) -> int:
    """Steps reserved per run: at most ceil(max_steps / eval_every) periodic evaluations plus a final one."""
    return math.ceil(params.train.max_steps / params.train.eval_every) + 2


@contextlib.contextmanager
def quiet_training() -> Iterator[None]:
    """Keep the trainer's per-evaluation log lines out of the sweep's output (warnings still show)."""
    logger = logging.getLogger("rlcore")
    level = logger.level
    logger.setLevel(max(logging.WARNING, logger.getEffectiveLevel()))
    try:
        yield
    finally:
        logger.setLevel(level)


def run_trial(job: TrialJob) -> TrialResult:
    """Run ``job``'s trial to its end: complete (with its value), pruned, or failed (with a one-line error).

    The trial's numbers (env steps, scores, process id, times) go to its user attributes and to
    ``<folder>/trial.json``; the process that asked for the trial tells Optuna the outcome.
    """
    started = time.time()
    base = validate_params(job.tree, job.params_file)
    sweep = base.sweep
    trial = optuna.trial.Trial(load_study(job.storage, job.study_name, sweep), job.trial_id)
    runs = plan_runs(base)
    groups = run_groups(run_params(job, runs[0]))
    folder = Path(job.folder)
    record: dict[str, Any] = {
        "number": job.number,
        "study": job.study_name,
        "values": job.values,
        "state": "running",
        "runs": [{"label": run.label, "command": reproduce_command(job, run)} for run in runs],
    }
    write_json(folder / "trial.json", record)
    scores: list[float] = []
    test_scores: list[float] = []
    test_value: float | None = None
    env_steps = counterfactual = 0
    state: Literal["complete", "pruned", "fail"] = "complete"
    value: float | None = None
    error: str | None = None
    pruned_at: int | None = None
    try:
        with quiet_training():
            done = 0  # runs of the groups before this one
            for g, group in enumerate(groups):
                params = [run_params(job, run) for run in group]
                roots = [folder / run.label for run in group]
                slot = evaluation_slot(params[0])
                reporter = PruningReporter(trial, sweep, GroupSlot(g * slot, slot, len(group), group[0].env))
                if len(group) == 1:
                    train_stage(params[0], roots[0], on_evaluation=reporter, replace=True)
                else:
                    train_seed_roots(list(zip(params, roots, strict=True)), on_evaluation=reporter)
                summaries = [
                    read_json(Layout(root, p.name).train_summary) for p, root in zip(params, roots, strict=True)
                ]
                for k, summary in enumerate(summaries, start=done):
                    env_steps += int(summary["env_steps"])
                    record["runs"][k].update(env_steps=summary["env_steps"], stop_reason=summary["stop_reason"])
                done += len(group)
                if reporter.pruned_at is not None:
                    # Had it not been pruned, these runs and the ones after them would have used their budgets.
                    counterfactual += sum(
                        max(int(summary["env_steps"]), p.train.max_steps)
                        for summary, p in zip(summaries, params, strict=True)
                    )
                    counterfactual += _budgets(job, runs[done:])
                    state, pruned_at = "pruned", reporter.pruned_at
                    break
                counterfactual += sum(int(summary["env_steps"]) for summary in summaries)
                for k, (run, each, root) in enumerate(zip(group, params, roots, strict=True), start=done - len(group)):
                    record["runs"][k].update(score_run(run, each, root, sweep))
                    scores.append(record["runs"][k]["score"])
                    test_scores.append(record["runs"][k]["test_score"])
                if done < len(runs):
                    trial.report(AGGREGATES[sweep.aggregate](scores), (g + 1) * slot)
                    if trial.should_prune():
                        counterfactual += _budgets(job, runs[done:])
                        state, pruned_at = "pruned", (g + 1) * slot
                        break
            else:
                value = AGGREGATES[sweep.aggregate](scores)
                test_value = AGGREGATES[sweep.aggregate](test_scores)
    except RLCoreError as exc:
        state, value, test_value, error, pruned_at = "fail", None, None, str(exc), None
    finished = time.time()
    attrs: dict[str, Any] = {
        "env_steps": env_steps,
        "counterfactual_env_steps": counterfactual if state != "fail" else env_steps,
        "scores": scores,
        "test_scores": test_scores,
        "test_value": test_value,
        "worker_pid": os.getpid(),
        "started_at": started,
        "finished_at": finished,
        "wall_seconds": round(finished - started, 3),
    }
    if error:
        attrs["error"] = error
    for key, attr in attrs.items():
        trial.set_user_attr(key, attr)
    record.update(state=state, value=value, error=error, **attrs)
    write_json(folder / "trial.json", record)
    return TrialResult(
        number=job.number,
        state=state,
        value=value,
        error=error,
        pruned_at=pruned_at,
        env_steps=env_steps,
        counterfactual_env_steps=attrs["counterfactual_env_steps"],
        scores=scores,
        test_scores=test_scores,
        test_value=test_value,
        folder=job.folder,
        worker_pid=attrs["worker_pid"],
        wall_seconds=attrs["wall_seconds"],
    )


def score_run(run: Run, params: Params, root: Path, sweep: SweepConfig) -> dict[str, float]:
    """Evaluate and select ``run``'s trained run in ``root``: its ``score`` (the validation score that selection used,
    under ``select.setting``: one of ``eval.settings``, or their mean; what the value aggregates) and ``test_score``
    (read the same way, only recorded), normalized to its env, and both raw."""
    evaluate_stage(params, root)
    select_stage(params, root)
    selection = read_json(Layout(root, params.name).selection)
    score = float(selection["validation"][sweep.metric])
    test_score = float(scores_on_test(selection)[sweep.metric])
    normalize = run.env.normalize if run.env else float
    return {
        "score": normalize(score),
        "raw_score": score,
        "test_score": normalize(test_score),
        "raw_test_score": test_score,
    }


def _budgets(job: TrialJob, runs: list[Run]) -> int:
    """The env-step budgets of ``runs``, had they trained."""
    return sum(run_params(job, run).train.max_steps for run in runs)
