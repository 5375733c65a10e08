"""Export a policy for serving: ONNX (checked with onnxruntime), a torch.export program, and a model card.

The exported graph takes *raw* observations ``obs: (batch, *obs_shape)`` as the env gives them (float32 for float
vectors, ``uint8``/``bool`` frames as they are, int64 Discrete values, packed ``Dict`` vectors; normalization, scaling
and encoding are inside: ``rlcore.envs.observations``, ``rlcore.nets.encoders``) and returns ``action``, one greedy
action per observation in the policy's convention (``rlcore.envs.actions``: an int64 index for Discrete, an int64 row of
sub-actions for MultiDiscrete and MultiBinary, a clipped float vector for Box), and ``scores`` (what the greedy action
is read from: logits, Q-values, or a mean before clipping or tanh; see the model card). The batch size is dynamic.
A run with action masks (``env.action_mask``) exports a graph that takes the mask as a second input, ``action_mask``
(batch, n) bool, beside ``obs`` without it (``rlcore.envs.action_masks.MaskInputs``); illegal actions are never chosen.
A row whose mask allows no action gets :data:`NO_LEGAL_ACTION` (-1), not an action the env would refuse.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import platform
import shutil
import tempfile
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import torch
from gymnasium import spaces

from rlcore.common.errors import RLCoreError
from rlcore.common.files import check_target, sha256_file, write_json
from rlcore.common.versions import git_revision, rlcore_version
from rlcore.envs.action_masks import mask_inputs
from rlcore.envs.actions import sub_action_sizes
from rlcore.envs.config import EnvConfig
from rlcore.envs.multiagent import describe_agents
from rlcore.envs.observations import obs_tensor, observation_input
from rlcore.envs.stepping import VectorStepper
from rlcore.envs.turn_based import describe_opponent
from rlcore.envs.vector import make_vector_env, space_from_description
from rlcore.evaluation.exported_modules import NO_LEGAL_ACTION, exported_module
from rlcore.nets.policy import Policy, reset_state

log = logging.getLogger("rlcore")


class ExportError(RLCoreError):
    """The exported model does not match the torch policy, or could not be written."""


@dataclass(frozen=True)
class ExportResult:
    files: dict[str, str]
    """File name -> sha256."""
    parity: dict[str, Any]
    interface: dict[str, Any]
    """The graph's inputs and outputs, described for the model card."""


def describe_interface(policy: Policy, action_space: spaces.Space) -> dict[str, Any]:
    """What the exported graph takes and returns (and, for a policy with a state, the state's shape and start)."""
    masked = mask_inputs(policy.observation_space)
    inputs: dict[str, Any] = {"obs": observation_input(policy.observation_space)}
    outputs = {
        "action": "greedy action: int64 (batch,) for discrete, float32 (batch, *shape) clipped for box",
        "scores": "float32 (batch, action_dim): what the greedy action is read from: logits (categorical), "
        "Q-values (dqn), the Gaussian mean before clipping (ppo, bc, iql) or the mean before tanh (sac, td3bc)",
    }
    sizes = sub_action_sizes(action_space)
    if isinstance(action_space, spaces.MultiDiscrete):
        outputs["action"] = (
            f"greedy action: int64 (batch, {len(sizes or ())}), sub-action i the argmax of its logits, an index "
            "from 0 (add action_space.start[i] for the env's value)"
        )
        outputs["scores"] = (
            f"float32 (batch, {sum(sizes or ())}): the sub-actions' logits side by side, split by action_space.nvec"
        )
    elif isinstance(action_space, spaces.MultiBinary):
        outputs["action"] = f"greedy action: int64 (batch, {len(sizes or ())}), bit i is 1 where its logit is > 0"
        outputs["scores"] = f"float32 (batch, {len(sizes or ())}): one logit per bit"
    if masked is not None:
        inputs.update(masked.describe(int(getattr(action_space, "n", 0))))
        outputs["action"] += f"; {NO_LEGAL_ACTION} in a row whose action_mask allows no action"
    interface: dict[str, Any] = {"inputs": inputs, "outputs": outputs}
    initial = policy.initial_state(1)
    if initial is not None:
        shape = list(initial.shape[1:])
        inputs["state"] = f"float32 (batch, {', '.join(map(str, shape))}): the state returned by the previous step"
        outputs["next_state"] = f"float32 (batch, {', '.join(map(str, shape))}): feed it to the next step"
        interface["state"] = {
            "shape": shape,
            "initial": initial[0].tolist(),
            "reset": "at every episode start, set the env's row back to the initial state",
        }
    return interface


def parity_observations(env_config: EnvConfig, policy: Policy, count: int, seed: int) -> np.ndarray:
    """``count`` real observations, (count, *obs_shape) in their storage dtype, from sampling the policy in its env."""
    return parity_inputs(env_config, policy, count, seed)["obs"]


