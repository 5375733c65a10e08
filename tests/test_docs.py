"""The documentation cannot drift from the code (issue 30): the params reference and the algorithm pages' key tables
are what ``docs/params_reference.py`` writes from the pydantic models, the JSON Schema of params files is what
``rlcore params-schema`` writes, every preset validates against it, and the site builds with ``mkdocs --strict``."""

from __future__ import annotations

import argparse
import difflib
import functools
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml
from conftest import PROJECT

SCRIPT = PROJECT / "docs" / "params_reference.py"


def _load_script():
    spec = importlib.util.spec_from_file_location("params_reference", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["params_reference"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


params_reference = _load_script()


def test_every_generated_page_is_what_the_script_writes():
    stale = []
    for path, wanted in params_reference.wanted_pages().items():
        current = path.read_text(encoding="utf-8") if path.is_file() else ""
        if current != wanted:
            name = str(path.relative_to(PROJECT))
            stale.append(
                "".join(difflib.unified_diff(current.splitlines(True), wanted.splitlines(True), name, "generated", n=0))
            )
    assert not stale, "generated docs out of date: run `python docs/params_reference.py`\n" + "\n".join(stale)


def test_the_reference_has_a_row_for_every_key_of_every_section_and_algorithm():
    from rlcore.config.sections import SECTIONS
    from rlcore.registry import ALGORITHMS

    page = params_reference.params_page()
    for section, (model, _) in SECTIONS.items():
        assert f"## `{section}` {{#{section}}}" in page
        for key in model.model_fields:
            assert f"| `{key}` |" in page, f"{section}.{key}: no row in docs/params.md"
    for name, cls in ALGORITHMS.items():
        block = params_reference.algorithm_block(name)
        for key in cls.Config.model_fields:
            assert f"| `{key}` |" in block, f"algo.{key} ({name}): no row on its page"


def test_a_row_gives_type_default_bounds_docstring_and_the_algorithms_that_take_the_key():
    page = params_reference.params_page()
    row = next(line for line in page.splitlines() if line.startswith("| `gae_lambda` |"))
    assert row.startswith("| `gae_lambda` | float | `0.95` (a2c, ppo); `1.0` (svpg) | [0, 1] | a2c, ppo, svpg |")
    assert "GAE's lambda: 0 is the one-step TD error" in row
    memory = next(line for line in page.splitlines() if line.startswith('| `type` | str | `"lstm"`'))
    assert '`"lstm"`, `"gru"`' in memory
    env_id = next(line for line in page.splitlines() if line.startswith("| `id` | str |"))
    assert "**required**" in env_id


def test_every_key_has_a_docstring(capsys):
    """Every field of every params section and algorithm config says what it does (its row's last column)."""
    undocumented = params_reference.missing()
    assert not undocumented, "keys without a docstring (`python docs/params_reference.py --missing`):\n" + "\n".join(
        undocumented
    )
    assert params_reference.main(["--missing"]) == 0
    assert capsys.readouterr().out == "every key has a docstring\n"


def test_check_exits_1_with_a_diff_when_a_page_differs_and_the_script_rewrites_it(tmp_path: Path, capsys):
    shutil.copy(PROJECT / "README.md", tmp_path / "README.md")
    shutil.copytree(PROJECT / "configs", tmp_path / "configs")
    shutil.copytree(PROJECT / "docs" / "algorithms", tmp_path / "docs" / "algorithms")
    page = tmp_path / "docs" / "params.md"
    real = (PROJECT / "docs" / "params.md").read_text(encoding="utf-8")
    page.write_text(real.replace("| `gae_lambda` |", "| `gl` |"), encoding="utf-8")
    project = ["--project", str(tmp_path)]

    assert params_reference.main(["--check", *project]) == 1
    out, err = capsys.readouterr()
    assert "-| `gl` |" in out and "+| `gae_lambda` |" in out
    assert "run `python docs/params_reference.py`" in err
    assert params_reference.main(project) == 0
    assert params_reference.main(["--check", *project]) == 0
    assert page.read_text(encoding="utf-8") == real


SCHEMA = PROJECT / "docs" / "params.schema.json"
PARAMS_FILES = [
    PROJECT / "params.yaml",
    PROJECT / "offline.yaml",
    PROJECT / "benchmarks" / "gail_pendulum.yaml",
    *sorted((PROJECT / "configs").glob("*.yaml")),
]


@functools.cache
def _validator():
    import jsonschema

    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_the_committed_schema_is_what_rlcore_params_schema_writes(tmp_path: Path, capsys):
    from rlcore.cli import build_parser, run

    assert run(build_parser(), ["params-schema", "--output", str(tmp_path / "schema.json")]) == 0
    written = (tmp_path / "schema.json").read_text(encoding="utf-8")
    assert written == SCHEMA.read_text(encoding="utf-8"), "docs/params.schema.json is out of date: run " + (
        "`rlcore params-schema --output docs/params.schema.json`"
    )
    assert run(build_parser(), ["params-schema"]) == 0
    assert capsys.readouterr().out == written


def test_every_params_file_names_the_schema_and_validates_against_it():
    validator = _validator()
    for path in PARAMS_FILES:
        text = path.read_text(encoding="utf-8")
        relative = os.path.relpath(SCHEMA, path.parent).replace(os.sep, "/")
        assert text.startswith(f"# yaml-language-server: $schema={relative}\n"), f"{path.name}: no schema line"
        errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(yaml.safe_load(text))]
        assert not errors, f"{path.relative_to(PROJECT)}: {errors[:3]}"


def test_the_schema_line_changes_nothing_rlcore_reads(tmp_path: Path):
    from rlcore.params import load_params

    text = (PROJECT / "params.yaml").read_text(encoding="utf-8")
    without = tmp_path / "params.yaml"
    without.write_text(text.split("\n", 1)[1], encoding="utf-8")
    assert load_params(PROJECT / "params.yaml").to_dict() == load_params(without).to_dict()


@pytest.mark.parametrize(
    ("change", "refusal"),
    [
        ({"algo": {"name": "ppo", "n_epoch": 4}}, "algo.n_epoch"),
        ({"train": {"max_steps": "many"}}, "train.max_steps"),
        ({"train": {"max_steps": True}}, "train.max_steps"),
        ({"algo": {"name": "ppo2"}}, "algo.name"),
        ({"algo": {"name": "dqn", "n_epochs": 4}}, "algo.n_epochs"),
        ({"eval": {"episodes": 0}}, "eval.episodes"),
        ({"policy": {"activation": "gelu"}}, "policy.activation"),
    ],
)
def test_an_invalid_file_fails_the_schema_as_rlcore_refuses_it(tmp_path: Path, change: dict, refusal: str):
    from rlcore.common.errors import ConfigError
    from rlcore.params import load_params

    tree = {"env": {"id": "CartPole-v1"}, "algo": {"name": "ppo"}, **change}
    assert not list(_validator().iter_errors({"env": {"id": "CartPole-v1"}, "algo": {"name": "ppo"}}))
    assert list(_validator().iter_errors(tree)), f"the schema takes {change}"
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(tree), encoding="utf-8")
    with pytest.raises(ConfigError, match=re.escape(refusal)):
        load_params(path)


