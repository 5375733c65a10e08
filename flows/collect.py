"""The collect stage as a Prefect flow: one task run that writes the dataset, plus artifacts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from rlcore.config import load_params
from rlcore.datasets import read_metadata
from rlcore.io import sha256_file
from rlcore.stages import collect_stage


@task(name="collect")
def collect_task(params_path: str, overrides: list[str], root: str) -> dict[str, str]:
    path = collect_stage(load_params(params_path, overrides), Path(root))
    return {"dataset": str(path), "sha256": sha256_file(path)}


@flow(name="collect", log_prints=True)
def collect_flow(
    params_path: str = "params.yaml", overrides: list[str] | None = None, root: str = "."
) -> dict[str, Any]:
    """Roll out ``collect.policy`` into the dataset ``collect.output`` of the project in ``root``."""
    overrides = list(overrides or [])
    root = str(Path(root).resolve())
    params = load_params(params_path, overrides)
    collect = collect_task.with_options(
        retries=params.deploy.retries, retry_delay_seconds=params.deploy.retry_delay_seconds
    )
    collected = collect(params_path, overrides, root)
    publish_collect_artifacts(Path(collected["dataset"]), params.name)
    get_run_logger().info("dataset: %s", collected["dataset"])
    return collected


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
            f"Episode return **{returns.get('mean', float('nan')):.1f}** ± {returns.get('std', float('nan')):.1f}.\n\n"
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
