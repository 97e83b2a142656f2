"""Navix's MiniGrid worlds on our contract: `fusedrl.make("navix:Navix-Empty-5x5-v0")`.

Navix (`pip install -e ".[navix]"`) steps a `Timestep` with `env.step(timestep, action)`, which
resets *on the next call* after an episode ends and ignores that call's action. The adapter never
calls it: it steps navix's own transition (`Environment._step`, the non-resetting half of `step`)
and leaves resets to `VecEnv`, which draws a fresh state from `reset_env` on the step that ends the
episode. So every action reaches the env, and the time limit is ours:

- observation: navix's default for the id (the symbolic, fully observable grid, `uint8 [H, W, 3]`
  of MiniGrid's (object, colour, state) triples), kept as uint8; declared `Box(0, 255)`, since
  navix's own space says at most 8 where the player's tag is 10;
- action: `Discrete(7)`, MiniGrid's actions;
- reward: navix's (`rewards.on_goal_reached` and friends, 1 on the goal);
- terminated: navix's step type TERMINATION (2); navix's TRUNCATION (1) is ignored, since the time
  limit is `EnvParams.max_steps_in_episode` (default navix.make's `max_steps`), reported by
  `is_truncated` from the adapter's step counter, so truncated episodes bootstrap.

Navix's state carries a rendering cache of RGB tiles (about 80 kB per 5x5 env) that only its RGB
observations read; the adapter keeps the symbolic observation and drops the cache from the state.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import navix
from flax import struct
from navix.environments.environment import StepType
from navix.rendering.cache import RenderingCache

from fusedrl.envs._gymnax import environment, spaces
from fusedrl.envs.base import Environment
from fusedrl.envs.suites import suite_code

#: A one-pixel stand-in for navix's rendering cache, read only by its RGB observations.
_NO_CACHE = RenderingCache(patches=jnp.zeros((1, 1, 1, 3), jnp.uint8))


@struct.dataclass
class EnvState(environment.EnvState):
    timestep: Any  # navix Timestep after the last step (its state, observation, t)
    time: int  # [] int32 steps since the episode began


@struct.dataclass
class EnvParams(environment.EnvParams):
    max_steps_in_episode: int = 100


class NavixEnv(Environment):
    """One navix env id, stepped without navix's auto-reset (see the module docstring)."""

    # Navix's randomness (moving obstacles) comes from the key in its state, not step_env's key.
    deterministic_step = True
    # A reset lays out a level (walls, doors, keys, the player at random places for most ids).
    expensive_reset = True

    def __init__(self, name: str):
        super().__init__()
        self.env_name = name
        self._env = navix.make(name)
        with jax.ensure_compile_time_eval():  # navix computes `n` with jnp (a tracer inside a trace)
            self._num_actions = int(self._env.action_space.n)
        if self._env.observation_fn not in (navix.observations.symbolic,
                                            navix.observations.symbolic_first_person):
            raise ValueError(f"navix:{name}: the adapter takes navix's symbolic (uint8) observations; "
                             f"this id's is {self._env.observation_fn.__name__}.")

    @property
    def name(self) -> str:
        return f"navix:{self.env_name}"

    @property
    def default_params(self) -> EnvParams:
        return EnvParams(max_steps_in_episode=int(self._env.max_steps))

    @property
    def num_actions(self) -> int:
        return self._num_actions

    def reset_env(self, key: jax.Array, params: EnvParams) -> tuple[jax.Array, EnvState]:
        with suite_code():
            timestep = self._env.reset(key, _NO_CACHE)
        return timestep.observation, EnvState(timestep=timestep, time=jnp.zeros((), jnp.int32))

    def step_env(self, key: jax.Array, state: EnvState, action: jax.Array, params: EnvParams):
        # Navix's transition without its reset; its own time limit follows ours (its penalty term,
        # zero for navix's registered envs, is scaled by it).
        env = self._env.replace(max_steps=params.max_steps_in_episode)
        with suite_code():
            timestep = env._step(state.timestep, jnp.asarray(action, jnp.int32))
        terminated = timestep.step_type == StepType.TERMINATION
        state = EnvState(timestep=timestep, time=state.time + 1)
        return timestep.observation, state, timestep.reward.astype(jnp.float32), terminated, {}

    def get_obs(self, state: EnvState, params=None, key=None) -> jax.Array:
        return state.timestep.observation

    def is_terminal(self, state: EnvState, params: EnvParams) -> jax.Array:
        return (state.timestep.step_type == StepType.TERMINATION) | self.is_truncated(state, params)

    def action_space(self, params=None) -> spaces.Discrete:
        return spaces.Discrete(self.num_actions)

    def observation_space(self, params=None) -> spaces.Box:
        space = self._env.observation_space
        return spaces.Box(0, 255, tuple(space.shape), jnp.uint8)


def env_names() -> list[str]:
    """Navix's registered ids (all build offline)."""
    return sorted(navix.registry())


def make_env(name: str) -> NavixEnv:
    return NavixEnv(name)


def native_stepper(name: str, num_envs: int):
    """Navix's own vmapped stepping with its own auto-reset, as a navix user writes it.

    `init(key) -> carry` resets `num_envs` envs (`jax.vmap(env.reset)`); `step(carry, action) ->
    (carry, reward)` is `jax.vmap(env.step)`: an env whose episode ended on the previous call is
    reset and ignores its action. `action`: int32 `[num_envs]`; `reward`: float32 `[num_envs]`. Pure
    JAX, jittable.
    """
    env = navix.make(name)

    def init(key: jax.Array):
        with suite_code():
            return jax.vmap(env.reset)(jax.random.split(key, num_envs))

    def step(carry, action: jax.Array):
        with suite_code():
            timestep = jax.vmap(env.step)(carry, action)
        return timestep, timestep.reward.astype(jnp.float32)

    return init, step
