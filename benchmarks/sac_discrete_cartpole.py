"""Benchmark: discrete SAC on CartPole-v1 — wall seconds and env steps to first reach eval >= 400.

Prints one JSON line. Medians over seeds. rlcore trains ``configs/sac-discrete-cartpole.yaml`` with
``train.target_return=400`` (budget: its ``train.max_steps``, 50,000), stopping at the first evaluation >= 400: the
preset's claim (seeds 0-3 within 41k env steps). Time to target counts everything a user waits for during training,
periodic evaluations included (10 deterministic episodes every ``--eval-every`` env steps, on a separate env).
``tests/test_off_policy_learning.py`` checks a shorter run (seed 1, 10,240 env steps, test score >= 150).

    python benchmarks/sac_discrete_cartpole.py [--seeds 0 1 2 3]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import ROOT, emit, median, rlcore_time_to_target  # noqa: E402

TARGET = 400.0
PARAMS = ROOT / "configs" / "sac-discrete-cartpole.yaml"


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3])
    parser.add_argument("--eval-every", type=int, default=2048)
    args = parser.parse_args()
    torch.set_num_threads(1)

    runs = [rlcore_time_to_target(PARAMS, seed, TARGET, args.eval_every) for seed in args.seeds]
    result: dict[str, Any] = {
        "benchmark": "sac_discrete_cartpole",
        "params": str(PARAMS.relative_to(ROOT)),
        "target_return": TARGET,
        "seeds": args.seeds,
        "torch_threads": 1,
        "median_seconds_to_target": median([r["seconds"] for r in runs]),
        "median_env_steps_to_target": median([r["env_steps"] for r in runs]),
        "per_seed": runs,
        "targets": {"every_seed_within_env_steps": 41_000},
    }
    emit(result)


if __name__ == "__main__":
    main()
