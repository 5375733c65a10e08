"""Observation spaces beyond flat vectors: encoders chosen from the space, packed Dict observations, storage in the
observation's own dtype (rollouts, replay, datasets), and the MinAtar/ALE registration. Fast unit tests; the
learning and whole-pipeline runs are in tests/test_pixels.py."""

from __future__ import annotations

import resource
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces

from rlcore.algos.ppo import PPO, PPOConfig
from rlcore.common.errors import ConfigError
from rlcore.config.sections import PolicyConfig
from rlcore.data.reader import iter_dataset, load_dataset, read_metadata
from rlcore.data.replay import ReplayBuffer
from rlcore.data.rollouts import RolloutBuffer
from rlcore.data.writer import DatasetWriter
from rlcore.envs.config import EnvConfig
from rlcore.envs.observations import PackedDict, obs_tensor, pack, storage_dtype
from rlcore.envs.vector import describe_space, make_vector_env, space_from_description
from rlcore.nets.blocks import ObsNormalizer
from rlcore.nets.encoders import DictEncoder, Flatten, NatureCNN, OneHot, SmallCNN, build_encoder, float_mask
from rlcore.nets.policies import ActorCritic

ATARI = spaces.Box(0, 255, (4, 84, 84), np.uint8)  # FrameStackObservation(AtariPreprocessing(...), 4): channels first
MINATAR = spaces.Box(0, 1, (10, 10, 4), np.bool_)  # MinAtar/Breakout-v1: channels last
SIDE_FLIP = spaces.Dict(
    {"image": spaces.Box(0, 255, (8, 8), np.uint8), "vector": spaces.Box(-1.0, 1.0, (3,), np.float32)}
)


# --- 1. encoders chosen from the space -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("space", "kind", "out_features"),
    [
        (spaces.Box(-np.inf, np.inf, (4,), np.float32), Flatten, 4),  # CartPole: today's MLP input
        (spaces.Box(-1.0, 1.0, (2, 3), np.float32), Flatten, 6),  # float matrices are vectors unless told otherwise
        (ATARI, NatureCNN, 512),
        (spaces.Box(0, 255, (84, 84, 3), np.uint8), NatureCNN, 512),
        (MINATAR, SmallCNN, 128),
        (spaces.Discrete(5, start=3), OneHot, 5),
        (PackedDict(SIDE_FLIP), DictEncoder, 128 + 3),
    ],
)
def test_auto_encoder_is_chosen_from_the_observation_space(space: gym.Space, kind: type, out_features: int) -> None:
    encoder = build_encoder(space)
    assert isinstance(encoder, kind)
    assert encoder.out_features == out_features
    sample = obs_tensor(np.stack([space.sample() for _ in range(3)]))
    assert encoder(sample).shape == (3, out_features)


@pytest.mark.parametrize(
    ("shape", "channels", "channels_last"),
    [
        ((84, 84, 4), "auto", True),
        ((4, 84, 84), "auto", False),
        ((10, 10, 10), "auto", True),
        ((3, 64, 64), "last", True),
    ],
)
def test_image_channel_axis_is_detected_or_declared(shape: tuple, channels: str, channels_last: bool) -> None:
    encoder = build_encoder(spaces.Box(0, 255, shape, np.uint8), "auto", channels)  # type: ignore[arg-type]
    assert encoder.channels_last == channels_last  # type: ignore[union-attr]


def test_channels_last_frames_give_what_the_same_network_gives_on_channels_first_frames() -> None:
    torch.manual_seed(0)
    last = build_encoder(spaces.Box(0, 255, (36, 40, 3), np.uint8))
    first = build_encoder(spaces.Box(0, 255, (3, 36, 40), np.uint8))
    first.load_state_dict(last.state_dict())
    frames = torch.randint(0, 256, (2, 36, 40, 3), dtype=torch.uint8)
    assert torch.equal(last(frames), first(frames.permute(0, 3, 1, 2)))


