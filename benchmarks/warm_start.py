"""Benchmark: PPO warm-started from the offline branch's BC model vs PPO from scratch, CartPole-v1, to eval >= 475.

Prints one JSON line. Per seed, in a temporary project: ``make run``'s stages (params.yaml's PPO -> evaluate ->
select; offline.yaml's collect -> BC -> evaluate -> select, with that seed), then three PPO runs of params.yaml's
params and seed, each stopped at the first periodic evaluation >= 475 (10 episodes every 4,096 env steps):

- ``scratch``: from scratch;
- ``warm_start``: ``train.init_from: models/bc-cartpole/policy.pt``;
- ``bc_loss``: from scratch with ``algo.behavioral_cloning: {dataset: data/dataset.parquet, strength: 0.5,
  steps: 50000}`` (the auxiliary loss, no warm start);
- ``warm_start_bc_loss``: both (configs/ppo-from-bc-cartpole.yaml, as ML-Agents pairs ``init_path`` with
  ``behavioral_cloning``).

Seconds are training seconds (periodic evaluations included), from each run's summary. ``upstream`` is what the warm
start stands on: the expert PPO run that collect rolls out, the dataset and the BC run (its gradient steps, seconds
and test score). Medians over seeds (None unless every seed reached the target).

    python benchmarks/warm_start.py [--seeds 0 1 2]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import ROOT, emit, median, rlcore_time_to_target, stdout_to_stderr  # noqa: E402

from rlcore.common.stage_paths import Layout  # noqa: E402
from rlcore.params import load_params  # noqa: E402

TARGET = 475.0
EVAL_EVERY = 4096
PRESET = ROOT / "configs" / "ppo-from-bc-cartpole.yaml"
ARMS = ("scratch", "warm_start", "bc_loss", "warm_start_bc_loss")


def upstream(root: Path, seed: int) -> dict[str, Any]:
    """``make run``'s stages up to the offline branch's selected model, in ``root``; what they cost."""
    from rlcore.common.files import read_json
    from rlcore.stages import collect_stage, evaluate_stage, select_stage, train_stage

    quiet = [f"seed={seed}", "train.progress_bar=off", "train.max_wall_seconds=null"]
    online = load_params(root / "params.yaml", quiet)
    offline = load_params(root / "offline.yaml", quiet)
    with stdout_to_stderr():
        for stage in (train_stage, evaluate_stage, select_stage):
            stage(online, root)
        collect_stage(offline, root)
        for stage in (train_stage, evaluate_stage, select_stage):
            stage(offline, root)
    expert = read_json(root / "runs" / online.name / "train_summary.json")
    bc = read_json(root / "runs" / offline.name / "train_summary.json")
    return {
        "expert_env_steps": expert["env_steps"],
        "expert_seconds": expert["wall_seconds"],
        "expert_test_return": read_json(root / "reports" / online.name / "metrics.json")["mean_return"],
        "dataset_transitions": offline.collect.steps,
        "bc_gradient_steps": bc["gradient_steps"],
        "bc_seconds": bc["wall_seconds"],
        "bc_test_return": read_json(root / "reports" / offline.name / "metrics.json")["mean_return"],
    }


def one_seed(seed: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for name in ("params.yaml", "offline.yaml"):
            shutil.copy(ROOT / name, root / name)
        costs = upstream(root, seed)
        init = f"train.init_from={Layout(root, load_params(root / 'offline.yaml', []).name).best_policy}"
        loss = f"algo.behavioral_cloning={{dataset: {root / 'data' / 'dataset.parquet'}, strength: 0.5, steps: 50000}}"
        base = root / "params.yaml"
        arms = {
            "scratch": rlcore_time_to_target(base, seed, TARGET, EVAL_EVERY),
            "warm_start": rlcore_time_to_target(base, seed, TARGET, EVAL_EVERY, [init]),
            "bc_loss": rlcore_time_to_target(base, seed, TARGET, EVAL_EVERY, [loss]),
            "warm_start_bc_loss": rlcore_time_to_target(PRESET, seed, TARGET, EVAL_EVERY, [init, loss]),
        }
    return {"seed": seed, **arms, "upstream": costs}


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    runs = [one_seed(seed) for seed in args.seeds]
    result: dict[str, Any] = {"benchmark": "warm_start_cartpole", "target": TARGET, "seeds": args.seeds}
    for arm in ARMS:
        result[arm] = {
            "median_env_steps_to_target": median([run[arm]["env_steps"] for run in runs]),
            "median_seconds_to_target": median([run[arm]["seconds"] for run in runs]),
            "env_steps_to_target": [run[arm]["env_steps"] for run in runs],
            "seconds_to_target": [run[arm]["seconds"] for run in runs],
        }
    result["upstream_median"] = {
        key: statistics.median(run["upstream"][key] for run in runs) for key in runs[0]["upstream"]
    }
    emit(result)


if __name__ == "__main__":
    main()
