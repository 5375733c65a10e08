"""Export a policy for serving: ONNX (checked with onnxruntime), a torch.export program, and a model card.

The exported graph takes *raw* observations ``obs: (batch, *obs_shape) float32`` (normalization is
inside) and returns ``action`` (the greedy action: int64 index for Discrete, clipped float vector for
Box) and ``scores`` (what the greedy action is read from: logits, Q-values, or a mean before clipping or
tanh; see the model card). The batch size is dynamic.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import platform
import shutil
import subprocess
import tempfile
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from rlcore.actions import to_env_actions
from rlcore.config import EnvConfig
from rlcore.envs import make_vector_env, space_from_description
from rlcore.errors import RLCoreError
from rlcore.io import sha256_file, write_json
from rlcore.policies import Policy

log = logging.getLogger("rlcore")


class ExportError(RLCoreError):
    """The exported model does not match the torch policy, or could not be written."""


class GreedyPolicy(nn.Module):
    """raw obs -> (greedy action, scores); what gets exported."""

    low: torch.Tensor
    high: torch.Tensor

    def __init__(self, policy: Policy, action_low: np.ndarray | None, action_high: np.ndarray | None) -> None:
        super().__init__()
        self.policy = policy
        self.discrete = policy.discrete
        if not self.discrete:
            assert action_low is not None and action_high is not None
            self.register_buffer("low", torch.as_tensor(action_low.reshape(-1), dtype=torch.float32))
            self.register_buffer("high", torch.as_tensor(action_high.reshape(-1), dtype=torch.float32))

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        scores = self.policy.act_scores(obs)
        action = self.policy.deterministic_action(obs)
        if self.discrete:
            return action, scores
        return torch.maximum(torch.minimum(action, self.high), self.low), scores


@dataclass(frozen=True)
class ExportResult:
    files: dict[str, str]
    """File name -> sha256."""
    parity: dict[str, Any]


def parity_observations(env_config: EnvConfig, policy: Policy, count: int, seed: int) -> np.ndarray:
    """``count`` real observations, (count, *obs_shape) float32, from sampling the policy in its env."""
    num_envs = min(count, 16)
    env = make_vector_env(env_config, num_envs)
    generator = torch.Generator().manual_seed(seed)
    collected: list[np.ndarray] = []
    obs, _ = env.reset(seed=seed)
    with torch.no_grad():
        while sum(len(batch) for batch in collected) < count:
            collected.append(np.asarray(obs, dtype=np.float32))
            action = policy.sample_action(torch.as_tensor(obs, dtype=torch.float32), generator)
            obs, *_ = env.step(to_env_actions(action, env.single_action_space))
    env.close()
    return np.concatenate(collected)[:count]


def export_policy(
    policy: Policy,
    meta: dict[str, Any],
    out_dir: Path,
    onnx: bool,
    torch_export: bool,
    observations: int,
    tolerance: float,
    opset: int,
    seed: int = 0,
) -> ExportResult:
    """Write ``policy.onnx`` and/or ``policy.pt2`` into ``out_dir`` after checking them against torch.

    Files are built in a temporary folder and moved into ``out_dir`` only once every check passed,
    so a failed export never replaces a good one.
    """
    if policy.initial_state(1) is not None:
        raise RLCoreError("export: the policy carries a recurrent state; (obs, state) graphs are not exported yet")
    action_space = space_from_description(meta["spaces"]["action"])
    low = getattr(action_space, "low", None)
    high = getattr(action_space, "high", None)
    model = GreedyPolicy(policy, low, high).eval()
    env = meta["params"]["env"]
    obs = parity_observations(EnvConfig.model_validate(env), policy, observations, seed)
    obs_tensor = torch.as_tensor(obs)
    with torch.no_grad():
        expected_action, expected_scores = (t.numpy() for t in model(obs_tensor))

    out_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".export-", dir=out_dir))
    parity: dict[str, Any] = {"observations": int(len(obs)), "tolerance": tolerance}
    try:
        batch = torch.export.Dim("batch", min=1, max=1 << 16)
        example = (obs_tensor[:2].clone(),)
        if torch_export:
            with _quiet_exporters():
                program = torch.export.export(model, example, dynamic_shapes={"obs": {0: batch}})
                torch.export.save(program, staging / "policy.pt2")
                loaded = torch.export.load(staging / "policy.pt2").module()
            with torch.no_grad():
                action, scores = (t.numpy() for t in loaded(obs_tensor))
            parity["torch_export_max_abs_diff"] = _check(
                expected_action, expected_scores, action, scores, tolerance, "policy.pt2"
            )
        if onnx:
            with _quiet_exporters():
                torch.onnx.export(
                    model,
                    example,
                    str(staging / "policy.onnx"),
                    dynamo=True,
                    opset_version=opset,
                    input_names=["obs"],
                    output_names=["action", "scores"],
                    dynamic_shapes={"obs": {0: batch}},
                    external_data=False,
                    verbose=False,
                )
            parity["onnx_max_abs_diff"] = _check_onnx(
                staging / "policy.onnx", obs, expected_action, expected_scores, tolerance
            )
        files = {}
        for path in sorted(staging.iterdir()):
            files[path.name] = sha256_file(path)
            os.replace(path, out_dir / path.name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return ExportResult(files, parity)


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


def _check(
    expected_action: np.ndarray,
    expected_scores: np.ndarray,
    action: np.ndarray,
    scores: np.ndarray,
    tolerance: float,
    what: str,
) -> float:
    diff = float(np.max(np.abs(expected_scores - scores)))
    action_diff = float(np.max(np.abs(expected_action.astype(np.float64) - action.astype(np.float64))))
    if np.issubdtype(expected_action.dtype, np.integer):
        # Argmax may legitimately flip where two logits are closer than the tolerance.
        mismatched = expected_action != action
        close = np.sort(expected_scores, axis=-1)[:, -1] - np.sort(expected_scores, axis=-1)[:, -2] <= tolerance
        if np.any(mismatched & ~close):
            raise ExportError(f"{what}: greedy actions differ from torch on {int(mismatched.sum())} observations")
        action_diff = 0.0
    worst = max(diff, action_diff)
    if worst > tolerance:
        raise ExportError(f"{what}: max |exported - torch| = {worst:.3g} exceeds export.parity_tolerance {tolerance:g}")
    return worst


def _check_onnx(
    path: Path, obs: np.ndarray, expected_action: np.ndarray, expected_scores: np.ndarray, tolerance: float
) -> float:
    import onnx
    import onnxruntime

    onnx.checker.check_model(str(path))
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    action, scores = session.run(["action", "scores"], {"obs": obs})
    worst = _check(expected_action, expected_scores, action, scores, tolerance, "policy.onnx")
    single_action, single_scores = session.run(["action", "scores"], {"obs": obs[:1]})
    return max(
        worst,
        _check(
            expected_action[:1], expected_scores[:1], single_action, single_scores, tolerance, "policy.onnx (batch 1)"
        ),
    )


def git_revision(cwd: Path) -> dict[str, Any]:
    """The commit and whether the work tree had uncommitted changes; nulls outside a git repo."""

    def git(*args: str) -> str | None:
        try:
            result = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        return result.stdout.strip() if result.returncode == 0 else None

    revision = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no") if revision else None
    return {"revision": revision, "dirty": None if status is None else bool(status)}


def model_card(
    meta: dict[str, Any], selection: dict[str, Any], result: ExportResult, command: str, root: Path
) -> dict[str, Any]:
    """Everything a consumer of the exported files needs to know, as plain JSON."""
    params = meta["params"]
    return {
        "name": params["name"],
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "algorithm": params["algo"]["name"],
        "env": {"id": params["env"]["id"], "kwargs": params["env"]["kwargs"]},
        "observation_space": meta["spaces"]["observation"],
        "action_space": meta["spaces"]["action"],
        "interface": {
            "inputs": {"obs": "float32 (batch, *observation_space.shape), raw observations (normalization is inside)"},
            "outputs": {
                "action": "greedy action: int64 (batch,) for discrete, float32 (batch, *shape) clipped for box",
                "scores": "float32 (batch, action_dim): what the greedy action is read from: logits (categorical), "
                "Q-values (dqn), the Gaussian mean before clipping (ppo, bc, iql) or the mean before tanh (sac, td3bc)",
            },
        },
        "evaluation": selection["evaluation"],
        "selected_checkpoint": selection["checkpoint"],
        "selection_reason": selection["reason"],
        "training": {
            **{key: selection[key] for key in ("step_unit", "env_steps", "gradient_steps")},
            "command": meta.get("command"),
            "dataset": meta.get("dataset"),  # offline runs: path, sha256 and md5 (DVC's hash) of the data
        },
        "params": params,
        "files": result.files,
        "parity": result.parity,
        "git": git_revision(root),
        "command": command,
        "versions": {"python": platform.python_version(), "torch": torch.__version__},
    }


def write_model_card(out_dir: Path, card: dict[str, Any]) -> Path:
    path = out_dir / "model_card.json"
    write_json(path, card)
    return path
