"""The XLand-MiniGrid adapter (`fusedrl.envs._xminigrid`) against the real xminigrid: conformance,
episode ends as the suite defines them, its reward under our time limit, resets, a PPO smoke run."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

xminigrid = pytest.importorskip("xminigrid",
                                reason="xminigrid is not installed (pip install -e \".[xminigrid]\")")

import fusedrl  # noqa: E402
from fusedrl.envs import VecEnv, suites  # noqa: E402
from fusedrl.envs._xminigrid import native_stepper  # noqa: E402
from fusedrl.envs.checks import check_env, check_step_shapes  # noqa: E402

pytestmark = [pytest.mark.suite]

EMPTY = "xminigrid:MiniGrid-Empty-5x5"
# XLand-MiniGrid's actions (xminigrid.core.actions).
FORWARD, RIGHT, LEFT = 0, 1, 2
# From Empty-5x5's fixed start (row 1, column 1, facing east) to the goal at (3, 3).
TO_GOAL = [FORWARD, FORWARD, RIGHT, FORWARD, FORWARD]


@pytest.mark.parametrize("env_id", [EMPTY, "xminigrid:MiniGrid-MemoryS8"])
def test_check_env(env_id):
    counts = check_env(env_id, num_envs=4, max_steps=6)
    assert counts["truncations"] > 0


def test_observation_is_the_suites_uint8_view():
    env, params = fusedrl.make(EMPTY)
    obs, _ = env.reset_env(jax.random.key(0), params)
    suite_env, suite_params = xminigrid.make("MiniGrid-Empty-5x5")
    np.testing.assert_array_equal(obs, suite_env.reset(suite_params, jax.random.key(0)).observation)
    assert obs.dtype == jnp.uint8 and obs.shape == (7, 7, 2) == env.observation_space(params).shape
    assert params.max_steps_in_episode == suite_params.max_steps == 100


@pytest.fixture(scope="module")
def scripted():
    """One env stepped through VecEnv by `actions`: (obs, reward, terminated, truncated, final_obs)
    per step, with the time limit `limit` (traced); one compiled program per length."""
    env, params = fusedrl.make(EMPTY)
    vec = VecEnv(env, 1)

    @jax.jit
    def run(actions, limit):
        p = params.replace(max_steps_in_episode=limit)
        _, state = vec.reset(jax.random.key(0), p)

        def step(state, action):
            obs, state, reward, term, trunc, info = vec.step(state, action[None], p)
            return state, (obs[0], reward[0], term[0], trunc[0], info["final_observation"][0])

        return jax.lax.scan(step, state, actions)[1]

    return lambda actions, limit=100: run(jnp.asarray(actions, jnp.int32), limit)


def _suite_steps(actions, max_steps=None):
    """The suite's own steps (no auto-reset) from the same fixed start."""
    env, params = xminigrid.make("MiniGrid-Empty-5x5")
    params = params if max_steps is None else params.replace(max_steps=max_steps)
    timestep = env.reset(params, jax.random.key(0))
    step = jax.jit(lambda timestep, action: env.step(params, timestep, action))
    out = []
    for a in actions:
        timestep = step(timestep, jnp.asarray(a, jnp.int32))
        out.append(timestep)
    return out


@pytest.mark.parametrize("limit", [100, 50])
def test_termination_and_reward_as_the_suite_says(scripted, limit):
    obs, reward, term, trunc, final = scripted(TO_GOAL + [LEFT], limit)
    theirs = _suite_steps(TO_GOAL, max_steps=limit)
    assert float(theirs[-1].discount) == 0.0 and bool(theirs[-1].last())
    np.testing.assert_array_equal(term, [0, 0, 0, 0, 1, 0])
    np.testing.assert_array_equal(trunc, [0, 0, 0, 0, 0, 0])
    # The suite's time-penalised reward, with our time limit: 1 - 0.9 * 5 / limit.
    np.testing.assert_allclose(reward, [0, 0, 0, 0, 1 - 0.9 * 5 / limit, 0], rtol=1e-6)
    np.testing.assert_allclose(reward[4], theirs[-1].reward, rtol=1e-6)
    np.testing.assert_array_equal(final[4], theirs[-1].observation)


def test_truncation_at_the_time_limit_as_the_suite_says(scripted):
    obs, reward, term, trunc, final = scripted([LEFT] * 6, 3)  # 6 steps: the other tests' program
    theirs = _suite_steps([LEFT] * 3, max_steps=3)
    assert bool(theirs[-1].last()) and float(theirs[-1].discount) == 1.0  # the suite's truncation
    np.testing.assert_array_equal(trunc, [0, 0, 1, 0, 0, 1])
    np.testing.assert_array_equal(term, [0, 0, 0, 0, 0, 0])
    np.testing.assert_array_equal(final[2], theirs[-1].observation)


def test_no_action_is_lost_after_an_episode_ends(scripted):
    # The step after the goal moves the agent forward from a fresh start (the fixed start here).
    obs, *_ = scripted(TO_GOAL + [FORWARD])
    np.testing.assert_array_equal(obs[-1], _suite_steps([FORWARD])[0].observation)


def test_resets_draw_fresh_initial_states():
    env, params = fusedrl.make("xminigrid:MiniGrid-EmptyRandom-5x5")
    reset = jax.jit(jax.vmap(env.reset_env, in_axes=(0, None)))
    obs = reset(jax.random.split(jax.random.key(0), 8), params)[0]
    assert len({np.asarray(o).tobytes() for o in obs}) > 1


def test_native_stepper_resets_on_the_last_step():
    init, step = native_stepper("MiniGrid-Empty-5x5", 2)
    carry = jax.jit(init)(jax.random.key(0))
    step = jax.jit(step)
    start = np.asarray(carry.observation[0])
    for a in TO_GOAL:
        carry, reward = step(carry, jnp.full((2,), a, jnp.int32))
    np.testing.assert_allclose(reward, [0.955, 0.955], rtol=1e-6)
    np.testing.assert_array_equal(carry.observation[0], start)  # GymAutoResetWrapper: reset at once


def test_benchmark_ids_need_a_download_and_say_so():
    names = suites.adapter("xminigrid").env_names()
    assert "MiniGrid-Empty-5x5" in names and not any(n.startswith("XLand-") for n in names)
    with pytest.raises(ValueError, match=r"XLand-MiniGrid-R1-9x9: needs a ruleset .* a download"):
        fusedrl.make("xminigrid:XLand-MiniGrid-R1-9x9")


def test_every_id_traces_with_matching_shapes():
    # Traced, not compiled (check_step_shapes): each id's reset and step agree with its spaces, and a
    # stepped state has the structure, shapes and dtypes of a reset one.
    for env_id in suites.env_ids("xminigrid"):
        env, params = fusedrl.make(env_id)
        obs = check_step_shapes(env, params)
        assert obs.dtype == jnp.uint8 and env.action_space(params).n >= 6, env_id


def test_unknown_name_lists_the_closest_ids():
    with pytest.raises(ValueError, match=r"did you mean 'xminigrid:MiniGrid-Empty-5x5'"):
        fusedrl.make("xminigrid:MiniGrid-Empty-5x5-v0")


def test_ppo_smoke():
    config = fusedrl.PPOConfig(env_id=EMPTY, num_envs=4, num_steps=16, total_timesteps=4 * 16 * 3,
                               update_epochs=1, num_minibatches=2, hidden_sizes=(16,))
    metrics = jax.jit(fusedrl.make_train(config))(jax.random.key(0)).metrics
    for name, value in metrics.items():
        assert np.isfinite(np.asarray(value, np.float64)).all(), name
