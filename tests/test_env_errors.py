"""Bad input to the env API fails at once, with a message naming the problem and the valid choices.

The checks run in Python at trace time, before anything is compiled; states are built from
`jax.eval_shape`, so these tests compile nothing.
"""

from __future__ import annotations

import dataclasses
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fusedrl
from fusedrl.envs import Discrete, VecEnv

OUR_IDS = fusedrl.registered_ids(include_gymnax=False)
NUM_ENVS = 4


def _placeholder(tree_of_shapes):
    """Concrete arrays with the given shapes and dtypes (keys become real keys)."""

    def make(s):
        if jnp.issubdtype(s.dtype, jax.dtypes.prng_key):
            return jax.random.split(jax.random.key(0), s.shape) if s.shape else jax.random.key(0)
        return np.zeros(s.shape, s.dtype)

    return jax.tree.map(make, tree_of_shapes)


def _state(env, params):
    return _placeholder(jax.eval_shape(env.reset_env, jax.random.key(0), params)[1])


def _vec_state(vec, params):
    return _placeholder(jax.eval_shape(vec.reset, jax.random.key(0), params)[1])


def _listed_ids(message):
    return re.search(r"closest first: (.*?)\. Use", message).group(1).split(", ")


# Unknown ids and params ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "typo, closest",
    [
        ("CartPole-v0", "CartPole-v1"),
        ("Pendulum-v0", "Pendulum-v1"),
        ("MountainCarContinuous", "MountainCarContinuous-v0"),
        ("gymnax:Breakout-MinAtr", "gymnax:Breakout-MinAtar"),
    ],
)
def test_unknown_id_lists_valid_ids_closest_first(typo, closest):
    with pytest.raises(ValueError, match=f"Unknown environment id {typo!r}") as exc:
        fusedrl.make(typo)
    listed = _listed_ids(str(exc.value))
    assert listed[0] == closest
    assert sorted(listed) == sorted(fusedrl.registered_ids())


def test_non_string_id_is_a_type_error():
    with pytest.raises(TypeError, match="env_id must be a string"):
        fusedrl.make(1)


@pytest.mark.parametrize("env_id", OUR_IDS)
def test_unknown_param_override_lists_valid_params(env_id):
    with pytest.raises(ValueError, match=re.escape(f"{env_id}: unknown env param(s) ['bogus']")) as exc:
        fusedrl.make(env_id, bogus=1)
    _, params = fusedrl.make(env_id)
    for field in dataclasses.fields(params):
        assert repr(field.name) in str(exc.value)


def test_known_param_override_is_applied():
    _, params = fusedrl.make("Pendulum-v1", g=9.81, max_steps_in_episode=50)
    assert params.g == 9.81 and params.max_steps_in_episode == 50


# Wrong actions -------------------------------------------------------------------------------------
def _bad_actions(space, batch=()):
    """(action, error, message pattern) triples that must be rejected for `space`."""
    if isinstance(space, Discrete):
        good_shape = (*batch, *space.shape)
        return [
            (jnp.zeros((*good_shape, 1), jnp.int32), ValueError, "expected"),
            (jnp.zeros(good_shape, jnp.float32), TypeError, "must be an integer array"),
            (jnp.zeros(good_shape, bool), TypeError, "must be an integer array"),
        ]
    good_shape = (*batch, *space.shape)
    return [
        (jnp.zeros(good_shape[:-1], jnp.float32), ValueError, "expected"),  # [] instead of [1]
        (jnp.zeros((*good_shape[:-1], 2), jnp.float32), ValueError, "expected"),
        (jnp.zeros(good_shape, jnp.int32), TypeError, "must be a float array"),
    ]


@pytest.mark.parametrize("env_id", OUR_IDS)
def test_step_rejects_wrong_action_shape_and_dtype(env_id):
    env, params = fusedrl.make(env_id)
    state = _state(env, params)
    for action, error, pattern in _bad_actions(env.action_space(params)):
        with pytest.raises(error, match=pattern) as exc:
            env.step(jax.random.key(0), state, action, params)
        assert env.name in str(exc.value)


@pytest.mark.parametrize("env_id", [*OUR_IDS, "gymnax:Catch-bsuite"])
def test_vecenv_step_rejects_wrong_action_shape_and_dtype(env_id):
    env, params = fusedrl.make(env_id)
    vec = VecEnv(env, NUM_ENVS)
    vstate = _vec_state(vec, params)
    space = env.action_space(params)
    cases = _bad_actions(space, (NUM_ENVS,))
    # One action per env: a batch of the wrong size, or a single unbatched action.
    cases += [
        (jnp.zeros((NUM_ENVS - 1, *space.shape), space.dtype), ValueError, "one action per environment"),
        (jnp.zeros(space.shape, space.dtype), ValueError, "one action per environment"),
    ]
    for action, error, pattern in cases:
        with pytest.raises(error, match=pattern):
            vec.step(vstate, action, params)


# Mis-typed params ----------------------------------------------------------------------------------
@pytest.mark.parametrize("entry", ["reset", "step", "VecEnv.reset", "VecEnv.step"])
@pytest.mark.parametrize("env_id", OUR_IDS)
def test_params_of_another_env_are_rejected(env_id, entry):
    env, params = fusedrl.make(env_id)
    other_id = OUR_IDS[(OUR_IDS.index(env_id) + 1) % len(OUR_IDS)]
    _, wrong = fusedrl.make(other_id)
    space = env.action_space(params)
    vec = VecEnv(env, NUM_ENVS)
    call = {
        "reset": lambda p: env.reset(jax.random.key(0), p),
        "step": lambda p: env.step(
            jax.random.key(0), _state(env, params), np.zeros(space.shape, space.dtype), p
        ),
        "VecEnv.reset": lambda p: vec.reset(jax.random.key(0), p),
        "VecEnv.step": lambda p: vec.step(
            _vec_state(vec, params), np.zeros((NUM_ENVS, *space.shape), space.dtype), p
        ),
    }[entry]
    expected = f"params must be a {type(params).__name__}"
    with pytest.raises(TypeError, match=re.escape(expected) + ".*got " + type(wrong).__name__):
        call(wrong)
    with pytest.raises(TypeError, match=re.escape(expected) + ".*got dict"):
        call(dataclasses.asdict(params))


def test_vecenv_needs_a_positive_number_of_envs():
    env, _ = fusedrl.make("CartPole-v1")
    with pytest.raises(ValueError, match="num_envs must be a positive integer"):
        VecEnv(env, 0)
