"""A float `terminated` (or `truncated`) from a custom env is refused at trace time: it was cast to
bool, so any nonzero value (0.3, a distance) ended the episode without a word."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fusedrl
from fusedrl.envs import VecEnv


class FloatTerminated(fusedrl.envs.CartPole):
    def step_env(self, key, state, action, params):
        obs, state, reward, terminated, info = super().step_env(key, state, action, params)
        return obs, state, reward, jnp.abs(state.x), info  # a distance, not a flag


class FloatTruncated(fusedrl.envs.CartPole):
    def is_truncated(self, state, params):
        return (state.time / params.max_steps_in_episode).astype(jnp.float32)


def _step(env):
    vec = VecEnv(env, 2)
    _, params = fusedrl.make("CartPole-v1")
    state = jax.eval_shape(vec.reset, jax.random.key(0), params)[1]
    return jax.eval_shape(lambda s: vec.step(s, np.zeros(2, np.int32), params), state)


@pytest.mark.parametrize("env, method, field", [(FloatTerminated(), "step_env", "terminated"),
                                                (FloatTruncated(), "is_truncated", "truncated")])
def test_a_float_flag_names_the_method_and_the_fix(env, method, field):
    expected = f"{type(env).__name__}.{method} returned {field} of dtype float32; it is a flag"
    with pytest.raises(TypeError, match=re.escape(expected) + ".*Return a bool"):
        _step(env)


def test_bool_and_integer_flags_are_accepted():
    class IntTerminated(fusedrl.envs.CartPole):
        def step_env(self, key, state, action, params):
            obs, state, reward, terminated, info = super().step_env(key, state, action, params)
            return obs, state, reward, terminated.astype(jnp.int32), info

    _step(fusedrl.envs.CartPole())
    _step(IntTerminated())
