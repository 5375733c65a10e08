"""Two-player turn-based games (PettingZoo AEC, e.g. ``pettingzoo.classic.tictactoe_v3``) as a single-agent
gymnasium env: the learner plays one seat, a fixed opponent plays the other inside :meth:`TurnBasedGame.step`.

Params: ``env.id: pettingzoo:<module>`` (the module's AEC ``env``, PettingZoo's convention for its classic games) or
``pettingzoo:<module>:<function>`` (any function returning a two-player ``AECEnv``) together with
``env.opponent: <import path>``, the opponent: a function ``(observation, rng) -> action`` given its own seat's
observation (a PettingZoo classic ``{"observation", "action_mask"}`` Dict) and a ``numpy.random.Generator``
(:func:`rlcore.envs.opponents.random_legal`, a uniformly random legal move, is the reference).

- The learner's observation is its own seat's (so ``env.action_mask: observation`` reads the game's mask), its
  reward its own reward summed over its move and the opponent's replies; the episode ends when the game does.
- Seats: an episode reset with seed ``s`` puts the learner in seat ``s % 2`` (0: moves first); an unseeded reset
  (the vector env's autoreset) takes the other seat than the episode before. An evaluation's episode ``k`` has seed
  ``seed + k``, so its episodes alternate first and second (:func:`learner_seat`).
- The opponent draws from a generator seeded from the episode's seed (and carried on through autoresets), so the
  same seeds play the same games.
- An opponent that returns an illegal move (one its mask forbids) stops the run with one line naming it and its
  params key (``env.opponent``, ``eval.opponents.<name>``, ``env.self_play.fixed_opponents``).

The load-time checks of a game and its opponents (a test game against each, in a bounded child process) are
:mod:`rlcore.envs.game_checks`.
"""

from __future__ import annotations

import functools
import json
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from rlcore.common.errors import ConfigError, raised_at
from rlcore.envs.board_frames import BoardFrame
from rlcore.envs.ids import import_object, parallel_env_factory

MASK_KEY = "action_mask"
OPPONENT_STREAM = 0x0FF0E4E7
"""Mixed into an episode's seed for the opponent's generator (the game's own is seeded with the seed itself)."""

Opponent = Callable[[Any, np.random.Generator], Any]
"""``(its seat's observation, rng) -> its action``."""


@runtime_checkable
class PlayerOpponent(Protocol):
    """An opponent that is one of several players in turn (self-play's: a fixed opponent, a snapshot, the latest
    policy), saying which plays now, so that an illegal move is reported under that player's own key."""

    def __call__(self, observation: Any, rng: np.random.Generator) -> Any: ...

    def playing(self) -> tuple[str, str]:
        """(the params key, the import path or a description) of the player whose move comes next."""
        ...


def learner_seat(seed: int) -> int:
    """The learner's seat in an episode reset with ``seed``: 0 (moves first) or 1."""
    return int(seed) % 2


def load_opponent(path: str) -> Opponent:
    """The opponent function at ``path``; ``ValueError`` (one line) when it does not import or is not callable."""
    opponent = import_object(path)
    if not callable(opponent):
        raise ValueError(f"{path} is {type(opponent).__name__}, not a function (observation, rng) -> action")
    return opponent


def build_game(env_id: str, kwargs: dict[str, Any]) -> Any:
    """One AEC game ``env_id`` with ``kwargs``; ``ValueError`` (one line) when it refuses them or is not an AEC env."""
    factory = parallel_env_factory(env_id, function="env")
    try:
        with warnings.catch_warnings():  # PettingZoo warns that module.env() will move to a registry
            warnings.simplefilter("ignore", DeprecationWarning)
            game = factory(**kwargs)
    except TypeError as exc:
        message = " ".join(str(exc).split())
        raise ValueError(f"env.kwargs: {env_id} does not accept these arguments: {message}") from None
    except (Exception, SystemExit) as exc:
        raise ValueError(f"env.kwargs: {env_id} refuses them: {raised_at(exc)}") from None
    if not (callable(getattr(game, "last", None)) and callable(getattr(game, "agent_iter", None))):
        raise ValueError(
            f"env.opponent: {env_id} built {type(game).__name__}, not a PettingZoo AEC env (agent_iter, last); "
            "a turn-based game against an opponent needs one (remove env.opponent for a Parallel env)"
        )
    return game


