"""The params tree: typed sections loaded from ``params.yaml``, with ``--set a.b=c`` overrides.

Each stage reads only its own sections, so ``dvc.yaml`` lists exactly those keys:

| stage    | reads                                                |
|----------|------------------------------------------------------|
| train    | ``seed``, ``name``, ``branch``, ``torch_threads``, ``env``, ``policy``, ``algo``, ``train``, ``dataset`` |
| evaluate | ``name``, ``branch``, ``torch_threads``, ``env``, ``eval`` |
| select   | ``name``, ``branch``, ``select``                     |
| export   | ``name``, ``branch``, ``torch_threads``, ``export``  |
| collect  | ``torch_threads``, ``env``, ``collect``              |
| sweep    | ``sweep`` and everything a trial trains and evaluates with |

Validation happens once, at load; every problem becomes a one-line :class:`ConfigError` that
names the key, says what was expected and shows what was given.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from rlcore.errors import ConfigError, did_you_mean
from rlcore.sweep_config import SweepConfig


class StrictModel(BaseModel):
    """A params section: unknown keys are errors, values are validated on assignment too."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=False)


class WrapperConfig(StrictModel):
    """One gymnasium wrapper applied to every sub-env, e.g. ``{wrapper: gymnasium.wrappers.ClipReward, kwargs:
    {min_reward: -1, max_reward: 1}}``."""

    wrapper: str
    """Import path of the wrapper class (or any callable taking the env first): ``package.module.Name`` or
    ``package.module:Name``."""
    kwargs: dict[str, Any] = Field(default_factory=dict)
    """Its keyword arguments after the env."""

    @field_validator("wrapper")
    @classmethod
    def _importable(cls, path: str) -> str:
        from rlcore.env_ids import import_object

        import_object(path)
        return path


class EnvConfig(StrictModel):
    id: str = "CartPole-v1"
    """A registered gymnasium id, optionally ``module:Env-v0`` to import the module that registers it."""
    kwargs: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments for the env's constructor (``gymnasium.make_vec(id, **kwargs)``)."""
    num_envs: int = Field(8, ge=1)
    """Environments stepped together while training."""
    vectorization: Literal["auto", "vector_entry_point", "sync", "async"] = "auto"
    """``auto`` uses the env's own batched implementation when it has one (CartPole does) and no wrappers are
    declared, else ``sync``. ``async`` runs each env in a subprocess: worth it only for slow envs on more than
    two cores."""
    wrappers: list[WrapperConfig] = Field(default_factory=list)
    """Gymnasium wrappers applied, in this order, to every sub-env wherever the env is built (training,
    evaluation, collection, export checks). Needs ``sync`` or ``async`` vectorization (``auto`` picks ``sync``)."""

    @field_validator("id")
    @classmethod
    def _registered(cls, env_id: str) -> str:
        from rlcore.env_ids import check_env_id

        check_env_id(env_id)
        return env_id

    @model_validator(mode="after")
    def _wrappers_need_sub_envs(self) -> EnvConfig:
        if self.wrappers and self.vectorization == "vector_entry_point":
            raise ValueError(
                "env.vectorization: env.wrappers wrap each sub-env, which needs sync or async (or auto), "
                "not vector_entry_point"
            )
        return self


class PolicyConfig(StrictModel):
    hidden_sizes: list[int] = Field(default_factory=lambda: [64, 64])
    """Widths of the MLP torso, shared shape for actor and critic (the weights are separate)."""
    activation: Literal["tanh", "relu", "elu"] = "tanh"
    normalize_obs: bool = False
    """Running mean/std observation normalization; the statistics live in the policy (and its export)."""
    obs_clip: float = Field(10.0, gt=0)
    """Normalized observations are clipped to [-obs_clip, obs_clip]."""
    log_std_init: float = 0.0
    """Initial log standard deviation of the Gaussian head (Box action spaces only)."""

    @field_validator("hidden_sizes")
    @classmethod
    def _positive_widths(cls, sizes: list[int]) -> list[int]:
        if not sizes or any(size < 1 for size in sizes):
            raise ValueError(f"must be a non-empty list of positive layer widths, got {sizes}")
        return sizes


