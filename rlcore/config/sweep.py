"""The ``sweep`` section of the params: a hyperparameter study over any params key, declared as data.

rlcore only declares a study and checks what it can on its own; ``flows/sweep/`` runs it with Optuna
(rlcore never imports Optuna) and checks it against the params model and the env registry
(``flows/sweep/plan.py``). This module imports only pydantic, PyYAML and the leaf ``rlcore.common.strict_model``, so
``rlcore.config.sections`` holds a :class:`SweepConfig` without an import cycle.

A study searches ``space``, a mapping from params keys to search dimensions, written either nested like
the params tree or with dotted keys::

    sweep:
      space:
        algo:
          lr: {type: float, low: 1.0e-5, high: 3.0e-3, log: true}
          n_steps: {type: int, low: 16, high: 128, step: 16}
        policy.activation: {type: categorical, choices: [tanh, relu]}

Each trial trains every seed of ``seeds`` (on every env of ``envs``, if given), scores each run by
``metric`` of its selected checkpoint, and aggregates the scores. Bad spaces are refused before any
trial starts, with one line naming the key (here, or by ``flows.sweep.plan.check_space``).
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import re
from typing import Any, Literal

import yaml
from pydantic import Field, field_validator, model_validator

from rlcore.common.strict_model import StrictModel

Metric = Literal["mean_return", "median_return", "min_return", "max_return", "std_return", "mean_length"]
"""What a trial can be scored by: the evaluate stage's numbers for the selected checkpoint."""

_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*$")
_STUDY_KEYS = ("n_trials", "timeout_seconds", "workers", "storage", "study_name", "heartbeat_seconds")


class _Section(StrictModel):
    """Unknown keys, non-finite floats and booleans as numbers are refused (``rlcore.common.strict_model``)."""


def _g(value: float) -> str:
    return f"{value:g}"


class SearchDimension(_Section):
    """One searched params key: a float or int range (log-uniform or stepped, optionally) or a list of choices."""

    type: Literal["float", "int", "categorical"]
    """``float`` or ``int``: a range from ``low`` to ``high``; ``categorical``: one of ``choices``."""
    low: int | float | None = None
    """Lowest value of a float or int range (included)."""
    high: int | float | None = None
    """Highest value of a float or int range (included; >= low)."""
    log: bool = False
    """Sample uniformly in log space (log-uniform); needs ``low > 0``."""
    step: int | float | None = None
    """Sample only ``low + k * step``; not with ``log``."""
    choices: list[Any] | None = None
    """Categorical values: scalars, or lists/mappings (``[64, 64]``), which are searched as their YAML text."""

    @model_validator(mode="after")
    def _consistent(self) -> SearchDimension:
        if self.type == "categorical":
            if not self.choices:
                raise ValueError("empty categorical: give at least one value in choices")
            if self.low is not None or self.high is not None or self.step is not None or self.log:
                raise ValueError("a categorical takes choices only, not low/high/step/log")
            encoded = [self.encode(choice) for choice in self.choices]
            if len(set(map(repr, encoded))) != len(encoded):
                raise ValueError(f"choices repeat a value: {self.choices}")
            return self
        if self.choices is not None:
            raise ValueError(f"a {self.type} range takes low and high, not choices")
        if self.low is None or self.high is None:
            raise ValueError(f"a {self.type} range needs both low and high")
        if self.low > self.high:
            raise ValueError(f"low ({_g(self.low)}) > high ({_g(self.high)})")
        if self.log and self.low <= 0:
            raise ValueError(f"log range needs low > 0, got low {_g(self.low)}")
        if self.log and self.step is not None:
            raise ValueError("log and step cannot be combined")
        if self.step is not None and self.step <= 0:
            raise ValueError(f"step must be > 0, got {_g(self.step)}")
        if self.type == "int":
            for name in ("low", "high", "step"):
                value = getattr(self, name)
                if value is not None and value != int(value):
                    raise ValueError(f"an int range needs whole numbers, got {name} {_g(value)}")
        return self

    @staticmethod
    def encode(choice: Any) -> Any:
        """A categorical value as Optuna stores it: scalars as they are, lists and mappings as YAML text."""
        return choice if choice is None or isinstance(choice, bool | int | float | str) else yaml_text(choice)

    def decode(self, stored: Any) -> Any:
        """The params value of a stored categorical value (the inverse of :meth:`encode`)."""
        if self.type != "categorical":
            return int(stored) if self.type == "int" else float(stored)
        assert self.choices is not None
        for choice in self.choices:
            if self.encode(choice) == stored and type(self.encode(choice)) is type(stored):
                return copy.deepcopy(choice)
        raise KeyError(f"{stored!r} is not one of {self.choices}")

    def probes(self) -> list[Any]:
        """Values a trial may sample, to check against the params before any trial: the ends and an inside value."""
        if self.type == "categorical":
            return list(self.choices or [])
        assert self.low is not None and self.high is not None
        low, high = self.low, self.high
        if self.log:
            inside = math.exp(math.log(low) + 0.382 * (math.log(high) - math.log(low)))
        else:
            inside = low + 0.382 * (high - low)
        if self.step is not None:
            inside = low + self.step * math.floor((inside - low) / self.step)
        if self.type == "int":
            return sorted({int(low), int(inside), int(high)})
        return sorted({float(low), float(inside), float(high)})


