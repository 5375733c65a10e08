"""Params that lie (issue 37): input that used to run as something other than what it says is refused cleanly.

- A YAML mapping that gives a key twice, at any depth, in a params file, a ``--set`` value, a sweep's space or its
  ``best_params.yaml``: YAML kept the last value, so a second ``train:`` replaced the whole first section and the run
  trained. Refused in one line naming the key's dotted path and both lines, nothing written.
- Abbreviated options (argparse's prefix matching took ``--param`` for ``--params``), and every other command line
  that does not parse: our ``error: ...`` line, then the command's usage; ``rlcore trian`` suggests ``train``.
- A float where an integer is expected: ``train.seeds: [1.0, 2.0]`` was read as seeds 1 and 2.
"""

from __future__ import annotations

import ast
import re
import shutil
from pathlib import Path

import pytest
from cli_support import assert_refused, assert_usage_error, run_in_process
from conftest import PROJECT, rlcore
from hypothesis import given, settings
from hypothesis import strategies as st

from faults.test_params_cases import (  # noqa: F401 (fixtures: the project is built on theirs)
    FUZZ,
    modules,
    refused_and_untouched,
    snapshot,
    template,
    yaml_text,
)
from rlcore.common.errors import ConfigError
from rlcore.config.inheritance import has_key
from rlcore.config.reading import ParamsLoader, apply_overrides, parse_yaml


@pytest.fixture
def project(template: Path, tmp_path: Path) -> Path:  # noqa: F811 - template is a fixture
    """A copy of the fault suite's project: the presets, finished runs, a selected model and a dataset."""
    return shutil.copytree(template, tmp_path / "project")


# --- duplicate keys ----------------------------------------------------------------------------------------------


def line_of(text: str, dotted: str) -> int:
    """The 1-based line of block-style key ``dotted`` in ``text``."""
    stack: list[tuple[int, str]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        match = re.match(r"^( *)([A-Za-z0-9_.-]+):", line)
        if match is None or line.lstrip().startswith("#"):
            continue
        indent = len(match[1])
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, match[2]))
        if ".".join(key for _, key in stack) == dotted:
            return number
    raise AssertionError(f"{dotted} not in the text")


def repeated_line(text: str, dotted: str, value: str) -> tuple[str, int, int]:
    """``text`` with key ``dotted`` given again (with ``value``) on the line after its own; both line numbers."""
    at = line_of(text, dotted)
    lines = text.splitlines(keepends=True)
    indent = lines[at - 1][: len(lines[at - 1]) - len(lines[at - 1].lstrip())]
    lines.insert(at, f"{indent}{dotted.rsplit('.', 1)[-1]}: {value}\n")
    return "".join(lines), at, at + 1


def second_section(text: str, section: str) -> tuple[str, int, int]:
    """``text`` with a second top-level ``section`` appended (what a pasted block does)."""
    body = text if text.endswith("\n") else text + "\n"
    return f"{body}{section}:\n  max_steps: 4096\n", line_of(text, section), len(body.splitlines()) + 1


PARAMS = (PROJECT / "params.yaml").read_text()
OFFLINE = (PROJECT / "offline.yaml").read_text()
DUPLICATE_FILES = {
    "a second top-level train section": ("params.yaml", second_section(PARAMS, "train"), "train"),
    "algo.lr twice": ("params.yaml", repeated_line(PARAMS, "algo.lr", "0.1"), "algo.lr"),
    "a sweep space's key twice": (
        "params.yaml",
        repeated_line(PARAMS, "sweep.space.algo.lr", "{type: float, low: 0.1, high: 0.2}"),
        "sweep.space.algo.lr",
    ),
    "top-level seed twice": ("params.yaml", repeated_line(PARAMS, "seed", "7"), "seed"),
    "offline.yaml's algo.name twice": ("offline.yaml", repeated_line(OFFLINE, "algo.name", "ppo"), "algo.name"),
}
"""Params files with a key given twice: (the preset it is made from, (text, first line, second line), the key)."""


