"""``rlcore compare``: DVC experiments' periodic-evaluation curves in one PNG, offline, and a table of them.

Each experiment's params come from ``dvc exp show --json`` and its curve (the dvclive TSV of params.yaml's run,
``runs/<name>/dvclive/plots/metrics/<metric>.tsv``) from ``dvc plots diff --json``, which reads it from git or DVC's
cache as the revision holds it. DVC's own HTML loads its Vega scripts from the internet; this draws with matplotlib.
By default the revisions are what ``dvc exp show`` lists: the workspace (unless it is one of the others, as it is
right after ``dvc exp run``), the baseline commit and every experiment of it.
"""

from __future__ import annotations

import json
import logging
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlcore.common.errors import RLCoreError
from rlcore.common.files import check_target
from rlcore.common.numbers import score
from rlcore.config.sweep import flatten
from rlcore.project.tools import dvc_command, problem, run_tool

log = logging.getLogger("rlcore")

WORKSPACE = "workspace"
"""DVC's name for the files as they are on disk."""

DVC_SECONDS = 600
"""How long one dvc command may take (it may read a large cache)."""


@dataclass(frozen=True)
class Revision:
    """One row of ``dvc exp show``: the name DVC and the user call it by (``workspace``, a branch, an experiment's
    name, a commit), its params flattened (``algo.lr``; a file other than params.yaml as ``offline.yaml:algo.lr``),
    its metrics as DVC shows them, and the commit (``workspace`` for the workspace)."""

    name: str
    params: dict[str, Any]
    metrics: dict[str, Any]
    commit: str

    @property
    def run_name(self) -> str:
        """params.yaml's ``name`` at this revision: the run folder its curves are in."""
        return str(self.params.get("name", ""))


@dataclass(frozen=True)
class Listing:
    """What ``dvc exp show`` lists: the workspace, the baseline commit and the baseline's experiments."""

    workspace: Revision
    baseline: Revision
    experiments: list[Revision]

    @property
    def revisions(self) -> list[Revision]:
        return [self.workspace, self.baseline, *self.experiments]


@dataclass(frozen=True)
class ComparedCurve:
    """One experiment's curve: its revision's name, the params whose values differ between the compared revisions
    (``{"algo.lr": 0.003}``), and the curve (``env_steps``, ``values``: the metric at each periodic evaluation)."""

    revision: str
    changed: dict[str, Any]
    env_steps: list[int]
    values: list[float]

    @property
    def final(self) -> float:
        return self.values[-1]

    @property
    def best(self) -> float:
        return max(self.values)

    @property
    def label(self) -> str:
        """The legend's entry: the revision, then its differing params."""
        return f"{self.revision}: {changed_text(self.changed)}" if self.changed else self.revision


def compare_experiments(root: Path, revisions: Sequence[str], output: Path, metric: str) -> list[ComparedCurve]:
    """Draw the curves of ``metric`` of ``revisions`` (none: the module docstring's default) of the DVC project
    ``root`` into the PNG ``output``; returns them in the legend's order. Refused in one line: an ``output`` that is
    no file path, a folder outside a DVC project, an unknown revision, no experiments, a named revision without the
    curve."""
    check_target(output, "--output")
    dvc_root(root)
    listing = read_listing(root)
    known = known_metrics(root, listing.workspace)
    if known and metric not in known:  # the workspace's run has curves, none of them this one
        raise RLCoreError(f"--metric: no curve {metric}; {known_text(listing.workspace, known)}")
    chosen = named_revisions(root, listing, revisions) if revisions else default_revisions(listing)
    curves = read_curves(root, chosen, metric)
    drawn = with_curves(chosen, curves, metric, named=bool(revisions))
    if not drawn:
        names = ", ".join(revision.name for revision in chosen)
        raise RLCoreError(f"--metric: no {metric} curve in {names}; {known_text(listing.workspace, known)}")
    changed = changed_params([revision.params for revision in drawn])
    compared = [ComparedCurve(rev.name, changed[i], *curves[rev.name]) for i, rev in enumerate(drawn)]
    draw(compared, metric, output)
    return compared


