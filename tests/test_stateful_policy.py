"""The policy interface carries a recurrent state through evaluation and collection (no recurrent network
yet: a policy whose state counts the steps of its episode, so a wrong reset shows in the actions)."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pyarrow.parquet as pq
import torch

from rlcore.config.sections import PolicyConfig
from rlcore.data.collection import CollectionPlan, collect_dataset
from rlcore.envs.config import EnvConfig
from rlcore.evaluation.evaluator import Evaluator
from rlcore.nets.policy import Policy


class StepCounter(Policy):
    """Action = (steps taken in this episode) mod 2; the state is that count, (B, 1)."""

    def __init__(self) -> None:
        super().__init__(gym.spaces.Box(-np.inf, np.inf, (4,)), gym.spaces.Discrete(2), PolicyConfig())

    def initial_state(self, batch_size: int) -> torch.Tensor:
        return torch.zeros(batch_size, 1)

    def act(self, obs, state, deterministic, generator=None):
        assert state is not None and state.shape == (len(obs), 1)
        return (state[:, 0] % 2).long(), state + 1


def test_evaluation_carries_the_state_from_step_to_step():
    env_config = EnvConfig(id="CartPole-v1", vectorization="sync")  # sub-env i is seeded with seed + i
    result = Evaluator(env_config, episodes=3, seed=5).evaluate(StepCounter())
    for index, length in enumerate(result.lengths):  # the same episodes, acted by hand
        env = gym.make("CartPole-v1")
        env.reset(seed=5 + index)
        steps, done = 0, False
        while not done:
            _, _, terminated, truncated, _ = env.step(steps % 2)
            steps, done = steps + 1, terminated or truncated
        assert length == steps


def test_collection_resets_the_state_when_an_env_starts_a_new_episode(tmp_path: Path):
    path = tmp_path / "data.parquet"
    plan = CollectionPlan(3, 2000, None, 0.0, True, 0, 500)
    collect_dataset(path, EnvConfig(id="CartPole-v1"), StepCounter(), {"kind": "test"}, plan)
    table = pq.read_table(path, columns=["episode_id", "step", "action"]).to_pandas()
    assert table["episode_id"].nunique() > 10  # many episodes, so many resets
    assert (table["action"] == table["step"] % 2).all()


class LearnedStepCounter(StepCounter):
    """StepCounter with weights (an exportable module): scores are a linear readout of (obs, parity)."""

    def __init__(self) -> None:
        super().__init__()
        self.readout = torch.nn.Linear(5, 2)

    def greedy(self, obs, state):
        parity = torch.remainder(state, 2.0)
        scores = self.readout(torch.cat([obs, parity], dim=-1))
        return parity[:, 0].long(), scores, state + 1


def test_export_takes_and_returns_the_state_and_matches_torch_along_real_sequences(tmp_path: Path):
    import onnxruntime

    from rlcore.envs.vector import describe_space
    from rlcore.evaluation.export import ExportOptions, export_policy, parity_inputs

    policy = LearnedStepCounter().eval()
    meta = {
        "spaces": {
            "observation": describe_space(policy_space := gym.spaces.Box(-np.inf, np.inf, (4,))),
            "action": describe_space(gym.spaces.Discrete(2)),
        },
        "params": {"env": EnvConfig(id="CartPole-v1").model_dump(mode="json")},
    }
    del policy_space
    result = export_policy(policy, meta, tmp_path, ExportOptions(True, True, 300, 1e-5, 1e-4, 18))
    assert result.interface["state"] == {"shape": [1], "initial": [0.0], "reset": result.interface["state"]["reset"]}
    inputs = parity_inputs(EnvConfig(id="CartPole-v1"), policy, 2000, seed=3)  # 16 envs x 125 steps
    assert inputs["state"].max() > 20 and (inputs["state"][16:] == 0).any()  # real sequences, with resets
    session = onnxruntime.InferenceSession(str(tmp_path / "policy.onnx"), providers=["CPUExecutionProvider"])
    action, scores, next_state = session.run(["action", "scores", "next_state"], inputs)
    with torch.no_grad():
        want_action, want_scores, want_state = policy.greedy(
            torch.as_tensor(inputs["obs"]), torch.as_tensor(inputs["state"])
        )
    assert (action == want_action.numpy()).all() and (next_state == want_state.numpy()).all()
    assert np.abs(scores - want_scores.numpy()).max() < 1e-5
