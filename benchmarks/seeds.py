"""Benchmark: the cost of N seeds (``train.seeds``) — batched (``train.batch_seeds: true``) against one after another.

Prints one JSON line per family. Each family trains its preset on a fixed budget with no early stop (no target
return, no wall-clock limit, one evaluation at the end) for N = 1, 2, 4, 8 seeds, through the train stage a user
runs (``rlcore train``; after one untimed warm-up run): wall seconds, process CPU seconds, training steps per second
summed over the seeds, and ``ratio_to_one`` = wall(N) / wall(1), the cost of N seeds in units of one seed (N when
nothing is shared; the issue's targets are <= 2 for PPO and BC, <= 3 for DQN and SAC at N = 8), with
``cpu_ratio_to_one`` the same in CPU seconds (steadier than wall on a shared machine). ``batched`` says whether the
family's seeds ran as one batched program or fell back to one after another (``rlcore.trainers.batched_trainer``).
With ``--sequential`` the N = max run is repeated with ``train.batch_seeds: false``.

``--peer`` (PPO CartPole only; needs the ``bench`` extra): 8 seeds to the first evaluation >= 475, rlcore's
preset batched in one process against SB3's PPO with RL Zoo hyperparameters as two parallel processes of 4 seeds
each (the best a user can do with SB3 on 2 cores); ``speedup_vs_sb3`` = SB3's wall seconds / rlcore's. Networks:
both [64, 64] tanh.

    python benchmarks/seeds.py [--families ppo dqn sac bc] [--counts 1 2 4 8] [--sequential] [--peer]

Quiet machine only for the wall times; the CPU seconds hold up better on a busy one.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import ROOT, SB3_MISSING, emit, sb3_available, stdout_to_stderr  # noqa: E402

from rlcore.config.sections import Params  # noqa: E402
from rlcore.params import load_params  # noqa: E402
from rlcore.stages import collect_stage, train_stage  # noqa: E402
from rlcore.trainers import batched_trainer  # noqa: E402

FAMILIES: dict[str, tuple[str, int]] = {
    "ppo": ("configs/ppo-cartpole.yaml", 50_000),
    "dqn": ("configs/dqn-cartpole.yaml", 20_000),
    "sac": ("configs/sac-pendulum.yaml", 5_000),
    "bc": ("offline.yaml", 2_000),
}
"""Family -> (preset, budget in its step unit: env steps, or gradient steps for BC)."""

TARGET = 475.0


def fixed_budget(preset: str, steps: int, seeds: list[int], batch: bool, root: Path) -> Params:
    """The preset on ``steps`` with no early stop, one evaluation at the end, for ``seeds``."""
    overrides = [
        f"train.max_steps={steps}",
        f"train.eval_every={steps}",
        "train.eval_episodes=1",
        "train.target_return=null",
        "train.max_wall_seconds=null",
        "train.progress_bar=off",
        f"train.seeds={seeds}",
        f"train.batch_seeds={str(batch).lower()}",
    ]
    if preset == "offline.yaml":
        overrides.append(f"dataset.path={root / 'data' / 'dataset.parquet'}")
    return load_params(ROOT / preset, overrides)


def random_dataset(root: Path) -> None:
    """offline.yaml's dataset (20,000 steps) collected with uniformly random actions, for BC."""
    output = root / "data" / "dataset.parquet"
    params = load_params(ROOT / "offline.yaml", ["collect.policy=random", f"collect.output={output}"])
    with stdout_to_stderr():
        collect_stage(params, root)


def timed_train(params: Params, root: Path) -> float:
    """Wall seconds of the train stage (every seed's run, start to summary)."""
    return cpu_and_wall_train(params, root)[1]


def cpu_and_wall_train(params: Params, root: Path) -> tuple[float, float]:
    """Process CPU seconds and wall seconds of the train stage (every seed's run, start to summary)."""
    cpu, started = time.process_time(), time.perf_counter()
    with stdout_to_stderr():
        train_stage(params, root)
    return time.process_time() - cpu, time.perf_counter() - started


