"""One whole PPO update of the trainer against a reference update written here, by hand.

The unit tests check the parts (GAE, the loss, the permutations, the schedule) one by one; this
checks how `PPO.learn_from_rollout` puts them together: GAE on the rollout, time-major flattening,
the minibatches sliced from each epoch's permutation, per-minibatch advantage normalisation, the
clipped loss and its gradient, global-norm clipping *before* Adam (eps 1e-5, bias-corrected), the
linearly annealed learning rate of the update being run, and the loss statistics it reports.

Shared with the code under test, on purpose, and nothing else:
  - the network's apply function, to evaluate the MLP (tests/test_networks.py tests it); the
    reference reads only its raw outputs (logits, or mean and log-std, and the value) and computes
    log-probabilities and entropies itself;
  - `fusedrl.train.shuffle.permutations` (tests/test_shuffle.py), with the keys derived as
    `learn_from_rollout` and `learn` derive them: `_, k_learn = split(state.key)`, then epoch e
    shuffles with `permutations(split(k_learn, update_epochs)[e], 1, batch_size)[0]`.
Everything else is below: GAE as NumPy float64 loops, the loss in jnp (differentiated with
`jax.grad`), and the gradient clip, Adam and the learning rate in NumPy float64. The inputs (the
state, with Adam's moments, and the rollout) come from the trainer's own init, rollout and updates.

The update checked is the fourth of a run (update counter 3 of 6, so the annealed rate is half of
`lr`), from the state the first three left (Adam's moments and step count are not fresh), with
episode time limits shorter than the rollout so that it holds both terminated and truncated
episodes. The hyperparameters are chosen so that every clip acts on some samples or steps (the
reference asserts it), or a bug in a branch that never runs could pass.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.flatten_util import ravel_pytree

from fusedrl.train import PPOConfig, make_train
from fusedrl.train.shuffle import permutations

WARMUP_UPDATES = 3  # updates run before the one checked: the schedule and Adam's count are not at 0
BASE = dict(num_envs=4, num_steps=16, total_timesteps=4 * 16 * 6, update_epochs=4, num_minibatches=2,
            hidden_sizes=(16, 16), lr=2e-2, clip_eps=0.02, ent_coef=0.05, vf_coef=0.5, max_grad_norm=0.5,
            gamma=0.95, gae_lambda=0.9)
# Time limits shorter than a few rollouts, so that the rollout checked has truncated episodes too;
# Pendulum's gradients are larger (its value targets are), so it clips at a larger norm.
ENVS = {"CartPole-v1": dict(env_params={"max_steps_in_episode": 20}),
        "Pendulum-v1": dict(env_params={"max_steps_in_episode": 10}, max_grad_norm=5.0)}
ADAM_B1, ADAM_B2, ADAM_EPS = 0.9, 0.999, 1e-5
LOSS_STATS = ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction")


def _config(env_id, **flags):
    return PPOConfig(**{**BASE, "env_id": env_id, **ENVS[env_id], **flags})


@functools.cache
def _learn(config):
    """The trainer's `learn_from_rollout` for `config`, jitted (compiled once per config)."""
    train = make_train(config)
    return train, train.default_hparams(), jax.jit(train.learn_from_rollout)


@functools.cache
def _state_and_rollout(env_id):
    """The state before update WARMUP_UPDATES of a run with the default flags, and its rollout.

    The flags compared (value clipping, advantage normalisation) act only in `learn_from_rollout`,
    so each case applies its own to this one state and rollout: one init and rollout to compile."""
    train, hp, learn = _learn(_config(env_id))
    venv = train.make_env(hp)
    rollout = jax.jit(lambda state, key: train.rollout(state, hp, venv, key, keep_next_obs=True))
    state = jax.jit(train.init)(jax.random.key(0), hp)
    for _ in range(WARMUP_UPDATES + 1):  # as `PPO.update_step`
        key, k_roll = jax.random.split(state.key)
        state, traj = rollout(state.replace(key=key), k_roll)
        if int(state.update) < WARMUP_UPDATES:
            state = learn(state, traj, hp)[0]
    assert int(state.update) == WARMUP_UPDATES
    return state, traj


def _adam_state(opt_state):
    """(mu, nu, count) of the trainer's Adam, the moments as one float64 vector in leaf order."""
    is_adam = lambda x: isinstance(x, optax.ScaleByAdamState)  # noqa: E731
    (adam,) = [x for x in jax.tree.leaves(opt_state, is_leaf=is_adam) if is_adam(x)]
    mu, nu = (np.asarray(ravel_pytree(x)[0], np.float64) for x in (adam.mu, adam.nu))
    return mu, nu, int(adam.count)