@dataclass(frozen=True)
class Seats:
    """The two seats of a game, in turn order, and the spaces they share."""

    names: tuple[str, str]
    observation_space: spaces.Space
    action_space: spaces.Space


def seats_of(env_id: str, kwargs: dict[str, Any]) -> Seats:
    """The seats of ``env_id`` with ``kwargs``; ``ValueError`` (one line) unless it has two with the same spaces."""
    return _seats_of(env_id, json.dumps(kwargs, sort_keys=True, default=repr))


@functools.cache
def _seats_of(env_id: str, kwargs_key: str) -> Seats:
    game = build_game(env_id, json.loads(kwargs_key))
    try:
        names = tuple(str(name) for name in game.possible_agents)
        if len(names) != 2:
            raise ValueError(
                f"env.opponent: {env_id} has {len(names)} agents ({', '.join(names)}); a turn-based game against one "
                "opponent needs exactly two"
            )
        first, second = names
        for what, mine, theirs in (
            ("observation", game.observation_space(first), game.observation_space(second)),
            ("action", game.action_space(first), game.action_space(second)),
        ):
            if mine != theirs:
                raise ValueError(
                    f"env.opponent: {env_id}'s seats have different {what} spaces ({first}: {mine}, {second}: "
                    f"{theirs}); the learner plays both seats with one policy"
                )
        return Seats((first, second), game.observation_space(first), game.action_space(first))
    finally:
        game.close()


