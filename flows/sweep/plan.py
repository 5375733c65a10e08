"""Plan a sweep: load the params, check everything before any trial, and name the study and its folders.

Every check raises a one-line :class:`ConfigError` naming the key: the ``sweep`` section's own (pydantic,
``rlcore/config/sweep.py``), the env ids of ``sweep.envs``, the search space against the params model
(:func:`check_space`), and the sampler's and pruner's options (``flows/sweep/search.py``).
"""

from __future__ import annotations

import copy
import math
import shlex
import sys
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from optuna.distributions import BaseDistribution
from pydantic import BaseModel

from flows.sweep.search import check_options, distributions
from flows.sweep.storage import storage_files, storage_spec
from rlcore.common.errors import ConfigError, RLCoreError, did_you_mean
from rlcore.common.files import check_target
from rlcore.common.stage_paths import sweep_reports, sweep_trials
from rlcore.common.versions import revision_label
from rlcore.config.inheritance import read_params_tree
from rlcore.config.reading import apply_overrides
from rlcore.config.sections import Params
from rlcore.config.sweep import SweepConfig, flatten, overrides_for, yaml_text
from rlcore.envs.ids import check_env_id
from rlcore.params import params_model, validate_params

REPORT_PLOTS = {
    "history.png": "plot_optimization_history",
    "importances.png": "plot_param_importances",
    "parallel_coordinates.png": "plot_parallel_coordinate",
}
"""Optuna's matplotlib plots the report draws in ``reports/sweep/``: file name -> function."""
REPORT_FILES = ("summary.md", "best_params.yaml", "trials.parquet", "trials.csv", *REPORT_PLOTS)
"""Every file of ``reports/sweep/`` (``flows/sweep/report.py``)."""

_RESERVED = {
    "name": "the sweep names each trial's folder",
    "seed": "set sweep.seeds instead",
    "train.seeds": "set sweep.seeds instead",
}


@dataclass(frozen=True)
class SweepPlan:
    """A checked sweep: what to search, where the study lives, where trials and reports go."""

    root: Path
    params_file: str
    overrides: list[str]
    tree: dict[str, Any]
    sweep: SweepConfig
    n_trials: int | None
    storage: str
    study_name: str
    command: str
    git_revision: str | None

    @property
    def folder(self) -> Path:
        """Trials write under ``runs/sweeps/<study>/trial_<number>/``."""
        return sweep_trials(self.root, self.study_name)

    @property
    def reports(self) -> Path:
        return sweep_reports(self.root)

    @property
    def report_files(self) -> tuple[Path, ...]:
        return tuple(self.reports / name for name in REPORT_FILES)

    @property
    def distributions(self) -> dict[str, BaseDistribution]:
        return distributions(self.sweep)


def plan_sweep(params_file: str, overrides: list[str], root: Path) -> SweepPlan:
    """Load and check everything a sweep needs; raises a one-line :class:`ConfigError` before any trial."""
    path = Path(params_file) if Path(params_file).is_absolute() else root / params_file
    tree = apply_overrides(read_params_tree(path), list(overrides))
    params = validate_params(tree, params_file)
    sweep = params.sweep
    check_envs(sweep, params_file)
    check_space(tree, params, params_file)
    check_options(sweep, params_file)
    n_trials = sweep.n_trials
    if sweep.sampler == "grid":  # every point once, no more
        size = math.prod(len(values) for values in sweep.grid().values())
        n_trials = size if n_trials is None else min(n_trials, size)
    name = sweep.study_name or f"{params.name}-sweep-{sweep.fingerprint(params.to_dict())}"
    plan = SweepPlan(
        root=root.resolve(),
        params_file=params_file,
        overrides=list(overrides),
        tree=tree,
        sweep=sweep,
        n_trials=n_trials,
        storage=storage_spec(sweep, root),
        study_name=name,
        command=shlex.join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        git_revision=revision_label(root),
    )
    check_outputs(plan)
    return plan


def check_outputs(plan: SweepPlan) -> None:
    """The files a sweep writes are absent or regular files (``rlcore.common.files.check_target``), before any trial:
    the study's journal or SQLite file and its lock (``sweep.storage``), and the reports."""
    for path in storage_files(plan.storage):
        check_target(path, "sweep.storage")
    for path in plan.report_files:
        check_target(path)


def check_envs(sweep: SweepConfig, source: str) -> None:
    """Every env of ``sweep.envs`` must be a registered gymnasium id (importing ``module:`` prefixes)."""
    for index, env in enumerate(sweep.envs):
        try:
            check_env_id(env.id)
        except (ValueError, RLCoreError) as exc:
            reason = str(exc).removeprefix(f"{source}: ")
            raise ConfigError(f"{source}: sweep.envs.{index}.id: {reason}") from None


def check_space(tree: dict[str, Any], params: Params, source: str) -> None:
    """Refuse a space that no trial could run, before any trial: one :class:`ConfigError` line per problem.

    Every key must be a value of the params tree (not a section, not ``name``/``seed``/``sweep.*``), and
    every value a trial may sample (each range's ends and an inside value, every choice) must pass the
    params' own validation, so a float range over an int key or a string choice for a float fails here.
    ``params`` is ``tree`` validated.
    """
    sweep = params.sweep
    if params.train.seeds is not None:  # each trial's runs are sweep.seeds' (one seed each)
        raise ConfigError(f"{source}: train.seeds: a sweep trains each trial on sweep.seeds; set train.seeds to null")
    if not sweep.space:
        raise ConfigError(f"{source}: sweep.space: empty; declare at least one params key to search, e.g. algo.lr")
    model = params_model(params.algo.name)
    known = [key for key in flatten(params.to_dict()) if not key.startswith("sweep.")]
    for key, dim in sweep.space.items():
        where = f"{source}: sweep.space.{key}"
        top = key.split(".")[0]
        if key in _RESERVED or top == "sweep":
            raise ConfigError(f"{where}: cannot be searched ({_RESERVED.get(key, 'the sweep settings are fixed')})")
        kind = _key_kind(model, key.split("."))
        if kind == "section":
            raise ConfigError(f"{where}: is a section, not a value; search its keys, e.g. {key}.{{...}}")
        if kind == "unknown":
            raise ConfigError(f"{where}: unknown params key{did_you_mean(key, known)}")
        for probe in dim.probes():
            try:
                validate_params(apply_overrides(copy.deepcopy(tree), overrides_for({key: probe})), source)
            except ConfigError as exc:
                reason = str(exc).removeprefix(f"{source}: ")
                raise ConfigError(f"{where}: {dim.type} value {yaml_text(probe)} does not fit: {reason}") from None


def _key_kind(model: type[BaseModel], parts: list[str]) -> Literal["value", "section", "unknown"]:
    node: Any = model
    for part in parts:
        if not (isinstance(node, type) and issubclass(node, BaseModel)):
            # Inside a free-form mapping (env.kwargs) any key is allowed; inside a plain value none is.
            return "value" if typing.get_origin(node) is dict else "unknown"
        field = node.model_fields.get(part)
        if field is None:
            return "unknown"
        node = field.annotation
    return "section" if isinstance(node, type) and issubclass(node, BaseModel) else "value"
