"""Benchmark: real workloads on three seeds — rlcore's seeds as one batched run beside SB3's seeds side by side.

Prints one JSON line per workload (issue 40). Each side trains seeds 0-2 (``--seeds``) on the same budget, scores
each seed's final model on ``--test-episodes`` test episodes (never trained, stopped or selected on), and reports:
each seed's test mean return with its 95 % interval, the IQM over seeds with its stratified bootstrap 95 % interval
(``rlcore.evaluation.aggregate``, rliable's estimators; three runs: nothing is trimmed, the IQM is the mean), the
wall seconds for all seeds, and the CPU seconds of all processes.

- ``rlcore``: ``train.seeds=[0, 1, 2]`` (the seeds batched in one program; ``--seed-processes N`` splits them over
  N processes, each one batched program: ``train.seed_processes``, default ``auto``) through the pipeline's
  stages train -> evaluate -> select, no early stop, a periodic evaluation (and checkpoint) every ``steps /
  --curve-points``; the test score is the select stage's (each seed's best checkpoint on validation episodes, then
  scored on test episodes, ``reports/<name>/metrics.json``'s ``per_seed``; ``selected_env_steps``: that checkpoint).
- ``sb3``: the best a user can do with SB3 on these 2 cores: one process per seed, all started at once. Each
  evaluates ``--eval-episodes`` deterministic episodes every ``steps / --curve-points`` (``EvalCallback``; its time is
  in the wall time, as rlcore's periodic evaluations are in rlcore's), then scores its final model on the test
  episodes (seeds from ``seed + 10_000``; ``ppo-simple-spread``: rlcore's Evaluator on the preset's test seeds, as
  ``benchmarks/simple_spread.py`` scores). Hyperparameters and networks: ``benchmarks/pixels.py``'s and
  ``benchmarks/simple_spread.py``'s peers (RL Zoo's for HalfCheetah SAC, whose [256, 256] ReLU networks and
  settings the preset shares; the preset's own settings and network for the PPO workloads; the JSON's ``networks``).

Workloads: ``sac-halfcheetah`` (100k env steps), ``ppo-hopper`` (1M), ``ppo-minatar`` (Breakout, 1M),
``ppo-simple-spread`` (the preset's budget, agent steps). ``--figure PNG`` draws return against wall seconds, every
seed of both sides (from ``--results`` JSON lines when given: then nothing is measured).

    python benchmarks/real_workloads.py sac-halfcheetah [--steps N] [--seeds 0 1 2] [--sides rlcore sb3]
    python benchmarks/real_workloads.py --results runs.jsonl --figure benchmarks/figures/real-workloads.png

Quiet machine only: the figures are wall times. SB3 needs the ``bench`` extra (``pip install -e ".[bench]"``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import ROOT, SB3_MISSING, emit, sb3_available, stdout_to_stderr, tested_seed  # noqa: E402


@dataclass(frozen=True)
class Workload:
    preset: str
    """The preset under configs/ (without .yaml)."""
    steps: int
    """Env steps (agent steps for PettingZoo) per seed."""
    env_id: str
    networks: str
    """The two sides' networks, said once."""


WORKLOADS = {
    "sac-halfcheetah": Workload(
        "sac-halfcheetah", 100_000, "HalfCheetah-v5", "both [256, 256] relu (the preset's, RL Zoo's)"
    ),
    "ppo-hopper": Workload("ppo-hopper", 1_000_000, "Hopper-v5", "both [64, 64] tanh actor and critic"),
    "ppo-minatar": Workload(
        "ppo-minatar-breakout", 1_000_000, "MinAtar/Breakout-v1", "both conv 16 3x3 + 128, heads [64]"
    ),
    "ppo-simple-spread": Workload("ppo-simple-spread", 150_000, "simple_spread_v3", "both [64, 64] tanh"),
}


def cpu_seconds_of_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


# --- the sides, each run in its own process (``--worker``) ---


