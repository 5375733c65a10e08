"""Offline datasets: collection into Parquet (schema v1), validated loading, splitting, and bad files.

Unit tests call ``collect_dataset`` / ``DatasetWriter`` / ``load_dataset`` in-process. The bad-dataset
tests go through the ``rlcore train --params offline.yaml`` command (its entry point, run in this process by
``cli_support.run_in_process``): each must end with the one-line error contract (exit 2, no traceback, one
``error: ...`` line naming the file and the problem) and must not write or replace any run.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import gymnasium as gym
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from cli_support import run_in_process
from conftest import one_line_error, preset_text, sets
from hypothesis import given, settings
from hypothesis import strategies as st

from rlcore.data.collection import CollectionPlan, collect_dataset
from rlcore.data.reader import OfflineData, load_dataset, read_metadata
from rlcore.data.schema import SCHEMA_VERSION, DatasetError
from rlcore.data.writer import DatasetWriter
from rlcore.envs.config import EnvConfig
from rlcore.envs.vector import describe_space

DATASET = Path("data/dataset.parquet")
TRAIN_SMALL = ["train.max_steps=10", "train.eval_every=10", "train.eval_episodes=1"]
RUN_DIR = Path("runs/bc-cartpole")


def collect(path: Path, env_id: str, steps: int, num_envs: int, row_group_size: int, seed: int = 0) -> dict:
    return collect_dataset(
        path,
        EnvConfig(id=env_id),
        None,
        {"kind": "random"},
        CollectionPlan(
            num_envs=num_envs,
            steps=steps,
            episodes=None,
            epsilon=0.0,
            deterministic=False,
            seed=seed,
            row_group_size=row_group_size,
        ),
    )


def spaces_of(env_id: str) -> tuple[gym.Space, gym.Space]:
    env = gym.make(env_id)
    try:
        return env.observation_space, env.action_space
    finally:
        env.close()


def load(path: Path, env_id: str = "CartPole-v1") -> OfflineData:
    observation_space, action_space = spaces_of(env_id)
    return load_dataset(path, observation_space, action_space, env_id)


def episode_bounds(episode_id: np.ndarray) -> list[tuple[int, int]]:
    """(first, last) row of each run of equal episode ids, in row order."""
    starts = np.flatnonzero(np.r_[True, episode_id[1:] != episode_id[:-1]])
    ends = np.r_[starts[1:], len(episode_id)] - 1
    return list(zip(starts.tolist(), ends.tolist(), strict=True))


# --- collection (in-process) ------------------------------------------------------------------

CARTPOLE_STEPS, CARTPOLE_ENVS = 3000, 4


@pytest.fixture(scope="module")
def cartpole_dataset(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    path = tmp_path_factory.mktemp("cartpole") / "dataset.parquet"
    metadata = collect(path, "CartPole-v1", CARTPOLE_STEPS, CARTPOLE_ENVS, row_group_size=500)
    return path, metadata


def test_collection_streams_several_row_groups_without_leaving_temp_files(cartpole_dataset: tuple[Path, dict]) -> None:
    path, _ = cartpole_dataset
    assert pq.ParquetFile(path).metadata.num_row_groups > 1
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]


def test_a_single_agent_dataset_has_the_columns_and_rows_digest_it_had_before_agent_columns(
    cartpole_dataset: tuple[Path, dict],
) -> None:
    """Multi-agent datasets add an ``agent`` column and an ``agents`` metadata key; a single-agent one has neither,
    and its rows_sha256 is the one this collection recorded before they existed (pinned from that code)."""
    path, metadata = cartpole_dataset
    assert pq.ParquetFile(path).schema_arrow.names == [
        "episode_id",
        "step",
        "observation",
        "action",
        "reward",
        "next_observation",
        "terminated",
        "truncated",
        "log_prob",
    ]
    assert "agents" not in metadata and load(path).agent is None
    assert metadata["rows_sha256"] == "c882e1c2a423c2a0cc65f6fb830d93b00102888d1d4c77247b7268ba23702bca"


def test_collection_writes_the_requested_number_of_steps(cartpole_dataset: tuple[Path, dict]) -> None:
    path, metadata = cartpole_dataset
    data = load(path)
    assert CARTPOLE_STEPS <= len(data) < CARTPOLE_STEPS + CARTPOLE_ENVS
    assert metadata["transitions"] == len(data) == pq.ParquetFile(path).metadata.num_rows


def test_collected_episodes_are_contiguous_in_step_order_and_end_terminal_or_truncated(
    cartpole_dataset: tuple[Path, dict],
) -> None:
    path, metadata = cartpole_dataset
    table = pq.read_table(path)  # the file's own row order, not load_dataset's sort
    episode_id = table.column("episode_id").to_numpy()
    step = table.column("step").to_numpy()
    terminated = table.column("terminated").to_numpy(zero_copy_only=False)
    truncated = table.column("truncated").to_numpy(zero_copy_only=False)
    bounds = episode_bounds(episode_id)
    assert len(bounds) == len(np.unique(episode_id)) == metadata["episodes"]  # each episode in one block
    ends = np.zeros(len(step), dtype=bool)
    for first, last in bounds:
        np.testing.assert_array_equal(step[first : last + 1], np.arange(last - first + 1))
        assert terminated[last] or truncated[last]
        ends[last] = True
    assert not (terminated | truncated)[~ends].any(), "an episode ends before its last row"


def test_collected_transitions_chain_within_episodes(cartpole_dataset: tuple[Path, dict]) -> None:
    """next_observation of step t is the observation of step t+1 (no reset leaks into an episode)."""
    data = load(cartpole_dataset[0])
    same_episode = data.episode_id[1:] == data.episode_id[:-1]
    np.testing.assert_array_equal(data.next_obs[:-1][same_episode], data.obs[1:][same_episode])
    starts = np.r_[0, np.flatnonzero(~same_episode) + 1]
    assert np.all(np.abs(data.obs[starts]) <= 0.05)  # CartPole's reset states


def test_collected_metadata_describes_env_spaces_policy_and_returns(cartpole_dataset: tuple[Path, dict]) -> None:
    path, returned = cartpole_dataset
    metadata = read_metadata(path)
    assert metadata == json.loads(json.dumps(returned))
    assert metadata["schema_version"] == SCHEMA_VERSION == 1
    assert metadata["env"] == {"id": "CartPole-v1", "kwargs": {}}
    observation_space, action_space = spaces_of("CartPole-v1")
    assert metadata["observation_space"] == describe_space(observation_space)
    assert metadata["action_space"] == {"type": "discrete", "n": 2, "start": 0}
    assert metadata["policy"]["kind"] == "random"
    data = load(path)
    episodes = np.unique(data.episode_id)
    returns = np.array([data.rewards[data.episode_id == e].sum(dtype=np.float64) for e in episodes])
    assert metadata["episodes"] == len(episodes)
    stats = metadata["episode_return"]
    assert stats["mean"] == pytest.approx(returns.mean())
    assert stats["std"] == pytest.approx(returns.std())
    assert stats["min"] == pytest.approx(returns.min())
    assert stats["max"] == pytest.approx(returns.max())


def test_random_discrete_log_prob_is_uniform(cartpole_dataset: tuple[Path, dict]) -> None:
    log_prob = pq.read_table(cartpole_dataset[0]).column("log_prob")
    assert log_prob.null_count == 0
    np.testing.assert_allclose(log_prob.to_numpy(), -math.log(2), rtol=1e-6)


def test_random_box_actions_are_float32_within_bounds_with_uniform_log_prob(tmp_path: Path) -> None:
    path = tmp_path / "pendulum.parquet"
    metadata = collect(path, "Pendulum-v1", steps=600, num_envs=2, row_group_size=256)
    data = load(path, "Pendulum-v1")
    assert data.actions.shape == (len(data), 1)
    assert data.actions.dtype == np.float32
    assert np.all(data.actions >= -2.0) and np.all(data.actions <= 2.0)
    assert data.actions.std() > 0.5  # spread over the box, not a constant
    assert metadata["action_space"]["type"] == "box"
    assert pq.read_table(path).schema.field("action").type == pa.list_(pa.float32(), 1)
    log_prob = pq.read_table(path).column("log_prob")
    assert log_prob.null_count == 0
    np.testing.assert_allclose(log_prob.to_numpy(), -math.log(4.0), rtol=1e-6)


# --- split_by_episode -------------------------------------------------------------------------


def test_split_by_episode_keeps_each_episode_on_one_side(cartpole_dataset: tuple[Path, dict]) -> None:
    data = load(cartpole_dataset[0])
    train, validation = data.split_by_episode(0.2, seed=7)
    assert validation is not None
    assert not set(np.unique(train.episode_id)) & set(np.unique(validation.episode_id))
    assert len(train) + len(validation) == len(data)
    # rows stay whole: every episode's rows on its side, in order
    for part in (train, validation):
        for episode in np.unique(part.episode_id):
            rows = part.episode_id == episode
            np.testing.assert_array_equal(part.rewards[rows], data.rewards[data.episode_id == episode])


def test_split_by_episode_holds_out_the_requested_share_of_episodes(cartpole_dataset: tuple[Path, dict]) -> None:
    data = load(cartpole_dataset[0])
    episodes = len(np.unique(data.episode_id))
    _, validation = data.split_by_episode(0.2, seed=7)
    assert validation is not None
    held_out = len(np.unique(validation.episode_id))
    assert held_out == round(0.2 * episodes)
    assert len(validation) / len(data) == pytest.approx(0.2, abs=0.08)


def test_split_by_episode_is_deterministic_for_a_seed(cartpole_dataset: tuple[Path, dict]) -> None:
    data = load(cartpole_dataset[0])
    _, first = data.split_by_episode(0.2, seed=3)
    _, again = data.split_by_episode(0.2, seed=3)
    _, other = data.split_by_episode(0.2, seed=4)
    assert first is not None and again is not None and other is not None
    np.testing.assert_array_equal(first.episode_id, again.episode_id)
    np.testing.assert_array_equal(first.obs, again.obs)
    assert not np.array_equal(np.unique(first.episode_id), np.unique(other.episode_id))


def test_split_by_episode_with_no_fraction_keeps_everything(cartpole_dataset: tuple[Path, dict]) -> None:
    data = load(cartpole_dataset[0])
    train, validation = data.split_by_episode(0.0, seed=0)
    assert validation is None and train is data


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 20), min_size=2, max_size=40),
    fraction=st.floats(0.01, 0.99),
    seed=st.integers(0, 2**32 - 1),
)
def test_split_by_episode_never_splits_an_episode_and_leaves_both_sides_non_empty(
    lengths: list[int], fraction: float, seed: int
) -> None:
    episode_id = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
    n = len(episode_id)
    data = OfflineData(
        obs=np.arange(n * 4, dtype=np.float32).reshape(n, 4),
        actions=np.zeros(n, dtype=np.int64),
        rewards=np.arange(n, dtype=np.float32),
        next_obs=np.zeros((n, 4), dtype=np.float32),
        terminated=np.zeros(n, dtype=bool),
        truncated=np.zeros(n, dtype=bool),
        episode_id=episode_id,
        metadata={},
    )
    train, validation = data.split_by_episode(fraction, seed)
    assert validation is not None
    train_ids, validation_ids = set(train.episode_id.tolist()), set(validation.episode_id.tolist())
    assert train_ids and validation_ids and not train_ids & validation_ids
    assert train_ids | validation_ids == set(range(len(lengths)))
    assert len(train) + len(validation) == n
    assert abs(len(validation_ids) - fraction * len(lengths)) <= 1.0  # rounded, at least 1, at most all but 1


# --- a user's own Parquet file ------------------------------------------------------------------


def user_table(episode_lengths: list[int], rng: np.random.Generator) -> pa.Table:
    """CartPole transitions in the documented columns, written without rlcore (no metadata, no log_prob)."""
    rows = sum(episode_lengths)
    vector = pa.list_(pa.float32(), 4)
    obs = rng.uniform(-0.2, 0.2, (rows, 4)).astype(np.float32)
    terminated = np.zeros(rows, dtype=bool)
    terminated[np.cumsum(episode_lengths) - 1] = True
    return pa.table(
        {
            "episode_id": pa.array(np.repeat(np.arange(len(episode_lengths)), episode_lengths), pa.int64()),
            "step": pa.array(np.concatenate([np.arange(n) for n in episode_lengths]), pa.int32()),
            "observation": pa.FixedSizeListArray.from_arrays(pa.array(obs.reshape(-1)), 4).cast(vector),
            "action": pa.array(rng.integers(0, 2, rows), pa.int64()),
            "reward": pa.array(np.ones(rows), pa.float32()),
            "next_observation": pa.FixedSizeListArray.from_arrays(pa.array((obs + 0.01).reshape(-1)), 4).cast(vector),
            "terminated": pa.array(terminated),
            "truncated": pa.array(np.zeros(rows, dtype=bool)),
        }
    )


def test_user_parquet_without_rlcore_metadata_loads_against_the_env(tmp_path: Path) -> None:
    table = user_table([5, 8, 3], np.random.default_rng(0))
    assert table.schema.metadata is None
    path = tmp_path / "mine.parquet"
    pq.write_table(table, path)
    assert read_metadata(path) == {}
    data = load(path)
    assert len(data) == 16 and data.metadata == {}
    assert data.obs.shape == (16, 4) and data.obs.dtype == np.float32
    np.testing.assert_array_equal(data.obs.reshape(-1), table.column("observation").combine_chunks().values)
    np.testing.assert_array_equal(data.actions, table.column("action").to_numpy())
    np.testing.assert_array_equal(data.terminated, table.column("terminated").to_numpy(zero_copy_only=False))


def test_user_parquet_episodes_in_any_order_load_as_they_are(tmp_path: Path) -> None:
    ordered = user_table([5, 8, 3], np.random.default_rng(1))
    rows = np.r_[13:16, 0:5, 5:13]  # episodes 2, 0, 1: still grouped by episode in step order
    path = tmp_path / "episodes_reordered.parquet"
    pq.write_table(ordered.take(rows), path)
    data = load(path)
    np.testing.assert_array_equal(data.episode_id, ordered.column("episode_id").to_numpy()[rows])
    np.testing.assert_array_equal(data.obs.reshape(-1), vectors(ordered, "observation")[rows].reshape(-1))


def test_user_parquet_rows_not_grouped_by_episode_in_step_order_are_refused(tmp_path: Path) -> None:
    """Rows in any order could not be streamed (dataset.in_memory: false) without sorting the file, so neither
    read accepts them (tests/faults/test_dataset_cases.py checks that both refuse them alike)."""
    ordered = user_table([5, 8, 3], np.random.default_rng(1))
    path = tmp_path / "shuffled.parquet"
    pq.write_table(ordered.take(np.r_[0:5, 6, 5, 7:16]), path)  # episode 1's steps 0 and 1 swapped
    with pytest.raises(DatasetError, match=r"row 5 is episode 1 step 1, after episode 0 step 4 .*grouped by episode"):
        load(path)


# --- atomic writing ------------------------------------------------------------------------------


def test_aborted_writer_leaves_the_previous_file_byte_identical_and_no_temp_files(tmp_path: Path) -> None:
    path = tmp_path / "data" / "dataset.parquet"
    collect(path, "CartPole-v1", steps=200, num_envs=2, row_group_size=64)
    before = path.read_bytes()
    observation_space, action_space = spaces_of("CartPole-v1")
    writer = DatasetWriter(path, observation_space, action_space, {"env": {"id": "CartPole-v1"}}, row_group_size=8)
    rng = np.random.default_rng(0)
    for length in (10, 20, 30):  # enough rows to flush row groups into the temporary file
        obs = rng.normal(size=(length, 4)).astype(np.float32)
        writer.add_episode(
            obs,
            rng.integers(0, 2, length),
            np.ones(length),
            obs,
            np.r_[np.zeros(length - 1, bool), True],
            np.zeros(length, bool),
            None,
        )
    assert len(list(path.parent.iterdir())) == 2  # the previous file and the writer's temporary one
    writer.abort()
    assert path.read_bytes() == before
    assert [p.name for p in path.parent.iterdir()] == [path.name]


def test_aborted_writer_without_a_previous_file_leaves_nothing(tmp_path: Path) -> None:
    path = tmp_path / "dataset.parquet"
    observation_space, action_space = spaces_of("CartPole-v1")
    writer = DatasetWriter(path, observation_space, action_space, {}, row_group_size=4)
    writer.add_episode(
        np.zeros((5, 4)), np.zeros(5), np.ones(5), np.zeros((5, 4)), np.r_[np.zeros(4, bool), True], np.zeros(5), None
    )
    writer.abort()
    assert list(tmp_path.iterdir()) == []


# --- bad datasets through the real CLI -----------------------------------------------------------


@pytest.fixture(scope="module")
def valid_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small valid dataset from `rlcore collect` with the random policy (tests copy it, never change it)."""
    root = tmp_path_factory.mktemp("collect")
    (root / "offline.yaml").write_text(preset_text("offline.yaml"))
    overrides = ["collect.policy=random", "collect.steps=1500", "collect.num_envs=4"]
    collected = run_in_process(["collect", "--params", "offline.yaml", *sets(overrides)], root, limit=120)
    assert collected.returncode == 0, collected
    path = root / DATASET
    assert read_metadata(path)["policy"]["kind"] == "random"
    return path


