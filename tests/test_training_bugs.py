"""Regression tests for the training bugs of issue 11 ("Bugs"): each failed before its fix (the next-step
autoreset check and SAC's refusal of unbounded actions predate them: their tests fail with the check removed).

PPO's minibatches over a varying number of valid steps, squashed actions on unbounded Box spaces and
non-finite metrics, SAC's entropy target in env units, the autoreset mode, the off-policy warm-up burst,
n-step replay with ``learning_starts: 0``, Box actions with a 2-D shape, Minari's ``Discrete(start)``
and image observations.
"""

from __future__ import annotations

import json
import logging
import math
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from conftest import PROJECT, one_line_error, rlcore, sets, tool_env
from gymnasium import spaces
from gymnasium.vector import AutoresetMode
from test_user_code_errors import HOSTILE

from rlcore.algos.ppo import PPO, PPOConfig
from rlcore.algos.sac import SAC, SACConfig
from rlcore.algos.td3bc import TD3BC
from rlcore.common.errors import ConfigError
from rlcore.common.files import read_json
from rlcore.config.sections import PolicyConfig
from rlcore.data.rollouts import RolloutBuffer
from rlcore.envs.actions import to_env_actions
from rlcore.envs.config import EnvConfig
from rlcore.envs.vector import check_autoreset, check_spaces, make_vector_env
from rlcore.nets.policies import ActorCritic
from rlcore.params import load_params
from rlcore.stages import train_stage
from rlcore.trainers.metrics import MetricsLog

CARTPOLE_OBS = spaces.Box(-np.inf, np.inf, (4,), np.float32)
SMALL = PolicyConfig(hidden_sizes=[16, 16])

# --- PPO: fixed-size minibatches, guarded advantage normalization ---------------------------------------------


def rollout_with_invalid_steps(num_steps: int, num_envs: int, invalid: int, seed: int = 0) -> RolloutBuffer:
    """A rollout whose first ``invalid`` flat steps are autoreset steps (never trained on)."""
    rollout = RolloutBuffer(num_steps, num_envs, (4,), (), torch.int64)
    rollout.valid.view(-1)[:invalid] = False
    generator = torch.Generator().manual_seed(seed)
    rollout.obs.copy_(torch.randn(num_steps, num_envs, 4, generator=generator))
    rollout.actions.copy_(torch.randint(2, (num_steps, num_envs), generator=generator))
    rollout.advantages.copy_(torch.randn(num_steps, num_envs, generator=generator))
    rollout.returns.copy_(torch.randn(num_steps, num_envs, generator=generator))
    rollout.log_probs.fill_(math.log(0.5))
    return rollout


@pytest.mark.parametrize(
    ("num_steps", "num_envs", "invalid", "batch_size", "expected"),
    [
        (128, 16, 63, 64, [65] + [64] * 30),  # 1985 valid: the 1-sample tail is spread, never a batch of its own
        (128, 16, 60, 64, [65] * 4 + [64] * 27),  # 1988 valid: a 4-sample tail (< half a batch) is spread too
        (32, 16, 12, 256, [256, 244]),  # the default preset: a large tail stays its own minibatch (unchanged)
        (32, 16, 0, 256, [256, 256]),  # divides evenly: unchanged
        (2, 1, 1, 64, [1]),  # fewer valid steps than a batch: one minibatch of all of them
    ],
)
def test_ppo_minibatches_have_no_small_tail(num_steps, num_envs, invalid, batch_size, expected):
    rollout = rollout_with_invalid_steps(num_steps, num_envs, invalid)
    batches = list(rollout.minibatches(batch_size, torch.Generator().manual_seed(0)))
    assert sorted((len(b) for b in batches), reverse=True) == sorted(expected, reverse=True)
    drawn = torch.cat(batches)
    assert sorted(drawn.tolist()) == rollout.flat_valid_indices().tolist()  # every valid step once per epoch


