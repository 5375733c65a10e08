"""The comparison with ``select.baseline_run``: both runs' learning curves in one chart and, when either run has
several seeds (``train.seeds``), the probability that a seed of this run scores higher than a seed of the baseline.

A run's score per seed is what ``reports/<name>/metrics.json`` reports of it: each seed's selected checkpoint on the
test episodes (``per_seed.<k>.test.mean_return``; a one-seed run's ``mean_return``). The baseline's scores are read from
``reports/<baseline>/metrics.json``, which its select stage wrote (its selected checkpoint lies in
``runs/<baseline>/``). P(X > Y) is rliable's probability of
improvement (the Mann-Whitney U statistic over ``n_x * n_y``, ties counted half) with its stratified bootstrap 95%
interval (``rlcore.evaluation.aggregate.probability_of_improvement``).

- one seed against one seed: the learning curves alone (P would be 0, 1/2 or 1), the baseline's scores not read;
- several seeds on either side: P(X > Y) with each side's number of runs; a one-seed side counts as one run (its
  interval then reflects only the other side's seeds, and the report says so);
- a baseline with seeds whose scores are not found, or whose ``metrics.json`` does not score the seeds its run folder
  holds, is refused in one line naming the file: run ``rlcore select`` for it first.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlcore.common.errors import RLCoreError
from rlcore.common.files import read_json
from rlcore.common.stage_paths import Layout
from rlcore.evaluation.aggregate import probability_of_improvement

SEED_FOLDER = "seed_"
"""A seed's run folder inside a run of ``train.seeds``: ``runs/<name>/seed_<k>/``."""


@dataclass(frozen=True)
class RunScores:
    """A run's test mean return per seed, and which seed's learning curve the comparison draws."""

    name: str
    scores: dict[int, float]
    """seed -> the seed's selected checkpoint's test mean return; one entry for a one-seed run."""
    several: bool
    """The run has ``train.seeds`` (its seeds' folders ``runs/<name>/seed_<k>/``)."""
    curve: Path
    """The learning curve drawn: the one run's, or the exported seed's."""
    curve_seed: int | None
    """With seeds: the seed whose curve is drawn; None for a one-seed run."""
    source: Path | None = None
    """The ``metrics.json`` the scores were read from (the baseline's), relative to the project root."""

    @property
    def label(self) -> str:
        return self.name if self.curve_seed is None else f"{self.name} (seed {self.curve_seed})"


def run_seed_folders(root: Path, name: str) -> list[int]:
    """The seeds of ``runs/<name>/seed_<k>/`` folders, ascending (none: a one-seed run, or no run)."""
    folder = Layout(root, name).run_dir
    if not folder.is_dir():
        return []
    found = []
    for child in folder.iterdir():
        number = child.name.removeprefix(SEED_FOLDER)
        if child.is_dir() and child.name.startswith(SEED_FOLDER) and number.isdigit():
            found.append(int(number))
    return sorted(found)


def baseline_inputs(root: Path, name: str) -> list[Path]:
    """Every file the comparison with baseline run ``name`` may read, that exists: its learning curves (of the run,
    or of each seed) and the ``metrics.json`` holding its scores (the flows' select cache key)."""
    curves = [Layout(root, name).learning_curve_tsv]
    curves += [Layout(root, name, seed=seed).learning_curve_tsv for seed in run_seed_folders(root, name)]
    return [path for path in [*curves, Layout(root, name).metrics] if path.is_file()]


