"""The Craftax adapter: `fusedrl.make("craftax:Craftax-Classic-Symbolic-v1")` and the other Craftax ids.

Craftax (`pip install craftax`) ships each env twice, with and without its own auto-reset; the
adapter wraps the one WITHOUT it (`make_craftax_env_from_name(name, auto_reset=False)`), since our
`VecEnv` resets finished envs itself:

- `reset_env(key)` is Craftax's `reset_env`: it generates a fresh world from the key (hence
  `expensive_reset = True`).
- Craftax merges its time limit into `done` (`is_game_over`: `timestep >= max_timesteps`, death,
  lava, beating the final boss). The adapter steps Craftax with the time limit lifted, so Craftax's
  `done` is a terminal state only (`terminated`), and keeps its own step counter `time`:
  `is_truncated` is `time >= min(max_steps_in_episode, max_timesteps)`, so time-limited episodes
  bootstrap. Both limits default to Craftax's own episode length (10,000 steps in Classic, 100,000
  in Craftax); either one shortens the episode.
- observations are Craftax's, unchanged: symbolic ones a float32 vector in [0, 1], pixel ones a
  float32 image [H, W, 3] in [0, 1] (Craftax divides its uint8 rendering by 255).
- `info` is Craftax's end-of-episode info as Craftax computes it, on the steps where an episode ends
  by either flag, zero elsewhere: each achievement's `Achievements/<name>` as 0 or 100, and in
  Classic the geometric-mean `score` (its `compute_score`).

The params are Craftax's own `EnvParams` (`day_length`, `always_diamond`, ...) with one field more,
`max_steps_in_episode`; any of them can be overridden (`fusedrl.make(id, day_length=200)`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import io
import os
import pickle
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from craftax.craftax_env import make_craftax_env_from_name
from flax import struct

from fusedrl.envs._gymnax import spaces
from fusedrl.envs.base import Environment, EnvState

#: The ids `craftax.craftax_env.make_craftax_env_from_name` builds (all offline: Craftax's textures
#: ship with the package).
_NAMES = ("Craftax-Symbolic-v1", "Craftax-Pixels-v1",
          "Craftax-Classic-Symbolic-v1", "Craftax-Classic-Pixels-v1")

#: Craftax's time limit while the adapter steps it: never reached, so its `done` is a terminal state.
_NO_LIMIT = 2**31 - 1


def env_names() -> list[str]:
    return list(_NAMES)


@struct.dataclass
class CraftaxState(EnvState):
    time: int  # [] int32, steps taken in this episode
    inner: Any  # Craftax's EnvState of one env (map, mobs, inventory, achievements, ...)


@functools.cache
def _params_class(craftax_params: type) -> type:
    """Craftax's `EnvParams` class (Classic's or Craftax's) with `max_steps_in_episode` added."""
    default = craftax_params().max_timesteps

    @struct.dataclass
    class CraftaxParams(craftax_params):
        max_steps_in_episode: int = default  # our time limit, in steps (also capped by max_timesteps)

    family = "Classic" if craftax_params.__module__.startswith("craftax.craftax_classic.") else ""
    CraftaxParams.__name__ = CraftaxParams.__qualname__ = f"Craftax{family}Params"
    return CraftaxParams


@contextlib.contextmanager
def _quiet():
    """Craftax prints while it loads its textures (and caches them): kept off our stdout."""
    with contextlib.redirect_stdout(io.StringIO()):
        yield


def _suite(name: str, auto_reset: bool) -> Any:
    """Craftax's env `name`. Pixel envs load Craftax's texture cache (a file in Craftax's package,
    written on first use); a cache left half-written, by a process stopped while Craftax saved it,
    fails to load, and is then rebuilt (Craftax's `CRAFTAX_RELOAD_TEXTURES`; about a minute)."""
    with _quiet():
        try:
            return make_craftax_env_from_name(name, auto_reset=auto_reset)
        except (OSError, EOFError, pickle.UnpicklingError):
            if os.environ.get("CRAFTAX_RELOAD_TEXTURES"):
                raise
        os.environ["CRAFTAX_RELOAD_TEXTURES"] = "1"
        try:
            return make_craftax_env_from_name(name, auto_reset=auto_reset)
        finally:
            del os.environ["CRAFTAX_RELOAD_TEXTURES"]


def _score_info(suite_env: Any) -> Callable:
    """Craftax's end-of-episode info `f(state, done) -> dict` of the env's family: Classic's
    `compute_score` (achievements and the score), Craftax's `log_achievements_to_info`."""
    if type(suite_env).__module__.startswith("craftax.craftax_classic."):
        from craftax.craftax_classic.envs.common import compute_score
        return compute_score
    from craftax.craftax.envs.common import log_achievements_to_info
    return log_achievements_to_info