@pytest.mark.parametrize("label", list(DUPLICATE_FILES))
def test_a_duplicate_key_in_a_params_file_is_refused_naming_it_and_both_lines(label: str, project: Path) -> None:
    _, (text, first, second), key = DUPLICATE_FILES[label]
    (project / "lying.yaml").write_text(text)
    before = snapshot(project)
    line = assert_refused(run_in_process(["train", "--params", "lying.yaml"], project))
    assert line == (
        f"error: lying.yaml: duplicate key '{key}' (lines {first} and {second}): YAML would keep only the last value; "
        "give each key once"
    )
    assert snapshot(project) == before, "a refused command changed the project"


DUPLICATE_OVERRIDES = {
    "a flow mapping's key twice": (
        "env.kwargs={max_episode_steps: 10, max_episode_steps: 500}",
        ("--set env.kwargs:", "duplicate key 'env.kwargs.max_episode_steps'", "line 1, columns 2 and 25"),
    ),
    "a key twice in a list item": (
        "eval.settings=[{name: a, parameters: {length: 0.5, length: 1.0}}]",
        ("--set eval.settings:", "duplicate key 'eval.settings.0.parameters.length'"),
    ),
    "1 and true as keys of one mapping": (
        "env.kwargs={1: a, true: b}",
        ("duplicate key 'env.kwargs.true'", "written '1' and 'true'"),
    ),
}


@pytest.mark.parametrize("label", list(DUPLICATE_OVERRIDES))
def test_a_duplicate_key_in_a_set_value_is_refused(label: str, project: Path) -> None:
    value, fragments = DUPLICATE_OVERRIDES[label]
    before = snapshot(project)
    assert_refused(run_in_process(["train", "--set", value], project), *fragments)
    assert snapshot(project) == before, "a refused command changed the project"


def test_sweep_apply_refuses_a_best_params_file_with_a_duplicate_key(project: Path) -> None:
    fragment = project / "reports" / "sweep" / "best_params.yaml"
    fragment.parent.mkdir(parents=True)
    fragment.write_text("algo:\n  lr: 0.0003\n  lr: 0.3\n")
    before = snapshot(project)
    assert_refused(
        run_in_process(["sweep", "--apply"], project),
        "reports/sweep/best_params.yaml: duplicate key 'algo.lr' (lines 2 and 3)",
    )
    assert snapshot(project) == before, "a refused command changed params.yaml"


def test_the_reader_is_libyaml_s_where_pyyaml_has_it() -> None:
    """The duplicate check works on the composed nodes, so it holds with libyaml's parser (and PyYAML's)."""
    import yaml

    assert issubclass(ParamsLoader, getattr(yaml, "CSafeLoader", yaml.SafeLoader))


@pytest.mark.parametrize(
    ("text", "key", "where"),
    [
        ("a: 1\na: 2\n", "a", "lines 1 and 2"),
        ("a:\n  b:\n    c:\n      d: 1\n      d: 2\n", "a.b.c.d", "lines 4 and 5"),
        ("a:\n  - {x: 1}\n  - {x: 1, y: 2, x: 3}\n", "a.1.x", "line 3, columns 6 and 18"),
        ("a: 1\n'a': 2\n", "a", "lines 1 and 2"),
        ("n:\n  1: x\n  01: y\n", "n.01", "lines 2 and 3"),
        ("a: &x {k: 1, k: 2}\nb: *x\n", "a.k", "line 1, columns 8 and 14"),  # where the anchor is, not the alias
        ("b:\n  c: 1\n  c: 2\na:\n  d: 1\n  d: 2\n", "b.c", "lines 2 and 3"),  # the first in the text
    ],
)
def test_parse_yaml_names_a_duplicate_key_by_its_dotted_path(text: str, key: str, where: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(f"f.yaml: duplicate key '{key}' ({where}")):
        parse_yaml(text, "f.yaml")


def test_merge_keys_and_aliases_are_not_duplicates() -> None:
    """``<<: *base`` then a key of base: an explicit override, YAML's documented merge; an alias used twice is one
    mapping, not two keys."""
    text = "base: &b {x: 1, y: 2}\nd:\n  <<: *b\n  x: 3\ne: [*b, *b]\n"
    assert parse_yaml(text, "f.yaml") == {"base": {"x": 1, "y": 2}, "d": {"x": 3, "y": 2}, "e": [{"x": 1, "y": 2}] * 2}


def test_distinct_keys_that_look_alike_are_kept() -> None:
    assert parse_yaml("{'1': a, 1: b}", "f.yaml") == {"1": "a", 1: "b"}
    assert apply_overrides({}, ["env.kwargs={a: 1, b: {a: 2}}"]) == {"env": {"kwargs": {"a": 1, "b": {"a": 2}}}}


