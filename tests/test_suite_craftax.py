"""The Craftax adapter (envs/_craftax.py) against Craftax itself.

Skipped when Craftax is not installed (`pip install -e ".[craftax]"`). Episode ends are checked
against Craftax's own notion, its `is_game_over` (which merges death and its time limit): death is
our termination, its time limit our truncation; the action of the step that ends an episode is
applied; resets generate fresh worlds. Craftax compiles slowly on a CPU (tens of seconds for one
step), so the tests use Craftax-Classic-Symbolic and few compiled programs.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("craftax", reason="Craftax is not installed: pip install -e \".[craftax]\"")

import fusedrl  # noqa: E402
from fusedrl.envs import _craftax as adapter  # noqa: E402
from fusedrl.envs.checks import check_env  # noqa: E402

pytestmark = [pytest.mark.suite]

CLASSIC = "craftax:Craftax-Classic-Symbolic-v1"


def test_ids_params_and_unknown_names():
    assert adapter.env_names() == ["Craftax-Symbolic-v1", "Craftax-Pixels-v1",
                                   "Craftax-Classic-Symbolic-v1", "Craftax-Classic-Pixels-v1"]
    env, params = fusedrl.make(CLASSIC, day_length=200)
    # Craftax's own params, one field added; the time limit defaults to Craftax's episode length.
    assert params.day_length == 200 and params.max_steps_in_episode == params.max_timesteps == 10_000
    assert fusedrl.make("craftax:Craftax-Symbolic-v1")[1].max_steps_in_episode == 100_000
    with pytest.raises(ValueError, match=r"did you mean 'craftax:Craftax-Classic-Symbolic-v1'"):
        fusedrl.make("craftax:Craftax-Clasic-Symbolic-v1")


@pytest.mark.parametrize("name", adapter.env_names())
def test_spaces_match_what_craftax_returns(name):
    # Traced only (jax.eval_shape): no compile.
    env, params = fusedrl.make(f"craftax:{name}")
    obs, state = jax.eval_shape(env.reset_env, jax.random.key(0), params)
    obs2, _, reward, terminated, info = jax.eval_shape(env.step_env, jax.random.key(0), state,
                                                       jnp.int32(0), params)
    space = env.observation_space(params)
    assert obs.shape == obs2.shape == space.shape and obs.dtype == obs2.dtype == space.dtype == jnp.float32
    assert env.action_space(params).n == (17 if "Classic" in name else 43)
    assert reward.dtype == jnp.float32 and terminated.dtype == jnp.bool_
    assert "Achievements/collect_wood" in info and ("score" in info) == ("Classic" in name)


@pytest.mark.slow
def test_conformance():
    counts = check_env(CLASSIC, num_envs=2, max_steps=4, num_steps=9)
    assert counts["truncations"] > 0


LIMIT = 7  # Craftax's own time-limit field, `max_timesteps`, set short
LEFT = 1  # Craftax-Classic's Action.LEFT, which also turns the player to face left (direction 1)


@pytest.fixture(scope="module")
def one_step():
    """Three envs, one step each with action LEFT: 0 dies (health 0), 1 reaches the time limit
    (facing down), 2 is as reset. One compiled program."""
    env, params = fusedrl.make(CLASSIC, max_timesteps=LIMIT)

    def run(key):
        k_reset, k_step = jax.random.split(key)
        _, state = jax.vmap(env.reset_env, in_axes=(0, None))(jax.random.split(k_reset, 3), params)
        inner = state.inner
        inner = inner.replace(player_health=inner.player_health.at[0].set(0),
                              timestep=inner.timestep.at[1].set(LIMIT - 1),
                              player_direction=inner.player_direction.at[1].set(4))
        state = state.replace(time=state.time.at[1].set(LIMIT - 1), inner=inner)
        _, new, _, terminated, _ = jax.vmap(env.step_env, in_axes=(0, 0, 0, None))(
            jax.random.split(k_step, 3), state, jnp.full(3, LEFT, jnp.int32), params)
        truncated = jax.vmap(env.is_truncated, in_axes=(0, None))(new, params)
        return state, new, terminated, truncated

    return env, params, jax.jit(run)(jax.random.key(0))


def test_termination_and_truncation_follow_craftax_is_game_over(one_step):
    from craftax.craftax_classic.game_logic import is_game_over

    _, params, (_, new, terminated, truncated) = one_step
    inner = [jax.tree.map(lambda x, i=i: x[i], new.inner) for i in range(3)]
    craftax_done = [bool(is_game_over(s, params)) for s in inner]
    assert craftax_done == [True, True, False]
    assert terminated.tolist() == [True, False, False]  # death
    assert truncated.tolist() == [False, True, False]  # Craftax's time limit: bootstrapped
    assert new.time.tolist() == [1, LIMIT, 1]


def test_the_ending_action_is_applied_and_resets_are_fresh(one_step):
    _, _, (state, new, _, _) = one_step
    assert int(new.inner.player_direction[1]) == LEFT  # the truncating step turned the player
    maps = np.asarray(state.inner.map)
    assert not np.array_equal(maps[0], maps[2]) and not np.array_equal(maps[1], maps[2])


def test_ppo_smoke_on_craftax_classic():
    config = fusedrl.PPOConfig(env_id=CLASSIC, num_envs=2, num_steps=8, total_timesteps=2 * 8 * 2,
                               update_epochs=1, num_minibatches=1, hidden_sizes=(16,))
    metrics = jax.jit(fusedrl.make_train(config))(jax.random.key(0)).metrics
    for name in ("policy_loss", "value_loss", "entropy"):
        assert np.isfinite(np.asarray(metrics[name])).all(), name


def test_native_stepper_steps_craftax_with_its_own_auto_reset():
    init, step = adapter.native_stepper("Craftax-Classic-Symbolic-v1", 2)
    carry = jax.jit(init)(jax.random.key(0))
    carry, reward = jax.jit(step)(carry, jnp.array([LEFT, 0], jnp.int32))
    assert reward.shape == (2,) and reward.dtype == jnp.float32 and np.isfinite(np.asarray(reward)).all()
    assert carry[1].timestep.tolist() == [1, 1]  # Craftax's own state, one step on