def parity_inputs(env_config: EnvConfig, policy: Policy, count: int, seed: int) -> dict[str, np.ndarray]:
    """The exported graph's inputs at ``count`` real steps of the policy sampled in its env: ``obs``
    (count, *obs_shape) in their storage dtype (``rlcore.envs.observations``), and for a policy with a state the
    ``state`` it carried into each step (reset where an episode began), so parity is checked along real sequences."""
    num_envs = min(count, 16)
    env = make_vector_env(env_config, num_envs)
    stepper = VectorStepper(env)
    generator = torch.Generator().manual_seed(seed)
    observations: list[np.ndarray] = []
    states: list[np.ndarray] = []
    obs = stepper.reset(seed)
    state = policy.initial_state(env.num_envs)  # a multi-agent env's rows: each agent of each copy
    with torch.no_grad():
        while sum(len(batch) for batch in observations) < count:
            observations.append(obs_tensor(obs).numpy())  # as the env gives them: uint8 frames stay uint8
            if state is not None:
                states.append(state.numpy().astype(np.float32))
            action, state = policy.act(obs_tensor(obs), state, False, generator)
            step = stepper.step(action.numpy())
            obs = step.next_obs
            state = reset_state(policy, state, ~step.valid)
    env.close()
    inputs = {"obs": np.concatenate(observations)[:count]}
    masked = mask_inputs(policy.observation_space)
    if masked is not None:
        inputs["obs"], inputs["action_mask"] = masked.split(inputs["obs"])
    if states:
        inputs["state"] = np.concatenate(states)[:count]
    return inputs


@dataclass(frozen=True)
class ExportOptions:
    """What :func:`export_policy` writes and how closely it must match torch (the ``export`` params' keys)."""

    onnx: bool
    torch_export: bool
    parity_observations: int
    """Observations the exported files are checked on against torch."""
    parity_atol: float
    parity_rtol: float
    opset: int
    """The ONNX opset version."""


def export_policy(
    policy: Policy,
    meta: dict[str, Any],
    out_dir: Path,
    options: ExportOptions,
    seed: int = 0,
    inputs: dict[str, np.ndarray] | None = None,
) -> ExportResult:
    """Write ``policy.onnx`` and/or ``policy.pt2`` into ``out_dir`` after checking them against torch: every output
    element within ``atol + rtol * |torch|`` (``export.parity_atol``, ``export.parity_rtol``).

    Files are built in a temporary folder and moved into ``out_dir`` only once every check passed,
    so a failed export never replaces a good one. ``inputs``: the parity inputs if not :func:`parity_inputs`'.
    """
    action_space = space_from_description(meta["spaces"]["action"])
    stateful = policy.initial_state(1) is not None
    model = exported_module(policy, action_space)
    env = meta["params"]["env"]
    inputs = inputs or parity_inputs(EnvConfig.model_validate(env), policy, options.parity_observations, seed)
    input_names = list(inputs)  # ["obs"], then "action_mask" in a masked run, then "state" for a stateful policy
    output_names = ["action", "scores", *(["next_state"] if stateful else [])]
    tensors = [torch.as_tensor(inputs[name]) for name in input_names]
    with torch.no_grad():
        expected = [t.numpy() for t in model(*tensors)]

    out_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".export-", dir=out_dir))
    atol, rtol = options.parity_atol, options.parity_rtol
    rule = ParityRule(atol, rtol)
    parity: dict[str, Any] = {"observations": int(len(inputs["obs"])), "atol": atol, "rtol": rtol}
    try:
        batch = torch.export.Dim("batch", min=1, max=1 << 16)
        example = tuple(t[:2].clone() for t in tensors)
        dynamic_shapes = {name: {0: batch} for name in input_names}
        if options.torch_export:
            with _quiet_exporters():
                program = torch.export.export(model, example, dynamic_shapes=dynamic_shapes)
                torch.export.save(program, staging / "policy.pt2")
                loaded = torch.export.load(staging / "policy.pt2").module()
            with torch.no_grad():
                outputs = [t.numpy() for t in loaded(*tensors)]
            parity.update(_check(expected, outputs, rule, "policy.pt2", action_space).card("torch_export"))
        if options.onnx:
            with _quiet_exporters():
                torch.onnx.export(
                    model,
                    example,
                    str(staging / "policy.onnx"),
                    dynamo=True,
                    opset_version=options.opset,
                    input_names=input_names,
                    output_names=output_names,
                    dynamic_shapes=dynamic_shapes,
                    external_data=False,
                    verbose=False,
                )
            parity.update(_check_onnx(staging / "policy.onnx", inputs, expected, rule, action_space).card("onnx"))
        files = {}
        for path in sorted(staging.iterdir()):
            files[path.name] = sha256_file(path)
            os.replace(path, check_target(out_dir / path.name))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return ExportResult(files, parity, describe_interface(policy, action_space))


