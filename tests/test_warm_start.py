"""Warm starts: ``train.init_from`` (rlcore.trainers.warm_start) and the auxiliary BC loss ``algo.behavioral_cloning``
(rlcore.objectives.bc_regularizer), on real CartPole runs with tiny budgets.

One module-scoped project holds the sources: a PPO run (seed 0, 2048 env steps, a checkpoint every 1024), a dataset
collected from its last checkpoint (1,000 transitions) and a BC run on it (100 gradient steps), ~5 s in all.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from cli_support import run_in_process
from conftest import PROJECT, one_line_error, sets

from rlcore.common.checkpoints import list_checkpoints, load_checkpoint
from rlcore.common.errors import ConfigError
from rlcore.common.files import read_json, sha256_file
from rlcore.objectives.bc_regularizer import BCRegularizer, BehavioralCloningConfig, bc_weight
from rlcore.params import load_params
from rlcore.registry import algorithm_class, policy_from_checkpoint
from rlcore.stages import collect_stage, train_stage
from rlcore.trainers.session import TrainingSession
from rlcore.trainers.sources import EnvSource
from rlcore.trainers.warm_start import map_keys

PPO_RUN = [
    "train.max_steps=2048",
    "train.eval_every=1024",
    "train.log_every=1024",
    "train.eval_episodes=3",
    "train.target_return=null",
    "train.progress_bar=off",
]


def params(root: Path, *overrides: str, file: str = "params.yaml") -> Any:
    return load_params(str(root / file), list(overrides))


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("warm-start")
    for name in ("params.yaml", "offline.yaml"):
        shutil.copy(PROJECT / name, root / name)
    train_stage(params(root, *PPO_RUN, "name=source"), root)
    ppo = list_checkpoints(root / "runs/source/checkpoints")[-1][1]
    relative = ppo.relative_to(root).as_posix()
    collect = [f"collect.policy={relative}", "collect.steps=1000", "collect.num_envs=4"]
    collect_stage(params(root, *collect, file="offline.yaml"), root)
    bc_run = ["train.max_steps=100", "train.eval_every=100", "train.eval_episodes=3", "train.progress_bar=off"]
    train_stage(params(root, *bc_run, file="offline.yaml"), root)
    bc = list_checkpoints(root / "runs/bc-cartpole/checkpoints")[-1][1]
    return {"root": root, "ppo": relative, "bc": bc.relative_to(root).as_posix(), "dataset": "data/dataset.parquet"}


def started(root: Path, *overrides: str) -> dict[str, torch.Tensor]:
    """The policy's tensors of a run right after set-up (init_from applied or a checkpoint restored)."""
    run = params(root, *PPO_RUN, *overrides)
    if run.train.init_from is not None:
        run.train.init_from = str(root / run.train.init_from)
    with TrainingSession(run, root / "runs" / run.name, None, None, lambda p, *_: EnvSource(p)) as session:
        state = {key: value.clone() for key, value in session.policy.state_dict().items()}
        session.finish("checked")
    return state


def test_map_keys_puts_a_bc_actor_into_the_actor_critic_s_actor() -> None:
    keys = ["obs_normalizer.mean", "logits.0.weight", "logits.4.bias"]
    assert map_keys("CategoricalActor", "ActorCritic", keys) == {
        "obs_normalizer.mean": "obs_normalizer.mean",
        "logits.0.weight": "actor.0.weight",
        "logits.4.bias": "actor.4.bias",
    }
    assert map_keys("GaussianActor", "ActorCritic", ["mean.2.weight", "log_std"]) == {
        "mean.2.weight": "actor.2.weight",
        "log_std": "log_std",
    }
    assert map_keys("ActorCritic", "ActorCritic", ["critic.net.0.bias"]) == {"critic.net.0.bias": "critic.net.0.bias"}
    with pytest.raises(ConfigError, match="its QPolicy cannot initialize this run's ActorCritic"):
        map_keys("QPolicy", "ActorCritic", ["q.0.weight"])


