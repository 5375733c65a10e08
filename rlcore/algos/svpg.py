"""Stein variational policy gradient (Liu et al., 2017), as in Pyrado: N actor-critic particles, each learning
A2C-style, their actors coupled through an RBF kernel on their flattened parameters.

Per iteration, each particle i runs n_steps vector steps of its own envs (a rollout task, on any runner), then:

    A_i, R_i  <- GAE from particle i's own critic                      (rlcore.objectives.returns.gae)
    g_i       =  grad of the A2C policy objective E[log pi_i(a|s) A_i] (+ ent_coef * entropy), norm-clipped
    theta_i   =  particle i's actor parameters, flattened
    k(a, b)   =  exp(-||a - b||^2 / h),  h = median of the N x N squared distances / log(N + 1)
                 (the median heuristic of the SVGD reference code and Pyrado)
    phi_i     =  1/N * sum_j [ k(theta_j, theta_i) * g_j / temperature  +  grad_{theta_j} k(theta_j, theta_i) ]
                 (the second term, 2/h * sum_j k_ij (theta_i - theta_j), pushes particles apart)
    theta_i   <- Adam ascent step along phi_i;  critic_i <- Adam step on its value loss (A2C's, separately)

The temperature trades the particles' returns against their spread: large, they repel; small, each is A2C.
``policy`` (what evaluation, checkpoints and export see) is a copy of the best particle: the highest mean return
over its last ``best_window`` finished training episodes (ties: the lowest index), refreshed after every update.
"""

from __future__ import annotations

import math
from typing import Any, Literal, cast

import numpy as np
import torch
from gymnasium import spaces
from pydantic import Field
from torch import nn
from torch.nn.utils import parameters_to_vector

from rlcore.algos.base import PopulationAlgorithm, PopulationConfig
from rlcore.algos.population_tasks import ParticleSegment, RolloutResult, RolloutTask, SegmentResult
from rlcore.algos.ppo import PPO
from rlcore.config.sections import PolicyConfig
from rlcore.nets.policies import ActorCritic
from rlcore.nets.value_transforms import ValueHeadConfig
from rlcore.objectives.returns import explained_variance, gae
from rlcore.objectives.schedules import ScheduleName, scheduled


class SVPGConfig(PopulationConfig):
    name: Literal["svpg"] = "svpg"
    runner: Literal["dev", "local", "dask"] = "dev"
    """Where particles' segments run; ``dev`` by default: on small envs a particle's segment costs less than
    sending it to another process."""
    num_particles: int = Field(4, ge=1, le=256)
    """N: actor-critic particles, each running its own segment of ``n_steps`` every iteration; ``policy`` is a copy of
    the best one."""
    n_steps: int = Field(8, ge=1)
    """Vector steps of ``env.num_envs`` envs per particle per iteration."""
    gamma: float = Field(0.99, gt=0, le=1)
    """Discount gamma of each particle's GAE advantages and returns."""
    gae_lambda: float = Field(1.0, ge=0, le=1)
    """GAE's lambda: 0 is the one-step TD error, 1 the Monte Carlo return minus the value."""
    temperature: float = Field(1.0, gt=0)
    """alpha: divides each particle's policy gradient against the kernel's repulsion."""
    lr: float = Field(1e-3, gt=0)
    """Adam's learning rate for the actors (on the Stein direction phi)."""
    critic_lr: float | None = Field(None, gt=0, le=1)
    """Adam's learning rate for the critics; null: ``lr``."""
    lr_schedule: ScheduleName = "constant"
    """``linear`` anneals the actors' and the critics' learning rates to 0 at ``train.max_steps``."""
    normalize_advantage: bool = True
    """Standardize each particle's advantages over its segment's valid steps."""
    ent_coef: float = Field(0.0, ge=0)
    """Weight of the entropy bonus in each particle's policy objective (``+ ent_coef * H[pi_i(.|s)]``); 0: no bonus."""
    max_grad_norm: float | None = Field(0.5, gt=0)
    """Clips each particle's policy gradient and each critic's gradient (null: off)."""
    best_window: int = Field(20, ge=1)
    """Finished training episodes per particle the best particle is chosen on."""
    value_head: ValueHeadConfig = Field(default_factory=ValueHeadConfig)
    """The critic's output: a scalar (default), in signed-sqrt units, or categorical over a support."""


class ParticlePolicy(ActorCritic):
    """An actor-critic that can :meth:`spawn` more of itself: fresh weights, the same spaces and config."""

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        config: PolicyConfig,
        value_head: ValueHeadConfig | None = None,
    ) -> None:
        super().__init__(observation_space, action_space, config, value_head)
        self._spec = (observation_space, action_space, config, value_head)

    def spawn(self) -> ParticlePolicy:
        """A new particle, its weights drawn from the torch RNG."""
        return ParticlePolicy(*self._spec)


CRITIC_PREFIXES = ("critic.", "encoder.")
"""The critic, and the observation encoder it shares with the actor (weights only for pixels; trained by the
critic's loss, as ``ActorCritic`` intends)."""


