"""Jumanji's multi-agent envs as `jumanji:<id>` on JaxMARL's multi-agent contract (`fusedrl.envs.multiagent`).

`jumanji:LevelBasedForaging-v0`, `jumanji:RobotWarehouse-v0`, `jumanji:Connector-v3` and
`jumanji:Cleaner-v0` come back from `fusedrl.make` as a `JumanjiTeam`: agents `agent_0` ..
`agent_{A-1}`, per-agent observations, rewards and action masks, which the learners train as rows
of one batch (IPPO; MAPPO with `critic="centralized"`).

- Observations, one flat float32 vector per agent, as Jumanji's own training networks
  (`jumanji/training/networks/<env>/actor_critic.py`) read the suite's observation:
  LevelBasedForaging and RobotWarehouse: the agent's row of `agents_view`. Connector: the grid seen
  by the agent, two [G, G] channels (its own path, head and target as 1, 2, 3; every other agent's
  as 1, 2, 3 too, without telling them apart: Jumanji's `process_grid`). Cleaner: four [R, C]
  channels (dirty tiles, walls, the agent's own tile, the number of agents per tile).
- Global state (`obs["world_state"]`, MAPPO's critic): Cleaner's is the critic input of Jumanji's
  own network (dirty tiles, walls, agents per tile); the others have none of their own, so
  `TeamEnv` concatenates every agent's observation.
- Actions: each agent picks one of the suite's `num_values` (a `Discrete(n)` per agent); the mask
  (`get_avail_actions`) is the suite's `action_mask` row of that agent.
- Rewards: each agent's own where the suite gives one per agent (LevelBasedForaging, Connector);
  the suite's shared scalar for every agent where it gives one (RobotWarehouse, Cleaner). The team
  reward (`TeamEnv`) is their mean.
- Episode ends: Jumanji ends an episode at its time limit with `StepType.LAST`, and RobotWarehouse
  and Cleaner give that step discount 0, as they do a true end (a collision; a clean floor or an
  illegal move). Here the suite's env is built with its time limit off (`time_limit` at the int32
  maximum) and the adapter counts steps: the suite's limit is `max_steps`, its end is a truncation
  (`is_truncated`), and the suite's own `LAST` (now always a true end) a termination, also on the
  last step. Connector's agents that are connected or blocked are done (`dones[agent]`) before the
  episode ends; they keep their rows with the no-op as their only action.
- Keys: Jumanji keeps its key in its state: `reset` passes its key to the suite's `reset`, and
  `step_env` ignores its key.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import jumanji
import numpy as np
from flax import struct
from jumanji.types import StepType

from fusedrl.envs._gymnax import spaces
from fusedrl.envs.multiagent import WORLD_STATE
from fusedrl.envs.suites import suite_code

#: The time limit the suite's env is built with: never reached, so the adapter's counter decides.
_SUITE_LIMIT_OFF = np.iinfo(np.int32).max


def _agents_view(obs) -> jax.Array:
    """LevelBasedForaging, RobotWarehouse: each agent's row of `agents_view` [A, F]."""
    return obs.agents_view.reshape(obs.agents_view.shape[0], -1).astype(jnp.float32)


def _connector_view(obs) -> jax.Array:
    """Connector: each agent's grid [A, G * G * 2] as Jumanji's `process_grid` makes it (in
    jumanji.training, which needs dm-haiku): channel 0 the agent's own path, head and target as 1,
    2, 3; channel 1 every other agent's as 1, 2, 3 too, without telling them apart."""
    from jumanji.environments.routing.connector.constants import PATH

    grid = obs.grid[..., None]  # [G, G, 1]; agent i's path, head, target are 3i+1, 3i+2, 3i+3

    def one(agent):
        own = (grid >= PATH + 3 * agent) & (grid <= PATH + 3 * agent + 2)
        mine = jnp.where(own, grid - 3 * agent, 0)
        others = jnp.where(own | (grid == 0), 0, PATH + (grid - PATH) % 3)
        return jnp.concatenate([mine, others], axis=-1).reshape(-1)

    return jax.vmap(one)(jnp.arange(obs.action_mask.shape[0])).astype(jnp.float32)


def _cleaner_channels(obs) -> tuple[jax.Array, jax.Array, jax.Array]:
    from jumanji.environments.routing.cleaner.constants import DIRTY, WALL

    rows, cols = obs.agents_locations[:, 0], obs.agents_locations[:, 1]
    agents = jnp.zeros(obs.grid.shape, jnp.float32).at[rows, cols].add(1.0)  # agents per tile
    return (obs.grid == DIRTY).astype(jnp.float32), (obs.grid == WALL).astype(jnp.float32), agents


def _cleaner_view(obs) -> jax.Array:
    """Cleaner: Jumanji's actor input per agent, [A, R * C * 4]: dirty tiles, walls, the agent's own
    tile, agents per tile."""
    dirty, wall, agents = _cleaner_channels(obs)

    def one(location):
        own = jnp.zeros(obs.grid.shape, jnp.float32).at[location[0], location[1]].set(1.0)
        return jnp.stack([dirty, wall, own, agents], axis=-1).reshape(-1)

    return jax.vmap(one)(obs.agents_locations)


def _cleaner_world(obs) -> jax.Array:
    """Cleaner: Jumanji's critic input, [R * C * 3]: dirty tiles, walls, agents per tile."""
    return jnp.stack(_cleaner_channels(obs), axis=-1).reshape(-1)


