"""Env settings as data: the samplers of per-episode env parameters, curriculum lessons and the named settings
evaluations also run under (the ``env.parameters``, ``env.curriculum`` and ``eval.settings`` params).

A parameter's value is a plain number (or true/false), a constant, or a sampler drawn anew at every episode reset
of every sub-env (ML-Agents' ``environment_parameters`` samplers):

| sampler | keys | draw |
|---|---|---|
| ``constant`` | ``value`` | ``value`` (a bare number means the same) |
| ``uniform`` | ``low``, ``high`` (low <= high) | uniform on [low, high) |
| ``gaussian`` | ``mean``, ``std`` (std >= 0) | normal(mean, std), unclipped |
| ``multirange_uniform`` | ``intervals: [[low, high], ...]`` | uniform on the union (an interval by width) |

How a value reaches the env (an attribute, a constructor keyword, a user adapter) is ``rlcore.envs.parameters``'s;
lessons advancing during training are ``rlcore.envs.curriculum``'s. A leaf module: pydantic, NumPy and
``rlcore.common.strict_model``.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BeforeValidator, Field, ValidationError, field_validator, model_validator

from rlcore.common.strict_model import StrictModel

Value = bool | int | float
"""What a draw gives: samplers give floats; a constant keeps the type it was written with."""


class Sampler(StrictModel):
    """Base of the samplers: :meth:`draw` one value per episode from the sub-env's generator."""

    sampler: str

    def draw(self, rng: np.random.Generator) -> Value:
        raise NotImplementedError

    def representative(self) -> Value:
        """One value the sampler can give (what load-time checks build a probe env with)."""
        raise NotImplementedError

    def bounds(self) -> list[tuple[float, float]]:
        """Closed intervals holding every value the sampler can give (what load-time range checks test)."""
        raise NotImplementedError


class Constant(Sampler):
    sampler: Literal["constant"] = "constant"
    """``constant``: the same value at every episode (a bare number means the same)."""
    value: bool | int | float
    """The value: true/false, an int or a float, kept as written."""

    def draw(self, rng: np.random.Generator) -> Value:
        return self.value

    def representative(self) -> Value:
        return self.value

    def bounds(self) -> list[tuple[float, float]]:
        return [(float(self.value), float(self.value))]


class Uniform(Sampler):
    sampler: Literal["uniform"] = "uniform"
    """``uniform``: drawn uniformly from [low, high) at every episode reset."""
    low: float
    """Lower end of the range."""
    high: float
    """Upper end of the range (>= low)."""

    @model_validator(mode="after")
    def _ordered(self) -> Uniform:
        if self.low > self.high:
            raise ValueError(f"uniform: low must be <= high, got low {self.low:g} > high {self.high:g}")
        return self

    def draw(self, rng: np.random.Generator) -> Value:
        return float(rng.uniform(self.low, self.high))

    def representative(self) -> Value:
        return self.low

    def bounds(self) -> list[tuple[float, float]]:
        return [(self.low, self.high)]


class Gaussian(Sampler):
    sampler: Literal["gaussian"] = "gaussian"
    """``gaussian``: drawn from normal(mean, std), unclipped, at every episode reset."""
    mean: float
    """Mean of the normal distribution."""
    std: float = Field(ge=0)
    """Standard deviation of the normal distribution; 0: always ``mean``."""

    def draw(self, rng: np.random.Generator) -> Value:
        return float(rng.normal(self.mean, self.std))

    def representative(self) -> Value:
        return self.mean

    def bounds(self) -> list[tuple[float, float]]:
        return [(self.mean, self.mean)] if self.std == 0 else [(-math.inf, math.inf)]  # unclipped


