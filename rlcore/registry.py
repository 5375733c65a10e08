"""The algorithm registry, keyed by ``algo.name`` (every algorithm rlcore can train, listed once), and what needs
it: the action-space check and rebuilding a policy from a checkpoint.

Adding an algorithm = its module in ``rlcore/algos/`` and two edits here: its import, and its class in the tuple
:data:`ALGORITHMS` is built from.
"""

from __future__ import annotations

from gymnasium import spaces
from pydantic import ValidationError
from torch import nn

from rlcore.algos.a2c import A2C
from rlcore.algos.base import AlgoConfig, Algorithm, OnPolicyAlgorithm
from rlcore.algos.bc import BC
from rlcore.algos.dqn import DQN
from rlcore.algos.es import ES
from rlcore.algos.grouped import GroupedAlgorithm
from rlcore.algos.impala import IMPALA
from rlcore.algos.iql import IQL
from rlcore.algos.ppo import PPO
from rlcore.algos.sac import SAC
from rlcore.algos.svpg import SVPG
from rlcore.algos.td3bc import TD3BC
from rlcore.common.checkpoints import Checkpoint
from rlcore.common.errors import CheckpointError, ConfigError
from rlcore.config.sections import PolicyConfig
from rlcore.envs.config import EnvConfig
from rlcore.envs.multiagent import state_width
from rlcore.envs.vector import space_from_description
from rlcore.nets.central_critic import CentralizedActorCritic
from rlcore.nets.grouped import GroupedActorCritic, grouped_actor_critic
from rlcore.nets.policy import Policy

ALGORITHMS: dict[str, type[Algorithm]] = {
    cls.name: cls for cls in (PPO, A2C, IMPALA, DQN, SAC, BC, TD3BC, IQL, ES, SVPG)
}


def registered_algorithms() -> list[str]:
    return sorted(ALGORITHMS)


def algorithm_class(name: str) -> type[Algorithm]:
    return ALGORITHMS[name]


def algo_config_class(name: str) -> type[AlgoConfig]:
    return ALGORITHMS[name].Config


def check_action_space(name: str, env_id: str, action_space: spaces.Space) -> None:
    """Refuse an algorithm that cannot act in the env's action space, naming both."""
    accepted = algorithm_class(name).action_spaces
    if not isinstance(action_space, accepted):
        kinds = " or ".join(kind.__name__ for kind in accepted)
        raise ConfigError(f"algo.name: {name} needs a {kinds} action space, but {env_id} has {action_space}")


def trains_groups(name: str) -> bool:
    """Whether algorithm ``name`` trains ``policy.groups`` and centralized critics: the on-policy multi-agent ones
    (every agent's steps are rows of its rollout: ``rlcore.trainers.on_policy``)."""
    algo_cls = algorithm_class(name)
    return issubclass(algo_cls, OnPolicyAlgorithm) and "multiagent" in algo_cls.capabilities


def build_policy(
    name: str,
    observation_space: spaces.Space,
    action_space: spaces.Space,
    policy: PolicyConfig,
    algo: AlgoConfig,
    env: EnvConfig,
) -> Policy:
    """The network algorithm ``name`` trains: its own ``make_policy``; with ``policy.critic: centralized`` an
    actor-critic whose critic reads ``env``'s global state (``rlcore.nets.central_critic``); with ``policy.groups``
    one of those per group of ``env``'s agents behind a :class:`GroupedActorCritic`."""
    algo_cls = algorithm_class(name)

    def make(space: spaces.Space) -> Policy:
        if policy.critic == "centralized":
            agents = env.agents()
            assert agents is not None  # checked at load: only PettingZoo envs have a centralized critic
            width = state_width(env.id, env.kwargs) + len(agents.names)
            return CentralizedActorCritic(space, action_space, policy, width, getattr(algo, "value_head", None))
        return algo_cls.make_policy(space, action_space, policy, algo)

    if policy.groups is None:
        return make(observation_space)
    return grouped_actor_critic(observation_space, action_space, policy, env, make)


def build_algorithm(name: str, policy: nn.Module, algo: AlgoConfig) -> Algorithm:
    """Algorithm ``name`` training ``policy``: one instance, or one per group of a :class:`GroupedActorCritic`."""
    algo_cls = algorithm_class(name)
    if isinstance(policy, GroupedActorCritic):
        assert issubclass(algo_cls, OnPolicyAlgorithm)  # trains_groups, checked at load
        return GroupedAlgorithm(algo_cls, policy, algo)
    return algo_cls(policy, algo)


def policy_from_checkpoint(checkpoint: Checkpoint) -> Policy:
    """Rebuild the policy network a checkpoint was saved from, with its weights, in eval mode."""
    meta = checkpoint.meta
    try:
        observation_space = space_from_description(meta["spaces"]["observation"])
        action_space = space_from_description(meta["spaces"]["action"])
        policy_config = PolicyConfig.model_validate(meta["params"]["policy"])
        algo_cls = algorithm_class(checkpoint.algo)
        algo_config = algo_cls.Config.model_validate(meta["params"]["algo"])
        if policy_config.groups is None and policy_config.critic == "local":
            policy = algo_cls.make_policy(observation_space, action_space, policy_config, algo_config)
        else:  # the groups' layout, the critic's state width: the env's agents
            env = EnvConfig.model_validate(meta["params"]["env"])
            policy = build_policy(checkpoint.algo, observation_space, action_space, policy_config, algo_config, env)
        policy.load_state_dict(checkpoint.tensors["policy"])
    except (KeyError, RuntimeError, ValueError, ValidationError) as exc:
        raise CheckpointError(f"{checkpoint.path}: cannot rebuild the policy from this checkpoint: {exc}") from None
    policy.eval()
    return policy