#: The multi-agent envs offered: {id: (per-agent view [A, D], global state [S] or None)}.
VIEWS: dict[str, tuple[Callable, Callable | None]] = {
    "LevelBasedForaging-v0": (_agents_view, None),
    "RobotWarehouse-v0": (_agents_view, None),
    "Connector-v3": (_connector_view, None),
    "Cleaner-v0": (_cleaner_view, _cleaner_world),
}


@struct.dataclass
class JumanjiTeamState:
    suite: Any  # the suite's own state (it holds the suite's key)
    time: jax.Array  # int32 []: steps taken in this episode
    action_mask: jax.Array  # bool [A, n]: the suite's mask after the last step
    truncated: jax.Array  # bool []: the episode ended on the last step at the time limit


class JumanjiTeam:
    """One of Jumanji's multi-agent envs on JaxMARL's contract; see the module docstring.

    Args:
      name: the Jumanji id.
      suite: the suite's env, built with its time limit off.
      time_limit: the suite's own time limit, here `max_steps`.
    """

    def __init__(self, name: str, suite, time_limit: int):
        self.env_name, self.suite, self.max_steps = name, suite, int(time_limit)
        self._view, self._world = VIEWS[name]
        with suite_code():
            values = np.asarray(suite.action_spec.num_values).reshape(-1)
            obs_spec = suite.observation_spec
        if len(set(values.tolist())) != 1:  # Jumanji's four give every agent the same actions
            raise ValueError(f"jumanji:{name}: its agents have different numbers of actions "
                             f"({values.tolist()}); one policy acts for every agent.")
        self.num_agents = int(values.size)
        self.num_actions = int(values[0])
        mask_shape = tuple(obs_spec.action_mask.shape)
        if mask_shape != (self.num_agents, self.num_actions):
            raise ValueError(f"jumanji:{name}: action mask of shape {mask_shape}, expected one row per "
                             f"agent {(self.num_agents, self.num_actions)}.")
        self.agents = [f"agent_{i}" for i in range(self.num_agents)]
        obs = jax.eval_shape(lambda k: self._observe(self.suite.reset(k)[1].observation), jax.random.key(0))
        self._obs_size = int(obs[self.agents[0]].shape[0])

    def __repr__(self) -> str:
        return f"JumanjiTeam({self.env_name!r}, agents={self.num_agents}, max_steps={self.max_steps})"

    def observation_space(self, agent: str) -> spaces.Box:
        return spaces.Box(-jnp.inf, jnp.inf, (self._obs_size,), jnp.float32)

    def action_space(self, agent: str) -> spaces.Discrete:
        return spaces.Discrete(self.num_actions)

    def _observe(self, obs) -> dict[str, jax.Array]:
        with suite_code():
            views = self._view(obs)
            out = {a: views[i] for i, a in enumerate(self.agents)}
            if self._world is not None:
                out[WORLD_STATE] = self._world(obs)
        return out

    def reset(self, key: jax.Array):
        with suite_code():
            suite_state, timestep = self.suite.reset(key)
        mask = jnp.asarray(timestep.observation.action_mask, bool)
        state = JumanjiTeamState(suite=suite_state, time=jnp.int32(0), action_mask=mask,
                                 truncated=jnp.bool_(False))
        return self._observe(timestep.observation), state

    def step_env(self, key: jax.Array, state: JumanjiTeamState, actions: dict):
        action = jnp.stack([jnp.asarray(actions[a]).reshape(()) for a in self.agents]).astype(jnp.int32)
        with suite_code():
            suite_state, timestep = self.suite.step(state.suite, action)
        time = state.time + 1
        ended = timestep.step_type == StepType.LAST  # the suite's limit is off: a true end
        time_up = time >= self.max_steps
        done = ended | time_up
        reward = jnp.broadcast_to(jnp.asarray(timestep.reward, jnp.float32), (self.num_agents,))
        # An agent is done when its discount is 0 (Connector's connected or blocked agents), or with the team.
        discount = jnp.broadcast_to(jnp.asarray(timestep.discount, jnp.float32), (self.num_agents,))
        agent_done = (discount == 0) | done
        rewards = {a: reward[i] for i, a in enumerate(self.agents)}
        dones = {a: agent_done[i] for i, a in enumerate(self.agents)}
        dones["__all__"] = done
        new = JumanjiTeamState(suite=suite_state, time=time,
                               action_mask=jnp.asarray(timestep.observation.action_mask, bool),
                               truncated=time_up & ~ended)
        return self._observe(timestep.observation), new, rewards, dones, {}

    def is_truncated(self, state: JumanjiTeamState) -> jax.Array:
        """Whether the episode that ended on the last step ended at the time limit (`max_steps`)."""
        return state.truncated

    def get_avail_actions(self, state: JumanjiTeamState) -> dict[str, jax.Array]:
        return {a: state.action_mask[i] for i, a in enumerate(self.agents)}


def make_env(name: str) -> JumanjiTeam:
    """The Jumanji multi-agent env `name` (one of `VIEWS`), built with its time limit off."""
    # Constant arrays the suite builds (RobotWarehouse's goals and highways) stay concrete when the
    # env is built while a program is traced (config.hparams() makes the env).
    with suite_code(), jax.ensure_compile_time_eval():
        limit = int(jumanji.make(name).time_limit)
        return JumanjiTeam(name, jumanji.make(name, time_limit=_SUITE_LIMIT_OFF), limit)


__all__ = ["VIEWS", "JumanjiTeam", "JumanjiTeamState", "make_env"]
