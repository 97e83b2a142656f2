"""PPO learns for real: CartPole-v1 with its preset, greedy evaluation, every seed.

The seeds run through `fusedrl.sweep` (on a CPU: one host thread per core, each training its
share of the seeds one after another), the way the README recommends training many seeds."""

import jax
import numpy as np
import pytest

import fusedrl

pytestmark = [pytest.mark.slow]

NUM_SEEDS = 4
THRESHOLD = 475.0  # Gymnasium's "solved" return for CartPole-v1


def test_cartpole_preset_solves_on_every_seed():
    config = fusedrl.preset("CartPole-v1")
    assert config.total_timesteps <= 500_000  # the CI budget this test is sized for
    swept = fusedrl.sweep(config, NUM_SEEDS, key=jax.random.key(2026))
    returns = np.asarray(fusedrl.evaluate(config, swept.result, jax.random.key(1), num_episodes=64))
    assert returns.shape == (NUM_SEEDS, 64)
    per_seed = returns.mean(axis=1)
    assert np.all(per_seed >= THRESHOLD), f"greedy mean return per seed: {per_seed}"