def test_init_from_a_checkpoint_starts_from_its_weights_and_fresh_counters(sources: dict[str, Any]) -> None:
    root = sources["root"]
    state = started(root, "name=from-ppo", f"train.init_from={sources['ppo']}")
    source = load_checkpoint(root / sources["ppo"]).tensors["policy"]
    assert state.keys() == source.keys()
    assert all(torch.equal(state[key], source[key]) for key in source)
    summary = read_json(root / "runs/from-ppo/train_summary.json")
    assert summary["env_steps"] == 0 and summary["updates"] == 0
    record = summary["initialized_from"]
    assert record["path"].endswith(sources["ppo"]) and record["sha256"] == sha256_file(root / sources["ppo"])
    assert record["fresh"] == []


def test_first_evaluation_of_a_warm_started_run_equals_the_source_s_score(sources: dict[str, Any]) -> None:
    """The same seed runs the same periodic episodes; an lr of 1e-12 leaves the greedy actions of one update as
    they were, so the warm-started run's first evaluation replays the source's last one."""
    root = sources["root"]
    run = params(root, *PPO_RUN, "name=replay", f"train.init_from={sources['ppo']}", "algo.lr=1e-12")
    run.train.max_steps = run.train.eval_every = 512  # one rollout of 16 x 32 env steps
    train_stage(run, root)
    first = read_json(root / "runs/replay/train_summary.json")["evaluations"][0]["mean_return"]
    assert first == load_checkpoint(root / sources["ppo"]).meta["evaluation"]["mean_return"]


def test_a_bc_policy_initializes_the_actor_and_leaves_the_critic_fresh(sources: dict[str, Any]) -> None:
    root = sources["root"]
    state = started(root, "name=from-bc", f"train.init_from={sources['bc']}")
    bc = load_checkpoint(root / sources["bc"]).tensors["policy"]
    for layer in ("0.weight", "0.bias", "2.weight", "4.bias"):
        assert torch.equal(state[f"actor.{layer}"], bc[f"logits.{layer}"])
    assert torch.equal(state["obs_normalizer.count"], bc["obs_normalizer.count"])
    scratch = started(root, "name=scratch")  # the same seed: the critic a fresh run draws
    assert all(torch.equal(state[key], scratch[key]) for key in state if key.startswith("critic."))
    record = read_json(root / "runs/from-bc/train_summary.json")["initialized_from"]
    assert record["renamed"]["actor.0.weight"] == "logits.0.weight"
    assert record["fresh"] == sorted(key for key in state if key.startswith("critic."))


def test_a_resumed_run_keeps_its_checkpoint_and_is_not_re_initialized(sources: dict[str, Any]) -> None:
    root = sources["root"]
    overrides = ["name=resumed", f"train.init_from={sources['ppo']}"]
    run = params(root, *PPO_RUN, *overrides)
    train_stage(run, root)
    run_dir = root / "runs/resumed"
    (run_dir / "train_summary.json").unlink()  # as if killed after its last checkpoint
    last = list_checkpoints(run_dir / "checkpoints")[-1][1]
    state = started(root, *overrides)
    saved = load_checkpoint(last).tensors["policy"]
    source = load_checkpoint(root / sources["ppo"]).tensors["policy"]
    assert all(torch.equal(state[key], saved[key]) for key in saved)
    assert not torch.equal(state["actor.0.weight"], source["actor.0.weight"])
    assert read_json(run_dir / "train_summary.json")["initialized_from"]["sha256"] == sha256_file(root / sources["ppo"])


def test_changing_init_from_starts_a_fresh_run(sources: dict[str, Any]) -> None:
    root = sources["root"]
    train_stage(params(root, *PPO_RUN, "name=switch", f"train.init_from={sources['ppo']}"), root)
    (root / "runs/switch/train_summary.json").unlink()  # interrupted: it would resume with the same params
    state = started(root, "name=switch", f"train.init_from={sources['bc']}")
    bc = load_checkpoint(root / sources["bc"]).tensors["policy"]
    assert torch.equal(state["actor.0.weight"], bc["logits.0.weight"])


def test_an_init_from_of_other_shapes_is_refused_in_one_line_naming_both(sources: dict[str, Any]) -> None:
    root = sources["root"]
    overrides = ["name=mismatch", "env.id=Acrobot-v1", f"train.init_from={sources['ppo']}"]
    result = run_in_process(["train", *sets(overrides)], root)
    one_line_error(result, "train.init_from:", sources["ppo"], "actor.0.weight has shape (64, 4)", "(64, 6)")
    assert not (root / "runs/mismatch").exists()
    narrow = ["name=mismatch", "policy.hidden_sizes=[32, 32]", f"train.init_from={sources['bc']}"]
    result = run_in_process(["train", *sets(narrow)], root)
    one_line_error(result, "logits.0.weight (for actor.0.weight) has shape (64, 4), this run's policy (32, 4)")


