"""PettingZoo Parallel envs as rows of a vector env: each agent of each env copy is one row, so one policy shared by
every agent (parameter sharing, IPPO's way) trains and is evaluated with the single-agent loops unchanged.

An env is named ``env.id: pettingzoo:<module>`` (the module's ``parallel_env``, PettingZoo's convention:
``pettingzoo:mpe2.simple_spread_v3``) or ``pettingzoo:<module>:<function>`` (any function returning a ``ParallelEnv``),
built with ``env.kwargs``. This is SuperSuit's recipe (``pettingzoo_env_to_vec_env_v1`` then ``concat_vec_envs_v1``)
without its need for agents that never leave before the episode ends:

- Row ``i * A + a`` is agent ``possible_agents[a]`` of copy ``i`` (``A`` agents); copy ``i`` is reset with
  ``seed + i``, so episode ``k`` of an evaluation has seed ``seed + k`` as a single-agent env's does.
- With ``env.agent_id`` (the default), the observation of row ``i * A + a`` ends with the one-hot of ``a`` (a
  ``Dict`` observation gets it as the key ``agent_id``): the shared policy can tell the agents apart.
- An agent that leaves early (terminated or truncated before the others) ended at that step like any episode; until
  its copy's episode ends, its row repeats its last observation with reward 0 and is no transition.
- An agent absent at reset (in ``possible_agents``, not in the reset's observations) is no transition, its row a
  zero observation, until it joins: from the step after the one whose observations first hold it, it acts like the
  others. An agent that left does not join again in the same episode.
- A copy whose agents have all left resets at its next step (gymnasium's next-step autoreset): every row of the
  copy is then no transition either. Each step's ``info["valid"]`` (rows,) bool says which rows were transitions
  (``rlcore.envs.stepping.VectorStepper`` masks the others out), and ``info["episode_over"]`` (rows,) bool the
  rows of the copies whose agents have all left at this step (the episode is over for the agents that never
  acted in it too: ``rlcore.evaluation.evaluator``).

Agents share one action space. Their observations may differ in width when each is a 1-D Box (MPE's
simple_adversary, simple_tag): each row's observation is then zero-padded to the widest before the one-hot, and
only ``policy.groups`` (``rlcore.envs.agent_groups``) can train them, each group's own policy reading its agents'
true width. Without groups, one shared policy needs identical spaces (``check_shared_spaces``).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.envs.registration import EnvSpec
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space, create_empty_array, iterate

from rlcore.common.errors import raised_at
from rlcore.envs.ids import is_multiagent, parallel_env_factory

MASK_KEY = "action_mask"
"""The key of an action mask in an agent's Dict observation or info (``rlcore.envs.action_masks``)."""
AGENT_ID_KEY = "agent_id"
"""The key of the agent's one-hot in a ``Dict`` observation."""


@dataclass(frozen=True)
class Agents:
    """The agents of a PettingZoo env and the spaces they share (as the env declares them, no agent id)."""

    names: tuple[str, ...]
    observation_space: spaces.Space
    action_space: spaces.Space
    max_cycles: int | None
    """The env's episode length limit (``max_cycles``, MPE's and butterfly's), None when it declares none."""
    widths: tuple[int, ...] = ()
    """Each agent's own observation width when the agents' 1-D Box observations differ in width (then
    ``observation_space`` is the padded one: every agent's bounds, zeros beyond an agent's width); empty when every
    agent has the same observation space."""

    @property
    def mixed(self) -> bool:
        """Whether the agents' observations differ (padded rows; only groups can train them)."""
        return bool(self.widths)


def _kwargs_key(kwargs: dict[str, Any]) -> str:
    return json.dumps(kwargs, sort_keys=True, default=repr)


def agents_of(env_id: str, kwargs: dict[str, Any]) -> Agents:
    """The agents of ``env_id`` built with ``kwargs`` (one env is built once per process and closed); ``ValueError``
    (one line) for an env that does not build, has no agents, has agents with different action spaces, or agents
    whose observations differ and are not all 1-D Boxes."""
    return _agents_of(env_id, _kwargs_key(kwargs))


@functools.cache
def _agents_of(env_id: str, kwargs_key: str) -> Agents:
    kwargs = json.loads(kwargs_key)
    env = build_parallel_env(env_id, kwargs)
    try:
        names = tuple(str(name) for name in env.possible_agents)
        if not names:
            raise ValueError(f"env.id: {env_id} has no agents (possible_agents is empty)")
        observation, action = env.observation_space(names[0]), env.action_space(names[0])
        observations = [env.observation_space(name) for name in names]
        for name in names[1:]:
            if env.action_space(name) != action:
                raise ValueError(
                    f"env.id: {env_id}: its agents have different action spaces ({names[0]}: {action}, "
                    f"{name}: {env.action_space(name)}); rlcore's agents share one action space (pad them with "
                    "SuperSuit's pad_action_space_v0 in a function named as pettingzoo:module:function)"
                )
        cycles = getattr(env.unwrapped, "max_cycles", None)
        max_cycles = int(cycles) if isinstance(cycles, int) and not isinstance(cycles, bool) and cycles > 0 else None
        if all(space == observation for space in observations):
            return Agents(names, observation, action, max_cycles)
        return Agents(names, _padded_space(observations, names, env_id), action, max_cycles, _widths(observations))
    finally:
        env.close()