def _gae(r, v, v_next, terminated, done, gamma, lam):
    """A_t = delta_t + gamma lam (1 - done_t) A_{t+1}, delta_t = r_t + gamma (1 - term_t) V(s'_t) - V(s_t),
    per env, as float64 loops over [T, N]."""
    T, N = r.shape
    adv = np.zeros((T, N))
    for n in range(N):
        next_adv = 0.0  # A_T = 0: the last step bootstraps through V(s'_{T-1}) alone
        for t in reversed(range(T)):
            bootstrap = 0.0 if terminated[t, n] else gamma * v_next[t, n]
            delta = r[t, n] + bootstrap - v[t, n]
            next_adv = delta + (0.0 if done[t, n] else gamma * lam * next_adv)
            adv[t, n] = next_adv
    return adv


def _log_prob_and_entropy(pi, action, discrete):
    """log pi(a|s) [B] and H[pi(.|s)] [B] from the network's raw policy outputs."""
    if discrete:
        logp = jax.nn.log_softmax(pi.logits, axis=-1)
        chosen = jnp.take_along_axis(logp, action[:, None].astype(jnp.int32), axis=-1)[:, 0]
        return chosen, -jnp.sum(jnp.exp(logp) * logp, axis=-1)
    log_std = jnp.broadcast_to(pi.log_std, pi.mean.shape)
    z = (action - pi.mean) / jnp.exp(log_std)
    log_2pi = float(np.log(2 * np.pi))
    logp = jnp.sum(-0.5 * z * z - log_std - 0.5 * log_2pi, axis=-1)
    return logp, jnp.sum(log_std + 0.5 * (1.0 + log_2pi), axis=-1)


def reference_update(train, hp, state, traj):
    """The update `learn_from_rollout(state, traj, hp)` should make, written out step by step.

    Returns (flat float64 params, Adam (mu, nu, count), mean loss statistics, learning rate, and how
    often each clip acted)."""
    c = train.config
    apply, discrete = train.network.apply, train.discrete
    gamma, lam, eps = float(hp.gamma), float(hp.gae_lambda), float(hp.clip_eps)
    vf_coef, ent_coef, max_norm = float(hp.vf_coef), float(hp.ent_coef), float(hp.max_grad_norm)

    # GAE with the parameters that collected the rollout; targets from the raw advantages.
    f64 = lambda x: np.asarray(x, np.float64)  # noqa: E731
    value = f64(traj.value)
    v_next = f64(apply(state.params, traj.next_obs)[1])
    adv = _gae(f64(traj.reward), value, v_next, np.asarray(traj.terminated), np.asarray(traj.done),
               gamma, lam)
    target = adv + value

    # [T, N] -> [T * N], time-major: row t * N + n is env n at step t.
    T, N = traj.reward.shape
    rows = [(t, n) for t in range(T) for n in range(N)]

    def flat(x):
        x = np.asarray(x)
        return np.stack([x[t, n] for t, n in rows])

    batch = dict(obs=flat(traj.obs), action=flat(traj.action), log_prob=flat(traj.log_prob),
                 value=flat(value), adv=flat(adv), target=flat(target))

    theta, unravel = ravel_pytree(state.params)
    theta = np.asarray(theta, np.float64)
    # The gradient's parts clipped apart: the whole vector, or (clip_grad_per_network) each of
    # params["params"]["actor"] and ["critic"], by their positions in the flat vector.
    parts = [np.ones(theta.shape, bool)]
    if getattr(c, "clip_grad_per_network", False):
        critic = jax.tree_util.tree_map_with_path(
            lambda path, x: np.full(x.shape, path[1].key == "critic", np.float32), state.params)
        critic = np.asarray(ravel_pytree(critic)[0]) > 0
        parts = [~critic, critic]

    def loss(theta32, mb):
        pi, v = apply(unravel(theta32), mb["obs"])
        logp, entropy = _log_prob_and_entropy(pi, mb["action"], discrete)
        log_ratio = logp - mb["log_prob"]
        ratio = jnp.exp(log_ratio)
        # CleanRL's form: the larger of the two losses is the smaller of the two objectives.
        pg = jnp.maximum(-mb["adv"] * ratio, -mb["adv"] * jnp.clip(ratio, 1 - eps, 1 + eps)).mean()
        err = (v - mb["target"]) ** 2
        clipped_err = (mb["value"] + jnp.clip(v - mb["value"], -eps, eps) - mb["target"]) ** 2
        v_loss = 0.5 * (jnp.maximum(err, clipped_err) if c.clip_value_loss else err).mean()
        h = entropy.mean()
        stats = dict(policy_loss=pg, value_loss=v_loss, entropy=h,
                     approx_kl=jnp.mean(ratio - 1 - log_ratio),
                     clip_fraction=jnp.mean(jnp.abs(ratio - 1) > eps),
                     value_clips=jnp.sum(clipped_err > err))
        return pg + vf_coef * v_loss - ent_coef * h, stats

    grad = jax.jit(jax.grad(loss, has_aux=True))

    # The rate of this update: lr (1 - update / num_updates), the same for all its steps.
    lr = float(hp.lr) * (max(1.0 - int(state.update) / c.num_updates, 0.0) if c.anneal_lr else 1.0)
    mu, nu, count = _adam_state(state.opt_state)
    _, k_learn = jax.random.split(state.key)
    epoch_keys = jax.random.split(k_learn, c.update_epochs)
    size = c.batch_size // c.num_minibatches
    stats, norms = [], []
    for e in range(c.update_epochs):
        perm = np.asarray(permutations(epoch_keys[e], 1, c.batch_size)[0])
        for j in range(c.num_minibatches):
            idx = perm[j * size:(j + 1) * size]
            mb = {k: x[idx] for k, x in batch.items()}
            if c.normalize_adv:  # over this minibatch, population std
                mb["adv"] = (mb["adv"] - mb["adv"].mean()) / (mb["adv"].std() + 1e-8)
            mb = {k: jnp.asarray(x, jnp.int32 if k == "action" and discrete else jnp.float32)
                  for k, x in mb.items()}
            g, s = grad(jnp.asarray(theta, jnp.float32), mb)
            stats.append({k: float(x) for k, x in s.items()})
            g = np.asarray(g, np.float64)
            for part in parts:  # clip the gradient (each part apart), then Adam
                norms.append(np.sqrt(np.sum(g[part] ** 2)))
                if norms[-1] > max_norm:
                    g[part] = g[part] * (max_norm / norms[-1])
            count += 1
            mu = ADAM_B1 * mu + (1 - ADAM_B1) * g
            nu = ADAM_B2 * nu + (1 - ADAM_B2) * g * g
            m_hat, v_hat = mu / (1 - ADAM_B1**count), nu / (1 - ADAM_B2**count)
            theta = theta - lr * m_hat / (np.sqrt(v_hat) + ADAM_EPS)
    means = {k: np.mean([s[k] for s in stats]) for k in LOSS_STATS}
    clips = dict(ratio=sum(s["clip_fraction"] for s in stats), value=sum(s["value_clips"] for s in stats),
                 grad=sum(n > max_norm for n in norms), steps=len(stats), grad_norms=norms)
    return theta, (mu, nu, count), means, lr, clips