class MultiRangeUniform(Sampler):
    sampler: Literal["multirange_uniform"] = "multirange_uniform"
    """``multirange_uniform``: drawn uniformly from the union of ``intervals`` at every episode reset."""
    intervals: list[tuple[float, float]] = Field(min_length=1)
    """``[[low, high], ...]``, each low <= high: an interval is picked with probability proportional to its width
    (uniformly when all are points), then a value uniform in it."""

    @field_validator("intervals")
    @classmethod
    def _ordered(cls, intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
        for index, (low, high) in enumerate(intervals):
            if low > high:
                raise ValueError(f"interval {index} is [{low:g}, {high:g}]: low must be <= high")
        return intervals

    def draw(self, rng: np.random.Generator) -> Value:
        widths = np.array([high - low for low, high in self.intervals], dtype=np.float64)
        total = widths.sum()
        # Uniform over the union of the intervals; zero-width intervals (points) only when all of them are.
        index = int(rng.choice(len(widths), p=widths / total)) if total > 0 else int(rng.integers(len(widths)))
        low, high = self.intervals[index]
        return float(rng.uniform(low, high))

    def representative(self) -> Value:
        return self.intervals[0][0]

    def bounds(self) -> list[tuple[float, float]]:
        return list(self.intervals)


SAMPLERS: dict[str, type[Sampler]] = {
    "constant": Constant,
    "uniform": Uniform,
    "gaussian": Gaussian,
    "multirange_uniform": MultiRangeUniform,
}


def parse_sampler(value: Any) -> Sampler:
    """A bare number (or true/false) is a constant; a mapping names its ``sampler``. One-line ``ValueError``s."""
    if isinstance(value, Sampler):
        return value
    if isinstance(value, bool | int | float):
        return Constant(value=value)
    if not isinstance(value, dict):
        raise ValueError(
            f"expected a number or a sampler ({{sampler: {' | '.join(SAMPLERS)}, ...}}), got {_short(value)}"
        )
    kind = value.get("sampler")
    if kind not in SAMPLERS:
        raise ValueError(f"sampler: expected one of {', '.join(SAMPLERS)}, got {_short(kind)}")
    try:
        return SAMPLERS[kind].model_validate(value)
    except ValidationError as exc:
        raise ValueError(_first_problem(exc)) from None


def _first_problem(exc: ValidationError) -> str:
    error = exc.errors(include_url=False)[0]
    where = ".".join(str(part) for part in error["loc"])
    message = str(error["msg"]).removeprefix("Value error, ")
    message = message[:1].lower() + message[1:]
    if error["type"] == "extra_forbidden":
        message = "unknown key"
    elif error["type"] in ("greater_than_equal", "greater_than"):
        message = f"{message}, got {_short(error.get('input'))}"
    return f"{where}: {message}" if where else message


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


Parameter = Annotated[Constant | Uniform | Gaussian | MultiRangeUniform, BeforeValidator(parse_sampler)]
"""A parameter's value in params: a number, true/false, or a sampler mapping."""

Parameters = dict[str, Parameter]
"""Parameter name -> its value or sampler, applied in this order."""

_NAME = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
"""A lesson's or a setting's name, anchored: pydantic's ``pattern`` searches (``a/b`` holds a match), and a name
shows in the report's tables (a ``|`` would break one)."""
MAX_EVAL_SETTINGS = 64
"""The most ``eval.settings``: each is a full evaluation of every checkpoint (``eval.episodes`` each) and of the
selected model's test episodes, a row of the report's table and a bar of its chart; 10,000 ran evaluate past 120 s."""
MAX_LESSONS = 64
"""The most ``env.curriculum`` lessons: one advances at most at each periodic evaluation, and each is checked against
the env at load."""
MEAN_OVER_SETTINGS = "mean"
"""``select.setting`` value for the mean over ``eval.settings`` (so no setting may have this name)."""


def check_parameter_names(parameters: dict[str, Any]) -> dict[str, Any]:
    for name in parameters:
        if not name.isidentifier():
            raise ValueError(f"{name!r}: a parameter is named like a Python attribute or keyword argument")
    return parameters


class Until(StrictModel):
    """When a lesson is complete: its ``measure`` (smoothed) reached ``threshold`` after at least
    ``min_lesson_steps`` steps of the lesson. Checked at every periodic evaluation (``train.eval_every``)."""

    measure: Literal["eval_return", "progress"]
    """``eval_return``: the mean return of the periodic evaluation, run under the current lesson; ``progress``: the
    share of ``train.max_steps`` trained (0 to 1)."""
    threshold: float
    """The lesson is complete once the smoothed measure is >= this; for ``progress`` a share in (0, 1]."""
    min_lesson_steps: int = Field(0, ge=0)
    """Steps (the run's unit) the lesson lasts at least."""
    smoothing: float = Field(0.0, ge=0, lt=1)
    """Exponential smoothing of the measure: ``s = smoothing * s + (1 - smoothing) * measured`` (0: none; the first
    measurement of a lesson starts ``s``)."""

    @model_validator(mode="after")
    def _progress_is_a_share(self) -> Until:
        if self.measure == "progress" and not 0 < self.threshold <= 1:
            raise ValueError(f"threshold: progress is a share of train.max_steps, in (0, 1], got {self.threshold:g}")
        return self


class Lesson(StrictModel):
    """One lesson of ``env.curriculum``: its parameters override ``env.parameters`` key by key."""

    name: str = Field(pattern=_NAME.pattern)
    """Unique name of the lesson: in the log line when it starts, in the run's curriculum state, and checked when a run
    resumes from a checkpoint."""
    parameters: Parameters = Field(default_factory=dict)
    """Env parameters (a number or a sampler, as ``env.parameters``) that override ``env.parameters`` key by key during
    this lesson."""
    until: Until | None = None
    """When the lesson ends; every lesson but the last needs one, the last has none (it runs to the end)."""

    @field_validator("parameters")
    @classmethod
    def _parameter_names(cls, parameters: dict[str, Any]) -> dict[str, Any]:
        return check_parameter_names(parameters)


def check_curriculum(lessons: list[Lesson]) -> None:
    """``ValueError`` (naming ``env.curriculum.<i>...``) unless every lesson but the last has ``until`` and names
    are unique."""
    if len(lessons) > MAX_LESSONS:
        raise ValueError(f"env.curriculum: at most {MAX_LESSONS} lessons, got {len(lessons)}")
    seen: set[str] = set()
    for index, lesson in enumerate(lessons):
        if lesson.name in seen:
            raise ValueError(f"env.curriculum.{index}.name: {lesson.name!r} names two lessons")
        seen.add(lesson.name)
        last = index == len(lessons) - 1
        if last and lesson.until is not None:
            raise ValueError(
                f"env.curriculum.{index}.until: the last lesson ({lesson.name!r}) runs to the end of training and "
                "has no until"
            )
        if not last and lesson.until is None:
            raise ValueError(
                f"env.curriculum.{index}.until: lesson {lesson.name!r} needs an until (when the next lesson starts)"
            )


class EvalSetting(StrictModel):
    """One named setting of ``eval.settings``: its parameters apply on top of the env's own defaults (not of
    ``env.parameters``), so models trained under any distribution are compared under the same setting."""

    name: str = Field(pattern=_NAME.pattern)
    """Unique name of the setting (not ``mean``): its key in ``reports/<name>/metrics.json``, its row in the report,
    and a value ``select.setting`` takes."""
    parameters: Parameters = Field(default_factory=dict)
    """Env parameters of this setting (a number or a sampler, as ``env.parameters``), applied on top of the env's own
    defaults."""

    @field_validator("parameters")
    @classmethod
    def _parameter_names(cls, parameters: dict[str, Any]) -> dict[str, Any]:
        return check_parameter_names(parameters)


def check_eval_settings(settings: list[EvalSetting]) -> None:
    if len(settings) > MAX_EVAL_SETTINGS:
        raise ValueError(
            f"at most {MAX_EVAL_SETTINGS} settings (each is a full evaluation of every checkpoint), got {len(settings)}"
        )
    seen: set[str] = set()
    for index, setting in enumerate(settings):
        if setting.name == MEAN_OVER_SETTINGS:
            raise ValueError(
                f"eval.settings.{index}.name: {MEAN_OVER_SETTINGS!r} is reserved (select.setting: mean is the mean "
                "over the settings)"
            )
        if setting.name in seen:
            raise ValueError(f"eval.settings.{index}.name: {setting.name!r} names two settings")
        seen.add(setting.name)


def lesson_parameters(parameters: Parameters, lessons: list[Lesson], index: int) -> Parameters:
    """The parameters in effect during lesson ``index``: ``parameters`` overridden by the lesson's, key by key."""
    return {**parameters, **lessons[index].parameters} if lessons else dict(parameters)


def describe_parameters(parameters: Parameters) -> dict[str, Any]:
    """Plain data for reports and model cards: a constant as its value, a sampler as its mapping."""
    return {
        name: sampler.value if isinstance(sampler, Constant) else sampler.model_dump(mode="json")
        for name, sampler in parameters.items()
    }
