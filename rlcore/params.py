"""Loading the whole params tree (the sections of ``rlcore.config.sections`` with the chosen algorithm's own config),
and its JSON Schema for editors (``rlcore params-schema``).

Kept apart from ``rlcore.config.sections`` because it needs the algorithm registry, and the algorithms need the
config sections: ``config`` (sections) <- ``algos`` (family and algorithm configs) <- ``registry`` <- ``params``.
Loading never mutates the tree it is given.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any, Union

from pydantic import Field, ValidationError, create_model

from rlcore.algos.base import OfflineAlgorithm
from rlcore.common.errors import ConfigError, did_you_mean
from rlcore.common.files import check_target, shown_path, write_text
from rlcore.common.stage_paths import selected_model
from rlcore.common.validation_errors import describe_validation_error, short_repr
from rlcore.config.inheritance import BASE_KEY, base_tree, read_params_tree
from rlcore.config.reading import apply_overrides
from rlcore.config.sections import SECTIONS, Params
from rlcore.registry import algo_config_class, algorithm_class, registered_algorithms, trains_groups

REQUIRED = {
    "env": ("id", "the env to train on, e.g. env: {id: CartPole-v1}"),
    "algo": ("name", "the algorithm, e.g. algo: {name: ppo}"),
}
"""The sections (and their key) every params tree must give: nothing falls back to a default env or algorithm.
Every other section and key has a default (``rlcore.config.sections``)."""


@functools.cache
def params_model(algo_name: str) -> type[Params]:
    """The :class:`Params` model whose ``algo`` section is ``algo_name``'s config class."""
    algo_cls = algo_config_class(algo_name)
    fields: dict[str, Any] = dict(SECTIONS)
    fields["algo"] = (algo_cls, Field(default_factory=lambda: algo_cls(name=algo_name)))
    model: type[Params] = create_model(f"Params[{algo_name}]", __base__=Params, **fields)
    return model


def load_params(path: str | Path = "params.yaml", overrides: list[str] | None = None) -> Params:
    """Load, override and validate the params tree. Raises :class:`ConfigError` on any problem."""
    path = Path(path)
    tree = read_params_tree(path)
    base = base_tree(path, tree)
    return validate_params(apply_overrides(tree, overrides or []), source=str(path), base=base)


def validate_params(tree: dict[str, Any], source: str = "params", base: dict[str, Any] | None = None) -> Params:
    """Validate a params tree (not modified) against the model of the algorithm it names (:data:`REQUIRED`);
    ``base``: the tree of the file it inherits from, whose run ``collect.policy`` follows
    (:func:`collect_policy_default`)."""
    for section, (key, what) in REQUIRED.items():
        value = tree.get(section)
        if value is None:
            raise ConfigError(f"{source}: {section}: required section is missing ({what})")
        if not isinstance(value, dict):
            raise ConfigError(f"{source}: {section}: expected a section (mapping), got {short_repr(value)}")
        if value.get(key) is None:
            raise ConfigError(f"{source}: {section}.{key}: required key is missing ({what})")
    algo = tree["algo"]
    name = algo["name"]
    known = registered_algorithms()
    if not isinstance(name, str) or name not in known:
        hint = did_you_mean(str(name), known)
        raise ConfigError(f"{source}: algo.name: unknown algorithm {short_repr(name)}{hint}; known: {', '.join(known)}")
    model = params_model(name)
    try:
        params = model.model_validate(with_collect_policy(tree, base))
    except ValidationError as exc:
        error = ConfigError(f"{source}: {other_algorithms_key(exc, name) or describe_validation_error(exc, model)}")
        error.details = validation_details(exc)  # the traceback of the user's code that raised, if it did
        raise error from None
    check_capabilities(params, source)
    return params


def collect_policy_default(tree: dict[str, Any], base: dict[str, Any] | None) -> str | None:
    """The model ``collect`` rolls out when ``collect.policy`` is null: the selected model of the run the params
    follow, ``models/<name>/policy.pt``. With a base file (``base``: offline.yaml's params.yaml), the base's run, named
    as the base file names it; without, the params' own run. None for an offline algorithm without a base: its own
    model learns from the dataset it would collect, so the collect stage asks for ``collect.policy``. ``tree`` names a
    registered algorithm."""
    if base is not None:
        followed = base
    elif issubclass(algorithm_class(tree["algo"]["name"]), OfflineAlgorithm):
        return None
    else:
        followed = tree
    name = followed.get("name", Params.model_fields["name"].default)
    return selected_model(name) if isinstance(name, str) else None  # a name that is no string is refused by name


