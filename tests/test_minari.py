"""``rlcore import-minari``: real Minari datasets (built here with Minari's own writer, no download) to Parquet."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from conftest import PROJECT, one_line_error, rlcore, sets

from rlcore.data.reader import load_dataset, read_metadata

minari = pytest.importorskip("minari")
from minari.data_collector.episode_buffer import EpisodeBuffer  # noqa: E402


@pytest.fixture
def minari_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "minari"
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(home))
    return home


def _minari_from(data, dataset_id: str, env_id: str) -> None:
    """A Minari dataset holding the episodes of ``data`` (rlcore's OfflineData), written by Minari itself."""
    buffers = []
    for number in np.unique(data.episode_id):
        rows = data.episode_id == number
        observations = np.concatenate([data.obs[rows], data.next_obs[rows][-1:]])  # Minari: steps + 1
        buffers.append(
            EpisodeBuffer(
                id=int(number),
                observations=observations,
                actions=data.actions[rows],
                rewards=data.rewards[rows],
                terminations=data.terminated[rows],
                truncations=data.truncated[rows],
                infos={},
            )
        )
    minari.create_dataset_from_buffers(
        dataset_id, buffers, env=env_id, algorithm_name="random", author="rlcore tests", data_format="arrow"
    )


@pytest.mark.slow
def test_a_minari_dataset_converts_row_for_row_and_trains(project: Path, minari_home: Path) -> None:
    rlcore("collect", *sets(["collect.policy=random", "collect.steps=3000", "collect.num_envs=4"]), cwd=project)
    env = gym.make("CartPole-v1")
    collected = project / "data" / "dataset.parquet"
    original = load_dataset(collected, env.observation_space, env.action_space, "CartPole-v1")
    with pytest.warns(UserWarning):  # Minari asks for a code permalink, description...
        _minari_from(original, "cartpole/random-v0", "CartPole-v1")

    result = rlcore("import-minari", "cartpole/random-v0", "--output", "data/from-minari.parquet", cwd=project)
    assert "imported" in result.stderr and "cartpole/random-v0" in result.stderr
    path = project / "data" / "from-minari.parquet"
    converted = load_dataset(path, env.observation_space, env.action_space, "CartPole-v1")
    for field in ("obs", "actions", "rewards", "next_obs", "terminated", "truncated", "episode_id"):
        assert np.array_equal(getattr(converted, field), getattr(original, field)), field
    meta = read_metadata(path)
    assert meta["env"]["id"] == "CartPole-v1"
    assert meta["policy"]["kind"] == "minari" and meta["policy"]["dataset_id"] == "cartpole/random-v0"
    assert meta["transitions"] == len(original) and meta["episodes"] == len(np.unique(original.episode_id))

    # The dataset's own folder works too (a dataset copied from another machine), and BC trains on the file.
    folder = minari_home / "cartpole" / "random-v0"
    rlcore("import-minari", str(folder), "--output", "data/from-folder.parquet", cwd=project)
    assert (project / "data" / "from-folder.parquet").read_bytes() == path.read_bytes()
    shutil.copy(PROJECT / "offline.yaml", project / "offline.yaml")
    train = ["dataset.path=data/from-minari.parquet", "train.max_steps=200", "train.eval_every=100"]
    rlcore("train", "--params", "offline.yaml", *sets(train), cwd=project)
    assert sorted(p.name for p in (project / "runs" / "bc-cartpole" / "checkpoints").iterdir()) == [
        "step_0000000100.pt",
        "step_0000000200.pt",
    ]


@pytest.mark.slow
def test_unsupported_or_unknown_minari_datasets_are_refused_in_one_line(project: Path, minari_home: Path) -> None:
    good = project / "data" / "dataset.parquet"
    good.parent.mkdir()
    good.write_bytes(b"PAR1 a dataset the user wants kept")  # a Parquet file's magic: the writer may replace it
    before = hashlib.sha256(good.read_bytes()).hexdigest()

    result = rlcore("import-minari", "nowhere/nothing-v0", cwd=project, check=False)
    one_line_error(result, "nowhere/nothing-v0: not a local Minari dataset id")

    env = gym.make("FrozenLake-v1")  # Discrete observations: no Box to flatten
    obs, _ = env.reset(seed=0)
    observations, actions, rewards, terminations, truncations = [obs], [], [], [], []
    while True:
        obs, reward, terminated, truncated, _ = env.step(int(env.action_space.sample()))
        observations.append(obs)
        actions.append(0)
        rewards.append(reward)
        terminations.append(terminated)
        truncations.append(truncated)
        if terminated or truncated:
            break
    buffer = EpisodeBuffer(
        id=0,
        observations=np.array(observations),
        actions=np.array(actions),
        rewards=np.array(rewards),
        terminations=np.array(terminations),
        truncations=np.array(truncations),
        infos={},
    )
    with pytest.warns(UserWarning):
        minari.create_dataset_from_buffers("frozenlake/random-v0", [buffer], env="FrozenLake-v1", data_format="arrow")
    result = rlcore("import-minari", "frozenlake/random-v0", cwd=project, check=False)
    one_line_error(result, "frozenlake/random-v0: observation space Discrete(16) is not a Box")
    assert hashlib.sha256(good.read_bytes()).hexdigest() == before
    assert sorted(p.name for p in good.parent.iterdir()) == ["dataset.parquet"]  # no temporary file left