@pytest.fixture
def offline_project(project: Path) -> Path:
    (project / "offline.yaml").write_text(preset_text("offline.yaml"))
    (project / DATASET).parent.mkdir(parents=True, exist_ok=True)
    return project


def train(root: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return run_in_process(["train", "--params", "offline.yaml", *sets([*TRAIN_SMALL, *extra])], root, limit=120)


def hashes(folder: Path) -> dict[str, str]:
    return {
        p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def set_column(table: pa.Table, name: str, values: pa.Array, kind: pa.DataType | None = None) -> pa.Table:
    index = table.schema.get_field_index(name)
    return table.set_column(index, pa.field(name, kind or values.type), values)


def vectors(table: pa.Table, name: str) -> np.ndarray:
    column = table.column(name).combine_chunks()
    return column.values.to_numpy().reshape(len(column), column.type.list_size).copy()


def vector_array(values: np.ndarray) -> pa.Array:
    return pa.FixedSizeListArray.from_arrays(pa.array(values.reshape(-1), pa.float32()), values.shape[1])


def drop_reward(table: pa.Table) -> pa.Table:
    return table.drop_columns(["reward"])


def reward_as_string(table: pa.Table) -> pa.Table:
    return set_column(table, "reward", table.column("reward").cast(pa.string()))


def terminated_as_int(table: pa.Table) -> pa.Table:
    return set_column(table, "terminated", table.column("terminated").cast(pa.int64()))


def three_observation_values(table: pa.Table) -> pa.Table:
    return set_column(table, "observation", vector_array(vectors(table, "observation")[:, :3]))


def action_out_of_range(table: pa.Table) -> pa.Table:
    actions = table.column("action").to_numpy().copy()
    actions[10] = 5
    return set_column(table, "action", pa.array(actions, pa.int64()))


def nan_reward(table: pa.Table) -> pa.Table:
    rewards = table.column("reward").to_numpy().copy()
    rewards[37] = np.nan
    return set_column(table, "reward", pa.array(rewards, pa.float32()))


def infinite_observation(table: pa.Table) -> pa.Table:
    obs = vectors(table, "observation")
    obs[12, 2] = np.inf
    return set_column(table, "observation", vector_array(obs))


def episode_without_end(table: pa.Table) -> pa.Table:
    episode_id = table.column("episode_id").to_numpy()
    last = int(np.flatnonzero(episode_id == 3)[-1])
    columns = {}
    for name in ("terminated", "truncated"):
        values = table.column(name).to_numpy(zero_copy_only=False).copy()
        assert name == "truncated" or values[last], "episode 3 of a random CartPole run should terminate"
        values[last] = False
        columns[name] = values
    for name, values in columns.items():
        table = set_column(table, name, pa.array(values))
    return table


def schema_version_99(table: pa.Table) -> pa.Table:
    metadata = json.loads(table.schema.metadata[b"rlcore"])
    metadata["schema_version"] = 99
    return table.replace_schema_metadata({**table.schema.metadata, b"rlcore": json.dumps(metadata).encode()})


def with_null(name: str) -> Callable[[pa.Table], pa.Table]:
    """Row 5 of column ``name`` set to null (what a user's file may hold: pandas None, a missing value)."""

    def alter(table: pa.Table) -> pa.Table:
        column = table.column(name).combine_chunks()
        mask = np.zeros(len(column), dtype=bool)
        mask[5] = True
        if pa.types.is_fixed_size_list(column.type):
            values = pa.FixedSizeListArray.from_arrays(column.values, column.type.list_size, mask=pa.array(mask))
        else:
            values = pa.array(column.to_numpy(zero_copy_only=False), column.type, mask=mask)
        return set_column(table, name, values, column.type)

    return alter


BAD_TABLES: dict[str, tuple[Callable[[pa.Table], pa.Table], str]] = {
    "missing_column": (drop_reward, "missing column 'reward'"),
    "reward_as_string": (reward_as_string, "column 'reward' has type string, expected floating"),
    "terminated_as_int": (terminated_as_int, "column 'terminated' has type int64, expected boolean"),
    "observation_shape": (
        three_observation_values,
        "column 'observation' holds 3 values per row, but CartPole-v1 observations have 4",
    ),
    "action_out_of_range": (action_out_of_range, "action 5 is outside CartPole-v1's 2 discrete actions"),
    "nan_reward": (nan_reward, "1 rows with a NaN or infinite reward (first at row 37)"),
    "infinite_observation": (infinite_observation, "1 rows with a NaN or infinite observation (first at row 12)"),
    "episode_without_end": (episode_without_end, "episode 3 does not end with a terminated or truncated row"),
    "schema_version_99": (schema_version_99, "dataset schema version 99; this rlcore reads version 1"),
    "null_observation": (with_null("observation"), "column 'observation' has 1 null values"),
}


def write_bad(valid: Path, target: Path, alter: Callable[[pa.Table], pa.Table]) -> None:
    """Rewrite ``valid`` through ``alter``, keeping its rlcore metadata (file key-value metadata)."""
    rlcore_metadata = pq.ParquetFile(valid).metadata.metadata[b"rlcore"]
    table = pq.read_table(valid).replace_schema_metadata({b"rlcore": rlcore_metadata})
    altered = alter(table)
    if altered.schema.metadata is None:  # set_column may drop schema metadata: keep the file's provenance
        altered = altered.replace_schema_metadata({b"rlcore": rlcore_metadata})
    pq.write_table(altered, target)
    if alter is not schema_version_99:
        assert read_metadata(target)["schema_version"] == 1


@pytest.mark.parametrize("case", list(BAD_TABLES))
def test_bad_dataset_is_refused_in_one_line_without_a_run(
    offline_project: Path, valid_dataset: Path, case: str
) -> None:
    alter, problem = BAD_TABLES[case]
    write_bad(valid_dataset, offline_project / DATASET, alter)
    one_line_error(train(offline_project), str(DATASET), problem)
    assert not (offline_project / "runs").exists()


def test_truncated_dataset_is_refused_in_one_line_without_a_run(offline_project: Path, valid_dataset: Path) -> None:
    path = offline_project / DATASET
    shutil.copy(valid_dataset, path)
    with open(path, "r+b") as handle:
        handle.truncate(path.stat().st_size // 2)
    one_line_error(train(offline_project), str(DATASET), "not a readable Parquet file")
    assert not (offline_project / "runs").exists()


def test_missing_dataset_is_refused_in_one_line_without_a_run(offline_project: Path) -> None:
    result = train(offline_project, "dataset.path=data/nowhere.parquet")
    one_line_error(result, "data/nowhere.parquet", "dataset not found")
    assert not (offline_project / "runs").exists()


@pytest.mark.slow
def test_bad_dataset_does_not_replace_a_finished_offline_run(offline_project: Path, valid_dataset: Path) -> None:
    path = offline_project / DATASET
    shutil.copy(valid_dataset, path)
    first = train(offline_project)
    assert first.returncode == 0, first.stderr
    checkpoints = list((offline_project / RUN_DIR / "checkpoints").glob("step_*.pt"))
    assert checkpoints, "the valid dataset should train into checkpoints"
    before = hashes(offline_project / "runs")
    write_bad(valid_dataset, path, nan_reward)
    one_line_error(train(offline_project), str(DATASET), "NaN or infinite reward")
    assert hashes(offline_project / "runs") == before


@pytest.mark.parametrize("name", ["episode_id", "observation", "action", "terminated"])
def test_null_in_a_required_column_is_a_dataset_error(tmp_path: Path, valid_dataset: Path, name: str) -> None:
    path = tmp_path / "nulls.parquet"
    write_bad(valid_dataset, path, with_null(name))
    with pytest.raises(DatasetError, match=rf"^{re.escape(str(path))}: column '{name}' has 1 null value"):
        load(path)


def test_null_log_prob_is_allowed(tmp_path: Path, valid_dataset: Path) -> None:
    path = tmp_path / "unknown_log_prob.parquet"
    write_bad(valid_dataset, path, with_null("log_prob"))
    assert pq.read_table(path).column("log_prob").null_count == 1
    assert len(load(path)) == pq.ParquetFile(path).metadata.num_rows


@pytest.mark.parametrize("raw", [b"{not json", b"[1, 2]"])
def test_unreadable_rlcore_metadata_is_a_dataset_error(tmp_path: Path, valid_dataset: Path, raw: bytes) -> None:
    path = tmp_path / "bad_metadata.parquet"
    table = pq.read_table(valid_dataset).replace_schema_metadata({b"rlcore": raw})
    pq.write_table(table, path)
    with pytest.raises(DatasetError, match=rf"^{re.escape(str(path))}: unreadable rlcore metadata"):
        load(path)


def test_chunked_reading_yields_one_validated_row_group_at_a_time_matching_the_whole_file(
    cartpole_dataset: tuple[Path, dict],
) -> None:
    from rlcore.data.reader import iter_dataset

    path, _ = cartpole_dataset
    whole = load(path)
    observation_space, action_space = spaces_of("CartPole-v1")
    chunks = list(iter_dataset(path, observation_space, action_space, "CartPole-v1"))
    assert len(chunks) == pq.ParquetFile(path).metadata.num_row_groups > 1
    assert max(len(chunk) for chunk in chunks) <= 500  # bounded by the row group size, not the file
    for name in ("obs", "actions", "rewards", "next_obs", "terminated", "truncated", "episode_id"):
        assert np.array_equal(np.concatenate([getattr(c, name) for c in chunks]), getattr(whole, name)), name


# --- collection shards ------------------------------------------------------------------------------


def test_sharded_collection_is_the_shards_back_to_back_with_their_own_seeds(project: Path) -> None:
    from rlcore.params import load_params
    from rlcore.stages import collect_shard, merge_collected_shards

    overrides = ["collect.policy=random", "collect.steps=1000", "collect.num_envs=4", "collect.row_group_size=150"]
    params = load_params(str(project / "params.yaml"), [*overrides, "collect.shards=3"])
    space = gym.make("CartPole-v1")
    parts = []
    for index in range(3):
        path = collect_shard(params, project, index)
        assert path.parent.name == "dataset.parquet.shards"
        parts.append(load_dataset(path, space.observation_space, space.action_space, "CartPole-v1"))
    merged_path = merge_collected_shards(params, project)
    merged = load_dataset(merged_path, space.observation_space, space.action_space, "CartPole-v1")
    for field in ("obs", "actions", "rewards", "next_obs", "terminated", "truncated"):
        assert np.array_equal(getattr(merged, field), np.concatenate([getattr(p, field) for p in parts]))
    offsets = np.cumsum([0] + [len(np.unique(p.episode_id)) for p in parts[:-1]])
    expected_ids = np.concatenate([p.episode_id + offset for p, offset in zip(parts, offsets, strict=True)])
    assert np.array_equal(merged.episode_id, expected_ids)
    assert [s["transitions"] for s in merged.metadata["shards"]] == [len(p) for p in parts]
    assert not np.array_equal(parts[0].obs[:10], parts[1].obs[:10])  # own env seeds: different first episodes
    returns = [merged.rewards[merged.episode_id == e].sum() for e in np.unique(merged.episode_id)]
    assert merged.metadata["episode_return"]["mean"] == pytest.approx(np.mean(returns))
    groups = pq.ParquetFile(merged_path).metadata
    sizes = [groups.row_group(g).num_rows for g in range(groups.num_row_groups)]
    assert sizes[:-1] == [150] * (len(sizes) - 1)  # the shards' short last row groups are regrouped
    assert not merged_path.with_name("dataset.parquet.shards").exists()


def test_a_missing_shard_stops_the_merge_and_keeps_the_previous_dataset(project: Path) -> None:
    from rlcore.common.errors import RLCoreError
    from rlcore.params import load_params
    from rlcore.stages import collect_shard, merge_collected_shards

    overrides = ["collect.policy=random", "collect.steps=300", "collect.num_envs=2"]
    collected = run_in_process(["collect", *sets(overrides)], project, limit=120)
    assert collected.returncode == 0, collected
    before = hashlib.sha256((project / DATASET).read_bytes()).hexdigest()
    params = load_params(str(project / "params.yaml"), [*overrides, "collect.shards=3"])
    collect_shard(params, project, 0)
    collect_shard(params, project, 2)
    with pytest.raises(RLCoreError, match=r"shard-00001-of-00003\.parquet: shard not collected \(1 of 3 missing\)"):
        merge_collected_shards(params, project)
    assert hashlib.sha256((project / DATASET).read_bytes()).hexdigest() == before


def test_more_shards_than_the_budget_is_refused_in_one_line(project: Path) -> None:
    result = run_in_process(
        ["collect", *sets(["collect.policy=random", "collect.steps=3", "collect.shards=4"])], project
    )
    one_line_error(result, "collect.shards", "4 shards need at least as many collect.steps (got 3)")
    assert not (project / DATASET).exists()


def test_a_shard_rolled_out_by_a_policy_depends_on_its_seed_only(project: Path) -> None:
    """The Dask workers run shards in any order, in fresh processes: the data must not depend on that."""
    import torch

    from rlcore.common.files import sha256_file
    from rlcore.params import load_params
    from rlcore.stages import collect_shard, train_stage

    tiny = ["name=tiny", "train.max_steps=1024", "train.eval_every=1024", "train.target_return=null"]
    train_stage(load_params(str(project / "params.yaml"), tiny), project)
    checkpoint = project / "runs" / "tiny" / "checkpoints" / "step_0000001024.pt"
    overrides = [f"collect.policy={checkpoint}", "collect.steps=2000", "collect.shards=2", "collect.num_envs=4"]
    params = load_params(str(project / "params.yaml"), overrides)
    in_order = [sha256_file(collect_shard(params, project, index)) for index in (0, 1)]
    torch.manual_seed(12345)  # whatever ran before in this process
    assert sha256_file(collect_shard(params, project, 1)) == in_order[1]
    assert sha256_file(collect_shard(params, project, 0)) == in_order[0]
    assert in_order[0] != in_order[1]


def test_a_rerun_keeps_the_shards_an_interrupted_collection_finished(
    project: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from rlcore.common.files import sha256_file
    from rlcore.params import load_params
    from rlcore.stages import collect_shard, collect_stage

    overrides = ["collect.policy=random", "collect.steps=900", "collect.shards=3", "collect.num_envs=2"]
    params = load_params(str(project / "params.yaml"), overrides)
    uninterrupted = sha256_file(collect_stage(params, project))
    (project / DATASET).unlink()

    # An interrupted collection left shard 0, and a shard 2 from other params (another seed): only 0 is kept.
    collect_shard(params, project, 0)
    collect_shard(load_params(str(project / "params.yaml"), [*overrides, "collect.seed=5"]), project, 2)
    with caplog.at_level("INFO", logger="rlcore"):
        path = collect_stage(params, project)
    assert "shard 0 of 3 was collected before" in caplog.text
    assert "shard 1 of 3 was collected before" not in caplog.text
    assert "shard 2 of 3 was collected before" not in caplog.text
    assert sha256_file(path) == uninterrupted
    assert "shard" not in read_metadata(path)


# --- streaming a dataset larger than memory ------------------------------------------------------


def test_a_streamed_dataset_visits_every_training_row_and_rebuilds_its_buffer_from_the_step(tmp_path: Path) -> None:
    from rlcore.data.stream import RowGroupStream, validation_mask

    path = tmp_path / "d.parquet"
    collect_dataset(path, EnvConfig(), None, {"kind": "random"}, CollectionPlan(4, 5000, None, 0.0, False, 0, 500))
    env = gym.make("CartPole-v1")
    whole = load_dataset(path, env.observation_space, env.action_space, "CartPole-v1")

    def stream() -> RowGroupStream:
        return RowGroupStream(path, env.observation_space, env.action_space, "CartPole-v1", 1500, 100, 3, 0.2, 10_000)

    first = stream()
    groups = len(first.sizes)
    assert first.sizes[:-1] == [500] * (groups - 1) and groups == -(-len(whole) // 500)  # no small groups between
    assert first.groups_in_buffer == 3

    # Validation: whole episodes, by the seeded hash, never in the training buffer.
    held_out = validation_mask(whole.episode_id, 0.2, 3)
    assert 0 < held_out.sum() < len(whole)
    assert first.validation is not None and np.array_equal(first.validation.obs, whole.obs[held_out])
    train_rows = {row.tobytes() for row in whole.obs[~held_out]}

    # One pass of the schedule loads every row group once: every training row enters the buffer, nothing else.
    seen: set[bytes] = set()
    rng = np.random.default_rng(0)
    for step in range(0, groups * first.swap_every, first.swap_every):
        first.batch(step, rng, 100)
        buffered = first._tensors["obs"].numpy()
        assert len(buffered) <= 1500
        seen |= {row.tobytes() for row in buffered}
    assert seen == train_rows

    # The buffer is a function of the step alone: a fresh stream (a resumed run) draws the same batch.
    first.batch(123, rng, 100)
    again = stream()
    expected = first.batch(123, np.random.default_rng(7), 100)
    drawn = again.batch(123, np.random.default_rng(7), 100)
    assert all(torch.equal(expected[name], drawn[name]) for name in expected)
