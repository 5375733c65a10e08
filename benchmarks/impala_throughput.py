"""IMPALA throughput: env steps per second with 1 and 2 actors, on subprocess actors and on a 2-worker Dask
LocalCluster, with the learner's share of the wall time and the mean policy lag. One JSON line.

Each configuration trains ``configs/impala-cartpole.yaml`` for ``--steps`` env steps with no early stop and one
evaluation at the end (so the rate is the actors' and the learner's, not evaluation's); the Dask cluster's start-up
and the actor processes' spawn are included in the wall time, as a user waits for them. Medians over seeds.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import tempfile
import time
from pathlib import Path

from common import ROOT, stdout_to_stderr

PARAMS = ROOT / "configs" / "impala-cartpole.yaml"


def _mean_of_curve(run_dir: Path, metric: str) -> float:
    path = run_dir / "dvclive" / "plots" / "metrics" / "train" / f"{metric}.tsv"
    with path.open() as handle:
        values = [float(row[metric]) for row in csv.DictReader(handle, delimiter="\t")]
    return statistics.fmean(values)


def one_run(runner: str, actors: int, seed: int, steps: int) -> dict[str, float]:
    from rlcore.params import load_params
    from rlcore.stages import train_stage

    params = load_params(
        PARAMS,
        [
            f"seed={seed}",
            f"algo.runner={runner}",
            f"algo.num_actors={actors}",
            f"train.max_steps={steps}",
            f"train.eval_every={steps}",
            f"train.log_every={max(steps // 20, 1)}",
            "train.target_return=null",
            "train.max_wall_seconds=null",
            "train.progress_bar=off",
        ],
    )
    with tempfile.TemporaryDirectory() as root:
        started = time.perf_counter()
        run_dir = train_stage(params, Path(root))
        wall = time.perf_counter() - started
        summary = json.loads((run_dir / "train_summary.json").read_text())
        return {
            "env_steps_per_second": summary["env_steps"] / wall,
            "learner_busy_fraction": _mean_of_curve(run_dir, "learner_busy_fraction"),
            "mean_policy_lag": _mean_of_curve(run_dir, "policy_lag"),
            "wall_seconds": wall,
        }


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=100_000)
    args = parser.parse_args()
    results: dict[str, dict[str, float]] = {}
    with stdout_to_stderr():
        for runner in ("dev", "local", "dask"):
            for actors in (1, 2):
                if runner == "dev" and actors == 2:
                    continue  # in-process actors take turns: one or two is the same throughput
                runs = [one_run(runner, actors, seed, args.steps) for seed in args.seeds]
                results[f"{runner}_{actors}_actors"] = {
                    key: round(statistics.median(run[key] for run in runs), 3) for key in runs[0]
                }
    print(
        json.dumps(
            {
                "benchmark": "impala_throughput",
                "params": str(PARAMS.relative_to(ROOT)),
                "env_steps": args.steps,
                "seeds": args.seeds,
                "torch_threads": 1,
                "results": results,
            }
        )
    )


if __name__ == "__main__":
    main()
