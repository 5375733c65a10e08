"""Reward signals in real training runs (issue 17): exploration on MountainCar-v0, imitation on CartPole-v1 from a
dataset, and a curiosity run that survives a SIGKILL with its networks and optimizer. The full MountainCar runs
(steps and seconds to -160, medians over seeds) are ``benchmarks/reward_signals.py``."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import PROJECT, RLCORE, outputs, sets
from test_reward_signals import write_cartpole_expert

from rlcore.common.checkpoints import list_checkpoints, load_checkpoint
from rlcore.common.files import read_json
from rlcore.params import load_params
from rlcore.stages import evaluate_stage, select_stage, train_stage

RND_PRESET = PROJECT / "configs" / "ppo-rnd-mountaincar.yaml"
CURIOSITY_PRESET = PROJECT / "configs" / "ppo-curiosity-mountaincar.yaml"


def training_returns(run: Path) -> list[float]:
    """The learning curve's mean training-episode return of each logged row (the stochastic policy's episodes)."""
    with open(run / "dvclive" / "plots" / "metrics" / "train" / "episode_return.tsv") as handle:
        return [float(row["episode_return"]) for row in csv.DictReader(handle, delimiter="\t")]


@pytest.mark.slow
def test_rnd_reaches_the_flag_in_training_where_plain_ppo_never_does(tmp_path: Path):
    """Seed 0, 32,768 env steps each (two rows of 16,384): the RND preset's training episodes reach the flag (a row's
    mean return above -200), the same PPO without reward signals never does (every row exactly -200). ~15 s."""
    budget = ["train.max_steps=32768", "train.target_return=null", "train.progress_bar=off", "seed=0"]
    rnd = load_params(RND_PRESET, [*budget, "name=rnd"])
    plain = load_params(RND_PRESET, [*budget, "name=plain", "algo.reward_signals=null"])
    train_stage(rnd, tmp_path)
    train_stage(plain, tmp_path)
    assert max(training_returns(tmp_path / "runs" / "rnd")) > -200
    assert training_returns(tmp_path / "runs" / "plain") == [-200.0, -200.0]


@pytest.mark.slow
def test_gail_from_ten_expert_episodes_without_the_env_reward_reaches_475_on_cartpole(tmp_path: Path):
    """PPO (the CartPole preset's hyperparameters) learns from GAIL's reward alone (``extrinsic.strength: 0``) against
    10 episodes of a hand-written controller; seed 0, at most 100k env steps (it stops at a periodic 500 after ~49k,
    ~30 s). The selected model's test score (100 episodes) is what counts."""
    expert = tmp_path / "expert.parquet"
    assert write_cartpole_expert(expert, 10)["episode_return"]["mean"] == 500
    params = load_params(
        PROJECT / "configs" / "ppo-cartpole.yaml",
        [
            "seed=0",
            "train.max_steps=100000",
            "train.eval_every=8192",
            "train.progress_bar=off",
            f"algo.reward_signals={{extrinsic: {{strength: 0}}, gail: {{dataset: {expert}, max_episodes: 10}}}}",
        ],
    )
    train_stage(params, tmp_path)
    evaluate_stage(params, tmp_path)
    select_stage(params, tmp_path)
    metrics = read_json(outputs(tmp_path).metrics)
    assert metrics["env_steps"] <= 100_000
    assert metrics["mean_return"] >= 475, metrics
    curve = tmp_path / "runs" / params.name / "dvclive" / "plots" / "metrics" / "train" / "gail"
    assert {"reward.tsv", "discriminator_loss.tsv", "gradient_penalty.tsv"} <= {p.name for p in curve.iterdir()}


@pytest.mark.slow
def test_curiosity_run_resumes_after_sigkill_with_its_networks_optimizer_and_statistics(project: Path):
    """Kill a curiosity run (seed 0, 16,384 env steps, a checkpoint every 4,096) once it has two checkpoints, run it
    again: it resumes, and the curiosity module's optimizer and observation statistics go on from the checkpoint's
    (their counts exceed what the steps after the resume alone could give). ~30 s."""
    overrides = sets(
        ["name=curious", "train.max_steps=16384", "train.eval_every=4096", "train.target_return=null",
         "train.eval_episodes=2", "train.progress_bar=off"]
    )  # fmt: skip
    command = [RLCORE, "train", "--params", str(CURIOSITY_PRESET), *overrides]
    run = project / "runs" / "curious"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    child = subprocess.Popen(command, cwd=project, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while len(list_checkpoints(run / "checkpoints")) < 2 and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    child.send_signal(signal.SIGKILL)
    child.wait()
    killed_at, killed_path = list_checkpoints(run / "checkpoints")[-1]
    assert killed_at < 16384 and not (run / "train_summary.json").exists()
    before = load_checkpoint(killed_path).tensors["algorithm"]["reward_signals"]["curiosity"]

    result = subprocess.run(command, cwd=project, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert f"at env step {killed_at}" in result.stderr
    final_at, final_path = list_checkpoints(run / "checkpoints")[-1]
    after = load_checkpoint(final_path).tensors["algorithm"]["reward_signals"]["curiosity"]
    steps_after = final_at - killed_at
    # Every observation and next observation of the valid steps after the resume: at most 2 per env step.
    count_before = float(before["networks"]["obs_normalizer.count"])
    count_after = float(after["networks"]["obs_normalizer.count"])
    assert count_after > 2 * steps_after + 1 and count_after > count_before
    # Adam's step count: at most epochs (4) x 4 minibatches of ~512 per rollout of 2,048 env steps after the resume.
    adam_before = int(next(iter(before["optimizer"]["state"].values()))["step"])
    adam_after = int(next(iter(after["optimizer"]["state"].values()))["step"])
    assert adam_after > 16 * steps_after // 2048 and adam_after > adam_before