@pytest.mark.parametrize(
    ("num_steps", "num_envs", "invalid", "batch_size"),
    [(128, 16, 63, 64), (2, 1, 1, 2)],  # a 1-sample tail; a rollout with a single valid step
    ids=["one-sample-tail", "one-valid-step"],
)
def test_ppo_update_keeps_weights_finite_with_one_sample_minibatches(num_steps, num_envs, invalid, batch_size):
    torch.manual_seed(0)
    config = PPOConfig(batch_size=batch_size, n_epochs=1, n_steps=num_steps)
    ppo = PPO(ActorCritic(CARTPOLE_OBS, spaces.Discrete(2), SMALL), config)
    before = [p.detach().clone() for p in ppo.policy.parameters()]
    rollout = rollout_with_invalid_steps(num_steps, num_envs, invalid)
    metrics = ppo.update(rollout, 0.0, torch.Generator().manual_seed(0))
    assert all(torch.isfinite(p).all() for p in ppo.policy.parameters())
    assert math.isfinite(metrics["policy_loss"]), metrics
    # Every minibatch's step was taken (a NaN loss would be skipped by optimizer_step, not applied).
    assert getattr(ppo, "skipped_steps", 0) == 0
    assert all(not torch.equal(b, p) for b, p in zip(before, ppo.policy.parameters(), strict=True))


# --- Squashed actions need bounds; non-finite metrics are counted ---------------------------------------------


@pytest.mark.parametrize(
    "action_space",
    [
        spaces.Box(-np.inf, np.inf, (2,), np.float32),
        spaces.Box(np.array([0.0, -1.0], np.float32), np.array([np.inf, 1.0], np.float32)),
    ],
    ids=["unbounded", "half-bounded"],
)
@pytest.mark.parametrize("algo", [TD3BC, SAC], ids=["td3bc", "sac"])
def test_squashing_algorithms_refuse_an_unbounded_box_in_one_line(algo, action_space):
    with pytest.raises(
        ConfigError, match=rf"^algo.name: {algo.name} squashes actions into their bounds, but .* is unbounded"
    ):
        algo.make_policy(CARTPOLE_OBS, action_space, SMALL, algo.Config())


def test_metrics_log_counts_non_finite_values_and_warns_once(tmp_path: Path, caplog: pytest.LogCaptureFixture):
    metrics = MetricsLog(tmp_path / "dvclive", False, 10, 10)  # rows every 10 steps
    with caplog.at_level(logging.WARNING, logger="rlcore"):
        metrics.add({"train/actor_loss": float("nan"), "train/critic_loss": 1.0})
        metrics.add({"train/actor_loss": 2.0, "train/critic_loss": float("inf")})
        metrics.flush(10, {})
        metrics.add({"train/actor_loss": float("nan"), "train/critic_loss": 1.0})
        metrics.flush(20, {"train/episode_return": float("nan")})  # an extra of the row counts too
        metrics.add({"train/actor_loss": 1.0})
        metrics.flush(30, {})
    metrics.close()
    curve = tmp_path / "dvclive" / "plots" / "metrics" / "train" / "non_finite_metrics.tsv"
    rows = [line.split("\t") for line in curve.read_text().splitlines()[1:]]
    assert [(int(step), float(value)) for step, value in rows] == [(10, 2.0), (20, 2.0), (30, 0.0)]
    warnings = [r.getMessage() for r in caplog.records if "non-finite" in r.getMessage()]
    assert len(warnings) == 1 and "train/actor_loss" in warnings[0], warnings
    # The finite values are still averaged as before.
    loss = tmp_path / "dvclive" / "plots" / "metrics" / "train" / "actor_loss.tsv"
    assert [float(line.split("\t")[1]) for line in loss.read_text().splitlines()[1:]] == [2.0, 1.0]


