"""One whole recurrent PPO update (GRU) of the trainer against a reference written here, by hand.

The episodes of the rollout checked end at different steps in different envs (CartPole with a
narrow pole-angle limit: the pole falls after a few steps, when it falls), and the rollout starts
from a carry that is not the initial one (updates ran before it). The reference:
  - runs the GRU network in float64 NumPy (flax's GRUCell equations, written out) from the carry at
    the START of the rollout, and sets an env's carry back to zeros exactly after the step where
    that env's episode ended, that env only;
  - values each step's next observation from the carry after the step (before the reset);
  - computes GAE, the clipped PPO loss and its statistics in float64, and the update's one gradient
    step (one epoch, one minibatch: the whole batch), the gradient by `jax.grad` of the same
    reference in jnp float32, the global-norm clip and Adam in float64.
It is compared with the trainer's own rollout (log-probabilities, values, the final carry) and
`Trainer.update_step` (loss statistics, the parameters' step).

Shared with the code under test: the parameters (read as arrays), the rollout's observations,
actions and done flags, and nothing else.

Wrong versions of the trainer this turns red (tried by hand, see the commit): `reset_policy_state`
resetting every env when any is done; resetting the neighbouring env (`jnp.roll` of `done`); the
update replaying from the carry after the rollout instead of before it.
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.flatten_util import ravel_pytree

from fusedrl.train import PPOConfig, make_train

CONFIG = dict(env_id="CartPole-v1", num_envs=4, num_steps=12, total_timesteps=4 * 12 * 6, update_epochs=1,
              num_minibatches=1, hidden_sizes=(16,), recurrent="gru", recurrent_size=8, lr=1e-2,
              clip_eps=0.2, ent_coef=0.01, vf_coef=0.5, max_grad_norm=0.5, gamma=0.95, gae_lambda=0.9,
              env_params={"theta_threshold_radians": 0.08})
WARMUP_UPDATES = 2
ADAM_B1, ADAM_B2, ADAM_EPS = 0.9, 0.999, 1e-5
LOSS_STATS = ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction")


def _sigmoid(x, xp):
    return 1.0 / (1.0 + xp.exp(-x))


def _dense(p, x):
    return x @ p["kernel"] + p["bias"][None] if "bias" in p else x @ p["kernel"]


def net(p, h, obs, xp):
    """One step of the recurrent actor-critic with hidden_sizes=(16,): embed (tanh), flax's GRUCell,
    then the actor and critic heads on the cell's output. (h' [B, H], logits [B, A], value [B])."""
    x = xp.tanh(_dense(p["embed_0"], obs))
    c = p["cell"]
    r = _sigmoid(_dense(c["ir"], x) + _dense(c["hr"], h), xp)
    z = _sigmoid(_dense(c["iz"], x) + _dense(c["hz"], h), xp)
    n = xp.tanh(_dense(c["in"], x) + r * _dense(c["hn"], h))
    h = (1.0 - z) * n + z * h
    return h, _dense(p["actor_head"], h), _dense(p["critic_head"], h)[:, 0]


def replay(p, h0, obs, done, xp):
    """The network over a [T, N] rollout from the carry h0 [N, H] before step 0, each env's carry
    back to zeros after the step where its episode ended. (logits [T, N, A], values [T, N],
    carries after each step before the reset [T, N, H], the carry after the last reset [N, H])."""
    h, logits, values, after = h0, [], [], []
    for t in range(obs.shape[0]):
        h, lg, v = net(p, h, obs[t], xp)
        logits.append(lg)
        values.append(v)
        after.append(h)
        h = xp.where(done[t][:, None], xp.zeros_like(h), h)
    return xp.stack(logits), xp.stack(values), xp.stack(after), h


def log_softmax(lg, xp):
    m = lg.max(axis=-1, keepdims=True)
    return lg - (m + xp.log(xp.sum(xp.exp(lg - m), axis=-1, keepdims=True)))


def ppo_loss(p, h0, obs, done, action, old_logp, old_value, adv, target, hp, normalize_adv, clip_value, xp):
    """The clipped PPO loss of the whole [T, N] batch, replayed from h0: (loss, stats dict)."""
    logits, value, _, _ = replay(p, h0, obs, done, xp)
    logp_all = log_softmax(logits, xp)
    onehot = (action[..., None] == xp.arange(logits.shape[-1])[None, None]).astype(logits.dtype)
    logp = xp.sum(logp_all * onehot, axis=-1)
    entropy = -xp.sum(xp.exp(logp_all) * logp_all, axis=-1).mean()
    log_ratio = logp - old_logp
    ratio = xp.exp(log_ratio)
    eps = hp["clip_eps"]
    if normalize_adv:
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    pg = -xp.minimum(ratio * adv, xp.clip(ratio, 1 - eps, 1 + eps) * adv).mean()
    err = (value - target) ** 2
    if clip_value:
        err = xp.maximum(err, (old_value + xp.clip(value - old_value, -eps, eps) - target) ** 2)
    v_loss = 0.5 * err.mean()
    stats = dict(policy_loss=pg, value_loss=v_loss, entropy=entropy, approx_kl=xp.mean(ratio - 1 - log_ratio),
                 clip_fraction=xp.mean((xp.abs(ratio - 1) > eps).astype(logits.dtype)))
    return pg + hp["vf_coef"] * v_loss - hp["ent_coef"] * entropy, stats


def gae(r, v, v_next, terminated, done, gamma, lam):
    """A_t = delta_t + gamma lam (1 - done_t) A_{t+1}, delta_t = r_t + gamma (1 - term_t) V(s'_t) - V(s_t)."""
    T, N = r.shape
    adv = np.zeros((T, N))
    for n in range(N):
        nxt = 0.0
        for t in reversed(range(T)):
            delta = r[t, n] + (0.0 if terminated[t, n] else gamma * v_next[t, n]) - v[t, n]
            nxt = delta + (0.0 if done[t, n] else gamma * lam * nxt)
            adv[t, n] = nxt
    return adv


def _adam_state(opt_state):
    is_adam = lambda x: isinstance(x, optax.ScaleByAdamState)  # noqa: E731
    (adam,) = [x for x in jax.tree.leaves(opt_state, is_leaf=is_adam) if is_adam(x)]
    mu, nu = (np.asarray(ravel_pytree(x)[0], np.float64) for x in (adam.mu, adam.nu))
    return mu, nu, int(adam.count)


def f64(tree):
    return jax.tree.map(lambda x: np.asarray(x, np.float64), tree)


@pytest.fixture(scope="module")
def checked():
    """(train, hp, state before the update, its rollout, the state and metrics after update_step)."""
    config = PPOConfig(**CONFIG)
    train = make_train(config)
    hp = train.default_hparams()
    venv = train.make_env(hp)
    update = jax.jit(lambda s: train.update_step(s, hp, venv))

    def rollout(state):  # as update_step draws its rollout
        key, k_roll = jax.random.split(state.key)
        return train.rollout(state.replace(key=key), hp, venv, k_roll, keep_next_obs=True)[1]

    state = jax.jit(train.init)(jax.random.key(3), hp)
    for _ in range(WARMUP_UPDATES):
        state = update(state)[0]
    traj = jax.jit(rollout)(state)
    new_state, metrics = update(state)
    return train, hp, state, traj, new_state, metrics


def test_the_rollout_checked_has_episodes_ending_at_different_steps(checked):
    _, _, state, traj, _, _ = checked
    done = np.asarray(traj.done)
    mixed = done.any(axis=1) & ~done.all(axis=1)  # steps where some envs' episodes end, not all
    assert mixed.sum() >= 3, done.T
    assert len({tuple(col) for col in done.T}) == done.shape[1], done.T  # every env its own ends
    assert np.all(np.abs(np.asarray(state.policy_state)).max(axis=1) > 0.05)  # not the initial carry


def test_the_rollout_matches_the_float64_replay_from_its_start_carry(checked):
    train, _, state, traj, new_state, _ = checked
    p, h0 = f64(state.params["params"]), np.asarray(state.policy_state, np.float64)
    done = np.asarray(traj.done)
    logits, value, _, last = replay(p, h0, np.asarray(traj.obs, np.float64), done, np)
    logp = np.take_along_axis(log_softmax(logits, np), np.asarray(traj.action)[..., None], axis=-1)[..., 0]
    np.testing.assert_allclose(traj.log_prob, logp, rtol=1e-4, atol=1e-5, err_msg="log-probs")
    np.testing.assert_allclose(traj.value, value, rtol=1e-4, atol=1e-5, err_msg="values")
    np.testing.assert_allclose(new_state.policy_state, last, rtol=1e-4, atol=1e-5, err_msg="final carry")


def test_the_update_matches_the_float64_reference(checked):
    train, hp, state, traj, new_state, metrics = checked
    c = train.config
    p = f64(state.params["params"])
    h0 = np.asarray(state.policy_state, np.float64)
    obs, done = np.asarray(traj.obs, np.float64), np.asarray(traj.done)
    action = np.asarray(traj.action)
    logits, value, after, _ = replay(p, h0, obs, done, np)
    logp = np.take_along_axis(log_softmax(logits, np), action[..., None], axis=-1)[..., 0]
    # V(s'_t) from the carry after step t (before any reset), per step.
    next_obs = np.asarray(traj.next_obs, np.float64)
    v_next = np.stack([net(p, after[t], next_obs[t], np)[2] for t in range(obs.shape[0])])
    gamma, lam = float(hp.gamma), float(hp.gae_lambda)
    reward, terminated = np.asarray(traj.reward, np.float64), np.asarray(traj.terminated)
    adv = gae(reward, value, v_next, terminated, done, gamma, lam)
    target = adv + value
    coefs = {k: float(getattr(hp, k)) for k in ("clip_eps", "vf_coef", "ent_coef")}
    args = (obs, done, action, logp, value, adv, target)
    _, stats = ppo_loss(p, h0, *args, coefs, c.normalize_adv, c.clip_value_loss, np)
    for name in LOSS_STATS:  # one step: its statistics are those of the parameters before it
        np.testing.assert_allclose(float(metrics[name]), stats[name], rtol=1e-3, atol=1e-6, err_msg=name)

    # The step: the reference's gradient (jnp float32), the global-norm clip and Adam in float64.
    def loss32(params):
        a32 = [jnp.asarray(x) if x.dtype.kind in "biu" else jnp.asarray(x, jnp.float32) for x in args]
        return ppo_loss(params, jnp.asarray(h0, jnp.float32), *a32, coefs, c.normalize_adv, c.clip_value_loss,
                        jnp)[0]

    grads = jax.jit(jax.grad(loss32))(state.params["params"])
    g = np.asarray(ravel_pytree({"params": grads})[0], np.float64)
    norm = np.sqrt(np.sum(g * g))
    assert norm > float(hp.max_grad_norm)  # the clip acts, or a clip bug would pass
    g = g * (float(hp.max_grad_norm) / norm)
    mu, nu, count = _adam_state(state.opt_state)
    count += 1
    mu = ADAM_B1 * mu + (1 - ADAM_B1) * g
    nu = ADAM_B2 * nu + (1 - ADAM_B2) * g * g
    lr = float(hp.lr) * (1.0 - WARMUP_UPDATES / c.num_updates if c.anneal_lr else 1.0)
    step = -lr * (mu / (1 - ADAM_B1**count)) / (np.sqrt(nu / (1 - ADAM_B2**count)) + ADAM_EPS)
    got = (np.asarray(ravel_pytree(new_state.params)[0], np.float64)
           - np.asarray(ravel_pytree(state.params)[0], np.float64))
    np.testing.assert_allclose(got, step, rtol=1e-2, atol=1e-3 * np.max(np.abs(step)), err_msg="params step")