def rlcore_worker(workload: Workload, seeds: list[int], steps: int, args: argparse.Namespace) -> dict:
    """Every seed in one batched run through train -> evaluate -> select (``train.seed_processes``: the seeds split
    over that many processes, each one batched program; ``auto`` as a user gets it by default)."""
    import torch

    from rlcore.common.files import read_json
    from rlcore.params import load_params
    from rlcore.stages import evaluate_stage, select_stage, train_stage

    params = load_params(
        ROOT / "configs" / f"{workload.preset}.yaml",
        [
            f"train.seeds={json.dumps(seeds)}",
            f"train.max_steps={steps}",
            f"train.eval_every={max(steps // args.curve_points, 1)}",
            "train.target_return=null",
            "train.max_wall_seconds=null",
            "train.progress_bar=off",
            f"eval.test_episodes={args.test_episodes}",
            f"train.seed_processes={args.seed_processes}",
        ],
    )
    torch.set_num_threads(params.torch_threads)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp, stdout_to_stderr():
        root = Path(tmp)
        train_stage(params, root)
        train_wall = time.perf_counter() - started
        evaluate_stage(params, root)
        select_stage(params, root)
        metrics = read_json(root / "reports" / params.name / "metrics.json")
        per_seed: dict[str, Any] = {}
        for seed in seeds:
            summary = read_json(root / "runs" / params.name / f"seed_{seed}" / "train_summary.json")
            per_seed[str(seed)] = {
                **tested_seed(metrics["per_seed"][str(seed)]),
                # [env steps, wall seconds since the run started, mean return of the periodic evaluation]
                "curve": [
                    [row["env_steps"], round(row["wall_seconds"], 1), round(row["mean_return"], 2)]
                    for row in summary["evaluations"]
                ],
            }
    return {"train_wall_seconds": round(train_wall, 1), "per_seed": per_seed}


def sb3_model(workload: Workload, seed: int) -> tuple[Any, Any]:
    """(model, its training env) as benchmarks/pixels.py's peers make them."""
    import pixels
    from stable_baselines3 import PPO, SAC
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    if workload.preset == "sac-halfcheetah":
        return SAC("MlpPolicy", workload.env_id, learning_starts=10_000, seed=seed, device="cpu"), None
    if workload.preset == "ppo-hopper":
        env = VecNormalize(make_vec_env(workload.env_id, n_envs=1, seed=seed), gamma=0.99)
        model = PPO(
            "MlpPolicy", env, learning_rate=lambda left: 3e-4 * left, clip_range_vf=0.2, seed=seed, device="cpu"
        )
        return model, env
    return pixels.sb3_ppo_minatar_model(seed), None