def test_metrics_log_rows_are_dvclives_without_rereading_every_curve_at_each_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Without DVC Studio configured, a row ends without dvclive's Studio update, which re-reads every curve's whole
    TSV file at every ``next_step()`` (quadratic over a run) and is then dropped; the curves and the summary written
    are those of dvclive's own ``next_step()``."""
    import dvclive.live
    from dvclive import Live

    parsed: list[object] = []  # which Live had all its curves re-read, once per call
    parse_metrics = dvclive.live.parse_metrics
    monkeypatch.setattr(dvclive.live, "parse_metrics", lambda live: parsed.append(live) or parse_metrics(live))
    ours = MetricsLog(tmp_path / "ours", False, 10, 10)
    assert not ours.studio
    options = {"resume": False, "dvcyaml": None, "save_dvc_exp": False, "report": None}
    theirs = Live(str(tmp_path / "theirs"), **options)
    for step in (10, 20, 30):
        row = {"train/loss": step / 7, "eval/mean_return": -1.5 * step}
        ours.log(step, row)
        theirs.step = step
        for key, value in row.items():
            theirs.log_metric(key, value)
        theirs.next_step()
    assert len(parsed) == 3 and all(live is theirs for live in parsed)  # dvclive's way: every row; ours: none
    for name in ("plots/metrics/train/loss.tsv", "plots/metrics/eval/mean_return.tsv", "metrics.json"):
        assert (tmp_path / "ours" / name).read_text() == (tmp_path / "theirs" / name).read_text(), name


# --- SAC: entropy measured in the squashed [-1, 1] space ------------------------------------------------------


def sac_update_with_bounds(bound: float) -> tuple[dict[str, float], float]:
    """One SAC update on a Box(-bound, bound, (2,)) action space; weights and batch fixed, actions scaled."""
    torch.manual_seed(0)
    config = SACConfig(batch_size=32, learning_starts=0)
    action_space = spaces.Box(-bound, bound, (2,), np.float32)
    sac = SAC(SAC.make_policy(CARTPOLE_OBS, action_space, SMALL, config), config)
    generator = torch.Generator().manual_seed(1)
    batch = {
        "obs": torch.randn(32, 4, generator=generator),
        "actions": (torch.rand(32, 2, generator=generator) * 2 - 1) * bound,
        "rewards": torch.randn(32, generator=generator),
        "next_obs": torch.randn(32, 4, generator=generator),
        "discounts": torch.full((32,), 0.99),
    }
    torch.manual_seed(2)
    metrics = sac.update(batch, 0.0)
    return metrics, sac.log_alpha.item()


def test_sac_entropy_and_its_target_do_not_depend_on_the_action_bounds():
    # The same network, batch and noise with bounds +-1 and +-100 (or +-0.1): the policy over the squashed
    # [-1, 1] actions is the same, so its entropy, the temperature's update and every loss must be too.
    unit, unit_alpha = sac_update_with_bounds(1.0)
    for bound in (100.0, 0.1):
        scaled, scaled_alpha = sac_update_with_bounds(bound)
        for key in ("entropy", "actor_loss", "critic_loss", "q_mean"):
            assert scaled[key] == pytest.approx(unit[key], rel=1e-4, abs=1e-5), (bound, key, scaled, unit)
        assert scaled_alpha == pytest.approx(unit_alpha, abs=1e-6), bound


# --- The autoreset mode is checked ----------------------------------------------------------------------------


def test_check_autoreset_refuses_a_same_step_vector_env():
    same_step = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 2, autoreset_mode=AutoresetMode.SAME_STEP)
    next_step = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 2)
    try:
        with pytest.raises(ConfigError, match=r"^env: CartPole-v1 resets with autoreset_mode=SameStep; "):
            check_autoreset("CartPole-v1", same_step)
        check_autoreset("CartPole-v1", next_step)  # gymnasium's default: accepted
    finally:
        same_step.close()
        next_step.close()


