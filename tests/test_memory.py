"""Recurrent policies (``policy.memory``): the state through sequences, sequence minibatches, resume, export, and
the refusals. Learning on a partially observable CartPole: ``tests/test_memory_learning.py``."""

from __future__ import annotations

import io
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from conftest import PROJECT

from rlcore.common.errors import ConfigError
from rlcore.config.sections import MemoryConfig, PolicyConfig
from rlcore.data.sequences import SequenceRollout
from rlcore.envs.actions import action_layout
from rlcore.envs.config import EnvConfig
from rlcore.envs.observations import obs_tensor
from rlcore.envs.stepping import VectorStepper
from rlcore.envs.vector import make_vector_env
from rlcore.nets.policy import reset_state
from rlcore.nets.recurrent import RecurrentActorCritic
from rlcore.params import load_params

PO_WRAPPER = {"wrapper": "rlcore.envs.partial_observation.KeepObservations", "kwargs": {"indices": [0, 2]}}
"""CartPole-v1 without its two velocities (cart position and pole angle only)."""


def recurrent_policy(kind: str = "lstm", sequence_length: int = 8, burn_in: int = 0, seed: int = 0):
    torch.manual_seed(seed)
    memory = MemoryConfig(type=kind, size=16, sequence_length=sequence_length, burn_in=burn_in)
    config = PolicyConfig(hidden_sizes=[16], memory=memory)
    return RecurrentActorCritic(gym.spaces.Box(-np.inf, np.inf, (4,)), gym.spaces.Discrete(2), config)


def collect(policy: RecurrentActorCritic, steps: int, envs: int, seed: int = 0):
    """A real CartPole rollout acted as the on-policy trainer acts: (rollout, the features acting saw (T, N, W))."""
    env = make_vector_env(EnvConfig(id="CartPole-v1"), envs)
    stepper = VectorStepper(env)
    stepper.reset(seed)
    shape, dtype = action_layout(env.single_action_space)
    rollout = SequenceRollout(steps, envs, (4,), shape, dtype, torch.float32, policy)
    generator = torch.Generator().manual_seed(seed)
    acted = torch.zeros(steps, envs, 16)
    state = policy.initial_state(envs)
    with torch.no_grad():
        for t in range(steps):
            obs = obs_tensor(stepper.obs)
            rollout.keep_state(t, state)
            features, next_state = policy.step_features(obs, state)
            action = policy.sample_of(policy.actor(features), generator)
            step = stepper.step(action.numpy())
            rollout.obs[t], rollout.actions[t], acted[t] = obs, action, features
            rollout.valid[t] = torch.as_tensor(step.valid)
            rollout.episode_end[t] = torch.as_tensor(step.ended)
            state = reset_state(policy, next_state, ~step.valid)
    env.close()
    return rollout, acted


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_sequences_reset_the_state_where_acting_did_and_give_the_features_acting_saw(kind: str):
    policy = recurrent_policy(kind)
    rollout, acted = collect(policy, steps=64, envs=4)  # random CartPole episodes last ~10-40 steps
    inside = (~rollout.valid).reshape(8, 8, 4)[:, :-1]  # a reset step followed by a step of the same sequence
    assert inside.any(), "no episode boundary inside a sequence: the test would prove nothing"
    idx = rollout.flat_valid_indices()
    with torch.no_grad():
        trained = rollout.features(policy, idx)
    assert torch.allclose(trained, acted.reshape(-1, 16)[idx], atol=1e-6)


def test_without_the_reset_the_features_after_an_episode_boundary_differ():
    """The comparison above can fail: carrying the state across an episode start changes the next features."""
    policy = recurrent_policy()
    rollout, acted = collect(policy, steps=64, envs=4)
    rollout.valid[:] = True  # hides every reset from the sequences
    idx = torch.arange(64 * 4)
    with torch.no_grad():
        trained = rollout.features(policy, idx)
    assert not torch.allclose(trained, acted.reshape(-1, 16), atol=1e-4)