YAML_READERS = ("yaml.safe_load", "yaml.load(", "yaml.full_load", "yaml.unsafe_load", "yaml.load_all", "Loader=")


def test_every_yaml_rlcore_reads_goes_through_its_one_reader() -> None:
    """No other YAML reading in rlcore, flows, benchmarks or the docs' generators: each would accept duplicate keys
    (and alias bombs) again."""
    sources = [
        path
        for folder in ("rlcore", "flows", "benchmarks", "docs")
        for path in sorted((PROJECT / folder).rglob("*.py"))
        if path != PROJECT / "rlcore" / "config" / "reading.py"
    ]
    offending = [
        f"{path.relative_to(PROJECT)}:{number}"
        for path in sources
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if any(reader in line for reader in YAML_READERS)
    ]
    assert not offending, f"YAML read outside rlcore.config.reading: {offending}"


# --- the command line --------------------------------------------------------------------------------------------

ABBREVIATIONS = {
    "--param for --params": (["train", "--param", "params.yaml"], "unknown option --param; did you mean --params?"),
    "--para=FILE": (["evaluate", "--para=params.yaml"], "unknown option --para"),
    "--resume for --resume-from": (["train", "--resume", "x.pt"], "unknown option --resume; did you mean"),
    "--no-f for --no-flow": (["sweep", "--no-f"], "unknown option --no-f"),
    "--app for --apply": (["sweep", "--app"], "unknown option --app"),
    "--out for --output": (["params-schema", "--out", "s.json"], "unknown option --out; did you mean --output?"),
    "--qui for --quiet": (["--qui", "train"], "unknown option --qui"),
}


@pytest.mark.parametrize("label", list(ABBREVIATIONS))
def test_an_abbreviated_option_is_refused_with_the_option_it_may_mean(label: str, project: Path) -> None:
    args, message = ABBREVIATIONS[label]
    before = snapshot(project)
    assert_usage_error(run_in_process(args, project), message)
    assert snapshot(project) == before, "a refused command changed the project"


COMMAND_LINES = {
    "no command": ([], "error: no command given; one of: train, evaluate,", "usage: rlcore [-h]"),
    "a misspelt command": (["trian"], "error: unknown command 'trian'; did you mean 'train'?", "usage: rlcore [-h]"),
    "an unknown command": (["xyzzy"], "error: unknown command 'xyzzy'; one of: train,", "usage: rlcore [-h]"),
    "deploy bogus": (["deploy", "bogus"], "error: argument action: invalid choice: 'bogus'", "usage: rlcore deploy"),
    "an option without its value": (["train", "--params"], "error: argument --params: expected one argument", ""),
    "a missing positional": (["import-minari"], "required: source", "usage: rlcore import-minari"),
    "a stray argument": (["select", "extra"], "error: unexpected argument: extra", "usage: rlcore select"),
}


@pytest.mark.parametrize("label", list(COMMAND_LINES))
def test_a_command_line_that_does_not_parse_prints_our_error_line_then_the_usage(label: str, project: Path) -> None:
    args, message, usage = COMMAND_LINES[label]
    outcome = run_in_process(args, project)
    assert message in assert_usage_error(outcome)
    assert usage in outcome.stderr.splitlines()[1]


def test_the_real_command_suggests_a_command_and_exits_2(tmp_path: Path) -> None:
    result = rlcore("trian", cwd=tmp_path, check=False, timeout=60)
    assert result.returncode == 2, result
    lines = result.stderr.splitlines()
    assert lines[0] == "error: unknown command 'trian'; did you mean 'train'?", result.stderr
    assert lines[1].startswith("usage: rlcore"), result.stderr


def test_every_argument_parser_refuses_abbreviations() -> None:
    """The project's scripts too (benchmarks, the docs' generators): every ``ArgumentParser(...)`` passes
    ``allow_abbrev=False`` (rlcore's own parser forces it on every subcommand)."""
    missing = []
    for folder in ("rlcore", "flows", "benchmarks", "docs"):
        for path in sorted((PROJECT / folder).rglob("*.py")):
            source = path.read_text()
            if "ArgumentParser(" not in source:
                continue
            for node in ast.walk(ast.parse(source)):
                if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in (
                    "ArgumentParser",
                ):
                    given = {k.arg: k.value for k in node.keywords}
                    value = given.get("allow_abbrev")
                    if not (isinstance(value, ast.Constant) and value.value is False):
                        missing.append(f"{path.relative_to(PROJECT)}:{node.lineno}")
    assert not missing, f"argument parsers that accept abbreviated options: {missing}"


