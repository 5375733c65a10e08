"""A curriculum's progress through its lessons (``env.curriculum``): which lesson is in effect, when it started,
the smoothed signal that ends it, and when every lesson started. Plain JSON state, saved in every checkpoint and
restored on resume, so a resumed run goes on in the lesson it was in (ML-Agents lost it for years: #2070, #3325).

At every periodic evaluation the session calls :meth:`Curriculum.observe` with the evaluation's mean return (run
under the current lesson). The lesson's ``until`` reads its measure (``eval_return``, or ``progress``: the share of
``train.max_steps`` trained), smooths it exponentially (``s = smoothing·s + (1 − smoothing)·measured``, the first
measurement of a lesson starting ``s``), and the next lesson starts at this step once ``s >= threshold`` and the
lesson has lasted ``min_lesson_steps``. The last lesson runs to the end.
"""

from __future__ import annotations

from typing import Any

from rlcore.envs.config import EnvConfig
from rlcore.envs.settings import Lesson, Parameters, lesson_parameters


class Curriculum:
    def __init__(self, env: EnvConfig, max_steps: int) -> None:
        if not env.curriculum:
            raise ValueError("a curriculum needs lessons (env.curriculum)")
        self.lessons: list[Lesson] = list(env.curriculum)
        self.base = env.parameters
        self.max_steps = max_steps
        self.index = 0
        self.lesson_start = 0
        """Step (the run's unit) at which the current lesson started."""
        self.smoothed: float | None = None
        """The current lesson's smoothed measure (None before its first evaluation)."""
        self.started: list[dict[str, Any]] = [{"lesson": self.lessons[0].name, "index": 0, "step": 0}]
        """When each lesson started, in order."""

    @property
    def lesson(self) -> Lesson:
        return self.lessons[self.index]

    @property
    def final(self) -> bool:
        return self.index == len(self.lessons) - 1

    def parameters(self) -> Parameters:
        """The parameters in effect: ``env.parameters`` overridden by the current lesson's."""
        return lesson_parameters(self.base, self.lessons, self.index)

    def observe(self, step: int, eval_return: float) -> str | None:
        """Account for the periodic evaluation at ``step``; a one-line description when the next lesson starts."""
        until = self.lesson.until
        if until is None:
            return None
        measured = eval_return if until.measure == "eval_return" else min(step / self.max_steps, 1.0)
        if self.smoothed is None:
            self.smoothed = measured
        else:
            self.smoothed = until.smoothing * self.smoothed + (1 - until.smoothing) * measured
        if step - self.lesson_start < until.min_lesson_steps or self.smoothed < until.threshold:
            return None
        done, signal = self.lesson.name, self.smoothed
        self.index += 1
        self.lesson_start, self.smoothed = step, None
        self.started.append({"lesson": self.lesson.name, "index": self.index, "step": step})
        return (
            f"lesson {done!r} complete at step {step} ({until.measure} {signal:.3g} >= {until.threshold:g}); "
            f"lesson {self.lesson.name!r} starts"
        )

    def state_dict(self) -> dict[str, Any]:
        """JSON-safe state (checkpoint metadata and the train summary)."""
        return {
            "lesson": self.lesson.name,
            "index": self.index,
            "lesson_start": self.lesson_start,
            "smoothed": self.smoothed,
            "started": [dict(entry) for entry in self.started],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a checkpoint's state; its lessons must be these (the run's fingerprint holds env.curriculum)."""
        index = int(state["index"])
        if not 0 <= index < len(self.lessons) or self.lessons[index].name != state["lesson"]:
            raise ValueError(f"the checkpoint's lesson {state['lesson']!r} is not lesson {index} of env.curriculum")
        self.index = index
        self.lesson_start = int(state["lesson_start"])
        self.smoothed = None if state["smoothed"] is None else float(state["smoothed"])
        self.started = [dict(entry) for entry in state["started"]]