def read_baseline(root: Path, name: str, needs_scores: bool) -> RunScores:
    """Baseline run ``name``'s scores and curve. A baseline with seeds always needs its scores; a one-seed baseline
    only when ``needs_scores`` (this run has several seeds), otherwise its scores stay empty."""
    seeds = run_seed_folders(root, name)
    one_run = Layout(root, name)
    if not seeds and not one_run.learning_curve_tsv.is_file():
        raise RLCoreError(f"select.baseline_run: {one_run.run_dir}: no learning curve; train that run first")
    if not seeds and not needs_scores:
        return RunScores(name, {}, several=False, curve=one_run.learning_curve_tsv, curve_seed=None)
    found, record = _find_metrics(root, name)
    source = found.relative_to(root)
    where = f"select.baseline_run: {source}"
    if not seeds:
        if "per_seed" in record:
            raise RLCoreError(f"{where}: scores seeds of runs/{name}/, which holds one run; run `rlcore select` again")
        score = _finite(record.get("mean_return"), f"{where}: mean_return")
        return RunScores(name, {0: score}, False, one_run.learning_curve_tsv, None, source)
    per_seed = record.get("per_seed")
    if not isinstance(per_seed, dict):
        raise RLCoreError(
            f"{where}: scores one run, but runs/{name}/ holds seeds {seeds}; run `rlcore select` for {name} again"
        )
    scored = sorted(_seed_number(key, where) for key in per_seed)
    if scored != seeds:
        raise RLCoreError(
            f"{where}: scores seeds {scored}, runs/{name}/ holds seeds {seeds}; run `rlcore select` for {name} again"
        )
    scores = {}
    for key, entry in per_seed.items():
        test = entry.get("test") if isinstance(entry, dict) else None
        value = test.get("mean_return") if isinstance(test, dict) else None
        scores[int(key)] = _finite(value, f"{where}: per_seed.{key}.test.mean_return")
    exported = record.get("train_seed")
    curve_seed = exported if isinstance(exported, int) and exported in scores else seeds[0]
    curve = Layout(root, name, seed=curve_seed).learning_curve_tsv
    return RunScores(name, scores, True, curve, curve_seed, source)


def improvement(run: RunScores, baseline: RunScores) -> dict[str, Any] | None:
    """``metrics.json``'s ``baseline`` block: P(``run`` > ``baseline``) over the seeds' test mean returns with its
    95% interval (and ``_low``/``_high`` for ``dvc metrics show``), each side's runs and seeds; None when neither
    has several seeds."""
    if not (run.several or baseline.several):
        return None
    result = probability_of_improvement(run.scores, baseline.scores)
    low, high = result["probability_of_improvement_ci95"]
    return {
        "run": baseline.name,
        "scores": "test mean_return of each seed's selected checkpoint",
        "scores_from": None if baseline.source is None else str(baseline.source),
        "seeds_x": sorted(run.scores) if run.several else None,
        "seeds_y": sorted(baseline.scores) if baseline.several else None,
        **result,
        "probability_of_improvement_ci95_low": low,
        "probability_of_improvement_ci95_high": high,
    }


def improvement_words(run: RunScores, baseline: RunScores, result: dict[str, Any]) -> list[str]:
    """The report's lines on P(X > Y)."""
    low, high = result["probability_of_improvement_ci95"]

    def runs(side: RunScores, count: int) -> str:
        return f"{count} runs of `{side.name}`" if count > 1 else f"one run (one seed) of `{side.name}`"

    lines = [
        f"**Probability of improvement** over the baseline, P(`{run.name}` > `{baseline.name}`): "
        f"**{result['probability_of_improvement']:.2f}**, 95% CI [{low:.2f}, {high:.2f}] (rliable's Mann-Whitney "
        "estimate on the test mean return of each seed's selected checkpoint, ties counting half; stratified "
        f"bootstrap over runs, {result['bootstrap']['resamples']} resamples), over "
        f"{runs(run, result['num_runs_x'])} and {runs(baseline, result['num_runs_y'])}.",
        "",
    ]
    for one, other in ((run, baseline), (baseline, run)):
        if len(one.scores) == 1 and len(other.scores) > 1:
            lines += [f"`{one.name}` has one seed: the interval reflects only `{other.name}`'s seeds.", ""]
    return lines


def _find_metrics(root: Path, name: str) -> tuple[Path, dict[str, Any]]:
    """``reports/<name>/metrics.json``, which scores a checkpoint of ``runs/<name>/``."""
    path = Layout(root, name).metrics
    try:
        record = read_json(path)
    except (OSError, ValueError):
        record = None  # absent, or not JSON: not a record this comparison can read
    if not isinstance(record, dict) or not str(record.get("checkpoint", "")).startswith(f"runs/{name}/"):
        raise RLCoreError(
            f"select.baseline_run: {path.relative_to(root)} does not score a checkpoint of runs/{name}/; "
            f"run `rlcore select` for {name} first (its test scores per seed are compared)"
        )
    return path, record


def _seed_number(key: Any, where: str) -> int:
    if not isinstance(key, str) or not key.isdigit():
        raise RLCoreError(f"{where}: per_seed: expected seeds as keys, got {json.dumps(key)}")
    return int(key)


def _finite(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise RLCoreError(f"{where}: expected a finite number, got {json.dumps(value)}")
    return float(value)
