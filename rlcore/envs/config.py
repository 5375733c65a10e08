"""The ``env`` params section (:class:`EnvConfig`, its :class:`WrapperConfig`): which env, built how, with which
per-episode parameters, curriculum and action masks; checked at load against the env's own code (its id,
constructor keywords, wrappers and parameters), which is why it lives beside that code. The params tree holds it
as ``env``.
"""

from __future__ import annotations

import inspect
from typing import Any, Literal

import gymnasium as gym
from pydantic import Field, ValidationInfo, field_validator, model_validator

from rlcore.common.strict_model import StrictModel
from rlcore.envs.action_masks import check_mask_applied
from rlcore.envs.game_checks import check_board_frames, check_game
from rlcore.envs.ids import check_env_id, check_env_kwargs, env_spec, import_object
from rlcore.envs.multiagent import Agents, agents_of, check_parallel_masks, is_multiagent, with_agent_id
from rlcore.envs.parameters import check_parameters as check_env_parameters
from rlcore.envs.self_play import SelfPlayConfig
from rlcore.envs.settings import Lesson, Parameters, check_curriculum, check_parameter_names
from rlcore.envs.turn_based import load_opponent, seats_of
from rlcore.envs.user_code import DEFAULT_TIMEOUT_SECONDS, MAX_TIMEOUT_SECONDS, check_first_import, check_wrappers
from rlcore.envs.user_envs import check_user_env

MAX_NUM_ENVS = 4096
"""The most envs stepped together (``env.num_envs``, ``collect.num_envs``, ``eval.max_parallel_envs``)."""


