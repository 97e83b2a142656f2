"""Multi-agent environments on JaxMARL's `MultiAgentEnv` contract, as rows of the learners' batch.

The contract (`jaxmarl.environments.multi_agent_env.MultiAgentEnv`; a class need not subclass it):

    env.agents                       # list of agent names; env.num_agents == len(env.agents)
    env.reset(key) -> (obs, state)                                   # obs: {agent: array}
    env.step_env(key, state, actions) -> (obs, state, rewards, dones, infos)
        # actions, rewards, dones: {agent: ...}; dones["__all__"] ends the episode
    env.observation_space(agent), env.action_space(agent)            # per agent
    env.get_avail_actions(state) -> {agent: bool [n]}                # optional: action masks
    env.max_steps                                                    # optional: the time limit
    env.is_truncated(state) -> bool []                               # optional: see below

The learners fold the agent axis into the batch (JaxMARL's `batchify`, Mava's `agents_view`): an
env of A agents is A rows, one per agent, each with its own reward and its own observation

    {"obs": [D] float32, "agent": [A] one-hot id, "action_mask": [n] bool (with masks),
     "world_state": [S] float32 (for a centralised critic)}

so one policy (shared parameters) acts for every agent and every on-policy algorithm runs unchanged.
`TeamEnv` is the team as one gymnax env (what `VecEnv` steps, resetting whole teams), `AgentsAsRows`
the vectorised wrapper that turns N teams into N * A rows.

Episodes: an env's episode ends when `dones["__all__"]`. An episode that the env ends once its step
count has reached `env.max_steps` is a time limit: truncated (the learners bootstrap from its final
observation), never terminated, as for single-agent envs; the episode ends where the env says, so
its length is the env's own (JaxMARL's MPE ends on step max_steps + 1). Agents done before the
episode ends (`dones[agent]`) keep their rows until it does (their rewards are the env's, usually 0,
and their masks what the env allows, usually a no-op). An env that can tell a time limit from a
true end on the same step says which with `is_truncated(state)` (read after the step) instead.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from fusedrl.envs._gymnax import spaces
from fusedrl.envs.base import Box, Discrete, Environment, EnvState, MultiDiscrete
from fusedrl.envs.wrappers import ACTION_MASK, VecEnvWrapper, WrapperState

#: The entries of each agent's row observation besides the action mask.
OBS, AGENT_ID, WORLD_STATE = "obs", "agent", "world_state"


def is_multi_agent(env: Any) -> bool:
    """Whether `env` follows JaxMARL's multi-agent contract (a list of `agents` and `step_env`) rather
    than gymnax's (which has `default_params`)."""
    return (isinstance(getattr(env, "agents", None), list | tuple) and hasattr(env, "step_env")
            and not hasattr(env, "default_params"))


def _space_kind(env_id: str, agent: str, space) -> tuple:
    """("discrete", n) or ("box", shape, low, high) of one agent's action space (JaxMARL's, gymnax's
    or ours: read by attributes)."""
    if hasattr(space, "n") and not hasattr(space, "nvec"):
        return ("discrete", int(space.n))
    shape = tuple(getattr(space, "shape", None) or ())
    if hasattr(space, "low") and hasattr(space, "high") and len(shape) == 1:
        low = np.broadcast_to(np.asarray(space.low, np.float32), shape)
        high = np.broadcast_to(np.asarray(space.high, np.float32), shape)
        return ("box", shape, tuple(low.tolist()), tuple(high.tolist()))
    raise ValueError(f"{env_id}: agent {agent!r} has action space {space!r}; the multi-agent learners take "
                     f"a Discrete(n) or a 1-D Box action per agent.")