@pytest.mark.parametrize(
    ("vectorization", "message"),
    [
        ("sync", r"^env: CartPole-v1 resets with autoreset_mode=SameStep"),
        ("auto", r"^env: CartPole-v1 cannot be built \(vector_entry_point vectorization\): .*vector_kwargs"),
    ],
)
def test_same_step_autoreset_through_env_kwargs_is_refused(vectorization: str, message: str):
    # env.kwargs go to gym.make_vec, whose vector_kwargs reach the vector env: the params path to SameStep.
    params = load_params(
        PROJECT / "params.yaml",
        [f"env.vectorization={vectorization}", "env.kwargs={vector_kwargs: {autoreset_mode: SameStep}}"],
    )
    with pytest.raises(ConfigError, match=message):
        make_vector_env(params.env, 2)


# --- The off-policy loop: no warm-up burst, no update from an empty replay ------------------------------------

QUICK_DQN = [
    "env.num_envs=4",
    "policy.hidden_sizes=[16, 16]",
    "algo.batch_size=16",
    "train.eval_episodes=1",
    "train.target_return=null",
    "train.progress_bar=off",
]


def test_first_off_policy_update_phase_is_one_phase_worth(tmp_path: Path):
    # learning_starts 200, then a phase every 64 env steps of 0.5 gradient steps per env step: the run's
    # 64 env steps after the warm-up earn 32 gradient steps (the warm-up's 200 random steps earn none).
    overrides = [
        *QUICK_DQN,
        "algo.learning_starts=200",
        "algo.train_freq=64",
        "algo.gradient_steps_per_sample=0.5",
        "train.max_steps=264",
        "train.eval_every=264",
    ]
    params = load_params(PROJECT / "configs" / "dqn-cartpole.yaml", overrides)
    train_stage(params, tmp_path)
    summary = read_json(tmp_path / "runs" / params.name / "train_summary.json")
    assert summary["env_steps"] == 264
    assert summary["gradient_steps"] == 32, summary


def test_n_step_replay_with_learning_starts_0_waits_for_a_batch(tmp_path: Path):
    overrides = [
        *QUICK_DQN,
        "algo.learning_starts=0",
        "algo.n_step=3",
        "algo.train_freq=4",
        "algo.gradient_steps_per_sample=1.0",
        "train.max_steps=64",
        "train.eval_every=64",
    ]
    params = load_params(PROJECT / "configs" / "dqn-cartpole.yaml", overrides)
    train_stage(params, tmp_path)
    summary = read_json(tmp_path / "runs" / params.name / "train_summary.json")
    # Updates start once the replay holds a batch of 16 (n-step windows fill after 3 vector steps).
    assert 0 < summary["gradient_steps"] < 64, summary


# --- Box actions with a 2-D shape -----------------------------------------------------------------------------


