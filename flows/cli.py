"""The ``rlcore`` console command: the stage subcommands of ``rlcore.cli`` plus the Prefect-backed ones.

Prefect is imported only when a Prefect subcommand runs, so ``rlcore train`` (what dvc.yaml calls)
starts in a second, not after Prefect's server start-up.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlcore.cli import add_params_arguments, build_parser, load, run


def _pipeline(args: argparse.Namespace) -> Any:
    load(args)  # refuse bad params before Prefect starts
    from flows.pipeline import training_pipeline

    return training_pipeline(params_path=args.params, overrides=args.overrides, root=str(Path.cwd()))


def _add_flow_commands(commands: Any) -> None:
    help_text = "run train -> evaluate -> select-best -> export as one Prefect flow run"
    pipeline = commands.add_parser("pipeline", help=help_text, description=help_text)
    add_params_arguments(pipeline)
    pipeline.set_defaults(run=_pipeline, own_logging=False)


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser(_add_flow_commands), argv)


if __name__ == "__main__":
    raise SystemExit(main())