def _widths(observations: list[spaces.Space]) -> tuple[int, ...]:
    return tuple(int(np.prod(space.shape or ())) for space in observations)


def _padded_space(observations: list[spaces.Space], names: tuple[str, ...], env_id: str) -> spaces.Box:
    """The Box every agent's 1-D Box observation fits in, zero-padded to the widest: (max width,) float32."""
    for name, space in zip(names, observations, strict=True):
        if not (isinstance(space, spaces.Box) and len(space.shape) == 1):
            raise ValueError(
                f"env.id: {env_id}: its agents have different observation spaces ({names[0]}: {observations[0]}, "
                f"{name}: {space}); agents whose observations differ must each observe a 1-D Box (padded to the "
                "widest, one policy per group: policy.groups)"
            )
    width = max(_widths(observations))
    low, high = np.zeros(width, np.float32), np.zeros(width, np.float32)
    for space in observations:
        assert isinstance(space, spaces.Box)
        size = space.shape[0]
        low[:size] = np.minimum(low[:size], space.low.astype(np.float32))
        high[:size] = np.maximum(high[:size], space.high.astype(np.float32))
    return spaces.Box(low, high, dtype=np.float32)


def check_shared_spaces(agents: Agents, env_id: str) -> None:
    """``ValueError`` (one line naming ``env.id``) when ``agents`` observe different spaces: one policy shared by
    all of them (no ``policy.groups``) needs the same spaces."""
    if agents.mixed:
        widths = ", ".join(f"{name}: {width}" for name, width in zip(agents.names, agents.widths, strict=True))
        raise ValueError(
            f"env.id: {env_id}: its agents have different observation spaces (widths {widths}); one policy shared "
            "by all agents needs the same spaces: put them in groups of their own (policy.groups) or pad them with "
            "SuperSuit's pad_observations_v0 in a function named as pettingzoo:module:function"
        )


def check_parallel_masks(env_id: str, kwargs: dict[str, Any], agents: Agents, source: str | None) -> None:
    """``ValueError`` (one line naming ``env.action_mask``) unless ``source`` can be read from this Parallel env:
    ``observation`` needs the ``"action_mask"`` key in the agents' Dict observations; ``info`` is refused after one
    reset (seed 0): infos without a mask say so, and the rows of a Parallel env carry no infos (the mask must be in
    the observations)."""
    if source == "observation":
        space = agents.observation_space
        if not (isinstance(space, spaces.Dict) and MASK_KEY in space.spaces):
            raise ValueError(
                f"env.action_mask: observation, but {env_id}'s agents observe {space} without an {MASK_KEY!r} key"
            )
    if source != "info":
        return
    env = build_parallel_env(env_id, kwargs)
    try:
        _, infos = env.reset(seed=0)
    except Exception as exc:
        raise ValueError(f"env.id: {env_id} raised at its first reset: {raised_at(exc)}") from None
    finally:
        env.close()
    for name in agents.names:
        info = (infos or {}).get(name)
        if not (isinstance(info, dict) and MASK_KEY in info):
            keys = sorted(map(str, info)) if isinstance(info, dict) else info
            raise ValueError(
                f"env.action_mask: info, but {env_id} gave no infos[{name!r}][{MASK_KEY!r}] at its first reset "
                f"(its info: {keys}); set env.action_mask: null, or observation if its observations carry the mask"
            )
    raise ValueError(
        f"env.action_mask: info: {env_id}'s infos carry masks, but a PettingZoo env's mask is read from its agents' "
        f"observations only (a Dict with an {MASK_KEY!r} key: env.action_mask: observation)"
    )


def describe_agents(env_id: str, kwargs: dict[str, Any], agent_id: bool | None) -> dict[str, Any] | None:
    """For a model card: a PettingZoo env's agents and how an exported policy's observation tells them apart; None
    for a gymnasium env."""
    if not is_multiagent(env_id):
        return None
    names = list(agents_of(env_id, kwargs).names)
    one_hot = agent_id is not False
    return {
        "names": names,
        "shared_policy": True,
        "agent_id": one_hot,
        "observation": (
            f"each agent's own observation followed by the one-hot ({len(names)} values) of its index in names"
            if one_hot
            else "each agent's own observation, no agent id"
        ),
    }


