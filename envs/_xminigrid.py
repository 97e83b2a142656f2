"""XLand-MiniGrid's MiniGrid ports on our contract: `fusedrl.make("xminigrid:MiniGrid-Empty-5x5")`.

XLand-MiniGrid (`pip install -e ".[xminigrid]"`) has `env.step(params, timestep, action)`, which
does not reset (its auto-resets are opt-in wrappers, `GymAutoResetWrapper` and
`DmEnvAutoResetWrapper`). The adapter steps the bare env and leaves resets to `VecEnv`:

- observation: the agent's egocentric view, `uint8 [view, view, 2]` of (tile, colour) ids (7x7 for
  most ids, 3x3 for the Memory ids), kept as uint8;
- action: `Discrete(6)` (forward, turn right, turn left, pick up, put down, toggle);
- reward: the suite's (`1 - 0.9 * steps / max_steps` on success), computed by the suite with the
  time limit of our params;
- terminated: the suite's discount 0 (a goal reached, or Memory's wrong choice); the time limit
  (the suite ends it with step type LAST and discount 1) is `EnvParams.max_steps_in_episode`
  (default the suite's `max_steps` for the id), reported by `is_truncated`, so truncated episodes
  bootstrap.

XLand-MiniGrid's own environment params are static (shapes and layouts depend on them), so the
adapter holds them; its params are only the (traced) time limit. The `XLand-MiniGrid-R*` ids are
not offered: without a ruleset from a benchmark (`xminigrid.load_benchmark`, a download) they are
empty rooms with a goal that never completes, and a ruleset per episode is not on our contract.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import xminigrid
from flax import struct
from xminigrid.wrappers import GymAutoResetWrapper

from fusedrl.envs._gymnax import environment, spaces
from fusedrl.envs.base import Environment
from fusedrl.envs.suites import suite_code

#: Ids that need a benchmark download (a ruleset) to mean anything; see the module docstring.
NEEDS_BENCHMARK_PREFIX = "XLand-MiniGrid-"


@struct.dataclass
class EnvState(environment.EnvState):
    timestep: Any  # xminigrid TimeStep after the last step (its state and observation)
    time: int  # [] int32 steps since the episode began


@struct.dataclass
class EnvParams(environment.EnvParams):
    max_steps_in_episode: int = 100


class XMiniGridEnv(Environment):
    """One XLand-MiniGrid env id, stepped without an auto-reset (see the module docstring)."""

    # Every reset lays out a level (rooms, doors, objects, the agent at random places).
    expensive_reset = True
    # The suite draws its randomness from the key in its state (at reset); its step ignores keys.
    deterministic_step = True

    def __init__(self, name: str):
        super().__init__()
        if name.startswith(NEEDS_BENCHMARK_PREFIX):
            raise ValueError(f"xminigrid:{name}: {_needs_benchmark(name)}")
        self.env_name = name
        self._env, self._params = xminigrid.make(name)

    @property
    def name(self) -> str:
        return f"xminigrid:{self.env_name}"

    @property
    def default_params(self) -> EnvParams:
        return EnvParams(max_steps_in_episode=int(self._params.max_steps))

    @property
    def num_actions(self) -> int:
        return int(self._env.num_actions(self._params))

    def reset_env(self, key: jax.Array, params: EnvParams) -> tuple[jax.Array, EnvState]:
        with suite_code():
            timestep = self._env.reset(self._params, key)
        return timestep.observation, EnvState(timestep=timestep, time=jnp.zeros((), jnp.int32))

    def step_env(self, key: jax.Array, state: EnvState, action: jax.Array, params: EnvParams):
        # The suite's step reads `max_steps` for its time-penalised reward and its own truncation
        # flag (not used here): it gets our time limit, traced.
        suite_params = self._params.replace(max_steps=params.max_steps_in_episode)
        with suite_code():
            timestep = self._env.step(suite_params, state.timestep, jnp.asarray(action, jnp.int32))
        terminated = timestep.discount == 0.0
        timestep = timestep.replace(step_type=timestep.step_type.astype(jnp.uint8),
                                    reward=timestep.reward.astype(jnp.float32),
                                    discount=timestep.discount.astype(jnp.float32))
        state = EnvState(timestep=timestep, time=state.time + 1)
        return timestep.observation, state, timestep.reward, terminated, {}

    def get_obs(self, state: EnvState, params=None, key=None) -> jax.Array:
        return state.timestep.observation

    def is_terminal(self, state: EnvState, params: EnvParams) -> jax.Array:
        return (state.timestep.discount == 0.0) | self.is_truncated(state, params)

    def action_space(self, params=None) -> spaces.Discrete:
        return spaces.Discrete(self.num_actions)

    def observation_space(self, params=None) -> spaces.Box:
        return spaces.Box(0, 255, tuple(self._env.observation_shape(self._params)), jnp.uint8)


def unavailable(name: str) -> str | None:
    """Why the suite's id `name` is not offered (None when it is, or is not the suite's)."""
    if name.startswith(NEEDS_BENCHMARK_PREFIX) and name in xminigrid.registered_environments():
        return _needs_benchmark(name)
    return None


def _needs_benchmark(name: str) -> str:
    return ("needs a ruleset from an XLand-MiniGrid benchmark, a download "
            f"(xminigrid.load_benchmark): the adapter offers the offline MiniGrid-* ids only "
            f"({', '.join(env_names()[:4])}, ...; fusedrl envs lists them).")


def env_names() -> list[str]:
    """The suite's MiniGrid-* ids (built offline); XLand-MiniGrid-R* need a benchmark download."""
    return sorted(n for n in xminigrid.registered_environments() if not n.startswith(NEEDS_BENCHMARK_PREFIX))


def make_env(name: str) -> XMiniGridEnv:
    return XMiniGridEnv(name)


def native_stepper(name: str, num_envs: int):
    """XLand-MiniGrid's own vmapped stepping with its own auto-reset, as its README writes it.

    `init(key) -> carry` resets `num_envs` envs of `GymAutoResetWrapper(env)`; `step(carry, action)
    -> (carry, reward)` is `jax.vmap(env.step)` of that wrapper, which resets an env on the step its
    episode ends. `action`: int32 `[num_envs]`; `reward`: float32 `[num_envs]`. Pure JAX, jittable.
    """
    env, params = xminigrid.make(name)
    env = GymAutoResetWrapper(env)

    def init(key: jax.Array):
        with suite_code():
            return jax.vmap(env.reset, in_axes=(None, 0))(params, jax.random.split(key, num_envs))

    def step(carry, action: jax.Array):
        with suite_code():
            timestep = jax.vmap(env.step, in_axes=(None, 0, 0))(params, carry, action)
        return timestep, timestep.reward.astype(jnp.float32)

    return init, step