UNSET_COLLECT_POLICY = (
    "collect.policy: not set, and the run learns offline from the dataset it would collect, with no base run to "
    "follow: set collect.policy to the model to roll out (a run's selected model models/<name>/policy.pt, a .pt "
    "checkpoint, or random), or give the params file `base: params.yaml` to roll out that run's model"
)
"""The refusal of a ``collect.policy`` left null with no run to follow (:func:`collect_policy_default`)."""


def with_collect_policy(tree: dict[str, Any], base: dict[str, Any] | None) -> dict[str, Any]:
    """``tree`` with ``collect.policy`` filled in when null or absent (:func:`collect_policy_default`); a new dict."""
    collect = tree.get("collect", {})
    if not isinstance(collect, dict) or collect.get("policy") is not None:
        return tree  # a section that is not one is refused by validation
    default = collect_policy_default(tree, base)
    return tree if default is None else {**tree, "collect": {**collect, "policy": default}}


def validation_details(exc: ValidationError) -> str:
    """The traceback a validator kept of the user's code (``rlcore.common.errors.UserCodeValueError``), or ``""``."""
    first = exc.errors(include_url=False)[0]
    return str(getattr(first.get("ctx", {}).get("error"), "details", ""))


def other_algorithms_key(exc: ValidationError, name: str) -> str | None:
    """For an unknown ``algo.<key>`` that other algorithms take (``algo.reward_signals`` on DQN): a line naming
    them, rather than "unknown key" with a spelling hint. None for any other error."""
    error = exc.errors(include_url=False)[0]
    loc = [str(part) for part in error["loc"]]
    if error["type"] != "extra_forbidden" or len(loc) != 2 or loc[0] != "algo":
        return None
    owners = [other for other in registered_algorithms() if loc[1] in algo_config_class(other).model_fields]
    if not owners:
        return None
    return f"algo.{loc[1]}: not a key of {name} (it belongs to {', '.join(owners)})"


def check_capabilities(params: Params, source: str) -> None:
    """Refuse (one line) optional params the algorithm would not honour: a recurrent policy (``policy.memory``),
    action masks (``env.action_mask``), a multi-agent env (PettingZoo), mixed precision (``train.precision``) or a
    GPU (``train.device: cuda``) for an algorithm without them. Whether this machine has the GPU is the training
    session's check: evaluate, select and export of a GPU-trained run work on any machine
    (``rlcore.nets.precision``)."""
    name = params.algo.name
    capabilities = algorithm_class(name).capabilities

    def able(capability: str) -> str:
        known = registered_algorithms()
        return ", ".join(other for other in known if capability in algorithm_class(other).capabilities)

    if params.policy.memory is not None and "memory" not in capabilities:
        raise ConfigError(
            f"{source}: policy.memory: {name} does not train recurrent policies ({able('memory')} do); "
            "set policy.memory: null"
        )
    rollout_steps = getattr(params.algo, "n_steps", None)  # PPO, A2C: their sequences are cut from one rollout
    if params.policy.memory is not None and isinstance(rollout_steps, int):
        sequence_length = params.policy.memory.sequence_length
        if sequence_length > rollout_steps:  # every sequence would be padded to its length: compute for nothing
            raise ConfigError(
                f"{source}: policy.memory.sequence_length: {sequence_length} is longer than a rollout "
                f"(algo.n_steps: {rollout_steps}), and every sequence would be padded to it; set it to at most "
                f"{rollout_steps} (or raise algo.n_steps)"
            )
    if params.policy.memory is not None and getattr(params.algo, "behavioral_cloning", None) is not None:
        raise ConfigError(
            f"{source}: policy.memory: algo.behavioral_cloning scores single dataset observations, which a recurrent "
            "policy cannot act on without its state; use one or the other"
        )
    if params.env.action_mask is not None and "action_mask" not in capabilities:
        raise ConfigError(
            f"{source}: env.action_mask: {name} does not apply action masks ({able('action_mask')} do); "
            "set env.action_mask: null"
        )
    for key, used in (("groups", params.policy.groups is not None), ("critic", params.policy.critic != "local")):
        if used and not trains_groups(name):
            grouped = ", ".join(other for other in registered_algorithms() if trains_groups(other))
            raise ConfigError(
                f"{source}: policy.{key}: {name} does not train groups of agents or centralized critics ({grouped} do)"
            )
    if params.env.agents() is not None and "multiagent" not in capabilities:
        raise ConfigError(
            f"{source}: algo.name: {name} does not train on multi-agent envs ({params.env.id}); {able('multiagent')} do"
        )
    if params.train.precision != "fp32" and "precision" not in capabilities:
        raise ConfigError(
            f"{source}: train.precision: {name} trains in fp32 only ({able('precision')} take bf16 and fp16); "
            "set train.precision: fp32"
        )
    if params.train.device == "cuda" and "cuda" not in capabilities:
        raise ConfigError(
            f"{source}: train.device: {name} trains on the CPU only ({able('cuda')} train on cuda); "
            "set train.device: auto"
        )


SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def params_schema() -> dict[str, Any]:
    """The JSON Schema of a params file: every section, and ``algo`` as the registered algorithms' configs, one of
    which ``algo.name`` picks (a ``oneOf`` with a ``discriminator`` on ``name``). Keys carry their docstrings as
    descriptions, so editors with the YAML language server show them. What only code can check (an env id is
    registered, a wrapper importable, cross-key rules) is left to :func:`load_params`."""
    configs = tuple(algo_config_class(name) for name in registered_algorithms())
    fields: dict[str, Any] = dict(SECTIONS)
    fields["algo"] = (Union[configs], ...)  # noqa: UP007 (a tuple of classes: the X | Y form cannot spread it)
    model = create_model("Params", __base__=Params, **fields)
    schema = model.model_json_schema(mode="validation")
    definitions = schema["$defs"]
    # A file with a base (``base: params.yaml``) may leave both sections out, or give env without its id: the base
    # has them. An algo section always names its algorithm (the schema picks the algorithm's keys by it).
    schema.pop("required", None)
    schema["if"] = {"required": [BASE_KEY], "properties": {BASE_KEY: {"type": "string"}}}
    schema["else"] = {
        "required": list(REQUIRED),
        "properties": {section: {"required": [key]} for section, (key, _) in REQUIRED.items()},
    }
    for option in schema["properties"]["algo"].get("anyOf", []):
        definition = definitions[option["$ref"].rsplit("/", 1)[-1]]
        definition["required"] = sorted({*definition.get("required", []), REQUIRED["algo"][0]})
    algo = schema["properties"]["algo"]
    algo["oneOf"] = algo.pop("anyOf")
    algo["discriminator"] = {
        "propertyName": "name",
        "mapping": {name: option["$ref"] for name, option in zip(registered_algorithms(), algo["oneOf"], strict=True)},
    }
    algo["description"] = "The algorithm (algo.name) and its own keys."
    _input_forms(definitions)
    return {"$schema": SCHEMA_DIALECT, "title": "rlcore params", **schema}


SCHEMA_FILE_LIMIT_BYTES = 1 << 24
"""An existing ``--output`` larger than this is not read to see whether it is a schema: it is not one (ours is
~0.3 MB)."""


def write_params_schema(target: Path, key: str = "--output") -> None:
    """Write :func:`params_schema` to ``target`` as JSON, atomically: only over nothing, an empty file or an earlier
    schema (a JSON object with ``$schema``). Anything else there (a params file, a dataset) is refused in one line
    naming ``key``, as is a target that is not a regular file (``rlcore.common.files.check_target``)."""
    target = check_target(target, key)
    if target.is_file() and target.stat().st_size > 0 and not _holds_a_schema(target):
        raise ConfigError(
            f"{key}: {shown_path(target)} holds something other than a JSON Schema (params-schema replaces only an "
            "earlier schema); give another path, or delete the file first"
        )
    write_text(target, json.dumps(params_schema(), indent=2, ensure_ascii=False) + "\n", key)


def _holds_a_schema(path: Path) -> bool:
    if path.stat().st_size > SCHEMA_FILE_LIMIT_BYTES:
        return False
    try:
        content = json.loads(path.read_bytes())
    except (UnicodeDecodeError, ValueError, RecursionError):
        return False
    return isinstance(content, dict) and "$schema" in content


def _input_forms(definitions: dict[str, Any]) -> None:
    """What the before-validators also take, which pydantic's schema (of the validated form) leaves out: an env
    parameter as a plain number or boolean (a constant), the sweep space written nested like the params tree, and
    ``export.parity_tolerance``, the old name of ``export.parity_atol``."""
    for definition in definitions.values():
        for field in definition.get("properties", {}).values():
            values = field.get("additionalProperties")
            if isinstance(values, dict) and {"$ref": "#/$defs/Constant"} in values.get("anyOf", []):
                values["anyOf"].append({"type": ["number", "boolean"]})
    dimension = {"$ref": "#/$defs/SearchDimension"}
    definitions["SearchSpace"] = {
        "type": "object",
        "description": "Params keys (dotted, or nested like the params tree) -> search dimensions.",
        "additionalProperties": {"anyOf": [dimension, {"$ref": "#/$defs/SearchSpace"}]},
    }
    space = definitions["SweepConfig"]["properties"]["space"]
    space["additionalProperties"] = {"anyOf": [dimension, {"$ref": "#/$defs/SearchSpace"}]}
    export = definitions["ExportConfig"]["properties"]
    export["parity_tolerance"] = {**export["parity_atol"], "deprecated": True}
    export["parity_tolerance"].pop("default", None)
