"""Benchmark: configs/ppo-connect-four.yaml's (or the self-play preset's, --preset) win rates against the random
legal-move opponent, against the one-step-lookahead player (``rlcore.envs.opponents:one_step_lookahead``: wins when it
can, else blocks an immediate four, else random) and against the fork-lookahead player (``fork_lookahead``), per seat.

Prints one JSON line per seed. Each seed runs the preset through train -> evaluate -> select -> export in a fresh
temporary project, then reads the selected model's test outcomes (``reports/<name>/metrics.json``: win/draw/loss rates
with 95 % Wilson intervals, per seat) against each opponent the select stage played (``outcomes`` for ``env.opponent``,
``outcomes_by_opponent`` for ``eval.opponents``), plays the selected model (greedy) by hand for
``--lookahead-games`` games (half in each seat) against an opponent the preset does not name, and checks that the
exported ONNX model plays only legal moves over 50 games; each row's ``sources`` says where each figure came from.
``--reports DIR`` keeps a copy of the project's ``reports/`` (metrics.json, report, the self-play ELO figure elo.png)
and of its self-play curves (``train/self_play_*.tsv``).

    python benchmarks/connect_four.py [--seeds 0] [--lookahead-games 200]
        [--preset configs/ppo-connect-four-selfplay.yaml] [--reports DIR]
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
from tictactoe import against, keep_reports, onnx_plays_legal_moves, tested_outcomes  # noqa: E402

from rlcore.common.checkpoints import load_checkpoint  # noqa: E402
from rlcore.common.files import read_json  # noqa: E402
from rlcore.params import load_params  # noqa: E402
from rlcore.registry import policy_from_checkpoint  # noqa: E402
from rlcore.stages import evaluate_stage, export_stage, select_stage, train_stage  # noqa: E402

PRESET = ROOT / "configs" / "ppo-connect-four.yaml"
LOOKAHEAD = "rlcore.envs.opponents:one_step_lookahead"
RANDOM = "rlcore.envs.opponents:random_legal"
FORK = "rlcore.envs.opponents:fork_lookahead"


def seed_row(seed: int, lookahead_games: int, preset: Path = PRESET, reports: Path | None = None) -> dict[str, Any]:
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
        elo_figure = (root / "reports" / params.name / "elo.png").is_file()
        if reports is not None:
            keep_reports(root, params.name, reports / f"seed-{seed}")
        onnx = root / "export" / params.name / "policy.onnx"
        legal = onnx_plays_legal_moves(onnx, params.env.id, str(params.env.opponent), 50)
        policy = policy_from_checkpoint(load_checkpoint(root / "models" / params.name / "policy.pt"))
    outcomes, sources = {}, {}
    for name, opponent in (
        ("against_random", RANDOM),
        ("against_one_step_lookahead", LOOKAHEAD),
        ("against_fork_lookahead", FORK),
    ):
        tested = tested_outcomes(params, metrics, opponent)
        if tested is None:
            tested = (
                against(policy, params.env.id, opponent, lookahead_games, params.eval.max_episode_steps),
                f"played by hand, {lookahead_games} games",
            )
        outcomes[name], sources[name] = tested
    return {
        "benchmark": "connect_four",
        "preset": str(preset.relative_to(ROOT)) if preset.is_relative_to(ROOT) else str(preset),
        "seed": seed,
        "train_wall_seconds": round(train_seconds, 1),
        "selected_at": metrics.get("env_steps"),
        "test_episodes": metrics["episodes"],
        "test_outcomes": {"opponent": params.env.opponent, **metrics["outcomes"]},
        **outcomes,
        "onnx_plays_only_legal_moves": legal,
        "elo_figure": elo_figure,
        "sources": sources,
    }


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--lookahead-games", type=int, default=200)
    parser.add_argument("--preset", type=Path, default=PRESET)
    parser.add_argument("--reports", type=Path, default=None, help="keep a copy of each seed's reports/ here")
    args = parser.parse_args()
    for seed in args.seeds:
        emit(seed_row(seed, args.lookahead_games, args.preset.resolve(), args.reports))


if __name__ == "__main__":
    main()
