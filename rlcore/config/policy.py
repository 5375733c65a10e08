"""The ``policy`` params section (:class:`PolicyConfig`): the network's shape, its observation normalization, an
optional recurrent core (:class:`MemoryConfig`), and for PettingZoo envs groups of agents with their own policies and
a centralized critic."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, SerializerFunctionWrapHandler, field_validator, model_serializer, model_validator

from rlcore.common.strict_model import StrictModel
from rlcore.common.validation_errors import short_repr

MAX_LAYERS = 100
"""The most hidden layers (``policy.hidden_sizes``); their widths are bounded by the memory check
(``rlcore.trainers.memory_estimate``)."""
_GROUP_NAME = re.compile(r"(?!-)[A-Za-z0-9._-]{1,100}")


class MemoryConfig(StrictModel):
    """A recurrent core between the observation encoder and the heads (``rlcore.nets.recurrent``)."""

    type: Literal["lstm", "gru"] = "lstm"
    """The recurrent cell: an LSTM (hidden and cell state) or a GRU (hidden state only)."""
    size: int = Field(64, ge=1, le=4096)
    """Hidden units of the core; the state is (batch, 2, size) for an LSTM (h and c), (batch, 1, size) for a GRU."""
    sequence_length: int = Field(16, ge=1, le=4096)
    """Steps per training sequence: rollouts are cut into sequences of this many steps per env (fewer for the
    rollout's last), which minibatches hold whole, each starting from the state stored when it was collected. At
    most ``algo.n_steps`` (refused at load: every sequence is padded to this length)."""
    burn_in: int = Field(0, ge=0)
    """Steps before each sequence run only to refresh its stored state (no loss on them); less than
    ``sequence_length``."""

    @model_validator(mode="after")
    def _burn_in_shorter(self) -> MemoryConfig:
        if self.burn_in >= self.sequence_length:
            raise ValueError(
                f"policy.memory.burn_in: must be < policy.memory.sequence_length ({self.sequence_length}), "
                f"got {self.burn_in}"
            )
        return self


class PolicyConfig(StrictModel):
    hidden_sizes: list[int] = Field(default_factory=lambda: [64, 64])
    """Widths of the MLP torso, shared shape for actor and critic (the weights are separate). At most 100 layers;
    networks that would not fit in the memory available are refused before training
    (``rlcore.trainers.memory_estimate``)."""
    activation: Literal["tanh", "relu", "elu"] = "tanh"
    """The hidden layers' nonlinearity."""
    normalize_obs: bool = False
    """Running mean/std observation normalization; the statistics live in the policy (and its export)."""
    obs_clip: float = Field(10.0, gt=0)
    """Normalized observations are clipped to [-obs_clip, obs_clip]."""
    log_std_init: float = Field(0.0, ge=-20, le=20)
    """Initial log standard deviation of the Gaussian head (Box action spaces only), in [-20, 20]."""
    encoder: Literal["auto", "flatten", "nature_cnn", "small_cnn"] = "auto"
    """What turns observations into features (``rlcore.nets.encoders``): ``auto`` picks from the space (flatten for
    vectors, one-hot for Discrete, the Nature CNN for images of at least 36x36 pixels, a small CNN for smaller
    ones, one per key of a Dict); a name forces it for the images."""
    image_channels: Literal["auto", "first", "last"] = "auto"
    """Where an image's channel axis is: ``auto`` takes the first axis when it is shorter than the last."""
    memory: MemoryConfig | None = None
    """A recurrent core (``{type: lstm | gru, size, sequence_length, burn_in}``) between the encoder and the heads,
    shared by actor and critic; null: a feed-forward policy. PPO and A2C only."""
    groups: dict[str, list[str]] | None = None
    """PettingZoo envs only: groups of agents, each with its own policy network and optimizer state, as group name
    -> agent-name patterns (``fnmatch``: ``{adversaries: ["adversary_*"], good: ["agent_*"]}``); every agent in
    exactly one group. A group's agents share its policy (with their one-hot within the group when
    ``env.agent_id``); agents whose observations differ must be in different groups (``rlcore.envs.agent_groups``).
    PPO and A2C; null: one policy shared by all agents."""
    critic: Literal["local", "centralized"] = "local"
    """PettingZoo envs only: what the value function reads. ``local``: the agent's own observation (IPPO);
    ``centralized``: the env's global ``state()`` plus the agent's one-hot (MAPPO, ``rlcore.nets.central_critic``);
    the actor always reads the agent's observation and is all that is exported. PPO and A2C."""

    @model_serializer(mode="wrap")
    def _omit_multiagent_defaults(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Without groups or a centralized critic the tree is what it was before these keys existed: the same
        # train fingerprint and params.yaml for every run that does not use them.
        tree = handler(self)
        if tree.get("groups") is None:
            tree.pop("groups", None)
        if tree.get("critic") == "local":
            tree.pop("critic", None)
        return tree

    @field_validator("groups")
    @classmethod
    def _groups_named(cls, groups: dict[str, list[str]] | None) -> dict[str, list[str]] | None:
        if groups is None:
            return None
        if not groups:
            raise ValueError("expected at least one group (group name -> agent-name patterns), got {}")
        for name, patterns in groups.items():
            if not _GROUP_NAME.fullmatch(name) or name in (".", ".."):
                raise ValueError(
                    f"group name {short_repr(name)}: letters, digits, '.', '_', '-' (it names export/<name>/<group>/)"
                )
            if not patterns or any(not pattern for pattern in patterns):
                raise ValueError(
                    f"{name}: expected a non-empty list of agent-name patterns, got {short_repr(patterns)}"
                )
        return groups

    @field_validator("hidden_sizes")
    @classmethod
    def _positive_widths(cls, sizes: list[int]) -> list[int]:
        if not sizes or any(size < 1 for size in sizes):
            raise ValueError(f"must be a non-empty list of positive layer widths, got {short_repr(sizes)}")
        if len(sizes) > MAX_LAYERS:
            raise ValueError(f"at most {MAX_LAYERS} hidden layers, got {len(sizes)}")
        return sizes