def check_multi_agent_env(env_id: str, env: Any) -> None:
    """ValueError/TypeError naming what a multi-agent env lacks or what the learners cannot take
    (agents with different action spaces or observation shapes), with the fix."""
    agents = list(env.agents)
    if not agents or not all(isinstance(a, str) for a in agents) or len(set(agents)) != len(agents):
        raise ValueError(f"{env_id}: env.agents must be a non-empty list of distinct agent names (str), got "
                         f"{env.agents!r}.")
    if getattr(env, "num_agents", len(agents)) != len(agents):
        raise ValueError(f"{env_id}: env.num_agents is {env.num_agents} but env.agents names {len(agents)}.")
    missing = [m for m in ("reset", "step_env", "observation_space", "action_space") if not hasattr(env, m)]
    if missing:
        raise TypeError(f"{env_id}: a multi-agent env (JaxMARL's MultiAgentEnv contract) needs "
                        f"{', '.join(missing)}; see fusedrl.envs.multiagent.")
    kinds = {a: _space_kind(env_id, a, env.action_space(a)) for a in agents}
    if len(set(kinds.values())) > 1:
        listed = ", ".join(f"{a}: {k[:2]}" for a, k in kinds.items())
        raise ValueError(f"{env_id}: the agents' action spaces differ ({listed}); one policy acts for every "
                         f"agent, so give them the same space (pad the smaller ones and mask the padding "
                         f"with get_avail_actions).")
    shapes = {a: tuple(getattr(env.observation_space(a), "shape", None) or ()) for a in agents}
    if len(set(shapes.values())) > 1:
        raise ValueError(f"{env_id}: the agents' observation shapes differ ({shapes}); pad them to one "
                         f"shape (e.g. with zeros) in get_obs.")


@struct.dataclass
class TeamState(EnvState):
    inner: Any = None  # the multi-agent env's own state
    truncated: Any = None  # [] bool: the env ended the episode at its time limit on the last step


@struct.dataclass
class TeamParams:
    """A multi-agent env has no params of its own (JaxMARL's envs are built with their settings)."""


class TeamEnv(Environment):
    """A JaxMARL-style multi-agent env as one gymnax env whose every output has the agent axis [A]:
    observation {"obs": [A, D], "agent": [A, A], "action_mask": [A, n]?, "world_state": [A, S]?},
    action [A] (a `MultiDiscrete` of the agents' choices, or a Box [A, d]). Its reward is the team
    reward (the mean over agents); each agent's is in info["agent_reward"] [A]. `AgentsAsRows` then
    folds the agent axis into the batch.

    Args:
      env: the multi-agent env (checked with `check_multi_agent_env`).
      world_state: add each agent's row the global state: the env's own `obs["world_state"]` where it
        has one (JaxMARL's world-state wrappers), else every agent's observation concatenated.
    """

    def __init__(self, env: Any, *, world_state: bool = False, env_id: str | None = None):
        super().__init__()
        self.ma = env
        self.env_id = env_id or type(env).__name__
        check_multi_agent_env(self.env_id, env)
        self.agents = tuple(env.agents)
        self.num_agents = len(self.agents)
        self.world_state = bool(world_state)
        kind = _space_kind(self.env_id, self.agents[0], env.action_space(self.agents[0]))
        self.discrete = kind[0] == "discrete"
        if self.discrete:
            self.row_action_space = Discrete(kind[1])
            self._team_action_space = MultiDiscrete([kind[1]] * self.num_agents)
        else:
            low, high = np.asarray(kind[2], np.float32), np.asarray(kind[3], np.float32)
            self.row_action_space = Box(low, high, kind[1], jnp.float32)
            self._team_action_space = Box(np.broadcast_to(low, (self.num_agents,) + kind[1]),
                                          np.broadcast_to(high, (self.num_agents,) + kind[1]),
                                          (self.num_agents,) + kind[1], jnp.float32)
        limit = getattr(env, "max_steps", None)
        self.max_steps = None if limit is None else int(limit)
        self.has_masks = self.discrete and _has_avail_actions(env)

    @property
    def name(self) -> str:
        return self.env_id

    @property
    def default_params(self) -> TeamParams:
        return TeamParams()

    def action_space(self, params=None):
        return self._team_action_space

    def observation_space(self, params=None):
        """A Dict of the team's [A, ...] entries (the learners read one row's from `row_observation`)."""
        obs = jax.eval_shape(lambda k: self.reset_env(k)[0], jax.random.key(0))
        return spaces.Dict({k: Box(-jnp.inf, jnp.inf, v.shape, v.dtype) for k, v in obs.items()})

    def _observe(self, obs: dict, state) -> dict[str, jax.Array]:
        own = jnp.stack([jnp.asarray(obs[a], jnp.float32).reshape(-1) for a in self.agents])  # [A, D]
        out = {OBS: own, AGENT_ID: jnp.eye(self.num_agents, dtype=jnp.float32)}
        if self.has_masks:
            avail = self.ma.get_avail_actions(state)
            out[ACTION_MASK] = jnp.stack([jnp.asarray(avail[a]).astype(bool) for a in self.agents])
        if self.world_state:
            ws = obs[WORLD_STATE] if isinstance(obs, dict) and WORLD_STATE in obs else own.reshape(-1)
            ws = jnp.asarray(ws, jnp.float32)
            if ws.ndim == 1:  # one global state for the team: each agent's row reads it
                ws = jnp.broadcast_to(ws, (self.num_agents,) + ws.shape)
            out[WORLD_STATE] = ws.reshape(self.num_agents, -1)
        return out

    def reset_env(self, key: jax.Array, params=None):
        obs, state = self.ma.reset(key)
        start = TeamState(time=jnp.int32(0), inner=state, truncated=jnp.bool_(False))
        return self._observe(obs, state), start

    def step_env(self, key: jax.Array, state: TeamState, action: jax.Array, params=None):
        actions = {a: action[i] for i, a in enumerate(self.agents)}
        obs, inner, rewards, dones, _ = self.ma.step_env(key, state.inner, actions)
        time = state.time + 1
        agent_reward = jnp.stack([jnp.asarray(rewards[a], jnp.float32).reshape(()) for a in self.agents])
        # An episode that ends at the time limit is truncated (`is_truncated`), not terminated.
        done = jnp.asarray(dones["__all__"], bool).reshape(())
        new = TeamState(time=time, inner=inner, truncated=done & self._time_up(time, inner))
        terminated = done & ~new.truncated
        return self._observe(obs, inner), new, agent_reward.mean(), terminated, {"agent_reward": agent_reward}

    def _time_up(self, time, inner) -> jax.Array:
        if hasattr(self.ma, "is_truncated"):  # the env says whether its episode ended at a time limit
            return jnp.asarray(self.ma.is_truncated(inner), bool).reshape(())
        return jnp.bool_(False) if self.max_steps is None else time >= self.max_steps

    def is_truncated(self, state: TeamState, params=None) -> jax.Array:
        return state.truncated

    def row_observation(self, key: jax.Array):
        """One agent's row observation (agent 0's), for shapes: {name: [...]}."""
        obs, _ = self.reset_env(key)
        return jax.tree.map(lambda x: x[0], obs)


