"""Stacked policies (``rlcore.nets.stacked``): N seeds of rlcore's PPO actor-critic trained on their stacked
parameters (each seed's loss run under ``torch.func.vmap`` here: the per-seed code, the reference) match N unbatched
models trained alone, seed by seed; the stacked optimizers, the per-member clipping and the masked step."""

from collections.abc import Callable

import gymnasium as gym
import pytest
import torch
from torch import nn
from torch.func import functional_call, vmap

from rlcore.algos.base import clip_grad_norm_
from rlcore.algos.ppo import clipped_surrogate
from rlcore.config.sections import PolicyConfig
from rlcore.nets.policies import ActorCritic
from rlcore.nets.recurrent import actor_critic
from rlcore.nets.stacked import StackedPolicies, clip_member_grad_norms_, masked_step, stacked_tanh
from rlcore.nets.stacked_optimizers import StackedAdam, StackedRMSprop

SEEDS = [0, 1, 7]
BATCH = 64
LR, ADAM_EPS, MAX_GRAD_NORM, VF_COEF, ENT_COEF, CLIP = 1e-3, 1e-5, 0.5, 0.5, 0.01, 0.2
STEPS = 5

Batch = tuple[torch.Tensor, ...]


def make_policy() -> ActorCritic:
    """The PPO preset's policy ([64, 64] tanh) on CartPole's spaces, as ``PPO.make_policy`` builds it."""
    env = gym.make("CartPole-v1")
    try:
        return actor_critic(env.observation_space, env.action_space, PolicyConfig(hidden_sizes=[64, 64]), None)
    finally:
        env.close()


def solo(seed: int) -> ActorCritic:
    """An unbatched run's policy: the trainer seeds torch, then builds the policy (``TrainingSession``)."""
    torch.manual_seed(seed)
    return make_policy()


def ppo_loss(policy: ActorCritic, obs, actions, old_log_probs, advantages, returns) -> torch.Tensor:
    """PPO's minibatch loss for one seed (``rlcore.algos.ppo.PPO.update``'s arithmetic, without ``.item()``)."""
    features = policy.features(obs)
    dist = policy.distribution_of(features)
    ratio = (dist.log_prob(actions) - old_log_probs).exp()
    adv = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    policy_loss = -clipped_surrogate(ratio, adv, CLIP, None).mean()
    value_loss = policy.value_loss_of(features, returns, None, None)
    return policy_loss + VF_COEF * value_loss - ENT_COEF * dist.entropy().mean()


def batches(count: int, return_scale: list[float] | None = None) -> Batch:
    """A fixed synthetic minibatch per seed, (N, B, ...) each; ``return_scale`` multiplies a seed's returns (a large
    one makes that seed's value gradient large)."""
    g = torch.Generator().manual_seed(123)
    obs = torch.randn(count, BATCH, 4, generator=g)
    actions = torch.randint(2, (count, BATCH), generator=g)
    old_log_probs = torch.log(torch.rand(count, BATCH, generator=g) * 0.5 + 0.25)
    advantages = torch.randn(count, BATCH, generator=g)
    returns = torch.randn(count, BATCH, generator=g) * 10
    if return_scale is not None:
        returns = returns * torch.tensor(return_scale).view(-1, 1)
    return obs, actions, old_log_probs, advantages, returns


def build(seeds: list[int]) -> StackedPolicies[ActorCritic]:
    """Each seed's policy as its unbatched run initializes it, stacked; the global generator's state is kept."""
    with torch.random.fork_rng(devices=[]):
        return StackedPolicies([solo(seed) for seed in seeds])


class Loss(nn.Module):
    """``ppo_loss`` of the policy it holds: what lets ``functional_call`` run it on one seed's stacked slices."""

    def __init__(self, policy: nn.Module) -> None:
        super().__init__()
        self.policy = policy

    def forward(self, *batch: torch.Tensor) -> torch.Tensor:
        return ppo_loss(self.policy, *batch)


def backward(stacked: StackedPolicies[ActorCritic], batch: Batch) -> None:
    """Every seed's PPO loss on its slice of ``batch`` (the unbatched code under ``torch.func.vmap``), their sum
    back-propagated into the stacked parameters."""
    loss = Loss(stacked.template)

    def one(params: dict[str, torch.Tensor], buffers: dict[str, torch.Tensor], *seed_batch: torch.Tensor):
        named = {f"policy.{name}": value for name, value in {**params, **buffers}.items()}
        return functional_call(loss, named, seed_batch)

    vmap(one)(stacked.params, stacked.buffers, *batch).sum().backward()