def build_parallel_env(env_id: str, kwargs: dict[str, Any]) -> Any:
    """One ``env_id`` env with ``kwargs``; ``ValueError`` (one line naming ``env.kwargs``) when it refuses them."""
    factory = parallel_env_factory(env_id)
    try:
        env = factory(**kwargs)
    except TypeError as exc:
        raise ValueError(
            f"env.kwargs: {env_id} does not accept these arguments: {' '.join(str(exc).split())}"
        ) from None
    except (Exception, SystemExit) as exc:
        raise ValueError(f"env.kwargs: {env_id} refuses them: {raised_at(exc)}") from None
    if not (hasattr(env, "possible_agents") and hasattr(env, "observation_space") and hasattr(env, "step")):
        raise ValueError(f"{env_id} built {type(env).__name__}, not a PettingZoo ParallelEnv")
    if callable(getattr(env, "last", None)):  # an AEC env (agent_iter / last): one agent acts per step
        raise ValueError(
            f"{env_id} built an AEC env; rlcore steps Parallel envs (use the module's parallel_env, or PettingZoo's "
            "aec_to_parallel in a function named as pettingzoo:module:function)"
        )
    return env


def with_agent_id(space: spaces.Space, agents: int, env_id: str) -> spaces.Space:
    """``space`` with the agent's one-hot (``agents`` wide) appended: a 1-D Box grows by ``agents``, a Dict gets
    the key :data:`AGENT_ID_KEY`; ``ValueError`` for any other space."""
    one_hot = spaces.Box(0.0, 1.0, (agents,), np.float32)
    if isinstance(space, spaces.Box) and len(space.shape) == 1:
        low = np.concatenate([space.low.astype(np.float32), one_hot.low])
        high = np.concatenate([space.high.astype(np.float32), one_hot.high])
        return spaces.Box(low, high, dtype=np.float32)
    if isinstance(space, spaces.Dict) and AGENT_ID_KEY not in space.spaces:
        return spaces.Dict({**space.spaces, AGENT_ID_KEY: one_hot})
    raise ValueError(
        f"env.agent_id: the agent's one-hot is appended to a 1-D Box observation (or added to a Dict's keys); "
        f"{env_id} observes {space}: set env.agent_id: false"
    )