class MatrixActionEnv(gym.Env):
    """Box(-1, 1, (2, 3)) actions; the reward is higher the closer the action is to a fixed target matrix."""

    observation_space = spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = spaces.Box(-1.0, 1.0, (2, 3), np.float32)
    target = np.array([[0.5, -0.5, 0.0], [0.25, 0.0, -0.25]], np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.np_random.uniform(-1, 1, 3).astype(np.float32), {}

    def step(self, action):
        assert np.shape(action) == (2, 3), np.shape(action)
        reward = -float(np.square(np.asarray(action) - self.target).sum())
        return self.np_random.uniform(-1, 1, 3).astype(np.float32), reward, False, False, {}


if "rlcore-test/MatrixAction-v0" not in gym.registry:
    gym.register("rlcore-test/MatrixAction-v0", entry_point=MatrixActionEnv, max_episode_steps=8)


@pytest.mark.parametrize(
    ("preset", "extra"),
    [
        ("params.yaml", ["algo.n_steps=8", "algo.batch_size=16"]),
        ("configs/sac-pendulum.yaml", ["algo.learning_starts=32", "algo.batch_size=16"]),
    ],
    ids=["ppo", "sac"],
)
def test_box_actions_with_a_2d_shape_train_flat_and_reach_the_env_reshaped(tmp_path: Path, preset, extra):
    overrides = [
        "env.id=rlcore-test/MatrixAction-v0",
        "env.num_envs=2",
        "env.vectorization=sync",
        "policy.hidden_sizes=[16, 16]",
        "train.max_steps=64",
        "train.eval_every=64",
        "train.eval_episodes=1",
        "train.target_return=null",
        "train.progress_bar=off",
        *extra,
    ]
    params = load_params(PROJECT / preset, overrides)
    train_stage(params, tmp_path)
    summary = read_json(tmp_path / "runs" / params.name / "train_summary.json")
    assert summary["env_steps"] == 64 and summary["gradient_steps"] > 0
    space = MatrixActionEnv.action_space
    assert to_env_actions(np.zeros((5, 6), np.float32), space).shape == (5, 2, 3)


# --- Minari Discrete(start != 0); image observations -----------------------------------------------------------


def test_minari_discrete_actions_with_a_start_are_stored_from_0(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    minari = pytest.importorskip("minari")
    from minari.data_collector.episode_buffer import EpisodeBuffer

    from rlcore.data.minari import import_minari
    from rlcore.data.reader import load_dataset

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = spaces.Discrete(3, start=-1)  # env actions -1, 0, 1
    env_actions = np.array([-1, 0, 1, 1, -1], dtype=np.int64)
    episode = EpisodeBuffer(
        id=0,
        observations=np.zeros((6, 2), np.float32),
        actions=env_actions,
        rewards=np.ones(5, np.float32),
        terminations=np.array([False] * 4 + [True]),
        truncations=np.zeros(5, bool),
        infos={},
    )
    with pytest.warns(UserWarning):  # Minari asks for a code permalink, description...
        minari.create_dataset_from_buffers(
            "test/start-v0",
            [episode],
            action_space=action_space,
            observation_space=observation_space,
            algorithm_name="random",
            author="rlcore tests",
            data_format="arrow",
        )
    output = tmp_path / "start.parquet"
    import_minari("test/start-v0", output)
    data = load_dataset(output, observation_space, action_space, "test")
    assert data.actions.tolist() == (env_actions - action_space.start).tolist()  # the policy's indices from 0
    assert to_env_actions(data.actions, action_space).tolist() == env_actions.tolist()  # ... back to the env's


def test_image_observations_are_accepted_and_other_observation_spaces_refused_in_one_line():
    # Images have a CNN encoder since issue 14 (rlcore/nets/encoders.py); Tuple observations are still refused.
    check_spaces("ALE/Pong-v5", spaces.Box(0, 255, (210, 160, 3), np.uint8), spaces.Discrete(6))
    check_spaces("CartPole-v1", CARTPOLE_OBS, spaces.Discrete(2))  # vectors are fine
    pair = spaces.Tuple((spaces.Discrete(2), spaces.Discrete(3)))
    with pytest.raises(
        ConfigError, match=r"^env.id: Pair-v0 has a Tuple observation space; rlcore supports Box, Discrete and Dict"
    ):
        check_spaces("Pair-v0", pair, spaces.Discrete(2))


def test_datasets_keep_box_actions_with_a_2d_shape_flat(tmp_path: Path):
    from rlcore.data.reader import load_dataset
    from rlcore.data.writer import DatasetWriter

    observation_space, action_space = MatrixActionEnv.observation_space, MatrixActionEnv.action_space
    actions = np.random.default_rng(0).uniform(-1, 1, (4, 2, 3)).astype(np.float32)
    writer = DatasetWriter(tmp_path / "d.parquet", observation_space, action_space, {})
    obs = np.zeros((4, 3), np.float32)
    writer.add_episode(obs, actions, np.ones(4), obs, np.array([0, 0, 0, 1], bool), np.zeros(4, bool), None)
    writer.close()
    data = load_dataset(tmp_path / "d.parquet", observation_space, action_space, "rlcore-test/MatrixAction-v0")
    assert data.actions.shape == (4, 6)  # the policy's flat vectors, as BC, IQL and TD3+BC read them
    assert np.array_equal(to_env_actions(data.actions, action_space), actions)


@pytest.mark.parametrize("epsilon", [0.0, 0.5], ids=["policy", "epsilon-noise"])
def test_collection_on_box_actions_with_a_2d_shape_stores_flat_actions(tmp_path: Path, epsilon: float):
    from rlcore.data.collection import CollectionPlan, collect_dataset
    from rlcore.data.reader import load_dataset
    from rlcore.nets.policies import GaussianActor

    env_config = EnvConfig(id="rlcore-test/MatrixAction-v0", vectorization="sync")
    space = MatrixActionEnv.action_space
    torch.manual_seed(0)
    policy = GaussianActor(MatrixActionEnv.observation_space, space, SMALL)
    path = tmp_path / "d.parquet"
    collect_dataset(path, env_config, policy, {"kind": "test"}, CollectionPlan(2, 32, None, epsilon, False, 0, 1024))
    data = load_dataset(path, MatrixActionEnv.observation_space, space, "rlcore-test/MatrixAction-v0")
    assert len(data) == 32 and data.actions.shape == (32, 6)
    assert (np.abs(data.actions) <= 1).all()  # what the env executed: clipped to the bounds


@pytest.mark.slow  # git and dvc init, then the rlcore command in its own process
def test_a_run_that_fails_in_a_dvc_project_prints_its_one_error_line_and_nothing_at_exit(tmp_path: Path):
    """In a DVC project (``rlcore init``'s kind) the learning curves' log holds the project's git repository open; a
    run or a program that stops on an error without closing that log prints nothing after its error line (an unclosed
    log's repository objects finalized during interpreter shutdown made dulwich print 'Exception ignored ...
    sys.meta_path is None' tracebacks: the log is freed at exit while the interpreter still runs)."""
    env = tool_env()
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True, env=env)
    subprocess.run(["dvc", "init", "-q"], cwd=tmp_path, check=True, env=env)
    (tmp_path / "hostile_wrappers.py").write_text(HOSTILE)  # RaisesInStep: after 20 steps
    subprocess.run(["git", "add", "-A"], cwd=tmp_path, check=True, env=env)
    subprocess.run(["git", "commit", "-qm", "a project"], cwd=tmp_path, check=True, env=env)
    subprocess.run(["git", "gc", "-q"], cwd=tmp_path, check=True, env=env)  # packed, as a clone's or an old repo's
    overrides = [
        "name=fails",
        "train.progress_bar=off",
        "train.log_every=64",
        "env.wrappers=[{wrapper: hostile_wrappers.RaisesInStep}]",
    ]
    result = rlcore("train", "--params", str(PROJECT / "params.yaml"), *sets(overrides), cwd=tmp_path, check=False)
    one_line_error(result, "env.wrappers", "RuntimeError: the wrapper broke at step 21")
    assert (tmp_path / "runs" / "fails" / "dvclive" / "metrics.json").exists()  # rows were logged before it broke
    # A program of the user's own (the library, not the command) that stops without closing its log.
    program = (
        "import sys\nfrom pathlib import Path\nfrom rlcore.trainers.metrics import MetricsLog\n"
        "log = MetricsLog(Path('curves'), False, 10, 10)\nlog.log(10, {'train/loss': 1.0})\n"
        "sys.exit('error: the program stopped')\n"
    )
    stopped = subprocess.run([sys.executable, "-c", program], cwd=tmp_path, capture_output=True, text=True, env=env)
    assert stopped.returncode == 1 and stopped.stderr.strip() == "error: the program stopped", stopped.stderr
    assert json.loads((tmp_path / "curves" / "metrics.json").read_text())["train"]["loss"] == 1.0
