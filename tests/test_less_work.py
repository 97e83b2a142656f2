"""Less work per sample, same math: each rewrite of a hot path against the computation it replaced.

- The minibatches (`minibatch_epochs`) are consecutive slices of one permutation of the batch per
  epoch, in order: the update is bit-identical to the one written here (a gather by index inside the
  minibatch loop was tried against it and taken out again: docs/gpu.md).
- The rollout values each step's next observation (before any auto-reset) where the step makes it,
  and checks it for NaN and inf there, instead of storing it as `next_obs` for the targets to value
  in one batched call over [T * N]: the same values up to float rounding (the matmuls' batch size
  changes), the same env faults, and one observation per transition fewer in the trajectory.
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import struct

import fusedrl
from fusedrl.envs import Box, Discrete
from fusedrl.envs.base import Environment, EnvParams, EnvState
from fusedrl.train import PPOConfig, make_train
from fusedrl.train.advantages import gae_targets
from fusedrl.train.losses import Batch
from fusedrl.train.shuffle import permutations
from fusedrl.train.tuning import Tuning
from fusedrl.train.update import minibatch_epochs

pytestmark = pytest.mark.timeout(300)


def _permuted_copy_epochs(loss_fn, optimizer, params, opt_state, batch, key, *, epochs, minibatches):
    """The update written out: each epoch permutes a copy of the batch, cut into consecutive minibatches."""
    batch_size = jax.tree.leaves(batch)[0].shape[0]
    grad_fn = jax.grad(loss_fn, has_aux=True)

    def step(carry, mb):
        params, opt_state = carry
        grads, stats = grad_fn(params, batch=mb)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), stats

    def epoch(carry, k):
        perm = permutations(k, 1, batch_size)[0]
        shuffled = jax.tree.map(lambda x: x[perm].reshape((minibatches, -1) + x.shape[1:]), batch)
        return jax.lax.scan(step, carry, shuffled)

    (params, opt_state), stats = jax.lax.scan(epoch, (params, opt_state), jax.random.split(key, epochs))
    return params, opt_state, jax.tree.map(jnp.mean, stats)


def _linear_loss(params, batch):
    """A loss whose gradient depends on which rows are in the minibatch and on their order only
    through sums: a weighted regression of `target` on `obs`, and the policy's log-prob term."""
    pred = batch.obs @ params["w"] + params["b"]
    err = jnp.square(pred - batch.target) * (1.0 + batch.advantage)
    lp = batch.log_prob * pred
    loss = err.mean() - 0.1 * lp.mean()
    return loss, {"err": err.mean(), "first": batch.obs[0, 0]}


