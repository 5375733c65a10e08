"""The command line of the stages: ``rlcore train|evaluate|select|export|collect`` as dvc.yaml calls them,
``rlcore import-minari|init|dvc-yaml|compare|params-schema``; the console command (``flows.cli``) adds the Prefect and
sweep subcommands.

Every stage subcommand takes ``--params FILE`` (default ``params.yaml``) and repeated ``--set KEY=VALUE``. Each
subcommand's help says in one line what it does and names its docs page.
Errors meant for users print one line, ``error: ...``, and exit with status 2; a command line that does not parse
(an unknown command or option, a missing argument) prints the same line, then the command's usage. Options are
never abbreviated: ``--param`` is an unknown option, not ``--params``.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from rlcore.common.errors import RLCoreError, closest
from rlcore.common.project import use_project_folder

StageRunner = Callable[[argparse.Namespace], Any]

DOCS = "docs/index.md"
"""The documentation's home page, in the project (``make docs`` builds the site from docs/)."""


USER_ERROR = 2
"""The exit status of every user error, a command line that does not parse included."""


class UsageError(Exception):
    """A command line that does not parse: the message, and the usage of the command it was meant for."""

    def __init__(self, message: str, usage: str) -> None:
        super().__init__(message)
        self.usage = usage


class CommandParser(argparse.ArgumentParser):
    """argparse's parser without prefix matching (``--param`` is not taken for ``--params``) and with rlcore's error
    format: its errors raise :class:`UsageError`, printed by :func:`run`. Subcommands' parsers are of this class too
    (``add_subparsers`` makes its parsers of the parent's class)."""

    commands: Any = None
    """The subcommands (``add_subparsers``' action; its ``choices``: their parsers by name), on the top parser."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.option_names: list[str] = []  # filled by add_argument, which the base class calls for -h
        super().__init__(*args, **{**kwargs, "allow_abbrev": False})

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        action = super().add_argument(*args, **kwargs)
        self.option_names.extend(action.option_strings)
        return action

    def error(self, message: str) -> NoReturn:
        raise UsageError(message, self.format_usage())

    def unknown_arguments(self, extras: list[str]) -> NoReturn:
        """Refuse what no argument of this command took: the first unknown option (with its closest known one)."""
        option = next((extra for extra in extras if extra.startswith("-")), None)
        if option is None:
            self.error(f"unexpected argument{'s' if len(extras) > 1 else ''}: {' '.join(extras)}")
        name = option.partition("=")[0]
        match = closest(name, self.option_names)
        self.error(f"unknown option {name}" + (f"; did you mean {match}?" if match else ""))


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


def build_parser(extend: Callable[[Any], None] | None = None) -> CommandParser:
    """The stage subcommands; ``extend(subparsers)`` may add more (``flows.cli`` adds ``pipeline``)."""
    parser = CommandParser(
        prog="rlcore",
        description="Declarative, reproducible reinforcement learning: the stages of a run (train, evaluate, select, "
        "export, collect), one subcommand each, as dvc.yaml calls them; Prefect flows, sweeps and deployments.",
        epilog=f"Docs: {DOCS} (`make docs` builds the site); every params key: docs/params.md",
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="only warnings and errors")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    parser.commands = commands
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
    pipeline.add_argument(
        "--pipeline",
        metavar="FOLDER",
        default=None,
        help="write FOLDER/dvc.yaml instead: the run of --params as a pipeline of its own (e.g. pipelines/warmstart)",
    )
    pipeline.add_argument("--params", metavar="FILE", default=None, help="with --pipeline: the run's params file")
    pipeline.set_defaults(run=_dvc_yaml)
    help_text = "draw DVC experiments' learning curves into one PNG (offline) and print a table of them"
    compare = add_command(commands, "compare", help_text, "docs/own-project.md")
    compare.add_argument(
        "revisions",
        nargs="*",
        metavar="REV",
        help="experiments (as `dvc exp show` names them), `workspace`, branches, tags or commits (default: the "
        "baseline commit, every experiment of it, and the workspace unless it is one of them)",
    )
    compare.add_argument(
        "--metric",
        default="eval/mean_return",
        metavar="KEY",
        help="the dvclive curve to draw (default: eval/mean_return, the periodic evaluation's mean return)",
    )
    compare.add_argument(
        "--output",
        type=Path,
        default=Path("reports/compare.png"),
        metavar="FILE",
        help="the PNG to write (default: reports/compare.png)",
    )
    compare.set_defaults(run=_compare)
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
    from rlcore.project.pipeline_file import pipeline_yaml, sub_pipeline_yaml

    if (args.pipeline is None) != (args.params is None):
        raise RLCoreError("--pipeline: give it with --params (the run of a pipeline in its own folder), or neither")
    command = "rlcore dvc-yaml"
    if args.pipeline is None:
        text, target = pipeline_yaml(Path.cwd()), Path("dvc.yaml")
    else:
        folder = Path(args.pipeline).as_posix()
        text, target = sub_pipeline_yaml(Path.cwd(), args.params, folder), Path(folder) / "dvc.yaml"
        command += f" --params {args.params} --pipeline {folder}"
    if args.check:
        if not target.is_file() or target.read_text() != text:
            raise RLCoreError(f"{target}: not what the params files give; run `{command}` to rewrite it")
        return text
    write_text(target, text)
    return text


def _compare(args: argparse.Namespace) -> Any:
    from rlcore.common.files import shown_path
    from rlcore.project.compare import compare_experiments, table

    curves = compare_experiments(Path.cwd(), args.revisions, args.output, args.metric)
    print(f"wrote {shown_path(args.output.resolve())}: {args.metric} of {len(curves)} revisions over env steps")
    print(table(curves))
    return curves


def _import_minari(args: argparse.Namespace) -> Any:
    from rlcore.data.minari import import_minari

    if args.row_group_size < 1:
        raise RLCoreError(f"--row-group-size: a positive number of transitions expected, got {args.row_group_size}")
    return import_minari(args.source, args.output, args.row_group_size)


def _params_schema(args: argparse.Namespace) -> Any:
    import json

    from rlcore.params import params_schema, write_params_schema

    if args.output is not None:
        return write_params_schema(args.output, "--output")
    sys.stdout.write(json.dumps(params_schema(), indent=2, ensure_ascii=False) + "\n")
    return None


def parse(parser: CommandParser, argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The parsed command line; :class:`UsageError` when it does not parse, naming the command or option meant."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    commands = parser.commands.choices
    command = next((argument for argument in arguments if not argument.startswith("-")), None)
    if command is None and not {"-h", "--help"} & set(arguments):
        parser.error(f"no command given; one of: {', '.join(commands)}")
    if command is not None and command not in commands:
        match = closest(command, commands)
        hint = f"did you mean {match!r}?" if match else f"one of: {', '.join(commands)}"
        parser.error(f"unknown command {command!r}; {hint}")
    args, extras = parser.parse_known_args(arguments)
    if extras:
        commands[args.command].unknown_arguments(extras)
    return args


def run(parser: CommandParser, argv: Sequence[str] | None = None) -> int:
    """Parse, run the chosen subcommand, and turn user errors into one line and exit status 2 (a command line that
    does not parse: the line, then the command's usage)."""
    try:
        args = parse(parser, argv)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        print(exc.usage.rstrip(), file=sys.stderr)
        return USER_ERROR
    use_project_folder(Path.cwd())  # the user's modules named in params (an env of their own) import from it
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
        return USER_ERROR
    except KeyboardInterrupt as exc:
        # What a re-run does, as each interrupted training run noted it (rlcore.trainers.session); other commands
        # write their outputs atomically, so nothing half-written is left.
        notes = getattr(exc, "__notes__", None)
        print(f"interrupted: {'; '.join(notes) if notes else 're-run the same command'}", file=sys.stderr)
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
    from rlcore.common.files import write_text

    params = getattr(args, "loaded_params", None)
    path = (Path("runs") / params.name if params is not None else Path("runs")) / ERROR_LOG
    try:
        write_text(path, f"rlcore {' '.join(sys.argv[1:])}\n{details}")
    except (OSError, RLCoreError) as exc:  # a read-only project, a pipe named error.log: the line still says so
        return Path(f"<not written: {exc.strerror if isinstance(exc, OSError) else exc}>")
    return path


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser(), argv)
