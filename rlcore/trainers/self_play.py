"""Self-play (``env.self_play``, :mod:`rlcore.envs.self_play`): the snapshot pool, the opponents the training env
copies play, the ELO ratings, and what of them a checkpoint keeps.

- Opponents: each sub-env of the training vector env (sync: the same process) plays its own
  :class:`SeatOpponent` in place of ``env.opponent``, whoever was last drawn for that copy: the latest learning
  policy, a snapshot of the pool (both acting through a :class:`PolicyOpponent`), or one of the
  ``fixed_opponents``. A policy opponent by default **samples** its masked action distribution
  (``snapshot_actions: sample``, as ML-Agents' opponents do: varied games rather than one line of play per snapshot)
  with the sub-env's own opponent generator (seeded from the episode's seed, ``rlcore.envs.turn_based``), so the same
  seeds play the same games and a resumed run needs no extra generator for it; or greedily, its most probable legal
  move (``greedy``). A masked move is never chosen (the observation's mask restricts both).
- Snapshots: the acting policy's weights at env step 0 and every ``save_steps`` env steps after, the last
  ``window`` kept. Every ``swap_steps`` env steps each copy's opponent is drawn anew, independently, from
  :attr:`SelfPlay.rng` (a NumPy generator seeded from ``seed``): a fixed opponent with its probability, else the
  latest policy with probability ``play_against_latest_model_ratio``, else a snapshot drawn uniformly. Copies
  drawing different opponents make every rollout a mix of them rather than one opponent per swap.
- ELO (:mod:`rlcore.evaluation.elo`, K ``elo_k``): after every finished training game against a snapshot of the
  pool, the learner gains K (result - expected) and the snapshot loses as much. A game against the latest policy
  moves no rating: ML-Agents' ghost trainer rates it against the learner's own rating, subtracting the change from
  it (``change_opponent_elo``) and adding it back (``change_current_elo``), net zero; moving the learner alone would
  add a random walk of K/2 a game to the rating with no change in strength. A game against a snapshot that left the
  window while playing (it plays on until the next swap) moves no rating either: its rating left with it (ML-Agents
  keeps a ring of ratings and would rate such a game against the newer snapshot saved into its slot, whose rating
  is not the one that played). A game against a fixed opponent moves no rating. All of them count in the logged
  scores (``self_play_score``, ``self_play_fixed_score``).
- Checkpoints: :meth:`SelfPlay.state_dict` (snapshots' weights as tensors, ratings, counters, each copy's opponent,
  the generator's state as a tensor of its JSON) loads with ``torch.load(weights_only=True)``. A resumed run restarts
  its episodes (as every rlcore run does) with the same pool, ratings, opponents and generator as the checkpoint.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import torch
from gymnasium import spaces

from rlcore.common.errors import ConfigError
from rlcore.envs.board_frames import board_frames
from rlcore.envs.observations import obs_tensor, pack
from rlcore.envs.self_play import SelfPlayConfig
from rlcore.envs.turn_based import Opponent, load_opponent
from rlcore.evaluation.elo import game_result, rating_change
from rlcore.nets.policies import ActorCritic
from rlcore.trainers.session import TrainingSession
from rlcore.trainers.sources import EnvSource

SELF_PLAY_STREAM = 0x5E1F
"""Mixed into the run's seed for the pool's generator (which opponent plays)."""
LATEST = -1
"""The id :attr:`SelfPlay.opponent_id` has while the latest (learning) policy plays."""


class PolicyOpponent:
    """``(observation, rng) -> action`` of a policy: ``observation`` a seat's Dict (its ``"action_mask"`` (n,)),
    packed as the policy sees observations (``dict_space``: the training env's Dict, before packing); ``greedy``: its
    most probable legal move, else a move drawn from its masked distribution with ``rng``."""

    def __init__(self, dict_space: spaces.Dict, policy: ActorCritic, greedy: bool) -> None:
        self.dict_space = dict_space
        self.policy = policy
        self.greedy = greedy

    def __call__(self, observation: dict[str, Any], rng: np.random.Generator) -> int:
        packed = pack(self.dict_space, {key: np.asarray(observation[key]) for key in self.dict_space}, batched=False)
        obs = obs_tensor(packed[None])
        with torch.no_grad():
            features, _ = self.policy.step_features(obs, None)
            dist = self.policy.distribution_of(features, self.policy.action_mask(obs))
            logits = cast(torch.distributions.Categorical, dist).logits[0].double()
        legal = np.asarray(observation["action_mask"]) > 0
        if self.greedy:
            return int(np.flatnonzero(legal)[int(torch.argmax(logits[torch.as_tensor(legal)]))])
        weights = torch.softmax(logits, dim=-1).numpy() * legal
        return int(rng.choice(len(weights), p=weights / weights.sum()))


@dataclass
class Snapshot:
    """One snapshot of the pool: its id (0, 1, ... in the order taken), the env step it was taken at, its weights
    (the policy's state dict) and its ELO rating."""

    id: int
    env_step: int
    weights: dict[str, torch.Tensor]
    rating: float


class SeatOpponent:
    """The opponent of training env copy ``index``: whoever :class:`SelfPlay` drew for it last (a policy or a fixed
    opponent), as an ``(observation, rng) -> action`` function the copy's game calls."""

    def __init__(self, self_play: SelfPlay, index: int) -> None:
        self.self_play = self_play
        self.index = index

    def __call__(self, observation: dict[str, Any], rng: np.random.Generator) -> Any:
        return self.self_play.players[int(self.self_play.opponent_ids[self.index])](observation, rng)

    def playing(self) -> tuple[str, str]:
        """(params key, who) of the copy's current opponent (``rlcore.envs.turn_based.PlayerOpponent``): what an
        illegal move of it is reported under."""
        opponent_id = int(self.self_play.opponent_ids[self.index])
        if opponent_id < LATEST:
            paths = list(self.self_play.config.fixed_opponents)
            return "env.self_play.fixed_opponents", paths[fixed_index(opponent_id)]
        return "env.self_play", "the latest policy" if opponent_id == LATEST else f"the policy's snapshot {opponent_id}"


class SelfPlay:
    """The pool, the opponents and the ratings of one self-play run; :meth:`step` after every vector step."""

    def __init__(
        self, config: SelfPlayConfig, policy: ActorCritic, dict_space: spaces.Dict, num_envs: int, seed: int
    ) -> None:
        """``policy``: the acting (learning) policy, whose weights change between updates; ``num_envs``: training
        env copies (one game each at a time)."""
        self.config = config
        self.policy = policy
        self.dict_space = dict_space
        self.greedy = config.snapshot_actions == "greedy"
        self.fixed = [load_opponent(path) for path in config.fixed_opponents]
        self.fixed_probabilities = np.array(list(config.fixed_opponents.values()), dtype=np.float64)
        self.rng = np.random.default_rng([seed, SELF_PLAY_STREAM])
        self.pool: list[Snapshot] = []
        self.learner_rating = float(config.initial_elo)
        self.opponent_ids = np.full(num_envs, LATEST, dtype=np.int64)
        """(N,) who each training env copy plays: :data:`LATEST`, a snapshot's id, or a fixed opponent's
        (:func:`fixed_id`)."""
        self.players: dict[int, Opponent] = {}
        """The opponents in play by id (a snapshot's policy loaded once however many copies play it)."""
        self.seat_opponents = [SeatOpponent(self, index) for index in range(num_envs)]
        self._spare_policies: list[ActorCritic] = []
        self.env_steps = 0
        self.next_id = 0
        self.returns = np.zeros(num_envs)
        """(N,) each training env's learner return in its current game."""
        self.results: list[float] = []
        """Results (1, 0.5, 0) of the games against the policy's snapshots or itself since the last :meth:`metrics`."""
        self.fixed_results: list[float] = []
        """Results of the games against fixed opponents since the last :meth:`metrics`."""

    def start(self, env_steps: int) -> None:
        """Called once before the first vector step at ``env_steps`` (0: a fresh run, which snapshots its initial
        policy and draws its first opponents)."""
        self.returns[:] = 0.0  # episodes (re)start
        if env_steps == 0 and not self.pool:
            self.env_steps = 0
            self._snapshot()
            self._swap()
        self._use_opponents()

    def step(self, rewards: np.ndarray, valid: np.ndarray, ended: np.ndarray) -> None:
        """After a vector step of the training envs: ``rewards``, ``valid``, ``ended`` (N,) as
        ``rlcore.envs.stepping.VectorStep`` has them. Rates the games that ended; snapshots and swaps when due."""
        self.returns += np.where(valid, rewards, 0.0)
        for index in np.flatnonzero(ended & valid):
            self._rate(int(self.opponent_ids[index]), game_result(float(self.returns[index])))
            self.returns[index] = 0.0
        before, self.env_steps = self.env_steps, self.env_steps + len(rewards)
        if self.env_steps // self.config.save_steps > before // self.config.save_steps:
            self._snapshot()
        if self.env_steps // self.config.swap_steps > before // self.config.swap_steps:
            self._swap()

    def _rate(self, opponent_id: int, result: float) -> None:
        """The learner's ``result`` of a game against ``opponent_id``: scored, and rated against a snapshot of the
        pool only (the module's docstring says why the others are not)."""
        if opponent_id < LATEST:  # a fixed opponent: its strength is no snapshot's, so no rating moves
            self.fixed_results.append(result)
            return
        self.results.append(result)
        snapshot = self._snapshot_of(opponent_id)
        if snapshot is None:  # the latest policy (itself), or a snapshot evicted since the swap
            return
        change = rating_change(self.learner_rating, snapshot.rating, result, self.config.elo_k)
        self.learner_rating += change
        snapshot.rating -= change

    def _snapshot_of(self, opponent_id: int) -> Snapshot | None:
        return next((s for s in self.pool if s.id == opponent_id), None)

    def _snapshot(self) -> None:
        weights = {key: value.detach().clone() for key, value in self.policy.state_dict().items()}
        self.pool.append(Snapshot(self.next_id, self.env_steps, weights, self.learner_rating))
        self.next_id += 1
        del self.pool[: -self.config.window]  # a playing snapshot may leave: it plays on until the next swap

    def _swap(self) -> None:
        """Each env copy's opponent drawn anew: a fixed opponent with its probability, else the latest policy with
        ``play_against_latest_model_ratio``, else a snapshot of the pool uniformly."""
        cumulative = np.cumsum(self.fixed_probabilities)
        for index in range(len(self.opponent_ids)):
            draw = self.rng.random()
            fixed = int(np.searchsorted(cumulative, draw, side="right"))
            if fixed < len(self.fixed):
                self.opponent_ids[index] = fixed_id(fixed)
            elif self.rng.random() < self.config.play_against_latest_model_ratio:
                self.opponent_ids[index] = LATEST
            else:
                self.opponent_ids[index] = self.pool[int(self.rng.integers(len(self.pool)))].id
        self._use_opponents()

    def _use_opponents(self) -> None:
        """:attr:`players` for the ids in :attr:`opponent_ids`: snapshots' weights loaded into policy copies."""
        spares = self._spare_policies + [
            cast(PolicyOpponent, player).policy for key, player in self.players.items() if key >= 0
        ]
        self.players = {}
        for opponent_id in sorted(set(self.opponent_ids.tolist())):
            if opponent_id < LATEST:
                self.players[opponent_id] = self.fixed[fixed_index(opponent_id)]
                continue
            snapshot = self._snapshot_of(opponent_id)
            if snapshot is None:  # the latest policy, or a snapshot gone from the pool since (a resumed run)
                self.opponent_ids[self.opponent_ids == opponent_id] = LATEST
                self.players[LATEST] = PolicyOpponent(self.dict_space, self.policy, self.greedy)
                continue
            copy_policy = spares.pop() if spares else copy.deepcopy(self.policy).eval()
            copy_policy.load_state_dict(snapshot.weights)
            self.players[opponent_id] = PolicyOpponent(self.dict_space, copy_policy, self.greedy)
        self._spare_policies = spares

    def metrics(self) -> dict[str, float]:
        """The logged curves: the learner's rating, the pool's size and mean rating, the share of env copies playing
        the latest policy and fixed opponents, and the learner's mean result in the games since the last call
        against the policy (``self_play_score``) and against fixed opponents (``self_play_fixed_score``), each
        absent when no such game ended."""
        metrics = {
            "self_play_elo": self.learner_rating,
            "self_play_pool_size": float(len(self.pool)),
            "self_play_pool_mean_elo": float(np.mean([s.rating for s in self.pool])) if self.pool else np.nan,
            "self_play_latest_share": float(np.mean(self.opponent_ids == LATEST)),
        }
        if self.fixed:
            metrics["self_play_fixed_share"] = float(np.mean(self.opponent_ids < LATEST))
        if self.results:
            metrics["self_play_score"] = float(np.mean(self.results))
            self.results = []
        if self.fixed_results:
            metrics["self_play_fixed_score"] = float(np.mean(self.fixed_results))
            self.fixed_results = []
        return {key: value for key, value in metrics.items() if np.isfinite(value)}

    def ratings(self) -> dict[str, float]:
        """The learner's rating and each snapshot's, by name (``learner``, ``snapshot_<id>``)."""
        return {"learner": self.learner_rating, **{f"snapshot_{s.id}": s.rating for s in self.pool}}

    def state_dict(self) -> dict[str, Any]:
        """Everything a resumed run continues from; tensors and plain containers only."""
        rng_state = json.dumps(self.rng.bit_generator.state).encode()
        return {
            "snapshots": [s.weights for s in self.pool],
            "ids": torch.tensor([s.id for s in self.pool], dtype=torch.int64),
            "env_steps_taken": torch.tensor([s.env_step for s in self.pool], dtype=torch.int64),
            "ratings": torch.tensor([s.rating for s in self.pool], dtype=torch.float64),
            "learner_rating": torch.tensor(self.learner_rating, dtype=torch.float64),
            "counters": torch.tensor([self.env_steps, self.next_id], dtype=torch.int64),
            "opponent_ids": torch.as_tensor(self.opponent_ids.copy()),
            "rng": torch.tensor(list(rng_state), dtype=torch.uint8),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.pool = [
            Snapshot(int(i), int(step), dict(weights), float(rating))
            for i, step, weights, rating in zip(
                state["ids"].tolist(),
                state["env_steps_taken"].tolist(),
                state["snapshots"],
                state["ratings"].tolist(),
                strict=True,
            )
        ]
        self.learner_rating = float(state["learner_rating"])
        self.env_steps, self.next_id = (int(v) for v in state["counters"].tolist())
        self.opponent_ids[:] = state["opponent_ids"].numpy()
        self.rng.bit_generator.state = json.loads(bytes(state["rng"].tolist()).decode())


def fixed_id(index: int) -> int:
    """The opponent id of ``env.self_play.fixed_opponents``' ``index``-th entry: -2, -3, ... (below :data:`LATEST`)."""
    return LATEST - 1 - index


def fixed_index(opponent_id: int) -> int:
    """The entry of ``env.self_play.fixed_opponents`` that ``opponent_id`` (below :data:`LATEST`) names."""
    return LATEST - 1 - opponent_id


def attach_self_play(session: TrainingSession[EnvSource]) -> SelfPlay | None:
    """The self-play of ``session``'s run (None without ``env.self_play``): its opponent pushed into every training
    env, its state restored from the checkpoint resumed from and saved in every later one (``self_play``)."""
    params = session.params
    config = params.env.self_play
    if config is None:
        return None
    vector_env = session.source.env
    dict_space = getattr(vector_env, "dict_space", None)
    sub_envs = getattr(vector_env.unwrapped, "envs", None)
    if not isinstance(dict_space, spaces.Dict) or sub_envs is None:  # refused at load (async); a guard for code
        raise ConfigError("env.self_play: needs a turn-based game's Dict observations in sync vector envs")
    policy = session.policy
    assert isinstance(policy, ActorCritic)
    self_play = SelfPlay(config, policy, dict_space, len(sub_envs), params.seed)
    frames = board_frames(tuple(dict_space["observation"].shape or ())) if config.board_frames else []
    for sub_env, opponent in zip(sub_envs, self_play.seat_opponents, strict=True):
        sub_env.unwrapped.opponent = opponent
        sub_env.unwrapped.opening_moves = config.opening_moves
        sub_env.unwrapped.frames = frames
    if session.checkpoint is not None and "self_play" in session.checkpoint.tensors:
        self_play.load_state_dict(session.checkpoint.tensors["self_play"])
    session.checkpoint_extras["self_play"] = self_play.state_dict
    self_play.start(session.state.env_steps)
    return self_play
