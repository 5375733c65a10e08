"""Where each stage reads and writes under the project root, per run name (the README's "What you get" table), and
the check that a path from params stays inside the project.

Every output of a run is in a folder named after it: ``runs/<name>/`` (training), ``reports/<name>/`` (evaluations,
report, metrics), ``models/<name>/`` (the selected model), ``export/<name>/`` (ONNX, torch.export, model card). Two
runs with different names never write over each other's files, whichever pipeline (DVC stages, Prefect flows,
sweeps) runs them. A sweep writes its trials in ``runs/sweeps/<study>/`` and its results in ``reports/sweep/``, so
``sweeps`` and ``sweep`` are no run's name (:data:`RESERVED_NAMES`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rlcore.common.errors import ConfigError

SWEEP_RUNS = "sweeps"
"""``runs/sweeps/<study>/trial_<number>/``: a sweep's trials (``flows/sweep``)."""
SWEEP_REPORTS = "sweep"
"""``reports/sweep/``: a sweep's best params, trials table, plots and summary (``flows/sweep/report.py``)."""
RESERVED_NAMES = {
    SWEEP_RUNS: f"runs/{SWEEP_RUNS}/ holds the sweeps' trials",
    SWEEP_REPORTS: f"reports/{SWEEP_REPORTS}/ holds the sweep's results",
}
"""Folder names of ``runs/`` and ``reports/`` that are not a run's, so no run is named so: name -> why."""


def sweep_trials(root: Path, study: str) -> Path:
    """Where study ``study``'s trials write: ``runs/sweeps/<study>/``."""
    return root / "runs" / SWEEP_RUNS / study


def sweep_reports(root: Path) -> Path:
    """Where a sweep writes its results: ``reports/sweep/``."""
    return root / "reports" / SWEEP_REPORTS


@dataclass(frozen=True)
class Layout:
    root: Path
    name: str = "default"
    seed: int | None = None
    """One seed of a run with ``train.seeds``: its run directory is ``runs/<name>/seed_<seed>/``; None:
    ``runs/<name>/``."""

    @property
    def run_dir(self) -> Path:
        run = self.root / "runs" / self.name
        return run if self.seed is None else run / f"seed_{self.seed}"

    @property
    def checkpoints(self) -> Path:
        return self.run_dir / "checkpoints"

    @property
    def learning_curve_tsv(self) -> Path:
        return self.run_dir / "dvclive" / "plots" / "metrics" / "eval" / "mean_return.tsv"

    @property
    def train_summary(self) -> Path:
        return self.run_dir / "train_summary.json"

    @property
    def reports(self) -> Path:
        return self.root / "reports" / self.name

    @property
    def evaluations(self) -> Path:
        return self.reports / "evaluations.json"

    @property
    def metrics(self) -> Path:
        return self.reports / "metrics.json"

    @property
    def scores(self) -> Path:
        """The headline numbers of ``metrics.json``, flat (one column each in ``dvc exp show``)."""
        return self.reports / "scores.json"

    @property
    def report(self) -> Path:
        return self.reports / "report.md"

    @property
    def learning_curve_png(self) -> Path:
        return self.reports / "learning_curve.png"

    @property
    def seed_curves_png(self) -> Path:
        """With ``train.seeds``: every seed's learning curve and their IQM band."""
        return self.reports / "seed_curves.png"

    @property
    def performance_profile_png(self) -> Path:
        """With ``train.seeds``: the performance profile of the seeds' test scores."""
        return self.reports / "performance_profile.png"

    @property
    def settings_png(self) -> Path:
        """The selected model's test scores under each of ``eval.settings`` (only when some are declared)."""
        return self.reports / "settings.png"

    @property
    def baseline_png(self) -> Path:
        """This run's learning curve beside ``select.baseline_run``'s (only when one is named)."""
        return self.reports / "baseline_comparison.png"

    @property
    def elo_png(self) -> Path:
        """With ``env.self_play``: the learner's ELO rating over training."""
        return self.reports / "elo.png"

    @property
    def episode_gif(self) -> Path:
        """With ``eval.video``: the selected model's first test episode."""
        return self.reports / "episode.gif"

    @property
    def select_outputs(self) -> tuple[Path, ...]:
        """Every file the select stage writes, or removes when no longer drawn (checked before it starts)."""
        return (
            self.best_policy,
            self.selection,
            self.metrics,
            self.scores,
            self.report,
            self.learning_curve_png,
            self.seed_curves_png,
            self.performance_profile_png,
            self.settings_png,
            self.baseline_png,
            self.elo_png,
            self.episode_gif,
        )

    @property
    def best(self) -> Path:
        """The selected model: ``policy.pt`` (its weights, byte-identical when the same checkpoint is selected again)
        and ``selection.json`` (what was selected, why, its scores)."""
        return self.root / "models" / self.name

    @property
    def best_policy(self) -> Path:
        return self.best / "policy.pt"

    @property
    def selection(self) -> Path:
        return self.best / "selection.json"

    @property
    def export(self) -> Path:
        return self.root / "export" / self.name


def selected_model(name: str) -> str:
    """Where run ``name``'s selected model is, relative to the project: ``models/<name>/policy.pt``, as params name it
    (``collect.policy``, ``train.init_from``) and dvc.yaml lists it."""
    return Layout(Path(), name).best_policy.as_posix()


def export_files(folder: Path) -> tuple[Path, ...]:
    """The files an export writes in ``folder``, or removes when not exported: checked before it starts."""
    return tuple(folder / name for name in ("policy.onnx", "policy.pt2", "model_card.json"))


def project_path(root: Path, value: str, key: str) -> Path:
    """Where a path from params points: a relative path is inside the project ``root`` and may not climb out of
    it (``../elsewhere``); an absolute path is the user's explicit choice and taken as given."""
    path = Path(value)
    if path.is_absolute():
        return path
    resolved = (root / path).resolve()
    if not resolved.is_relative_to(Path(root).resolve()):
        raise ConfigError(
            f"{key}: {value!r} points outside the project ({resolved}); give a path inside it, or an absolute "
            "path to write elsewhere on purpose"
        )
    return root / path
