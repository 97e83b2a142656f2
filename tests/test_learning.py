"""PPO learns for real: CartPole-v1 with its preset, greedy evaluation, every seed."""

import jax
import numpy as np

import fusedrl

NUM_SEEDS = 4
THRESHOLD = 475.0  # Gymnasium's "solved" return for CartPole-v1


def test_cartpole_preset_solves_on_every_seed():
    config = fusedrl.preset("CartPole-v1")
    assert config.total_timesteps <= 500_000  # the CI budget this test is sized for
    train = jax.jit(jax.vmap(fusedrl.make_train(config)))
    result = train(jax.random.split(jax.random.key(2026), NUM_SEEDS))
    returns = np.asarray(fusedrl.evaluate(config, result, jax.random.key(1), num_episodes=64))
    assert returns.shape == (NUM_SEEDS, 64)
    per_seed = returns.mean(axis=1)
    assert np.all(per_seed >= THRESHOLD), f"greedy mean return per seed: {per_seed}"
