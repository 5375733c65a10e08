"""What a two-player turn-based game and its opponents must pass when the params load, each refused in one line naming
its params key (``env.opponent``, ``env.self_play.fixed_opponents``, ``eval.opponents.<name>``).

Refused (:func:`check_game`): a game without exactly two agents, seats with different spaces
(:func:`rlcore.envs.turn_based.seats_of`), an opponent that does not import, and a game that is not zero-sum (one
test game is played, random legal moves against the opponent, and the two seats' returns must sum to 0). The test
game runs in a child process bounded by ``env.user_code_timeout_seconds`` (:mod:`rlcore.envs.user_code`): an
opponent that raises, plays an illegal move, calls ``sys.exit``, hangs, or ends or crashes its process is refused
naming its key.

``eval.opponents`` names more fixed opponents the select stage tests the selected model against
(:func:`check_named_opponents` refuses a bad name, a path that does not import or is not callable, an opponent named
twice, and one whose test game fails as above); each of ``env.self_play.fixed_opponents`` plays a test game too.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import Annotated, Any

import numpy as np
from pydantic import AfterValidator

from rlcore.common.errors import ConfigError, UserCodeValueError, format_traceback, raised_at
from rlcore.common.validation_errors import short_repr
from rlcore.envs.board_frames import board_frames
from rlcore.envs.turn_based import MASK_KEY, TurnBasedGame, load_opponent, seats_of
from rlcore.envs.user_code import DEFAULT_TIMEOUT_SECONDS, UserCode, entering, run_bounded

OPPONENT_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}")
"""A name of ``eval.opponents``: a plain identifier (a letter, then letters, digits or ``_``; at most 64)."""
MAX_NAMED_OPPONENTS = 16
"""The most ``eval.opponents`` (each plays all ``eval.test_episodes`` test episodes)."""


def check_game(
    env_id: str,
    kwargs: dict[str, Any],
    opponents: Sequence[tuple[str, str]],
    seconds: float = DEFAULT_TIMEOUT_SECONDS,
) -> None:
    """Refuse (``ValueError``, one line naming the params key of the opponent at fault) what :class:`TurnBasedGame`
    cannot play: see the module docstring. ``opponents``: (params key, import path) of each opponent to test, e.g.
    ``[("env.opponent", "rlcore.envs.opponents:random_legal")]``. Each plays one game of random legal moves (seed 0,
    learner first), its moves checked as always, in one child process bounded by ``seconds`` in all
    (:func:`rlcore.envs.user_code.run_bounded`: an opponent that exits, hangs or kills its process is refused too)."""
    seats_of(env_id, kwargs)  # the game's own code, built here once (and cached) before the opponents play it
    for key, path in opponents:
        try:
            load_opponent(path)
        except ValueError as exc:
            raise ValueError(f"{key}: {exc}") from None
    codes = [UserCode(key, path, f"playing its test game of {env_id}") for key, path in opponents]
    if codes:
        run_bounded(functools.partial(_play_test_games, env_id, kwargs, opponents), codes, seconds)


def _play_test_games(env_id: str, kwargs: dict[str, Any], opponents: Sequence[tuple[str, str]]) -> None:
    for index, (key, path) in enumerate(opponents):
        entering(index)
        _play_test_game(env_id, kwargs, path, key)


def _play_test_game(env_id: str, kwargs: dict[str, Any], opponent: str, key: str) -> None:
    env = TurnBasedGame(env_id, opponent, kwargs, opponent_key=key)
    try:
        obs, _ = env.reset(seed=0)
        rng = np.random.default_rng(0)
        done = False
        while not done:
            legal = np.flatnonzero(np.asarray(obs[MASK_KEY])) if isinstance(obs, dict) and MASK_KEY in obs else None
            action = int(rng.choice(legal)) if legal is not None and len(legal) else env.action_space.sample()
            obs, _, terminated, truncated, _ = env.step(action)
            done = terminated or truncated
    except ConfigError as exc:
        raise ValueError(str(exc)) from None
    except Exception as exc:  # the opponent's own code failed on this game's observations
        message = f"{key}: {opponent} failed playing {env_id}: {raised_at(exc)}"
        raise UserCodeValueError(message, format_traceback(exc)) from None
    finally:
        env.close()
    returns = env.game_returns
    if not np.isclose(sum(returns.values()), 0.0, rtol=0.0, atol=1e-9):
        raise ValueError(
            f"{key}: {env_id} is not zero-sum (one game's returns: {returns}); a turn-based game against an "
            "opponent needs the two seats' returns to sum to 0"
        )


def check_opponent_names(opponents: dict[str, str] | None) -> dict[str, str] | None:
    """``opponents`` (``eval.opponents``) when fine. Refuses (``ValueError``, one line) more than
    :data:`MAX_NAMED_OPPONENTS` and a name that is not :data:`OPPONENT_NAME` (the message is the problem, for the key
    ``eval.opponents``), and (naming ``eval.opponents.<name>``) a path that does not import or is not callable, and
    one opponent under two names."""
    if opponents is None:
        return None
    if len(opponents) > MAX_NAMED_OPPONENTS:
        raise ValueError(f"at most {MAX_NAMED_OPPONENTS} (each plays every test episode), got {len(opponents)}")
    named: dict[str, str] = {}
    for name, path in opponents.items():
        if not OPPONENT_NAME.fullmatch(name):
            raise ValueError(
                f"{short_repr(name)} is not a name: a letter, then letters, digits or '_' (at most 64 characters)"
            )
        try:
            load_opponent(path)
        except ValueError as exc:
            raise ValueError(f"eval.opponents.{name}: {exc}") from None
        if path in named:
            raise ValueError(f"eval.opponents.{name}: {path} is eval.opponents.{named[path]} already; name it once")
        named[path] = name
    return opponents


NamedOpponents = Annotated[dict[str, str] | None, AfterValidator(check_opponent_names)]
"""The type of ``eval.opponents``: name -> import path of an opponent, checked by :func:`check_opponent_names`."""


def check_named_opponents(
    env_id: str,
    kwargs: dict[str, Any],
    opponent: str | None,
    opponents: dict[str, str],
    seconds: float = DEFAULT_TIMEOUT_SECONDS,
) -> None:
    """Refuse (``ValueError``, one line naming ``eval.opponents`` or ``eval.opponents.<name>``) ``opponents`` without
    an ``opponent`` (``env.opponent``: not a turn-based game), and one that cannot play ``env_id``: one game of random
    legal moves against each, as :func:`check_game` plays against ``env.opponent``."""
    if opponents and opponent is None:
        raise ValueError(
            "eval.opponents: only for two-player turn-based games (a PettingZoo AEC env.id with env.opponent), not "
            f"{env_id}"
        )
    check_game(env_id, kwargs, [(f"eval.opponents.{name}", path) for name, path in opponents.items()], seconds)


def check_board_frames(env_id: str, kwargs: dict[str, Any]) -> None:
    """``ValueError`` (one line, naming ``env.self_play.board_frames``) unless :mod:`rlcore.envs.board_frames` knows
    the symmetric frames of ``env_id``'s board."""
    space = seats_of(env_id, kwargs).observation_space
    shape = getattr(space, "spaces", {}).get("observation", space).shape
    try:
        board_frames(tuple(shape or ()))
    except ValueError as exc:
        raise ValueError(f"env.self_play.board_frames: {env_id}: {exc}") from None