def family_row(family: str, counts: list[int], sequential: bool) -> dict[str, Any]:
    preset, steps = FAMILIES[family]
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        if family == "bc":
            random_dataset(base)
        # Untimed: what the first run of a process pays once (imports, torch's lazily imported compiler on the first
        # optimizer) is not charged to the first timed count.
        timed_train(fixed_budget(preset, max(steps // 20, 1), [0, 1], True, base), base / "warm_up")
        batches = [(count, True) for count in counts] + ([(max(counts), False)] if sequential else [])
        for count, batch in batches:
            root = base / f"n{count}_{'batched' if batch else 'sequential'}"
            params = fixed_budget(preset, steps, list(range(count)), batch, base)
            cpu, seconds = cpu_and_wall_train(params, root)
            rows.append(
                {
                    "seeds": count,
                    "batched": batch and batched_trainer(params) is not None,
                    "wall_seconds": round(seconds, 2),
                    "cpu_seconds": round(cpu, 2),
                    "steps_per_second_summed": round(count * steps / seconds, 1),
                }
            )
    one = next(row for row in rows if row["seeds"] == 1)
    for row in rows:
        row["ratio_to_one"] = round(row["wall_seconds"] / one["wall_seconds"], 2)
        row["cpu_ratio_to_one"] = round(row["cpu_seconds"] / one["cpu_seconds"], 2)
    unit = "gradient_steps" if family == "bc" else "env_steps"
    return {"benchmark": "seeds", "family": family, "preset": preset, unit: steps, "torch_threads": 1, "runs": rows}


def sb3_seeds(seeds: list[int]) -> None:
    """SB3 PPO (RL Zoo CartPole-v1 hyperparameters) on ``seeds`` one after another, each to eval >= 475."""
    import torch
    from ppo_cartpole import sb3_run

    torch.set_num_threads(1)
    for seed in seeds:
        sb3_run(seed, 2048, throughput=False)


def peer_row() -> dict[str, Any]:
    """8 seeds to eval >= 475: rlcore batched in one process; SB3 as two parallel processes of 4 seeds."""
    with tempfile.TemporaryDirectory() as tmp:
        params = load_params(
            ROOT / "configs/ppo-cartpole.yaml",
            [
                f"train.target_return={TARGET}",
                "train.eval_every=2048",
                "train.max_wall_seconds=null",
                "train.progress_bar=off",
                f"train.seeds={list(range(8))}",
            ],
        )
        rlcore_seconds = timed_train(params, Path(tmp))
    result: dict[str, Any] = {
        "benchmark": "seeds_vs_sb3",
        "target_return": TARGET,
        "seeds": list(range(8)),
        "rlcore": {"wall_seconds": round(rlcore_seconds, 2), "batched": batched_trainer(params) is not None},
    }
    if not sb3_available():
        result["sb3"] = SB3_MISSING
        return result
    started = time.perf_counter()
    workers = [
        subprocess.Popen([sys.executable, __file__, "--sb3-seeds", *map(str, half)], stdout=subprocess.DEVNULL)
        for half in ([0, 1, 2, 3], [4, 5, 6, 7])
    ]
    codes = [worker.wait() for worker in workers]
    if any(codes):
        raise RuntimeError(f"SB3 peer processes failed: exit codes {codes}")
    sb3_seconds = time.perf_counter() - started
    result["sb3"] = {"wall_seconds": round(sb3_seconds, 2), "processes": 2}
    result["speedup_vs_sb3"] = round(sb3_seconds / rlcore_seconds, 2)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", nargs="+", choices=sorted(FAMILIES), default=["ppo", "dqn", "sac", "bc"])
    parser.add_argument("--counts", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--sequential", action="store_true", help="also run the largest N one after another")
    parser.add_argument("--peer", action="store_true", help="8 PPO CartPole seeds against SB3 in 2 processes")
    parser.add_argument("--sb3-seeds", type=int, nargs="+", help=argparse.SUPPRESS)  # a peer process
    args = parser.parse_args()
    if args.sb3_seeds is not None:
        sb3_seeds(args.sb3_seeds)
        return
    if 1 not in args.counts:
        parser.error("--counts: must include 1 (the ratios are to one seed's wall time)")
    for family in args.families:
        emit(family_row(family, sorted(args.counts), args.sequential))
    if args.peer:
        emit(peer_row())


if __name__ == "__main__":
    main()
