"""CartPole-NoVelocity-v1: CartPole-v1's dynamics with only (x, theta) observed."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import fusedrl
from fusedrl.envs import CartPole, CartPoleNoVelocity


def test_observes_position_and_angle_of_cartpoles_trajectory():
    """Same key and actions: the same states as CartPole-v1, observed as its obs[[0, 2]]."""
    env, params = fusedrl.make("CartPole-NoVelocity-v1")
    full, full_params = fusedrl.make("CartPole-v1")
    assert isinstance(env, CartPoleNoVelocity) and isinstance(full, CartPole)
    assert env.name == "CartPole-NoVelocity-v1" and params == full_params
    space = env.observation_space(params)
    assert space.shape == (2,) and space.dtype == jnp.float32
    np.testing.assert_allclose(space.high, [4.8, 2 * 12 * 2 * np.pi / 360], rtol=1e-6)
    assert fusedrl.envs.space_info(env.action_space(params)) == fusedrl.envs.space_info(
        full.action_space(full_params))

    actions = jnp.asarray(np.random.default_rng(0).integers(0, 2, 40), jnp.int32)

    def rollout(e, p):
        obs, state = e.reset(jax.random.key(0), p)

        def step(carry, a):
            state, key = carry
            key, k = jax.random.split(key)
            obs, state, reward, terminated, truncated, _ = e.step(k, state, a, p)
            return (state, key), (obs, reward, terminated, truncated)

        _, out = jax.lax.scan(step, (state, jax.random.key(1)), actions)
        return obs, out

    obs0, (obs, reward, terminated, truncated) = jax.jit(rollout, static_argnums=0)(env, params)
    fobs0, (fobs, freward, fterminated, ftruncated) = jax.jit(rollout, static_argnums=0)(full, full_params)
    assert obs0.shape == (2,) and obs.shape == (40, 2) and obs.dtype == jnp.float32
    np.testing.assert_array_equal(obs0, fobs0[jnp.array([0, 2])])
    np.testing.assert_array_equal(obs, fobs[:, jnp.array([0, 2])])
    np.testing.assert_array_equal(reward, freward)
    np.testing.assert_array_equal(terminated, fterminated)
    assert terminated.any(), "the random actions should end an episode (an auto-reset is compared too)"
    np.testing.assert_array_equal(truncated, ftruncated)