# --- floats where integers are expected ---------------------------------------------------------------------------

WHOLE_FLOATS = {
    "train.seeds [1.0, 2.0]": ("train.seeds=[1.0, 2.0]", "train.seeds: expected a list of integers, got a float"),
    "seed 1.0": ("seed=1.0", "seed: expected an integer, got a float (1.0)"),
    "eval.seed 3.0": ("eval.seed=3.0", "eval.seed: expected an integer"),
    "policy.hidden_sizes [64.0, 64]": ("policy.hidden_sizes=[64.0, 64]", "policy.hidden_sizes: expected a list of"),
    "sweep.seeds [0.0, 1.0]": ("sweep.seeds=[0.0, 1.0]", "sweep.seeds: expected a list of integers"),
    "train.max_steps 1e5": ("train.max_steps=1e5", "train.max_steps: expected an integer, got a float (100000.0)"),
}


@pytest.mark.parametrize("label", list(WHOLE_FLOATS))
def test_a_whole_float_where_an_integer_is_expected_is_refused(label: str, project: Path) -> None:
    value, fragment = WHOLE_FLOATS[label]
    before = snapshot(project)
    assert_refused(run_in_process(["train", "--set", value], project), fragment, "without a decimal point")
    assert snapshot(project) == before, "a refused command changed the project"


# --- fuzzers --------------------------------------------------------------------------------------------------------


def block_keys(text: str) -> list[tuple[str, int]]:
    """Every block-style key of a preset with its line: the keys that resolve to a key of the parsed mapping (not a
    line inside a flow collection or a list item)."""
    tree = parse_yaml(text, "preset")
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        if re.match(r"^ *[A-Za-z0-9_.-]+:", line) and not line.lstrip().startswith(("#", "-")):
            try:
                dotted = next(k for k, n in _keys_by_line(text) if n == number)
            except StopIteration:
                continue
            if has_key(tree, dotted):
                found.append((dotted, number))
    return found


def _keys_by_line(text: str) -> list[tuple[str, int]]:
    stack: list[tuple[int, str]] = []
    keys = []
    for number, line in enumerate(text.splitlines(), start=1):
        match = re.match(r"^( *)([A-Za-z0-9_.-]+):", line)
        if match is None or line.lstrip().startswith(("#", "-")):
            continue
        while stack and stack[-1][0] >= len(match[1]):
            stack.pop()
        stack.append((len(match[1]), match[2]))
        keys.append((".".join(key for _, key in stack), number))
    return keys


