"""One trial of a sweep, as a worker process (or the sweep's own process) runs it: train, evaluate, select.

A trial trains one run per seed of ``sweep.seeds`` (per env of ``sweep.envs``, if given), each in its own
stage root under the trial's folder (``<folder>/seed_<s>/`` or ``<folder>/<env>/seed_<s>/``, each with
``runs/``, ``reports/``, ``models/best/``), through the same stage functions as the pipeline. A run's
score is ``sweep.metric`` of its selected checkpoint on the **validation** episodes (the evaluate stage's, what
selection used; normalized per env); the trial's value aggregates them. The selected model's **test** score
(the select stage's test episodes) is recorded beside it (``test_scores``, ``test_value``) and never optimized.

Pruning. Every periodic evaluation of run ``k`` is reported at step ``k * slot + i`` (``i``: the run's
i-th evaluation; ``slot`` leaves room for all of them), and after each run but the last the aggregate of
the scores so far is reported at ``(k + 1) * slot``, so the pruner can stop a weak trial after its first
seed. A pruned run stops training at once (the trainer's evaluation callback returns True).

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


class PruningReporter:
    """The trainer's evaluation callback: reports each periodic evaluation; True (stop) once the trial is pruned."""

    def __init__(self, trial: optuna.Trial, offset: int, slot: int, sweep: SweepConfig, env: SweepEnv | None):
        self.trial = trial
        self.offset = offset
        self.slot = slot
        self.metric = sweep.metric
        self.env = env
        self.evaluations = 0
        self.pruned_at: int | None = None

    def __call__(self, env_steps: int, result: EvalResult) -> bool:
        if self.pruned_at is not None:
            return True
        self.evaluations += 1
        if self.evaluations >= self.slot:
            return False
        score = float(getattr(result, self.metric))
        step = self.offset + self.evaluations
        self.trial.report(self.env.normalize(score) if self.env else score, step)
        if self.trial.should_prune():
            self.pruned_at = step
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
            for k, run in enumerate(runs):
                params = run_params(job, run)
                root = folder / run.label
                slot = evaluation_slot(params)
                reporter = PruningReporter(trial, k * slot, slot, sweep, run.env)
                train_stage(params, root, on_evaluation=reporter)
                summary = read_json(Layout(root, params.name).train_summary)
                env_steps += int(summary["env_steps"])
                record["runs"][k].update(env_steps=summary["env_steps"], stop_reason=summary["stop_reason"])
                if reporter.pruned_at is not None:
                    # Had it not been pruned, this run and the ones after it would have used their budgets.
                    run_steps = int(summary["env_steps"])
                    counterfactual += max(run_steps, params.train.max_steps) + _budgets(job, runs[k + 1 :])
                    state, pruned_at = "pruned", reporter.pruned_at
                    break
                counterfactual += int(summary["env_steps"])
                evaluate_stage(params, root)
                select_stage(params, root)
                selection = read_json(Layout(root, params.name).selection)
                # The value: the validation score that selection used (under select.setting: one of eval.settings, or
                # their mean); the test score, read the same way, is only recorded.
                score = float(selection["validation"][sweep.metric])
                test_score = float(scores_on_test(selection)[sweep.metric])
                scores.append(run.env.normalize(score) if run.env else score)
                test_scores.append(run.env.normalize(test_score) if run.env else test_score)
                record["runs"][k].update(
                    score=scores[-1], raw_score=score, test_score=test_scores[-1], raw_test_score=test_score
                )
                if k + 1 < len(runs):
                    trial.report(AGGREGATES[sweep.aggregate](scores), (k + 1) * slot)
                    if trial.should_prune():
                        counterfactual += _budgets(job, runs[k + 1 :])
                        state, pruned_at = "pruned", (k + 1) * slot
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


def _budgets(job: TrialJob, runs: list[Run]) -> int:
    """The env-step budgets of ``runs``, had they trained."""
    return sum(run_params(job, run).train.max_steps for run in runs)
