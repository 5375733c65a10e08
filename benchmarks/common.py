"""What the benchmark scripts share: time to a target evaluation return, for rlcore and for an SB3 peer.

Time to target counts everything a user waits for during training, periodic evaluations included:
rlcore reads the first evaluation at or above the target from the train summary's ``evaluations``;
the SB3 peer runs the same evaluation (``episodes`` deterministic episodes every ``eval_every`` env
steps, on a separate env) from a callback and stops there. Medians over seeds are None unless every
seed reached the target.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import math
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SB3_MISSING = "not installed (pip install -e '.[bench]')"


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Keep whatever training prints off stdout, which carries only the result line."""
    with contextlib.redirect_stdout(sys.stderr):
        yield


def first_reaching(evaluations: list[dict[str, Any]], target: float) -> dict[str, Any]:
    """Wall seconds and env steps of the first evaluation whose mean return is >= ``target`` (None if none)."""
    reached = next((e for e in evaluations if e["mean_return"] >= target), None)
    return {
        "seconds": reached["wall_seconds"] if reached else None,
        "env_steps": reached["env_steps"] if reached else None,
    }


def rlcore_time_to_target(
    params_file: Path, seed: int, target: float, eval_every: int, overrides: list[str] | None = None
) -> dict[str, Any]:
    """Train ``params_file`` with ``seed`` until an evaluation reaches ``target`` (or the budget runs out)."""
    from rlcore.params import load_params
    from rlcore.trainers import train

    params = load_params(
        params_file,
        [
            f"seed={seed}",
            f"train.target_return={target}",
            f"train.eval_every={eval_every}",
            "train.max_wall_seconds=null",
            "train.progress_bar=off",
            *(overrides or []),
        ],
    )
    with tempfile.TemporaryDirectory() as tmp, stdout_to_stderr():
        summary = train(params, Path(tmp) / "run")
    return first_reaching(summary["evaluations"], target)


def rlcore_throughput(params_file: Path, seed: int, steps: int, overrides: list[str] | None = None) -> float:
    """Training env steps per second of ``params_file`` (with ``overrides``) on a fixed budget, with one evaluation
    at the end only."""
    from rlcore.params import load_params
    from rlcore.trainers import train

    params = load_params(
        params_file,
        [
            f"seed={seed}",
            "train.target_return=null",
            f"train.max_steps={steps}",
            f"train.eval_every={steps}",
            "train.eval_episodes=1",
            "train.max_wall_seconds=null",
            "train.progress_bar=off",
            *(overrides or []),
        ],
    )
    with tempfile.TemporaryDirectory() as tmp, stdout_to_stderr():
        started = time.perf_counter()
        summary = train(params, Path(tmp) / "run")
        elapsed = time.perf_counter() - started
    return float(summary["env_steps"]) / elapsed


def sb3_available(package: str = "stable_baselines3") -> bool:
    """Whether the peer ``package`` (the ``bench`` extra: ``stable_baselines3``, ``sb3_contrib``) is installed."""
    return importlib.util.find_spec(package) is not None


def sb3_time_to_target(
    model: Any,
    env_id: str,
    seed: int,
    eval_every: int,
    target: float,
    total_timesteps: int,
    episodes: int = 10,
    wrapper_class: Any = None,
    wrapper_kwargs: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """``model.learn`` with an evaluation every ``eval_every`` env steps; stops at the first one >= ``target``.

    The clock starts just before ``learn`` (model construction is not counted, as in rlcore, whose clock
    starts once the policy and algorithm exist); ``total_timesteps`` is the budget and also sets SB3's
    schedules, so pass the RL Zoo's ``n_timesteps`` where a schedule depends on it. ``wrapper_class`` (with
    ``wrapper_kwargs``) wraps the evaluation env as the training env is wrapped.
    """
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy

    class StopAtTarget(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.eval_env = make_vec_env(
                env_id, n_envs=1, seed=seed + 1000, wrapper_class=wrapper_class, wrapper_kwargs=wrapper_kwargs
            )
            self.next_eval = eval_every
            self.reached: dict[str, Any] | None = None
            self.started = time.perf_counter()

        def _on_step(self) -> bool:
            if self.num_timesteps < self.next_eval:
                return True
            self.next_eval += eval_every
            mean, _ = evaluate_policy(self.model, self.eval_env, n_eval_episodes=episodes, deterministic=True)
            if mean >= target:
                self.reached = {
                    "seconds": round(time.perf_counter() - self.started, 3),
                    "env_steps": self.num_timesteps,
                }
                return False
            return True

    callback = StopAtTarget()
    with stdout_to_stderr():
        model.learn(total_timesteps=total_timesteps, callback=callback)
    callback.eval_env.close()
    return callback.reached or {"seconds": None, "env_steps": None}


def median(values: list[float | None]) -> float | None:
    """Median of the values, or None when any is missing (a seed that never reached the target)."""
    present = [v for v in values if v is not None]
    return statistics.median(present) if present and len(present) == len(values) else None


def add_peer(result: dict[str, Any], peer: list[dict[str, Any]], rates: dict[str, str] | None = None) -> None:
    """Add ``result["sb3"]`` (medians of the per-seed peer runs) and ``speedup_vs_sb3`` (SB3 s / rlcore s).

    ``rates`` maps output keys to per-seed keys of further numbers to report as medians (rounded to 0.1).
    """
    sb3_seconds = median([p["seconds"] for p in peer])
    sb3: dict[str, Any] = {
        "median_seconds_to_target": sb3_seconds,
        "median_env_steps_to_target": median([p["env_steps"] for p in peer]),
    }
    for out_key, key in (rates or {}).items():
        sb3[out_key] = round(statistics.median(p[key] for p in peer), 1)
    result["sb3"] = sb3
    if sb3_seconds and result["median_seconds_to_target"]:
        result["speedup_vs_sb3"] = round(sb3_seconds / result["median_seconds_to_target"], 2)


def emit(result: dict[str, Any]) -> None:
    """The benchmark's one line of output."""
    print(json.dumps(result), flush=True)


def t_interval(values: list[float]) -> list[float] | None:
    """95% Student-t interval of the mean over seeds (None for one seed)."""
    if len(values) < 2:
        return None
    quantile = {2: 12.706, 3: 4.303, 4: 3.182, 5: 2.776}.get(len(values), 2.262)
    half = quantile * statistics.stdev(values) / math.sqrt(len(values))
    mean = statistics.fmean(values)
    return [round(mean - half, 1), round(mean + half, 1)]


def over_seeds(scores: list[float]) -> dict[str, Any]:
    """The mean of per-seed scores and its 95% t-interval (None for one seed), for a benchmark's JSON line."""
    return {"mean_over_seeds": round(statistics.fmean(scores), 1), "t95_over_seeds": t_interval(scores)}


def tested_seed(record: dict[str, Any]) -> dict[str, Any]:
    """One seed's test score from ``reports/<name>/metrics.json``'s ``per_seed`` record (a run with ``train.seeds``):
    its test mean return with its 95 % interval over its test episodes, and the env steps of the checkpoint the select
    stage chose and scored."""
    test = record["test"]
    return {
        "test_mean_return": round(test["mean_return"], 2),
        "test_ci95": [round(test["ci95_low"], 2), round(test["ci95_high"], 2)],
        "test_episodes": test["episodes"],
        "selected_env_steps": record["env_steps"],
    }