def test_a_reset_inside_a_sequence_zeroes_that_row_only():
    policy = recurrent_policy()
    obs = torch.randn(3, 2, 4)
    reset_after = torch.tensor([[False, False], [True, False], [False, False]])
    start = torch.randn(2, 2, 16)
    with torch.no_grad():
        joint, _ = policy.sequence_features(obs, start, reset_after)
        fresh, _ = policy.sequence_features(obs[2:, :1], policy.initial_state(1), reset_after[2:, :1])
        carried, _ = policy.sequence_features(obs[:, 1:], start[1:], reset_after[:, 1:])
    assert torch.allclose(joint[2, 0], fresh[0, 0], atol=1e-6)  # row 0 started over after step 1
    assert torch.allclose(joint[:, 1], carried[:, 0], atol=1e-6)  # row 1 carried its state throughout


@pytest.mark.parametrize("burn_in", [0, 3])
def test_sequence_minibatches_cover_every_valid_step_once_per_epoch_in_whole_sequences(burn_in: int):
    policy = recurrent_policy(sequence_length=8, burn_in=burn_in)
    rollout, _ = collect(policy, steps=60, envs=4)  # 60 = 7 sequences of 8 and one of 4 per env
    batches = list(rollout.minibatches(32, torch.Generator().manual_seed(1)))
    steps = torch.cat(batches)
    assert sorted(steps.tolist()) == rollout.flat_valid_indices().tolist()
    sequence_of = (steps // 4 // 8) * 4 + steps % 4
    seen = [set(((idx // 4 // 8) * 4 + idx % 4).tolist()) for idx in batches]
    assert sum(len(s) for s in seen) == len(set(sequence_of.tolist()))  # no sequence split over minibatches
    assert all(len(s) == 4 for s in seen)  # 32 steps / 8 per sequence
    first = list(rollout.minibatches(32, torch.Generator().manual_seed(2)))
    assert [b.tolist() for b in first] != [b.tolist() for b in batches]  # shuffled by sequence


def test_burn_in_starts_a_sequence_from_the_state_acting_carried_into_it():
    """With burn-in the stored state is the one ``burn_in`` steps earlier; running those steps again with the same
    weights gives back the state at the sequence's start, so the features equal acting's."""
    policy = recurrent_policy(sequence_length=8, burn_in=3)
    rollout, acted = collect(policy, steps=64, envs=4)
    idx = rollout.flat_valid_indices()
    with torch.no_grad():
        trained = rollout.features(policy, idx)
    assert torch.allclose(trained, acted.reshape(-1, 16)[idx], atol=1e-6)


def test_memory_and_precision_are_refused_for_algorithms_without_them():
    base = PROJECT / "configs" / "dqn-cartpole.yaml"
    refusal = r"policy\.memory: dqn does not train recurrent policies \(a2c, impala, ppo do\)"
    with pytest.raises(ConfigError, match=refusal):
        load_params(base, ["policy.memory={type: lstm}"])
    with pytest.raises(ConfigError, match=r"train\.precision: dqn trains in fp32 only"):
        load_params(base, ["train.precision=bf16"])
    with pytest.raises(ConfigError, match=r"policy\.memory\.burn_in: must be < policy\.memory\.sequence_length"):
        load_params(PROJECT / "params.yaml", ["policy.memory={sequence_length: 4, burn_in: 4}"])
    with pytest.raises(ConfigError, match=r"policy\.memory\.type: .*'lstm' or 'gru'"):
        load_params(PROJECT / "params.yaml", ["policy.memory={type: rnn}"])


def test_stateless_calls_on_a_recurrent_policy_are_refused():
    with pytest.raises(TypeError, match="needs its state"):
        recurrent_policy().features(torch.zeros(1, 4))


def test_a_recurrent_ppo_round_trip_through_its_state_dicts_continues_bitwise():
    """Policy weights, optimizer moments and the minibatch generator restored: the next update is the same."""
    from rlcore.algos.ppo import PPO, PPOConfig

    def build(seed: int) -> PPO:
        return PPO(recurrent_policy(seed=seed, burn_in=2), PPOConfig(batch_size=64, n_epochs=2))

    original = build(0)
    rollout, _ = collect(original.policy, steps=32, envs=4)
    with torch.no_grad():
        rollout.log_probs[:] = -0.7
        rollout.advantages = torch.randn(32, 4, generator=torch.Generator().manual_seed(3))
    generator = torch.Generator().manual_seed(5)
    original.update(rollout, 0.0, generator)
    resumed = build(1)
    resumed.policy.load_state_dict(through_a_file(original.policy.state_dict()))
    resumed.load_state_dict(through_a_file(original.state_dict()))
    other = torch.Generator()
    other.set_state(generator.get_state())
    first, second = original.update(rollout, 0.5, generator), resumed.update(rollout, 0.5, other)
    assert first == second
    for (name, a), b in zip(original.policy.state_dict().items(), resumed.policy.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    assert str(original.optimizer.state_dict()) == str(resumed.optimizer.state_dict())


def through_a_file(state: dict) -> dict:
    """What a checkpoint gives back: copies, not the live tensors (an optimizer's load keeps the tensors it is
    given, so a state handed over in memory would be shared)."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def po_overrides(*extra: str) -> list[str]:
    return [
        "env.num_envs=4",
        "env.wrappers=[{wrapper: rlcore.envs.partial_observation.KeepObservations, kwargs: {indices: [0, 2]}}]",
        "policy.memory={type: lstm, size: 16, sequence_length: 8, burn_in: 2}",
        "policy.hidden_sizes=[16]",
        "algo.n_steps=32",
        "algo.batch_size=64",
        "algo.n_epochs=2",
        "train.max_steps=1024",
        "train.eval_every=512",
        "train.eval_episodes=2",
        "train.target_return=null",
        "train.progress_bar=off",
        *extra,
    ]


def test_an_interrupted_recurrent_run_resumes_from_its_checkpoint_reproducibly(tmp_path: Path):
    """Killed after its first checkpoint (the summary and later checkpoint gone), a recurrent run resumes there:
    weights, optimizer, RNGs and counters from the checkpoint, episodes (and the memory) restarted. Two such
    resumes end bitwise equal."""
    import shutil

    from rlcore.common.checkpoints import list_checkpoints, load_checkpoint
    from rlcore.trainers import train

    params = load_params(PROJECT / "params.yaml", po_overrides())
    train(params, tmp_path / "whole")
    finals = []
    for copy in ("a", "b"):
        run = tmp_path / copy
        shutil.copytree(tmp_path / "whole", run)
        (run / "train_summary.json").unlink()
        list_checkpoints(run / "checkpoints")[-1][1].unlink()
        summary = train(params, run)
        assert summary["env_steps"] == 1024 and [e["env_steps"] for e in summary["evaluations"]] == [512, 1024]
        finals.append(load_checkpoint(list_checkpoints(run / "checkpoints")[-1][1]).tensors)
    assert "memory.rnn.weight_hh_l0" in finals[0]["policy"]
    for key, value in finals[0]["policy"].items():
        assert torch.equal(value, finals[1]["policy"][key]), key
    assert str(finals[0]["algorithm"]["optimizer"]) == str(finals[1]["algorithm"]["optimizer"])


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_onnx_and_torch_export_carry_the_state_along_a_200_step_episode_sequence(tmp_path: Path, kind: str):
    """The exported graphs take (obs, state) and return (action, scores, next_state); fed their own next_state for
    200 steps of real partially observable CartPole episodes (reset to the initial state where one ends), they stay
    within 1e-5 of torch."""
    import onnxruntime

    from rlcore.envs.vector import describe_space
    from rlcore.evaluation.export import ExportOptions, export_policy

    env_config = EnvConfig(id="CartPole-v1", wrappers=[PO_WRAPPER])
    torch.manual_seed(0)
    memory = MemoryConfig(type=kind, size=32)
    policy = RecurrentActorCritic(
        gym.spaces.Box(-np.inf, np.inf, (2,), dtype=np.float32),
        gym.spaces.Discrete(2),
        PolicyConfig(hidden_sizes=[32], memory=memory),
    ).eval()
    meta = {
        "spaces": {
            "observation": describe_space(policy.observation_space),
            "action": describe_space(gym.spaces.Discrete(2)),
        },
        "params": {"env": env_config.model_dump(mode="json")},
    }
    result = export_policy(policy, meta, tmp_path, ExportOptions(True, True, 400, 1e-5, 1e-4, 18))
    assert result.interface["state"]["shape"] == [2 if kind == "lstm" else 1, 32]
    assert result.interface["state"]["initial"] == np.zeros((2 if kind == "lstm" else 1, 32)).tolist()

    session = onnxruntime.InferenceSession(str(tmp_path / "policy.onnx"), providers=["CPUExecutionProvider"])
    program = torch.export.load(tmp_path / "policy.pt2").module()
    env = make_vector_env(env_config, 1)
    stepper = VectorStepper(env)
    stepper.reset(7)
    onnx_state = policy.initial_state(1).numpy()
    program_state = torch_state = policy.initial_state(1)
    worst, episodes = 0.0, 0
    with torch.no_grad():
        for _ in range(200):
            obs = obs_tensor(stepper.obs)
            action, scores, torch_next = policy.greedy(obs, torch_state)
            onnx_action, onnx_scores, onnx_next = session.run(None, {"obs": obs.numpy(), "state": onnx_state})
            _, program_scores, program_next = program(obs, program_state)
            worst = max(
                worst,
                float(np.abs(onnx_scores - scores.numpy()).max()),
                float(np.abs(onnx_next - torch_next.numpy()).max()),
                float((program_scores - scores).abs().max()),
                float((program_next - torch_next).abs().max()),
            )
            step = stepper.step(action.numpy())
            started = ~step.valid
            episodes += int(step.ended.sum())
            torch_state = reset_state(policy, torch_next, started)
            program_state = reset_state(policy, program_next, started)
            onnx_state = np.where(started.reshape(-1, 1, 1), 0.0, onnx_next).astype(np.float32)
    env.close()
    assert episodes >= 2, "the sequence should cross episode boundaries"
    assert worst <= 1e-5, worst


def test_the_memory_estimate_counts_the_recurrent_core() -> None:
    """rlcore.trainers.memory_estimate counts an LSTM's 4 gates x (input + recurrent weights, two biases) in each of
    PPO's two
    networks' weights, gradients, Adam moments and checkpoint copy: 2 x 5 float32 copies = 40 bytes a parameter."""
    import gymnasium as gym

    from rlcore.params import load_params
    from rlcore.trainers.memory_estimate import estimate

    env = gym.make("CartPole-v1")
    sizes = {}
    for memory in ("null", "{type: lstm, size: 256}"):
        params = load_params(PROJECT / "params.yaml", [f"policy.memory={memory}"])
        sizes[memory] = estimate(params, env.observation_space, env.action_space)["policy.hidden_sizes"][0]
    lstm_parameters = sum(p.numel() for p in torch.nn.LSTM(4, 256).parameters())
    assert sizes["{type: lstm, size: 256}"] - sizes["null"] == 40 * lstm_parameters


def test_a_sequence_longer_than_the_rollout_is_refused_at_load_naming_both_keys():
    """Every sequence is padded to ``sequence_length``: 1,000 steps over a 32-step rollout took 22.8 s for 1,024 env
    steps against 0.2 s at 16 or 32. Refused in one line; a sequence as long as the rollout is accepted."""
    base = PROJECT / "params.yaml"
    memory = "policy.memory={type: lstm, size: 16, sequence_length: 1000}"
    for algo in ("ppo", "a2c"):
        with pytest.raises(
            ConfigError,
            match=r"policy\.memory\.sequence_length: 1000 is longer than a rollout \(algo\.n_steps: 32\).*at most 32",
        ):
            load_params(base, [f"algo={{name: {algo}, n_steps: 32}}", memory])
    params = load_params(base, ["algo.n_steps=32", "policy.memory={type: lstm, size: 16, sequence_length: 32}"])
    assert params.policy.memory is not None and params.policy.memory.sequence_length == 32
    # IMPALA unrolls whole trajectories and does not read sequence_length
    load_params(PROJECT / "configs" / "impala-cartpole.yaml", [memory])
