"""The navix adapter (`fusedrl.envs._navix`) against the real navix: conformance, episode ends as
navix defines them, no action lost after an episode ends, a PPO smoke run."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

navix = pytest.importorskip("navix", reason="navix is not installed (pip install -e \".[navix]\")")

import fusedrl  # noqa: E402
from fusedrl.envs import VecEnv, suites  # noqa: E402
from fusedrl.envs._navix import native_stepper  # noqa: E402
from fusedrl.envs.checks import check_env, check_step_shapes  # noqa: E402

pytestmark = [pytest.mark.suite]

EMPTY = "navix:Navix-Empty-5x5-v0"
# Navix's MiniGrid actions (navix.actions.MINIGRID_ACTION_SET).
CCW, CW, FORWARD = 0, 1, 2
# From Empty-5x5's fixed start (row 1, column 1, facing east) to the goal at (3, 3).
TO_GOAL = [FORWARD, FORWARD, CW, FORWARD, FORWARD]


@pytest.mark.parametrize("env_id", [EMPTY, "navix:Navix-Dynamic-Obstacles-5x5-Random-v0"])
def test_check_env(env_id):
    counts = check_env(env_id, num_envs=4, max_steps=6)
    assert counts["truncations"] > 0


def test_observation_is_navix_uint8_grid():
    env, params = fusedrl.make(EMPTY)
    obs, _ = env.reset_env(jax.random.key(0), params)
    with jax.numpy_rank_promotion("allow"):
        want = navix.make("Navix-Empty-5x5-v0").reset(jax.random.key(0)).observation
    assert obs.dtype == jnp.uint8 and env.observation_space(params).dtype == jnp.uint8
    np.testing.assert_array_equal(obs, want)
    assert params.max_steps_in_episode == navix.make("Navix-Empty-5x5-v0").max_steps == 100


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


def _navix_steps(actions, max_steps=100):
    """Navix's own steps (its `step`, auto-reset included) from the same fixed start."""
    env = navix.make("Navix-Empty-5x5-v0", max_steps=max_steps)
    with jax.numpy_rank_promotion("allow"):  # navix's code broadcasts implicitly
        timestep = env.reset(jax.random.key(0))
        out = []
        step = jax.jit(env.step)
        for a in actions:
            timestep = step(timestep, jnp.asarray(a, jnp.int32))
            out.append(timestep)
    return out


def test_termination_on_the_goal_as_navix_says(scripted):
    obs, reward, term, trunc, final = scripted(TO_GOAL + [CCW])
    theirs = _navix_steps(TO_GOAL)
    assert [int(t.step_type) for t in theirs] == [0, 0, 0, 0, 2]  # navix: TERMINATION on the goal
    np.testing.assert_array_equal(term, [0, 0, 0, 0, 1, 0])
    np.testing.assert_array_equal(trunc, [0, 0, 0, 0, 0, 0])
    np.testing.assert_array_equal(reward, [0, 0, 0, 0, 1, 0])
    np.testing.assert_array_equal(final[4], theirs[-1].observation)  # the goal state, before the reset


def test_truncation_at_the_time_limit_as_navix_says(scripted):
    obs, reward, term, trunc, final = scripted([CCW] * 6, 3)  # 6 steps: the other tests' program
    theirs = _navix_steps([CCW] * 3, max_steps=3)
    assert int(theirs[-1].step_type) == 1  # navix: TRUNCATION after 3 steps
    np.testing.assert_array_equal(trunc, [0, 0, 1, 0, 0, 1])
    np.testing.assert_array_equal(term, [0, 0, 0, 0, 0, 0])
    np.testing.assert_array_equal(final[2], theirs[-1].observation)


def test_no_action_is_lost_after_an_episode_ends(scripted):
    # The step after the goal moves the agent forward from a fresh start. Navix's own `step` resets
    # on that step instead and drops its action; our adapter steps navix's transition only.
    obs, *_ = scripted(TO_GOAL + [FORWARD])
    one_forward = _navix_steps([FORWARD])[0].observation
    with jax.numpy_rank_promotion("allow"):
        start = navix.make("Navix-Empty-5x5-v0").reset(jax.random.key(0)).observation
    assert not np.array_equal(one_forward, start)
    np.testing.assert_array_equal(obs[-1], one_forward)

    init, step = native_stepper("Navix-Empty-5x5-v0", 1)
    carry = jax.jit(init)(jax.random.key(0))
    step = jax.jit(step)
    for a in TO_GOAL + [FORWARD]:
        carry, _ = step(carry, jnp.asarray([a], jnp.int32))
    np.testing.assert_array_equal(carry.observation[0], start)  # navix's own: the action was dropped


def test_resets_draw_fresh_initial_states():
    env, params = fusedrl.make("navix:Navix-Empty-Random-5x5-v0")
    reset = jax.jit(jax.vmap(env.reset_env, in_axes=(0, None)))
    obs = reset(jax.random.split(jax.random.key(0), 8), params)[0]
    assert len({np.asarray(o).tobytes() for o in obs}) > 1


def test_every_id_traces_with_matching_shapes():
    # Traced, not compiled (check_step_shapes): each id's reset and step agree with its spaces, and a
    # stepped state has the structure, shapes and dtypes of a reset one.
    for env_id in suites.env_ids("navix"):
        env, params = fusedrl.make(env_id)
        obs = check_step_shapes(env, params)
        assert obs.dtype == jnp.uint8 and env.action_space(params).n >= 6, env_id


def test_unknown_name_lists_the_closest_ids():
    with pytest.raises(ValueError, match=r"did you mean 'navix:Navix-Empty-5x5-v0'"):
        fusedrl.make("navix:Navix-Empty-5x5")


def test_ppo_smoke():
    config = fusedrl.PPOConfig(env_id=EMPTY, num_envs=4, num_steps=16, total_timesteps=4 * 16 * 3,
                               update_epochs=1, num_minibatches=2, hidden_sizes=(16,))
    metrics = jax.jit(fusedrl.make_train(config))(jax.random.key(0)).metrics
    for name, value in metrics.items():
        assert np.isfinite(np.asarray(value, np.float64)).all(), name