def sb3_worker(workload: Workload, seed: int, steps: int, test_episodes: int, curve: dict[str, int]) -> dict:
    """One seed of SB3 with periodic evaluations, then its test score."""
    import torch

    torch.set_num_threads(1)
    if workload.preset == "ppo-simple-spread":
        import simple_spread

        from rlcore.params import load_params

        with stdout_to_stderr():
            result = simple_spread.sb3_run(
                load_params(simple_spread.PRESET, [f"eval.test_episodes={test_episodes}"]), seed, steps, bootstrap=True
            )
        return {
            "train_wall_seconds": result["wall_seconds"],
            "test_mean_return": result["test_mean_return"],
            "test_ci95": result["ci95"],
            "test_episodes": result["episodes"],
            # [agent steps, wall seconds, mean return per agent of the last 100 training episodes]: no periodic
            # evaluation in this peer (its wall time is the training's)
            "curve": [[step, None, value] for step, value in result["train_curve"]],
        }
    import pixels
    from stable_baselines3.common.callbacks import EvalCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    model, normalized = sb3_model(workload, seed)
    kwargs = {"env_kwargs": {"max_episode_steps": 10_000}} if workload.preset == "ppo-minatar-breakout" else {}
    eval_env = make_vec_env(workload.env_id, n_envs=1, seed=seed + 20_000, **kwargs)
    if normalized is not None:  # EvalCallback copies the training's observation statistics before each evaluation
        eval_env = VecNormalize(eval_env, training=False, norm_reward=False)
    points: list[list[float | None]] = []
    started = time.perf_counter()

    class Curve(EvalCallback):  # type: ignore[misc]
        def _on_step(self) -> bool:
            before = self.n_calls % self.eval_freq == 0
            result: bool = super()._on_step()
            if before:
                points.append(
                    [self.num_timesteps, round(time.perf_counter() - started, 1), round(self.last_mean_reward, 2)]
                )
            return result

    callback = Curve(
        eval_env, n_eval_episodes=curve["episodes"], eval_freq=max(curve["every"] // model.n_envs, 1), verbose=0
    )
    with stdout_to_stderr():
        model.learn(total_timesteps=steps, callback=callback)
    wall = time.perf_counter() - started
    test = pixels.sb3_evaluate(model, workload.env_id, seed, test_episodes, normalized_like=normalized, **kwargs)
    return {"train_wall_seconds": round(wall, 1), **test, "curve": points}


# --- the parent: starts the workers, times them, aggregates ---


def run_workers(commands: list[list[str]]) -> tuple[list[dict[str, Any]], float, float]:
    """Start every command at once; (their JSON results, wall seconds until the last ended, their CPU seconds)."""
    cpu_before, started = cpu_seconds_of_children(), time.perf_counter()
    processes = [subprocess.Popen(command, stdout=subprocess.PIPE, text=True, cwd=ROOT) for command in commands]
    outputs = [process.communicate()[0] for process in processes]
    wall = time.perf_counter() - started
    for command, process in zip(commands, processes, strict=True):
        if process.returncode != 0:
            raise SystemExit(f"error: {' '.join(command)} exited {process.returncode}")
    results = [json.loads(output.strip().splitlines()[-1]) for output in outputs]
    return results, wall, cpu_seconds_of_children() - cpu_before


def side_summary(per_seed: dict[str, dict[str, Any]], wall: float, cpu: float) -> dict[str, Any]:
    from rlcore.evaluation.aggregate import aggregate

    over = aggregate({int(seed): run["test_mean_return"] for seed, run in per_seed.items()})
    return {
        "iqm": round(over["iqm"], 2),
        "iqm_ci95": [round(value, 2) for value in over["iqm_ci95"]],
        "num_runs": over["num_runs"],
        "wall_seconds": round(wall, 1),
        "cpu_seconds": round(cpu, 1),
        "per_seed": per_seed,
    }


def measure(name: str, args: argparse.Namespace) -> dict[str, Any]:
    workload = WORKLOADS[name]
    steps = args.steps or workload.steps
    common = [sys.executable, __file__, name, "--steps", str(steps), "--test-episodes", str(args.test_episodes)]
    common += ["--curve-points", str(args.curve_points), "--eval-episodes", str(args.eval_episodes)]
    common += ["--seed-processes", args.seed_processes]
    os.environ["OMP_NUM_THREADS"] = "1"  # the workers inherit it: one torch thread each
    result: dict[str, Any] = {
        "benchmark": "real_workloads",
        "workload": name,
        "preset": f"configs/{workload.preset}.yaml",
        "steps_per_seed": steps,
        "seeds": args.seeds,
        "test_episodes": args.test_episodes,
        "networks": workload.networks,
        "load_average_at_start": round(os.getloadavg()[0], 2),
    }
    if "rlcore" in args.sides:
        seeds = [str(seed) for seed in args.seeds]
        (run,), wall, cpu = run_workers([[*common, "--worker", "rlcore", "--seeds", *seeds]])
        result["rlcore"] = {
            **side_summary(run["per_seed"], wall, cpu),
            "train_wall_seconds": run["train_wall_seconds"],
            "seed_processes": args.seed_processes,
        }
    if "sb3" in args.sides:
        if not sb3_available() or (name == "ppo-simple-spread" and not sb3_available("supersuit")):
            result["sb3"] = SB3_MISSING
        else:
            commands = [[*common, "--worker", "sb3", "--seeds", str(seed)] for seed in args.seeds]
            runs, wall, cpu = run_workers(commands)
            result["sb3"] = side_summary({str(s): r for s, r in zip(args.seeds, runs, strict=True)}, wall, cpu)
    if isinstance(result.get("rlcore"), dict) and isinstance(result.get("sb3"), dict):
        result["rlcore_wall_over_sb3"] = round(result["rlcore"]["wall_seconds"] / result["sb3"]["wall_seconds"], 3)
        result["rlcore_iqm_minus_sb3"] = round(result["rlcore"]["iqm"] - result["sb3"]["iqm"], 2)
    return result


def draw(results: list[dict[str, Any]], path: Path) -> None:
    """Return against wall seconds, one panel per workload, every seed of both sides."""
    from rlcore.evaluation.plots import pyplot, save_figure

    plt = pyplot()
    figure, axes_row = plt.subplots(1, len(results), figsize=(4.5 * len(results), 3.5), dpi=100, squeeze=False)
    try:
        for axes, result in zip(axes_row[0], results, strict=True):
            for side, color in (("rlcore", "tab:blue"), ("sb3", "tab:orange")):
                summary = result.get(side)
                if not isinstance(summary, dict):
                    continue
                for index, run in enumerate(summary["per_seed"].values()):
                    rows = [row for row in run["curve"] if row[1] is not None]
                    if rows:
                        label = (
                            f"{side} ({len(summary['per_seed'])} seeds, {summary['wall_seconds']:.0f} s)"
                            if index == 0
                            else None
                        )
                        axes.plot([r[1] for r in rows], [r[2] for r in rows], color=color, alpha=0.8, label=label)
            axes.set(xlabel="wall seconds", ylabel="mean return (periodic evaluation)", title=result["workload"])
            axes.grid(alpha=0.3)
            if axes.get_legend_handles_labels()[1]:
                axes.legend(fontsize=7)
        figure.tight_layout()
        save_figure(figure, path)
    finally:
        plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("workloads", nargs="*", default=[], help=f"any of {', '.join(sorted(WORKLOADS))}")
    parser.add_argument("--steps", type=int, default=None, help="per seed (default: the workload's)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--sides", nargs="+", choices=["rlcore", "sb3"], default=["rlcore", "sb3"])
    parser.add_argument("--test-episodes", type=int, default=100)
    parser.add_argument("--eval-episodes", type=int, default=10, help="episodes per periodic evaluation (SB3's)")
    parser.add_argument("--curve-points", type=int, default=10, help="periodic evaluations per run")
    parser.add_argument(
        "--seed-processes", default="auto", help="rlcore's train.seed_processes (default auto: what a user gets)"
    )
    parser.add_argument("--results", type=Path, nargs="+", default=None, help="earlier JSON lines: draw only")
    parser.add_argument("--figure", type=Path, default=None, help="return against wall seconds (PNG)")
    parser.add_argument("--worker", choices=["rlcore", "sb3"], default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    unknown = sorted(set(args.workloads) - set(WORKLOADS))
    if unknown:
        parser.error(f"workloads: unknown {', '.join(unknown)}; expected any of {', '.join(sorted(WORKLOADS))}")
    if args.worker is not None:
        (name,) = args.workloads
        workload, steps = WORKLOADS[name], args.steps or WORKLOADS[name].steps
        if args.worker == "rlcore":
            out = rlcore_worker(workload, args.seeds, steps, args)
        else:
            curve = {"every": max(steps // args.curve_points, 1), "episodes": args.eval_episodes}
            out = sb3_worker(workload, args.seeds[0], steps, args.test_episodes, curve)
        print(json.dumps(out))
        return
    if args.results is not None:
        results = [json.loads(line) for path in args.results for line in path.read_text().splitlines() if line]
    else:
        results = [measure(name, args) for name in args.workloads]
        for result in results:
            emit(result)
    if args.figure is not None:
        by_workload: dict[str, dict[str, Any]] = {}  # the sides of one workload may come from separate runs
        for result in results:
            if result.get("benchmark") == "real_workloads":
                by_workload.setdefault(result["workload"], {}).update(result)
        draw(list(by_workload.values()), args.figure)


if __name__ == "__main__":
    main()
