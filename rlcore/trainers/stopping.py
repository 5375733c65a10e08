"""When a run stops: its step budget, a target evaluation return, a wall-clock limit, or an evaluation callback."""

from __future__ import annotations

from collections.abc import Callable

from rlcore.common.numbers import score
from rlcore.config.sections import TrainConfig
from rlcore.evaluation.evaluator import EvalResult
from rlcore.trainers.run_directory import RunState

EvaluationCallback = Callable[[int, EvalResult], bool]
"""``(step, result) -> should_stop``: called after each periodic evaluation (e.g. a sweep's pruner)."""


class StopConditions:
    def __init__(self, train: TrainConfig, on_evaluation: EvaluationCallback | None) -> None:
        self.train = train
        self.on_evaluation = on_evaluation

    def after_evaluation(self, state: RunState, result: EvalResult, final_lesson: bool = True) -> str | None:
        """``final_lesson``: the evaluation ran under the curriculum's last lesson (or there is no curriculum); the
        target return counts only then (an easy first lesson must not end training)."""
        target = self.train.target_return
        if target is not None and final_lesson and result.mean_return >= target:
            return f"reached target return {target:g} (eval mean {score(result.mean_return)})"
        if self.on_evaluation is not None and self.on_evaluation(state.steps, result):
            return "stopped by the evaluation callback"
        return self.budget(state)

    def budget(self, state: RunState) -> str | None:
        if state.steps >= self.train.max_steps:
            return f"reached the budget of {self.train.max_steps} {state.unit.replace('_', ' ')}"
        limit = self.train.max_wall_seconds
        if limit is not None and state.wall_seconds >= limit:
            return f"reached the wall-clock limit of {limit:g} s"
        return None
