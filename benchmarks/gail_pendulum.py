"""GAIL on Pendulum-v1, where every episode lasts 200 steps, so GAIL's positive reward carries no survival bonus.

Demonstrations: ``--demo-episodes`` deterministic episodes of an expert (a selected model, e.g. the SAC preset's
``models/<name>/policy.pt``) and as many of a uniformly random policy, collected once into ``--work``. Then PPO
(``--params``, Pendulum settings) with ``extrinsic.strength: 0`` learns from:

- ``gail``: GAIL against the expert's demonstrations;
- ``gail-frozen``: the same GAIL with its discriminator frozen at initialization (``lr`` 1e-12): a reward of
  log 2 up to the initial discriminator's 1% output gain, through the same path (the constant-reward control);
- ``gail-random``: GAIL against the random policy's demonstrations;
- ``ppo``: the env's reward (strength 1), no signal: what PPO itself reaches with these settings.

Each run trains ``train.max_steps`` env steps, the evaluate stage scores every checkpoint on ``--val-episodes``
episodes and select-best scores the chosen one on ``--test-episodes`` test episodes (the true Pendulum return).
Prints one JSON line: per variant and seed the test mean with its 95% bootstrap interval, wall seconds, and GAIL's
learning-curve rows (discriminator loss, D's mean estimate on expert and policy pairs, the mean GAIL reward).

    python benchmarks/gail_pendulum.py --expert models/<name>/policy.pt --work /tmp/gail   # params: gail_pendulum.yaml
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from pathlib import Path
from typing import Any

from common import over_seeds, stdout_to_stderr

VARIANTS: dict[str, list[str]] = {
    "ppo": [],
    "gail": ["algo.reward_signals.extrinsic.strength=0"],
    "gail-frozen": ["algo.reward_signals.extrinsic.strength=0", "algo.reward_signals.gail.lr=1e-12"],
    "gail-random": ["algo.reward_signals.extrinsic.strength=0", "algo.reward_signals.gail.dataset=DEMO_RANDOM"],
}


def demonstrations(params_file: Path, work: Path, policy: str, episodes: int, name: str) -> Path:
    from rlcore.params import load_params
    from rlcore.stages import collect_stage

    output = work / "data" / f"{name}.parquet"
    if output.exists():
        return output
    params = load_params(
        params_file,
        [
            f"collect.policy={policy}",
            "collect.steps=null",
            f"collect.episodes={episodes}",
            "collect.deterministic=true",
            "collect.num_envs=4",
            f"collect.output={output}",
        ],
    )
    return collect_stage(params, work)


def gail_rows(run: Path) -> dict[str, list[list[float]]]:
    """GAIL's learning-curve series: name -> [[env steps, value], ...]."""
    rows: dict[str, list[list[float]]] = {}
    for tsv in sorted((run / "dvclive" / "plots" / "metrics" / "train" / "gail").glob("*.tsv")):
        with open(tsv) as handle:
            rows[tsv.stem] = [
                [int(row["step"]), round(float(row[tsv.stem]), 4)] for row in csv.DictReader(handle, delimiter="\t")
            ]
    return rows


def main() -> None:
    from rlcore.common.files import read_json
    from rlcore.data.reader import read_metadata
    from rlcore.params import load_params
    from rlcore.stages import evaluate_stage, select_stage, train_stage

    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument(
        "--params", type=Path, default=Path(__file__).with_name("gail_pendulum.yaml"), help="PPO + GAIL params"
    )
    parser.add_argument("--expert", required=True, help="the expert's model (.pt)")
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--variants", nargs="+", default=["gail", "gail-frozen", "gail-random"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--demo-episodes", type=int, default=20)
    parser.add_argument("--val-episodes", type=int, default=10)
    parser.add_argument("--test-episodes", type=int, default=50)
    parser.add_argument("--set", action="append", default=[], help="extra params override for every run")
    parser.add_argument("--label", default="", help="suffix of the run directories and variant names (a settings tag)")
    args = parser.parse_args()

    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    with stdout_to_stderr():
        expert = demonstrations(args.params, work, str(Path(args.expert).resolve()), args.demo_episodes, "expert")
        random = demonstrations(args.params, work, "random", args.demo_episodes, "random")
    result: dict[str, Any] = {
        "benchmark": "gail_pendulum",
        "params": str(args.params),
        "extra": args.set,
        "demonstrations": {
            "episodes": args.demo_episodes,
            "expert_return": read_metadata(expert)["episode_return"],
            "random_return": read_metadata(random)["episode_return"],
        },
        "validation_episodes": args.val_episodes,
        "test_episodes": args.test_episodes,
        "variants": {},
    }
    for variant in args.variants:
        overrides = [item.replace("DEMO_RANDOM", str(random)) for item in VARIANTS[variant]]
        name = f"{variant}{args.label}"
        runs = []
        for seed in args.seeds:
            root = work / "runs-bench" / name / str(seed)
            changes = [
                f"seed={seed}",
                f"name={name}-{seed}",
                f"algo.reward_signals.gail.dataset={expert}",
                "train.target_return=null",
                "train.max_wall_seconds=null",
                "train.progress_bar=off",
                f"eval.episodes={args.val_episodes}",
                f"eval.test_episodes={args.test_episodes}",
                *args.set,
                *overrides,  # last: the frozen control stays frozen whatever --set gives the discriminator's lr
            ]
            if variant == "ppo":
                changes = [c for c in changes if not c.startswith("algo.reward_signals")] + ["algo.reward_signals=null"]
            params = load_params(args.params, changes)
            start = time.perf_counter()
            with stdout_to_stderr():
                train_stage(params, root)
                train_seconds = time.perf_counter() - start
                evaluate_stage(params, root)
                select_stage(params, root)
            metrics = read_json(root / "reports" / params.name / "metrics.json")
            run = {
                "seed": seed,
                "test_mean": round(metrics["mean_return"], 1),
                "test_ci95": [round(metrics["ci95_low"], 1), round(metrics["ci95_high"], 1)],
                "train_wall_seconds": round(train_seconds, 1),
                "total_wall_seconds": round(time.perf_counter() - start, 1),
                "gail": gail_rows(root / "runs" / params.name),
            }
            runs.append(run)
            print(json.dumps({name: {k: v for k, v in run.items() if k != "gail"}}), file=sys.stderr, flush=True)
        means = [run["test_mean"] for run in runs]
        result["variants"][name] = {
            "overrides": overrides,
            "runs": runs,
            **over_seeds(means),
        }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
