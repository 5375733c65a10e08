"""V-trace (IMPALA) targets, advantages and importance weights against n-step returns and hand-computed cases."""

import math

import pytest
import torch
from torch.distributions import Categorical

from rlcore.objectives.returns import log_importance_weights, n_step_returns, vtrace, vtrace_log_rhos_from_logits


def _random_rollout(steps: int, envs: int, seed: int) -> dict[str, torch.Tensor]:
    """Random (T, N) data with terminations and truncations inside the rollout, stored as a rollout stores it:
    inside an episode V(s_{t+1}) is the next step's V(s_t); at an episode end and the rollout's last step it is
    the value of an observation the rollout does not hold (random here)."""
    generator = torch.Generator().manual_seed(seed)
    rewards, values, next_values = (
        torch.randn(steps, envs, generator=generator, dtype=torch.float64) for _ in range(3)
    )
    terminated = torch.rand(steps, envs, generator=generator) < 0.15
    truncated = ~terminated & (torch.rand(steps, envs, generator=generator) < 0.15)
    next_values[:-1] = torch.where(terminated[:-1] | truncated[:-1], next_values[:-1], values[1:])
    return {
        "rewards": rewards,
        "values": values,
        "next_values": next_values,
        "terminated": terminated,
        "episode_end": terminated | truncated,
    }


@pytest.mark.parametrize("clip", [math.inf, 1.0])
def test_on_policy_vtrace_targets_are_the_n_step_returns_to_the_rollout_end(clip: float):
    rollout = _random_rollout(steps=12, envs=6, seed=0)
    assert rollout["terminated"].any() and (rollout["episode_end"] & ~rollout["terminated"]).any()
    log_rhos = torch.zeros(12, 6, dtype=torch.float64)

    result = vtrace(log_rhos, **rollout, gamma=0.9, rho_clip=clip, c_clip=clip)

    _, returns = n_step_returns(**rollout, gamma=0.9, n=12)
    # 1e-6: n_step_returns multiplies its discounts by a bool mask, which rounds them to float32.
    torch.testing.assert_close(result.vs, returns, rtol=0, atol=1e-6)


def test_on_policy_pg_advantages_are_the_n_step_advantages():
    # With next_values[t] = values[t + 1] inside an episode, r_t + gamma * v_{s,t+1} - V(s_t) = v_{s,t} - V(s_t).
    rollout = _random_rollout(steps=10, envs=4, seed=1)

    result = vtrace(torch.zeros(10, 4, dtype=torch.float64), **rollout, gamma=0.95)

    torch.testing.assert_close(result.pg_advantages, result.vs - rollout["values"], rtol=0, atol=1e-12)


def test_clipped_vtrace_matches_a_hand_computed_example():
    # T=3, N=1, no episode end, gamma = 0.9; rhos (2.0, 0.5, 1.5), rho_clip = 1.2, c_clip = 0.8:
    #   rho_bar = (1.2, 0.5, 1.2), c = (0.8, 0.5, 0.8)
    #   TD errors r + 0.9 V' - V: 1 + 0.9*1.0 - 0.5 = 1.4; 2 + 0.9*1.5 - 1.0 = 2.35; 3 + 0.9*2.0 - 1.5 = 3.3
    #   delta = rho_bar * TD: 1.68, 1.175, 3.96
    #   v - V: A2 = 3.96; A1 = 1.175 + 0.9*0.5*3.96 = 2.957; A0 = 1.68 + 0.9*0.8*2.957 = 3.80904
    #   vs = V + A = (4.30904, 3.957, 5.46)
    #   pg: 1.2*(1 + 0.9*3.957 - 0.5) = 4.87356; 0.5*(2 + 0.9*5.46 - 1.0) = 2.957; 1.2*(3 + 0.9*2.0 - 1.5) = 3.96
    log_rhos = torch.tensor([[2.0], [0.5], [1.5]], dtype=torch.float64).log()
    rewards = torch.tensor([[1.0], [2.0], [3.0]], dtype=torch.float64)
    values = torch.tensor([[0.5], [1.0], [1.5]], dtype=torch.float64)
    next_values = torch.tensor([[1.0], [1.5], [2.0]], dtype=torch.float64)
    never = torch.zeros(3, 1, dtype=torch.bool)

    result = vtrace(log_rhos, rewards, values, next_values, never, never, gamma=0.9, rho_clip=1.2, c_clip=0.8)

    assert result.vs[:, 0].tolist() == pytest.approx([4.30904, 3.957, 5.46], abs=1e-12)
    assert result.pg_advantages[:, 0].tolist() == pytest.approx([4.87356, 2.957, 3.96], abs=1e-12)


def test_pg_advantages_weigh_the_td_error_by_the_clipped_rho():
    # One step, three envs: rho = (0.5, 1.0, 4.0) with rho_clip = 2 gives weights (0.5, 1.0, 2.0);
    # TD error 1 + 0.5 * 2 - 1 = 1 for each.
    log_rhos = torch.tensor([[0.5, 1.0, 4.0]]).log()
    ones = torch.ones(1, 3)
    never = torch.zeros(1, 3, dtype=torch.bool)

    result = vtrace(log_rhos, ones, ones, 2 * ones, never, never, gamma=0.5, rho_clip=2.0, c_clip=1.0)

    assert result.pg_advantages[0].tolist() == pytest.approx([0.5, 1.0, 2.0])
    assert result.vs[0].tolist() == pytest.approx([1.5, 2.0, 3.0])