class ParallelEnvRows(gym.vector.VectorEnv):
    """``copies`` copies of a PettingZoo Parallel env as one vector env of ``copies * A`` rows (module docstring)."""

    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP}

    def __init__(self, env_id: str, kwargs: dict[str, Any], copies: int, agent_id: bool) -> None:
        agents = agents_of(env_id, kwargs)
        self.agent_names = agents.names
        """The agents, in row order within each copy."""
        self.copies = copies
        self.envs = [build_parallel_env(env_id, kwargs) for _ in range(copies)]
        count = len(agents.names)
        self.num_envs = copies * count
        self.agent_id = agent_id
        self.single_observation_space = (
            with_agent_id(agents.observation_space, count, env_id) if agent_id else agents.observation_space
        )
        self.single_action_space = agents.action_space
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.spec = EnvSpec(id=env_id, entry_point=None)
        self._width = max(agents.widths) if agents.mixed else 0
        self._one_hots = np.tile(np.eye(count, dtype=np.float32), (copies, 1))
        self._last: list[Any] = [None] * self.num_envs
        """Each row's latest observation from its env (no agent id)."""
        self._live = np.zeros(self.num_envs, dtype=bool)
        """Rows whose agent acts in the next step."""
        self._left = np.zeros(self.num_envs, dtype=bool)
        """Rows whose agent left its copy's episode (it does not join again before the copy resets)."""
        self._absent = [_zero_observation(self.envs[0].observation_space(name)) for name in agents.names]
        """Each agent's observation while it has none: absent at reset, not joined yet."""
        self._reset_next = np.zeros(copies, dtype=bool)

    def reset(self, *, seed: Any = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        """Reset every copy (copy ``i`` with ``seed + i``); returns the rows' observations and ``{}``."""
        for copy in range(self.copies):
            self._reset_copy(copy, None if seed is None else int(seed) + copy, options)
        self._reset_next[:] = False
        return self._observations(), {}

    def _reset_copy(self, copy: int, seed: int | None, options: dict[str, Any] | None) -> None:
        observations, _ = self.envs[copy].reset(seed=seed, options=options)
        count = len(self.agent_names)
        for index, name in enumerate(self.agent_names):
            row = copy * count + index
            self._live[row] = name in observations
            self._left[row] = False
            self._last[row] = observations[name] if name in observations else self._absent[index]

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """``actions`` (rows, ...) -> observations, rewards, terminated, truncated (rows,),
        ``{"valid": (rows,), "episode_over": (rows,)}``."""
        actions = np.asarray(actions)
        count = len(self.agent_names)
        valid = self._live.copy()
        over = np.zeros(self.num_envs, dtype=bool)
        rewards = np.zeros(self.num_envs, dtype=np.float64)
        terminated = np.zeros(self.num_envs, dtype=bool)
        truncated = np.zeros(self.num_envs, dtype=bool)
        for copy in range(self.copies):
            first = copy * count
            if self._reset_next[copy]:
                self._reset_copy(copy, None, None)
                self._reset_next[copy] = False
                continue
            acting = {
                name: actions[first + index] for index, name in enumerate(self.agent_names) if self._live[first + index]
            }
            observations, step_rewards, step_terminated, step_truncated, _ = self.envs[copy].step(acting)
            for index, name in enumerate(self.agent_names):
                row = first + index
                if name not in acting:
                    if not self._left[row] and name in observations:  # joined: acts from the next step
                        self._last[row] = observations[name]
                        self._live[row] = True
                    continue
                rewards[row] = float(step_rewards.get(name, 0.0))
                if name in observations:
                    self._last[row] = observations[name]
                terminated[row] = bool(step_terminated.get(name, False))
                # An agent the env dropped without saying why left all the same: cut, not terminal.
                gone = name not in self.envs[copy].agents
                truncated[row] = bool(step_truncated.get(name, False)) or (gone and not terminated[row])
                self._live[row] = not (terminated[row] or truncated[row])
                self._left[row] = not self._live[row]
            self._reset_next[copy] = over[first : first + count] = not self._live[first : first + count].any()
        return self._observations(), rewards, terminated, truncated, {"valid": valid, "episode_over": over}

    def _observations(self) -> Any:
        if isinstance(self.single_observation_space, spaces.Dict):
            keys = [key for key in self.single_observation_space.spaces if key != AGENT_ID_KEY]
            batch = {key: np.stack([np.asarray(obs[key]) for obs in self._last]) for key in keys}
            if self.agent_id:
                batch[AGENT_ID_KEY] = self._one_hots.copy()
            return batch
        stacked = np.stack(
            [self._padded(np.asarray(obs, dtype=self.single_observation_space.dtype)) for obs in self._last]
        )
        if not self.agent_id:
            return stacked
        return np.concatenate([stacked.reshape(self.num_envs, -1), self._one_hots], axis=1)

    def critic_inputs(self) -> np.ndarray:
        """A centralized critic's input at each row (``policy.critic: centralized``): its copy's global state
        (``state()``, flattened) followed by the agent's one-hot over all agents, (rows, state width + A) float32."""
        states = np.stack([np.asarray(env.state(), dtype=np.float32).reshape(-1) for env in self.envs])
        count = len(self.agent_names)
        return np.concatenate(
            [np.repeat(states, count, axis=0), np.tile(np.eye(count, dtype=np.float32), (self.copies, 1))], axis=1
        )

    def _padded(self, obs: np.ndarray) -> np.ndarray:
        """An agent's observation zero-padded to the widest agent's (agents whose observations differ in width)."""
        if not self._width or obs.shape[0] == self._width:
            return obs
        return np.concatenate([obs, np.zeros(self._width - obs.shape[0], obs.dtype)])

    def render(self) -> tuple[Any, ...]:
        """Each copy's render (built with ``render_mode`` in ``env.kwargs``), in copy order."""
        return tuple(env.render() for env in self.envs)

    def close_extras(self, **kwargs: Any) -> None:
        for env in self.envs:
            env.close()


def _zero_observation(space: spaces.Space) -> Any:
    """An observation of ``space`` of zeros (a ``Dict``'s: each key's)."""
    return next(iter(iterate(space, create_empty_array(space, 1, fn=np.zeros))))


def state_width(env_id: str, kwargs: dict[str, Any]) -> int:
    """The width of the env's global state (``state()`` after a seeded reset, flattened), for a centralized critic
    (``policy.critic: centralized``); ``ValueError`` (one line naming ``policy.critic``) when the env has no
    ``state()`` or it raises."""
    return _state_width(env_id, _kwargs_key(kwargs))


@functools.cache
def _state_width(env_id: str, kwargs_key: str) -> int:
    env = build_parallel_env(env_id, json.loads(kwargs_key))
    try:
        env.reset(seed=0)
        state = np.asarray(env.state(), dtype=np.float32)
    except (Exception, NotImplementedError) as exc:
        raise ValueError(
            f"policy.critic: centralized needs the env's global state(), and {env_id}'s state() failed: "
            f"{raised_at(exc)}"
        ) from None
    finally:
        env.close()
    if state.size == 0:
        raise ValueError(f"policy.critic: centralized needs the env's global state(); {env_id}'s state() is empty")
    return int(state.size)
