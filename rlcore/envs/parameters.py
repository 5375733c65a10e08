"""How an env parameter reaches the env, and the per-episode settings that draw and apply them.

A parameter named in ``env.parameters``, a curriculum lesson or ``eval.settings`` is, for the env ``env.id``:

1. a **constructor keyword** of the env (Pendulum-v1's ``g``, LunarLander's ``gravity``): the sub-env's base env is
   built again with the new value at its episode boundary (only when the value changed), inside the wrapper stack,
   keeping its random generator, so the vector env's next-step autoreset sees one ordinary reset;
2. else a numeric **attribute** of the unwrapped env (CartPole's ``length``, ``masscart``): set, then the quantities
   the env derives from it are recomputed (:data:`DERIVED`: CartPole's ``total_mass`` and ``polemass_length``);
3. or, when ``env.parameters_adapter`` names ``module:function``, neither: ``function(env, values)`` gets the
   unwrapped env and every drawn value (envs whose physics live elsewhere, e.g. MuJoCo model fields).

Anything else is refused at load, in one line naming the env and the parameter (:func:`check_parameters`), and so
is a value (or a sampler that can draw one) outside the parameter's valid range where the env's is known
(:data:`RANGES`: CartPole's masses and length must be > 0, ...). Values that pass and still break the physics (a
wrapper, an adapter) are caught when stepped: ``rlcore.envs.stepping.NonFiniteError``. A parameter the settings in
effect do not draw (an earlier curriculum lesson's) is at a fresh env's value (:class:`EnvParameters`).
Nothing here reads the params model (``rlcore.envs.config`` calls the checks): plain ids, kwargs and samplers in.
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from rlcore.common.errors import UserCodeError, did_you_mean
from rlcore.envs.ids import env_creator, env_spec, import_object
from rlcore.envs.settings import Constant, Gaussian, Parameters, Sampler, Uniform, Value


def _cartpole(env: Any) -> None:
    env.total_mass = env.masspole + env.masscart
    env.polemass_length = env.masspole * env.length


DERIVED: dict[str, tuple[Callable[[Any], None], tuple[str, ...], tuple[str, ...]]] = {
    "gymnasium.envs.classic_control.cartpole.CartPoleEnv": (
        _cartpole,
        ("total_mass", "polemass_length"),
        ("masspole", "masscart", "length"),
    ),
}
"""Env class (``module.Class``; subclasses too) -> (recompute what it derives from its parameters, the derived
attribute names, which are not parameters themselves, and the parameters they come from)."""

BUILT_WITH = "rlcore_constructor_values"
"""Attribute set on a base env rebuilt for constructor parameters: the values it was built with."""

BASE_VALUES = "rlcore_base_values"
"""Attribute set on a base env whose attributes rlcore set: each one's value before rlcore first set it (what the
env was built with), to restore when the settings in effect no longer draw it."""

ADAPTED = "rlcore_adapted_names"
"""Attribute set on a base env given to ``env.parameters_adapter``: the names it applied."""


def _derived(env: Any) -> tuple[Callable[[Any], None] | None, tuple[str, ...], tuple[str, ...]]:
    for cls in type(env).__mro__:
        found = DERIVED.get(f"{cls.__module__}.{cls.__qualname__}")
        if found is not None:
            return found
    return None, (), ()


@dataclass(frozen=True)
class Range:
    """The valid values of an env parameter: above ``low`` (or from it, ``inclusive``). Every value must also be
    finite; params refuse ``.nan`` and ``.inf`` everywhere (``rlcore.common.strict_model``)."""

    low: float
    inclusive: bool = False

    def admits(self, value: float) -> bool:
        return value > self.low or (self.inclusive and value == self.low)

    def __str__(self) -> str:
        return f"{'>=' if self.inclusive else '>'} {self.low:g}"


POSITIVE = Range(0.0)
NON_NEGATIVE = Range(0.0, inclusive=True)
_CLASSIC = "gymnasium.envs.classic_control"

RANGES: dict[str, dict[str, Range]] = {
    # Masses and the pole's length divide the dynamics (a total mass or a length of 0 gives NaN states); tau is the
    # integration step.
    f"{_CLASSIC}.cartpole.CartPoleEnv": {
        "length": POSITIVE,
        "masspole": POSITIVE,
        "masscart": POSITIVE,
        "tau": POSITIVE,
        "x_threshold": POSITIVE,
        "theta_threshold_radians": POSITIVE,
    },
    # thdot += (3 g / (2 l) sin th + 3 / (m l^2) u) dt; speed and torque are clipped to [-max, max].
    f"{_CLASSIC}.pendulum.PendulumEnv": {
        "m": POSITIVE,
        "l": POSITIVE,
        "dt": POSITIVE,
        "max_speed": POSITIVE,
        "max_torque": POSITIVE,
    },
    f"{_CLASSIC}.mountain_car.MountainCarEnv": {"max_speed": POSITIVE},
    f"{_CLASSIC}.continuous_mountain_car.Continuous_MountainCarEnv": {"max_speed": POSITIVE, "power": NON_NEGATIVE},
    # The links' inertia matrix must stay positive definite: positive masses and lengths, a non-negative moment.
    f"{_CLASSIC}.acrobot.AcrobotEnv": {
        "LINK_LENGTH_1": POSITIVE,
        "LINK_LENGTH_2": POSITIVE,
        "LINK_MASS_1": POSITIVE,
        "LINK_MASS_2": POSITIVE,
        "LINK_MOI": NON_NEGATIVE,
        "LINK_COM_POS_1": NON_NEGATIVE,
        "LINK_COM_POS_2": NON_NEGATIVE,
        "MAX_VEL_1": POSITIVE,
        "MAX_VEL_2": POSITIVE,
        "dt": POSITIVE,
        "torque_noise_max": NON_NEGATIVE,
    },
}
"""Env class (``module.Class``; subclasses too) -> the valid ranges of its parameters that are not just "finite":
checked at load on constants and on every value a sampler can draw (``env.parameters``, lessons, ``eval.settings``)."""


def _ranges(env: Any) -> dict[str, Range]:
    for cls in type(env).__mro__:
        found = RANGES.get(f"{cls.__module__}.{cls.__qualname__}")
        if found is not None:
            return found
    return {}


@dataclass(frozen=True)
class Catalogue:
    """What ``env_id`` built with ``kwargs`` accepts as parameters, by kind (``number``, ``integer``, ``flag``)."""

    constructor: dict[str, str]
    attributes: dict[str, str]
    derived: tuple[str, ...]
    sources: tuple[str, ...]
    """The parameters the derived quantities come from."""
    ranges: dict[str, Range]
    """The valid ranges of parameters that have one beyond "finite" (:data:`RANGES`)."""


def _kind(value: Any) -> str | None:
    if isinstance(value, bool | np.bool_):
        return "flag"
    if isinstance(value, int | np.integer):
        return "integer"
    if isinstance(value, float | np.floating):
        return "number"
    return None


@functools.lru_cache(maxsize=64)
def _catalogue(env_id: str, kwargs_json: str) -> Catalogue:
    kwargs = json.loads(kwargs_json)
    creator = env_creator(env_id)
    constructor: dict[str, str] = {}
    try:
        signature = inspect.signature(creator)
    except (TypeError, ValueError):
        signature = None
    if signature is not None:
        for name, parameter in signature.parameters.items():
            kind = _kind(parameter.default) if parameter.default is not inspect.Parameter.empty else None
            if kind is not None and name != "render_mode":
                constructor[name] = kind
    env = gym.make(env_spec(env_id), **kwargs)
    try:
        base = env.unwrapped
        attributes: dict[str, str] = {}
        for name in dir(base):
            if name.startswith("_") or name in constructor:
                continue
            value = inspect.getattr_static(base, name, None)  # no properties run (np_random would seed itself)
            kind = _kind(value)
            if kind is not None:
                attributes[name] = kind
        _, derived, sources = _derived(base)
        ranges = _ranges(base)
    finally:
        env.close()
    return Catalogue(constructor, {k: v for k, v in attributes.items() if k not in derived}, derived, sources, ranges)


def catalogue(env_id: str, kwargs: dict[str, Any]) -> Catalogue:
    """The parameters ``env_id`` (built with ``kwargs``) has: one probe env per id and kwargs, per process."""
    return _catalogue(env_id, json.dumps(kwargs, sort_keys=True, default=str))


def _fits(kind: str, sampler: Any) -> bool:
    """Whether the sampler's values fit a parameter of ``kind``: a float anywhere a number goes, an integer only
    from an integer constant, a flag only from true/false."""
    value = sampler.value if isinstance(sampler, Constant) else 0.5
    given = _kind(value)
    return {"number": given in ("number", "integer"), "integer": given == "integer", "flag": given == "flag"}[kind]


_KIND_WORDS = {"number": "a number", "integer": "an integer (a constant)", "flag": "true or false (a constant)"}


def check_parameters(
    env_id: str, kwargs: dict[str, Any], adapter: str | None, parameters: Parameters, key: str
) -> None:
    """Raise ``ValueError`` (one line, starting ``<key>.<name>``) unless every parameter reaches ``env_id``: a
    constructor keyword not also in ``env.kwargs`` or a numeric attribute, of a fitting kind; with an ``adapter``,
    the adapter must accept representative values on a probe env."""
    if not parameters:
        return
    if adapter is not None:
        _check_adapter(env_id, kwargs, adapter, parameters, key)
        return
    found = catalogue(env_id, kwargs)
    for name, sampler in parameters.items():
        where = f"{key}.{name}"
        if name in found.derived:
            raise ValueError(f"{where}: {env_id} computes {name!r} from {', '.join(found.sources)}: set those instead")
        kind = found.constructor.get(name) or found.attributes.get(name)
        if kind is None:
            known = sorted([*found.constructor, *found.attributes])
            raise ValueError(
                f"{where}: {env_id} has no parameter {name!r}{did_you_mean(name, known)}: it is neither a "
                "constructor keyword nor a numeric attribute of the env (env.parameters_adapter can apply others)"
            )
        if name in found.constructor and name in kwargs:
            raise ValueError(f"{where}: also set in env.kwargs; give {env_id}'s {name!r} in one place")
        if not _fits(kind, sampler):
            raise ValueError(f"{where}: {env_id}'s {name!r} is {_KIND_WORDS[kind]}, got {sampler.model_dump()}")
        valid = found.ranges.get(name)
        if valid is not None:
            _check_range(where, f"{env_id}'s {name!r}", valid, sampler)
    constructor = {n: s.representative() for n, s in parameters.items() if n in found.constructor}
    if constructor:
        _check_constructor(env_id, kwargs, constructor, key)


def _check_range(where: str, what: str, valid: Range, sampler: Sampler) -> None:
    """``ValueError`` unless every value ``sampler`` can draw is in ``valid``."""
    for low, high in sampler.bounds():
        if valid.admits(low) and valid.admits(high):
            continue
        if isinstance(sampler, Constant):
            got = f", got {sampler.value:g}"
        elif isinstance(sampler, Gaussian):
            got = "; a gaussian sampler is unclipped and can draw any value (use uniform or multirange_uniform)"
        elif isinstance(sampler, Uniform):
            got = f"; a uniform sampler from {low:g} to {high:g} can draw values that are not"
        else:
            got = f"; the interval [{low:g}, {high:g}] of the multirange_uniform sampler holds values that are not"
        raise ValueError(f"{where}: {what} must be {valid}{got}")


def _check_constructor(env_id: str, kwargs: dict[str, Any], values: dict[str, Value], key: str) -> None:
    """The env builds with the values and keeps its spaces (a vector env's buffers are allocated once)."""
    reference = gym.make(env_spec(env_id), **kwargs)
    try:
        changed = gym.make(env_spec(env_id), **{**kwargs, **values})
    except Exception as exc:
        reference.close()
        raise ValueError(f"{key}: {env_id} refuses {values}: {_one_line(exc)}") from None
    try:
        if (changed.observation_space, changed.action_space) != (reference.observation_space, reference.action_space):
            raise ValueError(f"{key}: {values} change {env_id}'s observation or action space; they must not")
    finally:
        reference.close()
        changed.close()


def _check_adapter(env_id: str, kwargs: dict[str, Any], adapter: str, parameters: Parameters, key: str) -> None:
    function = import_object(adapter)
    values = {name: sampler.representative() for name, sampler in parameters.items()}
    env = gym.make(env_spec(env_id), **kwargs)
    try:
        function(env.unwrapped, values)
    except Exception as exc:
        raise ValueError(f"{key}: env.parameters_adapter {adapter} refuses {values}: {_one_line(exc)}") from None
    finally:
        env.close()


def _one_line(exc: BaseException) -> str:
    return " ".join(f"{type(exc).__name__}: {exc}".split())


class EnvParameters:
    """Per-episode settings (``rlcore.envs.vector.EpisodeSettings``): at every reset of a sub-env, draw each parameter
    from the sub-env's generator, in declared order, and apply the values. Plain data, picklable (async envs).

    Every parameter these settings do not draw is at the value a freshly built env has (the env's default, or
    ``env.kwargs``'), whatever settings the env ran under before (an earlier curriculum lesson, a dropped
    parameter): an attribute goes back to the value it had before rlcore first set it (remembered on the base env,
    :data:`BASE_VALUES`), a constructor keyword no longer drawn rebuilds the base env without it, and with an
    adapter the base env is rebuilt when a name it applied before is no longer drawn (what an adapter changed
    cannot be undone otherwise).
    """

    def __init__(self, env_id: str, kwargs: dict[str, Any], parameters: Parameters, adapter: str | None = None) -> None:
        self.env_id = env_id
        self.kwargs = dict(kwargs)
        self.parameters = dict(parameters)
        self.adapter = adapter
        self.constructor = set() if adapter else set(catalogue(env_id, kwargs).constructor) & set(parameters)

    def draw(self, rng: np.random.Generator) -> dict[str, Value]:
        return {name: sampler.draw(rng) for name, sampler in self.parameters.items()}

    def apply(self, env: gym.Env, rng: np.random.Generator) -> gym.Env | None:
        """Apply one episode's draws to the base env ``env``, and put every parameter not drawn back at its built
        value; a rebuilt base env (its constructor parameters changed) to use from this reset on, or None."""
        values = self.draw(rng)
        if self.adapter is not None:
            return self._adapt(env, values)
        built = {name: values[name] for name in self.constructor}
        replacement = None
        if getattr(env, BUILT_WITH, {}) != built:  # also when a constructor parameter is no longer drawn
            replacement = self._rebuilt(env, built)
        target = replacement if replacement is not None else env
        base_values: dict[str, Any] = target.__dict__.setdefault(BASE_VALUES, {})
        for name in [name for name in base_values if name not in values]:
            setattr(target, name, base_values.pop(name))
        for name, value in values.items():
            if name not in self.constructor:
                base_values.setdefault(name, getattr(target, name))
                setattr(target, name, value)
        derive, _, _ = _derived(target)
        if derive is not None:
            derive(target)
        return replacement

    def _adapt(self, env: gym.Env, values: dict[str, Value]) -> gym.Env | None:
        applied: set[str] = getattr(env, ADAPTED, set())
        replacement = self._rebuilt(env, {}) if applied - values.keys() else None
        target = replacement if replacement is not None else env
        assert self.adapter is not None
        try:
            import_object(self.adapter)(target, values)
        except Exception as exc:  # the user's function: one error naming the key, its traceback in the log
            raise UserCodeError.raised(f"env.parameters_adapter: {self.adapter} raised on {values}", exc) from None
        setattr(target, ADAPTED, set(values))
        return replacement

    def _rebuilt(self, env: gym.Env, built: dict[str, Value]) -> gym.Env:
        """A fresh base env of ``env.kwargs`` and the constructor values ``built``, going on with ``env``'s
        generator (the episode stream goes on; a seeded reset re-seeds it anyway)."""
        replacement = gym.make(env_spec(self.env_id), **{**self.kwargs, **built}).unwrapped
        if built:
            setattr(replacement, BUILT_WITH, built)
        replacement.np_random = env.np_random
        return replacement

    def __repr__(self) -> str:
        return f"EnvParameters({self.env_id}, {sorted(self.parameters)})"
