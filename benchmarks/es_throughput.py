"""ES rollouts: rollouts per second in-process, on 1 and 2 local worker processes and on a 2-worker Dask LocalCluster,
the wall seconds to a periodic evaluation >= 475 in each mode, and what that predicts per added worker. One JSON line.

1. A policy that balances the pole is trained once (``configs/es-cartpole.yaml``, in-process), so rollouts are
   full 500-step episodes: the per-rollout cost a solved task pays.
2. For each mode: the runner's start-up (processes spawned or cluster started, until the first iteration returns),
   then ``--iterations`` iterations of the preset's 32 rollouts with that policy: rollouts/s, and the seconds of
   one iteration.
3. For each mode: ``configs/es-cartpole.yaml`` trained from scratch (seed 0) to its first periodic evaluation
   >= 475; its wall time includes the start-up, as a user waits for it.

The model: an iteration of n rollouts on W workers takes about ``overhead + n * per_rollout / W``, where
``per_rollout`` is the in-process seconds per rollout and ``overhead`` what the runner adds per iteration (sending
weights and tasks, gathering results, the last task's wait); both are measured, and the prediction for W workers
is printed beside the measurement.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from common import ROOT, first_reaching, stdout_to_stderr

PARAMS = ROOT / "configs" / "es-cartpole.yaml"
MODES = {"dev": ("dev", 1), "local_1": ("local", 1), "local_2": ("local", 2), "dask_2": ("dask", 2)}


def _params(runner: str, workers: int, *extra: str) -> Any:
    from rlcore.params import load_params

    return load_params(
        PARAMS, [f"algo.runner={runner}", f"algo.num_workers={workers}", "train.progress_bar=off", *extra]
    )


def solved_policy_weights(root: Path) -> np.ndarray:
    """(1, size) weights of a preset run trained in-process to an evaluation of 500."""
    from rlcore.common.checkpoints import list_checkpoints, load_checkpoint
    from rlcore.registry import policy_from_checkpoint
    from rlcore.stages import train_stage
    from rlcore.workers.weights import WeightsCodec

    params = _params("dev", 1)
    run_dir = train_stage(params, root)
    policy = policy_from_checkpoint(load_checkpoint(list_checkpoints(run_dir / "checkpoints")[-1][1]))
    return np.stack([WeightsCodec(policy).encode(policy)])


def rollout_rate(runner_name: str, workers: int, weights: np.ndarray, iterations: int) -> dict[str, float]:
    from rlcore.trainers.population import iteration_seed, make_runner

    params = _params(runner_name, workers)
    es = _algorithm(params)
    started = time.perf_counter()
    with make_runner(params) as runner:
        runner.run(0, weights, es.ask(iteration_seed(0, 0), 0))
        startup = time.perf_counter() - started
        seconds, rollouts, steps = [], 0, 0
        for iteration in range(1, iterations + 1):
            tasks = es.ask(iteration_seed(0, iteration), 1000 * iteration)
            begun = time.perf_counter()
            results = runner.run(iteration, weights, tasks)
            seconds.append(time.perf_counter() - begun)
            rollouts += 2 * sum(len(result.returns) for result in results)  # type: ignore[attr-defined]
            steps += sum(result.env_steps for result in results)
    return {
        "startup_seconds": round(startup, 2),
        "iteration_seconds": round(statistics.median(seconds), 4),
        "rollouts_per_second": round(rollouts / sum(seconds), 1),
        "env_steps_per_second": round(steps / sum(seconds)),
        "mean_rollout_length": round(steps / rollouts, 1),
    }


def _algorithm(params: Any) -> Any:
    import gymnasium as gym

    from rlcore.algos.es import ES

    env = gym.make(params.env.id)
    return ES(ES.make_policy(env.observation_space, env.action_space, params.policy, params.algo), params.algo)


def time_to_475(runner_name: str, workers: int) -> dict[str, Any]:
    from rlcore.stages import train_stage

    params = _params(runner_name, workers)
    with tempfile.TemporaryDirectory() as root:
        run_dir = train_stage(params, Path(root))
        summary = json.loads((run_dir / "train_summary.json").read_text())
    first = first_reaching(summary["evaluations"], 475.0)
    return {"seconds_to_475": first["seconds"], "env_steps_to_475": first["env_steps"]}


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__)
    parser.add_argument("--iterations", type=int, default=5)
    args = parser.parse_args()
    results: dict[str, dict[str, Any]] = {}
    with stdout_to_stderr(), tempfile.TemporaryDirectory() as root:
        weights = solved_policy_weights(Path(root))
        for mode, (runner, workers) in MODES.items():
            results[mode] = {**rollout_rate(runner, workers, weights, args.iterations), **time_to_475(runner, workers)}
    population = 32
    per_rollout = 1.0 / results["dev"]["rollouts_per_second"]
    model = {}
    for mode, (_, workers) in MODES.items():
        overhead = results[mode]["iteration_seconds"] - population * per_rollout / workers
        model[mode] = {"overhead_seconds_per_iteration": round(overhead, 4)}
    local_overhead = max(model["local_2"]["overhead_seconds_per_iteration"], 0.0)
    predicted = {
        f"{w}_workers_rollouts_per_second": round(population / (local_overhead + population * per_rollout / w), 1)
        for w in (1, 2, 4, 8)
    }
    print(
        json.dumps(
            {
                "benchmark": "es_throughput",
                "preset": "configs/es-cartpole.yaml",
                "population": population,
                "seconds_per_rollout_in_process": round(per_rollout, 5),
                "modes": results,
                "model": model,
                "predicted_with_local_overhead": predicted,
            }
        )
    )


if __name__ == "__main__":
    main()