@contextlib.contextmanager
def _quiet_exporters() -> Iterator[None]:
    """The ONNX exporter prints pass-by-pass chatter and torchvision notices; keep the stage's output readable."""
    loggers = [
        logging.getLogger(name) for name in ("torch.onnx", "torch.export", "onnxscript", "onnx_ir", "torch._dynamo")
    ]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore", FutureWarning)
            warnings.simplefilter("ignore", DeprecationWarning)
            yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


@dataclass(frozen=True)
class ParityRule:
    """``|exported - torch| <= atol + rtol * |torch|`` per output element (numpy's ``allclose`` rule)."""

    atol: float
    rtol: float

    def allowed(self, expected: np.ndarray) -> np.ndarray:
        return self.atol + self.rtol * np.abs(expected)


@dataclass(frozen=True)
class ParityDiff:
    """The worst differences between an exported model's outputs and torch's, over every output element."""

    max_abs_diff: float
    max_rel_diff: float
    """Largest ``|exported - torch| / |torch|`` over the elements where torch is not 0: large where torch's output is
    near 0 (a recurrent state's element, a logit), which the absolute term covers."""
    max_allowed_fraction: float
    """Largest ``|exported - torch| / (atol + rtol * |torch|)``: the check passes when it is at most 1."""

    def card(self, prefix: str) -> dict[str, float]:
        return {
            f"{prefix}_max_abs_diff": self.max_abs_diff,
            f"{prefix}_max_rel_diff": self.max_rel_diff,
            f"{prefix}_max_allowed_fraction": self.max_allowed_fraction,
        }

    def worst(self, other: ParityDiff) -> ParityDiff:
        return ParityDiff(
            max(self.max_abs_diff, other.max_abs_diff),
            max(self.max_rel_diff, other.max_rel_diff),
            max(self.max_allowed_fraction, other.max_allowed_fraction),
        )


def _check(
    expected: list[np.ndarray], outputs: list[np.ndarray], rule: ParityRule, what: str, action_space: spaces.Space
) -> ParityDiff:
    """Every float output (scores, a Box action, next_state where there is one) within ``rule`` of torch's, and the
    same greedy integer actions except where torch's own choice is within the rule of flipping."""
    (expected_action, expected_scores, *expected_rest), (action, scores, *rest) = expected, outputs
    named = [("scores", expected_scores, scores)]
    named += [("next_state", want, got) for want, got in zip(expected_rest, rest, strict=True)]
    if np.issubdtype(expected_action.dtype, np.integer):
        # Argmax may legitimately flip where two logits are closer than the rule lets each move.
        mismatched = expected_action != action
        close = _greedy_margins(expected_scores, action_space) <= _greedy_slack(expected_scores, action_space, rule)
        if np.any(mismatched & ~close):
            raise ExportError(f"{what}: greedy actions differ from torch on {int(mismatched.sum())} observations")
    else:
        named.insert(0, ("action", expected_action, action))
    max_abs, max_rel, max_fraction = 0.0, 0.0, 0.0
    for name, want, got in named:
        want64, got64 = want.astype(np.float64), np.asarray(got).astype(np.float64)
        diff = np.abs(got64 - want64)
        scale = np.abs(want64)
        rel = np.divide(diff, scale, out=np.zeros_like(diff), where=scale > 0)
        max_abs = max(max_abs, float(diff.max(initial=0.0)))
        max_rel = max(max_rel, float(rel.max(initial=0.0)))
        excess = diff / rule.allowed(want64)
        max_fraction = max(max_fraction, float(excess.max(initial=0.0)))
        if diff.size and not float(excess.max()) <= 1.0:  # a NaN fails too
            at = np.unravel_index(int(np.nanargmax(np.where(np.isnan(excess), np.inf, excess))), diff.shape)
            where = f"{name}[{', '.join(map(str, at))}]"
            raise ExportError(
                f"{what}: {where}: |exported - torch| = {diff[at]:.3g} (relative {rel[at]:.3g}, torch "
                f"{want64[at]:.6g}) exceeds export.parity_atol {rule.atol:g} + export.parity_rtol {rule.rtol:g} "
                "x |torch|"
            )
    return ParityDiff(max_abs, max_rel, max_fraction)


def _greedy_margins(scores: np.ndarray, action_space: spaces.Space) -> np.ndarray:
    """How far each greedy choice is from flipping, shaped like the action: the gap between the best two logits
    (Discrete: (B,); MultiDiscrete: per sub-action, (B, k)), or |logit| (MultiBinary: a bit flips at 0, (B, n))."""
    if isinstance(action_space, spaces.MultiBinary):
        return np.abs(scores)
    sizes = sub_action_sizes(action_space)
    chunks = np.split(scores, np.cumsum(sizes)[:-1], axis=-1) if sizes is not None else [scores]
    gaps = []
    for chunk in chunks:
        if chunk.shape[-1] < 2:  # a single choice never flips
            gaps.append(np.full(chunk.shape[:-1], np.inf))
            continue
        top = np.sort(chunk, axis=-1)
        gaps.append(top[..., -1] - top[..., -2])
    return np.stack(gaps, axis=-1) if sizes is not None else gaps[0]


