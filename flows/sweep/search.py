"""How a study searches: the sweep's space as Optuna distributions, and its sampler and pruner."""

from __future__ import annotations

import inspect
import warnings
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.exceptions import ExperimentalWarning

from rlcore.common.errors import ConfigError, did_you_mean
from rlcore.config.sweep import SweepConfig

_SAMPLERS: dict[str, Any] = {
    "tpe": optuna.samplers.TPESampler,
    "random": optuna.samplers.RandomSampler,
    "cmaes": optuna.samplers.CmaEsSampler,
    "grid": optuna.samplers.GridSampler,
}
_PRUNERS: dict[str, Any] = {
    "median": optuna.pruners.MedianPruner,
    "hyperband": optuna.pruners.HyperbandPruner,
    "none": optuna.pruners.NopPruner,
}
# rlcore's defaults for the median pruner: early CartPole-like evaluations are noisy.
_PRUNER_DEFAULTS: dict[str, dict[str, Any]] = {"median": {"n_startup_trials": 5, "n_warmup_steps": 2}}


def check_options(sweep: SweepConfig, source: str) -> None:
    """One-line errors for options the chosen sampler or pruner does not take, or a missing package."""
    for kind, name, options, classes in (
        ("sampler", sweep.sampler, sweep.sampler_options, _SAMPLERS),
        ("pruner", sweep.pruner, sweep.pruner_options, _PRUNERS),
    ):
        cls = classes[name]
        accepted = [p for p in inspect.signature(cls).parameters if p not in ("self", "search_space", "seed")]
        for option in options:
            if option == "seed":
                raise ConfigError(f"{source}: sweep.{kind}_options: seed: set sweep.seed instead")
            if option not in accepted:
                hint = did_you_mean(option, accepted)
                raise ConfigError(f"{source}: sweep.{kind}_options: {cls.__name__} takes no {option!r}{hint}")
    if sweep.sampler == "cmaes":
        try:
            import cmaes  # noqa: F401
        except ImportError:
            raise ConfigError(f"{source}: sweep.sampler: cmaes needs the 'cmaes' package (pip install cmaes)") from None


def make_sampler(sweep: SweepConfig, trials_so_far: int = 0) -> optuna.samplers.BaseSampler:
    """The sampler for the next trial, seeded by ``sweep.seed`` and the study's trial count.

    Samplers keep their state in the study (TPE refits on every ask, CMA-ES and grid store theirs in
    trial attributes), so a fresh one per trial is equivalent, except that a re-run sweep, or a second
    process on the same study, does not replay the same random draws.
    """
    options: dict[str, Any] = {"seed": sweep.seed + trials_so_far, **sweep.sampler_options}
    if sweep.sampler == "grid":
        return optuna.samplers.GridSampler(sweep.grid(), **options)
    if sweep.sampler == "tpe" and sweep.workers > 1:
        options.setdefault("constant_liar", True)  # running trials count as bad, so workers spread out
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExperimentalWarning)
        return _SAMPLERS[sweep.sampler](**options)


def make_pruner(sweep: SweepConfig) -> optuna.pruners.BasePruner:
    options = {**_PRUNER_DEFAULTS.get(sweep.pruner, {}), **sweep.pruner_options}
    return _PRUNERS[sweep.pruner](**options)


def distributions(sweep: SweepConfig) -> dict[str, BaseDistribution]:
    """The search space as Optuna distributions (categorical values encoded as in the trial's params)."""
    result: dict[str, BaseDistribution] = {}
    for key, dim in sweep.space.items():
        if dim.type == "categorical":
            result[key] = CategoricalDistribution([dim.encode(c) for c in dim.choices or []])
        elif dim.type == "int":
            assert dim.low is not None and dim.high is not None
            step = int(dim.step) if dim.step is not None else 1
            result[key] = IntDistribution(int(dim.low), int(dim.high), log=dim.log, step=step)
        else:
            assert dim.low is not None and dim.high is not None
            result[key] = FloatDistribution(float(dim.low), float(dim.high), log=dim.log, step=dim.step)
    return result


def decode(sweep: SweepConfig, trial_params: dict[str, Any]) -> dict[str, Any]:
    """A trial's Optuna params -> params values (``"[64, 64]"`` back to ``[64, 64]``), in space order."""
    return {key: dim.decode(trial_params[key]) for key, dim in sweep.space.items() if key in trial_params}