def with_curves(chosen: list[Revision], curves: dict[str, Any], metric: str, named: bool) -> list[Revision]:
    """The revisions of ``chosen`` that have a curve; one the user ``named`` without it is refused, one of the
    default's is left out with a log line (a baseline committed before it was ever run)."""
    for revision in chosen:
        if revision.name not in curves:
            where = f"runs/{revision.run_name}/dvclive/"
            if named:
                raise RLCoreError(f"{revision.name}: no {metric} curve in {where} at that revision (never run there?)")
            log.info("%s: no %s curve in %s (not run at that revision); left out", revision.name, metric, where)
    return [revision for revision in chosen if revision.name in curves]


def dvc_root(folder: Path) -> Path:
    """The DVC project ``folder`` is in (the nearest folder holding ``.dvc/``); else one line."""
    folder = folder.resolve()
    for candidate in (folder, *folder.parents):
        if (candidate / ".dvc").is_dir():
            return candidate
    raise RLCoreError(f"{folder}: not a DVC project (no .dvc folder here or above); `rlcore init` makes one")


def read_listing(root: Path, commit: str | None = None) -> Listing:
    """``dvc exp show --json`` (of ``commit``'s experiments; None: HEAD's) read as a :class:`Listing`."""
    command = [dvc_command(), "exp", "show", "--json", *(["--rev", commit, "-n", "1"] if commit else [])]
    rows = json.loads(run_tool(command, root, timeout_seconds=DVC_SECONDS).stdout)
    workspace, baseline = rows[0], rows[-1]
    experiments = [
        _revision(experiment.get("name") or experiment["revs"][0]["rev"][:7], experiment["revs"][0])
        for experiment in baseline.get("experiments") or []
        if experiment.get("revs") and experiment["revs"][0].get("data")  # not a queued or failed one
    ]
    return Listing(
        _revision(WORKSPACE, workspace), _revision(baseline.get("name") or baseline["rev"][:7], baseline), experiments
    )


def _revision(name: str, row: dict[str, Any]) -> Revision:
    data = row.get("data") or {}
    params: dict[str, Any] = {}
    for file, content in sorted((data.get("params") or {}).items()):
        prefix = "" if file == "params.yaml" else f"{file}:"
        params.update(flatten(content.get("data") or {}, prefix))
    metrics = {file: content.get("data") for file, content in (data.get("metrics") or {}).items()}
    return Revision(name, params, metrics, str(data.get("rev") or row.get("rev")))


def default_revisions(listing: Listing) -> list[Revision]:
    """The baseline and its experiments, after the workspace unless it is one of them (same params and metrics);
    refused when the baseline has no experiments."""
    if not listing.experiments:
        raise RLCoreError(
            f"no experiments to compare: {listing.baseline.name} has none in `dvc exp show`; run "
            "`dvc exp run -S key=value` (any params key) first, or name the revisions to compare"
        )
    others = [listing.baseline, *listing.experiments]
    same = any((rev.params, rev.metrics) == (listing.workspace.params, listing.workspace.metrics) for rev in others)
    return others if same else [listing.workspace, *others]


def named_revisions(root: Path, listing: Listing, names: Sequence[str]) -> list[Revision]:
    """The revisions the user named, in their order (each once): ``workspace``, an experiment, the baseline, or any
    commit, branch or tag (its params read by another ``dvc exp show``); an unknown one is refused in one line."""
    chosen: dict[str, Revision] = {}
    for name in names:
        found = next((rev for rev in listing.revisions if rev.name == name), None)
        if found is None:
            verified = run_tool(["git", "rev-parse", "--verify", "--quiet", f"{name}^{{commit}}"], root, check=False)
            if verified.returncode != 0:
                raise RLCoreError(
                    f"{name}: unknown revision: not in `dvc exp show` ({', '.join(r.name for r in listing.revisions)})"
                    " and no git branch, tag or commit"
                )
            commit = verified.stdout.strip()
            found = next((rev for rev in listing.revisions if rev.commit == commit), None)
            found = found or read_listing(root, commit).baseline
        chosen.setdefault(name, Revision(name, found.params, found.metrics, found.commit))
    return list(chosen.values())


def curves_folder(run_name: str) -> str:
    """Where a run's dvclive curves are, as dvc.yaml declares them (its ``plots:``, with ``x: step``)."""
    return f"runs/{run_name}/dvclive/plots/metrics"


