"""The Brax adapter (envs/_brax.py, on envs/_brax_like.py) against Brax itself.

Skipped when Brax is not installed (`pip install -e ".[brax]"`). Episode ends are checked against
Brax's own notions: termination is Brax's `done` (inverted_pendulum's pole past 0.2 rad), truncation
is Brax's `EpisodeWrapper`'s `truncation` flag; and unlike Brax's `AutoResetWrapper` (which restarts
every episode from one cached first state) ours start from fresh draws, and the action of the step
that ends an episode is applied.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("brax", reason="Brax is not installed: pip install -e \".[brax]\"")

import fusedrl  # noqa: E402
from fusedrl.envs import VecEnv  # noqa: E402
from fusedrl.envs import _brax as adapter  # noqa: E402
from fusedrl.envs.checks import check_env  # noqa: E402

pytestmark = [pytest.mark.suite]

PENDULUM = "brax:inverted_pendulum"


@pytest.mark.parametrize("env_id", ["brax:fast", PENDULUM])
def test_conformance(env_id):
    counts = check_env(env_id, num_envs=4, max_steps=6)
    assert counts["truncations"] > 0


def test_ids_backends_and_unknown_names():
    ids = adapter.env_names()
    assert {"ant", "fast", "inverted_pendulum", "ant@mjx", "ant@spring"} <= set(ids)
    assert "fast@mjx" not in ids  # no physics, no backend
    env, params = fusedrl.make("brax:reacher@spring")
    assert env.suite_env.backend == "spring" and params.max_steps_in_episode == 1000
    assert fusedrl.make("brax:reacher")[0].suite_env.backend == "generalized"  # Brax's own default
    with pytest.raises(ValueError, match=r"did you mean 'brax:inverted_pendulum'"):
        fusedrl.make("brax:inverted_pendulm")


@pytest.mark.slow
def test_termination_is_brax_done_and_the_ending_action_is_applied():
    # Pushing the cart one way tips inverted_pendulum's pole past 0.2 rad: Brax's done.
    env, params = fusedrl.make(PENDULUM)
    raw = env.suite_env
    push = jnp.ones((1,))
    key = jax.random.key(3)
    obs, state = env.reset_env(key, params)
    raw_state = raw.reset(key)
    np.testing.assert_array_equal(obs, raw_state.obs)
    step = jax.jit(env.step_env)
    raw_step = jax.jit(raw.step)
    for t in range(1, 200):
        obs, state, reward, terminated, _ = step(None, state, push, params)
        raw_state = raw_step(raw_state, push)
        np.testing.assert_allclose(obs, raw_state.obs, rtol=1e-6, atol=1e-6)
        assert bool(terminated) == bool(raw_state.done), t
        assert not bool(env.is_truncated(state, params))
        if terminated:
            break
    assert terminated and abs(float(obs[1])) > 0.2 and int(state.time) == t


@pytest.mark.slow
def test_truncation_matches_brax_episode_wrapper_and_restarts_are_fresh():
    from brax.envs.wrappers import training

    limit = 3
    env, params = fusedrl.make(PENDULUM, max_steps_in_episode=limit)
    vec = VecEnv(env, 1)
    action = jnp.zeros((1, 1))
    obs0, vstate = vec.reset(jax.random.key(0), params)
    ours = jax.jit(lambda s: vec.step(s, action, params))
    # Brax as its users train it: vmapped, a 3-step EpisodeWrapper, its AutoResetWrapper.
    wrapped = training.wrap(adapter.suite_env("inverted_pendulum"), episode_length=limit)
    bstate = wrapped.reset(jax.random.split(jax.random.PRNGKey(0), 1))  # Brax wants raw uint32 keys
    first_brax_obs = bstate.obs
    theirs = jax.jit(lambda s: wrapped.step(s, action))
    starts, brax_starts = [obs0], [first_brax_obs]
    for t in range(1, 3 * limit + 1):
        obs, vstate, _, term, trunc, info = ours(vstate)
        bstate = theirs(bstate)
        assert bool(trunc[0]) == bool(bstate.info["truncation"][0]) == (t % limit == 0), t
        assert not bool(term[0])
        if trunc[0]:
            # The ending step applied its action: the final observation is one step on, not a reset.
            assert not np.allclose(info["final_observation"], starts[-1])
            starts.append(obs)
            brax_starts.append(bstate.obs)
    # Brax restarts from its cached first state; ours from a fresh draw each time.
    for s in brax_starts[1:]:
        np.testing.assert_array_equal(s, first_brax_obs)
    firsts = np.stack([np.asarray(s[0]) for s in starts])
    assert len({tuple(r) for r in firsts.round(7)}) == len(firsts) == 4


def test_native_stepper_steps_brax_with_its_own_auto_reset():
    init, step = adapter.native_stepper("fast", 3)
    carry = jax.jit(init)(jax.random.key(0))
    carry, reward = jax.jit(step)(carry, jnp.ones((3, 1)))
    assert reward.shape == (3,) and np.isfinite(np.asarray(reward)).all()


@pytest.mark.slow
def test_ppo_smoke_on_a_real_brax_env():
    config = fusedrl.PPOConfig(env_id=PENDULUM, num_envs=4, num_steps=8, total_timesteps=4 * 8 * 3,
                               update_epochs=1, num_minibatches=2, hidden_sizes=(16,), normalize_obs=True)
    metrics = jax.jit(fusedrl.make_train(config))(jax.random.key(0)).metrics
    for name in ("policy_loss", "value_loss", "entropy"):
        assert np.isfinite(np.asarray(metrics[name])).all(), name
