"""Python control flow on a traced value in a custom env's step_env or reset_env (`if action == 1:`)
fails in jax with TracerBoolConversionError; the error now also says which method runs traced and
what to write instead (jnp.where, jax.lax.cond)."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import fusedrl
from fusedrl.envs import VecEnv


class IfOnAction(fusedrl.envs.CartPole):
    def step_env(self, key, state, action, params):
        obs, state, reward, terminated, info = super().step_env(key, state, action, params)
        return obs, state, 2.0 if action == 1 else 0.0, terminated, info


class IfOnKey(fusedrl.envs.CartPole):
    def reset_env(self, key, params):
        if jax.random.uniform(key) > 0.5:
            return super().reset_env(key, params)
        return super().reset_env(jax.random.split(key)[0], params)


def _notes(excinfo):
    return "\n".join(getattr(excinfo.value, "__notes__", []))


def _step_notes(env, error) -> str:
    """The notes of the `error` that tracing one step of `env` raises."""
    _, params = fusedrl.make("CartPole-v1")
    vec = VecEnv(env, 2)
    state = jax.eval_shape(vec.reset, jax.random.key(0), params)[1]
    with pytest.raises(error) as excinfo:
        jax.eval_shape(lambda s: vec.step(s, np.zeros(2, np.int32), params), state)
    return _notes(excinfo)


def test_an_if_on_the_action_in_step_env_names_the_method_and_the_fix():
    notes = _step_notes(IfOnAction(), jax.errors.TracerBoolConversionError)
    assert "IfOnAction.step_env runs under jax.vmap and jax.jit" in notes
    assert "jnp.where(cond, a, b)" in notes


def test_an_if_on_the_key_in_reset_env_names_the_method():
    _, params = fusedrl.make("CartPole-v1")
    with pytest.raises(jax.errors.TracerBoolConversionError) as excinfo:
        jax.eval_shape(VecEnv(IfOnKey(), 2).reset, jax.random.key(0), params)
    assert "IfOnKey.reset_env runs under jax.vmap and jax.jit" in _notes(excinfo)


class FloatOfState(fusedrl.envs.CartPole):
    def step_env(self, key, state, action, params):
        obs, state, reward, terminated, info = super().step_env(key, state, action, params)
        return obs, state, float(state.x), terminated, info  # a ConcretizationTypeError, not a bool one


def test_float_of_a_traced_value_in_step_env_gets_the_note_too():
    notes = _step_notes(FloatOfState(), jax.errors.ConcretizationTypeError)
    assert "FloatOfState.step_env runs under jax.vmap and jax.jit" in notes


class ListIndexedByAction(fusedrl.envs.CartPole):
    REWARDS = [0.0, 1.0]

    def step_env(self, key, state, action, params):
        obs, state, reward, terminated, info = super().step_env(key, state, action, params)
        return obs, state, self.REWARDS[action], terminated, info  # TracerIntegerConversionError


class NumpyOnState(fusedrl.envs.CartPole):
    def step_env(self, key, state, action, params):
        obs, state, reward, terminated, info = super().step_env(key, state, action, params)
        return obs, state, np.clip(state.x, -1.0, 1.0), terminated, info  # TracerArrayConversionError


@pytest.mark.parametrize("env", [ListIndexedByAction(), NumpyOnState()])
def test_a_list_indexed_by_the_action_or_numpy_on_the_state_gets_the_note(env):
    notes = _step_notes(env, TypeError)
    assert f"{type(env).__name__}.step_env runs under jax.vmap and jax.jit" in notes
    assert "a jnp.array to index" in notes
