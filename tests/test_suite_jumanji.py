"""The Jumanji adapter (fusedrl.envs._jumanji) run for real: conformance, episode ends against the
suite's own, keys, the joint-action mapping, the errors, a PPO smoke run and the native stepper."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("jumanji", reason="the jumanji extra is not installed (pip install -e \".[jumanji]\")")

import jumanji  # noqa: E402
from jumanji.types import StepType  # noqa: E402

import fusedrl  # noqa: E402
from fusedrl.envs import _jumanji  # noqa: E402
from fusedrl.envs._gymnax import spaces  # noqa: E402
from fusedrl.envs.checks import check_env  # noqa: E402

pytestmark = [pytest.mark.suite]

UP, DOWN = 0, 2  # Snake's actions (0 up, 1 right, 2 down, 3 left)


@pytest.mark.parametrize("name", ["Snake-v1", "Minesweeper-v0", "Game2048-v1"])
def test_check_env(name):
    counts = check_env(f"jumanji:{name}", num_envs=4, max_steps=6)
    assert counts["episodes_ended"] > 0


@pytest.fixture(scope="module")
def snake():
    env, params = fusedrl.make("jumanji:Snake-v1")

    @jax.jit
    def step(state, action, params):  # one compiled step for every time limit (params are traced)
        _, state, _, terminated, _ = env.step_env(None, state, action, params)
        return state, terminated, env.is_truncated(state, params)

    return env, params, step


def _run(step, params, state, actions):
    """Steps one env from `state` through `actions`; [(terminated, truncated)] after each step."""
    out = []
    for a in actions:
        state, term, trunc = step(state, jnp.int32(a), params)
        out.append((bool(term), bool(trunc)))
    return out


def test_snake_wall_is_a_termination_and_its_time_limit_a_truncation(snake):
    env, params, step = snake
    assert params.max_steps_in_episode == 4000  # the suite's own time limit, now ours
    _, state = env.reset_env(jax.random.key(3), params)
    row = int(state.suite.head_position.row)
    assert row >= 1
    # Up from row r: r moves stay on the board, the next hits the wall (a snake of length 1 can
    # always move up; a fruit on the way only lengthens it).
    assert _run(step, params, state, [UP] * (row + 1)) == [(False, False)] * row + [(True, False)]

    # A time limit of 3 steps, moving away from the nearer wall: truncated at step 3, not terminated.
    short = params.replace(max_steps_in_episode=3)
    away = UP if row >= 6 else DOWN
    assert _run(step, short, state, [away] * 3) == [(False, False), (False, False), (False, True)]
    # The suite itself reports that same time limit as a termination (discount 0).
    suite = jumanji.make("Snake-v1", time_limit=3)
    s, timestep = suite.reset(jax.random.key(3))
    for _ in range(3):
        s, timestep = suite.step(s, jnp.int32(away))
    assert timestep.step_type == StepType.LAST and float(timestep.discount) == 0.0


def test_reset_takes_the_key_it_is_given(snake):
    env, params, _ = snake
    grid = [np.asarray(env.reset_env(jax.random.key(k), params)[0]["grid"]) for k in (0, 0, 1)]
    assert np.array_equal(grid[0], grid[1]) and not np.array_equal(grid[0], grid[2])


def test_a_joint_multidiscrete_action_is_one_discrete_action():
    env, params = fusedrl.make("jumanji:Minesweeper-v0")
    space = env.action_space(params)
    assert isinstance(space, spaces.Discrete) and space.n == 100
    obs, state = env.reset_env(jax.random.key(0), params)
    assert obs["action_mask"].shape == (100,) and obs["action_mask"].dtype == bool
    action = 10 * 3 + 7  # row 3, column 7
    obs, state, *_ = env.step_env(None, state, jnp.int32(action), params)
    suite = jumanji.make("Minesweeper-v0")
    s, _ = suite.reset(jax.random.key(0))
    s, timestep = suite.step(s, jnp.array([3, 7], jnp.int32))
    assert np.array_equal(obs["board"], timestep.observation.board)
    assert not obs["action_mask"][action]  # the revealed cell is masked, in the flattened mask too


def test_unknown_and_unavailable_ids():
    with pytest.raises(ValueError, match="did you mean 'jumanji:Snake-v1'"):
        fusedrl.make("jumanji:Snak-v1")
    with pytest.raises(ValueError, match="Sokoban-v0: not available offline: it downloads"):
        fusedrl.make("jumanji:Sokoban-v0")
    with pytest.raises(ValueError, match="MultiDiscrete"):
        fusedrl.make("jumanji:JobShop-v0")
    assert "Sokoban-v0" not in _jumanji.env_names() and "Snake-v1" in _jumanji.env_names()


@pytest.fixture
def snake_grid(docs_example):
    """docs/examples/jumanji_snake_grid.py loaded (it registers "SnakeGrid-v1") for one test."""
    with docs_example("jumanji_snake_grid") as module:
        yield module


def test_ppo_smoke_run_on_snake_grid(snake_grid):
    # The learners take Box observations only: Snake's grid alone (Stoix's setup), the docs' example.
    config = fusedrl.PPOConfig(env_id="SnakeGrid-v1", num_envs=4, num_steps=16,
                               total_timesteps=4 * 16 * 3, update_epochs=1, num_minibatches=2,
                               hidden_sizes=(16,))
    result = jax.jit(fusedrl.make_train(config))(jax.random.key(0))
    for name in ("policy_loss", "value_loss", "entropy", "env_steps"):
        value = np.asarray(result.metrics[name])
        assert value.shape == (3,) and np.isfinite(value).all(), name


def test_native_stepper_steps_the_suite_with_its_auto_reset():
    init, step = _jumanji.native_stepper("Snake-v1", num_envs=3)
    carry = jax.jit(init)(jax.random.key(0))
    carry, reward = jax.jit(step)(carry, jnp.zeros(3, jnp.int32))
    assert reward.shape == (3,) and reward.dtype == jnp.float32


def test_the_suites_own_time_limit_is_off_and_ours_decides():
    # RubiksCube-partly-scrambled ends its episodes after 20 steps (discount 0); with ours at 30, the
    # episode runs on past 20 and ends, truncated, at 30 (random turns do not solve the cube).
    env, params = fusedrl.make("jumanji:RubiksCube-partly-scrambled-v0", max_steps_in_episode=30)
    assert env.default_params.max_steps_in_episode == 20

    @jax.jit
    def run(key):
        _, state = env.reset_env(key, params)

        def step(state, key):
            action = env.action_space(params).sample(key)
            _, state, _, terminated, _ = env.step_env(None, state, action, params)
            return state, (terminated, env.is_truncated(state, params))

        return jax.lax.scan(step, state, jax.random.split(key, 30))[1]

    terminated, truncated = map(np.asarray, run(jax.random.key(0)))
    assert not terminated.any()
    assert not truncated[:29].any() and truncated[29]
