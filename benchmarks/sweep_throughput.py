"""Benchmark: sweep throughput with 1 and 2 workers, and the share of compute that pruning saved.

Prints one JSON line. Runs the same study twice (fresh journal storage each time, same sampler seed):
PPO on CartPole-v1 over learning rate (log-uniform), clip range and entropy coefficient, median pruner,
each trial at most ``--max-steps`` env steps (stopping at eval 500), evaluation every 2048 steps.

    python benchmarks/sweep_throughput.py [--trials 12] [--max-steps 30000]

Trials per hour count finished (complete + pruned) trials over the sweep's wall time, worker start-up
included. Pruning's savings: 1 - (env steps trained) / (env steps had no trial been pruned), where a
pruned run is counted at its full budget (an upper bound: it might have reached 500 earlier).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import ROOT, emit, stdout_to_stderr  # noqa: E402

SPACE = (
    "sweep.space={algo: {lr: {type: float, low: 1.0e-5, high: 3.0e-3, log: true},"
    " clip_range: {type: float, low: 0.05, high: 0.4}, ent_coef: {type: float, low: 0.0, high: 0.05}}}"
)


def run(workers: int, trials: int, max_steps: int) -> dict[str, Any]:
    from flows.sweep import plan_sweep, run_sweep

    overrides = [
        SPACE,
        f"sweep.n_trials={trials}",
        f"sweep.workers={workers}",
        "sweep.pruner_options={n_startup_trials: 3}",
        "sweep.sampler_options={n_startup_trials: 5}",
        f"train.max_steps={max_steps}",
        "train.eval_every=2048",
        "train.target_return=500",
        "train.max_wall_seconds=null",
        "algo.lr_schedule=constant",
    ]
    with tempfile.TemporaryDirectory() as tmp, stdout_to_stderr():
        root = Path(tmp)
        shutil.copy(ROOT / "params.yaml", root / "params.yaml")
        started = time.perf_counter()
        summary = run_sweep(plan_sweep("params.yaml", overrides, root))
        seconds = time.perf_counter() - started
    counts = summary["counts"]
    finished = counts["complete"] + counts["pruned"]
    return {
        "wall_seconds": round(seconds, 1),
        "trials_per_hour": round(finished / seconds * 3600),
        "complete": counts["complete"],
        "pruned": counts["pruned"],
        "best": summary["best"]["value"] if summary["best"] else None,
        "pruning": summary["savings"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument("--max-steps", type=int, default=30000)
    args = parser.parse_args()
    one = run(1, args.trials, args.max_steps)
    two = run(2, args.trials, args.max_steps)
    trained = one["pruning"]["env_steps"] + two["pruning"]["env_steps"]
    unpruned = one["pruning"]["unpruned_env_steps"] + two["pruning"]["unpruned_env_steps"]
    emit(
        {
            "benchmark": "sweep_throughput",
            "cpus": os.cpu_count(),
            "trials": args.trials,
            "max_steps_per_trial": args.max_steps,
            "workers_1": one,
            "workers_2": two,
            "speedup_2_workers": round(two["trials_per_hour"] / one["trials_per_hour"], 2),
            "pruning_saved_share": round(1 - trained / unpruned, 3) if unpruned else 0.0,
        }
    )


if __name__ == "__main__":
    main()
