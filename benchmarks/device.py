"""Where to train: PPO's training throughput for each ``train.device`` x ``train.precision`` this machine has.

Each combination trains a preset for ``--steps`` env steps with no early stop and one evaluation at the end, and
reports env steps per second (collection and updates; acting is on the CPU in every combination). ``cuda`` rows run
only where torch sees a GPU, and say so otherwise. Medians over seeds. One JSON line.

    python benchmarks/device.py                                  # the MinAtar Breakout CNN preset
    python benchmarks/device.py --preset params.yaml --steps 50000  # CartPole's 64-unit MLP
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import torch
from common import ROOT, emit, rlcore_throughput

PRECISIONS = ("fp32", "bf16", "fp16")


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--preset", type=Path, default=ROOT / "configs" / "ppo-minatar-breakout.yaml")
    parser.add_argument("--steps", type=int, default=40_960, help="env steps per run")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--precisions", nargs="+", choices=PRECISIONS, default=list(PRECISIONS))
    args = parser.parse_args()

    devices = ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]
    rates: dict[str, float] = {}
    for device in devices:
        for precision in args.precisions:
            overrides = [f"train.device={device}", f"train.precision={precision}"]
            runs = [rlcore_throughput(args.preset, seed, args.steps, overrides) for seed in args.seeds]
            rates[f"{device}/{precision}"] = round(statistics.median(runs), 1)
    emit(
        {
            "benchmark": "device",
            "preset": str(args.preset.resolve().relative_to(ROOT)),
            "env_steps": args.steps,
            "seeds": args.seeds,
            "median_env_steps_per_second": rates,
            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none (cuda rows not run)",
            "torch": torch.__version__,
            "torch_threads": torch.get_num_threads(),
        }
    )


if __name__ == "__main__":
    main()
