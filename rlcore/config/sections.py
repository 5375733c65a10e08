"""The params tree: typed sections loaded from ``params.yaml``, with ``--set a.b=c`` overrides.

Each stage reads only its own sections, so ``dvc.yaml`` lists exactly those keys:

| stage    | reads                                                |
|----------|------------------------------------------------------|
| train    | ``seed``, ``name``, ``branch``, ``torch_threads``, ``env``, ``policy``, ``algo``, ``train``, ``dataset``, |
|          | ``eval.max_episode_steps`` (the periodic evaluations' episode cap) |
| evaluate | ``name``, ``branch``, ``torch_threads``, ``env``, ``eval`` |
| select   | ``name``, ``branch``, ``torch_threads``, ``env``, ``eval``, ``select`` (it scores the selection on test) |
| export   | ``name``, ``branch``, ``torch_threads``, ``export``  |
| collect  | ``torch_threads``, ``env``, ``collect``              |
| sweep    | ``sweep`` and everything a trial trains and evaluates with |

Validation happens once, at load; every problem becomes a one-line :class:`ConfigError` that
names the key, says what was expected and shows what was given.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import AliasChoices, BaseModel, Field, ValidationError, ValidationInfo, field_validator, model_validator

from rlcore.common.errors import ConfigError, did_you_mean, file_problem
from rlcore.common.seeds import MAX_EVAL_EPISODES, MAX_TRAIN_STEPS, PERIODIC_EPISODES_PER_SEED, SEED_LIMIT
from rlcore.common.strict_model import StrictModel
from rlcore.config.sweep import SweepConfig
from rlcore.envs.settings import (
    MEAN_OVER_SETTINGS,
    EvalSetting,
    Lesson,
    Parameters,
    check_curriculum,
    check_eval_settings,
    check_parameter_names,
)

_FOLDER_NAME = re.compile(r"(?!-)[A-Za-z0-9._-]{1,100}")
MAX_NUM_ENVS = 4096
"""The most envs stepped together (``env.num_envs``, ``collect.num_envs``, ``eval.max_parallel_envs``)."""
MAX_TORCH_THREADS = 1024
"""The most torch threads (``torch_threads``): more only costs memory (libgomp allocates per thread)."""
MAX_LAYERS = 100
"""The most hidden layers (``policy.hidden_sizes``); their widths are bounded by the memory check
(``rlcore.trainers.memory_estimate``)."""


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
        from rlcore.envs.ids import import_object

        wrapper = import_object(path)
        if not callable(wrapper):
            raise ValueError(f"{path} is {_a(type(wrapper).__name__)}, not a wrapper class or function (env) -> env")
        return path

    @field_validator("kwargs")
    @classmethod
    def _kwargs_fit_the_wrapper(cls, kwargs: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        """Refused here, under this key, rather than as a TypeError when the env is built."""
        import inspect

        from rlcore.envs.ids import import_object

        path = info.data.get("wrapper")  # absent when the wrapper itself was refused
        if path is None:
            return kwargs
        try:
            signature = inspect.signature(import_object(path))
        except (TypeError, ValueError):  # no signature to read (a builtin): the wrapper checks its kwargs itself
            return kwargs
        try:
            signature.bind(None, **kwargs)
        except TypeError as exc:
            raise ValueError(f"{path} does not accept them: {exc} (its parameters: {signature})") from None
        return kwargs


def _a(noun: str) -> str:
    return f"an {noun}" if noun[:1].lower() in "aeiou" else f"a {noun}"


class EnvConfig(StrictModel):
    id: str = "CartPole-v1"
    """A registered gymnasium id, optionally ``module:Env-v0`` to import the module that registers it."""
    kwargs: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments for the env's constructor (``gymnasium.make_vec(id, **kwargs)``). Checked at load:
    ``max_episode_steps`` is a positive integer, ``render_mode`` one the env lists, and a value has the type of the
    constructor parameter's default (``rlcore.envs.ids.check_env_kwargs``); the env refuses the rest when built."""
    num_envs: int = Field(8, ge=1, le=MAX_NUM_ENVS)
    """Environments stepped together while training (at most 4096)."""
    vectorization: Literal["auto", "vector_entry_point", "sync", "async"] = "auto"
    """``auto`` uses the env's own batched implementation when it has one (CartPole does) and no wrappers are
    declared, else ``sync``. ``async`` runs each env in a subprocess: worth it only for slow envs on more than
    two cores."""
    wrappers: list[WrapperConfig] = Field(default_factory=list)
    """Gymnasium wrappers applied, in this order, to every sub-env wherever the env is built (training,
    evaluation, collection, export checks). Needs ``sync`` or ``async`` vectorization (``auto`` picks ``sync``)."""
    parameters: Parameters = Field(default_factory=dict)
    """Env parameters applied at every episode reset of every sub-env: name -> a number (or true/false) or a sampler
    (``{sampler: uniform, low, high}``, ``gaussian`` ``mean``/``std``, ``multirange_uniform`` ``intervals``;
    ``rlcore.envs.settings``), drawn per episode from the episode's seed. A name is a constructor keyword of the env
    (the sub-env is rebuilt at its episode boundary) or a numeric attribute of the unwrapped env
    (``rlcore.envs.parameters``); anything else is refused at load. Like wrappers, needs sync or async vectorization."""
    parameters_adapter: str | None = None
    """``module:function`` called as ``function(env, values)`` (the unwrapped env, every drawn value by name) instead
    of rlcore's own rules, for envs whose physics live elsewhere (MuJoCo model fields)."""
    curriculum: list[Lesson] = Field(default_factory=list)
    """Lessons in order, ``{name, parameters, until: {measure: eval_return | progress, threshold, min_lesson_steps,
    smoothing}}``: a lesson's parameters override ``parameters`` key by key; every lesson but the last ends by its
    ``until`` (``rlcore.envs.curriculum``). The training distribution (evaluation, collection) is the last lesson's."""

    @field_validator("id")
    @classmethod
    def _registered(cls, env_id: str) -> str:
        from rlcore.envs.ids import check_env_id

        check_env_id(env_id)
        return env_id

    def time_limit(self) -> int | None:
        """The step limit of this env's episodes as declared: ``kwargs.max_episode_steps`` (else the one
        gymnasium registered for the id), and any ``TimeLimit`` in ``wrappers``; the smallest wins. None: no limit."""
        import gymnasium as gym

        from rlcore.envs.ids import env_spec, import_object

        limits = [self.kwargs.get("max_episode_steps") or env_spec(self.id).max_episode_steps]
        for item in self.wrappers:
            wrapper = import_object(item.wrapper)
            if isinstance(wrapper, type) and issubclass(wrapper, gym.wrappers.TimeLimit):
                limits.append(item.kwargs.get("max_episode_steps"))
        found = [int(limit) for limit in limits if isinstance(limit, int) and limit > 0]
        return min(found) if found else None

    @model_validator(mode="after")
    def _kwargs_fit_the_env(self) -> EnvConfig:
        from rlcore.envs.ids import check_env_kwargs

        check_env_kwargs(self.id, self.kwargs)
        return self

    @model_validator(mode="after")
    def _wrappers_need_sub_envs(self) -> EnvConfig:
        if self.wrappers and self.vectorization == "vector_entry_point":
            raise ValueError(
                "env.vectorization: env.wrappers wrap each sub-env, which needs sync or async (or auto), "
                "not vector_entry_point"
            )
        if (self.parameters or self.curriculum) and self.vectorization == "vector_entry_point":
            raise ValueError(
                "env.vectorization: env.parameters and env.curriculum apply to each sub-env, which needs sync or "
                "async (or auto), not vector_entry_point"
            )
        return self

    @field_validator("parameters")
    @classmethod
    def _parameter_names(cls, parameters: dict[str, Any]) -> dict[str, Any]:
        return check_parameter_names(parameters)

    @field_validator("parameters_adapter")
    @classmethod
    def _adapter_importable(cls, path: str | None) -> str | None:
        from rlcore.envs.ids import import_object

        if path is not None and not callable(import_object(path)):
            raise ValueError(f"{path} is not a function (expected module:function(env, values))")
        return path

    @model_validator(mode="after")
    def _parameters_reach_the_env(self) -> EnvConfig:
        """Every parameter of ``parameters`` and of each lesson is one the env has (``rlcore.envs.parameters``)."""
        check_curriculum(self.curriculum)
        self.check_parameters(self.parameters, "env.parameters")
        for index, lesson in enumerate(self.curriculum):
            self.check_parameters(lesson.parameters, f"env.curriculum.{index}.parameters")
        return self

    def check_parameters(self, parameters: Parameters, key: str) -> None:
        """``ValueError`` (one line, ``<key>.<name>: ...``) for a parameter this env does not have."""
        from rlcore.envs.parameters import check_parameters

        check_parameters(self.id, self.kwargs, self.parameters_adapter, parameters, key)