def actor_parameters(particle: nn.Module) -> list[nn.Parameter]:
    """The actor's own parameters (its head; ``log_std`` for Box actions): what the kernel compares and SVGD moves."""
    return [p for name, p in particle.named_parameters() if not name.startswith(CRITIC_PREFIXES)]


def critic_parameters(particle: nn.Module) -> list[nn.Parameter]:
    """The parameters the value loss trains (:data:`CRITIC_PREFIXES`)."""
    return [p for name, p in particle.named_parameters() if name.startswith(CRITIC_PREFIXES)]


def rbf_kernel(theta: torch.Tensor) -> tuple[torch.Tensor, float]:
    """(K, h) for particles ``theta`` (N, D): K[i, j] = exp(-||theta_i - theta_j||^2 / h), (N, N), with the median
    heuristic h = median of the N x N squared distances (diagonal included, as SVGD's code) / log(N + 1)."""
    squared = torch.cdist(theta.double(), theta.double()).square()
    bandwidth = float(np.median(squared.numpy())) / math.log(theta.shape[0] + 1)
    bandwidth = max(bandwidth, 1e-12)  # identical particles: K = 1 and no repulsion, rather than 0 / 0
    return torch.exp(-squared / bandwidth), bandwidth


def stein_direction(theta: torch.Tensor, gradients: torch.Tensor, temperature: float) -> tuple[torch.Tensor, float]:
    """(phi, h): SVGD's ascent direction per particle (N, D) for ascent ``gradients`` (N, D) of the objective at
    ``theta`` (N, D); float64."""
    kernel, bandwidth = rbf_kernel(theta)
    theta64, gradients64 = theta.double(), gradients.double()
    # sum_j grad_{theta_j} k(theta_j, theta_i) = 2/h * sum_j k_ij (theta_i - theta_j)
    repulsion = (2.0 / bandwidth) * (kernel.sum(dim=1, keepdim=True) * theta64 - kernel @ theta64)
    phi = (kernel @ gradients64 / temperature + repulsion) / theta.shape[0]
    return phi, bandwidth


