"""The evaluators of ``params.eval`` shared by the evaluate and select stages: validation or test episodes, under
the training distribution and under each of ``eval.settings``; and the select stage's test episodes against each of
``eval.opponents``."""

from __future__ import annotations

from typing import Any

from rlcore.common.seeds import test_seeds, validation_seeds
from rlcore.config.sections import Params
from rlcore.envs.settings import describe_parameters
from rlcore.envs.vector import settings_for
from rlcore.evaluation.evaluator import EvalResult, Evaluator
from rlcore.nets.policies import Policy


def declared_settings(params: Params) -> list[dict[str, Any]]:
    """``eval.settings`` as plain data (what ``evaluations.json`` records it was evaluated under)."""
    return [{"name": s.name, "parameters": describe_parameters(s.parameters)} for s in params.eval.settings]


def evaluator_for(
    params: Params, split: str = "validation", setting: str | None = None, opponent: str | None = None
) -> Evaluator:
    """The evaluator of the validation episodes (evaluate stage) or the test episodes (select stage), under the
    training distribution (``setting`` None) or the named one of ``eval.settings``; a turn-based game's against
    ``env.opponent`` (``opponent`` None) or the named one of ``eval.opponents``."""
    cfg = params.eval
    env = params.env
    if opponent is not None:
        env = env.model_copy(update={"opponent": (cfg.opponents or {})[opponent]})
    if split == "validation":
        seeds = validation_seeds(cfg.seed, cfg.episodes)
    else:
        seeds = test_seeds(cfg.seed, cfg.test_episodes)
    settings = None
    if setting is not None:
        settings = settings_for(params.env, next(s for s in cfg.settings if s.name == setting).parameters)
    label = f"{split} episodes" + (f" under eval setting {setting!r}" if setting is not None else "")
    label += f" against eval.opponents.{opponent}" if opponent is not None else ""
    return Evaluator(
        env,
        episodes=len(seeds),
        seed=seeds.start,
        deterministic=cfg.deterministic,
        max_parallel_envs=cfg.max_parallel_envs,
        max_episode_steps=cfg.max_episode_steps,
        settings=settings,
        label=label,
        return_reduction=cfg.return_reduction,
        groups=params.policy.groups,
        opponent_key="env.opponent" if opponent is None else f"eval.opponents.{opponent}",
    )


def evaluators_for(params: Params, split: str = "validation") -> dict[str | None, Evaluator]:
    """None -> the training distribution's evaluator, then one per ``eval.settings`` entry, by name, in order."""
    evaluators: dict[str | None, Evaluator] = {}
    try:
        for name in [None, *(setting.name for setting in params.eval.settings)]:
            evaluators[name] = evaluator_for(params, split, name)
    except BaseException:
        close_all(evaluators)
        raise
    return evaluators


def close_all(evaluators: dict[str | None, Evaluator]) -> None:
    for evaluator in evaluators.values():
        evaluator.close()


def under_settings(evaluators: dict[str | None, Evaluator], policy: Policy) -> dict[str, EvalResult]:
    """``policy``'s result under each named setting (the same episode seeds as the training distribution's)."""
    return {name: evaluator.evaluate(policy) for name, evaluator in evaluators.items() if name is not None}


def against_opponents(params: Params, policy: Policy) -> dict[str, EvalResult]:
    """``policy`` on the test episodes (the same seeds as against ``env.opponent``) against each of
    ``eval.opponents``, by name, in order. What an opponent does wrong mid-game (an illegal move) names its key
    (``eval.opponents.<name>``: the evaluator's game is told it)."""
    results: dict[str, EvalResult] = {}
    for name in params.eval.opponents or {}:
        evaluator = evaluator_for(params, "test", opponent=name)
        try:
            results[name] = evaluator.evaluate(policy)
        finally:
            evaluator.close()
    return results
