"""VecEnv with env states that other JAX suites define, warnings that name the user's line, and the
rollout's choice of predrawn resets by their cost."""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct

import fusedrl
from fusedrl.envs import Discrete, Environment, EnvParams, EnvState, VecEnv
from fusedrl.envs import wrappers as W


# A state whose class's own __eq__ cannot be used on pytrees of shapes ----------------------------
@struct.dataclass
class ElementwiseEqState(EnvState):
    """As navix's `Event`: `==` returns an array, which has no truth value."""

    pos: jax.Array  # [2] float32
    time: jax.Array  # [] int32

    def __eq__(self, other):
        return jnp.asarray(self.pos) == jnp.asarray(other.pos)


@struct.dataclass
class WalkParams(EnvParams):
    max_steps_in_episode: int = 3


class Walk(Environment):
    """Observation float32 [2]: the position. Action Discrete(2): move along x by -1/+1. Reward 0;
    episodes end by the time limit."""

    deterministic_step = True

    @property
    def default_params(self):
        return WalkParams()

    def _state(self, pos, time):
        return ElementwiseEqState(pos=pos, time=time)

    def reset_env(self, key, params):
        state = self._state(jax.random.uniform(key, (2,)), jnp.int32(0))
        return state.pos, state

    def step_env(self, key, state, action, params):
        pos = state.pos + jnp.stack([2.0 * action - 1.0, 0.0])
        state = self._state(pos, state.time + 1)
        return state.pos, state, jnp.float32(0.0), jnp.zeros((), bool), {}

    def get_obs(self, state, params=None, key=None):
        return state.pos

    def action_space(self, params=None):
        return Discrete(2)


@pytest.mark.timeout(60)
def test_predrawn_step_of_a_state_whose_eq_is_not_a_bool():
    # The draws check compared pytrees of shapes with !=, which called the state class's __eq__:
    # "truth value of an array ... is ambiguous".
    env, n = Walk(), 4
    vec = VecEnv(env, n)
    params = env.default_params

    def run(key):
        k_reset, k_draw = jax.random.split(key)
        _, vstate = vec.reset(k_reset, params)
        vstate = vstate.replace(env_state=vstate.env_state.replace(time=jnp.array([0, 1, 2, 2], jnp.int32)))
        draws = vec.predraw(k_draw, params, 2)
        obs, _, _, _, truncated, _ = vec.step(vstate, jnp.ones(n, jnp.int32), params, draws[0])
        return obs, truncated, draws.reset_obs[0]

    obs, truncated, fresh = jax.jit(run)(jax.random.key(0))
    np.testing.assert_array_equal(truncated, [False, False, True, True])
    np.testing.assert_array_equal(obs[2:], fresh[2:])  # the finished envs restart from their draws
    with pytest.raises(ValueError, match=r"ONE step's slice of predraw"):  # the check still works
        jax.eval_shape(lambda k: vec.step(vec.reset(k, params)[1], jnp.ones(n, jnp.int32), params,
                                          vec.predraw(k, params, 2)), jax.random.key(0))