def state_dicts(stacked: StackedPolicies[ActorCritic]) -> list[dict[str, torch.Tensor]]:
    """Each seed's tensors, keyed as the plain policy's ``state_dict``."""
    tensors = {**stacked.params, **stacked.buffers}
    keys = stacked.template.state_dict().keys()  # not the non-persistent buffers (a value head's fixed support)
    return [{key: tensors[key][k].detach().clone() for key in keys} for k in range(stacked.count)]


def train_solo(seed: int, batch: Batch) -> ActorCritic:
    """STEPS Adam steps of one unbatched model on its own batch, clipping as ``Algorithm.apply_gradients`` does."""
    policy = solo(seed)
    optimizer = torch.optim.Adam(policy.parameters(), lr=LR, eps=ADAM_EPS, fused=True)  # as PPO builds it
    for _ in range(STEPS):
        optimizer.zero_grad(set_to_none=True)
        ppo_loss(policy, *batch).backward()
        nn.utils.clip_grad_norm_(policy.parameters(), MAX_GRAD_NORM)
        optimizer.step()
    return policy


def train_stacked(
    seeds: list[int], batch: Batch, clip: Callable[[StackedPolicies[ActorCritic]], object]
) -> StackedPolicies[ActorCritic]:
    stacked = build(seeds)
    optimizer = torch.optim.Adam(stacked.parameters(), lr=LR, eps=ADAM_EPS, fused=True)
    for _ in range(STEPS):
        optimizer.zero_grad(set_to_none=True)
        backward(stacked, batch)
        clip(stacked)
        optimizer.step()
    return stacked


def per_seed_clip(stacked: StackedPolicies[ActorCritic]) -> object:
    return stacked.clip_grad_norms_(MAX_GRAD_NORM)


def global_clip(stacked: StackedPolicies[ActorCritic]) -> object:
    """What ``nn.utils.clip_grad_norm_`` on the stacked tensors would do: one norm over every seed."""
    return nn.utils.clip_grad_norm_(stacked.parameters(), MAX_GRAD_NORM)


def max_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    return max(float((a[key].double() - b[key].double()).abs().max()) for key in a)