def test_minibatches_are_consecutive_slices_of_each_epochs_permutation():
    keys = jax.random.split(jax.random.key(0), 6)
    n, d = 48, 5
    batch = Batch(obs=jax.random.normal(keys[0], (n, d)), action=jnp.arange(n),
                  log_prob=jax.random.normal(keys[1], (n,)), value=jax.random.normal(keys[2], (n,)),
                  advantage=jax.random.uniform(keys[3], (n,)), target=jax.random.normal(keys[4], (n,)))
    params = {"w": jnp.ones((d,)) * 0.1, "b": jnp.zeros(())}
    optimizer = optax.adam(0.05)
    sizes = dict(epochs=3, minibatches=4)
    ours = jax.jit(lambda p, b, k: minibatch_epochs(_linear_loss, optimizer, p, optimizer.init(p), b, k,
                                                    **sizes))
    ref = jax.jit(lambda p, b, k: _permuted_copy_epochs(_linear_loss, optimizer, p, optimizer.init(p), b, k,
                                                        **sizes))
    got, want = ours(params, batch, keys[5]), ref(params, batch, keys[5])
    for a, b in zip(jax.tree.leaves(got[:3]), jax.tree.leaves(want[:3]), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert int(got[3]) == 12
    assert not np.allclose(np.asarray(got[0]["w"]), 0.1)  # the update moved the parameters


# ------------------------------------------------------------------ next observations in the rollout
def _rollout(recurrent, env_id="CartPole-v1", **env_params):
    """(trainer, params, policy state before the rollout, its [T, N] transitions with next_obs kept,
    the transitions' shapes as the trainer's own rollout makes them)."""
    config = PPOConfig(env_id=env_id, num_envs=4, num_steps=40, total_timesteps=4 * 40, num_minibatches=1,
                       update_epochs=1, hidden_sizes=(16, 16), recurrent=recurrent, recurrent_size=8,
                       env_params=env_params)
    train = make_train(config, tuning=Tuning(value_in_rollout=True))
    hp = train.default_hparams()
    venv = train.make_env(hp)

    @jax.jit
    def roll(key):
        state = train.init(key, hp)
        return state.params, state.policy_state, train.rollout(state, hp, venv, key, keep_next_obs=True)[1]

    plain = jax.eval_shape(lambda k: train.rollout(train.init(k, hp), hp, venv, k)[1], jax.random.key(0))
    return (train, hp, *roll(jax.random.key(1)), plain)


@pytest.mark.parametrize("recurrent", [None, "gru"])
def test_the_rollout_values_the_next_observations_as_the_targets_did(recurrent):
    """CartPole under a 12-step time limit (truncations, whose bootstrap is V of the pre-reset
    observation, and terminations): the rollout's `next_value` is what the targets computed before
    from the stored `next_obs` (V over all [T * N] at once; a recurrent policy's from its carry after
    each step, by replaying the rollout), and so are the advantages."""
    train, hp, params, start, traj, plain = _rollout(recurrent, max_steps_in_episode=12)
    done, term = np.asarray(traj.done), np.asarray(traj.terminated)
    assert (done & ~term).any() and term.any()  # both kinds of episode end
    T, N = traj.reward.shape
    if recurrent is None:
        before = train.network.apply(params, traj.next_obs.reshape(T * N, -1))[1].reshape(T, N)
    else:  # the replay the targets ran (kept for rollouts that give next_obs: the host bridge's)
        before = train.next_values(params, traj._replace(next_value=None), start)
    np.testing.assert_allclose(traj.next_value, before, rtol=1e-6, atol=1e-6)
    # Where an episode ended, the value is of its final observation, not of the reset one acted on next.
    next_value, acted_next, ended = np.asarray(traj.next_value)[:-1], np.asarray(traj.value)[1:], done[:-1]
    np.testing.assert_allclose(next_value[~ended], acted_next[~ended], rtol=1e-6, atol=1e-6)
    assert np.abs(next_value[ended] - acted_next[ended]).min() > 1e-4
    adv, target = jax.jit(lambda p, t: train.advantages(p, t, hp, start))(params, traj)
    want_adv, want_target = gae_targets(traj, before, hp)
    np.testing.assert_allclose(adv, want_adv, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(target, want_target, rtol=1e-5, atol=1e-6)
    # The trainer's own rollout with the choice on does not keep the next observations; by default
    # (the choice off: docs/gpu.md) it keeps them for the targets and values none in the rollout.
    assert plain.next_obs is None and plain.next_value.shape == (T, N)
    default = make_train(train.config)
    assert default.tuning.value_in_rollout is False
    kept = jax.eval_shape(lambda k: default.rollout(default.init(k, hp), hp, default.make_env(hp), k)[1],
                          jax.random.key(0))
    assert kept.next_value is None and kept.next_obs is not None


@struct.dataclass
class _EndState(EnvState):
    time: jax.Array  # [] int32 steps taken in the episode


class NaNAtTheEnd(Environment):
    """Discrete(2); the episode terminates at its 5th step, whose (final) observation [2] is NaN; the
    reset observation and every other one are finite, so only the pre-reset observation is broken."""

    @property
    def default_params(self):
        return EnvParams(max_steps_in_episode=100)

    def action_space(self, params=None):
        return Discrete(2)

    def observation_space(self, params):
        return Box(-1.0, 1.0, (2,), jnp.float32)

    def reset_env(self, key, params):
        state = _EndState(time=jnp.int32(0))
        return self.get_obs(state), state

    def step_env(self, key, state, action, params):
        state = state.replace(time=state.time + 1)
        return self.get_obs(state), state, jnp.float32(1.0), state.time >= 5, {}

    def get_obs(self, state, params=None, key=None):
        t = state.time.astype(jnp.float32) / 10.0
        return jnp.where(state.time >= 5, jnp.nan, jnp.stack([t, -t]))

    def is_terminated(self, state, params):
        return state.time >= 5


fusedrl.register("lesswork:NaNAtTheEnd-v0", NaNAtTheEnd)


def test_a_nan_in_a_final_observation_alone_is_flagged_as_before():
    """An env whose only non-finite observations are the final ones of its episodes (never acted on):
    the broken-env check flags the observation from the rollout's per-step check as it did from the
    stored next_obs, and the targets stay finite (a terminated step does not bootstrap)."""
    train, hp, params, _, traj, _ = _rollout(None, env_id="lesswork:NaNAtTheEnd-v0")
    assert np.isfinite(np.asarray(traj.obs)).all() and np.isnan(np.asarray(traj.next_obs)).any()
    new = int(train.env_fault(traj._replace(next_obs=None)))
    old = int(train.env_fault(traj._replace(next_nonfinite=None)))
    assert new == old == 1 << train.fault_fields.index("observation")
    adv, _ = train.advantages(params, traj._replace(next_obs=None), hp)
    assert np.isfinite(np.asarray(adv)).all()
