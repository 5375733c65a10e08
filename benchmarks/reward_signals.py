"""Benchmark: reward signals on MountainCar-v0 — env steps and seconds to -160 for PPO + RND and PPO + curiosity,
with the same PPO without reward signals measured in the same run.

Prints one JSON line. Medians over seeds. Each variant trains its preset's whole budget (``train.max_steps``,
150k env steps) so every measure below is read from one run, then the evaluate and select stages score it:

- ``env_steps_to_target`` / ``seconds_to_target``: the first periodic evaluation (10 deterministic episodes) with a
  mean return >= -160, and the training wall seconds up to it (evaluations included);
- ``train_env_steps_to_target``: the first row of the learning curve (16,384 env steps each) whose training episodes
  (the stochastic policy, what the agent does while it learns) average >= -160;
- ``flag_rows``: rows of the learning curve whose training episodes reached the flag at least once (mean > -200);
- ``test_return``: the selected model's test score (100 deterministic episodes).

A deterministic evaluation of an untrained MountainCar policy can score well by chance (its argmax may push with
the velocity), so the training-episode measures are the ones that say whether a variant learned.

    python benchmarks/reward_signals.py [--seeds 0 1 2] [--variants plain rnd curiosity]
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import ROOT, emit, first_reaching, median, stdout_to_stderr  # noqa: E402

TARGET = -160.0
VARIANTS: dict[str, tuple[Path, list[str]]] = {
    "plain": (ROOT / "configs" / "ppo-rnd-mountaincar.yaml", ["algo.reward_signals=null"]),
    "rnd": (ROOT / "configs" / "ppo-rnd-mountaincar.yaml", []),
    "curiosity": (ROOT / "configs" / "ppo-curiosity-mountaincar.yaml", []),
}


def training_rows(run: Path) -> list[tuple[int, float]]:
    """(env steps, mean training-episode return) of every row of the learning curve."""
    with open(run / "dvclive" / "plots" / "metrics" / "train" / "episode_return.tsv") as handle:
        return [(int(row["step"]), float(row["episode_return"])) for row in csv.DictReader(handle, delimiter="\t")]


def run_variant(name: str, seed: int) -> dict[str, Any]:
    from rlcore.params import load_params
    from rlcore.stages import evaluate_stage, select_stage, train_stage

    preset, overrides = VARIANTS[name]
    fixed = ["train.target_return=null", "train.max_wall_seconds=null", "train.progress_bar=off"]
    params = load_params(preset, [f"seed={seed}", *fixed, *overrides])
    with tempfile.TemporaryDirectory() as tmp, stdout_to_stderr():
        root = Path(tmp)
        started = time.perf_counter()
        train_stage(params, root)
        train_seconds = time.perf_counter() - started
        evaluate_stage(params, root)
        select_stage(params, root)
        run = root / "runs" / params.name
        summary = json.loads((run / "train_summary.json").read_text())
        rows = training_rows(run)
        test = json.loads((root / "reports" / params.name / "metrics.json").read_text())
    reached = first_reaching(summary["evaluations"], TARGET)
    return {
        "seed": seed,
        "env_steps_to_target": reached["env_steps"],
        "seconds_to_target": reached["seconds"],
        "train_env_steps_to_target": next((step for step, value in rows if value >= TARGET), None),
        "flag_rows": sum(value > -200 for _, value in rows),
        "rows": len(rows),
        "last_train_return": round(rows[-1][1], 1),
        "test_return": test["mean_return"],
        "env_steps": summary["env_steps"],
        "train_seconds": round(train_seconds, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    args = parser.parse_args()
    torch.set_num_threads(1)
    result: dict[str, Any] = {
        "benchmark": "reward_signals",
        "env": "MountainCar-v0",
        "params": {name: str(VARIANTS[name][0].relative_to(ROOT)) for name in args.variants},
        "target_return": TARGET,
        "seeds": args.seeds,
        "torch_threads": 1,
    }
    for name in args.variants:
        runs = [run_variant(name, seed) for seed in args.seeds]
        result[name] = {
            "median_env_steps_to_target": median([r["env_steps_to_target"] for r in runs]),
            "median_seconds_to_target": median([r["seconds_to_target"] for r in runs]),
            "median_train_env_steps_to_target": median([r["train_env_steps_to_target"] for r in runs]),
            "median_test_return": median([r["test_return"] for r in runs]),
            "per_seed": runs,
        }
    emit(result)


if __name__ == "__main__":
    main()