class AlgoConfig(StrictModel):
    """Base of every algorithm's config; each algorithm module defines and registers its subclass."""

    name: str


class TrainConfig(StrictModel):
    max_steps: int = Field(200_000, ge=1)
    """Budget in environment steps (summed over the vector of envs)."""
    eval_every: int = Field(10_000, ge=1)
    """Environment steps between periodic evaluations; each one also writes a candidate checkpoint."""
    eval_episodes: int = Field(10, ge=1)
    """Episodes per periodic evaluation (the final `evaluate` stage has its own count)."""
    log_every: int = Field(4096, ge=1)
    """Environment steps between rows of training metrics (losses, episode returns) in dvclive."""
    target_return: float | None = None
    """Stop as soon as a periodic evaluation's mean return reaches this; null to always use the budget."""
    max_wall_seconds: float | None = Field(None, gt=0)
    """Stop (after a final checkpoint) once training has run this long; null for no limit."""
    progress_bar: Literal["auto", "on", "off"] = "auto"
    """``auto`` shows a bar on a terminal and prints one log line per evaluation otherwise."""

    @field_validator("progress_bar", mode="before")
    @classmethod
    def _yaml_booleans(cls, value: Any) -> Any:
        # YAML 1.1 reads a bare on/off as a boolean.
        return {True: "on", False: "off"}.get(value, value) if isinstance(value, bool) else value


class EvalConfig(StrictModel):
    episodes: int = Field(10, ge=1)
    deterministic: bool = True
    """Greedy actions (argmax, or the Gaussian's mean) instead of sampling."""
    seed: int = 1_000_000
    """Base seed of the evaluation envs, kept apart from the training seeds."""
    max_parallel_envs: int = Field(32, ge=1)
    """Episodes run side by side in one vector env; more episodes run in further batches."""


class SelectConfig(StrictModel):
    metric: Literal["mean_return", "median_return", "min_return", "validation_loss", "validation_accuracy"] = (
        "mean_return"
    )
    """Returns and accuracy: highest wins; ``validation_loss`` (offline runs): lowest wins. Ties go to the
    earlier checkpoint."""


class ExportConfig(StrictModel):
    onnx: bool = True
    torch_export: bool = True
    """Also write a ``torch.export`` program (``policy.pt2``)."""
    parity_observations: int = Field(1000, ge=1)
    """Observations on which onnxruntime and torch must agree."""
    parity_tolerance: float = Field(1e-5, gt=0)
    """Largest accepted absolute difference between onnxruntime and torch outputs."""
    opset: int = Field(18, ge=17)


class CollectConfig(StrictModel):
    """The ``collect`` stage: roll out a policy and write a dataset (see ``rlcore.datasets`` for the schema)."""

    policy: str = "models/best/policy.pt"
    """A checkpoint or selected model (``.pt``) to roll out, or ``random`` for uniformly random actions."""
    steps: int | None = Field(20_000, ge=1)
    """Transitions to collect (episodes still running at the end are kept, marked truncated)."""
    episodes: int | None = Field(None, ge=1)
    """Complete episodes to collect instead of ``steps`` (set ``steps: null``)."""
    deterministic: bool = False
    """Greedy actions instead of samples from the policy."""
    epsilon: float = Field(0.0, ge=0, le=1)
    """Probability of a uniformly random action instead of the policy's (epsilon-noise)."""
    num_envs: int = Field(8, ge=1)
    seed: int = 2_000_000
    output: str = "data/dataset.parquet"
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
    validation_fraction: float = Field(0.1, ge=0, lt=1)
    """Share of episodes held out for validation (whole episodes, never split)."""
    in_memory: bool = True
    """Read the whole dataset into memory (fastest); false streams it through a shuffle buffer of row groups
    (``rlcore.dataset_stream``) for datasets larger than memory."""
    buffer_transitions: int = Field(1_000_000, ge=1)
    """With ``in_memory: false``: transitions the shuffle buffer holds (whole row groups; at least one)."""
    validation_limit: int = Field(100_000, ge=1)
    """With ``in_memory: false``: at most this many held-out transitions are kept for validation."""