def read_curves(root: Path, revisions: list[Revision], metric: str) -> dict[str, tuple[list[int], list[float]]]:
    """Each revision's curve of ``metric`` by its name, as ``dvc plots diff --json`` reads it from git or DVC's cache
    (env steps, values); a revision without that curve is absent.

    DVC is given the folders dvc.yaml declares, not the TSV files: a file named alone is drawn against its row
    index, not against dvc.yaml's ``x: step``."""
    wanted = {revision.name: f"{curves_folder(revision.run_name)}/{metric}.tsv" for revision in revisions}
    folders = sorted({curves_folder(revision.run_name) for revision in revisions})
    field = metric.rsplit("/", 1)[-1]
    with tempfile.TemporaryDirectory(prefix="rlcore-compare-") as scratch:  # DVC copies image plots there
        command = [dvc_command(), "plots", "diff", "--json", "-o", scratch, *wanted, "--targets", *folders]
        result = run_tool(command, root, check=False, timeout_seconds=DVC_SECONDS)
    if result.returncode != 0:
        raise RLCoreError(f"`dvc plots diff` failed: {problem(result)}")
    plots = json.loads(result.stdout).get("data") or {}
    # A declared plot's key is "dvc.yaml::<path>"; the same folder as a raw target gives each file again under its
    # bare path, drawn against row numbers: the declared one wins when both are there.
    declared = [key for key in plots if "::" in key]
    points: dict[str, dict[int, float]] = {}
    for key in declared or list(plots):
        path = key.rpartition("::")[2]
        for entry in plots[key]:
            for point in (entry.get("content") or {}).get("data", {}).get("values") or []:
                name = point.get("rev")
                if wanted.get(name) == path and field in point:
                    points.setdefault(name, {})[int(float(point["step"]))] = float(point[field])
    return {name: (sorted(curve), [curve[step] for step in sorted(curve)]) for name, curve in points.items()}


def known_metrics(root: Path, workspace: Revision) -> list[str]:
    """The curves of the workspace's run (``eval/mean_return``, ...), from its dvclive folder; none when not run."""
    folder = root / curves_folder(workspace.run_name)
    return sorted(path.relative_to(folder).with_suffix("").as_posix() for path in folder.rglob("*.tsv"))


def known_text(workspace: Revision, known: list[str]) -> str:
    if not known:
        return f"no runs/{workspace.run_name}/dvclive/ in the workspace to list the curves from"
    return f"the curves in runs/{workspace.run_name}/dvclive/: {', '.join(known)}"


def changed_params(params: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """For each of ``params`` (flattened), its keys whose values are not the same in all (a key missing in some
    counts as changed): what ``dvc exp show --only-changed`` shows."""
    keys = sorted({key for one in params for key in one})
    changed = [key for key in keys if len({json.dumps(one.get(key), sort_keys=True) for one in params}) > 1]
    return [{key: one.get(key) for key in changed} for one in params]


def changed_text(changed: dict[str, Any]) -> str:
    return ", ".join(f"{key}={value}" for key, value in changed.items())


def draw(curves: list[ComparedCurve], metric: str, output: Path) -> None:
    """One line per curve, a legend entry naming each (:attr:`ComparedCurve.label`), into the PNG ``output``."""
    from rlcore.evaluation.plots import new_figure  # matplotlib loads only when a figure is drawn

    with new_figure(output, figsize=(8, 4.5)) as (_, ax):
        for curve in curves:
            ax.plot(curve.env_steps, curve.values, marker=".", label=curve.label)
        ax.set_xlabel("env steps")
        ax.set_ylabel(metric)
        ax.set_title(f"{metric} of {len(curves)} DVC revisions")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")


def table(curves: list[ComparedCurve]) -> str:
    """The curves as a Markdown table: experiment, differing params, final and best value."""
    rows = [["experiment", "params that differ", "final", "best"]]
    rows += [[c.revision, changed_text(c.changed) or "-", score(c.final), score(c.best)] for c in curves]
    widths = [max(len(row[column]) for row in rows) for column in range(4)]
    lines = []
    for index, row in enumerate(rows):
        cells = [
            cell.ljust(width) if column < 2 else cell.rjust(width)
            for column, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("| " + " | ".join(cells) + " |")
        if index == 0:
            lines.append("|" + "|".join("-" * (width + 2) for width in widths) + "|")
    return "\n".join(lines)
