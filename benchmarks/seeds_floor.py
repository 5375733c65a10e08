"""Benchmark: what bounds N stacked seeds' cost against one seed's — the update's share, measured in the runs.

Prints one JSON line per family. Each family trains its preset on ``benchmarks/seeds.py``'s fixed budget (no early
stop, one evaluation at the end) with one seed and with N seeds batched, through the train stage a user runs, with a
CPU timer around the family's ``update_members`` (the one update every run calls: one seed's ``update`` is it on
one member, N stacked seeds' step is it on N): per run, CPU seconds of the whole train stage, of the updates, and of
the rest (collection, replay, evaluation, checkpoints, bookkeeping).

- ``update_ratio``: N seeds' update seconds over one seed's (1 = the arithmetic of N for the price of one, N = no
  gain from stacking);
- ``rest_ratio``: the same for everything else (1 = every seed's envs and bookkeeping for the price of one seed's);
- ``floor``: what N seeds would cost, in units of one seed's run, if everything but the update cost what one seed's
  does: (N seeds' update + one seed's rest) / one seed's run. Issue 39's "8 seeds <= 2x one seed" needs the floor
  below 2 first, and then a ``rest_ratio`` near 1;
- ``ratio``: what N seeds cost (CPU seconds over one seed's).

Medians of ``--repeats`` interleaved repeats (one seed, N seeds, one seed, ...). CPU seconds of this process (1 torch
thread, ``train.seed_processes: 1``): a busy machine disturbs them least.

    python benchmarks/seeds_floor.py [--families ppo dqn sac bc] [--seeds 8] [--repeats 3]
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import emit  # noqa: E402
from seeds import FAMILIES, fixed_budget, random_dataset, timed_train  # noqa: E402

from rlcore.algos.bc import BC  # noqa: E402
from rlcore.algos.dqn import DQN  # noqa: E402
from rlcore.algos.ppo import PPO  # noqa: E402
from rlcore.algos.sac import SAC  # noqa: E402

ALGORITHMS: dict[str, type[Any]] = {"ppo": PPO, "dqn": DQN, "sac": SAC, "bc": BC}
"""Family -> the algorithm whose ``update_members`` is timed."""


class UpdateTimer:
    """CPU seconds spent inside ``algorithm.update_members`` while installed (a context manager)."""

    def __init__(self, algorithm: type[Any]) -> None:
        self.algorithm, self.seconds = algorithm, 0.0
        self._original: Callable[..., Any] = algorithm.__dict__["update_members"].__func__

    def __enter__(self) -> UpdateTimer:
        original = self._original

        @functools.wraps(original)
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.process_time()
            try:
                return original(*args, **kwargs)
            finally:
                self.seconds += time.process_time() - started

        self.algorithm.update_members = staticmethod(timed)
        return self

    def __exit__(self, *_: object) -> None:
        self.algorithm.update_members = staticmethod(self._original)


def timed_run(family: str, seeds: int, base: Path, root: Path) -> tuple[float, float]:
    """CPU seconds of the train stage of ``seeds`` batched seeds on the family's fixed budget, and of its updates."""
    preset, steps = FAMILIES[family]
    with UpdateTimer(ALGORITHMS[family]) as timer:
        _, cpu, _ = timed_train(fixed_budget(preset, steps, list(range(seeds)), True, base), root)
    return cpu, timer.seconds


def family_row(family: str, seeds: int, repeats: int) -> dict[str, Any]:
    preset, steps = FAMILIES[family]
    runs: dict[int, list[tuple[float, float]]] = {1: [], seeds: []}
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        if family == "bc":
            random_dataset(base)
        timed_train(fixed_budget(preset, 10, [0, 1], True, base), base / "warm_up")  # imports, untimed
        for repeat in range(repeats):
            for count in runs:
                runs[count].append(timed_run(family, count, base, base / f"n{count}_{repeat}"))
    (one, one_update), (many, many_update) = (
        tuple(statistics.median(column) for column in zip(*runs[count], strict=True)) for count in (1, seeds)
    )
    one_rest, many_rest = one - one_update, many - many_update
    return {
        "benchmark": "seeds_floor",
        "family": family,
        "preset": preset,
        "gradient_steps" if family == "bc" else "env_steps": steps,
        "seeds": seeds,
        "repeats": repeats,
        "torch_threads": 1,
        "one_seed": {"cpu_seconds": round(one, 2), "update": round(one_update, 2), "rest": round(one_rest, 2)},
        "n_seeds": {"cpu_seconds": round(many, 2), "update": round(many_update, 2), "rest": round(many_rest, 2)},
        "update_share_of_one_seed": round(one_update / one, 3),
        "update_ratio": round(many_update / one_update, 2),
        "rest_ratio": round(many_rest / one_rest, 2),
        "floor": round((many_update + one_rest) / one, 2),
        "ratio": round(many / one, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--families", nargs="+", choices=sorted(ALGORITHMS), default=["ppo", "dqn", "sac", "bc"])
    parser.add_argument("--seeds", type=int, default=8, help="N, the batched run's seeds (compared with one)")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved repeats; medians reported")
    args = parser.parse_args()
    if args.seeds < 2:
        parser.error(f"--seeds: expected at least 2, got {args.seeds}")
    for family in args.families:
        emit(family_row(family, args.seeds, args.repeats))


if __name__ == "__main__":
    main()