def _greedy_slack(scores: np.ndarray, action_space: spaces.Space, rule: ParityRule) -> np.ndarray:
    """How much the margin of :func:`_greedy_margins` may move under ``rule``, shaped like it: a bit's logit moves
    by its allowance; a gap between two logits by both allowances, bounded by twice the larger logit's."""
    if isinstance(action_space, spaces.MultiBinary):
        return rule.allowed(scores)
    sizes = sub_action_sizes(action_space)
    chunks = np.split(scores, np.cumsum(sizes)[:-1], axis=-1) if sizes is not None else [scores]
    slack = [2 * rule.allowed(np.abs(chunk).max(axis=-1)) for chunk in chunks]
    return np.stack(slack, axis=-1) if sizes is not None else slack[0]


def _check_onnx(
    path: Path, inputs: dict[str, np.ndarray], expected: list[np.ndarray], rule: ParityRule, action_space: spaces.Space
) -> ParityDiff:
    import onnx
    import onnxruntime

    onnx.checker.check_model(str(path))
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [output.name for output in session.get_outputs()]
    worst = _check(expected, session.run(names, inputs), rule, "policy.onnx", action_space)
    single = session.run(names, {name: values[:1] for name, values in inputs.items()})
    return worst.worst(_check([e[:1] for e in expected], single, rule, "policy.onnx (batch 1)", action_space))


def model_card(
    meta: dict[str, Any], selection: dict[str, Any], result: ExportResult, command: str, root: Path
) -> dict[str, Any]:
    """Everything a consumer of the exported files needs to know, as plain JSON."""
    params = meta["params"]
    return {
        "name": params["name"],
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "algorithm": params["algo"]["name"],
        "env": {
            "id": params["env"]["id"],
            "kwargs": params["env"]["kwargs"],
            # The training distribution: per-episode parameters, and the curriculum's lessons (the last one's last).
            "parameters": params["env"].get("parameters", {}),
            "curriculum": [lesson["name"] for lesson in params["env"].get("curriculum", [])],
            # env.action_mask: where the env gives its mask; the graph then takes it as the input action_mask
            "action_mask": params["env"].get("action_mask"),
            # A PettingZoo env: its agents, all acting with this one policy (rlcore.envs.multiagent).
            **_agents(params["env"]),
        },
        "observation_space": meta["spaces"]["observation"],
        "action_space": meta["spaces"]["action"],
        "interface": result.interface,
        # The test score (episodes nothing else ran) and, apart, the validation score that selection used.
        "evaluation": selection["test"],
        "validation": selection["validation"],
        # The settings it was tested under (eval.settings: parameters on top of the env's defaults), each with its
        # test score on the same test episodes.
        "evaluation_settings": {
            name: {"parameters": entry["parameters"], "test": entry["test"]}
            for name, entry in selection.get("settings", {}).items()
        },
        "selected_checkpoint": selection["checkpoint"],
        "selection_reason": selection["reason"],
        # train.seeds: the seed exported (best on validation) and the aggregate of every seed's test score.
        **(
            {"train_seed": selection["train_seed"], "aggregate_over_seeds": selection["aggregate"]}
            if "train_seed" in selection
            else {}
        ),
        "training": {
            **{key: selection[key] for key in ("step_unit", "env_steps", "gradient_steps")},
            "command": meta.get("command"),
            "dataset": meta.get("dataset"),  # offline runs: path, sha256 and md5 (DVC's hash) of the data
            # train.init_from: the checkpoint or policy.pt it started from (path, sha256, what was loaded)
            "initialized_from": meta.get("initialized_from"),
        },
        "params": params,
        "files": result.files,
        "parity": result.parity,
        "git": git_revision(root),
        "command": command,
        "versions": {"python": platform.python_version(), "torch": torch.__version__, "rlcore": rlcore_version()},
    }


def _agents(env: dict[str, Any]) -> dict[str, Any]:
    if env.get("opponent") is not None:  # a two-player game against a fixed opponent (rlcore.envs.turn_based)
        return {"turn_based": describe_opponent(env["id"], env.get("kwargs", {}), env["opponent"])}
    agents = describe_agents(env["id"], env.get("kwargs", {}), env.get("agent_id"))
    return {} if agents is None else {"agents": agents}


def write_model_card(out_dir: Path, card: dict[str, Any]) -> Path:
    path = out_dir / "model_card.json"
    write_json(path, card)
    return path
