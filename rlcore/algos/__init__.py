"""The algorithm registry, keyed by ``algo.name``: one module and one config class per algorithm.

An algorithm class declares ``name``, ``kind`` (which trainer runs it), ``Config`` (its params
section) and ``make_policy``; its module holds its loss and update and nothing else.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol

from gymnasium import spaces
from torch import nn

from rlcore.checkpoints import Checkpoint
from rlcore.config import AlgoConfig, PolicyConfig
from rlcore.envs import space_from_description
from rlcore.errors import CheckpointError

TrainerKind = Literal["on_policy"]


class Algorithm(Protocol):
    name: str
    kind: TrainerKind
    Config: type[AlgoConfig]
    policy: nn.Module

    @staticmethod
    def make_policy(observation_space: spaces.Box, action_space: spaces.Space, config: PolicyConfig) -> nn.Module: ...

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


def policy_from_checkpoint(checkpoint: Checkpoint) -> nn.Module:
    """Rebuild the policy network a checkpoint was saved from, with its weights, in eval mode."""
    meta = checkpoint.meta
    try:
        observation_space = space_from_description(meta["spaces"]["observation"])
        action_space = space_from_description(meta["spaces"]["action"])
        policy_config = PolicyConfig.model_validate(meta["params"]["policy"])
        policy = algorithm_class(checkpoint.algo).make_policy(observation_space, action_space, policy_config)
        policy.load_state_dict(checkpoint.tensors["policy"])
    except (KeyError, RuntimeError, ValueError) as exc:
        raise CheckpointError(f"{checkpoint.path}: cannot rebuild the policy from this checkpoint: {exc}") from None
    return policy.eval()


from rlcore.algos import ppo  # noqa: E402,F401  (registers itself)
