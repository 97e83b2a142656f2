"""Recurrent PPO (GRU) in the run pipeline: an interrupted run resumes bit for bit from its
checkpoint, `fusedrl.sweep`'s runs equal the runs alone, and `data_parallel_train` trains one agent
whose update on shards of envs is the plain agent's update on all of them."""

import io

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fusedrl import checkpoint as ckpt
from fusedrl import runs
from fusedrl.data_parallel import data_parallel_train
from fusedrl.sweeps import sweep
from fusedrl.train import PPOConfig, make_train

# CartPole truncated at 5 steps, so the carry is reset inside every rollout.
TINY = dict(env_id="CartPole-v1", num_envs=4, num_steps=8, total_timesteps=4 * 8 * 6, update_epochs=2,
            num_minibatches=2, hidden_sizes=(16,), recurrent="gru", recurrent_size=8,
            env_params={"max_steps_in_episode": 5})
OPTIONS = dict(eval_episodes=2, progress_every=1, checkpoint_every=2)


def arrays(tree):
    def data(x):
        return jax.random.key_data(x) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) else x

    return [np.asarray(data(x)) for x in jax.tree.leaves(tree)]


def test_an_interrupted_recurrent_run_resumes_bit_for_bit(interrupt_at, tmp_path):
    config = PPOConfig(**TINY)
    full = runs.train_run(config, tmp_path / "full", progress_file=io.StringIO(), **OPTIONS)
    restore = interrupt_at(3)  # Ctrl-C once update 3's rows are logged
    with pytest.raises(KeyboardInterrupt):
        runs.train_run(config, tmp_path / "run", progress_file=io.StringIO(), **OPTIONS)
    restore()
    _, state, _, _ = ckpt.restore(tmp_path / "run" / "checkpoint", config)
    np.testing.assert_array_equal(state.update, 2)
    assert np.abs(np.asarray(state.policy_state)).max() > 0  # a carry mid-episode is saved, not zeros

    run = runs.resume_run(tmp_path / "run", progress_file=io.StringIO())
    assert run.summary["resumed_at_update"] == 2
    for a, b in zip(arrays(full.result.state), arrays(run.result.state), strict=True):
        np.testing.assert_array_equal(a, b)
    for name, value in full.result.metrics.items():
        np.testing.assert_array_equal(run.result.metrics[name], value, err_msg=name)
    assert (tmp_path / "run" / "metrics.csv").read_text() == (full.path / "metrics.csv").read_text()
    assert run.summary["eval_return_per_seed"] == full.summary["eval_return_per_seed"]


# As tests/test_sweep.py: a slice of a sweep is the single run to float32 rounding (another
# reduction order over the batched runs), not bit for bit.
TOL = dict(rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_a_recurrent_sweep_equals_its_runs_alone():
    config = PPOConfig(**{**TINY, "total_timesteps": 4 * 8 * 3})
    lrs = [1e-3, 1e-2]
    swept = sweep(config, 1, lr=lrs, key=jax.random.key(7))
    train = jax.jit(make_train(config))
    singles = {lr: train(swept.seed_keys[0], config.hparams().replace(lr=np.float32(lr))) for lr in lrs}
    for lr in lrs:
        part = swept.sel(seed=0, lr=lr)
        for name, value in singles[lr].metrics.items():
            np.testing.assert_allclose(part.metrics[name], value, err_msg=name, **TOL)
        leaves = zip(jax.tree.leaves(part.result.params), jax.tree.leaves(singles[lr].params), strict=True)
        for a, b in leaves:
            np.testing.assert_allclose(a, b, **TOL)
        np.testing.assert_allclose(part.result.state.policy_state, singles[lr].state.policy_state, **TOL)
    # The tolerance tells the runs apart.
    a, b = (jax.tree.leaves(singles[lr].params) for lr in lrs)
    assert not all(np.allclose(x, y, **TOL) for x, y in zip(a, b, strict=True))


def test_recurrent_data_parallel_update_is_the_update_of_all_envs():
    # One epoch of one minibatch: the update of 2 shards of 2 envs each (advantages normalised with
    # the pooled statistics, gradients averaged) is the plain agent's update of the 4 envs' sequences,
    # each replayed from its own carry before the rollout.
    config = PPOConfig(**{**TINY, "update_epochs": 1, "num_minibatches": 1})
    plain = make_train(config)
    dp = make_train(config.replace(num_envs=2, total_timesteps=2 * 8 * 6), axis_name="shards")
    hp = plain.default_hparams()
    state = jax.jit(plain.init)(jax.random.key(0), hp)
    venv = plain.make_env(hp)
    state = jax.jit(lambda s: plain.update_step(s, hp, venv))(state)[0]  # a carry that is not zeros
    start = state.policy_state
    after, traj = jax.jit(lambda s: plain.rollout(s, hp, venv, jax.random.key(5)))(state)
    assert np.asarray(traj.done).any()
    want = jax.jit(plain.learn_from_rollout)(after, traj, hp, start)[0]

    def halves(x, axis):  # [.., 4, ..] -> [2, .., 2, ..]: shard i holds envs 2i, 2i + 1
        return jnp.stack(jnp.split(x, 2, axis=axis))

    shards = jax.tree.map(lambda x: halves(x, 1), traj)
    both = jax.vmap(dp.learn_from_rollout, in_axes=(None, 0, None, 0), axis_name="shards")
    got = jax.jit(both)(after, shards, hp, halves(start, 0))[0]
    for a, b in zip(jax.tree.leaves(want.params), jax.tree.leaves(got.params), strict=True):
        np.testing.assert_allclose(b[0], a, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(b[1], a, rtol=1e-4, atol=1e-6)
    assert not all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(state.params),
                                                         jax.tree.leaves(want.params), strict=True))


def test_recurrent_ppo_trains_under_data_parallel_train():
    config = PPOConfig(**{**TINY, "total_timesteps": 4 * 8 * 2})
    agent = data_parallel_train(config, jax.devices()[:1], num_shards=2)(jax.random.key(0))
    assert agent.metrics["env_steps"].tolist() == [32, 64]  # both shards' envs
    assert all(np.all(np.isfinite(x)) for x in jax.tree.leaves(agent.params))
    assert not np.any(agent.metrics["env_fault"])