class ScheduleConfig(StrictModel):
    """One Prefect deployment: when it runs (a cron line or an interval, or neither: on demand only)."""

    cron: str | None = None
    """A cron line, e.g. ``"0 3 * * *"`` (03:00 every day, in ``timezone``)."""
    interval_seconds: float | None = Field(None, gt=0)
    """Run every this many seconds instead of on a cron line."""
    timezone: str = "UTC"
    overrides: list[str] = Field(default_factory=list)
    """``--set`` overrides the scheduled runs use on top of the params file, e.g. ``["train.max_steps=50000"]``."""

    @model_validator(mode="after")
    def _one_schedule(self) -> ScheduleConfig:
        if self.cron is not None and self.interval_seconds is not None:
            raise ValueError("set at most one of cron and interval_seconds (the other null)")
        if self.cron is not None and len(self.cron.split()) not in (5, 6):
            raise ValueError(f"cron: a cron line of 5 fields expected (e.g. '0 3 * * *'), got {self.cron!r}")
        return self


class DeployConfig(StrictModel):
    """Prefect deployments (``rlcore deploy serve``), task retries and the evaluation task runner."""

    pipeline: ScheduleConfig = Field(default_factory=lambda: ScheduleConfig(cron="0 3 * * *"))
    """The ``training_pipeline`` deployment."""
    collect: ScheduleConfig = Field(default_factory=ScheduleConfig)
    """The ``collect`` deployment (on demand by default)."""
    retrain: ScheduleConfig = Field(default_factory=ScheduleConfig)
    """The ``retrain_offline`` deployment: collect a new dataset, then the offline branch on it (on demand by
    default; deployed when ``offline_params`` exists)."""
    sweep: ScheduleConfig = Field(default_factory=ScheduleConfig)
    """The ``sweep`` deployment: the study of the ``sweep`` section (on demand by default)."""
    offline_params: str = "offline.yaml"
    """The offline branch's params file, relative to the project root."""
    limit: int | None = Field(1, ge=1)
    """Flow runs the serving process runs at once (null: no limit)."""
    retries: int = Field(0, ge=0)
    """Retries of each failed task run (stages, checkpoint evaluations, collection)."""
    retry_delay_seconds: float = Field(0.0, ge=0)
    task_runner: Literal["sequential", "dask"] = "sequential"
    """How the flows run their parallel parts (a task run per checkpoint evaluation, per ``collect.shards``
    shard, per sweep trial): ``sequential`` (this process; sweeps: ``sweep.workers`` processes) or ``dask``
    (prefect-dask's DaskTaskRunner; needs a Prefect server: PREFECT_API_URL)."""
    dask_address: str | None = None
    """An existing Dask scheduler, e.g. ``tcp://10.0.0.5:8786``; null starts a LocalCluster of processes."""
    dask_workers: int = Field(2, ge=1)
    """Worker processes of that LocalCluster (one thread each)."""


SECTIONS: dict[str, Any] = {
    "env": (EnvConfig, Field(default_factory=EnvConfig)),
    "policy": (PolicyConfig, Field(default_factory=PolicyConfig)),
    "train": (TrainConfig, Field(default_factory=TrainConfig)),
    "eval": (EvalConfig, Field(default_factory=EvalConfig)),
    "select": (SelectConfig, Field(default_factory=SelectConfig)),
    "export": (ExportConfig, Field(default_factory=ExportConfig)),
    "collect": (CollectConfig, Field(default_factory=CollectConfig)),
    "dataset": (DatasetConfig, Field(default_factory=DatasetConfig)),
    # Read only by `rlcore sweep`; left out of to_dict() (checkpoints, model cards, fingerprints).
    "sweep": (SweepConfig, Field(default_factory=SweepConfig, exclude=True)),
    # Read only by flows/ (deployments, retries, task runner); left out of to_dict() like `sweep`.
    "deploy": (DeployConfig, Field(default_factory=DeployConfig, exclude=True)),
}


