"""The algorithm registry, keyed by ``algo.name``: one module and one config class per algorithm.

An algorithm class declares ``name``, ``kind`` (which trainer runs it), ``Config`` (its params
section) and ``make_policy``; its module holds its loss and update and nothing else.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol

from gymnasium import spaces
from pydantic import ValidationError

from rlcore.checkpoints import Checkpoint
from rlcore.config import AlgoConfig, PolicyConfig
from rlcore.envs import space_from_description
from rlcore.errors import CheckpointError, ConfigError
from rlcore.policies import Policy

TrainerKind = Literal["on_policy", "off_policy", "offline"]


class Algorithm(Protocol):
    """What a registered algorithm class provides (see ``ppo.py`` for an example)."""

    name: str
    kind: TrainerKind
    Config: type[AlgoConfig]
    action_spaces: tuple[type[spaces.Space], ...]
    policy: Policy

    def __init__(
        self, policy: Policy, config: Any, observation_space: spaces.Box, action_space: spaces.Space
    ) -> None: ...

    @staticmethod
    def make_policy(
        observation_space: spaces.Box, action_space: spaces.Space, config: PolicyConfig, algo: Any
    ) -> Policy: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


_REGISTRY: dict[str, type[Any]] = {}


def register(cls: type[Any]) -> type[Any]:
    """Class decorator: make an algorithm selectable as ``algo.name: <cls.name>``."""
    _REGISTRY[cls.name] = cls
    return cls


def registered_algorithms() -> list[str]:
    return sorted(_REGISTRY)


def algorithm_class(name: str) -> type[Any]:
    return _REGISTRY[name]


def algo_config_class(name: str) -> type[AlgoConfig]:
    config: type[AlgoConfig] = _REGISTRY[name].Config
    return config


def check_action_space(name: str, env_id: str, action_space: spaces.Space) -> None:
    """Refuse an algorithm that cannot act in the env's action space, naming both."""
    accepted = algorithm_class(name).action_spaces
    if not isinstance(action_space, accepted):
        kinds = " or ".join(kind.__name__ for kind in accepted)
        raise ConfigError(f"algo.name: {name} needs a {kinds} action space, but {env_id} has {action_space}")


def policy_from_checkpoint(checkpoint: Checkpoint) -> Policy:
    """Rebuild the policy network a checkpoint was saved from, with its weights, in eval mode."""
    meta = checkpoint.meta
    try:
        observation_space = space_from_description(meta["spaces"]["observation"])
        action_space = space_from_description(meta["spaces"]["action"])
        policy_config = PolicyConfig.model_validate(meta["params"]["policy"])
        algo_cls = algorithm_class(checkpoint.algo)
        algo_config = algo_cls.Config.model_validate(meta["params"]["algo"])
        policy = algo_cls.make_policy(observation_space, action_space, policy_config, algo_config)
        policy.load_state_dict(checkpoint.tensors["policy"])
    except (KeyError, RuntimeError, ValueError, ValidationError) as exc:
        raise CheckpointError(f"{checkpoint.path}: cannot rebuild the policy from this checkpoint: {exc}") from None
    policy.eval()
    return policy


from rlcore.algos import bc, dqn, iql, ppo, sac, td3bc  # noqa: E402,F401  (each registers itself)
