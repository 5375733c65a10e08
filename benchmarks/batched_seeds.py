"""Benchmark: ``train.seeds`` of N seeds trained as one batched program vs one after another (``train.batch_seeds``).

Prints one JSON line per algorithm, N and mode. Each case runs the train stage in a fresh temporary project at a fixed
budget (no target return, no wall-clock limit, one evaluation of 2 episodes at the end):

- ``bc``: ``offline.yaml`` (MLP [64, 64] tanh, batch 256) on 20,000 CartPole transitions of the random policy
  (``rlcore collect`` with ``collect.policy: random``), ``--bc-steps`` gradient steps;
- ``dqn``: ``configs/dqn-cartpole.yaml`` (MLP [64, 64] relu, batch 64, 128 gradient steps every 256 env steps),
  ``--dqn-steps`` env steps.

``wall_seconds`` and ``cpu_seconds`` (the process's CPU time: with 1 torch thread the work itself, what a busy
machine disturbs least) include the stage's start (reading params, opening envs and datasets; an untimed run of 10
steps first takes the imports); ``over_one_seed`` is the time over one seed's (N = 1) time.

    OMP_NUM_THREADS=1 python benchmarks/batched_seeds.py [--seeds-counts 1 2 4 8] [--bc-steps 3000]
        [--dqn-steps 10000] [--algos bc dqn]
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import ROOT, emit, stdout_to_stderr  # noqa: E402

from rlcore.params import load_params  # noqa: E402
from rlcore.stages import collect_stage, train_stage  # noqa: E402

PRESETS = {"bc": "offline.yaml", "dqn": "configs/dqn-cartpole.yaml"}


def project(algo: str, folder: Path, dataset: Path | None) -> Path:
    """A project in ``folder`` with the algorithm's params file (and BC's dataset)."""
    preset = folder / PRESETS[algo]
    preset.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / PRESETS[algo], preset)
    if dataset is not None:
        (folder / "data").mkdir()
        shutil.copy(dataset, folder / "data" / "dataset.parquet")
    return folder


def run(algo: str, root: Path, steps: int, count: int, batched: bool) -> dict[str, float]:
    overrides = [
        f"train.max_steps={steps}",
        f"train.eval_every={steps}",
        f"train.log_every={steps}",
        "train.eval_episodes=2",
        "train.target_return=null",
        "train.max_wall_seconds=null",
        "train.progress_bar=off",
    ]
    if count > 1:
        seeds = ", ".join(str(seed) for seed in range(count))
        overrides += [f"train.seeds=[{seeds}]", f"train.batch_seeds={str(batched).lower()}"]
    params = load_params(root / PRESETS[algo], overrides)
    wall, cpu = time.perf_counter(), time.process_time()
    with stdout_to_stderr():
        train_stage(params, root)
    return {"wall_seconds": time.perf_counter() - wall, "cpu_seconds": time.process_time() - cpu}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds-counts", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--bc-steps", type=int, default=3000)
    parser.add_argument("--dqn-steps", type=int, default=10000)
    parser.add_argument("--algos", nargs="+", choices=list(PRESETS), default=list(PRESETS))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        dataset = None
        if "bc" in args.algos:
            collected = project("bc", Path(scratch) / "collect", None)
            params = load_params(collected / "offline.yaml", ["collect.policy=random", "collect.steps=20000"])
            with stdout_to_stderr():
                dataset = collect_stage(params, collected)
        for algo in args.algos:
            steps = args.bc_steps if algo == "bc" else args.dqn_steps
            warm_up = project(algo, Path(scratch) / f"{algo}-warm-up", dataset if algo == "bc" else None)
            run(algo, warm_up, 10, 1, False)  # untimed: the imports and first calls
            one: dict[str, float] = {}
            for count in args.seeds_counts:
                for batched in (True, False) if count > 1 else (False,):
                    folder = Path(scratch) / f"{algo}-{count}-{batched}"
                    timing = run(algo, project(algo, folder, dataset if algo == "bc" else None), steps, count, batched)
                    one = one or timing  # the first count is the reference (1 by default)
                    emit(
                        {
                            "algo": algo,
                            "seeds": count,
                            "batched": batched,
                            "steps": steps,
                            **{key: round(value, 2) for key, value in timing.items()},
                            "over_one_seed": {key: round(timing[key] / one[key], 2) for key in timing},
                            "load_average_1min": round(os.getloadavg()[0], 2),
                        }
                    )


if __name__ == "__main__":
    main()