class SVPG(PopulationAlgorithm[SVPGConfig, ParticlePolicy]):
    name = "svpg"
    Config = SVPGConfig
    action_spaces = PPO.action_spaces

    def __init__(self, policy: ParticlePolicy, config: SVPGConfig) -> None:
        super().__init__(policy, config)
        self.particles = nn.ModuleList([policy.spawn() for _ in range(config.num_particles)])
        self.actor_optimizer = torch.optim.Adam(
            [p for particle in self.particles for p in actor_parameters(particle)], lr=config.lr, eps=1e-5
        )
        self.critic_optimizer = torch.optim.Adam(
            [p for particle in self.particles for p in critic_parameters(particle)],
            lr=config.critic_lr or config.lr,
            eps=1e-5,
        )
        self.recent_returns = torch.zeros(config.num_particles, config.best_window, dtype=torch.float64)
        """(N, best_window) each particle's last finished training-episode returns, a ring (0 where unfilled)."""
        self.recent_next = torch.zeros(config.num_particles, dtype=torch.int64)
        """(N,) episodes each particle has put in its ring (the next slot, modulo ``best_window``)."""
        self.best = 0
        self.policy.load_state_dict(self.particles[0].state_dict())

    @staticmethod
    def make_policy(
        observation_space: spaces.Space, action_space: spaces.Space, config: PolicyConfig, algo: SVPGConfig
    ) -> ParticlePolicy:
        return ParticlePolicy(observation_space, action_space, config, algo.value_head)

    def members(self) -> list[Any]:
        return list(self.particles)

    def ask(self, seed: int, first_env_seed: int) -> list[RolloutTask]:
        sampling = np.random.SeedSequence(seed).generate_state(self.config.num_particles, dtype=np.uint64)
        return [
            ParticleSegment(particle=i, n_steps=self.config.n_steps, env_seed=first_env_seed, sampling_seed=int(s))
            for i, s in enumerate(sampling)
        ]

    def tell(self, tasks: list[RolloutTask], results: list[RolloutResult], progress: float) -> dict[str, float]:
        cfg = self.config
        lr = scheduled(cfg.lr, cfg.lr_schedule, progress)
        for group in self.actor_optimizer.param_groups:
            group["lr"] = lr
        for group in self.critic_optimizer.param_groups:
            group["lr"] = scheduled(cfg.critic_lr or cfg.lr, cfg.lr_schedule, progress)
        self.critic_optimizer.zero_grad(set_to_none=True)
        gradients, valid_obs = [], []
        stats: dict[str, list[float]] = {"policy_loss": [], "value_loss": [], "entropy": [], "explained_variance": []}
        for particle, result in zip(self.particles, cast(list[SegmentResult], results), strict=True):
            gradient, obs, particle_stats = self._particle_gradient(cast(ParticlePolicy, particle), result)
            gradients.append(gradient)
            valid_obs.append(obs)
            for key, value in particle_stats.items():
                stats[key].append(value)
        theta = torch.stack([parameters_to_vector(actor_parameters(p)).detach() for p in self.particles])
        phi, bandwidth = stein_direction(theta, torch.stack(gradients), cfg.temperature)
        critic_grads = [p.grad for particle in self.particles for p in critic_parameters(particle)]
        finite = bool(torch.isfinite(phi).all()) and all(
            g is None or bool(torch.isfinite(g).all()) for g in critic_grads
        )
        self.actor_optimizer.zero_grad(set_to_none=True)
        if finite:
            for particle, direction in zip(self.particles, phi, strict=True):
                params = actor_parameters(particle)
                for p, part in zip(params, direction.split([p.numel() for p in params]), strict=True):
                    p.grad = -part.reshape(p.shape).to(p.dtype)  # the optimizer descends; SVGD ascends
            self.actor_optimizer.step()
            self.critic_optimizer.step()
            self.consecutive_skips = 0
        else:
            self.critic_optimizer.zero_grad(set_to_none=True)
            self._skip()
        self.gradient_steps += 1
        self.iterations += 1
        for i, (particle, obs) in enumerate(zip(self.particles, valid_obs, strict=True)):
            cast(ParticlePolicy, particle).obs_normalizer.update(obs)  # a no-op unless policy.normalize_obs
            self._remember(i, results[i].episode_returns)
        self._publish_best()
        off_diagonal = ~torch.eye(len(self.particles), dtype=torch.bool)
        kernel, _ = rbf_kernel(theta)
        return {
            **{key: float(np.mean(values)) for key, values in stats.items()},
            "kernel_bandwidth": bandwidth,
            "kernel_mean": float(kernel[off_diagonal].mean()) if len(self.particles) > 1 else 1.0,
            "best_particle": float(self.best),
            "learning_rate": lr,
        }

    def _particle_gradient(
        self, particle: ParticlePolicy, result: SegmentResult
    ) -> tuple[torch.Tensor, torch.Tensor, dict[str, float]]:
        """(the ascent gradient of the particle's policy objective, flat (D,); its segment's valid observations;
        its losses). Accumulates the critic's value-loss gradient into its parameters' ``.grad``."""
        cfg = self.config
        obs = torch.from_numpy(result.obs)
        steps, envs = result.rewards.shape
        obs_shape = obs.shape[2:]
        with torch.no_grad():
            values = particle.value(obs.reshape((steps + 1) * envs, *obs_shape)).reshape(steps + 1, envs)
        advantages, returns = gae(
            torch.from_numpy(result.rewards),
            values[:-1],
            values[1:],
            torch.from_numpy(result.terminated),
            torch.from_numpy(result.episode_end),
            cfg.gamma,
            cfg.gae_lambda,
        )
        valid = torch.from_numpy(result.valid)
        flat_valid = valid.reshape(-1)
        valid_obs = obs[:-1].reshape(steps * envs, *obs_shape)[flat_valid]
        actions = torch.from_numpy(result.actions)
        valid_actions = actions.reshape(steps * envs, *actions.shape[2:])[flat_valid]
        adv = advantages[valid]
        if cfg.normalize_advantage and adv.numel() > 1:
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        dist = particle.distribution(valid_obs)
        policy_loss = -(dist.log_prob(valid_actions) * adv).mean()
        entropy = dist.entropy().mean()
        params = actor_parameters(particle)
        grads = torch.autograd.grad(policy_loss - cfg.ent_coef * entropy, params)
        gradient = -torch.cat([g.reshape(-1) for g in grads])
        if cfg.max_grad_norm is not None:
            gradient = gradient * (cfg.max_grad_norm / (gradient.norm() + 1e-6)).clamp(max=1.0)
        value_loss = particle.value_loss(valid_obs, returns[valid])
        value_loss.backward()
        if cfg.max_grad_norm is not None:
            nn.utils.clip_grad_norm_(critic_parameters(particle), cfg.max_grad_norm)
        return (
            gradient.detach(),
            valid_obs,
            {
                "policy_loss": policy_loss.item(),
                "value_loss": value_loss.item(),
                "entropy": entropy.item(),
                "explained_variance": explained_variance(values[:-1][valid], returns[valid]),
            },
        )

    def _remember(self, particle: int, episode_returns: np.ndarray) -> None:
        window = self.config.best_window
        for value in episode_returns[-window:]:
            slot = int(self.recent_next[particle]) % window
            self.recent_returns[particle, slot] = float(value)
            self.recent_next[particle] += 1

    def _publish_best(self) -> None:
        """Copy the best particle (see the module docstring) into ``policy``."""
        filled = self.recent_next.clamp(max=self.config.best_window)
        means = torch.where(filled > 0, self.recent_returns.sum(1) / filled.clamp_min(1), -math.inf)
        if bool(torch.isfinite(means).any()):
            self.best = int(torch.argmax(means))  # the first of equal maxima
        self.policy.load_state_dict(self.particles[self.best].state_dict())

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "best": self.best}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.best = int(state["best"])