@pytest.fixture(scope="module")
def fuzz_root(template: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:  # noqa: F811 - a fixture
    """One copy of the project for every example: a refusal writes nothing, and each example checks that."""
    return shutil.copytree(template, tmp_path_factory.mktemp("lies") / "project")


PRESET_FILES = ("params.yaml", "offline.yaml", "configs/dqn-cartpole.yaml", "configs/sac-pendulum.yaml")
FUZZ_FILE = "fuzz.yaml"


@settings(FUZZ, max_examples=30)
@given(data=st.data())
def test_fuzz_a_key_given_twice_at_any_depth_is_refused(fuzz_root: Path, data: st.DataObject) -> None:
    """A preset with one of its keys (any depth: a section, a key of a section, a sweep space's key) given again on
    the next line, read by any stage; or a ``--set`` section written as a flow mapping with one key twice."""
    preset = data.draw(st.sampled_from(PRESET_FILES), label="preset")
    text = (PROJECT / preset).read_text()
    stage = data.draw(st.sampled_from(["train", "evaluate", "select", "export", "collect"]), label="stage")
    if data.draw(st.booleans(), label="in a --set value"):
        tree = parse_yaml(text, preset)
        sections = [(k, v) for k, v in tree.items() if isinstance(v, dict) and v]
        section, values = data.draw(st.sampled_from(sections), label="section")
        key = data.draw(st.sampled_from(sorted(values)), label="key")
        flow = yaml_text(values).removesuffix("}") + f", {key}: {yaml_text(values[key])}}}"
        args = [stage, "--params", preset, "--set", f"{section}={flow}"]
        line = refused_and_untouched(fuzz_root, args)
        assert f"--set {section}: duplicate key '{section}.{key}'" in line, line
        return
    dotted, number = data.draw(st.sampled_from(block_keys(text)), label="key")
    lines = text.splitlines(keepends=True)
    lines.insert(number, lines[number - 1].split("#")[0].rstrip() + "\n")
    line = refused_and_untouched(fuzz_root, [stage, "--params", FUZZ_FILE], "".join(lines).encode())
    assert f"{FUZZ_FILE}: duplicate key '{dotted}' (lines {number} and {number + 1})" in line, line


def command_options() -> dict[str, list[str]]:
    """Each command's long options (``rlcore`` itself: ``""``), from the real parser."""
    from flows.cli import _add_flow_commands
    from rlcore.cli import build_parser

    parser = build_parser(_add_flow_commands)
    options = {"": parser.option_names}
    options.update({name: sub.option_names for name, sub in parser.commands.choices.items()})
    return {name: [o for o in found if o.startswith("--") and len(o) > 4] for name, found in options.items()}


OPTIONS = command_options()
POSITIONALS = {"import-minari": ["mujoco/hopper/medium-v0"], "deploy": ["serve"]}


@settings(FUZZ, max_examples=30)
@given(data=st.data())
def test_fuzz_an_abbreviated_option_is_refused_by_every_command(fuzz_root: Path, data: st.DataObject) -> None:
    """Any proper prefix (``--`` and at least one character) of any command's long option, with or without a value:
    refused naming the prefix, nothing written. Commands with a required positional are given it (else its
    absence is the first error)."""
    command = data.draw(st.sampled_from([name for name, found in OPTIONS.items() if found]), label="command")
    option = data.draw(st.sampled_from(OPTIONS[command]), label="option")
    prefix = option[: data.draw(st.integers(3, len(option) - 1), label="length")]
    if prefix in OPTIONS[command]:
        return
    if command == "":  # rlcore's own options come before the command: a value there would be taken for it
        args = [data.draw(st.sampled_from([prefix, f"{prefix}=x"]), label="as"), "train"]
    else:
        spelled = data.draw(st.sampled_from([[prefix], [prefix, "params.yaml"], [f"{prefix}=params.yaml"]]), label="as")
        args = [command, *POSITIONALS.get(command, []), *spelled]
    before = snapshot(fuzz_root)
    outcome = run_in_process(args, fuzz_root)
    assert snapshot(fuzz_root) == before, outcome
    assert_usage_error(outcome, f"unknown option {prefix}")


NEEDS = {("algo", "behavioral_cloning"): "dataset", ("algo", "reward_signals", "gail"): "dataset"}
"""Sections that cannot be given without a key of their own (refused first when missing)."""


def test_every_integer_key_of_every_algorithm_refuses_a_whole_float() -> None:
    """Every key typed as an integer or a list of integers (seeds, sizes, counts, steps), for the first algorithm
    that has it (one StrictModel rule refuses them all; checking each key once keeps this fast)."""
    from typing import get_args, get_origin

    from faults.test_params_cases import FIELDS, _members, base_tree, set_path
    from rlcore.params import validate_params

    checked = set()
    for algo, path, field in FIELDS:
        members = _members(field.annotation)
        lists = any(get_origin(m) in (list, tuple) and get_args(m)[:1] == (int,) for m in members)
        key = ".".join(path)
        if key in checked or (not lists and not (int in members and float not in members)):
            continue
        tree = base_tree(algo)
        for section, needed in NEEDS.items():
            if path[: len(section)] == section:
                set_path(tree, (*section, needed), "data/dataset.parquet")
        set_path(tree, path, [1.0] if lists else 1.0)
        with pytest.raises(ConfigError, match=re.escape(f"{key}: expected ") + ".* got a float"):
            validate_params(tree)
        checked.add(key)
    assert {"seed", "train.seeds", "sweep.seeds", "policy.hidden_sizes", "algo.n_steps"} <= checked
    assert len(checked) >= 60, sorted(checked)
