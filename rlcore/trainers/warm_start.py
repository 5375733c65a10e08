"""Warm starts (``train.init_from``): a fresh run that starts from another run's policy.

The source is any rlcore checkpoint file: a training checkpoint (``runs/<name>/checkpoints/step_*.pt``) or a
selected model (``models/<name>/policy.pt``, ``models/bc-cartpole/policy.pt``). Only the policy's tensors are taken:
its weights and its observation normalizer's statistics. The optimizer, the RNG states and every counter start
fresh, as in any new run; a resumed run is never re-initialized (its checkpoint wins).

Which source tensor initializes which of this run's tensors is a fixed table by policy class, never a guess:

| source policy               | this run's policy | mapping                                                      |
|-----------------------------|-------------------|--------------------------------------------------------------|
| the same class (PPO -> A2C) | the same class    | every tensor under its own name                              |
| ``CategoricalActor`` (BC)   | ``ActorCritic``   | ``logits.*`` -> ``actor.*``; the critic is left fresh        |
| ``GaussianActor`` (BC, Box) | ``ActorCritic``   | ``mean.*`` -> ``actor.*``, ``log_std``; the critic left fresh |

``obs_normalizer.*`` and ``encoder.*`` (every policy has them) keep their names. Any other pair of classes is
refused, as is a source tensor with no counterpart, a mapped tensor of another shape (naming both shapes), other
observation or action spaces, or other ``policy`` keys that change what the weights mean (activation, normalization).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from gymnasium import spaces

from rlcore.common.checkpoints import load_checkpoint
from rlcore.common.errors import CheckpointError, ConfigError, file_problem
from rlcore.common.files import sha256_file, shown_path
from rlcore.common.validation_errors import short_repr
from rlcore.config.sections import Params, PolicyConfig
from rlcore.envs.vector import describe_space
from rlcore.nets.policy import Policy
from rlcore.registry import policy_from_checkpoint

log = logging.getLogger("rlcore")

KEY = "train.init_from"

RENAMES: dict[tuple[str, str], dict[str, str]] = {
    ("CategoricalActor", "ActorCritic"): {"logits.": "actor."},
    ("GaussianActor", "ActorCritic"): {"mean.": "actor."},
}
"""(source policy class, this run's policy class) -> source key prefix -> this run's key prefix. Keys under no
listed prefix keep their names. The same class maps every key to itself."""

SAME_MEANING = ("activation", "normalize_obs", "obs_clip", "encoder", "image_channels")
"""``policy`` keys that change what a weight means without changing its shape: source and run must agree."""


def map_keys(source_class: str, target_class: str, keys: Iterable[str]) -> dict[str, str]:
    """Source state-dict key -> this run's key, by :data:`RENAMES`; ``ConfigError`` for a pair with no mapping."""
    if source_class == target_class:
        return {key: key for key in keys}
    renames = RENAMES.get((source_class, target_class))
    if renames is None:
        known = ", ".join(f"{a} -> {b}" for a, b in RENAMES)
        raise ConfigError(
            f"its {source_class} cannot initialize this run's {target_class} (the same class can, and {known})"
        )
    mapped = {}
    for key in keys:
        prefix = next((old for old in renames if key.startswith(old)), None)
        mapped[key] = key if prefix is None else renames[prefix] + key[len(prefix) :]
    return mapped


@dataclass(frozen=True)
class WarmStart:
    """A checked source: the tensors to load, under this run's key names, and where they came from."""

    path: Path
    sha256: str
    algo: str
    policy_class: str
    step: int
    step_unit: str
    tensors: dict[str, torch.Tensor]
    """This run's key -> the source's tensor (already checked for shape)."""
    renamed: dict[str, str]
    """This run's key -> the source's key, where the two differ."""
    fresh: list[str]
    """This run's keys the source has no tensor for: they keep their initialization."""

    def fingerprint(self) -> dict[str, Any]:
        """Part of the run's fingerprint: the source's content, so a re-trained source starts a fresh run."""
        return {"init_from_sha256": self.sha256}

    def record(self) -> dict[str, Any]:
        """What the run was initialized from: in its checkpoints, summary and model card."""
        return {
            "path": shown_path(self.path),
            "sha256": self.sha256,
            "algo": self.algo,
            "policy": self.policy_class,
            "step": self.step,
            "step_unit": self.step_unit,
            "loaded": sorted(self.tensors),
            "renamed": dict(sorted(self.renamed.items())),
            "fresh": sorted(self.fresh),
        }

    def apply(self, policy: Policy) -> None:
        """Copy the tensors into ``policy`` (in place: optimizers built on it later see them) and log what."""
        missing, unexpected = policy.load_state_dict(self.tensors, strict=False)
        assert not unexpected and sorted(missing) == sorted(self.fresh), (missing, unexpected)
        loaded = _groups(self.tensors, self.renamed)
        fresh = _groups(self.fresh, {})
        log.info(
            "initialized the policy from %s (%s, %s %d, sha256 %s): loaded %s%s",
            shown_path(self.path),
            self.algo,
            self.step_unit.removesuffix("s").replace("_", " "),
            self.step,
            self.sha256[:12],
            loaded,
            f"; left fresh {fresh}" if fresh else "",
        )

    def check_kept(self, policy: Policy) -> None:
        """Refuse an algorithm that replaced the loaded weights when it was built (its own initialization)."""
        state = policy.state_dict()
        if any(not torch.equal(state[key], value) for key, value in self.tensors.items()):
            raise ConfigError(f"{KEY}: this algorithm initializes its policy itself; init_from would have no effect")


def _groups(keys: Iterable[str], renamed: dict[str, str]) -> str:
    """``actor (6 tensors, from logits), obs_normalizer (3 tensors)``: keys grouped by their first component."""
    counts: dict[str, int] = {}
    sources: dict[str, str] = {}
    for key in keys:
        group = key.split(".")[0]
        counts[group] = counts.get(group, 0) + 1
        if key in renamed:
            sources[group] = renamed[key].split(".")[0]
    return ", ".join(
        f"{group} ({count} tensor{'s' * (count != 1)}{f', from {sources[group]}' if group in sources else ''})"
        for group, count in sorted(counts.items())
    )


def warm_start_of(
    params: Params,
    policy: Policy,
    observation_space: spaces.Space,
    action_space: spaces.Space,
    run_dir: Path | None = None,
) -> WarmStart | None:
    """The checked source of ``train.init_from`` (None when unset), for this run's freshly built ``policy``; a
    source inside ``run_dir`` (the folder this run trains into) is refused."""
    if params.train.init_from is None:
        return None
    path = Path(params.train.init_from)
    if run_dir is not None:
        check_outside_run(path, run_dir)
    return load_warm_start(path, shown_path(path), policy, observation_space, action_space, params.policy)


def check_outside_run(path: Path, run_dir: Path) -> None:
    """Refuse a source inside the run folder: the run replaces what is there (the source too, once it finishes),
    so its record would name a file that is gone or holds other weights, and a re-run would not find it."""
    if path.resolve().is_relative_to(Path(run_dir).resolve()):
        raise ConfigError(
            f"{KEY}: {shown_path(path)}: is inside {shown_path(Path(run_dir))}/, the folder this run trains into and "
            "replaces; copy it out of there first (e.g. to models/init/policy.pt) and init from the copy"
        )


def load_warm_start(
    path: Path,
    shown: str,
    policy: Policy,
    observation_space: spaces.Space,
    action_space: spaces.Space,
    config: PolicyConfig,
) -> WarmStart:
    """Read and check ``path`` against this run's freshly built ``policy``; ``shown`` is the path as the params
    give it. Every problem is one ``ConfigError`` line: ``train.init_from: <shown>: ...``."""
    where = f"{KEY}: {shown}"
    problem = file_problem(path, "checkpoint")
    if problem is not None:
        raise ConfigError(f"{where}: {'file not found' if problem.endswith('not found') else problem}")
    if path.suffix in (".onnx", ".pt2"):
        raise ConfigError(
            f"{where}: an exported graph holds no trainable weights; give the run's checkpoint or its selected "
            "models/.../best/policy.pt"
        )
    try:
        checkpoint = load_checkpoint(path)
        source = policy_from_checkpoint(checkpoint)
    except CheckpointError as exc:  # "<path>: not a readable checkpoint ...", with the path as the params give it
        raise ConfigError(f"{where}{str(exc).removeprefix(str(path))}") from None
    source_class, target_class = type(source).__name__, type(policy).__name__
    try:
        mapping = map_keys(source_class, target_class, source.state_dict())
    except ConfigError as exc:
        raise ConfigError(f"{where}: a {checkpoint.algo} policy: {exc}") from None
    target = policy.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    weights = dict(source.named_parameters())
    state = source.state_dict()
    for key in sorted(state, key=lambda key: key not in weights):  # weights first: the clearest message
        value = state[key]
        name = mapping[key]
        named = key if name == key else f"{key} (for {name})"
        if name not in target:
            raise ConfigError(f"{where}: {named} has no counterpart in this run's {target_class}")
        if tuple(value.shape) != tuple(target[name].shape):
            raise ConfigError(
                f"{where}: {named} has shape {tuple(value.shape)}, this run's policy {tuple(target[name].shape)}"
            )
        tensors[name] = value.detach().clone()
    for kind, space in (("observation", observation_space), ("action", action_space)):
        saved, own = checkpoint.meta["spaces"][kind], describe_space(space)
        if saved != own:
            raise ConfigError(f"{where}: {kind} space {_short(saved, own)}, this run's {_short(own, saved)}")
    saved_policy = checkpoint.meta["params"]["policy"]
    own_policy = config.model_dump(mode="json")
    for field in SAME_MEANING:
        if saved_policy.get(field, own_policy[field]) != own_policy[field]:
            raise ConfigError(
                f"{where}: policy.{field} is {saved_policy[field]!r} there, {own_policy[field]!r} in this run"
            )
    return WarmStart(
        path=path,
        sha256=sha256_file(path),
        algo=checkpoint.algo,
        policy_class=source_class,
        step=checkpoint.step,
        step_unit=checkpoint.step_unit,
        tensors=tensors,
        renamed={name: key for key, name in mapping.items() if name != key},
        fresh=[key for key in target if key not in tensors],
    )


def _short(description: dict[str, Any], other: dict[str, Any]) -> str:
    """A space description in a few words (``box (4,) float32``, ``discrete 2``), with its bounds where they are
    what differs from ``other``."""
    kind = description.get("type")
    if kind == "box":
        text = f"box {tuple(description['shape'])} {description['dtype']}"
        same_layout = other.get("type") == "box" and (other["shape"], other["dtype"]) == (
            description["shape"],
            description["dtype"],
        )
        return (
            f"{text} low {short_repr(description['low'], 40)} high {short_repr(description['high'], 40)}"
            if same_layout
            else text
        )
    if kind == "discrete":
        return f"discrete {description['n']}" + (f" from {description['start']}" if description["start"] else "")
    return short_repr(description, 120)