class MemoryConfig(StrictModel):
    """A recurrent core between the observation encoder and the heads (``rlcore.nets.recurrent``)."""

    type: Literal["lstm", "gru"] = "lstm"
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

    @field_validator("hidden_sizes")
    @classmethod
    def _positive_widths(cls, sizes: list[int]) -> list[int]:
        if not sizes or any(size < 1 for size in sizes):
            raise ValueError(f"must be a non-empty list of positive layer widths, got {short_repr(sizes)}")
        if len(sizes) > MAX_LAYERS:
            raise ValueError(f"at most {MAX_LAYERS} hidden layers, got {len(sizes)}")
        return sizes


class AlgoConfig(StrictModel):
    """Base of every algorithm's config; each algorithm module defines and registers its subclass. A learning rate
    (``lr``, ``actor_lr``, wherever an algorithm declares one) is at most 1: Adam moves each weight by about ``lr``
    per step, so a larger one can only diverge."""

    name: str

    @field_validator("lr", "actor_lr", check_fields=False)
    @classmethod
    def _learning_rate_at_most_one(cls, lr: float | None) -> float | None:
        if lr is not None and lr > 1:
            raise ValueError(f"must be <= 1 (an Adam learning rate), got {short_repr(lr)}")
        return lr


class TrainConfig(StrictModel):
    max_steps: int = Field(200_000, ge=1, le=MAX_TRAIN_STEPS)
    """Budget in environment steps (summed over the vector of envs). At most 2**40, so training seeds stay below
    the evaluation seed ranges (``rlcore.common.seeds``)."""
    eval_every: int = Field(10_000, ge=1)
    """Environment steps between periodic evaluations; each one also writes a candidate checkpoint."""
    eval_episodes: int = Field(10, ge=1, le=PERIODIC_EPISODES_PER_SEED)
    """Episodes per periodic evaluation (the final `evaluate` stage has its own count), on the run's own periodic
    seeds (``rlcore.common.seeds``), apart from training, validation and test episodes."""
    log_every: int = Field(4096, ge=1)
    """Environment steps between rows of training metrics (losses, episode returns) in dvclive."""
    target_return: float | None = None
    """Stop as soon as a periodic evaluation's mean return reaches this; null to always use the budget."""
    max_wall_seconds: float | None = Field(None, gt=0)
    """Stop (after a final checkpoint) once training has run this long; null for no limit."""
    progress_bar: Literal["auto", "on", "off"] = "auto"
    """``auto`` shows a bar on a terminal and prints one log line per evaluation otherwise."""
    precision: Literal["fp32", "bf16", "fp16"] = "fp32"
    """The losses' forward passes under ``torch.autocast``: ``bf16``, or ``fp16`` with a dynamic loss scale (a
    gradient scaler; meant for CUDA, slow on a CPU). Weights, optimizer state, rollouts and acting stay float32.
    PPO and A2C only (``rlcore.nets.precision``)."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """Where the networks learn: ``auto`` and ``cpu`` the CPU; ``cuda`` a copy of the policy on the GPU, fed whole
    rollouts, while envs, acting, evaluation and checkpoints stay on the CPU (PPO and A2C; training is refused in
    one line on a machine without a CUDA GPU; not part of the run's fingerprint; ``rlcore.nets.precision``)."""
    init_from: str | None = None
    """A checkpoint (``runs/<name>/checkpoints/step_*.pt``) or a selected ``policy.pt`` of any run whose policy has
    this run's spaces and shapes: a fresh run starts from its policy weights and observation normalizer (fresh
    optimizer and counters; ``rlcore.trainers.warm_start``). Relative to the project. A resumed run is not
    re-initialized."""

    @field_validator("progress_bar", mode="before")
    @classmethod
    def _yaml_booleans(cls, value: Any) -> Any:
        # YAML 1.1 reads a bare on/off as a boolean.
        return {True: "on", False: "off"}.get(value, value) if isinstance(value, bool) else value


class EvalConfig(StrictModel):
    """Evaluation: the evaluate stage (validation episodes, every checkpoint) and the select stage (test
    episodes, the selected model only). Seed ranges: ``rlcore.common.seeds``."""

    episodes: int = Field(10, ge=1, le=MAX_EVAL_EPISODES)
    """Validation episodes per checkpoint (the evaluate stage); select-best picks on their scores."""
    test_episodes: int = Field(100, ge=1, le=MAX_EVAL_EPISODES)
    """Test episodes of the selected model (the select stage): the score ``reports/metrics.json`` reports."""
    deterministic: bool = True
    """Greedy actions (argmax, or the Gaussian's mean) instead of sampling."""
    seed: int = Field(0, ge=0, lt=SEED_LIMIT)
    """Offset inside the validation and test seed blocks (episode ``k`` of validation has seed
    ``2·2**48 + seed + k``, of test ``3·2**48 + seed + k``); change it for a fresh set of held-out episodes."""
    max_parallel_envs: int = Field(32, ge=1, le=MAX_NUM_ENVS)
    """Episodes run side by side in one vector env (at most 4096); more episodes run in further batches."""
    max_episode_steps: int | None = Field(None, ge=1)
    """Every evaluation episode (periodic ones during training too) is stopped after this many steps and counted
    as truncated. Null: the env's time limit (``env.kwargs.max_episode_steps``, else gymnasium's registered one);
    required when the env has none."""
    video: bool = False
    """The select stage records the selected model's first test episode to ``reports/episode.gif``, linked from the
    report (``rlcore.evaluation.video``; the env must render ``rgb_array`` frames, else a warning and no video)."""
    settings: list[EvalSetting] = Field(default_factory=list)
    """Named settings ``{name, parameters}`` every evaluate and select stage also scores under, on the same
    validation and test episodes (the parameters apply on top of the env's own defaults, not ``env.parameters``):
    ``reports/metrics.json``'s ``settings`` block, a table and a bar chart in the report."""

    @field_validator("settings")
    @classmethod
    def _settings_named_once(cls, settings: list[EvalSetting]) -> list[EvalSetting]:
        check_eval_settings(settings)
        return settings


class SelectConfig(StrictModel):
    metric: Literal["mean_return", "median_return", "min_return", "validation_loss", "validation_accuracy"] = (
        "mean_return"
    )
    """Returns and accuracy: highest wins; ``validation_loss`` (offline runs): lowest wins. Ties go to the
    earlier checkpoint."""
    setting: str | None = None
    """Which evaluation ``metric`` is read from: null, the training distribution; the name of one of
    ``eval.settings``; or ``mean``, the mean of the metric over ``eval.settings``."""
    baseline_run: str | None = None
    """The name of another run (``runs/<name>``), e.g. the same params trained from scratch beside a warm-started
    run: the report draws both learning curves in one chart (``reports/baseline_comparison.png``); null: none."""

    @field_validator("baseline_run")
    @classmethod
    def _run_name(cls, name: str | None) -> str | None:
        if name is not None and (not _FOLDER_NAME.fullmatch(name) or set(name) == {"."}):
            raise ValueError(f"expected a run name (a folder of runs/), got {short_repr(name)}")
        return name


class ExportConfig(StrictModel):
    onnx: bool = True
    torch_export: bool = True
    """Also write a ``torch.export`` program (``policy.pt2``)."""
    parity_observations: int = Field(1000, ge=1, le=1_000_000)
    """Observations on which onnxruntime and torch must agree (at most 1,000,000)."""
    parity_atol: float = Field(1e-5, gt=0, validation_alias=AliasChoices("parity_atol", "parity_tolerance"))
    """The absolute term of the parity rule: every output element must satisfy
    ``|exported - torch| <= parity_atol + parity_rtol * |torch|`` (numpy's ``allclose`` rule). It serves outputs near
    zero, where a relative term allows nothing (an output that is a near-cancelling sum of large terms carries their
    rounding: raise it to about ``parity_rtol`` times those terms). ``parity_tolerance``, the old name of this key
    (when the check was absolute only), is still read as ``parity_atol``."""
    parity_rtol: float = Field(1e-4, ge=0)
    """The relative term of the parity rule, so one rule fits outputs of any scale (logits near 1, Q-values in the
    hundreds, recurrent states). float32 keeps 24 bits (a rounding step of 6e-8 relative); onnxruntime and torch sum
    the same products in other orders and approximate tanh/exp differently, which measures at 1e-7 to 1e-6 relative
    (DQN's CartPole Q-values near 100 differ by 3.8e-5, 4e-7 relative). 1e-4 leaves a 100x margin over that, while a
    real export fault (a missing normalizer, a wrong activation, stale or perturbed weights) moves outputs by 1e-2
    or more. 0: the absolute rule alone."""
    opset: int = Field(18, ge=17)

    @model_validator(mode="before")
    @classmethod
    def _one_name_for_atol(cls, data: Any) -> Any:
        if isinstance(data, dict) and "parity_tolerance" in data and "parity_atol" in data:
            raise ValueError(
                "export.parity_tolerance: the old name of export.parity_atol; give export.parity_atol alone"
            )
        return data


class CollectConfig(StrictModel):
    """The ``collect`` stage: roll out a policy and write a dataset (see ``rlcore.data.datasets`` for the schema)."""

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
    num_envs: int = Field(8, ge=1, le=MAX_NUM_ENVS)
    """Envs stepped together (at most 4096)."""
    seed: int = Field(2_000_000, ge=0, lt=SEED_LIMIT)
    """Shard ``i`` resets its envs with ``seed + i·num_envs`` (sub-env ``j`` adds ``j``): in the training seed range,
    apart from every evaluation's episodes."""
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
    (``rlcore.data.stream``) for datasets larger than memory."""
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
    dask_workers: int = Field(2, ge=1, le=1024)
    """Worker processes of that LocalCluster (one thread each; at most 1024)."""


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
    """Seeds torch, NumPy and the training envs; in [0, 2**32) so training seeds stay below the evaluation seed
    ranges (``rlcore.common.seeds``)."""
    name: str = "default"
    """Run name: training writes to ``runs/<name>/``. Letters, digits, ``.``, ``_``, ``-``; at most 100 characters,
    not ``.`` or ``..``, not starting with ``-``."""
    branch: str = ""
    """Output branch: ``""`` writes reports/, models/best/, export/; ``offline`` writes reports/offline/,
    models/offline/best/, export/offline/ (so a second pipeline can run beside the first)."""
    torch_threads: int = Field(1, ge=1, le=MAX_TORCH_THREADS)
    """Small networks are fastest on one thread on a 2-core machine (two are 3-60x slower under load). At most
    1024."""
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

    @field_validator("name", "branch")
    @classmethod
    def _folder_name(cls, name: str, info: ValidationInfo) -> str:
        if info.field_name == "branch" and name == "":
            return name
        if not _FOLDER_NAME.fullmatch(name) or set(name) == {"."}:
            raise ValueError(
                "expected a folder name: 1 to 100 letters, digits, '.', '_' or '-', not '.' or '..', not starting "
                f"with '-', got {short_repr(name)}"
            )
        return name

    @field_validator("seed")
    @classmethod
    def _seed_in_range(cls, seed: int) -> int:
        if not 0 <= seed < SEED_LIMIT:
            raise ValueError(f"must be in [0, 2**32) (training seeds stay below the evaluation ranges), got {seed}")
        return seed

    @model_validator(mode="after")
    def _settings_reach_the_env(self) -> Params:
        for index, setting in enumerate(self.eval.settings):
            self.env.check_parameters(setting.parameters, f"eval.settings.{index}.parameters")
        chosen = self.select.setting
        names = [setting.name for setting in self.eval.settings]
        if chosen is not None:
            if chosen not in [*names, MEAN_OVER_SETTINGS]:
                listed = ", ".join(repr(name) for name in names) or "none declared"
                raise ValueError(
                    f"select.setting: {chosen!r} is not one of eval.settings ({listed}) nor 'mean' (their mean)"
                    + did_you_mean(chosen, names)
                )
            if chosen == MEAN_OVER_SETTINGS and not names:
                raise ValueError("select.setting: 'mean' is the mean over eval.settings, and none are declared")
            if self.select.metric.startswith("validation_"):
                raise ValueError(
                    f"select.setting: {self.select.metric} is measured on the dataset's held-out episodes, under no "
                    "env setting; set select.setting: null"
                )
        return self

    @model_validator(mode="after")
    def _evaluation_episodes_end(self) -> Params:
        if self.eval.max_episode_steps is None and self.env.time_limit() is None:
            raise ValueError(
                f"eval.max_episode_steps: {self.env.id} has no time limit (none registered, none in env.kwargs): "
                "set eval.max_episode_steps so evaluation episodes end"
            )
        return self

    def to_dict(self) -> dict[str, Any]:
        """The resolved tree as plain data, with the algorithm's own fields (YAML/JSON-safe)."""
        return self.model_dump(mode="json", serialize_as_any=True)


MAX_PARAMS_FILE_BYTES = 1 << 20
"""A params file larger than this (1 MiB) is refused unread: params files are a few KB."""
MAX_YAML_VALUES = 100_000
"""A params file or ``--set`` value whose YAML holds more values than this, counting every alias's expansion, is
refused before it is built (an alias bomb, "billion laughs", would otherwise hang validation)."""
MAX_YAML_DEPTH = 64
"""Deepest nesting of YAML collections accepted."""


class InvalidYAML(ConfigError):
    """Text that is not YAML at all (``--set`` then takes the value as a string)."""


_SAFE_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's: ~10x faster


class ParamsLoader(_SAFE_LOADER):
    """``yaml.SafeLoader`` (libyaml's where PyYAML has it) that also reads ``1e-3`` and ``1e5`` as numbers, as
    YAML 1.2 (and DVC, reading the same params.yaml) does: YAML 1.1 floats need a dot (``1.0e-3``), and the string
    ``'1e-3'`` would now be refused where a number is expected (``rlcore.common.strict_model``)."""


ParamsLoader.add_implicit_resolver(  # copies SafeLoader's resolvers before adding this one
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def parse_yaml(text: str, source: str) -> Any:
    """``yaml.safe_load`` bounded: refuses (``ConfigError`` naming ``source``) YAML that is invalid, nested deeper
    than :data:`MAX_YAML_DEPTH`, recursive, or that would expand to more than :data:`MAX_YAML_VALUES` values."""
    if _flow_depth(text) > MAX_YAML_DEPTH:  # PyYAML's scanner is quadratic in the depth of [ and { nesting
        raise ConfigError(f"{source}: YAML nested deeper than {MAX_YAML_DEPTH} levels")
    try:
        loader = ParamsLoader(text)
    except yaml.YAMLError as exc:  # a character YAML does not allow (NUL, other control characters)
        raise InvalidYAML(f"{source}: not valid YAML: {_yaml_problem(exc)}") from None
    try:
        try:
            node = loader.get_single_node()
        except yaml.YAMLError as exc:
            raise InvalidYAML(f"{source}: not valid YAML{_yaml_line(exc)}: {_yaml_problem(exc)}") from None
        except RecursionError:
            raise ConfigError(f"{source}: YAML nested deeper than {MAX_YAML_DEPTH} levels") from None
        if node is None:
            return None
        _check_expansion(node, source)
        try:
            return loader.construct_document(node)
        except yaml.YAMLError as exc:
            raise InvalidYAML(f"{source}: not valid YAML{_yaml_line(exc)}: {_yaml_problem(exc)}") from None
        except Exception as exc:  # a tagged or implicit value that does not convert: !!int abc, 2001-13-45
            problem = " ".join(f"{type(exc).__name__}: {exc}".split())
            raise InvalidYAML(f"{source}: not valid YAML: a value that does not convert ({problem})") from None
    finally:
        loader.dispose()


def _yaml_line(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    return f" (line {mark.line + 1})" if mark is not None else ""


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """PyYAML's message without its quoted excerpt of the text: one short line."""
    if isinstance(exc, yaml.reader.ReaderError):
        return f"unacceptable character #x{exc.character:04x} at offset {exc.position} ({exc.reason})"
    parts = [getattr(exc, "context", None), getattr(exc, "problem", None)]
    text = ", ".join(str(part) for part in parts if part) or str(exc)
    return " ".join(text.split())


_QUOTED_OR_COMMENT = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\']|\'\')*\'|(?:^|(?<=\s))#[^\n]*', re.MULTILINE)
_FLOW_BRACKET = re.compile(r"[][{}]")


def _flow_depth(text: str) -> int:
    """The deepest nesting of flow collections (``[``, ``{``) outside quoted strings and comments."""
    depth = deepest = 0
    for match in _FLOW_BRACKET.finditer(_QUOTED_OR_COMMENT.sub("", text)):
        depth = depth + 1 if match.group() in "[{" else max(depth - 1, 0)
        deepest = max(deepest, depth)
    return deepest


def _check_expansion(root: yaml.Node, source: str) -> None:
    """Count the values ``root`` expands to (aliases counted at every use) without expanding it."""

    def children(node: yaml.Node) -> list[yaml.Node]:
        if isinstance(node, yaml.SequenceNode):
            return list(node.value)
        if isinstance(node, yaml.MappingNode):
            return [item for pair in node.value for item in pair]
        return []

    sizes: dict[int, int] = {}
    heights: dict[int, int] = {}
    active: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, finished = stack.pop()
        key = id(node)
        if finished:
            active.discard(key)
            below = children(node)
            sizes[key] = 1 + sum(sizes[id(child)] for child in below)
            heights[key] = 1 + max((heights[id(child)] for child in below), default=0)
            if sizes[key] > MAX_YAML_VALUES:
                raise ConfigError(
                    f"{source}: YAML expands to more than {MAX_YAML_VALUES} values (aliases counted at every use: "
                    "an alias bomb?)"
                )
            if heights[key] > MAX_YAML_DEPTH:
                raise ConfigError(f"{source}: YAML nested deeper than {MAX_YAML_DEPTH} levels")
            continue
        if key in sizes:
            continue
        if key in active:
            raise ConfigError(f"{source}: a YAML alias refers to a collection that contains it (recursive)")
        active.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in children(node) if id(child) not in sizes)


def read_text_file(path: Path, what: str = "params file", limit: int = MAX_PARAMS_FILE_BYTES) -> str:
    """The text of a UTF-8 file (a UTF-8 byte-order mark is fine); one-line errors name the file."""
    problem = file_problem(path, what)
    if problem is not None:
        raise ConfigError(f"{path}: {problem}")
    try:
        size = path.stat().st_size
        if size > limit:
            raise ConfigError(f"{path}: {size} bytes is too large for a {what} (at most {limit}): is it one?")
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the {what}: {exc.strerror or exc}") from None
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise ConfigError(f"{path}: not a UTF-8 text {what} (it is UTF-16: save it as UTF-8)")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{path}: not a UTF-8 text {what} (byte 0x{raw[exc.start]:02x} at offset {exc.start} is not UTF-8; "
            "a binary file, or another encoding such as latin-1?)"
        ) from None
    if "\x00" in text:
        raise ConfigError(f"{path}: not a UTF-8 text {what} (it holds NUL bytes: a binary file?)")
    return text


def read_yaml_mapping(path: Path) -> dict[str, Any]:
    """Parse a YAML file that must hold a non-empty mapping; one-line errors name the file."""
    data = parse_yaml(read_text_file(path), str(path))
    if data is None:
        raise ConfigError(f"{path}: params file is empty (nothing but blanks, comments or null): nothing to run")
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of params at the top level, got {type(data).__name__}")
    return data


def apply_overrides(tree: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``key.path=value`` overrides; values are parsed as YAML (``1e-3``, ``true``, ``[64, 64]``), bounded
    like a params file (:func:`parse_yaml`); a value that is not valid YAML is taken as a string."""
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE, e.g. --set algo.lr=0.001")
        try:
            value = parse_yaml(raw, f"--set {key.strip()}") if raw.strip() else ""
        except InvalidYAML:
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


_UNION_TAG = re.compile(
    r"^(int|float|str|bool|bytes|none|constrained-\w+|literal\[.*\]|function-\w+\[.*\]|list\[.*\]|dict\[.*\]"
    r"|tagged-union\[.*\]|union\[.*\]|is-instance\[.*\]|json-or-python\[.*\]|lax-\w+|strict-\w+)$"
)
_COMPARISONS = {"greater_than": ">", "greater_than_equal": ">=", "less_than": "<", "less_than_equal": "<="}


def short_repr(value: Any, limit: int = 80) -> str:
    """``repr(value)`` cut to about ``limit`` characters (huge lists, strings and numbers stay one short line)."""
    import reprlib

    shortener = reprlib.Repr()
    shortener.maxlevel, shortener.maxlist, shortener.maxdict, shortener.maxtuple = 3, 8, 8, 8
    shortener.maxstring, shortener.maxlong, shortener.maxother = limit, 40, limit
    text = shortener.repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def describe_validation_error(exc: ValidationError, model: type[BaseModel]) -> str:
    """One line for the first problem: the dotted key, what was expected, what was given. The alternatives of a
    union (``ent_coef: float | auto``) are named together."""
    errors = exc.errors(include_url=False)
    error = errors[0]
    loc = [str(part) for part in error["loc"] if not _UNION_TAG.match(str(part))]
    key = ".".join(loc) or "<top level>"
    given = short_repr(error.get("input"))
    if error["type"] == "extra_forbidden":
        siblings = _field_names(model, loc[:-1])
        prefix = ".".join(loc[:-1]) + "." if len(loc) > 1 else ""
        return f"unknown key {short_repr(key)}{did_you_mean(loc[-1], siblings, prefix=prefix)}"
    if error["type"] == "missing":
        return f"{key}: required key is missing"
    message = error["msg"]
    if message.startswith("Value error, "):
        message = message[len("Value error, ") :]
        return message if not loc or message.startswith(f"{key}.") else f"{key}: {message}"
    alternatives = [
        other
        for other in errors
        if len(other["loc"]) > len(loc) and [str(p) for p in other["loc"] if not _UNION_TAG.match(str(p))] == loc
    ]
    if len(alternatives) > 1:
        return f"{key}: expected {' or '.join(dict.fromkeys(_expected(other) for other in alternatives))}, got {given}"
    if error["type"] in _COMPARISONS:
        bound = next(iter(error.get("ctx", {}).values()), "?")
        return f"{key}: must be {_COMPARISONS[error['type']]} {bound}, got {given}"
    message = message[0].lower() + message[1:]
    return f"{key}: {message} ({given})" if ", got " in message else f"{key}: {message}, got {given}"


def _expected(error: Any) -> str:
    """What one alternative of a union wanted, in a few words."""
    kind = error["type"]
    if kind in _COMPARISONS:
        return f"a number {_COMPARISONS[kind]} {next(iter(error.get('ctx', {}).values()), '?')}"
    if kind == "literal_error":
        return str(error.get("ctx", {}).get("expected", "one of the listed values"))
    if kind == "finite_number":
        return "a finite number"
    if kind.startswith("float_"):
        return "a number"
    if kind.startswith("int_"):
        return "an integer"
    message = str(error["msg"]).removeprefix("Value error, ")
    return message[0].lower() + message[1:]


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
