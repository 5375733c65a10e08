"""The command line of the stages: ``rlcore train|evaluate|select|export|collect`` as dvc.yaml calls them,
``rlcore import-minari`` and ``rlcore params-schema``; the console command (``flows.cli``) adds the Prefect and sweep
subcommands.

Every stage subcommand takes ``--params FILE`` (default ``params.yaml``) and repeated ``--set KEY=VALUE``. Each
subcommand's help says in one line what it does and names its docs page.
Errors meant for users print one line, ``error: ...``, and exit with status 2.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rlcore.common.errors import RLCoreError

StageRunner = Callable[[argparse.Namespace], Any]

DOCS = "docs/index.md"
"""The documentation's home page, in the project (``make docs`` builds the site from docs/)."""


def add_command(commands: Any, name: str, help_text: str, page: str) -> argparse.ArgumentParser:
    """A subcommand whose help says in one line what it does, and which docs page tells more."""
    return commands.add_parser(
        name,
        help=help_text,
        description=f"{help_text}.",
        epilog=f"Docs: {page}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def add_params_arguments(parser: argparse.ArgumentParser, default: str = "params.yaml") -> None:
    parser.add_argument(
        "-q", "--quiet", action="store_true", default=argparse.SUPPRESS, help="only warnings and errors"
    )
    parser.add_argument("--params", default=default, metavar="FILE", help=f"params file (default: {default})")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a params key, e.g. --set algo.lr=0.001 (repeatable)",
    )


def load(args: argparse.Namespace) -> Any:
    from rlcore.params import load_params

    args.loaded_params = load_params(args.params, args.overrides)  # names the run folder an error log goes to
    return args.loaded_params


def _train(args: argparse.Namespace) -> Any:
    from rlcore.stages import train_stage

    return train_stage(load(args), Path.cwd(), resume_from=args.resume_from, replace=args.replace)


def _evaluate(args: argparse.Namespace) -> Any:
    from rlcore.stages import evaluate_stage

    return evaluate_stage(load(args), Path.cwd())


def _select(args: argparse.Namespace) -> Any:
    from rlcore.stages import select_stage

    return select_stage(load(args), Path.cwd())


def _collect(args: argparse.Namespace) -> Any:
    from rlcore.stages import collect_stage

    return collect_stage(load(args), Path.cwd())


def _export(args: argparse.Namespace) -> Any:
    from rlcore.stages import export_stage

    return export_stage(load(args), Path.cwd())


def build_parser(extend: Callable[[Any], None] | None = None) -> argparse.ArgumentParser:
    """The stage subcommands; ``extend(subparsers)`` may add more (``flows.cli`` adds ``pipeline``)."""
    parser = argparse.ArgumentParser(
        prog="rlcore",
        description="Declarative, reproducible reinforcement learning: the stages of a run (train, evaluate, select, "
        "export, collect), one subcommand each, as dvc.yaml calls them; Prefect flows, sweeps and deployments.",
        epilog=f"Docs: {DOCS} (`make docs` builds the site); every params key: docs/params.md",
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="only warnings and errors")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    stages: list[tuple[str, str, str, StageRunner]] = [
        ("train", "train into runs/<name>/ (resumes an interrupted run)", "docs/running.md, docs/faults.md", _train),
        (
            "evaluate",
            "evaluate every checkpoint of the run -> reports/<name>/evaluations.json",
            "docs/evaluation.md",
            _evaluate,
        ),
        (
            "select",
            "select the best checkpoint -> models/<name>/, reports/<name>/metrics.json, reports/<name>/report.md",
            "docs/evaluation.md",
            _select,
        ),
        (
            "export",
            "export models/<name>/ -> export/<name>/policy.onnx, policy.pt2, model_card.json",
            "docs/export.md",
            _export,
        ),
        ("collect", "roll out collect.policy -> a Parquet dataset at collect.output", "docs/data.md", _collect),
    ]
    for name, help_text, page, runner in stages:
        sub = add_command(commands, name, help_text, page)
        add_params_arguments(sub)
        sub.set_defaults(run=runner)
        if name == "train":
            sub.add_argument(
                "--resume-from",
                type=Path,
                default=None,
                metavar="CHECKPOINT",
                help="resume from this checkpoint instead of the run's latest",
            )
            sub.add_argument(
                "--replace",
                action="store_true",
                help="replace a finished run of the same name trained with other params (by default refused: give "
                "the new run another name to keep both); dvc.yaml's train stages pass it, DVC's cache keeps the old",
            )
    help_text = "convert a Minari dataset (a local dataset id, or its folder) to rlcore's Parquet schema"
    minari = add_command(commands, "import-minari", help_text, "docs/data.md")
    minari.add_argument(
        "source", help="a Minari dataset id in MINARI_DATASETS_PATH (e.g. mujoco/hopper/medium-v0), or its folder"
    )
    minari.add_argument("--output", type=Path, default=Path("data/dataset.parquet"), help="the Parquet file to write")
    minari.add_argument("--row-group-size", type=int, default=65_536, help="transitions per Parquet row group")
    minari.set_defaults(run=_import_minari)
    help_text = "create a working project in DIR: params.yaml, dvc.yaml, .gitignore, git init and dvc init"
    init = add_command(commands, "init", help_text, "docs/getting-started.md")
    init.add_argument("folder", nargs="?", type=Path, default=Path("."), metavar="DIR", help="default: here")
    init.add_argument("--force", action="store_true", help="overwrite a params.yaml and dvc.yaml already there")
    init.set_defaults(run=_init)
    help_text = "write dvc.yaml from the project's params files (after adding or removing params keys)"
    pipeline = add_command(commands, "dvc-yaml", help_text, "docs/getting-started.md")
    pipeline.add_argument("--check", action="store_true", help="write nothing; exit 2 when dvc.yaml differs")
    pipeline.set_defaults(run=_dvc_yaml)
    help_text = "write the JSON Schema of params files, for editors that complete and check them"
    schema = add_command(commands, "params-schema", help_text, "docs/schema.md")
    schema.add_argument("--output", type=Path, default=None, metavar="FILE", help="write here (default: stdout)")
    schema.set_defaults(run=_params_schema)
    if extend is not None:
        extend(commands)
    return parser