class SweepEnv(_Section):
    """An env a trial also trains on; its score is normalized: ``baseline`` -> 0, ``target`` -> 1."""

    id: str
    """A gymnasium env id; ``rlcore sweep`` checks it is registered before any trial (``flows/sweep/plan.py``)."""
    baseline: float = 0.0
    """The score that normalizes to 0 (e.g. a random policy's)."""
    target: float
    """The score that normalizes to 1 (e.g. the env's solved threshold)."""

    @model_validator(mode="after")
    def _span(self) -> SweepEnv:
        if self.target == self.baseline:
            raise ValueError(f"target must differ from baseline ({_g(self.baseline)})")
        return self

    def normalize(self, score: float) -> float:
        return (score - self.baseline) / (self.target - self.baseline)


class SweepConfig(_Section):
    """A hyperparameter study (``rlcore sweep``): what to search, how to score a trial, how to run the study."""

    space: dict[str, SearchDimension] = Field(default_factory=dict)
    """Params keys to search (nested like the params, or dotted) -> their search dimension."""
    metric: Metric = "mean_return"
    """The selected checkpoint's evaluation number that scores a run (the evaluate stage's)."""
    direction: Literal["maximize", "minimize"] = "maximize"
    """Whether a higher (``maximize``) or a lower (``minimize``) ``metric`` is better."""
    n_trials: int | None = Field(20, ge=1)
    """Finished (complete or pruned) trials the study should have; null to run until ``timeout_seconds``."""
    timeout_seconds: float | None = Field(None, gt=0)
    """No new trial starts after this many seconds of this invocation (running trials finish)."""
    workers: int = Field(1, ge=1, le=1024)
    """Trials run at once, each in its own process when > 1 (at most 1024)."""
    sampler: Literal["tpe", "random", "cmaes", "grid"] = "tpe"
    """The Optuna sampler: ``tpe`` (with several workers: a constant liar, so they spread out), ``random``, ``cmaes``
    (needs the ``cmaes`` package), or ``grid`` (every combination; a range by its ``step``, 1 without one). Seeded by
    ``seed``."""
    sampler_options: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments of the Optuna sampler (e.g. ``n_startup_trials``)."""
    pruner: Literal["median", "hyperband", "none"] = "median"
    """The Optuna pruner that stops unpromising trials at their periodic evaluations: ``median`` (rlcore's defaults: 5
    startup trials, 2 warm-up steps), ``hyperband``, or ``none``."""
    pruner_options: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments of the Optuna pruner; steps are evaluation numbers (every ``train.eval_every``)."""
    seeds: list[int] | None = None
    """Training seeds of each trial; null: the params' ``seed``. Two or more train as one batched program (per env of
    ``envs``) when ``train.batch_seeds`` is true and the algorithm batches seeds (``train.seeds``' trainer), else one
    after another; either way each seed's run is the run with ``seed: k``, scored and aggregated alike."""
    envs: list[SweepEnv] = Field(default_factory=list)
    """Envs of each trial, each normalized to its target; empty: the params' ``env.id``, not normalized."""
    aggregate: Literal["mean", "median", "min", "iqm"] = "mean"
    """How the scores of a trial's runs (seeds x envs) become its value; ``iqm``: the interquartile mean over runs
    (rliable's, the 25%-trimmed mean, ``rlcore.evaluation.aggregate.iqm``), what ``train.seeds`` reports."""
    study_name: str | None = Field(None, pattern=r"^[A-Za-z0-9._-]+$")
    """Null: ``<name>-sweep-<hash of the params and the sweep>``, so a changed sweep starts a new study."""
    storage: str | None = None
    """Null: the journal file ``.optuna/journal.log``; a ``*.log`` path (a journal file), or an RDB URL."""
    seed: int = 0
    """Seed of the sampler."""
    heartbeat_seconds: float = Field(30.0, gt=0)
    """How often a running trial's heartbeat is recorded."""
    stale_after_seconds: float = Field(300.0, gt=0)
    """A running trial whose heartbeat is older than this is failed and retried (as is one of a dead process)."""
    max_retries: int = Field(2, ge=0)
    """How often the params of a stale trial are retried."""

    @field_validator("space", mode="before")
    @classmethod
    def _flatten(cls, space: Any) -> Any:
        return _flatten_space(space, "") if isinstance(space, dict) else space

    @field_validator("space")
    @classmethod
    def _keys(cls, space: dict[str, SearchDimension]) -> dict[str, SearchDimension]:
        for key in space:
            if not _KEY.match(key):
                raise ValueError(f"{key!r}: not a params key (expected dotted names like algo.lr)")
        return space

    @field_validator("storage")
    @classmethod
    def _storage(cls, storage: str | None) -> str | None:
        if storage is None or storage.endswith(".log") or re.match(r"^[a-z][a-z0-9+]*://", storage):
            return storage
        raise ValueError(
            "expected a journal file ending in .log or an RDB URL (postgresql://, mysql://, sqlite:///), "
            f"got {storage!r}"
        )

    @field_validator("seeds")
    @classmethod
    def _seeds(cls, seeds: list[int] | None) -> list[int] | None:
        if seeds is not None and (not seeds or len(set(seeds)) != len(seeds)):
            raise ValueError(f"must be a non-empty list of distinct seeds, got {seeds}")
        return seeds

    @model_validator(mode="after")
    def _runnable(self) -> SweepConfig:
        if self.n_trials is None and self.timeout_seconds is None and self.sampler != "grid":
            raise ValueError("sweep: set n_trials or timeout_seconds (or both)")
        if self.stale_after_seconds <= self.heartbeat_seconds:
            raise ValueError(
                f"sweep.stale_after_seconds: must be > heartbeat_seconds ({_g(self.heartbeat_seconds)}), "
                f"got {_g(self.stale_after_seconds)}"
            )
        if self.sampler == "grid":
            for key, dim in self.space.items():
                if dim.type == "float" and dim.step is None:
                    raise ValueError(f"sweep.space.{key}: the grid sampler needs choices or a step")
        return self

    def fingerprint(self, params_tree: dict[str, Any]) -> str:
        """Hash of what a trial computes and how the study searches; how long or where it runs is left out."""
        study = {k: v for k, v in self.model_dump(mode="json").items() if k not in _STUDY_KEYS}
        trial = {k: v for k, v in params_tree.items() if k not in ("sweep", "name")}
        trial["train"] = {k: v for k, v in trial.get("train", {}).items() if k != "progress_bar"}
        blob = json.dumps({"study": study, "trial": trial}, sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:8]

    def grid(self) -> dict[str, list[Any]]:
        """Every (encoded) value of each dimension, for the grid sampler."""
        grid: dict[str, list[Any]] = {}
        for key, dim in self.space.items():
            if dim.type == "categorical":
                grid[key] = [dim.encode(c) for c in dim.choices or []]
                continue
            assert dim.low is not None and dim.high is not None
            step = dim.step if dim.step is not None else 1
            count = int(math.floor((dim.high - dim.low) / step + 1e-9)) + 1
            values = [dim.low + i * step for i in range(count)]
            grid[key] = [int(v) for v in values] if dim.type == "int" else [float(v) for v in values]
        return grid