class Params(StrictModel):
    """The whole params tree. ``algo`` is the registered algorithm's own config class."""

    seed: int = 0
    name: str = Field("default", pattern=r"^[A-Za-z0-9._-]+$")
    """Run name: training writes to ``runs/<name>/``."""
    branch: str = Field("", pattern=r"^[A-Za-z0-9._-]*$")
    """Output branch: ``""`` writes reports/, models/best/, export/; ``offline`` writes reports/offline/,
    models/offline/best/, export/offline/ (so a second pipeline can run beside the first)."""
    torch_threads: int = Field(1, ge=1)
    """Small networks are fastest on one thread on a 2-core machine (two are 3-60x slower under load)."""
    env: EnvConfig
    policy: PolicyConfig
    algo: AlgoConfig
    train: TrainConfig
    eval: EvalConfig
    select: SelectConfig
    export: ExportConfig
    collect: CollectConfig
    dataset: DatasetConfig
    sweep: SweepConfig
    deploy: DeployConfig

    def to_dict(self) -> dict[str, Any]:
        """The resolved tree as plain data, with the algorithm's own fields (YAML/JSON-safe)."""
        return self.model_dump(mode="json", serialize_as_any=True)


def read_yaml_mapping(path: Path) -> dict[str, Any]:
    """Parse a YAML file that must hold a mapping; one-line errors name the file."""
    if not path.is_file():
        raise ConfigError(f"{path}: params file not found")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise ConfigError(f"{path}: not valid YAML{where}: {getattr(exc, 'problem', exc)}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of params at the top level, got {type(data).__name__}")
    return data


def apply_overrides(tree: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``key.path=value`` overrides; values are parsed as YAML (``1e-3``, ``true``, ``[64, 64]``)."""
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE, e.g. --set algo.lr=0.001")
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError:
            value = raw
        node = tree
        parts = key.strip().split(".")
        for depth, part in enumerate(parts[:-1]):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                prefix = ".".join(parts[: depth + 1])
                raise ConfigError(f"--set {key}: {prefix} is a value, not a section")
            node = child
        node[parts[-1]] = value
    return tree


def describe_validation_error(exc: ValidationError, model: type[BaseModel]) -> str:
    """One line for the first problem: the dotted key, what was expected, what was given."""
    error = exc.errors(include_url=False)[0]
    loc = [str(part) for part in error["loc"]]
    key = ".".join(loc) or "<top level>"
    given = error.get("input")
    if error["type"] == "extra_forbidden":
        siblings = _field_names(model, loc[:-1])
        prefix = ".".join(loc[:-1]) + "." if len(loc) > 1 else ""
        return f"unknown key {key!r}{did_you_mean(loc[-1], siblings, prefix=prefix)}"
    if error["type"] == "missing":
        return f"{key}: required key is missing"
    message = error["msg"]
    if message.startswith("Value error, "):
        message = message[len("Value error, ") :]
        return message if message.startswith(f"{key}.") else f"{key}: {message}"
    if error["type"] in {"greater_than", "greater_than_equal", "less_than", "less_than_equal"}:
        ops = {"greater_than": ">", "greater_than_equal": ">=", "less_than": "<", "less_than_equal": "<="}
        bound = next(iter(error.get("ctx", {}).values()), "?")
        return f"{key}: must be {ops[error['type']]} {bound}, got {given!r}"
    return f"{key}: {message[0].lower()}{message[1:]}, got {given!r}"


def _field_names(model: type[BaseModel], loc: list[str]) -> list[str]:
    node: Any = model
    for part in loc:
        field = node.model_fields.get(part) if isinstance(node, type) and issubclass(node, BaseModel) else None
        if field is None:
            return []
        node = field.annotation
    if isinstance(node, type) and issubclass(node, BaseModel):
        return list(node.model_fields)
    return []