def test_unclipped_weights_pass_through_with_infinite_clips():
    # rho = 3 everywhere, T=2, gamma = 1, V = 0, V' = 0, r = 1: delta = 3; v0 - V0 = 3 + 3 * 3 = 12.
    log_rhos = torch.full((2, 1), math.log(3.0))
    zeros, never = torch.zeros(2, 1), torch.zeros(2, 1, dtype=torch.bool)

    result = vtrace(
        log_rhos, torch.ones(2, 1), zeros, zeros, never, never, gamma=1.0, rho_clip=math.inf, c_clip=math.inf
    )

    assert result.vs[:, 0].tolist() == pytest.approx([12.0, 3.0])


def test_traces_do_not_cross_an_episode_end():
    rollout = _random_rollout(steps=6, envs=1, seed=2)
    rollout["terminated"][:] = False
    rollout["episode_end"][:] = False
    rollout["episode_end"][2] = True  # a truncation at t=2; a new episode from t=3
    log_rhos = torch.randn(6, 1, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    before = vtrace(log_rhos, **rollout, gamma=0.9, rho_clip=math.inf, c_clip=math.inf)

    changed = {key: value.clone() for key, value in rollout.items()}
    for key in ("rewards", "values", "next_values"):
        changed[key][3:] += 100.0
    changed_log_rhos = log_rhos.clone()
    changed_log_rhos[3:] += 1.0
    after = vtrace(changed_log_rhos, **changed, gamma=0.9, rho_clip=math.inf, c_clip=math.inf)

    assert torch.equal(after.vs[:3], before.vs[:3])
    assert torch.equal(after.pg_advantages[:3], before.pg_advantages[:3])


def test_termination_bootstraps_zero_and_truncation_bootstraps_the_next_value():
    # T=1, N=2, rho = 1: env 0 terminates (no value after it), env 1 is truncated with V(last obs) = 10.
    rewards, values = torch.tensor([[1.0, 1.0]]), torch.tensor([[0.5, 0.5]])
    next_values = torch.tensor([[10.0, 10.0]])
    terminated = torch.tensor([[True, False]])
    episode_end = torch.tensor([[True, True]])

    result = vtrace(torch.zeros(1, 2), rewards, values, next_values, terminated, episode_end, gamma=0.9)

    # vs = V + (r + 0.9 * (1 - term) * V' - V): env 0: 1.0; env 1: 1 + 9 = 10.0
    assert result.vs[0].tolist() == pytest.approx([1.0, 10.0])
    assert result.pg_advantages[0].tolist() == pytest.approx([0.5, 9.5])


def test_vtrace_returns_detached_tensors():
    values = torch.zeros(3, 2, requires_grad=True)
    log_rhos = torch.zeros(3, 2, requires_grad=True)
    never = torch.zeros(3, 2, dtype=torch.bool)
    result = vtrace(log_rhos, torch.ones(3, 2), values, values * 2, never, never, gamma=0.9)
    assert not result.vs.requires_grad and not result.pg_advantages.requires_grad


def test_log_rhos_from_categorical_logits_are_the_log_ratio_of_the_taken_actions():
    generator = torch.Generator().manual_seed(4)
    behaviour, target = torch.randn(5, 3, 4, generator=generator), torch.randn(5, 3, 4, generator=generator)
    actions = torch.randint(4, (5, 3), generator=generator)

    log_rhos = vtrace_log_rhos_from_logits(behaviour, target, actions, nvec=(4,))

    pi = torch.softmax(target, dim=-1).gather(-1, actions.unsqueeze(-1)).squeeze(-1)
    mu = torch.softmax(behaviour, dim=-1).gather(-1, actions.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(log_rhos, pi.log() - mu.log())
    torch.testing.assert_close(vtrace_log_rhos_from_logits(behaviour, target, actions.unsqueeze(-1), (4,)), log_rhos)
    from_distribution = log_importance_weights(Categorical(logits=target), mu.log(), actions)
    torch.testing.assert_close(from_distribution, log_rhos)


def test_log_rhos_from_multi_discrete_logits_sum_over_the_sub_actions():
    nvec = (3, 2, 4)
    generator = torch.Generator().manual_seed(5)
    behaviour, target = torch.randn(6, 2, 9, generator=generator), torch.randn(6, 2, 9, generator=generator)
    actions = torch.stack([torch.randint(n, (6, 2), generator=generator) for n in nvec], dim=-1)

    log_rhos = vtrace_log_rhos_from_logits(behaviour, target, actions, nvec)

    expected = torch.zeros(6, 2)
    for k, start in enumerate((0, 3, 5)):
        stop = start + nvec[k]
        pi = torch.softmax(target[..., start:stop], dim=-1).gather(-1, actions[..., k : k + 1]).squeeze(-1)
        mu = torch.softmax(behaviour[..., start:stop], dim=-1).gather(-1, actions[..., k : k + 1]).squeeze(-1)
        expected += pi.log() - mu.log()
    torch.testing.assert_close(log_rhos, expected)


def test_log_rhos_from_logits_refuse_logits_that_do_not_match_nvec():
    logits = torch.zeros(4, 8)
    with pytest.raises(ValueError, match=r"logits: expected .* \(\.\.\., 9\)"):
        vtrace_log_rhos_from_logits(logits, logits, torch.zeros(4, 3, dtype=torch.int64), (3, 2, 4))
    with pytest.raises(ValueError, match=r"actions: expected shape \(4, 3\)"):
        vtrace_log_rhos_from_logits(
            torch.zeros(4, 9), torch.zeros(4, 9), torch.zeros(4, 2, dtype=torch.int64), (3, 2, 4)
        )