def _flatten_space(space: dict[str, Any], prefix: str) -> dict[str, Any]:
    """``{algo: {lr: {type: ...}}}`` and ``{algo.lr: {type: ...}}`` -> ``{"algo.lr": {type: ...}}``."""
    flat: dict[str, Any] = {}
    for key, value in space.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value and "type" not in value:
            inner = _flatten_space(value, f"{path}.")
        else:
            inner = {path: value}
        for inner_key, dim in inner.items():
            if inner_key in flat:
                raise ValueError(f"{inner_key!r} is declared twice (nested and dotted)")
            flat[inner_key] = dim
    return flat


def yaml_text(value: Any) -> str:
    """``value`` as one line of YAML that parses back to it (``1e-05`` -> ``1.0e-05``, ``[64, 64]``)."""
    text = yaml.safe_dump(value, default_flow_style=True, width=10**9)
    return text.removesuffix("\n...\n").strip()


def overrides_for(values: dict[str, Any]) -> list[str]:
    """``{"algo.lr": 0.001}`` -> ``["algo.lr=0.001"]``, as ``--set`` and
    :func:`rlcore.config.reading.apply_overrides` take."""
    return [f"{key}={yaml_text(value)}" for key, value in values.items()]


def nested(values: dict[str, Any]) -> dict[str, Any]:
    """``{"algo.lr": 0.001}`` -> ``{"algo": {"lr": 0.001}}``."""
    tree: dict[str, Any] = {}
    for key, value in values.items():
        node = tree
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return tree


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"algo": {"lr": 0.001}}`` -> ``{"algo.lr": 0.001}`` (empty mappings are kept as leaves)."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat
