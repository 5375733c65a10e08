"""The data params sections: ``collect`` (roll out a policy into a Parquet dataset) and ``dataset`` (the dataset an
offline algorithm trains on); re-exported by ``rlcore.config.sections`` with the other sections."""

from __future__ import annotations

from typing import Any

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer, model_validator

from rlcore.common.seeds import SEED_LIMIT
from rlcore.common.strict_model import StrictModel
from rlcore.envs.config import MAX_NUM_ENVS


class CollectConfig(StrictModel):
    """The ``collect`` stage: roll out a policy and write a dataset (see ``rlcore.data.schema`` for the schema)."""

    policy: str | None = None
    """A checkpoint or selected model (``.pt``) to roll out, or ``random`` for uniformly random actions. Null: the
    selected model of the run the params file follows, ``models/<name>/policy.pt`` (``rlcore.params``): with
    ``base``, the base file's run (offline.yaml rolls out params.yaml's model, whatever its ``name``); without, the
    file's own run, except for an offline algorithm (it learns from the dataset it would collect), whose collect stage
    then asks for ``collect.policy``."""
    steps: int | None = Field(20_000, ge=1)
    """Transitions to collect (episodes still running at the end are kept, marked truncated)."""
    episodes: int | None = Field(None, ge=1)
    """Complete episodes to collect instead of ``steps`` (set ``steps: null``)."""
    deterministic: bool = False
    """Greedy actions instead of samples from the policy."""
    epsilon: float = Field(0.0, ge=0, le=1)
    """Probability of a uniformly random action instead of the policy's (epsilon-noise)."""
    num_envs: int = Field(8, ge=1, le=MAX_NUM_ENVS)
    """Envs stepped together (at most 4096)."""
    seed: int = Field(2_000_000, ge=0, lt=SEED_LIMIT)
    """Shard ``i`` resets its envs with ``seed + i·num_envs`` (sub-env ``j`` adds ``j``): in the training seed range,
    apart from every evaluation's episodes."""
    output: str = "data/dataset.parquet"
    """The Parquet file the dataset is written to, relative to the project."""
    row_group_size: int = Field(65_536, ge=1)
    """Transitions per Parquet row group: bounds the writer's memory."""
    shards: int = Field(1, ge=1)
    """Split the budget into this many independent shards (own env seeds), merged into ``output`` in order.
    ``rlcore collect`` runs them one after another; the Prefect flow runs them in parallel with
    ``deploy.task_runner: dask``. Either way the file is the same, byte for byte."""

    @model_validator(mode="after")
    def _one_budget(self) -> CollectConfig:
        if (self.steps is None) == (self.episodes is None):
            raise ValueError("collect.steps: set exactly one of collect.steps and collect.episodes (the other null)")
        budget = self.steps if self.steps is not None else self.episodes
        assert budget is not None  # exactly one of the two is set (checked above)
        if self.shards > budget:
            key = "steps" if self.steps is not None else "episodes"
            raise ValueError(f"collect.shards: {self.shards} shards need at least as many collect.{key} (got {budget})")
        return self


class DatasetConfig(StrictModel):
    """The dataset an offline algorithm trains on."""

    path: str = "data/dataset.parquet"
    """The Parquet dataset to train on (``rlcore.data.schema``), relative to the project."""
    validation_fraction: float = Field(0.1, ge=0, lt=1)
    """Share of episodes held out for validation (whole episodes, never split)."""
    in_memory: bool = True
    """Read the whole dataset into memory (fastest); false streams it through a shuffle buffer of row groups
    (``rlcore.data.stream``) for datasets larger than memory."""
    buffer_transitions: int = Field(1_000_000, ge=1)
    """With ``in_memory: false``: transitions the shuffle buffer holds (whole row groups; at least one)."""
    validation_limit: int = Field(100_000, ge=1)
    """With ``in_memory: false``: at most this many held-out transitions are kept for validation."""
    agents: list[str] | None = Field(None, min_length=1)
    """A multi-agent dataset (collected from a PettingZoo env, ``rlcore.data.schema``'s ``agent`` column): train on
    the transitions of these agents only, e.g. ``[agent_0]``; null: every agent's. Refused for a dataset without an
    agent column or without rows of one of them."""
    groups: list[str] | None = Field(None, min_length=1)
    """A multi-agent dataset collected with ``policy.groups`` (``rlcore.data.schema``'s ``group`` column): train on
    the transitions of these groups' agents only, e.g. ``[adversaries]``; null: every group's. Refused for a dataset
    without a group column, or a group its metadata does not list or that has no rows; and together with
    ``dataset.agents`` (a group already names its agents: set one of the two)."""

    @model_serializer(mode="wrap")
    def _omit_unset_groups(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Without dataset.groups the tree is what it was before the key existed: the same train fingerprint and
        # params.yaml for every offline run that does not use it.
        tree = handler(self)
        if tree.get("groups") is None:
            tree.pop("groups", None)
        return tree

    @model_validator(mode="after")
    def _agents_or_groups(self) -> DatasetConfig:
        if self.agents is not None and self.groups is not None:
            raise ValueError(
                "dataset.groups: set at most one of dataset.agents and dataset.groups (a group already names its "
                "agents; the other null)"
            )
        return self
