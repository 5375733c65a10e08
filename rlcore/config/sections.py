"""The params sections (``train``, ``eval``, ``select``, ``export``, ``deploy``; ``collect`` and ``dataset`` are
``rlcore.config.data``'s, ``env`` ``rlcore.envs.config``'s, ``policy`` ``rlcore.config.policy``'s, ``sweep``
``rlcore.config.sweep``'s) and :class:`Params`, their tree.

The keys each stage reads are one table, ``rlcore.stages.stage_params.STAGE_PARAMS``; each stage's ``params`` in
``dvc.yaml`` lists them (tests/test_stage_params.py), so changing one re-runs it.

Validation happens once, at load (``rlcore.params``); every problem becomes a one-line :class:`ConfigError` that
names the key, says what was expected and shows what was given (``rlcore.common.validation_errors``).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    AliasChoices,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from rlcore.common.errors import did_you_mean
from rlcore.common.seeds import MAX_EVAL_EPISODES, MAX_TRAIN_STEPS, PERIODIC_EPISODES_PER_SEED, SEED_LIMIT
from rlcore.common.stage_paths import RESERVED_NAMES
from rlcore.common.strict_model import StrictModel
from rlcore.common.validation_errors import short_repr
from rlcore.config.data import CollectConfig as CollectConfig
from rlcore.config.data import DatasetConfig as DatasetConfig
from rlcore.config.policy import MemoryConfig as MemoryConfig
from rlcore.config.policy import PolicyConfig
from rlcore.config.sweep import SweepConfig
from rlcore.envs.agent_groups import group_layout
from rlcore.envs.config import MAX_NUM_ENVS, EnvConfig
from rlcore.envs.game_checks import NamedOpponents, check_named_opponents
from rlcore.envs.multiagent import check_shared_spaces, state_width
from rlcore.envs.return_reduction import check_reduction
from rlcore.envs.self_play import check_self_play
from rlcore.envs.settings import MEAN_OVER_SETTINGS, EvalSetting, check_eval_settings

_FOLDER_NAME = re.compile(r"(?!-)[A-Za-z0-9._-]{1,100}")
MAX_TORCH_THREADS = 1024
"""The most torch threads (``torch_threads``): more only costs memory (libgomp allocates per thread)."""
MAX_RUN_SEEDS = 64
"""The most seeds one run trains (``train.seeds``): each is a complete run directory, trained one after another."""


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
    PPO and A2C only. An LSTM core (``policy.memory``) on a CPU whose oneDNN has no bfloat16 or float16 LSTM is
    refused in one line when training starts, naming what runs instead (``rlcore.nets.precision``)."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """Where the networks learn: ``auto`` and ``cpu`` the CPU; ``cuda`` a copy of the policy on the GPU, fed whole
    rollouts, while envs, acting, evaluation and checkpoints stay on the CPU (PPO and A2C; training is refused in
    one line on a machine without a CUDA GPU; not part of the run's fingerprint; ``rlcore.nets.precision``)."""
    init_from: str | None = None
    """A checkpoint (``runs/<name>/checkpoints/step_*.pt``) or a selected ``policy.pt`` of any run whose policy has
    this run's spaces and shapes: a fresh run starts from its policy weights and observation normalizer (fresh
    optimizer and counters; ``rlcore.trainers.warm_start``). Relative to the project. A resumed run is not
    re-initialized."""
    seeds: list[int] | None = None
    """Null: one run with the top-level ``seed`` in ``runs/<name>/``. A list of distinct seeds in [0, 2**32) (at
    most 64): one independent run per seed in one process, each in ``runs/<name>/seed_<k>/`` and the same as the
    run with ``seed: k`` (batched or one after another: ``batch_seeds``); evaluate, select and the report then cover
    every seed, ``reports/<name>/metrics.json`` adds each seed's test score and their aggregate, and ``models/<name>/``
    is the seed best on validation (``rlcore.stages.seeds``). A seed whose run finished with the same train params is
    kept, an interrupted one resumes from its own checkpoint."""
    batch_seeds: bool = True
    """With ``train.seeds``: train the seeds together as one program, through the loop of the algorithm's family that
    trains one seed (``rlcore.trainers.train_seeds``). PPO, A2C, DQN, SAC, BC, TD3+BC and IQL: one loop steps every
    seed's envs, with the seeds' networks stacked along a leading dimension where they are plain MLPs (one forward pass
    per env step and one optimizer step per update for all), and each seed's own network acting and learning in turn
    in the same loop otherwise (recurrent policies, CNN and Dict observations, action masks, categorical or transformed
    value heads, DQN's dueling head, agent groups, behavioral cloning, precision other than fp32, cuda; the log line
    says which). IMPALA, ES and SVPG share their worker processes: the workers start once and serve every seed's
    rollouts, one learner process holds every seed's learner. ``false`` trains the seeds one after another. Each seed
    keeps its own envs, evaluations, random numbers, minibatch order, optimizer state, gradient clipping, target-KL
    stop and stop conditions (a seed that stops finishes and closes its envs, the others go on). Seed ``k`` then
    equals the run with ``seed: k`` up to float32 rounding (bitwise where each seed's own network steps): the same
    evaluation returns for Discrete actions, weights within rtol 1e-4 / atol 1e-6 (``tests/test_seeds_contract.py``:
    measured at most 2.2e-5 on ppo-hopper's reward-scaler return variance, 1.1e-6 on weights). The memory estimate
    is then one run's times the number of seeds. The same choice batches a sweep trial's ``sweep.seeds``. Not part of
    a run's fingerprint."""
    seed_processes: Annotated[int, Field(ge=1)] | Literal["auto"] = "auto"
    """With ``train.seeds`` batched (``batch_seeds``) for PPO, A2C, DQN, SAC, BC, TD3+BC and IQL: how many processes
    share the seeds. The seeds still to train are split into that many contiguous groups, each trained as one batched
    program in a child process of its own (spawned; each dies with its parent), so the seeds fill the machine's cores;
    every seed writes the same ``seed_<k>/`` folder, and equals its one-seed run as above. ``auto``: the cores this
    process may use (``os.sched_getaffinity``), at most one process per two seeds still to train (a process costs
    seconds of imports and its memory: two seeds batch in one), and when ``max_steps`` is 100,000 or more with no
    ``target_return`` (a long run: two seeds batched on one core cost about twice one seed's wall on the real workloads)
    up to one per core, or one per seed when there is one seed more than cores (3 seeds on 2 cores: three processes); a
    number: that many, at most one per seed still to train; ``1``: one program in this process. Each process adds its
    fixed memory (an interpreter with torch) to the memory estimate. Each child's log lines reach this process's log
    prefixed with its seeds; children show no progress bar (a log line per evaluation instead). A child that fails stops
    the others; the error names its seeds, and a re-run resumes every seed from its own checkpoint. One process for
    IMPALA, ES and SVPG (their seeds already share their worker processes, one learner process) and for a sweep trial's
    seeds (Optuna's pruner reads every evaluation in the trial's process). Not part of a run's fingerprint."""

    @field_validator("seeds")
    @classmethod
    def _distinct_seeds(cls, seeds: list[int] | None) -> list[int] | None:
        if seeds is None:
            return seeds
        if not seeds or len(seeds) > MAX_RUN_SEEDS:
            raise ValueError(f"expected 1 to {MAX_RUN_SEEDS} seeds (a list, e.g. [0, 1, 2]), got {len(seeds)}")
        outside = [seed for seed in seeds if not 0 <= seed < SEED_LIMIT]
        if outside:
            raise ValueError(
                f"seeds must be in [0, 2**32) (training seeds stay below the evaluation ranges), got {outside[0]}"
            )
        if len(set(seeds)) != len(seeds):
            repeated = next(seed for seed in seeds if seeds.count(seed) > 1)
            raise ValueError(f"expected distinct seeds, got {repeated} twice or more")
        return seeds

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
    """Test episodes of the selected model (the select stage): the score ``reports/<name>/metrics.json`` reports."""
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
    """The select stage records the selected model's first test episode to ``reports/<name>/episode.gif``, linked from
    the report (``rlcore.evaluation.video``; the env must render ``rgb_array`` frames, else a warning and no video)."""
    return_reduction: str = "mean"
    """A multi-agent env's episode score from its agents' returns: ``mean``, ``sum``, ``min``, ``max`` or one agent's
    name (``rlcore.envs.return_reduction``). Every score (periodic evaluation, validation, test, selection, stop
    conditions, the report) is of these; each agent's returns are kept beside them. A single-agent env's one return
    is the same under each of the four."""
    settings: list[EvalSetting] = Field(default_factory=list)
    """Named settings ``{name, parameters}`` every evaluate and select stage also scores under, on the same
    validation and test episodes (the parameters apply on top of the env's own defaults, not ``env.parameters``):
    ``reports/<name>/metrics.json``'s ``settings`` block, a table and a bar chart in the report."""
    opponents: NamedOpponents = None
    """Two-player turn-based games (``env.opponent``) only: more fixed opponents the select stage plays the selected
    model against on the same test episodes, name -> import path of a function ``(observation, rng) -> action``
    (``{perfect: rlcore.envs.opponents:perfect_tictactoe}``): ``reports/<name>/metrics.json``'s
    ``outcomes_by_opponent`` (by name, as ``outcomes``: win/draw/loss rates, 95% Wilson intervals, by seat) and a
    table in the report; ``env.opponent`` stays the opponent of evaluation, validation, selection and ``outcomes``.
    Names: a letter, then letters, digits or ``_`` (at most 64); at most 16, each path once; each plays a test game
    against random legal moves at load, within ``env.user_code_timeout_seconds`` (``rlcore.envs.game_checks``).
    Null or ``{}``: none."""

    @field_validator("settings")
    @classmethod
    def _settings_named_once(cls, settings: list[EvalSetting]) -> list[EvalSetting]:
        check_eval_settings(settings)
        return settings

    @model_serializer(mode="wrap")
    def _omit_no_opponents(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        tree: dict[str, Any] = handler(self)  # no opponents: the tree (sweep fingerprints) as before the key existed
        if not tree.get("opponents"):
            del tree["opponents"]
        return tree


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
    run: the report draws both learning curves in one chart (``reports/<name>/baseline_comparison.png``); when either
    run has several seeds (``train.seeds``), ``reports/<name>/metrics.json``'s ``baseline`` adds the probability that
    a seed of this run scores higher than one of the baseline on the test episodes, with its 95% interval (the
    baseline's scores: ``reports/<baseline_run>/metrics.json``, which its select stage wrote); null: none."""

    @field_validator("baseline_run")
    @classmethod
    def _run_name(cls, name: str | None) -> str | None:
        if name is not None and (not _FOLDER_NAME.fullmatch(name) or set(name) == {"."}):
            raise ValueError(f"expected a run name (a folder of runs/), got {short_repr(name)}")
        return name


class ExportConfig(StrictModel):
    onnx: bool = True
    """Write the selected policy as ONNX (``policy.onnx``), checked against torch with onnxruntime."""
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
    """The ONNX opset version the export targets (at least 17)."""

    @model_validator(mode="before")
    @classmethod
    def _one_name_for_atol(cls, data: Any) -> Any:
        if isinstance(data, dict) and "parity_tolerance" in data and "parity_atol" in data:
            raise ValueError(
                "export.parity_tolerance: the old name of export.parity_atol; give export.parity_atol alone"
            )
        return data


class ScheduleConfig(StrictModel):
    """One Prefect deployment: when it runs (a cron line or an interval, or neither: on demand only)."""

    cron: str | None = None
    """A cron line, e.g. ``"0 3 * * *"`` (03:00 every day, in ``timezone``)."""
    interval_seconds: float | None = Field(None, gt=0)
    """Run every this many seconds instead of on a cron line."""
    timezone: str = "UTC"
    """The time zone of ``cron`` (an IANA name, e.g. ``Europe/Paris``)."""
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
    """Seconds between a failed task run and its retry."""
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

    base: str | None = Field(None, exclude=True)
    """A params file this one inherits from (relative to it, e.g. ``params.yaml``): this file's keys over the base's;
    sections merge key by key, other values (lists too) replace, an ``algo`` naming another algorithm replaces the
    base's whole (``rlcore.config.inheritance``). Null: none. Not part of the run's params (it says where they came
    from)."""
    seed: int = 0
    """Seeds torch, NumPy and the training envs; in [0, 2**32) so training seeds stay below the evaluation seed
    ranges (``rlcore.common.seeds``)."""
    name: str = "default"
    """Run name: training writes to ``runs/<name>/``, the later stages to ``reports/<name>/``, ``models/<name>/`` and
    ``export/<name>/``, so runs of different names never overwrite each other. Letters, digits, ``.``, ``_``, ``-``;
    at most 100 characters, not ``.`` or ``..``, not starting with ``-``; not ``sweep`` or ``sweeps``, the folders of
    sweeps (``reports/sweep/``, ``runs/sweeps/``)."""
    torch_threads: int = Field(1, ge=1, le=MAX_TORCH_THREADS)
    """Threads torch computes with in each stage (``torch.set_num_threads``), at most 1024. Small networks are fastest
    on one thread on a 2-core machine (two are 3-60x slower under load)."""
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

    @field_validator("name")
    @classmethod
    def _folder_name(cls, name: str) -> str:
        if not _FOLDER_NAME.fullmatch(name) or set(name) == {"."}:
            raise ValueError(
                "expected a folder name: 1 to 100 letters, digits, '.', '_' or '-', not '.' or '..', not starting "
                f"with '-', got {short_repr(name)}"
            )
        if name in RESERVED_NAMES:
            raise ValueError(f"{name!r} is not a run's name ({RESERVED_NAMES[name]}); give the run another name")
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
    def _groups_fit_the_agents(self) -> Params:
        agents = self.env.agents()
        policy = self.policy
        if agents is None:
            for key, used in (("groups", policy.groups is not None), ("critic", policy.critic != "local")):
                if used:
                    raise ValueError(f"policy.{key}: only for PettingZoo envs' agents; {self.env.id} has one agent")
            return self
        if policy.critic == "centralized":
            state_width(self.env.id, self.env.kwargs)  # the env has a working state()
            if policy.memory is not None:
                raise ValueError("policy.critic: centralized is feed-forward; set policy.memory: null")
        if policy.groups is None:
            check_shared_spaces(agents, self.env.id)
            return self
        group_layout(agents, policy.groups, self.env.id, self.env.agent_id is not False)
        if policy.memory is not None:
            raise ValueError("policy.memory: not with policy.groups yet (each group's policy is feed-forward)")
        return self

    @model_validator(mode="after")
    def _opponents_play_the_game(self) -> Params:
        if self.eval.opponents:
            check_named_opponents(
                self.env.id,
                self.env.kwargs,
                self.env.opponent,
                self.eval.opponents,
                seconds=self.env.user_code_timeout_seconds,
            )
        return self

    @model_validator(mode="after")
    def _self_play_algorithm(self) -> Params:
        if self.env.self_play is not None:
            check_self_play(self.algo.name, self.policy.memory is not None)
        return self

    @model_validator(mode="after")
    def _reduction_names_an_agent(self) -> Params:
        agents = self.env.agents()
        groups = tuple(self.policy.groups or ()) if agents is not None else ()
        check_reduction(self.eval.return_reduction, agents.names if agents is not None else (), groups)
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
