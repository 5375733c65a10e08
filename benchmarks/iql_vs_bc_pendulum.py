"""TD3+BC and IQL vs BC on the offline learning test's medium Pendulum dataset: test scores over seeds, with intervals.

The dataset is the one ``tests/test_offline_learning.py`` builds: SAC (``configs/sac-pendulum.yaml``, seed 0) stopped
at 3125 env steps, its last checkpoint whose periodic evaluation lies in [-900, -400] as the behaviour policy, 50k
transitions collected from it (collect seed 2000000). Each variant then trains ``--steps`` gradient steps per seed,
the evaluate stage scores every checkpoint on ``--val-episodes`` validation episodes, select-best picks one and scores
it on ``--test-episodes`` test episodes. Prints one JSON line: per variant and seed the test mean, its 95% bootstrap
interval and the training wall seconds, per variant the mean over seeds with a t-interval over the seeds, and each
variant's margin over BC (``margin_over_bc``: the test's comparison asked TD3+BC and IQL for >= 100).

The defaults are the comparison the test made until 2026-11-29 at its full budget (BC, TD3+BC and IQL, 6000 gradient
steps, a checkpoint every 1000, 10 validation and 100 test episodes, seed 0); the IQL study of 2026-11-26 was

    python benchmarks/iql_vs_bc_pendulum.py --work /tmp/iqlbc --variants bc iql --seeds 0 1 2 --eval-every 500 \
        --val-episodes 50
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from common import ROOT, over_seeds, stdout_to_stderr

from rlcore.config.inheritance import BASE_KEY, read_params_tree
from rlcore.config.reading import parse_yaml

# The offline learning test's settings for each algorithm (tests/test_offline_learning.py), and variants of IQL.
NETS = {"normalize_obs": True, "hidden_sizes": [128, 128], "activation": "relu"}
VARIANTS: dict[str, dict[str, Any]] = {
    "bc": {"algo": {"name": "bc", "lr": 1e-3, "batch_size": 256, "loss": "mse"}},
    "bc-nll": {"algo": {"name": "bc", "lr": 1e-3, "batch_size": 256, "loss": "nll"}},
    "bc-nets": {"policy": NETS, "algo": {"name": "bc", "lr": 1e-3, "batch_size": 256, "loss": "mse"}},
    "td3bc": {"policy": NETS, "algo": {"name": "td3bc", "alpha": 10.0}},
    # Before the fix: constant actor learning rate, raw rewards.
    "iql-old": {"policy": NETS, "algo": {"name": "iql", "beta": 3.0, "lr": 1e-3, "actor_lr_schedule": "constant"}},
    "iql-cos": {"policy": NETS, "algo": {"name": "iql", "beta": 3.0, "lr": 1e-3}},
    "iql-cos-3e-4": {"policy": NETS, "algo": {"name": "iql", "beta": 3.0, "lr": 3e-4}},
    # The paper's: cosine actor schedule and rewards scaled by T / (max return - min return) of the dataset.
    "iql": {"policy": NETS, "algo": {"name": "iql", "beta": 3.0, "lr": 1e-3, "reward_scale": "returns"}},
    "iql-rs-constant": {
        "policy": NETS,
        "algo": {"name": "iql", "beta": 3.0, "lr": 1e-3, "reward_scale": "returns", "actor_lr_schedule": "constant"},
    },
}


def variant_from_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """``name`` from VARIANTS, or ``name:base:key=value,key=value`` (algo keys over a base variant's)."""
    if ":" not in spec:
        return spec, VARIANTS[spec]
    name, base, changes = spec.split(":", 2)
    tree = json.loads(json.dumps(VARIANTS[base]))
    for change in filter(None, changes.split(",")):
        key, value = change.split("=", 1)
        tree["algo"][key] = parse_yaml(value, f"{spec}: {key}")
    return name, tree


def offline_params(work: Path, changes: dict[str, Any]) -> Any:
    from rlcore.params import validate_params

    tree = read_params_tree(ROOT / "offline.yaml")  # with params.yaml's keys, which it inherits (base)
    tree.pop(BASE_KEY)
    for key, value in changes.items():
        tree[key] = {**tree[key], **value} if isinstance(value, dict) and key != "algo" else value
    tree["train"]["progress_bar"] = "off"
    return validate_params(tree)


def medium_dataset(work: Path) -> Path:
    """The test's dataset (made once per work directory)."""
    from rlcore.common.checkpoints import list_checkpoints, load_checkpoint
    from rlcore.params import load_params
    from rlcore.stages import collect_stage, train_stage

    dataset = work / "data" / "medium.parquet"
    if dataset.exists():
        return dataset
    sac = load_params(
        ROOT / "configs" / "sac-pendulum.yaml",
        [
            "seed=0",
            "train.max_steps=3125",
            "train.eval_every=3125",  # the checkpoint at 3125 only: bitwise the weights of a run evaluated every 125
            "train.target_return=null",
            "train.progress_bar=off",
        ],
    )
    train_stage(sac, work)
    medium = [
        path
        for _, path in list_checkpoints(work / "runs" / sac.name / "checkpoints")
        if -900 <= load_checkpoint(path).meta["evaluation"]["mean_return"] <= -400
    ]
    behaviour = medium[-1].relative_to(work).as_posix()
    params = offline_params(
        work,
        {
            "env": {"id": "Pendulum-v1", "num_envs": 1},
            "collect": {"policy": behaviour, "steps": 50_000, "num_envs": 8, "output": "data/medium.parquet"},
        },
    )
    return collect_stage(params, work)


def main() -> None:
    import gymnasium as gym

    from rlcore.algos.iql import returns_reward_scale
    from rlcore.common.files import read_json
    from rlcore.data.reader import load_dataset, read_metadata
    from rlcore.stages import evaluate_stage, select_stage, train_stage

    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, required=True, help="working directory (the dataset is cached there)")
    parser.add_argument("--variants", nargs="+", default=["bc", "td3bc", "iql"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--steps", type=int, default=6000, help="gradient steps per run")
    parser.add_argument("--eval-every", type=int, default=1000)
    parser.add_argument("--val-episodes", type=int, default=10)
    parser.add_argument("--test-episodes", type=int, default=100)
    args = parser.parse_args()

    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    with stdout_to_stderr():
        dataset = medium_dataset(work)
    behaviour = read_metadata(dataset)["episode_return"]
    result: dict[str, Any] = {
        "benchmark": "iql_vs_bc_pendulum",
        "behaviour_episode_return": behaviour,
        "gradient_steps": args.steps,
        "eval_every": args.eval_every,
        "validation_episodes": args.val_episodes,
        "test_episodes": args.test_episodes,
        "variants": {},
    }
    with stdout_to_stderr():
        env = gym.make("Pendulum-v1")
        scale = returns_reward_scale(load_dataset(dataset, env.observation_space, env.action_space, "Pendulum-v1"))
    result["returns_reward_scale"] = scale
    for spec in args.variants:
        name, changes = variant_from_spec(spec)
        if changes["algo"].get("reward_scale") == "returns":
            changes = {**changes, "algo": {**changes["algo"], "reward_scale": scale}}
        runs = []
        for seed in args.seeds:
            root = work / "runs-bench" / name / str(seed)
            params = offline_params(
                work,
                {
                    **changes,
                    "seed": seed,
                    "name": f"{name}-{seed}",
                    "env": {"id": "Pendulum-v1", "num_envs": 1},
                    "dataset": {"path": str(dataset)},
                    "train": {
                        "max_steps": args.steps,
                        "eval_every": args.eval_every,
                        "log_every": args.eval_every,
                        "eval_episodes": 10,
                        "target_return": None,
                        "max_wall_seconds": None,
                    },
                    "eval": {"episodes": args.val_episodes, "test_episodes": args.test_episodes},
                },
            )
            start = time.perf_counter()
            with stdout_to_stderr():
                train_stage(params, root)
                train_seconds = time.perf_counter() - start
                evaluate_stage(params, root)
                select_stage(params, root)
            metrics = read_json(root / "reports" / params.name / "metrics.json")
            selection = read_json(root / "models" / params.name / "selection.json")
            runs.append(
                {
                    "seed": seed,
                    "test_mean": round(metrics["mean_return"], 1),
                    "test_ci95": [round(metrics["ci95_low"], 1), round(metrics["ci95_high"], 1)],
                    "selected_step": selection.get("step"),
                    "train_wall_seconds": round(train_seconds, 1),
                    "total_wall_seconds": round(time.perf_counter() - start, 1),
                }
            )
            print(json.dumps({name: runs[-1]}), file=sys.stderr, flush=True)
        means = [run["test_mean"] for run in runs]
        result["variants"][name] = {
            "changes": changes,
            "runs": runs,
            **over_seeds(means),
        }
    if "bc" in result["variants"]:
        bc_mean = result["variants"]["bc"]["mean_over_seeds"]
        for variant in result["variants"].values():
            variant["margin_over_bc"] = round(variant["mean_over_seeds"] - bc_mean, 1)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