CASES = [
    pytest.param("CartPole-v1", dict(), id="CartPole"),
    # Raw advantages: larger gradients, so a larger norm for some steps to be clipped and some not.
    pytest.param("CartPole-v1", dict(clip_value_loss=False, normalize_adv=False, max_grad_norm=3.5),
                 id="CartPole-no_value_clip-no_adv_norm"),
    pytest.param("Pendulum-v1", dict(), id="Pendulum"),
]


@pytest.mark.parametrize("env_id, flags", CASES)
def test_one_update_matches_a_reference_written_by_hand(env_id, flags):
    config = _config(env_id, **flags)
    state, traj = _state_and_rollout(env_id)
    train, hp, learn = _learn(config)
    new_state, metrics = learn(state, traj, hp)
    done, terminated = np.asarray(traj.done), np.asarray(traj.terminated)
    assert (done & ~terminated).any()  # a time limit ends some episode: GAE bootstraps there
    if env_id == "CartPole-v1":
        assert terminated.any()  # and the pole falls in some: GAE must not bootstrap there

    theta, (mu, nu, count), means, lr, clips = reference_update(train, hp, state, traj)
    # Every branch of the update acts in this update, or the comparison would not see it.
    assert 0 < clips["ratio"] and 0 < clips["grad"] < clips["steps"], clips
    if config.clip_value_loss:
        assert clips["value"] > 0, clips

    # The step taken, new - old, compared to its own size: the parameters are O(1), the step
    # O(lr), so comparing the parameters alone would hide a step off by a few percent.
    theta0 = np.asarray(ravel_pytree(state.params)[0], np.float64)
    step = np.asarray(ravel_pytree(new_state.params)[0], np.float64) - theta0
    scale = np.max(np.abs(theta - theta0))
    np.testing.assert_allclose(step, theta - theta0, rtol=1e-3, atol=1e-4 * scale, err_msg="params step")
    got_mu, got_nu, got_count = _adam_state(new_state.opt_state)
    assert got_count == count == (WARMUP_UPDATES + 1) * config.update_epochs * config.num_minibatches
    np.testing.assert_allclose(got_mu, mu, rtol=1e-3, atol=1e-4 * np.max(np.abs(mu)), err_msg="Adam mu")
    np.testing.assert_allclose(got_nu, nu, rtol=1e-3, atol=1e-4 * np.max(nu), err_msg="Adam nu")

    for name in LOSS_STATS:
        np.testing.assert_allclose(float(metrics[name]), means[name], rtol=1e-4, atol=1e-6, err_msg=name)
    assert lr == pytest.approx(float(hp.lr) * (1 - WARMUP_UPDATES / config.num_updates))
    np.testing.assert_allclose(float(metrics["learning_rate"]), lr, rtol=1e-6)
    assert int(metrics["gradient_steps"]) == clips["steps"]
    assert int(new_state.update) == WARMUP_UPDATES + 1