def _has_avail_actions(env) -> bool:
    """Whether `env.get_avail_actions` is implemented (JaxMARL's base class raises NotImplementedError)."""
    if not hasattr(env, "get_avail_actions"):
        return False
    try:
        jax.eval_shape(lambda k: env.get_avail_actions(env.reset(k)[1]), jax.random.key(0))
    except NotImplementedError:
        return False
    return True


class AgentsAsRows(VecEnvWrapper):
    """N teams of a `TeamEnv` (a `VecEnv` of it) as N * A rows: row n * A + a is agent a of env n.

    Observations, rewards (each agent's own), terminated and truncated (the team's, for every agent)
    and info["final_observation"] come per row; actions go in per row ([N * A, ...]). The team's
    other info entries are dropped.
    """

    def __init__(self, venv):
        super().__init__(venv)
        if not isinstance(venv.env, TeamEnv):
            raise TypeError(f"AgentsAsRows wraps a VecEnv of a TeamEnv, got one of "
                            f"{type(venv.env).__name__}.")
        self.agents = venv.env.num_agents

    @property
    def num_envs(self) -> int:
        return self.venv.num_envs * self.agents

    def action_space(self, params=None):
        return self.env.row_action_space

    def observation_space(self, params=None):
        """A Dict of one row's entries."""
        obs = jax.eval_shape(self.env.row_observation, jax.random.key(0))
        return spaces.Dict({k: Box(-jnp.inf, jnp.inf, v.shape, v.dtype) for k, v in obs.items()})

    def _rows(self, x):
        return x.reshape((x.shape[0] * x.shape[1],) + x.shape[2:])

    def reset(self, key: jax.Array, params=None):
        obs, inner = self.venv.reset(key, params)
        return jax.tree.map(self._rows, obs), WrapperState(inner=inner)

    def step(self, state, action: jax.Array, params=None, draws=None):
        teams = action.reshape((self.venv.num_envs, self.agents) + action.shape[1:])
        obs, inner, _, terminated, truncated, info = self.venv.step(state.inner, teams, params, draws)
        reward = self._rows(info["agent_reward"])
        info = {"final_observation": jax.tree.map(self._rows, info["final_observation"])}
        terminated, truncated = (jnp.repeat(x, self.agents) for x in (terminated, truncated))
        return jax.tree.map(self._rows, obs), state.replace(inner=inner), reward, terminated, truncated, info


__all__ = ["AGENT_ID", "OBS", "WORLD_STATE", "AgentsAsRows", "TeamEnv", "TeamParams", "TeamState",
           "check_multi_agent_env", "is_multi_agent"]