class TurnBasedGame(gym.Env):
    """A two-player AEC game seen from the learner's seat, the opponent moving inside :meth:`step` (module
    docstring). Observations and actions are the game's (a seat's), rewards the learner's."""

    def __init__(
        self, env_id: str, opponent: str, kwargs: dict[str, Any] | None = None, opponent_key: str = "env.opponent"
    ) -> None:
        self.env_id = env_id
        self.opponent_path = opponent
        self.opponent_key = opponent_key
        """The params key ``opponent`` was given under (``env.opponent``, ``eval.opponents.<name>``), which its
        errors name."""
        seats = seats_of(env_id, kwargs or {})
        self.seats = seats.names
        self.observation_space = seats.observation_space
        self.action_space = seats.action_space
        self.game = build_game(env_id, kwargs or {})
        self.metadata = dict(getattr(self.game, "metadata", {}) or {})
        self.render_mode = getattr(self.game, "render_mode", None)
        try:
            self.opponent: Opponent = load_opponent(opponent)
        except ValueError as exc:
            raise ConfigError(f"{opponent_key}: {exc}") from None
        self.seat = 1
        """The learner's seat this episode (0: it moves first)."""
        self.opening_moves = 0
        """At most this many uniformly random legal moves open each game (``env.self_play.opening_moves``: set on
        training envs only; 0: games start from the empty board)."""
        self.frames: list[BoardFrame] = []
        """The board's symmetric frames a game is played in, one drawn per game (``env.self_play.board_frames``: set
        on training envs only; empty: the real board)."""
        self.frame: BoardFrame | None = None
        self.opponent_rng = np.random.default_rng([0, OPPONENT_STREAM])
        self.game_returns: dict[str, float] = {}
        """Each seat's return so far this episode."""

    @property
    def learner(self) -> str:
        return self.seats[self.seat]

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        if seed is not None:
            self.seat = learner_seat(seed)
            self.opponent_rng = np.random.default_rng([int(seed), OPPONENT_STREAM])
        else:
            self.seat = 1 - self.seat
        self.game.reset(seed=seed, options=options)
        self.frame = self.frames[int(self.opponent_rng.integers(len(self.frames)))] if self.frames else None
        while True:
            self.game_returns = dict.fromkeys(self.seats, 0.0)
            if self.opening_moves:
                self._random_opening()
            _, ended = self._opponent_moves()
            if not ended:
                return self._learner_observation(), {"seat": self.seat}
            if not self.opening_moves:  # the opponent ended the game before the learner's first move: none should
                raise ConfigError(f"{self._playing()[0]}: {self.env_id} ended before the learner's first move")
            self.game.reset()  # the opening left the opponent a win before the learner's first move: draw again

    def _random_opening(self) -> None:
        """Both seats play a uniformly random number (0 to :attr:`opening_moves`) of uniformly random legal moves,
        drawn from the opponent's generator, stopping early should one end the game (:meth:`reset` then draws
        again)."""
        for _ in range(int(self.opponent_rng.integers(self.opening_moves + 1))):
            legal = np.flatnonzero(np.asarray(self.game.observe(self.game.agent_selection)[MASK_KEY]))
            self.game.step(int(legal[self.opponent_rng.integers(len(legal))]))
            if self._ended():
                return

    def _learner_observation(self) -> Any:
        """The learner's seat's observation, in this game's frame."""
        observation = self.game.observe(self.learner)
        return observation if self.frame is None else self.frame.observation(observation)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self.game.step(int(action) if self.frame is None else self.frame.real_action(int(action)))
        reward = self._collect()
        ended = self._ended()
        if not ended:
            more, ended = self._opponent_moves()
            reward += more
        truncated = ended and bool(self.game.truncations.get(self.learner, False))
        terminated = ended and not truncated
        return self._learner_observation(), reward, terminated, truncated, {"seat": self.seat}

    def _collect(self) -> float:
        """Every seat's reward of the step just played, added to its return; returns the learner's."""
        for name in self.seats:
            self.game_returns[name] += float(self.game.rewards.get(name, 0.0))
        return float(self.game.rewards.get(self.learner, 0.0))

    def _ended(self) -> bool:
        learner = self.learner
        return bool(
            learner not in self.game.agents
            or self.game.terminations.get(learner, False)
            or self.game.truncations.get(learner, False)
        )

    def _opponent_moves(self) -> tuple[float, bool]:
        """The opponent moves until it is the learner's turn or the game ends: (the learner's reward, ended)."""
        reward = 0.0
        while not self._ended() and self.game.agent_selection != self.learner:
            seat = self.game.agent_selection
            observation = self.game.observe(seat)
            action = self.opponent(observation, self.opponent_rng)
            self._check_legal(observation, action)
            self.game.step(action)
            reward += self._collect()
        return reward, self._ended()

    def _playing(self) -> tuple[str, str]:
        """(params key, import path) of whoever plays the opponent's next move."""
        if isinstance(self.opponent, PlayerOpponent):
            return self.opponent.playing()
        return self.opponent_key, self.opponent_path

    def _check_legal(self, observation: Any, action: Any) -> None:
        mask = observation.get(MASK_KEY) if isinstance(observation, dict) else None
        try:
            index = int(action)
        except (TypeError, ValueError):
            key, path = self._playing()
            raise ConfigError(f"{key}: {path} returned {action!r}, not an action of {self.action_space}") from None
        legal = self.action_space.contains(np.int64(index)) and (mask is None or bool(np.asarray(mask)[index]))
        if not legal:
            allowed = "" if mask is None else f" (legal: {np.flatnonzero(np.asarray(mask)).tolist()})"
            key, path = self._playing()
            raise ConfigError(f"{key}: {path} played the illegal move {index} in {self.env_id}{allowed}")

    def render(self) -> Any:
        return self.game.render()

    def close(self) -> None:
        self.game.close()


def make_game(**kwargs: Any) -> gym.Env:
    """:class:`TurnBasedGame` (``env_id``, ``opponent``, ``kwargs``) as a gymnasium entry point."""
    return TurnBasedGame(**kwargs)


def describe_opponent(env_id: str, kwargs: dict[str, Any], opponent: str) -> dict[str, Any]:
    """For a model card: the seats and the opponent the policy was trained against."""
    seats = seats_of(env_id, kwargs)
    return {
        "seats": list(seats.names),
        "opponent": opponent,
        "observation": "the moving seat's own observation of the game (the model plays either seat)",
    }