def test_uint8_frames_are_scaled_by_1_over_255_inside_the_network() -> None:
    torch.manual_seed(0)
    raw = build_encoder(ATARI)
    as_floats = build_encoder(spaces.Box(0.0, 1.0, (4, 84, 84), np.float32), "nature_cnn")
    as_floats.load_state_dict(raw.state_dict())
    frames = torch.randint(0, 256, (2, 4, 84, 84), dtype=torch.uint8)
    assert torch.allclose(raw(frames), as_floats(frames.float() / 255), atol=1e-6)
    flat = build_encoder(spaces.Box(0, 255, (1, 1, 2), np.uint8), "flatten")
    assert torch.allclose(flat(frames[:, :1, :1, :2]), frames[:, 0, 0, :2].float() / 255)


def test_one_hot_of_discrete_values_is_hand_computed() -> None:
    encoder = build_encoder(spaces.Discrete(3, start=2))
    assert encoder(torch.tensor([2, 4, 3])).tolist() == [[1, 0, 0], [0, 0, 1], [0, 1, 0]]
    multi = OneHot([2, 3], [0, 1])  # MultiDiscrete([2, 3], start=[0, 1])
    assert multi(torch.tensor([[1, 3], [0, 1]])).tolist() == [[0, 1, 0, 0, 1], [1, 0, 1, 0, 0]]


@pytest.mark.parametrize(
    ("space", "choice", "message"),
    [
        (MINATAR, "nature_cnn", "policy.encoder: nature_cnn needs images of at least 36x36 pixels, but the "),
        (spaces.Box(-1.0, 1.0, (5,), np.float32), "small_cnn", "policy.encoder: small_cnn needs images (H, W[, C])"),
    ],
)
def test_an_encoder_that_does_not_fit_the_space_is_refused_in_one_line(
    space: gym.Space, choice: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")) as info:
        build_encoder(space, choice)  # type: ignore[arg-type]
    assert "\n" not in str(info.value)


def test_flat_box_features_are_the_normalized_observations_flattened_as_before() -> None:
    """What every existing preset trains on must not change: features == normalizer(obs).flatten(1), bit for bit."""
    space = spaces.Box(-np.inf, np.inf, (4,), np.float32)
    policy = ActorCritic(space, spaces.Discrete(2), PolicyConfig(normalize_obs=True))
    policy.obs_normalizer.update(torch.randn(64, 4) * 3 + 1)
    obs = torch.randn(8, 4)
    assert torch.equal(policy.features(obs), policy.obs_normalizer(obs).flatten(start_dim=1))
    assert list(policy.state_dict()) == [
        "obs_normalizer.mean", "obs_normalizer.var", "obs_normalizer.count", *[
            key for key in policy.state_dict() if not key.startswith("obs_normalizer.")
        ]
    ]  # fmt: skip
    assert not any(key.startswith("encoder.") for key in policy.state_dict())


# --- 2. packed Dict observations -------------------------------------------------------------------------------------


def test_dict_observations_pack_into_one_vector_that_the_encoder_unpacks_key_by_key() -> None:
    space = spaces.Dict(
        {"b": spaces.Box(-1.0, 1.0, (2, 2), np.float32), "a": spaces.Discrete(4), "c": spaces.MultiBinary(3)}
    )
    packed = PackedDict(space)
    assert [key for key in space.spaces] == ["a", "b", "c"]  # gymnasium sorts a dict's keys
    assert packed.shape == (1 + 4 + 3,) and packed.dtype == np.float32
    batch = {
        "a": np.array([3, 0]),
        "b": np.arange(8, dtype=np.float32).reshape(2, 2, 2),
        "c": np.array([[1, 0, 1], [0, 0, 0]]),
    }
    vectors = pack(space, batch)
    assert vectors.tolist() == [[3, 0, 1, 2, 3, 1, 0, 1], [0, 4, 5, 6, 7, 0, 0, 0]]
    features = build_encoder(packed)(torch.as_tensor(vectors))
    assert features.tolist() == [  # one-hot a, b flattened, c as it is
        [0, 0, 0, 1, 0, 1, 2, 3, 1, 0, 1],
        [1, 0, 0, 0, 4, 5, 6, 7, 0, 0, 0],
    ]


def test_dict_of_frames_and_small_integers_packs_as_uint8() -> None:
    space = spaces.Dict({"frame": MINATAR, "lives": spaces.Discrete(4)})
    assert PackedDict(space).dtype == np.uint8
    assert storage_dtype(PackedDict(space)) == np.uint8


def test_packed_dict_space_description_round_trips_with_its_key_order() -> None:
    packed = PackedDict(SIDE_FLIP)
    description = describe_space(packed)
    assert description["type"] == "dict" and list(description["spaces"]) == ["image", "vector"]
    restored = space_from_description(description)
    assert restored == packed and isinstance(restored, PackedDict)
    assert restored.shape == packed.shape and restored.dtype == packed.dtype


def test_the_normalizer_leaves_images_and_discrete_values_alone() -> None:
    space = PackedDict(spaces.Dict({"image": spaces.Box(0, 255, (2,), np.uint8), "vector": spaces.Box(-9, 9, (2,))}))
    normalizer = ObsNormalizer(space.shape, clip=10.0, enabled=True, mask=float_mask(space))
    data = torch.tensor([[0.0, 255.0, 1.0, 5.0], [255.0, 0.0, 3.0, 9.0]])
    normalizer.update(data)
    out = normalizer(data)
    assert torch.equal(out[:, :2], data[:, :2])  # the image's pixels pass through
    assert torch.allclose(out[:, 2:], torch.tensor([[-1.0, -1.0], [1.0, 1.0]]), atol=1e-4)
    frames_only = ObsNormalizer(MINATAR.shape, clip=10.0, enabled=True, mask=float_mask(MINATAR))
    assert not frames_only.enabled


def test_a_dict_env_is_built_with_packed_observations_and_other_spaces_are_refused_in_one_line() -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    import dict_obs_env

    env = make_vector_env(EnvConfig(id=f"dict_obs_env:{dict_obs_env.ENV_ID}"), 3)
    obs, _ = env.reset(seed=0)
    assert isinstance(env.single_observation_space, PackedDict)
    assert obs.shape == (3, 64 + 3) and obs.dtype == np.float32
    assert set(np.unique(obs[:, :64])) <= {0.0, 255.0}  # the image, raw
    env.close()
    if "rlcore-tests/TupleObs-v0" not in gym.registry:
        gym.register("rlcore-tests/TupleObs-v0", entry_point=_TupleEnv, max_episode_steps=5)
    with pytest.raises(ConfigError, match="has a Tuple observation space; rlcore supports Box, Discrete and Dict"):
        make_vector_env(EnvConfig(id="rlcore-tests/TupleObs-v0"), 1)


class _TupleEnv(gym.Env):
    observation_space = spaces.Tuple((spaces.Discrete(2), spaces.Discrete(2)))
    action_space = spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):  # type: ignore[no-untyped-def]
        return (0, 0), {}

    def step(self, action):  # type: ignore[no-untyped-def]
        return (0, 0), 0.0, False, False, {}


