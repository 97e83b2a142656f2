"""The MuJoCo Playground adapter (envs/_playground.py, on envs/_brax_like.py) against Playground.

Skipped when Playground is not installed (`pip install -e ".[playground]"`). Episode ends are checked
against Playground's own notions: termination is its `done` (for CartpoleBalance: NaN physics, set
here by hand), truncation is the `truncation` flag of the EpisodeWrapper its training wraps envs in;
and unlike its auto-reset (which restarts every episode from one cached first state) ours start
from fresh draws, and the action of the step that ends an episode is applied.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("mujoco_playground",
                    reason="MuJoCo Playground is not installed: pip install -e \".[playground]\"")

import fusedrl  # noqa: E402
from fusedrl import checkpoint  # noqa: E402
from fusedrl.envs import VecEnv  # noqa: E402
from fusedrl.envs import _playground as adapter  # noqa: E402
from fusedrl.envs.checks import check_env  # noqa: E402

pytestmark = [pytest.mark.suite]

CARTPOLE = "playground:CartpoleBalance"


@pytest.fixture(scope="module")
def cartpole():
    return fusedrl.make(CARTPOLE)


def test_conformance(cartpole):
    counts = check_env(cartpole[0], cartpole[1], num_envs=4, max_steps=6)
    assert counts["truncations"] > 0


def test_ids_and_errors(cartpole):
    env, params = cartpole
    assert env.suite_env.mjx_model.impl.value == "jax"
    assert params.max_steps_in_episode == 1000  # the env config's episode_length
    names = adapter.env_names()
    assert {"CartpoleBalance", "CheetahRun", "WalkerWalk"} <= set(names)
    with pytest.raises(ValueError, match=r"did you mean 'playground:CartpoleBalance'"):
        fusedrl.make("playground:CartpoleBalanse")
    if "Go1JoystickFlatTerrain" not in names:  # Menagerie not cloned: a clear error, no download
        with pytest.raises(ValueError, match=r"Go1JoystickFlatTerrain loads robot models from MuJoCo Mena"):
            fusedrl.make("playground:Go1JoystickFlatTerrain")


@pytest.mark.slow
def test_termination_is_playground_done(cartpole):
    # CartpoleBalance ends an episode early only on NaN physics: set NaN positions by hand.
    env, params = cartpole
    key = jax.random.key(1)
    action = jnp.zeros((1,))
    _, state = env.reset_env(key, params)
    step = jax.jit(env.step_env)
    obs, state, _, terminated, _ = step(None, state, action, params)
    assert not bool(terminated) and np.isfinite(np.asarray(obs)).all()
    nan = state.replace(inner=state.inner.replace(
        data=state.inner.data.replace(qpos=jnp.full_like(state.inner.data.qpos, jnp.nan))))
    with jax.numpy_rank_promotion("allow"):  # MJX's code broadcasts implicitly
        raw_done = jax.jit(env.suite_env.step)(nan.inner, action).done
    _, after, _, terminated, _ = step(None, nan, action, params)
    assert bool(terminated) and float(raw_done) == 1.0
    assert not bool(env.is_truncated(after, params))


@pytest.mark.slow
def test_truncation_matches_playground_wrapper_and_restarts_are_fresh(cartpole):
    from mujoco_playground import wrapper

    env, params = cartpole
    limit = 3
    params = params.replace(max_steps_in_episode=limit)
    vec = VecEnv(env, 1)
    action = jnp.zeros((1, 1))
    obs0, vstate = vec.reset(jax.random.key(0), params)
    ours = jax.jit(lambda s: vec.step(s, action, params))
    # Playground as its training scripts wrap it: vmapped, a 3-step EpisodeWrapper, its auto-reset.
    wrapped = wrapper.wrap_for_brax_training(env.suite_env, episode_length=limit)
    with jax.numpy_rank_promotion("allow"):  # MJX's code broadcasts implicitly
        bstate = wrapped.reset(jax.random.split(jax.random.PRNGKey(0), 1))  # Brax's wrappers: raw keys
    first_obs = bstate.obs
    theirs = jax.jit(lambda s: wrapped.step(s, action))
    starts, their_starts = [obs0], []
    for t in range(1, 3 * limit + 1):
        obs, vstate, _, term, trunc, info = ours(vstate)
        with jax.numpy_rank_promotion("allow"):
            bstate = theirs(bstate)
        assert bool(trunc[0]) == bool(bstate.info["truncation"][0]) == (t % limit == 0), t
        assert not bool(term[0])
        if trunc[0]:
            # The ending step applied its action: the final observation is one step on, not a reset.
            assert not np.allclose(info["final_observation"], starts[-1])
            starts.append(obs)
            their_starts.append(bstate.obs)
    for s in their_starts:  # Playground restarts from its cached first state; ours from fresh draws
        np.testing.assert_array_equal(s, first_obs)
    firsts = np.stack([np.asarray(s[0]) for s in starts])
    assert len({tuple(r) for r in firsts.round(7)}) == len(firsts) == 4


@pytest.mark.slow
def test_native_stepper_ppo_smoke_and_checkpoint(cartpole, tmp_path):
    init, step = adapter.native_stepper("CartpoleBalance", 2)
    carry = jax.jit(init)(jax.random.key(0))
    carry, reward = jax.jit(step)(carry, jnp.ones((2, 1)))
    assert reward.shape == (2,) and np.isfinite(np.asarray(reward)).all()

    config = fusedrl.PPOConfig(env_id=CARTPOLE, num_envs=4, num_steps=8, total_timesteps=4 * 8 * 3,
                               update_epochs=1, num_minibatches=2, hidden_sizes=(16,), normalize_obs=True)
    result = jax.jit(fusedrl.make_train(config))(jax.random.key(0))
    for name in ("policy_loss", "value_loss", "entropy"):
        assert np.isfinite(np.asarray(result.metrics[name])).all(), name
    # The run checkpoints: MJX's state holds zero-size arrays (CartpoleBalance has no contacts), which
    # orbax refuses to write; they are rebuilt from meta.json on restore.
    assert any(x.size == 0 for x in jax.tree.leaves(result.state.env_state))
    path = checkpoint.save(tmp_path / "ckpt", config, result.state, result.hparams)
    _, state, _, _ = checkpoint.restore(path, config)
    assert jax.tree.structure(state) == jax.tree.structure(result.state)
    def data(x):
        return jax.random.key_data(x) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) else x

    for a, b in zip(jax.tree.leaves(state), jax.tree.leaves(result.state), strict=True):
        np.testing.assert_array_equal(np.asarray(data(a)), np.asarray(data(b)))
