"""What a custom env's reset_env and step_env return as state is checked at trace time, with errors
naming the method and the fix: a reset_env that does not return (obs, state) ("too many values to
unpack" before), a state without the `time` the default is_truncated reads (an AttributeError
inside gymnax before), and a step_env state whose fields change shape or dtype (an error about the
rollout scan's carry before)."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct

import fusedrl
from fusedrl.envs import VecEnv


@struct.dataclass
class NoTimeState:
    x: jax.Array


class ResetWithInfo(fusedrl.envs.CartPole):
    def reset_env(self, key, params):
        obs, state = super().reset_env(key, params)
        return obs, state, {}


class NoTime(fusedrl.envs.CartPole):
    def reset_env(self, key, params):
        return jnp.zeros(4), NoTimeState(jnp.float32(0))

    def step_env(self, key, state, action, params):
        return jnp.zeros(4), NoTimeState(state.x + 1), 1.0, False, {}


class FloatTime(fusedrl.envs.CartPole):
    def step_env(self, key, state, action, params):
        obs, state, reward, terminated, info = super().step_env(key, state, action, params)
        return obs, state.replace(time=state.time.astype(jnp.float32)), reward, terminated, info


def _reset(env):
    _, params = fusedrl.make("CartPole-v1")
    return jax.eval_shape(VecEnv(env, 2).reset, jax.random.key(0), params)


def _step(env, state_env=None):
    _, params = fusedrl.make("CartPole-v1")
    vec = VecEnv(env, 2)
    state = jax.eval_shape(VecEnv(state_env or env, 2).reset, jax.random.key(0), params)[1]
    return jax.eval_shape(lambda s: vec.step(s, np.zeros(2, np.int32), params), state)


def test_reset_env_returning_three_values_names_the_method():
    with pytest.raises(ValueError, match=re.escape("ResetWithInfo.reset_env returned a 3-tuple, expected "
                                                   "gymnax's 2-tuple (obs, state)")):
        _reset(ResetWithInfo())


def test_a_state_without_time_names_the_method_and_the_fix():
    with pytest.raises(TypeError, match=re.escape("NoTime.reset_env returned a state (NoTimeState) without "
                                                  "a time field") + ".*Subclass fusedrl.envs.EnvState"):
        _reset(NoTime())

    class OwnTimeLimit(NoTime):
        def is_truncated(self, state, params):
            return state.x >= 10

    _step(OwnTimeLimit())  # an env with its own truncation rule needs no time


def test_a_state_field_that_changes_dtype_in_step_env_is_named():
    expected = ("FloatTime.step_env returned state.time of shape () and dtype float32 per env, but "
                "reset_env () and int32")
    with pytest.raises(TypeError, match=re.escape(expected)):
        _step(FloatTime())
    _step(fusedrl.envs.CartPole())


@struct.dataclass
class XState(fusedrl.envs.EnvState):
    x: jax.Array


class PythonNumbers(fusedrl.envs.CartPole):
    """`x = 0` (a Python int) in reset_env, a float32 from step_env: the auto-reset's select and the
    rollout scan promote the weakly typed int, so this env trained before the state check."""

    def reset_env(self, key, params):
        return jnp.zeros(4), XState(time=0, x=0)

    def step_env(self, key, state, action, params):
        return jnp.zeros(4), XState(time=state.time + 1, x=state.x + 0.5), 1.0, state.x > 3.0, {}


class PythonIntInStep(PythonNumbers):
    def reset_env(self, key, params):
        return jnp.zeros(4), XState(time=0, x=jnp.float32(0))

    def step_env(self, key, state, action, params):
        return jnp.zeros(4), XState(time=state.time + 1, x=1), 1.0, state.x > 3.0, {}


class IntToFloat(PythonNumbers):
    def reset_env(self, key, params):
        return jnp.zeros(4), XState(time=0, x=jnp.int32(0))


@pytest.mark.parametrize("env", [PythonNumbers(), PythonIntInStep()])
def test_a_weakly_typed_python_number_that_promotes_is_accepted(env):
    _step(env)


def test_a_strongly_typed_int_field_that_becomes_float_is_still_named():
    with pytest.raises(TypeError, match=re.escape("IntToFloat.step_env returned state.x of shape () and "
                                                  "dtype float32 per env, but reset_env () and int32")):
        _step(IntToFloat())


class PairX(fusedrl.envs.CartPole):
    def step_env(self, key, state, action, params):
        obs, state, reward, terminated, info = super().step_env(key, state, action, params)
        return obs, state.replace(x=jnp.stack([state.x, state.x])), reward, terminated, info


class OtherStateClass(fusedrl.envs.CartPole):
    def step_env(self, key, state, action, params):
        obs, state, reward, terminated, info = super().step_env(key, state, action, params)
        return obs, NoTimeState(state.x), reward, terminated, info


def test_a_state_field_that_changes_shape_in_step_env_is_named():
    expected = ("PairX.step_env returned state.x of shape (2,) and dtype float32 per env, but "
                "reset_env () and float32")
    with pytest.raises(TypeError, match=re.escape(expected)):
        _step(PairX())


def test_a_state_of_another_structure_from_step_env_is_named():
    with pytest.raises(TypeError, match=re.escape("OtherStateClass.step_env returned a state of another "
                                                  "structure than reset_env's")):
        _step(OtherStateClass())
