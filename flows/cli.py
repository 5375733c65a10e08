"""The ``rlcore`` console command: the stage subcommands of ``rlcore.cli`` plus the Prefect-backed ones.

Prefect is imported only when a Prefect subcommand runs, so ``rlcore train`` (what dvc.yaml calls)
starts in a second, not after Prefect's server start-up.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlcore.cli import add_command, add_params_arguments, build_parser, load, run
from rlcore.common.errors import RLCoreError


def _checked(args: argparse.Namespace) -> Any:
    """The params, refused before any flow starts if they ask for Dask without a Prefect server; then the
    temporary Prefect server (no PREFECT_API_URL) is started, dying with this process (``flows/server.py``)."""
    params = load(args)
    if params.deploy.task_runner == "dask" and not _api_url():
        raise RLCoreError(
            "deploy.task_runner: dask needs a running Prefect server: set PREFECT_API_URL "
            "(e.g. http://127.0.0.1:4200/api after `prefect server start`); without one every Dask worker "
            "would start a temporary server of its own"
        )
    from flows.server import start_embedded_server

    start_embedded_server()
    return params


def _api_url() -> str | None:
    from prefect.settings import PREFECT_API_URL

    return PREFECT_API_URL.value()


def _pipeline(args: argparse.Namespace) -> Any:
    _checked(args)  # refuse bad params before Prefect starts
    from flows.pipeline import training_pipeline

    return training_pipeline(params_path=args.params, overrides=args.overrides, root=str(Path.cwd()))


def _collect_flow(args: argparse.Namespace) -> Any:
    _checked(args)
    from flows.collect import collect_flow

    return collect_flow(params_path=args.params, overrides=args.overrides, root=str(Path.cwd()))


def _warmstart_flow(args: argparse.Namespace) -> Any:
    _checked(args)
    from flows.warmstart import warm_start_pipeline

    return warm_start_pipeline(
        params_path=args.params,
        overrides=args.overrides,
        root=str(Path.cwd()),
        base_params=args.base_params,
        offline_params=args.offline_params,
    )


class _NoFlow(argparse.Action):
    """``--no-flow``: no Prefect, so the sweep prints its own log lines."""

    def __call__(self, parser: Any, namespace: argparse.Namespace, values: Any, option: str | None = None) -> None:
        namespace.no_flow = namespace.own_logging = True


def _sweep(args: argparse.Namespace) -> Any:
    root = Path.cwd()
    if args.apply:
        from flows.sweep.apply import apply_fragment
        from rlcore.common.stage_paths import sweep_reports

        params_file = Path(args.params)
        values = apply_fragment(params_file, sweep_reports(root) / "best_params.yaml")
        print(f"{params_file}: applied the sweep's best params: {', '.join(f'{k}={v}' for k, v in values.items())}")
        return values
    from flows.sweep.plan import plan_sweep

    plan = plan_sweep(args.params, args.overrides, root)  # refuse a bad space before Prefect or any trial starts
    if args.no_flow:
        from flows.sweep.driver import run_sweep

        return run_sweep(plan)
    from flows.sweep.flow import sweep_flow

    _checked(args)

    # Prefect attaches its handlers to the `rlcore` logger (prefect.toml) but leaves its level at WARNING.
    logging.getLogger("rlcore.sweep").setLevel(logging.WARNING if args.quiet else logging.INFO)
    return sweep_flow(params_path=args.params, overrides=args.overrides, root=str(root))


def _add_flow_commands(commands: Any) -> None:
    help_text = (
        "run train -> evaluate -> select-best -> export as one Prefect flow run (an offline run collects its dataset "
        "first when it is missing or stale)"
    )
    pipeline = add_command(commands, "pipeline", help_text, "docs/running.md")
    add_params_arguments(pipeline)
    pipeline.set_defaults(run=_pipeline, own_logging=False)

    help_text = (
        "run the collect stage as a Prefect flow run (a task run per collect.shards shard; Dask: deploy.task_runner)"
    )
    collect = add_command(commands, "collect-flow", help_text, "docs/data.md")
    add_params_arguments(collect)
    collect.set_defaults(run=_collect_flow, own_logging=False)

    help_text = (
        "run the warm-start DAG as a Prefect flow run: params.yaml's pipeline, collect + the offline branch (BC), then "
        "the pipeline of --params (PPO with train.init_from the BC model)"
    )
    warmstart = add_command(commands, "warmstart-flow", help_text, "docs/reward-signals.md")
    add_params_arguments(warmstart, default="configs/ppo-from-bc-cartpole.yaml")
    warmstart.add_argument("--base-params", default="params.yaml", metavar="FILE", help="the from-scratch pipeline")
    warmstart.add_argument("--offline-params", default="offline.yaml", metavar="FILE", help="the offline branch")
    warmstart.set_defaults(run=_warmstart_flow, own_logging=False)

    help_text = "run the hyperparameter study of params.yaml's `sweep` section (Optuna) as a Prefect flow run"
    sweep = add_command(commands, "sweep", help_text, "docs/sweeps.md")
    add_params_arguments(sweep)
    sweep.add_argument(
        "--no-flow",
        dest="no_flow",
        action=_NoFlow,
        nargs=0,
        help="run the same study without Prefect (no server start-up; trials, storage and reports are the same)",
    )
    sweep.add_argument(
        "--apply",
        action="store_true",
        help="merge reports/sweep/best_params.yaml into the params file (runs no trial)",
    )
    sweep.set_defaults(run=_sweep, own_logging=False, no_flow=False)

    help_text = "serve the Prefect deployments of params.yaml's `deploy` section (schedules) from this process"
    deploy = add_command(commands, "deploy", help_text, "docs/running.md")
    deploy.add_argument("action", choices=["serve"], help="serve: register the deployments and run their flow runs")
    add_params_arguments(deploy)
    deploy.set_defaults(run=_deploy, own_logging=False)


def _deploy(args: argparse.Namespace) -> Any:
    load(args)  # refuse bad params before Prefect starts
    if not _api_url():
        raise RLCoreError(
            "deploy serve needs a running Prefect server to hold the deployments and schedules: set PREFECT_API_URL "
            "(e.g. http://127.0.0.1:4200/api after `prefect server start`)"
        )
    from flows.deploy import serve_deployments

    return serve_deployments(args.params, args.overrides, str(Path.cwd()))


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser(_add_flow_commands), argv)


if __name__ == "__main__":
    raise SystemExit(main())
