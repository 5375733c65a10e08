"""Benchmark: configs/ppo-tictactoe.yaml (or the self-play preset, --preset) against its targets — win or draw against
the random legal-move opponent in both seats, and the draw rate against a perfect (minimax) player.

Prints one JSON line per seed. Each seed runs the preset through train -> evaluate -> select -> export in a fresh
temporary project (about 7 to 12 min per seed on a busy 2-core machine), then reads the selected model's test
outcomes (``reports/<name>/metrics.json``: win/draw/loss rates with 95 % Wilson intervals, per seat) and checks that the
exported ONNX model plays only legal moves over 50 games. The outcomes against ``random_legal`` and against
``rlcore.envs.opponents:perfect_tictactoe`` are the select stage's, on the test episodes, wherever it played them:
``outcomes`` when the opponent is ``env.opponent``, else ``outcomes_by_opponent`` when it is one of
``eval.opponents`` (both presets name the perfect player there). An opponent the stage did not play, the selected
model plays by hand for ``--perfect-games`` games (seeds 0, 1, ...: half in each seat); each row's ``sources`` says
which. The issue's targets: win or draw >= 0.95 against random in both seats; draws >= 0.8 against the perfect
player.

``--reports DIR`` keeps a copy of each seed's ``reports/`` (metrics.json, report, the self-play ELO figure elo.png) and
of its self-play curves (``train/self_play_*.tsv``).

    python benchmarks/tictactoe.py [--seeds 0 1 2] [--perfect-games 200] [--preset configs/ppo-tictactoe-selfplay.yaml]
        [--reports DIR]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import ROOT, emit, stdout_to_stderr  # noqa: E402

from rlcore.common.checkpoints import load_checkpoint  # noqa: E402
from rlcore.common.files import read_json  # noqa: E402
from rlcore.envs.config import EnvConfig  # noqa: E402
from rlcore.envs.turn_based import TurnBasedGame  # noqa: E402
from rlcore.evaluation.evaluator import Evaluator  # noqa: E402
from rlcore.params import load_params  # noqa: E402
from rlcore.registry import policy_from_checkpoint  # noqa: E402
from rlcore.stages import evaluate_stage, export_stage, select_stage, train_stage  # noqa: E402

PRESET = ROOT / "configs" / "ppo-tictactoe.yaml"
PERFECT = "rlcore.envs.opponents:perfect_tictactoe"
RANDOM = "rlcore.envs.opponents:random_legal"


def onnx_plays_legal_moves(model: Path, env_id: str, opponent: str, games: int) -> bool:
    """Whether the exported model, given each position's mask, chose only legal moves in ``games`` games."""
    import onnxruntime

    session = onnxruntime.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    game = TurnBasedGame(env_id, opponent)
    for seed in range(games):
        obs, _ = game.reset(seed=seed)
        done = False
        while not done:
            mask = obs["action_mask"].astype(bool)
            (move,) = session.run(None, {"obs": obs["observation"][None], "action_mask": mask[None]})[0]
            if not mask[int(move)]:
                return False
            obs, _, done, _, _ = game.step(int(move))
    return True


def against(policy: Any, env_id: str, opponent: str, games: int, max_episode_steps: int = 9) -> dict[str, Any]:
    """Outcomes of ``games`` greedy games (seeds 0, 1, ...: seats alternating) of ``policy`` against ``opponent``
    (``max_episode_steps``: the learner's moves in a game at most; tic-tac-toe's 9 by default)."""
    config = EnvConfig(id=env_id, opponent=opponent, action_mask="observation")
    evaluator = Evaluator(config, episodes=games, seed=0, max_episode_steps=max_episode_steps, max_parallel_envs=50)
    try:
        outcomes = evaluator.evaluate(policy).outcomes
    finally:
        evaluator.close()
    assert outcomes is not None
    return outcomes


def tested_outcomes(params: Any, metrics: dict[str, Any], opponent: str) -> tuple[dict[str, Any], str] | None:
    """The selected model's test outcomes against ``opponent`` (an import path) and where they were read, when the
    select stage played it (``env.opponent`` or one of ``eval.opponents``); None otherwise."""
    if params.env.opponent == opponent:
        return metrics["outcomes"], "metrics.json outcomes"
    by_opponent = metrics.get("outcomes_by_opponent", {})
    for name, path in (params.eval.opponents or {}).items():
        if path == opponent and name in by_opponent:
            return by_opponent[name], f"metrics.json outcomes_by_opponent.{name}"
    return None


def keep_reports(root: Path, name: str, target: Path) -> None:
    """A copy of project ``root``'s ``reports/<name>/`` and of its runs' self-play curves (dvclive's
    ``train/self_play_*.tsv``) in ``target``."""
    shutil.copytree(root / "reports" / name, target, dirs_exist_ok=True)
    for curve in sorted(root.glob("runs/**/dvclive/plots/metrics/train/self_play_*.tsv")):
        shutil.copy(curve, target / curve.name)


def seed_row(seed: int, perfect_games: int, preset: Path = PRESET, reports: Path | None = None) -> dict[str, Any]:
    params = load_params(preset, [f"seed={seed}", "train.progress_bar=off"])
    with tempfile.TemporaryDirectory() as tmp, stdout_to_stderr():
        root = Path(tmp)
        started = time.perf_counter()
        train_stage(params, root)
        train_seconds = time.perf_counter() - started
        evaluate_stage(params, root)
        select_stage(params, root)
        export_stage(params, root)
        metrics = read_json(root / "reports" / params.name / "metrics.json")
        if reports is not None:
            keep_reports(root, params.name, reports / f"seed-{seed}")
        onnx = root / "export" / params.name / "policy.onnx"
        legal = onnx_plays_legal_moves(onnx, params.env.id, str(params.env.opponent), 50)
        policy = policy_from_checkpoint(load_checkpoint(root / "models" / params.name / "policy.pt"))
    outcomes, sources = {}, {}
    for name, opponent in (("against_random", RANDOM), ("against_perfect", PERFECT)):
        tested = tested_outcomes(params, metrics, opponent)
        if tested is None:
            tested = against(policy, params.env.id, opponent, perfect_games), f"played by hand, {perfect_games} games"
        outcomes[name], sources[name] = tested
    return {
        "benchmark": "tictactoe",
        "preset": str(preset.relative_to(ROOT)) if preset.is_relative_to(ROOT) else str(preset),
        "seed": seed,
        "train_wall_seconds": round(train_seconds, 1),
        "selected_at": metrics.get("env_steps"),
        "test_episodes": metrics["episodes"],
        "test_outcomes": {"opponent": params.env.opponent, **metrics["outcomes"]},
        "against_random": outcomes["against_random"],
        "onnx_plays_only_legal_moves": legal,
        "against_perfect": outcomes["against_perfect"],
        "sources": sources,
        "targets": {"against_random_win_or_draw_each_seat": 0.95, "against_perfect_draw_rate": 0.8},
    }


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--perfect-games", type=int, default=200)
    parser.add_argument("--preset", type=Path, default=PRESET)
    parser.add_argument("--reports", type=Path, default=None, help="keep a copy of each seed's reports/ here")
    args = parser.parse_args()
    for seed in args.seeds:
        emit(seed_row(seed, args.perfect_games, args.preset.resolve(), args.reports))


if __name__ == "__main__":
    main()