def _init(args: argparse.Namespace) -> Any:
    from rlcore.project.init import init_project

    done = init_project(args.folder, force=args.force)
    print(f"initialized an rlcore project in {args.folder}: {', '.join(done)}", file=sys.stderr)
    print("next: git add -A && git commit -m 'rlcore project' && dvc repro", file=sys.stderr)
    return done


def _dvc_yaml(args: argparse.Namespace) -> Any:
    from rlcore.common.files import write_text
    from rlcore.project.pipeline_file import pipeline_yaml

    text = pipeline_yaml(Path.cwd())
    target = Path("dvc.yaml")
    if args.check:
        if not target.is_file() or target.read_text() != text:
            raise RLCoreError("dvc.yaml: not what the params files give; run `rlcore dvc-yaml` to rewrite it")
        return text
    write_text(target, text)
    return text


def _import_minari(args: argparse.Namespace) -> Any:
    from rlcore.data.minari import import_minari

    if args.row_group_size < 1:
        raise RLCoreError(f"--row-group-size: a positive number of transitions expected, got {args.row_group_size}")
    return import_minari(args.source, args.output, args.row_group_size)


def _params_schema(args: argparse.Namespace) -> Any:
    import json

    from rlcore.common.files import write_text
    from rlcore.params import params_schema

    text = json.dumps(params_schema(), indent=2, ensure_ascii=False) + "\n"
    if args.output is None:
        sys.stdout.write(text)
    else:
        write_text(args.output, text)
    return text


def run(parser: argparse.ArgumentParser, argv: Sequence[str] | None = None) -> int:
    """Parse, run the chosen subcommand, and turn user errors into one line and exit status 2."""
    args = parser.parse_args(argv)
    logger = logging.getLogger("rlcore")
    handler: logging.Handler | None = None
    if getattr(args, "own_logging", True):
        # Only rlcore's own lines; Prefect commands show them through Prefect's handlers instead.
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.WARNING if args.quiet else logging.INFO)
    try:
        args.run(args)
    except RLCoreError as exc:
        # One line whatever the message holds (an env's or a module's exception text may span several).
        line = " ".join(str(exc).split()) or type(exc).__name__
        if exc.details:  # the traceback of the user's code that raised: to a file, never to the terminal
            line += f" (traceback in {write_error_log(args, exc.details)})"
        print("error: " + line, file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: the latest checkpoint is kept; re-run the same command to resume", file=sys.stderr)
        return 130
    finally:
        if handler is not None:  # main() may run more than once in a process (tests, the sweep's in-process trials)
            logger.removeHandler(handler)
    return 0


ERROR_LOG = "error.log"
"""In the run's folder (``runs/<name>/``): the traceback of the last error from user code (rlcore keeps no other
log file; its progress lines go to stderr). Rewritten by each such error."""


def write_error_log(args: argparse.Namespace, details: str) -> Path:
    """Write ``details`` to ``runs/<name>/error.log`` (``runs/error.log`` when the params did not load, so no run
    name is known) and return its path as the error line shows it: relative to the project when inside it."""
    params = getattr(args, "loaded_params", None)
    folder = Path("runs") / params.name if params is not None else Path("runs")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / ERROR_LOG
        path.write_text(f"rlcore {' '.join(sys.argv[1:])}\n{details}")
    except OSError as exc:  # a read-only project: the line still says what happened
        return Path(f"<not written: {exc.strerror}>")
    return path


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser(), argv)
