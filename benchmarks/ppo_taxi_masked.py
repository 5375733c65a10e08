"""Benchmark: PPO with and without action masks on Taxi-v4, the preset's whole budget (300k env steps).

Prints one JSON line. Per variant and seed one run of ``configs/ppo-taxi-masked.yaml`` (its stop at the target: 7.5
on 50 periodic evaluation episodes) through train -> evaluate -> select, the long run
``tests/test_action_masks.py`` made until 2026-11-29:

- ``env_steps_to_5`` / ``env_steps_to_target``: the first periodic evaluation (50 greedy episodes every 10,240 env
  steps) with a mean return >= 5 (the test's threshold) and >= the preset's target;
- ``test_return``: the selected model's test score (100 deterministic episodes; an optimal policy averages ~8);
- ``env_steps``, ``train_cpu_seconds``.

``unmasked`` is the same preset with ``env.action_mask: null`` (the control: illegal moves cost -10 and a greedy
policy that walks into a wall loops until the 200-step time limit).

    python benchmarks/ppo_taxi_masked.py [--seeds 0 1 2] [--variants masked unmasked]
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import ROOT, emit, first_reaching, median, stdout_to_stderr  # noqa: E402

PRESET = ROOT / "configs" / "ppo-taxi-masked.yaml"
VARIANTS: dict[str, list[str]] = {"masked": [], "unmasked": ["env.action_mask=null"]}
TEST_THRESHOLD = 5.0


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run_variant(name: str, seed: int) -> dict[str, Any]:
    from rlcore.params import load_params
    from rlcore.stages import evaluate_stage, select_stage, train_stage

    fixed = ["train.max_wall_seconds=null", "train.progress_bar=off"]
    params = load_params(PRESET, [f"seed={seed}", *fixed, *VARIANTS[name]])
    with tempfile.TemporaryDirectory() as tmp, stdout_to_stderr():
        root = Path(tmp)
        started = cpu_seconds()
        train_stage(params, root)
        train_cpu_seconds = cpu_seconds() - started
        evaluate_stage(params, root)
        select_stage(params, root)
        summary = json.loads((root / "runs" / params.name / "train_summary.json").read_text())
        test = json.loads((root / "reports" / params.name / "metrics.json").read_text())
    return {
        "seed": seed,
        "env_steps_to_5": first_reaching(summary["evaluations"], TEST_THRESHOLD)["env_steps"],
        "env_steps_to_target": first_reaching(summary["evaluations"], params.train.target_return)["env_steps"],
        "test_return": round(test["mean_return"], 2),
        "env_steps": summary["env_steps"],
        "train_cpu_seconds": round(train_cpu_seconds, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    args = parser.parse_args()
    result: dict[str, Any] = {
        "benchmark": "ppo_taxi_masked",
        "params": str(PRESET.relative_to(ROOT)),
        "test_threshold": TEST_THRESHOLD,
        "seeds": args.seeds,
    }
    for name in args.variants:
        runs = []
        for seed in args.seeds:
            runs.append(run_variant(name, seed))
            print(json.dumps({name: runs[-1]}), file=sys.stderr, flush=True)
        result[name] = {
            "median_env_steps_to_5": median([r["env_steps_to_5"] for r in runs]),
            "median_test_return": median([r["test_return"] for r in runs]),
            "per_seed": runs,
        }
    emit(result)


if __name__ == "__main__":
    main()