def test_the_schema_requires_env_id_and_algo_name():
    validator = _validator()
    assert list(validator.iter_errors({"algo": {"name": "ppo"}}))
    assert list(validator.iter_errors({"env": {}, "algo": {"name": "ppo"}}))
    assert list(validator.iter_errors({"env": {"id": "CartPole-v1"}, "algo": {"lr": 0.1}}))


@pytest.fixture(scope="module")
def built_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``make docs``: ``mkdocs build --strict`` into a temporary folder, once for this module's tests."""
    site = tmp_path_factory.mktemp("docs") / "site"
    mkdocs = Path(sys.executable).with_name("mkdocs")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    build = subprocess.run(
        [str(mkdocs), "build", "--strict", "--site-dir", str(site)],
        cwd=PROJECT,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert build.returncode == 0, build.stderr[-3000:]
    return site


@pytest.mark.slow  # the site build (built_site) is the cost, ~5 s
def test_the_site_builds_with_strict(built_site: Path):
    """``make docs`` in CI's ``make test``: a broken link, anchor or include, or a page missing from the nav fails."""
    assert (built_site / "params.html").is_file()
    assert (built_site / "algorithms" / "ppo.html").is_file()


class _References(HTMLParser):
    """Every ``href`` and ``src`` of a page, and which of them the browser fetches by itself (scripts, styles,
    images, fonts: anything but an ``<a>`` the reader clicks)."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.fetched: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in ("href", "src") and value:
                (self.links if tag == "a" else self.fetched).append(value)


def _references(page: Path) -> _References:
    parser = _References()
    parser.feed(page.read_text(encoding="utf-8"))
    return parser


def _on_disk(page: Path, reference: str) -> Path | None:
    """Where a relative link of ``page`` leads on disk (None for another site, a mail address or an anchor)."""
    if "://" in reference or reference.startswith(("mailto:", "#", "data:", "javascript:")):
        return None
    return (page.parent / reference.split("#")[0].split("?")[0]).resolve()


@pytest.mark.slow  # the site build (built_site) is the cost, ~5 s
@pytest.mark.parametrize("page", ["index.html", "algorithms/ppo.html"])
def test_the_built_site_works_from_disk_and_fetches_nothing_from_the_internet(built_site: Path, page: str):
    """``site/index.html`` opened as a file: every link leads to a page file (not a folder listing), every script,
    style sheet and image is a file of the site (no web font, no CDN), and search has its index inlined for file
    URLs (Material's offline plugin, its shim vendored in docs/assets/)."""
    opened = built_site / page
    references = _references(opened)
    outside = [ref for ref in references.fetched if "://" in ref or ref.startswith("//")]
    assert not outside, f"{page} fetches from the internet: {outside}"
    for reference in references.fetched + references.links:
        target = _on_disk(opened, reference)
        if target is not None:
            assert target.is_file(), f"{page}: {reference} leads to {target}, not a file"
    # Follow a link as a reader would: from the page to the getting-started page, and from there back home.
    link = next(ref for ref in references.links if ref.split("#")[0].endswith("getting-started.html"))
    followed = _on_disk(opened, link)
    assert followed is not None and "<h1" in followed.read_text(encoding="utf-8")
    home = next(ref for ref in _references(followed).links if ref.split("#")[0].endswith("index.html"))
    assert _on_disk(followed, home) == (built_site / "index.html").resolve()
    assert (built_site / "search" / "search_index.js").read_text(encoding="utf-8").startswith("var __index = ")


def test_the_readme_is_short_states_the_test_command_and_links_into_the_docs():
    readme = (PROJECT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) < 200
    assert "make test" in readme and "make run" in readme
    for link in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (PROJECT / link).is_file(), f"README links to a missing page: {link}"


def test_rlcore_help_and_each_subcommand_s_help_point_to_an_existing_docs_page(capsys):
    from flows.cli import _add_flow_commands
    from rlcore.cli import build_parser

    parser = build_parser(_add_flow_commands)
    pages = re.findall(r"docs/[\w/-]+\.md", parser.format_help())
    assert pages and all((PROJECT / page).is_file() for page in pages)
    commands = next(action for action in parser._actions if isinstance(action, argparse._SubParsersAction))
    for name, sub in commands.choices.items():
        help_text = sub.format_help()
        pages = re.findall(r"Docs: (docs/[\w/-]+\.md)", help_text)
        assert pages, f"rlcore {name} --help names no docs page"
        assert all((PROJECT / page).is_file() for page in re.findall(r"docs/[\w/-]+\.md", help_text)), name
        assert sub.description and "\n" not in sub.description, f"rlcore {name}: its one line of what it does"
