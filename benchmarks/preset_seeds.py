"""Benchmark: a preset's test score over seeds as a user gets it — `rlcore train`, `evaluate`, `select` with
``train.seeds`` in a fresh folder holding only the preset — for the README's preset table.

Prints one JSON line. The folder holds ``configs/<preset>.yaml`` and nothing else; each stage runs as the user's
command (``python -m rlcore <stage> --params configs/<preset>.yaml --set 'train.seeds=[...]'``), the preset's own
budget and stop condition, nothing else overridden. From ``reports/<name>/metrics.json``: ``aggregate`` (the IQM of
the seeds' test mean returns with its 95 % stratified bootstrap interval over runs, the mean) and ``per_seed`` (each
seed's test mean return with its interval over its test episodes, the env steps of its selected checkpoint); from
``runs/<name>/seed_<k>/train_summary.json`` where each seed stopped and its training seconds; ``outcomes`` (a game's
win/draw/loss rates) where the preset is a game. Each stage's wall seconds include its process's start-up; ``load``
is the 1-minute load average at its start and end (a loaded machine's seconds are not a quiet one's).

    python benchmarks/preset_seeds.py configs/sac-pendulum.yaml [--seeds 0 1 2] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import ROOT, emit, tested_seed  # noqa: E402

from rlcore.common.files import read_json  # noqa: E402
from rlcore.params import load_params  # noqa: E402

STAGES = ("train", "evaluate", "select")


def run_stage(stage: str, folder: Path, preset: str, seeds: list[int]) -> dict[str, Any]:
    """One stage as the user's command in ``folder``: its wall seconds and the load around it; raises on failure."""
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    command = [sys.executable, "-m", "rlcore", stage, "--params", preset, "--set", f"train.seeds={seeds}"]
    done = subprocess.run(command, cwd=folder, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{stage} failed (exit {done.returncode}): {done.stderr.strip().splitlines()[-1:]}")
    return {
        "wall_seconds": round(time.perf_counter() - started, 1),
        "load": [round(load_before, 2), round(os.getloadavg()[0], 2)],
    }


def seed_rows(folder: Path, name: str, metrics: dict[str, Any]) -> dict[str, Any]:
    """Each seed's test score, selected checkpoint and where its training stopped."""
    rows = {}
    for seed, record in metrics["per_seed"].items():
        summary = read_json(folder / "runs" / name / f"seed_{seed}" / "train_summary.json")
        rows[seed] = {
            **tested_seed(record),
            "trained_env_steps": summary["env_steps"],
            "train_seconds": round(summary["wall_seconds"], 1),
            "stopped": summary["stop_reason"],
        }
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("preset", type=Path, help="configs/<preset>.yaml")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--keep", type=Path, default=None, help="copy the folder's reports/ here")
    args = parser.parse_args()
    source = (ROOT / args.preset).resolve() if not args.preset.is_absolute() else args.preset
    relative = f"configs/{source.name}"
    name = load_params(source, []).name
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "configs").mkdir()
        shutil.copy(source, folder / relative)
        stages = {stage: run_stage(stage, folder, relative, args.seeds) for stage in STAGES}
        metrics = read_json(folder / "reports" / name / "metrics.json")
        rows = seed_rows(folder, name, metrics)
        if args.keep is not None:
            shutil.copytree(folder / "reports", args.keep / name, dirs_exist_ok=True)
    across = metrics["aggregate"]
    result: dict[str, Any] = {
        "benchmark": "preset_seeds",
        "preset": relative,
        "seeds": args.seeds,
        "iqm": round(across["iqm"], 2),
        "iqm_ci95": [round(value, 2) for value in across["iqm_ci95"]],
        "mean": round(across["mean"], 2),
        "per_seed": rows,
        "stages": stages,
    }
    for key in ("outcomes", "outcomes_by_opponent"):
        if key in metrics:
            result[key] = metrics[key]
    emit(result)


if __name__ == "__main__":
    main()