def test_the_batched_linear_path_matches_each_seed():
    """Each ``nn.Linear`` a ``baddbmm`` (the same products), each tanh :func:`stacked_tanh` (within 1.8e-7 of
    ``torch.tanh``, pinned below): the two layers' rounding differences reach ~2e-7 on outputs of order 0.01-1."""
    stacked = build(SEEDS)
    obs = batches(len(SEEDS))[0]
    scores = stacked.mlp("actor", obs)  # vector observations: the encoder is a flatten
    values = stacked.mlp("critic.net", obs).squeeze(-1)
    assert scores.shape == (len(SEEDS), BATCH, 2) and values.shape == (len(SEEDS), BATCH)
    for k, seed in enumerate(SEEDS):
        policy = solo(seed)
        with torch.no_grad():
            torch.testing.assert_close(scores[k], policy.act_scores(obs[k]), rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(values[k], policy.value(obs[k]), rtol=1e-5, atol=1e-6)


def test_stacked_tanh_is_tanh_within_float_rounding():
    """``stacked_tanh`` (2 sigmoid(2x) - 1) against tanh in float64 over [-20, 20]: values within 2e-7 (torch.tanh's
    own float32 error is 3e-8; the sigmoid form's error is absolute, ~1 ulp of 1, largest where tanh is near 0);
    gradients are tanh's, 1 - y^2 of its own output; the no-grad path gives the same values bit for bit."""
    x = torch.linspace(-20, 20, 400_001).requires_grad_()
    x64 = x.detach().double()  # the same inputs: only the function's rounding is compared
    y = stacked_tanh(x)
    assert float((y.double() - torch.tanh(x64)).abs().max()) < 2e-7
    (gradient,) = torch.autograd.grad(y, x, torch.ones_like(y))
    expected = 1 - torch.tanh(x64) ** 2
    torch.testing.assert_close(gradient.double(), expected, rtol=0, atol=5e-7)
    with torch.no_grad():
        assert torch.equal(stacked_tanh(x), y.detach())
    assert float((torch.tanh(x.detach()).double() - torch.tanh(x64)).abs().max()) < 4e-8  # the reference's error


def test_adam_steps_with_per_seed_clipping_match_each_seed_trained_alone():
    """Not bitwise: the batched matrix products (vmap turns each seed's ``addmm`` into a batched kernel) sum the
    minibatch in another order, so weight gradients differ by an ulp or two of float32 (measured: gradients up to
    1.5e-7 apart, the weights after 5 steps up to 3e-8, at weights of order 0.1-1; the forward pass and the
    buffers are bitwise). Adam, the clipping coefficients and every elementwise op are the same arithmetic. Hence
    rtol 1e-6 / atol 1e-7, far below what the 5 steps change (5e-3)."""
    batch = batches(len(SEEDS))
    stacked = train_stacked(SEEDS, batch, per_seed_clip)
    for k, seed in enumerate(SEEDS):
        alone = train_solo(seed, tuple(t[k] for t in batch)).state_dict()
        trained = state_dicts(stacked)[k]
        assert max_difference(trained, solo(seed).state_dict()) > 1e-4  # the steps moved the weights
        for key in alone:
            torch.testing.assert_close(trained[key], alone[key], rtol=1e-6, atol=1e-7, msg=key)


@pytest.mark.parametrize("clip", [per_seed_clip, global_clip], ids=["per_seed", "global"])
def test_a_seed_with_a_large_gradient_does_not_shrink_the_others_steps(clip):
    """Seed 1's returns are 1000x larger: its gradient norm dwarfs the others'. Clipped per seed, seed 0 and seed 7
    still step as when trained alone; one global norm over the stacked tensors would scale their gradients by
    seed 1's clip coefficient (the ``global`` case shows that this test tells the two apart)."""
    batch = batches(len(SEEDS), return_scale=[1.0, 1000.0, 1.0])
    stacked = train_stacked(SEEDS, batch, clip)
    matches = []
    for k, seed in enumerate(SEEDS):
        alone = train_solo(seed, tuple(t[k] for t in batch)).state_dict()
        matches.append(max_difference(state_dicts(stacked)[k], alone) < 1e-6)
    if clip is per_seed_clip:
        assert matches == [True, True, True]
    else:
        assert matches[0] is False and matches[2] is False


def stacked_adam_run(batch: Batch, idle: dict[int, list[int]]) -> tuple[StackedPolicies[ActorCritic], StackedAdam]:
    """STEPS steps with :class:`StackedAdam`; at step ``i`` the seeds (indices) in ``idle[i]`` sit out."""
    stacked = build(SEEDS)
    optimizer = StackedAdam(stacked.parameters(), len(SEEDS), lr=LR, eps=ADAM_EPS)
    for step in range(STEPS):
        optimizer.zero_grad(set_to_none=True)
        backward(stacked, batch)
        stacked.clip_grad_norms_(MAX_GRAD_NORM)
        active = torch.ones(len(SEEDS), dtype=torch.bool)
        active[idle.get(step, [])] = False
        optimizer.step(active=active)
    return stacked, optimizer


def test_stacked_adam_with_every_seed_active_matches_torch_adam_per_seed():
    """Within float32 rounding of the fused kernel (measured up to ~1e-7 after 5 steps), as the vmap gradients."""
    batch = batches(len(SEEDS))
    stacked, _ = stacked_adam_run(batch, {})
    for k, seed in enumerate(SEEDS):
        alone = train_solo(seed, tuple(t[k] for t in batch)).state_dict()
        for key in alone:
            torch.testing.assert_close(state_dicts(stacked)[k][key], alone[key], rtol=1e-6, atol=1e-7, msg=key)


def test_a_seed_that_sits_out_steps_matches_its_unbatched_run_with_fewer_steps():
    """Seed 1 sits out steps 1 and 2 (a target-KL stop, a skipped non-finite step) and its gradient there is NaN:
    it ends as an unbatched run that took 3 steps, with its own Adam step count (3, where the others have 5). A
    shared counter (``torch.optim.Adam`` over the stacked tensors) would give it the others' bias correction."""
    batch = batches(len(SEEDS))
    stacked = build(SEEDS)
    optimizer = StackedAdam(stacked.parameters(), len(SEEDS), lr=LR, eps=ADAM_EPS)
    for step in range(STEPS):
        optimizer.zero_grad(set_to_none=True)
        backward(stacked, batch)
        stacked.clip_grad_norms_(MAX_GRAD_NORM)
        active = torch.tensor([True, step not in (1, 2), True])
        if step in (1, 2):
            for param in stacked.parameters():
                assert param.grad is not None
                param.grad[1] = float("nan")
        optimizer.step(active=active)
    policy = solo(SEEDS[1])
    alone = torch.optim.Adam(policy.parameters(), lr=LR, eps=ADAM_EPS, fused=True)
    for _ in range(STEPS - 2):
        alone.zero_grad(set_to_none=True)
        ppo_loss(policy, *(t[1] for t in batch)).backward()
        nn.utils.clip_grad_norm_(policy.parameters(), MAX_GRAD_NORM)
        alone.step()
    for key, value in policy.state_dict().items():
        torch.testing.assert_close(state_dicts(stacked)[1][key], value, rtol=1e-6, atol=1e-7, msg=key)
    seed_state = optimizer.seed_state_dict(1)
    assert {float(entry["step"]) for entry in seed_state["state"].values()} == {3.0}
    assert {float(entry["step"]) for entry in optimizer.seed_state_dict(0)["state"].values()} == {5.0}
    # The per-seed state is torch.optim.Adam's own format: it loads, and matches the unbatched optimizer's.
    resumed = torch.optim.Adam(policy.parameters(), lr=LR, eps=ADAM_EPS)
    resumed.load_state_dict(seed_state)
    for index, entry in alone.state_dict()["state"].items():
        torch.testing.assert_close(
            resumed.state_dict()["state"][index]["exp_avg"], entry["exp_avg"], rtol=1e-5, atol=1e-8
        )


def test_stacked_adam_state_round_trips_through_per_seed_state_dicts():
    batch = batches(len(SEEDS))
    stacked, optimizer = stacked_adam_run(batch, {1: [0]})
    again = StackedAdam(stacked.parameters(), len(SEEDS), lr=LR, eps=ADAM_EPS)
    again.load_seed_state_dicts([optimizer.seed_state_dict(k) for k in range(len(SEEDS))])
    for param in stacked.parameters():
        for key in ("step", "exp_avg", "exp_avg_sq"):
            assert torch.equal(again.state[param][key], optimizer.state[param][key])


def test_stacked_rmsprop_matches_torch_rmsprop_per_seed_and_an_idle_seed_keeps_its_weights():
    """A2C's optimizer: seed 1 sits out step 2 (NaN gradient there) and ends as its unbatched run with one step fewer;
    its per-seed state loads into ``torch.optim.RMSprop``. Per-seed learning rates (a float64 tensor) too."""
    batch = batches(len(SEEDS))
    rates = [LR, 2 * LR, LR / 2]
    stacked = build(SEEDS)
    optimizer = StackedRMSprop(stacked.parameters(), len(SEEDS), alpha=0.99, eps=ADAM_EPS)
    for group in optimizer.param_groups:
        group["lr"] = torch.tensor(rates, dtype=torch.float64)
    for step in range(STEPS):
        optimizer.zero_grad(set_to_none=True)
        backward(stacked, batch)
        stacked.clip_grad_norms_(MAX_GRAD_NORM)
        if step == 2:
            for param in stacked.parameters():
                assert param.grad is not None
                param.grad[1] = float("nan")
        optimizer.step(active=torch.tensor([True, step != 2, True]))
    for k, seed in enumerate(SEEDS):
        policy = solo(seed)
        alone = torch.optim.RMSprop(policy.parameters(), lr=rates[k], alpha=0.99, eps=ADAM_EPS)
        for _ in range(STEPS - (k == 1)):
            alone.zero_grad(set_to_none=True)
            ppo_loss(policy, *(t[k] for t in batch)).backward()
            nn.utils.clip_grad_norm_(policy.parameters(), MAX_GRAD_NORM)
            alone.step()
        for key, value in policy.state_dict().items():
            torch.testing.assert_close(state_dicts(stacked)[k][key], value, rtol=1e-5, atol=1e-6, msg=key)
        resumed = torch.optim.RMSprop(policy.parameters(), lr=rates[k], alpha=0.99, eps=ADAM_EPS)
        resumed.load_state_dict(optimizer.seed_state_dict(k))
        for index, entry in alone.state_dict()["state"].items():
            assert float(resumed.state_dict()["state"][index]["step"]) == float(entry["step"]) == STEPS - (k == 1)
            torch.testing.assert_close(
                resumed.state_dict()["state"][index]["square_avg"], entry["square_avg"], rtol=1e-5, atol=1e-9
            )


def test_each_members_clipped_gradient_is_bitwise_clip_grad_norm_of_that_member_alone():
    """The members' norms reduce as ``nn.utils.clip_grad_norm_`` reduces one model's: bitwise, norms and gradients
    (SAC's clipped runs amplify an ulp there)."""
    g = torch.Generator().manual_seed(0)
    shapes = [(64, 4), (64,), (64, 64), (64,), (2, 64), (2,), (256, 17)]
    for trial in range(20):
        stacked = [torch.zeros(4, *shape, requires_grad=True) for shape in shapes]
        for tensor in stacked:
            tensor.grad = torch.randn(tensor.shape, generator=g) * (trial + 0.1)
        alone = [[nn.Parameter(torch.zeros(shape)) for shape in shapes] for _ in range(4)]
        for k, params in enumerate(alone):
            for param, tensor in zip(params, stacked, strict=True):
                param.grad = tensor.grad[k].clone()
        norms = clip_member_grad_norms_(stacked, 4, MAX_GRAD_NORM)
        for k, params in enumerate(alone):
            assert torch.equal(norms[k], nn.utils.clip_grad_norm_(params, MAX_GRAD_NORM))
            assert all(torch.equal(p.grad, t.grad[k]) for p, t in zip(params, stacked, strict=True))


def test_one_models_clip_grad_norm_is_bitwise_torchs_finite_or_not():
    """``rlcore.algos.base.clip_grad_norm_`` (every algorithm's one-model clipping) is ``nn.utils.clip_grad_norm_``:
    the same norm and the same clipped gradients, bitwise, also when a gradient holds a NaN or an infinity."""
    g = torch.Generator().manual_seed(0)
    shapes = [(64, 4), (64,), (64, 64), (64,), (2, 64), (2,)]
    for trial in range(20):
        ours = [nn.Parameter(torch.zeros(shape)) for shape in shapes]
        for param in ours:
            param.grad = torch.randn(param.shape, generator=g) * (trial + 0.1)
        if trial % 5 == 4:
            ours[trial % len(shapes)].grad[0] = (float("nan"), float("inf"))[trial % 2]  # type: ignore[index]
        theirs = [nn.Parameter(param.detach().clone()) for param in ours]
        for param, other in zip(ours, theirs, strict=True):
            other.grad = param.grad.clone()  # type: ignore[union-attr]
        norm = clip_grad_norm_(ours, MAX_GRAD_NORM)
        bits = lambda x: x.view(torch.int32)  # noqa: E731 (bitwise, NaN included)
        assert torch.equal(bits(norm), bits(nn.utils.clip_grad_norm_(theirs, MAX_GRAD_NORM)))
        for param, other in zip(ours, theirs, strict=True):
            assert torch.equal(bits(param.grad), bits(other.grad))  # type: ignore[arg-type]


def test_a_masked_step_leaves_absent_and_non_finite_members_untouched():
    """Member 1 absent, member 2's loss NaN: their weights and Adam states stay; members 0 and 3 step."""
    weight = torch.ones(4, 3, requires_grad=True)
    optimizer = StackedAdam([weight], 4, lr=0.1)
    losses = (weight * torch.tensor([1.0, 1.0, float("nan"), 2.0]).view(4, 1)).sum(-1)
    applied = masked_step(optimizer, losses, torch.tensor([True, False, True, True]), max_grad_norm=1.0)
    assert applied == [True, False, False, True]
    assert torch.equal(weight[1:3].detach(), torch.ones(2, 3)) and bool((weight[[0, 3]] < 1).all())
    assert optimizer.state[weight]["step"].tolist() == [1.0, 0.0, 0.0, 1.0]
