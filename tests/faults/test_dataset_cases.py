"""Bad datasets, refused cleanly: ``rlcore train --params offline.yaml --set dataset.path=FILE``, read in memory and
streamed (``dataset.in_memory=false``), exits 2 with one ``error: ...`` line naming the file (the same line both
ways), no traceback, and nothing written or removed: a finished offline run stays byte for byte what it was.

- Every label of the 18 cases a probe found not refused cleanly (``dataset-cases.jsonl``, a copy of
  ``../shared/faults/dataset-cases.jsonl``; the files themselves were not kept) is rebuilt here from one small
  ``collect_dataset`` output, and either refused (:data:`REFUSED`) or named as valid input with the reason
  (:data:`VALID`): valid input trains, both ways.
- More corruptions of the same kinds (:data:`MORE_REFUSED`), and unit tests of the integrity checks (page
  checksums, ``rows_sha256``) on ``rlcore.data.reader`` directly.

Everything runs in-process through ``flows.cli.main`` (what the ``rlcore`` command runs).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import os
import re
import shutil
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import gymnasium as gym
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from conftest import preset_text

from rlcore.data.collection import CollectionPlan, collect_dataset
from rlcore.data.reader import iter_dataset, load_dataset, read_metadata
from rlcore.data.schema import DatasetError
from rlcore.envs.config import EnvConfig

HERE = Path(__file__).parent
CASES: list[dict[str, Any]] = [
    json.loads(line) for line in (HERE / "dataset-cases.jsonl").read_text().splitlines() if line.strip()
]
RUN = Path("runs/bc-cartpole")
FINISHED = ["train.max_steps=200", "train.eval_every=100", "train.log_every=100", "train.eval_episodes=1"]
"""The finished offline run every refusal must leave byte for byte as it was."""
QUICK = ["train.max_steps=20", "train.eval_every=20", "train.log_every=20", "train.eval_episodes=1"]
"""Valid input only has to train."""


def label(case: dict[str, Any]) -> str:
    found = re.search(r"dataset\.path=data/bad/(\w+)\.parquet", case["cmd"])
    assert found, case["cmd"]
    return found.group(1)


# --- corruptions of a valid file -----------------------------------------------------------------------------------

Corruption = Callable[[Path, Path], None]
"""(valid file, target): writes the corrupted copy of the valid file at target."""


def rewritten(alter: Callable[[pa.Table], pa.Table], keep_metadata: bool = True) -> Corruption:
    """The rows through ``alter``, written with pyarrow's defaults (as a user's script would), the file's rlcore
    metadata kept (or dropped)."""

    def corrupt(valid: Path, target: Path) -> None:
        raw = pq.ParquetFile(valid).metadata.metadata[b"rlcore"]
        table = alter(pq.read_table(valid).replace_schema_metadata(None))
        pq.write_table(table.replace_schema_metadata({b"rlcore": raw} if keep_metadata else None), target)

    return corrupt


def with_metadata(edit: Callable[[dict[str, Any]], None]) -> Corruption:
    """The rows as they are, the rlcore metadata edited (and written with Python's default ``json.dumps``)."""

    def corrupt(valid: Path, target: Path) -> None:
        metadata = json.loads(pq.ParquetFile(valid).metadata.metadata[b"rlcore"])
        edit(metadata)
        table = pq.read_table(valid).replace_schema_metadata({b"rlcore": json.dumps(metadata).encode()})
        pq.write_table(table, target)

    return corrupt


def garbled_middle(valid: Path, target: Path) -> None:
    """2 KB of random bytes written over the middle of the file."""
    data = bytearray(valid.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 2048] = np.random.default_rng(0).bytes(2048)
    target.write_bytes(bytes(data))


def episode_bounds(table: pa.Table) -> list[np.ndarray]:
    """Each episode's row numbers, in file order."""
    ids = table.column("episode_id").to_numpy()
    starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
    return np.split(np.arange(len(ids)), starts[1:])


def episodes_out_of_order(table: pa.Table) -> pa.Table:
    """Whole episodes in a shuffled order (each still contiguous, in step order)."""
    episodes = episode_bounds(table)
    order = np.random.default_rng(1).permutation(len(episodes))
    return table.take(np.concatenate([episodes[i] for i in order]))


def episode_ids_reversed_labels(table: pa.Table) -> pa.Table:
    """Rows as they are, episode ids relabelled last-to-first (0 <-> n-1)."""
    ids = table.column("episode_id").to_numpy()
    return table.set_column(0, table.schema.field(0), pa.array(ids.max() - ids, pa.int64()))


def rows_shuffled(table: pa.Table) -> pa.Table:
    return table.take(np.random.default_rng(2).permutation(table.num_rows))


def duplicate_rows(table: pa.Table) -> pa.Table:
    """Rows 1000-1099 twice (each right after itself)."""
    rows = np.arange(table.num_rows)
    return table.take(np.concatenate([rows[:1000], np.repeat(rows[1000:1100], 2), rows[1100:]]))


def duplicate_block_appended(table: pa.Table) -> pa.Table:
    """Rows 250-749 again at the end (starting in the middle of an episode)."""
    return pa.concat_tables([table, table.slice(250, 500)])


def duplicate_episodes_appended(table: pa.Table) -> pa.Table:
    """The first three episodes again at the end, whole: each run of rows is a valid episode."""
    return pa.concat_tables([table, table.take(np.concatenate(episode_bounds(table)[:3]))])


def action_int32(table: pa.Table) -> pa.Table:
    index = table.schema.get_field_index("action")
    return table.set_column(index, pa.field("action", pa.int32()), table.column("action").cast(pa.int32()))


def empty_table(table: pa.Table) -> pa.Table:
    return table.slice(0, 0)


def reward_edited(table: pa.Table) -> pa.Table:
    """One reward changed (still finite): what page checksums cannot see once a tool rewrites the file."""
    rewards = table.column("reward").to_numpy().copy()
    rewards[1234] += 0.5
    index = table.schema.get_field_index("reward")
    return table.set_column(index, table.schema.field(index), pa.array(rewards, pa.float32()))


def env_pendulum(metadata: dict[str, Any]) -> None:
    metadata["env"]["id"] = "Pendulum-v1"


def nan_return(metadata: dict[str, Any]) -> None:
    metadata["episode_return"]["mean"] = float("nan")


def infinite_seed(metadata: dict[str, Any]) -> None:
    metadata["seed"] = float("inf")


REFUSED: dict[str, tuple[Corruption, tuple[str, ...]]] = {
    "empty_table": (rewritten(empty_table), ("no transitions",)),
    # The writer stores a CRC32 in every page header and every read verifies them (a garble that hits a page
    # header instead is a Parquet decoding error: "not a readable Parquet file (truncated or corrupt?)").
    "garbled_middle": (garbled_middle, ("corrupt",)),
    "duplicate_rows": (rewritten(duplicate_rows), ("row 1001 repeats episode", "(duplicated rows)")),
    "metadata_env_mismatch": (with_metadata(env_pendulum), ("collected on Pendulum-v1", "params train CartPole-v1")),
    "metadata_with_NaN": (with_metadata(nan_return), ("rlcore metadata: not valid JSON (NaN",)),
    "rows_shuffled": (rewritten(rows_shuffled), ("rows must be grouped by episode in step order",)),
    # A valid layout (see VALID), but rows rewritten under rlcore's metadata: the metadata (counts, returns,
    # provenance) no longer describes them, and its rows_sha256 says so. Without the metadata they train.
    "episodes_out_of_order": (rewritten(episodes_out_of_order), ("rows_sha256 differs",)),
    "episode_ids_reversed_labels": (rewritten(episode_ids_reversed_labels), ("rows_sha256 differs",)),
}
"""Labels of dataset-cases.jsonl that are refused, and what the error line says."""

VALID: dict[str, tuple[Corruption, str]] = {
    "action_int32": (
        rewritten(action_int32),
        "integer columns of any width are read as int64 (the range is checked against the env's actions); the "
        "rows, as read, are the ones rows_sha256 describes",
    ),
    "metadata_removed": (
        rewritten(lambda table: table, keep_metadata=False),
        "a Parquet file without rlcore metadata is the user's own data (README), read against the env in params",
    ),
}
"""Labels of dataset-cases.jsonl that are valid input, and why."""

MORE_VALID: dict[str, tuple[Corruption, str]] = {
    "episodes_out_of_order_own_file": (
        rewritten(episodes_out_of_order, keep_metadata=False),
        "episodes may come in any order: each is contiguous, in step order",
    ),
    "episode_ids_reversed_labels_own_file": (
        rewritten(episode_ids_reversed_labels, keep_metadata=False),
        "episode ids need not increase, only be unique",
    ),
}

MORE_REFUSED: dict[str, tuple[Corruption, tuple[str, ...]]] = {
    "duplicate_block_appended": (
        rewritten(duplicate_block_appended),
        ("(duplicated, missing or reordered rows?)", "grouped by episode in step order"),
    ),
    "duplicate_episodes_appended": (
        rewritten(duplicate_episodes_appended),
        ("episode 0 appears in two separate runs of rows (duplicated or reordered rows?)",),
    ),
    "reward_edited": (rewritten(reward_edited), ("rows_sha256 differs",)),
    "metadata_with_Infinity": (with_metadata(infinite_seed), ("not valid JSON (Infinity",)),
}


# --- running the CLI in-process --------------------------------------------------------------------------------------


def run_in_process(args: list[str], cwd: Path) -> tuple[Any, str]:
    """``flows.cli.main(args)`` (the ``rlcore`` command's entry point) in ``cwd``: (exit status, stderr); an exception
    that escapes it is what the command would print as a traceback."""
    from flows.cli import main

    logger = logging.getLogger("rlcore")
    handlers, level = list(logger.handlers), logger.level
    stderr = io.StringIO()
    previous = Path.cwd()
    try:
        os.chdir(cwd)
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(stderr):
            try:
                status: Any = main(args)
            except SystemExit as exc:
                status = exc.code
            except BaseException:
                stderr.write(traceback.format_exc())
                status = 1
    finally:
        os.chdir(previous)
        logger.handlers, logger.level = handlers, level  # main adds a handler on the redirected stderr
    return status, stderr.getvalue()


def train(root: Path, dataset: str, in_memory: bool, *overrides: str) -> tuple[Any, str]:
    sets = [f"dataset.path={dataset}", f"dataset.in_memory={str(in_memory).lower()}", *overrides]
    return run_in_process(["train", "--params", "offline.yaml", *[a for s in sets for a in ("--set", s)]], root)


def snapshot(root: Path) -> dict[str, str]:
    """sha256 of every file under ``root`` (hidden ones too), and every folder."""
    return {
        path.relative_to(root).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "/"
        for path in sorted(root.rglob("*"))
    }


def refused(status: Any, stderr: str, *fragments: str) -> str:
    """Exit 2, no traceback, exactly one line on stderr: ``error: ...`` holding every fragment."""
    assert "Traceback" not in stderr, stderr
    assert status == 2, f"exit {status}\n{stderr}"
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    for fragment in fragments:
        assert fragment in lines[0], f"{fragment!r} not in {lines[0]!r}"
    return lines[0]


# --- fixtures ------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def collected(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One small valid dataset: 3,000 random CartPole transitions in row groups of 500 (never changed)."""
    path = tmp_path_factory.mktemp("collected") / "dataset.parquet"
    collect_dataset(path, EnvConfig(), None, {"kind": "random"}, CollectionPlan(4, 3000, None, 0.0, False, 0, 500))
    return path


@pytest.fixture(scope="module")
def project(collected: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A project holding a finished offline run (BC, 200 gradient steps) on the valid dataset."""
    root = tmp_path_factory.mktemp("project")
    (root / "offline.yaml").write_text(preset_text("offline.yaml"))
    (root / "data" / "bad").mkdir(parents=True)
    shutil.copy(collected, root / "data" / "dataset.parquet")
    status, stderr = train(root, "data/dataset.parquet", True, *FINISHED)
    assert status == 0, stderr
    assert list((root / RUN / "checkpoints").glob("step_*.pt")), "the finished run should have checkpoints"
    yield root


# --- the probe's cases ---------------------------------------------------------------------------------------------


def test_every_probe_case_is_either_refused_or_named_valid() -> None:
    labels = {label(case) for case in CASES}
    assert len(CASES) == 18 and len(labels) == 10
    assert labels == set(REFUSED) | set(VALID) and not set(REFUSED) & set(VALID)


def assert_refused_both_ways(
    project: Path, collected: Path, name: str, corrupt: Corruption, fragments: tuple[str, ...]
) -> None:
    dataset = f"data/bad/{name}.parquet"
    corrupt(collected, project / dataset)
    before = snapshot(project)
    lines = []
    for in_memory in (True, False):
        status, stderr = train(project, dataset, in_memory, *FINISHED)
        lines.append(refused(status, stderr, dataset, *fragments))
        assert snapshot(project) == before, f"{name}, in_memory={in_memory}: files written or removed"
    assert lines[0] == lines[1], "the in-memory and streamed reads should refuse the file alike"


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_probe_case_is_refused_in_one_line_both_ways_and_keeps_the_finished_run(
    project: Path, collected: Path, name: str
) -> None:
    corrupt, fragments = REFUSED[name]
    assert_refused_both_ways(project, collected, name, corrupt, fragments)


@pytest.mark.parametrize("name", sorted(VALID))
def test_probe_case_is_valid_input_and_trains_both_ways(project: Path, collected: Path, name: str) -> None:
    assert_trains_both_ways(project, collected, name, VALID[name][0])


def assert_trains_both_ways(project: Path, collected: Path, name: str, corrupt: Corruption) -> None:
    dataset = f"data/bad/{name}.parquet"
    corrupt(collected, project / dataset)
    for in_memory in (True, False):
        run = f"valid-{name}-{'memory' if in_memory else 'streamed'}"
        status, stderr = train(project, dataset, in_memory, f"name={run}", *QUICK)
        assert status == 0, stderr
        assert "Traceback" not in stderr, stderr
        assert list((project / "runs" / run / "checkpoints").glob("step_*.pt")), stderr


# --- more of the same kinds ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(MORE_REFUSED))
def test_more_corruptions_are_refused_in_one_line_both_ways(project: Path, collected: Path, name: str) -> None:
    corrupt, fragments = MORE_REFUSED[name]
    assert_refused_both_ways(project, collected, name, corrupt, fragments)


@pytest.mark.parametrize("name", sorted(MORE_VALID))
def test_more_valid_layouts_train_both_ways(project: Path, collected: Path, name: str) -> None:
    assert_trains_both_ways(project, collected, name, MORE_VALID[name][0])


# --- the integrity checks, on rlcore.data.reader directly
# ---------------------------------------------------------------

_cartpole = gym.make("CartPole-v1")
SPACES = (cast(gym.spaces.Box, _cartpole.observation_space), _cartpole.action_space, "CartPole-v1")
_cartpole.close()


def read_both_ways(path: Path) -> list[str]:
    """The DatasetError of each read, in memory and streamed (consumed to the end)."""
    messages = []
    for read in (lambda: load_dataset(path, *SPACES), lambda: list(iter_dataset(path, *SPACES))):
        with pytest.raises(DatasetError) as error:
            read()
        messages.append(str(error.value))
    assert messages[0] == messages[1]
    return messages


def test_collected_files_checksum_every_page_and_record_the_rows_sha256(collected: Path) -> None:
    metadata = read_metadata(collected)
    assert re.fullmatch(r"[0-9a-f]{64}", metadata["rows_sha256"])
    parquet = pq.ParquetFile(collected)
    assert parquet.metadata.num_row_groups == 6  # 3,000 rows in groups of 500: checks carry across groups
    assert len(load_dataset(collected, *SPACES)) == parquet.metadata.num_rows


@pytest.mark.parametrize("column", ["observation.list.element", "reward", "terminated"])
def test_a_damaged_page_is_refused_as_a_page_checksum_mismatch(collected: Path, tmp_path: Path, column: str) -> None:
    parquet = pq.ParquetFile(collected)
    names = [parquet.metadata.row_group(0).column(i).path_in_schema for i in range(parquet.metadata.num_columns)]
    chunk = parquet.metadata.row_group(4).column(names.index(column))
    data = bytearray(collected.read_bytes())
    position = chunk.data_page_offset + chunk.total_compressed_size - 8  # page data, past the page header
    data[position] ^= 0xFF
    path = tmp_path / "damaged.parquet"
    path.write_bytes(bytes(data))
    message = read_both_ways(path)[0]
    assert message.startswith(f"{path}: corrupt (page checksum mismatch in row group 4)"), message


def test_rows_rewritten_intact_by_another_tool_still_verify(collected: Path, tmp_path: Path) -> None:
    """rows_sha256 covers the values as read, not the file's bytes: new row groups, encodings and no page
    checksums (pyarrow's defaults) keep a file readable as long as its rows are the same."""
    path = tmp_path / "rewritten.parquet"
    rewritten(lambda table: table)(collected, path)
    assert pq.ParquetFile(path).metadata.num_row_groups == 1
    assert read_metadata(path)["rows_sha256"] == read_metadata(collected)["rows_sha256"]
    np.testing.assert_array_equal(load_dataset(path, *SPACES).obs, load_dataset(collected, *SPACES).obs)


def test_an_episode_id_used_twice_is_refused_at_the_end_of_a_read(collected: Path, tmp_path: Path) -> None:
    path = tmp_path / "twice.parquet"
    rewritten(duplicate_episodes_appended, keep_metadata=False)(collected, path)
    assert "episode 0 appears in two separate runs of rows" in read_both_ways(path)[0]


def test_the_first_row_must_start_an_episode(collected: Path, tmp_path: Path) -> None:
    path = tmp_path / "cut.parquet"
    rewritten(lambda table: table.slice(3), keep_metadata=False)(collected, path)
    assert "row 0 is episode 0 step 3, not an episode's first step (0)" in read_both_ways(path)[0]


def test_a_file_written_before_checksums_still_loads(collected: Path, tmp_path: Path) -> None:
    """No page checksums and no rows_sha256 (rlcore before them, or another writer): nothing to verify."""
    path = tmp_path / "older.parquet"
    with_metadata(lambda metadata: metadata.pop("rows_sha256"))(collected, path)
    assert "rows_sha256" not in read_metadata(path)
    assert len(load_dataset(path, *SPACES)) == len(
        list(np.concatenate([c.rewards for c in iter_dataset(path, *SPACES)]))
    )


def test_row_groups_without_rows_are_read_and_streamed_past(collected: Path, tmp_path: Path) -> None:
    from rlcore.data.stream import RowGroupStream

    table = pq.read_table(collected).replace_schema_metadata(None)
    path = tmp_path / "empty_groups.parquet"
    with pq.ParquetWriter(path, table.schema) as writer:
        for part in (table.slice(0, 0), table.slice(0, 1500), table.slice(0, 0), table.slice(1500)):
            writer.write_table(part, row_group_size=1500)
    parquet = pq.ParquetFile(path)
    assert [parquet.metadata.row_group(g).num_rows for g in range(parquet.num_row_groups)] == [0, 1500, 0, 1500]
    assert len(load_dataset(path, *SPACES)) == 3000
    stream = RowGroupStream(path, SPACES[0], SPACES[1], "CartPole-v1", 1500, 64, 0, 0.1, 1000)
    assert stream.groups == [1, 3] and stream.groups_in_buffer == 1
    rng = np.random.default_rng(0)
    assert all(len(stream.batch(step, rng, 64)["rewards"]) == 64 for step in range(0, 200, 10))


@pytest.mark.slow
def test_a_damaged_file_through_the_real_command(project: Path, collected: Path) -> None:
    from conftest import rlcore

    dataset = "data/bad/garbled_middle_real.parquet"
    garbled_middle(collected, project / dataset)
    before = snapshot(project)
    overrides = [f"dataset.path={dataset}", "dataset.in_memory=false", *FINISHED]
    args = [a for s in overrides for a in ("--set", s)]
    result = rlcore("train", "--params", "offline.yaml", *args, cwd=project, check=False)
    refused(result.returncode, result.stderr, dataset, "corrupt (page checksum mismatch")
    assert snapshot(project) == before


# --- dataset.agents (issue 29) ----------------------------------------------------------------------------------


@pytest.mark.parametrize("in_memory", [True, False])
def test_dataset_agents_on_a_dataset_without_agents_is_refused_and_keeps_the_finished_run(
    project: Path, in_memory: bool
) -> None:
    """A single-agent dataset has no ``agent`` column: ``dataset.agents`` is refused in one line naming the key and
    the file, read whole or streamed, and the finished run stays byte for byte as it was."""
    before = snapshot(project)
    status, stderr = train(project, "data/dataset.parquet", in_memory, "dataset.agents=[agent_0]", *FINISHED)
    refused(status, stderr, "dataset.agents:", "data/dataset.parquet has no agent column", "remove dataset.agents")
    assert snapshot(project) == before


# --- dataset.groups (issue 29) ----------------------------------------------------------------------------------


@pytest.mark.parametrize("in_memory", [True, False])
def test_dataset_groups_on_a_dataset_without_agents_is_refused_and_keeps_the_finished_run(
    project: Path, in_memory: bool
) -> None:
    """A single-agent dataset has no ``group`` column: ``dataset.groups`` is refused like ``dataset.agents``."""
    before = snapshot(project)
    status, stderr = train(project, "data/dataset.parquet", in_memory, "dataset.groups=[good]", *FINISHED)
    refused(status, stderr, "dataset.groups:", "data/dataset.parquet has no group column", "remove dataset.groups")
    assert snapshot(project) == before


SPREAD = EnvConfig(id="pettingzoo:mpe2.simple_spread_v3", kwargs={"N": 3, "max_cycles": 25})
SPREAD_GROUPS = {"lead": ["agent_0"], "rest": ["agent_1", "agent_2"]}
SPREAD_PLAN = CollectionPlan(2, None, 12, 0.0, False, 0, 40)
"""4 episodes of simple_spread's 3 agents (12 agents' episodes, 300 rows) in row groups of 40."""


def collected_without_groups(valid: Path, target: Path) -> None:
    """The same collection without ``policy.groups``: no group column, no ``groups`` key."""
    collect_dataset(target, SPREAD, None, {"kind": "random"}, SPREAD_PLAN)


def group_column_of_integers(table: pa.Table) -> pa.Table:
    index = table.schema.get_field_index("group")
    return table.set_column(index, "group", pa.array([1] * table.num_rows, pa.int64()))


def ghost_group(metadata: dict[str, Any]) -> None:
    metadata["groups"]["ghost"] = ["agent_9"]


def groups_as_a_list(metadata: dict[str, Any]) -> None:
    metadata["groups"] = list(metadata["groups"])


DATASET_GROUPS_CASES: dict[str, tuple[Corruption | None, str, tuple[str, ...]]] = {
    "a group the dataset does not have": (
        None,
        "[lead, red]",
        ("dataset.groups:", "has no group 'red' (its groups: lead, rest)"),
    ),
    "a misspelt group": (None, "[rst]", ("dataset.groups:", "has no group 'rst'", "(did you mean 'rest'?)")),
    "collected without policy.groups": (
        collected_without_groups,
        "[rest]",
        ("dataset.groups:", "has no group column (it was collected without policy.groups); remove dataset.groups"),
    ),
    "a group the metadata lists without rows": (
        with_metadata(ghost_group),
        "[ghost]",
        ("dataset.groups:", "has no rows of group 'ghost'"),
    ),
    "the metadata's groups not an object": (
        with_metadata(groups_as_a_list),
        "[rest]",
        ("unreadable rlcore metadata ('groups' is not an object",),
    ),
    "a group column of integers": (
        rewritten(group_column_of_integers, keep_metadata=False),
        "[rest]",
        ("column 'group' has type int64, expected string",),
    ),
}
"""``dataset.groups`` on a simple_spread dataset collected with :data:`SPREAD_GROUPS` (corrupted by the first item
where it is not None): ``rlcore train --params offline-spread.yaml --set dataset.groups=GROUPS``, refused in one line
naming the file (and ``dataset.groups`` where the groups named are what is wrong, not the file), read whole and
streamed; the finished run on ``[rest]`` stays byte for byte as it was."""


@pytest.fixture(scope="module")
def spread_project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A project holding a finished BC run on the ``rest`` group's rows of a grouped simple_spread dataset."""
    root = tmp_path_factory.mktemp("spread-project")
    tree = yaml.safe_load(preset_text("offline.yaml"))
    tree |= {"name": "bc-spread", "env": {"id": SPREAD.id, "kwargs": SPREAD.kwargs}}
    (root / "offline-spread.yaml").write_text(yaml.safe_dump(tree))
    (root / "data" / "bad").mkdir(parents=True)
    collect_dataset(
        root / "data" / "spread.parquet", SPREAD, None, {"kind": "random"}, SPREAD_PLAN, groups=SPREAD_GROUPS
    )
    status, stderr = train_spread(root, "data/spread.parquet", True, "dataset.groups=[rest]", *FINISHED)
    assert status == 0, stderr
    assert list((root / "runs" / "bc-spread" / "checkpoints").glob("step_*.pt")), "the finished run has no checkpoint"
    yield root


def train_spread(root: Path, dataset: str, in_memory: bool, *overrides: str) -> tuple[Any, str]:
    sets = [f"dataset.path={dataset}", f"dataset.in_memory={str(in_memory).lower()}", *overrides]
    return run_in_process(["train", "--params", "offline-spread.yaml", *[a for s in sets for a in ("--set", s)]], root)


@pytest.mark.parametrize("in_memory", [True, False])
@pytest.mark.parametrize("name", list(DATASET_GROUPS_CASES))
def test_dataset_groups_case_is_refused_in_one_line_and_keeps_the_finished_run(
    spread_project: Path, name: str, in_memory: bool
) -> None:
    corrupt, groups, fragments = DATASET_GROUPS_CASES[name]
    dataset = "data/spread.parquet"
    if corrupt is not None:
        dataset = f"data/bad/{name.replace(' ', '_').replace('.', '_')}.parquet"
        if not (spread_project / dataset).exists():
            corrupt(spread_project / "data" / "spread.parquet", spread_project / dataset)
    before = snapshot(spread_project)
    status, stderr = train_spread(spread_project, dataset, in_memory, f"dataset.groups={groups}", *FINISHED)
    refused(status, stderr, dataset, *fragments)
    assert snapshot(spread_project) == before