# --- 3. storage in the observation's dtype ---------------------------------------------------------------------------


def test_rollouts_keep_uint8_frames_and_ppo_updates_on_them() -> None:
    torch.manual_seed(0)
    policy = ActorCritic(ATARI, spaces.Discrete(6), PolicyConfig(hidden_sizes=[32]))
    rollout = RolloutBuffer(4, 2, ATARI.shape, (), torch.int64, storage_dtype_torch(ATARI))
    assert rollout.obs.dtype == torch.uint8 and rollout.obs.element_size() == 1
    rollout.obs.copy_(torch.randint(0, 256, rollout.obs.shape, dtype=torch.uint8))
    rollout.returns.normal_()
    algorithm = PPO(policy, PPOConfig(n_steps=4, batch_size=4, n_epochs=1))
    before = [p.detach().clone() for p in policy.encoder.parameters()]
    metrics = algorithm.update(rollout, 0.0, torch.Generator().manual_seed(0))
    assert all(np.isfinite(value) for value in metrics.values())
    assert any(not torch.equal(a, b) for a, b in zip(before, policy.encoder.parameters(), strict=True))


def storage_dtype_torch(space: gym.Space) -> torch.dtype:
    return torch.from_numpy(np.zeros(1, storage_dtype(space))).dtype


REPLAY_FRAMES = 100_000
REPLAY_LIMIT_MB = 60
"""MinAtar frames are 400 bool bytes: stored once (1.125 rows per transition, rlcore.data.replay), 100k transitions
are 45 MB of frames (two float32 copies would be 320 MB, two bool copies 80 MB)."""


