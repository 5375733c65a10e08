"""The collect stage: roll out ``collect.policy`` into the dataset ``collect.output``, in shards merged at the end."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any

import torch

from rlcore.common.checkpoints import load_checkpoint
from rlcore.common.errors import ConfigError, RLCoreError, file_problem
from rlcore.common.files import EXPECTED_TARGET, refuse_same_file, sha256_file
from rlcore.common.numbers import score
from rlcore.common.stage_paths import project_path, selected_model
from rlcore.config.sections import Params
from rlcore.data.collection import CollectionPlan, collect_dataset, env_record, group_members
from rlcore.data.reader import read_metadata
from rlcore.data.writer import check_dataset_target, merge_datasets
from rlcore.params import UNSET_COLLECT_POLICY
from rlcore.registry import policy_from_checkpoint
from rlcore.stages.shared import check_trained_on, step_counts

log = logging.getLogger("rlcore")


def collect_stage(params: Params, root: Path) -> Path:
    """Roll out ``collect.policy`` (a ``.pt`` model or ``random``) and write the dataset ``collect.output``.

    With ``collect.shards`` > 1 the shards are collected one after another, then merged: the same file the
    Prefect flow writes when it runs the shards in parallel on Dask. A multi-agent env (PettingZoo Parallel) writes
    one row per agent step, named by the ``agent`` column (``rlcore.data.schema``), and with ``policy.groups`` its
    agent's group in the ``group`` column.
    """
    shards = [collect_shard(params, root, index) for index in range(params.collect.shards)]
    return shards[0] if len(shards) == 1 else merge_collected_shards(params, root)


def collect_output(params: Params, root: Path) -> Path:
    """``collect.output`` in the project, once checked: absent or an earlier dataset (a regular Parquet file), and not
    ``collect.policy``, the model the collection reads (``rlcore.data.writer.check_dataset_target``)."""
    if not params.collect.output.strip():  # the project folder itself otherwise
        raise ConfigError(f"collect.output: an empty path; {EXPECTED_TARGET}")
    output = project_path(root, params.collect.output, "collect.output")
    policy = policy_path(params, root)
    if policy is not None:
        refuse_same_file(output, "collect.output", policy, "collect.policy, the model the collection rolls out")
    return check_dataset_target(output, "collect.output")


def policy_path(params: Params, root: Path) -> Path | None:
    """The model ``collect.policy`` names in the project (None: ``random``), once checked to be a file; a
    ``collect.policy`` left null without a run to follow (``rlcore.params.collect_policy_default``) is refused."""
    policy = params.collect.policy
    if policy is None:
        raise ConfigError(UNSET_COLLECT_POLICY)
    if policy == "random":
        return None
    path = root / policy
    problem = file_problem(path, "model")
    if problem is not None:
        hint = ""
        if Path(policy) == Path(selected_model(path.parent.name)):
            hint = f" (the selected model of run {path.parent.name}: run its train, evaluate and select stages first)"
        raise ConfigError(f"collect.policy: {policy}: {problem}{hint}")
    return path


def shard_path(params: Params, root: Path, index: int) -> Path:
    """Where shard ``index`` is written: ``collect.output`` itself for one shard, else ``<output>.shards/``."""
    output = collect_output(params, root)
    count = params.collect.shards
    if count == 1:
        return output
    return output.with_name(f"{output.name}.shards") / f"shard-{index:05d}-of-{count:05d}.parquet"


def collect_shard(params: Params, root: Path, index: int) -> Path:
    """Collect shard ``index`` of ``collect.shards`` on its own: its share of the budget, its own seeds.

    Shard ``i`` seeds its envs from ``collect.seed + i * collect.num_envs`` (no two shards share an env seed)
    and gets ``steps // shards`` transitions (or episodes), the first ``steps % shards`` shards one more.
    A shard file already in place from an interrupted collection with the same plan, policy and env is
    kept (shard files appear only once complete), so a re-run redoes only the missing shards.
    """
    torch.set_num_threads(params.torch_threads)
    cfg = params.collect
    path = shard_path(params, root, index)  # a bad collect.output is refused before any work
    policy, provenance = _collect_policy(params, root)
    steps, episodes = (
        None if budget is None else _share(budget, cfg.shards, index) for budget in (cfg.steps, cfg.episodes)
    )
    plan = {"index": index, "count": cfg.shards, "steps": steps, "episodes": episodes}
    expected = {
        "shard": plan,
        "seed": cfg.seed + index * cfg.num_envs,
        "num_envs": cfg.num_envs,
        "env": env_record(params.env),
        "policy": {**provenance, "epsilon": cfg.epsilon, "deterministic": cfg.deterministic},
        "groups": group_members(params.env, params.policy.groups),
    }
    if cfg.shards > 1 and _collected_already(path, expected):
        log.info("shard %d of %d was collected before: %s (kept)", index, cfg.shards, path)
        return path
    rollout = CollectionPlan(
        num_envs=cfg.num_envs,
        steps=steps,
        episodes=episodes,
        epsilon=cfg.epsilon,
        deterministic=cfg.deterministic,
        seed=cfg.seed + index * cfg.num_envs,
        row_group_size=cfg.row_group_size,
    )
    extra_metadata = {"shard": plan} if cfg.shards > 1 else None
    collect_dataset(
        path, params.env, policy, provenance, rollout, extra_metadata=extra_metadata, groups=params.policy.groups
    )
    return path


def _collected_already(path: Path, expected: dict[str, Any]) -> bool:
    if not path.is_file():
        return False
    try:
        metadata = read_metadata(path)
    except RLCoreError:  # unreadable: collect it again
        return False
    return all(
        json.loads(json.dumps(metadata.get(key))) == json.loads(json.dumps(value)) for key, value in expected.items()
    )


def merge_collected_shards(params: Params, root: Path) -> Path:
    """Merge the shards of ``collect.shards`` into ``collect.output`` (in shard order), then delete them."""
    cfg = params.collect
    paths = [shard_path(params, root, index) for index in range(cfg.shards)]
    missing = [str(path) for path in paths if not path.is_file()]
    if missing:
        raise RLCoreError(f"{missing[0]}: shard not collected ({len(missing)} of {cfg.shards} missing)")
    shards = [read_metadata(path) for path in paths]
    metadata = {k: v for k, v in shards[0].items() if k not in ("episodes", "transitions", "seed", "shard")}
    metadata["seed"] = cfg.seed
    metadata["shards"] = [
        {"seed": shard["seed"], "episodes": shard["episodes"], "transitions": shard["transitions"]} for shard in shards
    ]
    output = collect_output(params, root)
    merged = merge_datasets(paths, output, metadata, cfg.row_group_size)
    shutil.rmtree(paths[0].parent)
    log.info(
        "merged %d shards: %d transitions in %d episodes (mean return %s) -> %s",
        cfg.shards,
        merged["transitions"],
        merged["episodes"],
        score(merged["episode_return"]["mean"]),
        output,
    )
    return output


def _share(total: int, parts: int, index: int) -> int:
    return total // parts + (index < total % parts)


def _collect_policy(params: Params, root: Path) -> tuple[Any, dict[str, Any]]:
    """The policy to roll out (None: uniformly random) and its provenance for the dataset's metadata."""
    source = policy_path(params, root)
    if source is None:
        return None, {"kind": "random"}
    checkpoint = load_checkpoint(source)
    check_trained_on(checkpoint, params.env.id)
    return policy_from_checkpoint(checkpoint), {
        "kind": "checkpoint",
        "path": params.collect.policy,
        "sha256": sha256_file(source),
        "algo": checkpoint.algo,
        **step_counts(checkpoint),
        "evaluation": checkpoint.meta.get("evaluation", {}).get("mean_return"),
    }