class WrapperConfig(StrictModel):
    """One gymnasium wrapper applied to every sub-env, e.g. ``{wrapper: gymnasium.wrappers.ClipReward, kwargs:
    {min_reward: -1, max_reward: 1}}``."""

    wrapper: str
    """Import path of the wrapper class (or any callable taking the env first): ``package.module.Name`` or
    ``package.module:Name``."""
    kwargs: dict[str, Any] = Field(default_factory=dict)
    """Its keyword arguments after the env."""

    @field_validator("wrapper")
    @classmethod
    def _importable(cls, path: str) -> str:
        wrapper = import_object(path)
        if not callable(wrapper):
            raise ValueError(f"{path} is {_a(type(wrapper).__name__)}, not a wrapper class or function (env) -> env")
        return path

    @field_validator("kwargs")
    @classmethod
    def _kwargs_fit_the_wrapper(cls, kwargs: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        """Refused here, under this key, rather than as a TypeError when the env is built."""
        path = info.data.get("wrapper")  # absent when the wrapper itself was refused
        if path is None:
            return kwargs
        try:
            signature = inspect.signature(import_object(path))
        except (TypeError, ValueError):  # no signature to read (a builtin): the wrapper checks its kwargs itself
            return kwargs
        try:
            signature.bind(None, **kwargs)
        except TypeError as exc:
            raise ValueError(f"{path} does not accept them: {exc} (its parameters: {signature})") from None
        return kwargs


def _a(noun: str) -> str:
    return f"an {noun}" if noun[:1].lower() in "aeiou" else f"a {noun}"


class EnvConfig(StrictModel):
    id: str = "CartPole-v1"
    """A registered gymnasium id, optionally ``module:Env-v0`` to import the module that registers it; your own env,
    ``package.module:Name``, a ``gymnasium.Env`` subclass or a function returning one, called with ``kwargs``
    (``rlcore.envs.user_envs``: an attribute ``Name`` of the module first, else the id ``Name`` it registers;
    the module is imported from the project folder, the one rlcore runs in); or a
    PettingZoo Parallel env, ``pettingzoo:<module>`` (its ``parallel_env``: ``pettingzoo:mpe2.simple_spread_v3``) or
    ``pettingzoo:<module>:<function>``, whose agents are the rows of the vector env (``rlcore.envs.multiagent``); or,
    with ``opponent``, a two-player AEC game (the module's ``env``: ``pettingzoo:pettingzoo.classic.tictactoe_v3``)."""
    kwargs: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments for the env's constructor (``gymnasium.make_vec(id, **kwargs)``). Checked at load:
    ``max_episode_steps`` is a positive integer, ``render_mode`` one the env lists, and a value has the type of the
    constructor parameter's default (``rlcore.envs.ids.check_env_kwargs``); the env refuses the rest when built."""
    num_envs: int = Field(8, ge=1, le=MAX_NUM_ENVS)
    """Environments stepped together while training (at most 4096)."""
    vectorization: Literal["auto", "vector_entry_point", "sync", "async"] = "auto"
    """``auto`` uses the env's own batched implementation when it has one (CartPole does) and no wrappers are
    declared, else ``sync``. ``async`` runs each env in a subprocess: worth it only for slow envs on more than
    two cores."""
    wrappers: list[WrapperConfig] = Field(default_factory=list)
    """Gymnasium wrappers applied, in this order, to every sub-env wherever the env is built (training,
    evaluation, collection, export checks). Needs ``sync`` or ``async`` vectorization (``auto`` picks ``sync``)."""
    parameters: Parameters = Field(default_factory=dict)
    """Env parameters applied at every episode reset of every sub-env: name -> a number (or true/false) or a sampler
    (``{sampler: uniform, low, high}``, ``gaussian`` ``mean``/``std``, ``multirange_uniform`` ``intervals``;
    ``rlcore.envs.settings``), drawn per episode from the episode's seed. A name is a constructor keyword of the env
    (the sub-env is rebuilt at its episode boundary) or a numeric attribute of the unwrapped env
    (``rlcore.envs.parameters``); anything else is refused at load. Like wrappers, needs sync or async vectorization."""
    parameters_adapter: str | None = None
    """``module:function`` called as ``function(env, values)`` (the unwrapped env, every drawn value by name) instead
    of rlcore's own rules, for envs whose physics live elsewhere (MuJoCo model fields)."""
    action_mask: Literal["info", "observation"] | None = None
    """Where the env gives its mask of legal actions, for Discrete action spaces: ``info`` (``info["action_mask"]``,
    as gymnasium's Taxi-v4 does) or ``observation`` (the ``"action_mask"`` key of a ``Dict`` observation, as
    PettingZoo's classic games do); null: no mask. Masked actions get zero probability wherever the policy acts or
    learns, and the exported model takes the mask as an input (``rlcore.envs.action_masks``) and returns action -1
    for a row whose mask allows no action. Like wrappers, needs sync or async vectorization. PettingZoo envs: null is
    refused when their observations carry a mask (the policy would play illegal moves), and a Parallel env's mask is
    read from its observations only (``info`` is refused after one reset)."""
    curriculum: list[Lesson] = Field(default_factory=list)
    """Lessons in order, ``{name, parameters, until: {measure: eval_return | progress, threshold, min_lesson_steps,
    smoothing}}``: a lesson's parameters override ``parameters`` key by key; every lesson but the last ends by its
    ``until`` (``rlcore.envs.curriculum``). The training distribution (evaluation, collection) is the last lesson's."""

    agent_id: bool | None = None
    """PettingZoo envs only: append the agent's one-hot to its observation, so the policy all agents share can tell
    them apart (null: true)."""
    opponent: str | None = None
    """Two-player turn-based games (a PettingZoo AEC ``env.id``) only: import path of the opponent, a function
    ``(observation, rng) -> action`` playing the other seat inside the env (``rlcore.envs.opponents:random_legal``: a
    uniformly random legal move). The learner's seat alternates per episode (``rlcore.envs.turn_based``); null: the
    env is a Parallel one, every agent a row."""
    self_play: SelfPlayConfig | None = None
    """Two-player zero-sum turn-based games only: train against snapshots of the learning policy (``{save_steps,
    swap_steps, window, play_against_latest_model_ratio, initial_elo}``, ML-Agents' settings; ``rlcore.envs.self_play``)
    instead of ``opponent``, which evaluation, validation and test still play against. PPO and A2C; null: train
    against ``opponent``."""
    user_code_timeout_seconds: float = Field(DEFAULT_TIMEOUT_SECONDS, gt=0, le=MAX_TIMEOUT_SECONDS)
    """Seconds each load-time check of the user's code may take in all: the first import of ``id``'s module (one of
    the project's), the test games of ``opponent`` and of each of ``self_play.fixed_opponents`` (one check), those
    of ``eval.opponents`` (another), and the test reset and step of ``wrappers`` (a fourth). Each runs in a child
    process (``rlcore.envs.user_code``): code that takes longer, raises, calls ``sys.exit`` or ends or crashes its
    process is refused in one line naming its key."""

    @model_validator(mode="before")
    @classmethod
    def _module_imports_in_time(cls, data: Any) -> Any:
        """The user's module of ``id`` imported first in a child bounded by ``user_code_timeout_seconds``, before the
        field validators import it here (``rlcore.envs.user_code.check_first_import``); an invalid bound is the
        default's here and refused by its own field."""
        if isinstance(data, dict) and isinstance(data.get("id"), str):
            seconds = data.get("user_code_timeout_seconds", DEFAULT_TIMEOUT_SECONDS)
            number = isinstance(seconds, int | float) and not isinstance(seconds, bool)
            valid = number and 0 < seconds <= MAX_TIMEOUT_SECONDS
            check_first_import(data["id"], float(seconds) if valid else DEFAULT_TIMEOUT_SECONDS)
        return data

    @field_validator("id")
    @classmethod
    def _registered(cls, env_id: str) -> str:
        check_env_id(env_id)
        return env_id

    @field_validator("opponent")
    @classmethod
    def _opponent_importable(cls, path: str | None) -> str | None:
        if path is not None:
            load_opponent(path)
        return path

    def turn_based(self) -> bool:
        """Whether this is a two-player game played against ``opponent`` (``rlcore.envs.turn_based``): one agent."""
        return self.opponent is not None

    def agents(self) -> Agents | None:
        """The agents of a PettingZoo Parallel env (``rlcore.envs.multiagent``); None for a gymnasium env or a
        turn-based game (its learner is one agent)."""
        return agents_of(self.id, self.kwargs) if is_multiagent(self.id) and not self.turn_based() else None

    def rows(self, num_envs: int) -> int:
        """Rows of a vector env of ``num_envs`` copies of this env: one per agent of each copy."""
        agents = self.agents()
        return num_envs * (len(agents.names) if agents is not None else 1)

    def time_limit(self) -> int | None:
        """The step limit of this env's episodes as declared: ``kwargs.max_episode_steps`` (else the one
        gymnasium registered for the id), and any ``TimeLimit`` in ``wrappers``; the smallest wins. None: no limit.
        A PettingZoo env's is its ``max_cycles``."""
        agents = self.agents()
        if agents is not None:
            return agents.max_cycles
        if self.turn_based():  # a game ends by its own rules
            return None
        limits = [self.kwargs.get("max_episode_steps") or env_spec(self.id).max_episode_steps]
        for item in self.wrappers:
            wrapper = import_object(item.wrapper)
            if isinstance(wrapper, type) and issubclass(wrapper, gym.wrappers.TimeLimit):
                limits.append(item.kwargs.get("max_episode_steps"))
        found = [int(limit) for limit in limits if isinstance(limit, int) and limit > 0]
        return min(found) if found else None

    @model_validator(mode="after")
    def _kwargs_fit_the_env(self) -> EnvConfig:
        if self.opponent is not None and not is_multiagent(self.id):
            raise ValueError(f"env.opponent: only for two-player PettingZoo AEC games (pettingzoo:...), not {self.id}")
        if self.self_play is not None and not self.turn_based():
            raise ValueError(
                f"env.self_play: only for two-player zero-sum turn-based games (a PettingZoo AEC env.id with "
                f"env.opponent), not {self.id}"
            )
        if self.turn_based():
            if self.self_play is not None and self.vectorization == "async":
                raise ValueError(
                    "env.self_play: the opponents are the trainer's own policy snapshots, which need the training envs "
                    "in its process; set env.vectorization: sync (or auto), not async"
                )
            if self.agent_id is not None:
                raise ValueError(
                    "env.agent_id: a turn-based game's learner is one agent (its own seat's view); remove it"
                )
            fixed = self.self_play.fixed_opponents if self.self_play is not None else {}
            opponents = [("env.opponent", str(self.opponent)), *(("env.self_play.fixed_opponents", p) for p in fixed)]
            check_game(self.id, self.kwargs, opponents, self.user_code_timeout_seconds)  # one test game against each
            if self.self_play is not None and self.self_play.board_frames:
                check_board_frames(self.id, self.kwargs)
            check_mask_applied(self.id, seats_of(self.id, self.kwargs).observation_space, self.action_mask)
            self._pettingzoo_unsupported()
            return self
        agents = self.agents()  # builds a PettingZoo env once: its kwargs and agents are checked there
        if agents is None:
            check_env_kwargs(self.id, self.kwargs)
            check_user_env(self.id, self.kwargs)  # an env class of the user's: built once, here, to refuse at load
            if self.agent_id is not None:
                raise ValueError(f"env.agent_id: only for PettingZoo envs (pettingzoo:...); {self.id} has one agent")
            if self.wrappers and self.vectorization != "vector_entry_point":  # (that one is refused with wrappers)
                wrappers = [(item.wrapper, item.kwargs) for item in self.wrappers]
                check_wrappers(self.id, self.kwargs, wrappers, self.user_code_timeout_seconds)
            return self
        if self.agent_id is not False:
            with_agent_id(agents.observation_space, len(agents.names), self.id)
        check_mask_applied(self.id, agents.observation_space, self.action_mask)
        check_parallel_masks(self.id, self.kwargs, agents, self.action_mask)
        self._pettingzoo_unsupported()
        return self

    def _pettingzoo_unsupported(self) -> None:
        unsupported = {
            "env.wrappers": bool(self.wrappers),
            "env.parameters": bool(self.parameters),
            "env.parameters_adapter": self.parameters_adapter is not None,
            "env.curriculum": bool(self.curriculum),
            "env.vectorization": self.vectorization not in ("auto", "sync"),
        }
        for key, given in unsupported.items():
            if given:
                raise ValueError(f"{key}: not supported for PettingZoo envs ({self.id}) yet; remove it")

    @model_validator(mode="after")
    def _wrappers_need_sub_envs(self) -> EnvConfig:
        if self.wrappers and self.vectorization == "vector_entry_point":
            raise ValueError(
                "env.vectorization: env.wrappers wrap each sub-env, which needs sync or async (or auto), "
                "not vector_entry_point"
            )
        if self.action_mask is not None and self.vectorization == "vector_entry_point":
            raise ValueError(
                "env.vectorization: env.action_mask is read by a wrapper of each sub-env, which needs sync or async "
                "(or auto), not vector_entry_point"
            )
        if (self.parameters or self.curriculum) and self.vectorization == "vector_entry_point":
            raise ValueError(
                "env.vectorization: env.parameters and env.curriculum apply to each sub-env, which needs sync or "
                "async (or auto), not vector_entry_point"
            )
        return self

    @field_validator("parameters")
    @classmethod
    def _parameter_names(cls, parameters: dict[str, Any]) -> dict[str, Any]:
        return check_parameter_names(parameters)

    @field_validator("parameters_adapter")
    @classmethod
    def _adapter_importable(cls, path: str | None) -> str | None:
        if path is not None and not callable(import_object(path)):
            raise ValueError(f"{path} is not a function (expected module:function(env, values))")
        return path

    @model_validator(mode="after")
    def _parameters_reach_the_env(self) -> EnvConfig:
        """Every parameter of ``parameters`` and of each lesson is one the env has (``rlcore.envs.parameters``)."""
        check_curriculum(self.curriculum)
        self.check_parameters(self.parameters, "env.parameters")
        for index, lesson in enumerate(self.curriculum):
            self.check_parameters(lesson.parameters, f"env.curriculum.{index}.parameters")
        return self

    def check_parameters(self, parameters: Parameters, key: str) -> None:
        """``ValueError`` (one line, ``<key>.<name>: ...``) for a parameter this env does not have."""
        if parameters and is_multiagent(self.id):
            raise ValueError(f"{key}: env parameters are not supported for PettingZoo envs ({self.id}) yet")
        check_env_parameters(self.id, self.kwargs, self.parameters_adapter, parameters, key)
