"""Benchmark: configs/ppo-connect-four.yaml's win rates against the random legal-move opponent it trains against and
against the one-step-lookahead player (``rlcore.envs.opponents:one_step_lookahead``: wins when it can, else blocks
an immediate four, else random), per seat.

Prints one JSON line per seed. Each seed runs the preset through train -> evaluate -> select -> export in a fresh
temporary project, then reads the selected model's test outcomes against random_legal (``reports/metrics.json``:
win/draw/loss rates with 95 % Wilson intervals, per seat), checks that the exported ONNX model plays only legal
moves over 50 games, and plays the selected model (greedy) against one_step_lookahead for ``--lookahead-games``
games (half in each seat) through the same evaluator.

    python benchmarks/connect_four.py [--seeds 0] [--lookahead-games 200]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import ROOT, emit, stdout_to_stderr  # noqa: E402
from tictactoe import onnx_plays_legal_moves  # noqa: E402

from rlcore.common.checkpoints import load_checkpoint  # noqa: E402
from rlcore.common.files import read_json  # noqa: E402
from rlcore.envs.config import EnvConfig  # noqa: E402
from rlcore.evaluation.evaluator import Evaluator  # noqa: E402
from rlcore.params import load_params  # noqa: E402
from rlcore.registry import policy_from_checkpoint  # noqa: E402
from rlcore.stages import evaluate_stage, export_stage, select_stage, train_stage  # noqa: E402

PRESET = ROOT / "configs" / "ppo-connect-four.yaml"
LOOKAHEAD = "rlcore.envs.opponents:one_step_lookahead"


def seed_row(seed: int, lookahead_games: int) -> dict[str, Any]:
    params = load_params(PRESET, [f"seed={seed}", "train.progress_bar=off"])
    with tempfile.TemporaryDirectory() as tmp, stdout_to_stderr():
        root = Path(tmp)
        started = time.perf_counter()
        train_stage(params, root)
        train_seconds = time.perf_counter() - started
        evaluate_stage(params, root)
        select_stage(params, root)
        export_stage(params, root)
        metrics = read_json(root / "reports" / "metrics.json")
        legal = onnx_plays_legal_moves(root / "export" / "policy.onnx", params.env.id, str(params.env.opponent), 50)
        policy = policy_from_checkpoint(load_checkpoint(root / "models" / "best" / "policy.pt"))
    lookahead = EnvConfig(id=params.env.id, opponent=LOOKAHEAD, action_mask="observation")
    evaluator = Evaluator(
        lookahead,
        episodes=lookahead_games,
        seed=0,
        max_episode_steps=params.eval.max_episode_steps,
        max_parallel_envs=50,
    )
    against_lookahead = evaluator.evaluate(policy).outcomes
    evaluator.close()
    return {
        "benchmark": "connect_four",
        "preset": "configs/ppo-connect-four.yaml",
        "seed": seed,
        "train_wall_seconds": round(train_seconds, 1),
        "selected_at": metrics.get("env_steps"),
        "test_episodes": metrics["episodes"],
        "against_random": metrics["outcomes"],
        "onnx_plays_only_legal_moves": legal,
        "against_one_step_lookahead": against_lookahead,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--lookahead-games", type=int, default=200)
    args = parser.parse_args()
    for seed in args.seeds:
        emit(seed_row(seed, args.lookahead_games))


if __name__ == "__main__":
    main()
