"""The on-policy rollout's storage (``rlcore.data.rollouts``): what a recorded env step holds, and the seeds' acting
fields stacked into one storage that one write per field fills for every seed."""

from __future__ import annotations

import numpy as np
import torch

from rlcore.data.rollouts import ACTING_FIELDS, RolloutBuffer, stack_acting_fields


def rollout(steps: int = 3, envs: int = 2) -> RolloutBuffer:
    return RolloutBuffer(steps, envs, (4,), (), torch.int64)


def test_a_recorded_env_step_holds_the_rewards_rounded_as_torch_rounds_them_and_its_flags() -> None:
    buffer = rollout()
    rewards = np.array([0.1, 1.0 / 3.0])  # float64, as the env's
    buffer.record_step(1, rewards, np.array([True, False]), np.array([True, True]), np.array([False, True]))
    assert torch.equal(buffer.rewards[1], torch.as_tensor(rewards, dtype=torch.float32))
    assert buffer.terminated[1].tolist() == [True, False]
    assert buffer.episode_end[1].tolist() == [True, True]
    assert buffer.valid[1].tolist() == [False, True]
    assert not buffer.terminated[[0, 2]].any() and buffer.valid[[0, 2]].all()  # the other steps untouched


def test_stacked_acting_fields_keep_each_rollouts_contents_and_a_write_records_every_rollout() -> None:
    rollouts = [rollout(), rollout()]
    for k, buffer in enumerate(rollouts):
        buffer.obs[0] = float(k + 1)
        buffer.actions[0] = k + 1
    storage = stack_acting_fields(rollouts)
    assert set(storage) == set(ACTING_FIELDS)
    assert [float(buffer.obs[0, 0, 0]) for buffer in rollouts] == [1.0, 2.0]  # kept
    assert [int(buffer.actions[0, 0]) for buffer in rollouts] == [1, 2]
    storage["values"][:, 2] = torch.tensor([[5.0, 6.0], [7.0, 8.0]])  # (M, E) at step 2
    assert rollouts[0].values[2].tolist() == [5.0, 6.0] and rollouts[1].values[2].tolist() == [7.0, 8.0]
    assert rollouts[1].flat("values")[4:].tolist() == [7.0, 8.0]  # what the update reads
