"""The collect stage as a Prefect flow: one task run that writes the dataset, plus artifacts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from flows.task_runners import dask_task_runner, retry_options
from rlcore.common.files import sha256_file
from rlcore.common.numbers import score
from rlcore.data.reader import read_metadata
from rlcore.params import load_params
from rlcore.stages import collect_shard, collect_stage, merge_collected_shards


@task(name="collect")
def collect_task(params_path: str, overrides: list[str], root: str) -> dict[str, str]:
    path = collect_stage(load_params(params_path, overrides), Path(root))
    return {"dataset": str(path), "sha256": sha256_file(path)}


@task(name="collect-shard", task_run_name="collect-shard-{index}")
def collect_shard_task(params_path: str, overrides: list[str], root: str, index: int) -> dict[str, str]:
    path = collect_shard(load_params(params_path, overrides), Path(root), index)
    return {"shard": str(path), "sha256": sha256_file(path)}


@task(name="merge-shards")
def merge_shards_task(
    params_path: str, overrides: list[str], root: str, shards: list[dict[str, str]]
) -> dict[str, str]:
    path = merge_collected_shards(load_params(params_path, overrides), Path(root))
    return {"dataset": str(path), "sha256": sha256_file(path)}


@flow(name="collect", log_prints=True)
def collect_flow(
    params_path: str = "params.yaml", overrides: list[str] | None = None, root: str = "."
) -> dict[str, Any]:
    """Roll out ``collect.policy`` into the dataset ``collect.output`` of the project in ``root``.

    One task run, or with ``collect.shards`` > 1 a task run per shard and one that merges them; the shards
    run one after another, or at once on Dask workers with ``deploy.task_runner: dask``.
    """
    overrides = list(overrides or [])
    root = str(Path(root).resolve())
    params = load_params(params_path, overrides)
    retry = retry_options(params.deploy)
    if params.collect.shards == 1:
        collected = collect_task.with_options(**retry)(params_path, overrides, root)
    elif params.deploy.task_runner == "dask":
        on_dask = collect_shards.with_options(task_runner=dask_task_runner(params.deploy))
        collected = on_dask(params_path, overrides, root)
    else:
        shards = [
            collect_shard_task.with_options(**retry)(params_path, overrides, root, index)
            for index in range(params.collect.shards)
        ]
        collected = merge_shards_task.with_options(**retry)(params_path, overrides, root, shards)
    publish_collect_artifacts(Path(collected["dataset"]), params.name)
    get_run_logger().info("dataset: %s", collected["dataset"])
    return collected


@flow(name="collect_shards")
def collect_shards(
    params_path: str = "params.yaml", overrides: list[str] | None = None, root: str = "."
) -> dict[str, str]:
    """Every shard of ``collect.shards`` as a task run at once on this flow's task runner, then the merge."""
    overrides = list(overrides or [])
    params = load_params(params_path, overrides)
    retry = retry_options(params.deploy)
    count = params.collect.shards
    futures = [
        collect_shard_task.with_options(**retry).submit(params_path, overrides, root, index) for index in range(count)
    ]
    shards = [future.result() for future in futures]
    # The merge reads every shard file: it runs here, where the shards' shared folder is known to be visible.
    return merge_shards_task.with_options(**retry)(params_path, overrides, root, shards)


def publish_collect_artifacts(dataset: Path, name: str) -> None:
    """A markdown summary of the dataset and a table of its episode returns, visible in the Prefect UI."""
    meta = read_metadata(dataset)
    policy = meta.get("policy", {})
    source = policy.get("path", policy.get("kind", "?"))
    returns = meta.get("episode_return", {})
    key = name.lower().replace("_", "-").replace(".", "-")
    create_markdown_artifact(
        key=f"collect-summary-{key}",
        markdown=(
            f"# Dataset `{dataset.name}` from {meta.get('env', {}).get('id', '?')}\n\n"
            f"{meta.get('transitions')} transitions in {meta.get('episodes')} episodes, policy `{source}` "
            f"(epsilon {policy.get('epsilon')}, deterministic {policy.get('deterministic')}).\n\n"
            f"Episode return **{score(returns.get('mean', float('nan')))}** "
            f"± {score(returns.get('std', float('nan')))}.\n\n"
            f"Written to `{dataset}`."
        ),
        description="What was collected, by which policy",
    )
    create_table_artifact(
        key=f"collected-episodes-{key}",
        table=[
            {
                "dataset": dataset.name,
                "transitions": meta.get("transitions"),
                "episodes": meta.get("episodes"),
                **{f"{k}_return": v for k, v in returns.items()},
            }
        ],
        description="Episode returns of the collected dataset",
    )