def test_a_missing_init_from_is_refused_in_one_line(sources: dict[str, Any]) -> None:
    missing = ["name=missing", "train.init_from=runs/nope/policy.pt"]
    result = run_in_process(["train", *sets(missing)], sources["root"])
    one_line_error(result, "train.init_from: runs/nope/policy.pt: file not found")


def test_bc_weight_decays_linearly_to_zero_at_steps() -> None:
    assert bc_weight(0.5, 50_000, 0) == 0.5
    assert bc_weight(0.5, 50_000, 10_000) == pytest.approx(0.4)
    assert bc_weight(0.5, 50_000, 25_000) == pytest.approx(0.25)
    assert bc_weight(0.5, 50_000, 50_000) == 0.0
    assert bc_weight(0.5, 50_000, 80_000) == 0.0
    assert bc_weight(2.0, 0, 10**9) == 2.0  # steps 0: constant


def test_bc_regularizer_loss_is_the_weighted_nll_of_the_demonstrations(sources: dict[str, Any]) -> None:
    root = sources["root"]
    run = params(root, "algo.behavioral_cloning={dataset: x, strength: 0.5, steps: 2048, batch_size: 64}")
    policy = policy_from_checkpoint(load_checkpoint(root / sources["ppo"]))
    config = BehavioralCloningConfig(dataset=str(root / sources["dataset"]), strength=0.5, steps=2048, batch_size=64)
    regularizer = BCRegularizer(policy, config)
    loss = regularizer.loss(policy, torch.Generator().manual_seed(3))
    rows = torch.randint(len(regularizer.obs), (64,), generator=torch.Generator().manual_seed(3))
    nll = -policy.distribution(regularizer.obs[rows]).log_prob(regularizer.actions[rows]).mean()
    assert loss.item() == pytest.approx(0.5 * nll.item())
    assert regularizer.end_update(512) == {"bc_weight": 0.5, "bc_loss": pytest.approx(nll.item())}
    assert regularizer.weight == pytest.approx(0.5 * (1 - 512 / 2048))
    regularizer.end_update(1536)
    assert regularizer.weight == 0.0 and regularizer.loss(policy, torch.Generator()).item() == 0.0
    assert regularizer.state_dict().keys() == {"env_steps"}  # the demonstrations are not saved in checkpoints
    algorithm = algorithm_class("ppo")(policy, run.algo.model_copy(update={"behavioral_cloning": config}))
    assert algorithm.state_dict()["behavioral_cloning"] == {"env_steps": torch.tensor(0)}


def test_ppo_and_a2c_train_with_the_bc_loss_and_log_its_weight(sources: dict[str, Any]) -> None:
    root = sources["root"]
    for algo in ("ppo", "a2c"):
        preset = root / f"{algo}.yaml"
        shutil.copy(PROJECT / "configs" / f"{algo}-cartpole.yaml", preset)
        bc = f"algo.behavioral_cloning={{dataset: {sources['dataset']}, strength: 0.5, steps: 1024}}"
        train_stage(params(root, *PPO_RUN, f"name=bc-{algo}", bc, file=preset.name), root)
        curve = (root / f"runs/bc-{algo}/dvclive/plots/metrics/train/bc_weight.tsv").read_text().splitlines()
        weights = [float(line.split("\t")[1]) for line in curve[1:]]
        assert 0 < weights[0] < 0.5 and weights[-1] == 0.0, weights


def test_a_bc_dataset_of_other_spaces_is_refused_in_one_line(sources: dict[str, Any]) -> None:
    root = sources["root"]
    bc = f"algo.behavioral_cloning={{dataset: {sources['dataset']}}}"
    result = run_in_process(["train", *sets(["name=other", "env.id=Acrobot-v1", bc])], root)
    one_line_error(result, f"algo.behavioral_cloning.dataset: {sources['dataset']}: observation space box (4,)", "(6,)")
    assert not (root / "runs/other").exists()