class CraftaxEnv(Environment):
    """One Craftax env without Craftax's auto-reset, on fusedrl's contract.

    Observation: Craftax's (symbolic: float32 [8268] in Craftax, [1345] in Classic; pixels: float32
    [130, 110, 3] in Craftax, [63, 63, 3] in Classic, all in [0, 1]). Action: int32 in
    `Discrete(43)` (Classic: 17). Reward: Craftax's (achievements unlocked plus the health change
    / 10), float32. terminated: death, lava (Classic) or the final boss beaten (Craftax); truncated:
    `time >= min(max_steps_in_episode, max_timesteps)`.
    """

    expensive_reset = True  # a reset generates a world

    def __init__(self, name: str):
        super().__init__()
        if name not in _NAMES:
            raise ValueError(f"Unknown Craftax env {name!r}; Craftax's ids: {', '.join(_NAMES)}.")
        self._name = name
        self.suite_env = _suite(name, auto_reset=False)
        self._params_class = _params_class(type(self.suite_env.default_params))
        self._score = _score_info(self.suite_env)

    @property
    def name(self) -> str:
        return self._name

    @property
    def default_params(self):
        return self._params_class()

    def _suite_params(self, params) -> Any:
        """Craftax's own params class with the same values, its time limit lifted."""
        base = type(self.suite_env.default_params)
        values = {f.name: getattr(params, f.name) for f in dataclasses.fields(base)}
        return base(**{**values, "max_timesteps": _NO_LIMIT})

    def reset_env(self, key: jax.Array, params) -> tuple[jax.Array, CraftaxState]:
        obs, inner = self.suite_env.reset_env(key, self._suite_params(params))
        return obs, CraftaxState(time=jnp.zeros((), jnp.int32), inner=inner)

    def step_env(self, key: jax.Array, state: CraftaxState, action: jax.Array, params):
        obs, inner, reward, terminated, _ = self.suite_env.step_env(
            key, state.inner, action, self._suite_params(params))
        new = CraftaxState(time=state.time + 1, inner=inner)
        terminated = jnp.asarray(terminated, bool)
        info = self._score(inner, terminated | self.is_truncated(new, params))
        return obs, new, jnp.asarray(reward, jnp.float32), terminated, info

    def is_truncated(self, state: CraftaxState, params) -> jax.Array:
        return state.time >= jnp.minimum(params.max_steps_in_episode, params.max_timesteps)

    def is_terminal(self, state: CraftaxState, params) -> jax.Array:
        done = self.suite_env.is_terminal(state.inner, self._suite_params(params))
        return jnp.asarray(done, bool) | self.is_truncated(state, params)

    def get_obs(self, state: CraftaxState, params=None, key=None) -> jax.Array:
        return self.suite_env.get_obs(state.inner)

    def observation_space(self, params=None) -> spaces.Box:
        space = self.suite_env.observation_space(self.suite_env.default_params)
        return spaces.Box(0.0, 1.0, tuple(space.shape), space.dtype)

    def action_space(self, params=None) -> spaces.Discrete:
        return spaces.Discrete(int(self.suite_env.num_actions))


def make_env(name: str) -> CraftaxEnv:
    return CraftaxEnv(name)


def native_stepper(name: str, num_envs: int) -> tuple[Callable, Callable]:
    """Craftax stepped as its own users write it, for `python -m fusedrl.bench envs`.

    The env is Craftax's auto-resetting one (`make_craftax_env_from_name(name, auto_reset=True)`),
    whose `step` draws a fresh world for every env at every step and keeps it where the episode
    ended (by death, victory or Craftax's own time limit), `jax.vmap`ped over `num_envs` envs
    with a key per env, as in Craftax's baselines without their optimistic-reset wrapper.

    Returns:
      `init(key) -> carry`, and `step(carry, action [num_envs] int32) -> (carry, reward [num_envs])`.
    """
    env = _suite(name, auto_reset=True)
    params = env.default_params

    def init(key: jax.Array) -> Any:
        key, reset_key = jax.random.split(key)
        _, state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(reset_key, num_envs), params)
        return key, state

    def step(carry: Any, action: jax.Array) -> tuple[Any, jax.Array]:
        key, state = carry
        key, step_key = jax.random.split(key)
        _, state, reward, _, _ = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
            jax.random.split(step_key, num_envs), state, action, params)
        return (key, state), reward

    return init, step
