"""``algo.reward_signals``: which rewards an on-policy run maximizes beside (or instead of) the env's, as data.

Each signal has a ``strength`` (the weight of its advantages in the policy's advantage) and a ``gamma`` (its own
discount); the intrinsic and imitation signals have their own value network and reward model with their own
optimizer (``rlcore.reward_signals``). ML-Agents' ``reward_signals``, with its key names where they carry over.
"""

from __future__ import annotations

from pydantic import Field, field_validator, model_validator

from rlcore.common.strict_model import StrictModel


class ExtrinsicConfig(StrictModel):
    """The env's reward; its value is the policy's own critic, its discount ``algo.gamma``."""

    strength: float = Field(1.0, ge=0)
    """Weight of the extrinsic advantages; 0 learns from the other signals alone (the critic still fits the env's
    returns: it costs a little and keeps the value curves meaningful)."""
    gamma: float | None = Field(None, gt=0, le=1)
    """Accepted for ML-Agents configs: must equal ``algo.gamma`` (the discount of the extrinsic return) when set."""


class IntrinsicConfig(StrictModel):
    """Keys every learned signal has: its weight and discount, its networks and how they are trained."""

    strength: float = Field(1.0, ge=0)
    """Weight of this signal's advantages in the policy's advantage."""
    gamma: float = Field(0.99, gt=0, le=1)
    """Discount of this signal's return (its value network and GAE; lambda is ``algo.gae_lambda``)."""
    episodic: bool = True
    """Whether this signal's return stops at episode ends (false: it runs on across them, as RND's intrinsic
    return; an episode's end then costs the agent nothing of the novelty that lies beyond it)."""
    lr: float = Field(3e-4, gt=0, le=1)
    """Adam learning rate of the reward model."""
    value_lr: float = Field(3e-3, gt=0, le=1)
    """Adam learning rate of the signal's value network, its advantages' baseline, which has to be one from the first
    rollouts on. Measured (PPO preset on CartPole, a constant reward of log 2 as the only signal, seed 0): at 3e-4
    the policy first collapses to falling, at 1e-3 it dips, at 3e-3 it reaches 500 after 16k env steps."""
    hidden_sizes: list[int] = Field(default_factory=lambda: [64, 64])
    """Widths of the reward model's MLPs and of the value network (ReLU)."""
    epochs: int = Field(4, ge=1, le=100)
    """Passes over each rollout's valid steps to train the reward model and the value network."""
    batch_size: int = Field(256, ge=2)
    """Transitions per minibatch of those passes."""

    @field_validator("hidden_sizes")
    @classmethod
    def _positive_widths(cls, sizes: list[int]) -> list[int]:
        if not sizes or len(sizes) > 10 or any(size < 1 for size in sizes):
            raise ValueError(f"must be a list of 1 to 10 positive layer widths, got {sizes}")
        return sizes


class RNDConfig(IntrinsicConfig):
    """Random network distillation (Burda et al., 2018): the reward is the error of a trained predictor against a
    fixed random network on the next observation, normalized by the running std of the intrinsic return."""

    episodic: bool = False
    """RND's intrinsic return runs on across episode ends, as in the paper."""
    lr: float = Field(1e-4, gt=0, le=1)
    """The predictor's learning rate (the paper's): it must not learn the visited states faster than the agent
    finds new ones."""
    output_size: int = Field(64, ge=1, le=4096)
    """Width of the target's and the predictor's output."""
    obs_clip: float = Field(5.0, gt=0)
    """Normalized observations are clipped to [-obs_clip, obs_clip] (the paper: 5)."""
    update_proportion: float = Field(1.0, gt=0, le=1)
    """Share of each minibatch the predictor learns from (the paper: 0.25 with 128 envs), so that it forgets
    visited states slower than the agent revisits them."""


class CuriosityConfig(IntrinsicConfig):
    """The intrinsic curiosity module (Pathak et al., 2017): an encoder trained by an inverse model (which action
    led from s to s'), and a forward model predicting the next encoding; the reward is the forward model's error."""

    episodic: bool = False
    """Curiosity's return runs on across episode ends (Burda et al., 2018, "Large-scale study of curiosity")."""
    encoding_size: int = Field(64, ge=1, le=4096)
    """Width of the learned encoding phi(s)."""
    forward_weight: float = Field(0.2, ge=0, le=1)
    """beta: loss = (1 - beta) * inverse loss + beta * forward loss (the paper: 0.2)."""
    normalize: bool = True
    """Divide the reward by the running std of the intrinsic return (as RND's)."""


class GAILConfig(IntrinsicConfig):
    """Generative adversarial imitation (Ho & Ermon, 2016): a discriminator D(s, a), the probability that a pair
    is the expert's, trained against a dataset with a gradient penalty; the policy's reward is -log(1 - D)."""

    dataset: str
    """A Parquet dataset of the expert's transitions (``rlcore.data.schema``' schema: what ``rlcore collect``
    writes)."""
    max_episodes: int | None = Field(None, ge=1)
    """Use only the dataset's first this many episodes (by episode id); null: all of them."""
    use_actions: bool = True
    """Whether the discriminator sees the action (false: states only, imitation from observation)."""
    gradient_penalty: float = Field(10.0, ge=0)
    """lambda of the penalty lambda * E[(||grad_x logit D(x)|| - 1)^2] on inputs interpolated between expert and
    policy pairs, one coefficient per pair (Gulrajani et al., 2017, on the logit as Kostrikov et al., 2019): keeps
    the discriminator smooth, so its reward stays informative."""


class RewardSignalsConfig(StrictModel):
    """The signals of a run; ``extrinsic`` is the env's reward (strength 1 when left out), the others are off
    unless given."""

    extrinsic: ExtrinsicConfig = Field(default_factory=ExtrinsicConfig)
    """The env's reward, with its ``strength`` (1 when left out)."""
    rnd: RNDConfig | None = None
    """Random network distillation's novelty reward; null: off."""
    curiosity: CuriosityConfig | None = None
    """The intrinsic curiosity module's reward; null: off."""
    gail: GAILConfig | None = None
    """GAIL's imitation reward, learned against an expert dataset; null: off."""

    @model_validator(mode="after")
    def _something_to_learn_from(self) -> RewardSignalsConfig:
        strengths = [self.extrinsic.strength] + [s.strength for s in (self.rnd, self.curiosity, self.gail) if s]
        if not any(strength > 0 for strength in strengths):
            raise ValueError("every signal has strength 0: give at least one a positive strength")
        return self
