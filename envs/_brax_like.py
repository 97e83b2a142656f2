"""The shared adapter of suites whose envs have Brax's API (Brax, MuJoCo Playground).

Such an env is a static object with `reset(rng) -> State` and `step(state, action) -> State`
(no key: the physics is deterministic), where `State` carries `obs`, `reward` and `done` (floats)
beside the physics state, `metrics` and `info`. `BraxLikeEnv` puts one RAW env (none of the suite's
episode or auto-reset wrappers) on our contract:

- `reset_env(key)` calls the suite's `reset(key)`: a fresh initial state per key (Brax's own
  `AutoResetWrapper` would instead restart every episode from the first state it cached).
- `terminated` is the suite's `done`: in a raw env that is a terminal state only (a fall, NaN
  physics); the suite's time limit lives in its episode wrapper, which we do not use.
- the time limit is ours: the state counts steps in `time`, `is_truncated` compares it with
  `params.max_steps_in_episode` (the suite's own episode length by default), so time-limited
  episodes bootstrap.

This module imports no suite; `fusedrl.envs._brax` and `fusedrl.envs._playground` build on it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from fusedrl.envs._gymnax import spaces
from fusedrl.envs.base import Environment, EnvParams, EnvState
from fusedrl.envs.suites import suite_code


@struct.dataclass
class BraxLikeParams(EnvParams):
    max_steps_in_episode: int = 1000  # the time limit, in (agent) steps


@struct.dataclass
class BraxLikeState(EnvState):
    time: int  # [] int32, steps taken in this episode
    inner: Any  # the suite's own State (physics state, obs, reward, done, metrics, info), one env


def _same_types(new, old):
    """`new` with each leaf cast to the dtype of `old`'s: Brax envs return some fields as Python
    floats (`reward=1.0`) or weakly typed arrays after `step`, which a scan carry refuses."""
    if jax.tree.structure(new) != jax.tree.structure(old):
        raise TypeError(
            "the suite's step returned a State of another structure than its reset (an info or metrics "
            f"entry added or dropped): {jax.tree.structure(new)} vs {jax.tree.structure(old)}."
        )
    return jax.tree.map(lambda n, o: jnp.asarray(n, jnp.result_type(o)), new, old)


class BraxLikeEnv(Environment):
    """One raw env of a Brax-API suite on fusedrl's contract.

    Observation: the suite's `obs` (a float32 array [obs_size], or a dict of arrays for envs with
    structured observations). Action: float32 [action_size] in [-1, 1] (the suite scales it to its
    actuators). Reward: the suite's, float32. terminated: the suite's `done` > 0.5; truncated:
    `time >= max_steps_in_episode`. `info` is empty.
    """

    deterministic_step = True  # the suite's step takes no key

    def __init__(self, suite_env: Any, name: str, max_steps_in_episode: int):
        super().__init__()
        self.suite_env = suite_env
        self._name = name
        self._max_steps = int(max_steps_in_episode)

    @property
    def name(self) -> str:
        return self._name

    @property
    def default_params(self) -> BraxLikeParams:
        return BraxLikeParams(max_steps_in_episode=self._max_steps)

    @functools.cached_property
    def _reset_shape(self) -> Any:
        # Abstract evaluation: the suite's `observation_size` runs a real (eager, slow) reset.
        with suite_code():
            return jax.eval_shape(self.suite_env.reset, jax.ShapeDtypeStruct((), jax.random.key(0).dtype))

    def reset_env(self, key: jax.Array, params: BraxLikeParams) -> tuple[Any, BraxLikeState]:
        with suite_code():
            inner = self.suite_env.reset(key)
        inner = jax.tree.map(jnp.asarray, inner)
        inner = inner.replace(reward=jnp.asarray(inner.reward, jnp.float32),
                              done=jnp.asarray(inner.done, jnp.float32))
        return inner.obs, BraxLikeState(time=jnp.zeros((), jnp.int32), inner=inner)

    def step_env(self, key, state: BraxLikeState, action, params: BraxLikeParams):
        with suite_code():
            inner = _same_types(self.suite_env.step(state.inner, action), state.inner)
        new = BraxLikeState(time=state.time + 1, inner=inner)
        terminated = inner.done > 0.5
        return inner.obs, new, inner.reward, terminated, {}

    def is_terminal(self, state: BraxLikeState, params: BraxLikeParams) -> jax.Array:
        return (state.inner.done > 0.5) | self.is_truncated(state, params)

    def get_obs(self, state: BraxLikeState, params=None, key=None) -> Any:
        return state.inner.obs

    def observation_space(self, params: BraxLikeParams | None = None):
        obs = self._reset_shape.obs

        def box(leaf):
            return spaces.Box(-jnp.inf, jnp.inf, tuple(leaf.shape), leaf.dtype)

        if isinstance(obs, dict):
            return spaces.Dict({k: box(v) for k, v in obs.items()})
        return box(obs)

    def action_space(self, params: BraxLikeParams | None = None) -> spaces.Box:
        return spaces.Box(-1.0, 1.0, (int(self.suite_env.action_size),), jnp.float32)


def native_stepper_of(wrapped: Any, num_envs: int) -> tuple[Callable, Callable]:
    """`(init, step)` over a suite env already wrapped by the suite's own training wrappers
    (vmap, episode limit, auto-reset): `init(key)` resets `num_envs` envs, `step(state, action)`
    steps them all and returns `(state, reward [num_envs])`."""

    def init(key: jax.Array) -> Any:
        keys = jax.random.split(key, num_envs)
        if jax.dtypes.issubdtype(keys.dtype, jax.dtypes.prng_key):
            # Brax's EpisodeWrapper takes the batch shape as keys.shape[:-1]: raw uint32 keys [N, 2].
            keys = jax.random.key_data(keys)
        with suite_code():
            return wrapped.reset(keys)

    def step(state: Any, action: jax.Array) -> tuple[Any, jax.Array]:
        with suite_code():
            state = wrapped.step(state, action)
        return state, state.reward

    return init, step