def test_replay_of_100k_minatar_frames_stays_under_60_mb_of_resident_memory() -> None:
    def rss_mb() -> float:
        return float(Path("/proc/self/statm").read_text().split()[1]) * resource.getpagesize() / 2**20

    before = rss_mb()
    replay = ReplayBuffer(REPLAY_FRAMES, MINATAR.shape, (), np.int64, 16, 0.99, 1, storage_dtype(MINATAR))
    frames = np.random.default_rng(0).random((17, 16, *MINATAR.shape)) < 0.1
    ones = np.ones(16, dtype=bool)
    for step in range(REPLAY_FRAMES // 16):
        replay.add(frames[step % 17], np.zeros(16, np.int64), np.ones(16, np.float32), frames[(step + 1) % 17],
                   ~ones, ~ones, ones)  # fmt: skip
    grown = rss_mb() - before
    assert len(replay) == REPLAY_FRAMES and replay.observations.dtype == np.bool_
    batch = replay.sample(32, np.random.default_rng(0))
    assert batch["obs"].dtype == torch.bool and batch["obs"].shape == (32, *MINATAR.shape)
    print(f"replay of {REPLAY_FRAMES:,} MinAtar frames: RSS grew by {grown:.1f} MB")
    assert grown < REPLAY_LIMIT_MB


def test_uint8_atari_dataset_round_trips_through_the_parquet_writer_and_reader(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    path = tmp_path / "atari.parquet"
    writer = DatasetWriter(path, ATARI, spaces.Discrete(6), {"env": {"id": "ALE/Pong-v5", "kwargs": {}}}, 64)
    episodes = []
    for length in (50, 70, 30):
        frames = rng.integers(0, 256, (length + 1, *ATARI.shape), dtype=np.uint8)
        episode = (
            frames[:-1], rng.integers(0, 6, length), rng.standard_normal(length).astype(np.float32), frames[1:],
            np.arange(length) == length - 1, np.zeros(length, bool), None,
        )  # fmt: skip
        writer.add_episode(*episode)
        episodes.append(episode)
    writer.close()
    data = load_dataset(path, ATARI, spaces.Discrete(6), "ALE/Pong-v5")
    assert data.obs.dtype == np.uint8 and data.obs.shape == (150, *ATARI.shape)
    assert np.array_equal(data.obs, np.concatenate([e[0] for e in episodes]))
    assert np.array_equal(data.next_obs, np.concatenate([e[3] for e in episodes]))
    assert np.array_equal(data.actions, np.concatenate([e[1] for e in episodes]))
    streamed = list(iter_dataset(path, ATARI, spaces.Discrete(6), "ALE/Pong-v5"))
    assert np.array_equal(np.concatenate([chunk.obs for chunk in streamed]), data.obs)
    assert read_metadata(path)["rows_sha256"]  # the digest covers the frames' bytes and was verified by the read
    raw = 2 * 150 * int(np.prod(ATARI.shape))
    print(f"150 random Atari frame stacks: {path.stat().st_size / 2**20:.1f} MB on disk, {raw / 2**20:.1f} MB raw")


def test_a_discrete_observation_dataset_round_trips(tmp_path: Path) -> None:
    space = spaces.Discrete(16)
    path = tmp_path / "lake.parquet"
    writer = DatasetWriter(path, space, spaces.Discrete(4), {})
    writer.add_episode(np.array([0, 4, 8]), np.array([1, 1, 2]), np.zeros(3, np.float32), np.array([4, 8, 9]),
                       np.array([False, False, True]), np.zeros(3, bool), None)  # fmt: skip
    writer.close()
    data = load_dataset(path, space, spaces.Discrete(4), "FrozenLake-v1")
    assert data.obs.tolist() == [0, 4, 8] and data.next_obs.tolist() == [4, 8, 9] and data.obs.dtype == np.int64


# --- 4. packages whose envs need registering -------------------------------------------------------------------------


def test_minatar_ids_register_themselves_and_take_evaluation_seeds_above_2_to_the_32() -> None:
    env = make_vector_env(EnvConfig(id="MinAtar/Breakout-v1", kwargs={"max_episode_steps": 100}), 2)
    first, _ = env.reset(seed=3 * 2**48 + 5)
    again, _ = env.reset(seed=3 * 2**48 + 5)
    assert first.dtype == np.bool_ and first.shape == (2, 10, 10, 4)
    assert np.array_equal(first, again)
    env.close()
