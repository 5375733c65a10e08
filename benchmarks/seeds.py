"""Benchmark: the cost of N seeds (``train.seeds``) — batched (``train.batch_seeds: true``) against one after another.

Prints one JSON line per family. Each family trains its preset on a fixed budget with no early stop (no target
return, no wall-clock limit, one evaluation at the end) for N = 1, 2, 4, 8 seeds, through the train stage a user
runs (``rlcore train``): wall and CPU seconds, training steps per second summed over the seeds, and
``ratio_to_one`` = wall(N) / wall(1) (``cpu_ratio_to_one`` in CPU seconds), the cost of N seeds in units of one seed
(N when nothing is shared; issue 39's targets: <= 2 at N = 8 for PPO, DQN, SAC and BC, <= 2 at N = 4 for the
other presets but MinAtar's <= 2.5). ``batched`` says whether the seeds trained together
(``train.batch_seeds``: through their family's loop, ``rlcore.trainers.train_seeds``). An untimed 10-step run first
takes the imports. With ``--sequential`` the N = max run is repeated with ``train.batch_seeds: false``. With
``--seed-processes 1 2`` every N > 1 is timed with each ``train.seed_processes`` given (``seed_processes`` in its
row; default 1: one batched program in this process), so the rows show what the second core adds; CPU seconds then
include the child processes', and ``cpu_seconds_per_core`` (``cpu_per_core_ratio_to_one``) is one core's share of
them: a loaded machine's wall hides what the second core gives, the share says what a quiet one would show. With
``--repeats R`` every run is timed R times, interleaved, and the medians reported. ``--steps S`` gives every family the
budget S per seed (a process's start is seconds: longer runs show what the second core gives). With ``--torch-threads
1 2`` every run in one process (one seed too) is timed at each ``torch_threads`` (the second core as a second torch
thread instead of a second process); ratios are to one seed at one thread.

``--peer`` (PPO CartPole only; needs the ``bench`` extra): 8 seeds to the first evaluation >= 475, rlcore's
preset batched in one process against SB3's PPO with RL Zoo hyperparameters as two parallel processes of 4 seeds
each (the best a user can do with SB3 on 2 cores); ``speedup_vs_sb3`` = SB3's wall seconds / rlcore's. Networks:
both [64, 64] tanh.

``--figure PNG`` draws the cost per seed against N (log x), one line per family: CPU seconds (``--metric wall``:
wall seconds) of N seeds divided by N and by one seed's, so 1 is no gain and 1/N is "N seeds for the price of one";
repeated lines of a family (``--results`` files, or this run) are drawn as points around their median. With
``--results`` the figure is drawn from earlier runs' JSON lines and nothing is measured.

    python benchmarks/seeds.py [--families ppo dqn sac bc] [--counts 1 2 4 8] [--sequential] [--repeats 3] [--peer]
        [--seed-processes 1 2] [--torch-threads 1 2] [--steps 40960]
    python benchmarks/seeds.py --results runs.jsonl [more.jsonl ...] --figure benchmarks/figures/seeds-cost.png

Quiet machine only: the figures are wall times.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import ROOT, SB3_MISSING, emit, sb3_available, stdout_to_stderr  # noqa: E402

from rlcore.config.sections import Params  # noqa: E402
from rlcore.params import load_params  # noqa: E402
from rlcore.stages import collect_stage, train_stage  # noqa: E402

FAMILIES: dict[str, tuple[str, int]] = {
    "ppo": ("configs/ppo-cartpole.yaml", 50_000),
    "dqn": ("configs/dqn-cartpole.yaml", 20_000),
    "sac": ("configs/sac-pendulum.yaml", 5_000),
    "bc": ("offline.yaml", 2_000),
    # The configurations that used to train one seed after another: normalize_rewards (the MLPs now stacked) and a
    # recurrent policy (each seed's own policy in turn, in the same loop).
    "ppo-hopper": ("configs/ppo-hopper.yaml", 8_192),
    "ppo-lstm": ("configs/ppo-lstm-cartpole-po.yaml", 16_384),
    "dqn-minatar": ("configs/dqn-minatar-breakout.yaml", 8_000),  # 750 gradient steps past its warm-up
    "ppo-minatar": ("configs/ppo-minatar-breakout.yaml", 8_192),  # 4 rollouts of 2,048 (a CNN: each its own)
    "ppo-simple-spread": ("configs/ppo-simple-spread.yaml", 4_800),  # 4 rollouts of 1,200 agent steps
}
"""Family -> (preset, budget in its step unit: env steps, or gradient steps for BC)."""

TARGET = 475.0


def fixed_budget(
    preset: str, steps: int, seeds: list[int], batch: bool, root: Path, processes: int = 1, threads: int = 1
) -> Params:
    """The preset on ``steps`` with no early stop, one evaluation at the end, for ``seeds`` (in ``processes``, each
    computing with ``threads`` torch threads)."""
    overrides = [
        f"torch_threads={threads}",
        f"train.max_steps={steps}",
        f"train.eval_every={steps}",
        "train.eval_episodes=1",
        "train.target_return=null",
        "train.max_wall_seconds=null",
        "train.progress_bar=off",
        f"train.seeds={seeds}",
        f"train.batch_seeds={str(batch).lower()}",
        f"train.seed_processes={processes}",
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


def timed_train(params: Params, root: Path) -> tuple[float, float, float]:
    """Wall and CPU seconds of the train stage (every seed's run, start to summary), and the CPU seconds of one core's
    share. CPU seconds (this process's and its finished children's, 1 torch thread each) are the work itself: what a
    busy machine disturbs least. One core's share: this process's and its children's divided by
    ``train.seed_processes`` (the groups are equal), what a quiet machine's wall would be with a core per process."""
    started, (mine, theirs) = time.perf_counter(), cpu_seconds()
    with stdout_to_stderr():
        train_stage(params, root)
    seconds, (mine_after, theirs_after) = time.perf_counter() - started, cpu_seconds()
    processes = int(params.train.seed_processes) if isinstance(params.train.seed_processes, int) else 1
    own, children = mine_after - mine, theirs_after - theirs
    return seconds, own + children, own + children / processes


def cpu_seconds() -> tuple[float, float]:
    """CPU seconds of this process, and of its children that exited and were waited for (``train.seed_processes``)."""
    times = os.times()
    return times.user + times.system, times.children_user + times.children_system


@dataclass(frozen=True)
class Plan:
    """What :func:`family_row` runs: the seed counts N (1 among them), the largest one again one seed after another
    (``sequential``), interleaved repeats, the ``train.seed_processes`` and ``torch_threads`` each N > 1 runs with
    (threads only in one process; one seed runs at every thread count), and the budget per seed (None: the family's
    own in :data:`FAMILIES`)."""

    counts: list[int]
    sequential: bool = False
    repeats: int = 1
    processes: list[int] = field(default_factory=lambda: [1])
    threads: list[int] = field(default_factory=lambda: [1])
    budget: int | None = None

    def runs(self) -> list[tuple[int, bool, int, int]]:
        """(seeds, batched, processes, threads) of every run; one seed runs at one thread too (the ratios' base)."""
        runs = [
            (count, True, processes, threads)
            for count in self.counts
            for processes in (self.processes if count > 1 else [1])
            for threads in self.thread_counts(count, processes)
        ]
        return runs + ([(max(self.counts), False, 1, 1)] if self.sequential else [])

    def thread_counts(self, seeds: int, processes: int) -> list[int]:
        """The ``torch_threads`` a run of ``seeds`` in ``processes`` is timed at: one seed at one thread and every
        asked count, N seeds in one process at every asked count, N seeds in several processes at one thread."""
        if seeds == 1:
            return sorted({1, *self.threads})
        return self.threads if processes == 1 else [1]


def family_row(family: str, plan: Plan) -> dict[str, Any]:
    """The family's runs as ``plan`` says, timed in a temporary folder, with each run's ratios to one seed at one
    thread."""
    preset, steps = FAMILIES[family]
    steps = plan.budget or steps
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        if family == "bc":
            random_dataset(base)
        timed_train(fixed_budget(preset, 10, [0, 1], True, base), base / "warm_up")  # imports, untimed
        times: dict[tuple[int, bool, int, int], list[tuple[float, float, float]]] = {run: [] for run in plan.runs()}
        for repeat in range(plan.repeats):  # interleaved: a change of the machine's load touches every run alike
            for count, batch, p, threads in times:
                root = base / f"n{count}_{'batched' if batch else 'sequential'}_p{p}_t{threads}_{repeat}"
                params = fixed_budget(preset, steps, list(range(count)), batch, base, p, threads)
                times[count, batch, p, threads].append(timed_train(params, root))
        for (count, batch, p, threads), timed in times.items():
            seconds, cpu, per_core = (float(statistics.median(column)) for column in zip(*timed, strict=True))
            rows.append(
                {
                    "seeds": count,
                    "batched": batch,
                    "seed_processes": p,
                    "torch_threads": threads,
                    "wall_seconds": round(seconds, 2),
                    "cpu_seconds": round(cpu, 2),
                    "cpu_seconds_per_core": round(per_core, 2),
                    "steps_per_second_summed": round(count * steps / seconds, 1),
                    "repeats": plan.repeats,
                }
            )
    one = next(row for row in rows if row["seeds"] == 1 and row["torch_threads"] == 1)
    for row in rows:
        row["ratio_to_one"] = round(row["wall_seconds"] / one["wall_seconds"], 2)
        row["cpu_ratio_to_one"] = round(row["cpu_seconds"] / one["cpu_seconds"], 2)
        row["cpu_per_core_ratio_to_one"] = round(row["cpu_seconds_per_core"] / one["cpu_seconds"], 2)
    unit = "gradient_steps" if family == "bc" else "env_steps"
    return {"benchmark": "seeds", "family": family, "preset": preset, unit: steps, "runs": rows}


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
        rlcore_seconds, *_ = timed_train(params, Path(tmp))
    result: dict[str, Any] = {
        "benchmark": "seeds_vs_sb3",
        "target_return": TARGET,
        "seeds": list(range(8)),
        "rlcore": {"wall_seconds": round(rlcore_seconds, 2), "batched": params.train.batch_seeds},
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


def cost_per_seed(row: dict[str, Any], metric: str, processes: int = 1) -> dict[int, float]:
    """One family's line of output -> {N: seconds of N seeds / N / one seed's seconds} (``metric``: cpu or wall) for
    the runs in ``processes`` processes (``train.seed_processes``; one seed: always one)."""
    ratio = "cpu_ratio_to_one" if metric == "cpu" else "ratio_to_one"
    return {
        run["seeds"]: run[ratio] / run["seeds"]
        for run in row["runs"]
        if run["batched"]
        and run.get("seed_processes", 1) == (1 if run["seeds"] == 1 else processes)
        and run.get("torch_threads", 1) == 1
    }


def draw_figure(rows: list[dict[str, Any]], metric: str, path: Path) -> None:
    """Cost per seed (in units of one seed's) against N seeds for each family in ``rows`` (``family_row``'s)."""
    import statistics

    from rlcore.evaluation.plots import new_figure

    families: dict[tuple[str, int], list[dict[int, float]]] = {}  # (family, processes) -> each run's costs
    for row in rows:
        if row.get("benchmark") != "seeds":
            continue
        families.setdefault((row["family"], 1), []).append(cost_per_seed(row, metric))
        split = cost_per_seed(row, metric, processes=2)
        if metric == "wall" and len(split) > 1:  # CPU seconds of two processes are not the wait: wall only
            families.setdefault((row["family"], 2), []).append(split)
    if not families:
        raise SystemExit("--figure: no `seeds` rows to draw (give --results files of this script's output)")
    with new_figure(path, figsize=(8.5, 4.2), dpi=100) as (_, axes):
        counts_seen: set[int] = set()
        colors: dict[str, str] = {}  # a family's color, its runs in one process solid and in two dashed
        for (family, processes), repeats in sorted(families.items()):
            counts = sorted({count for repeat in repeats for count in repeat})
            counts_seen.update(counts)
            medians = [statistics.median(r[count] for r in repeats if count in r) for count in counts]
            color = colors.setdefault(family, f"C{len(colors) % 10}")
            label = family if processes == 1 else f"{family}, {processes} processes"
            axes.plot(
                counts,
                medians,
                marker="o",
                ls="-" if processes == 1 else "--",
                color=color,
                label=label if len(repeats) == 1 else f"{label} ({len(repeats)} runs, median)",
            )
            for repeat in repeats:
                axes.scatter(list(repeat), list(repeat.values()), s=10, alpha=0.4, color=color)
        ticks = sorted(counts_seen)
        axes.plot(ticks, [1 / count for count in ticks], ls=":", color="grey", label="1/N (N seeds cost one)")
        axes.axhline(1.0, ls="--", color="grey", lw=0.8, label="1 (no gain: N runs)")
        axes.scatter([4, 8], [2 / 4, 2 / 8], marker="*", s=90, color="black", label="targets: N seeds <= 2x", zorder=3)
        axes.set_xscale("log", base=2)
        axes.set_xticks(ticks, [str(tick) for tick in ticks])
        unit = "CPU seconds" if metric == "cpu" else "wall seconds"
        axes.set(
            xlabel="seeds N (batched: one process solid, two dashed)" if metric == "wall" else "seeds N (one process)",
            ylabel=f"{unit} per seed / one seed's",
            title="Cost per seed of N batched seeds (benchmarks/seeds.py)",
        )
        axes.set_ylim(bottom=0)
        axes.grid(alpha=0.3)
        axes.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the lines, not over them


def read_rows(paths: list[Path]) -> list[dict[str, Any]]:
    """The JSON lines of earlier runs of this script (other lines are skipped)."""
    rows = []
    for path in paths:
        for line in path.read_text().splitlines():
            if line.startswith("{"):
                rows.append(json.loads(line))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--families", nargs="+", choices=sorted(FAMILIES), default=["ppo", "dqn", "sac", "bc"])
    parser.add_argument("--counts", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--sequential", action="store_true", help="also run the largest N one after another")
    parser.add_argument("--repeats", type=int, default=1, help="time every run this many times; report medians")
    parser.add_argument(
        "--seed-processes", type=int, nargs="+", default=[1], help="train.seed_processes of each N > 1 (default 1)"
    )
    parser.add_argument("--steps", type=int, help="every family's budget per seed (default: each its own)")
    parser.add_argument(
        "--torch-threads", type=int, nargs="+", default=[1], help="torch_threads of every run in one process"
    )
    parser.add_argument("--peer", action="store_true", help="8 PPO CartPole seeds against SB3 in 2 processes")
    parser.add_argument("--figure", type=Path, help="draw the cost per seed against N to this PNG")
    parser.add_argument("--metric", choices=["cpu", "wall"], default="cpu", help="the figure's seconds")
    parser.add_argument("--results", type=Path, nargs="+", help="draw --figure from these JSON-lines files")
    parser.add_argument("--sb3-seeds", type=int, nargs="+", help=argparse.SUPPRESS)  # a peer process
    args = parser.parse_args()
    if args.sb3_seeds is not None:
        sb3_seeds(args.sb3_seeds)
        return
    if args.results is not None:
        if args.figure is None:
            parser.error("--results: give --figure too (the results are only drawn)")
        draw_figure(read_rows(args.results), args.metric, args.figure)
        return
    if 1 not in args.counts:
        parser.error("--counts: must include 1 (the ratios are to one seed's wall time)")
    rows = []
    for family in args.families:
        plan = Plan(
            sorted(args.counts), args.sequential, args.repeats, args.seed_processes, args.torch_threads, args.steps
        )
        rows.append(family_row(family, plan))
        emit(rows[-1])
    if args.figure is not None:
        draw_figure(rows, args.metric, args.figure)
    if args.peer:
        emit(peer_row())


if __name__ == "__main__":
    main()
