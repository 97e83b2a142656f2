"""A2C (`fusedrl.A2CConfig`): its loss, gradients and n-step targets against NumPy references, the
guarantees of DESIGN.md on the shared skeleton, its config errors, and learning CartPole."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fusedrl
from fusedrl.distributions import Categorical
from fusedrl.train import A2CConfig, PPOConfig, ReinforceConfig, make_train
from fusedrl.train.a2c import A2C_ALGORITHM, one_step_optimizer
from fusedrl.train.advantages import gae_targets
from fusedrl.train.config import Hyperparams
from fusedrl.train.losses import Batch, policy_gradient_loss
from fusedrl.train.rollout import Transition

SMALL = dict(env_id="CartPole-v1", num_envs=4, num_steps=5, total_timesteps=4 * 5 * 6, hidden_sizes=(16,))


# ------------------------------------------------------------------------------- loss, targets
def _apply(params, obs):
    """A stand-in network: the policy's logits and the values are the parameters themselves."""
    return Categorical(params["logits"]), params["value"]


def _case(B=48, K=3):
    rng = np.random.default_rng(0)
    logits = rng.normal(0, 1.0, (B, K)).astype(np.float32)
    action = rng.integers(0, K, B).astype(np.int32)
    log_prob_old = (logits[np.arange(B), action] - np.log(np.exp(logits).sum(-1))
                    - rng.uniform(-0.3, 0.3, B)).astype(np.float32)
    value = rng.normal(0, 1, B).astype(np.float32)
    adv = rng.normal(0.5, 2.0, B).astype(np.float32)
    target = (value + rng.normal(0, 1, B)).astype(np.float32)
    batch = Batch(obs=jnp.zeros((B, 1)), action=jnp.asarray(action), log_prob=jnp.asarray(log_prob_old),
                  value=jnp.asarray(value - 0.3), advantage=jnp.asarray(adv), target=jnp.asarray(target))
    params = {"logits": jnp.asarray(logits), "value": jnp.asarray(value)}
    return params, batch


def _reference(params, batch, vf, ent, normalize_adv):
    """The A2C loss, its statistics and its gradient in float64; the gradient in closed form:
    d(-mean(logp A))/dz_i = -A_i (onehot(a_i) - p_i) / B, dH_i/dz_i = -p_i (log p_i + H_i),
    d(0.5 mean((v - t)^2))/dv_i = (v_i - t_i) / B."""
    z = np.asarray(params["logits"], np.float64)
    v = np.asarray(params["value"], np.float64)
    a = np.asarray(batch.action)
    B, K = z.shape
    logp_all = z - np.log(np.exp(z).sum(-1, keepdims=True))
    p = np.exp(logp_all)
    logp = logp_all[np.arange(B), a]
    adv = np.asarray(batch.advantage, np.float64)
    if normalize_adv:
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    t = np.asarray(batch.target, np.float64)
    h = -(p * logp_all).sum(-1)
    pg, vl = -np.mean(logp * adv), 0.5 * np.mean((v - t) ** 2)
    log_ratio = logp - np.asarray(batch.log_prob, np.float64)
    stats = dict(policy_loss=pg, value_loss=vl, entropy=h.mean(),
                 approx_kl=np.mean(np.exp(log_ratio) - 1 - log_ratio), clip_fraction=0.0)
    onehot = np.eye(K)[a]
    g_logits = -(adv[:, None] * (onehot - p)) / B - ent * (-p * (logp_all + h[:, None])) / B
    g_value = vf * (v - t) / B
    return pg + vf * vl - ent * h.mean(), stats, {"logits": g_logits, "value": g_value}


@pytest.mark.parametrize("normalize_adv", [False, True])
def test_a2c_loss_and_gradient_match_numpy_reference(normalize_adv):
    params, batch = _case()
    vf, ent = 0.5, 0.01
    fn = jax.value_and_grad(policy_gradient_loss, has_aux=True)
    (loss, stats), grads = fn(params, _apply, batch, vf_coef=jnp.float32(vf), ent_coef=jnp.float32(ent),
                              normalize_adv=normalize_adv)
    want_loss, want_stats, want_grads = _reference(params, batch, vf, ent, normalize_adv)
    np.testing.assert_allclose(float(loss), want_loss, rtol=1e-5, atol=1e-6)
    for name, w in want_stats.items():
        np.testing.assert_allclose(float(getattr(stats, name)), w, rtol=1e-4, atol=1e-6, err_msg=name)
    for name, w in want_grads.items():
        np.testing.assert_allclose(np.asarray(grads[name]), w, rtol=1e-4, atol=1e-7, err_msg=name)


def test_a2c_targets_are_n_step_returns_at_lambda_one():
    # One env, 6 steps: a termination at t=1 (no bootstrap), a truncation at t=3 (bootstraps from
    # V of its final observation), and the rollout's end at t=5 (bootstraps from V of the next).
    r = np.array([1.0, 2.0, 0.5, 1.5, -1.0, 3.0])
    v = np.array([0.3, -0.2, 0.7, 0.1, 0.4, -0.5])
    # V of each next observation: the next step's V within an episode; 9 after the termination
    # (must not be used), 2 for the truncated episode's final observation, 4 after the rollout.
    v_next = np.array([v[1], 9.0, v[3], 2.0, v[5], 4.0])
    term = np.array([False, True, False, False, False, False])
    done = np.array([False, True, False, True, False, False])
    g = 0.9
    want = np.zeros(6)
    nxt = 0.0
    for t in reversed(range(6)):
        boot = 0.0 if term[t] else v_next[t]
        nxt = r[t] + g * (boot if (done[t] or t == 5) else nxt)
        want[t] = nxt
    col = lambda x, dt=jnp.float32: jnp.asarray(x, dt)[:, None]  # noqa: E731  [T, 1]
    traj = Transition(obs=None, action=None, log_prob=None, value=col(v), reward=col(r),
                      terminated=col(term, bool), done=col(done, bool), next_obs=None, episode_done=None,
                      episode_return=None, episode_length=None)
    hp = A2CConfig(gamma=g).hparams(env_params=None)
    adv, target = A2C_ALGORITHM.targets(traj, col(v_next), hp)
    assert A2C_ALGORITHM.targets is gae_targets and hp.gae_lambda == 1.0  # n-step returns by default
    np.testing.assert_allclose(np.asarray(target[:, 0]), want, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(adv[:, 0]), want - v, rtol=1e-5, atol=1e-6)


def test_rmsprop_is_pytorchs_uncentered_with_eps_outside_the_root():
    # PyTorch's RMSprop (SB3's A2C): avg = alpha avg + (1 - alpha) g^2 from 0;
    # step = lr g / (sqrt(avg) + eps).
    c = A2CConfig(max_grad_norm=float("inf"), rmsprop_eps=0.1)
    hp = c.hparams(env_params=None)
    opt = one_step_optimizer(c, hp)
    p = {"w": jnp.zeros(3)}
    state = opt.init(p)
    avg = np.zeros(3)
    for g in ([1.0, -2.0, 0.5], [0.3, 0.3, -4.0]):
        upd, state = opt.update({"w": jnp.asarray(g, jnp.float32)}, state, p)
        avg = 0.99 * avg + 0.01 * np.square(g)
        np.testing.assert_allclose(np.asarray(upd["w"]), -7e-4 * np.asarray(g) / (np.sqrt(avg) + 0.1),
                                   rtol=1e-5)
    adam = one_step_optimizer(c.replace(optimizer="adam"), hp)  # Adam's first step: -lr g / (|g| + eps)
    upd, _ = adam.update({"w": jnp.asarray([1.0, -2.0, 0.5])}, adam.init(p), p)
    np.testing.assert_allclose(np.asarray(upd["w"]), -7e-4 * np.sign([1.0, -2.0, 0.5]), rtol=1e-4)


# --------------------------------------------------------------------------------- guarantees
@pytest.fixture(scope="module")
def small():
    config = A2CConfig(**SMALL)
    train = make_train(config)
    jitted = jax.jit(train)
    return config, train, jitted, jitted(jax.random.key(0))


def test_make_train_dispatches_on_the_config_type(small):
    config, train, _, result = small
    assert train.algorithm is A2C_ALGORITHM
    m = result.metrics
    assert m["policy_loss"].shape == (config.num_updates,)
    np.testing.assert_array_equal(m["gradient_steps"], 1)  # one step per rollout
    np.testing.assert_array_equal(m["clip_fraction"], 0.0)
    np.testing.assert_allclose(m["learning_rate"], 7e-4)
    assert set(m) == {*fusedrl.train.METRIC_NAMES, "env_fault"}
    with pytest.raises(TypeError, match="A2CConfig, ReinforceConfig"):
        make_train(dict(SMALL))


def test_same_key_bit_identical_and_no_host_transfers(small):
    config, _, jitted, result = small
    again = jax.jit(make_train(config))(jax.random.key(0))  # a fresh compile too
    chex.assert_trees_all_equal(result.metrics, again.metrics)
    chex.assert_trees_all_equal(result.params, again.params)
    key = jax.random.key(1)
    with jax.transfer_guard("disallow"):
        other = jax.block_until_ready(jitted(key))
    assert not np.array_equal(other.metrics["policy_loss"], result.metrics["policy_loss"])
    # The guard sees transfers of arguments and results, not host callbacks inside the program.
    assert "callback" not in jitted.lower(key).as_text()


def test_vmap_over_seeds_and_hyperparameters_traces_once(small):
    config, train, jitted, _ = small
    # The counter is keyed by the method's hash, which a trainer of another test file, collected,
    # may have left at this address: start from 0.
    chex.clear_trace_counter()
    traced = chex.assert_max_traces(train.__call__, n=1)
    fn = jax.jit(jax.vmap(traced))
    keys = jax.random.split(jax.random.key(0), 3)
    hp = jax.tree.map(lambda x: jnp.stack([x] * 3), config.hparams())
    out = fn(keys, hp)
    out2 = fn(jax.random.split(jax.random.key(1), 3), hp.replace(lr=jnp.array([1e-3, 1e-2, 1e-4]),
                                                                  gae_lambda=jnp.array([1.0, 0.9, 0.5])))
    assert out.metrics["policy_loss"].shape == (3, config.num_updates)
    np.testing.assert_allclose(out2.metrics["learning_rate"][:, 0], [1e-3, 1e-2, 1e-4], rtol=1e-6)
    np.testing.assert_allclose(out.metrics["episode_return"][1], jitted(keys[1]).metrics["episode_return"],
                               rtol=1e-4)


def test_resume_continues_the_same_run(small):
    config, train, _, result = small
    hp = config.hparams()
    run3 = jax.jit(lambda s: train.run(s, hp, 3))
    half = run3(jax.jit(train.init)(jax.random.key(0), hp))
    rest = run3(half.state)
    joined = np.concatenate([half.metrics["policy_loss"], rest.metrics["policy_loss"]])
    np.testing.assert_allclose(joined, result.metrics["policy_loss"], rtol=1e-5, atol=1e-7)
    chex.assert_trees_all_close(rest.params, result.params, rtol=1e-5, atol=1e-7)


def test_memory_does_not_grow_with_total_timesteps():
    def out_bytes(total):
        config = A2CConfig(**{**SMALL, "total_timesteps": total})
        shapes = jax.eval_shape(make_train(config), jax.random.key(0))
        state = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(shapes.state))
        metrics = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(shapes.metrics))
        return state, metrics, config.num_updates

    s1, m1, n1 = out_bytes(20 * 10)
    s2, m2, n2 = out_bytes(20 * 10_000)
    assert s1 == s2
    assert m2 / m1 == n2 / n1


# ------------------------------------------------------------------------------------ config
@pytest.mark.parametrize("config_cls, kwargs, exc, words", [
    (A2CConfig, dict(clip_eps=0.2), TypeError,
     ["A2CConfig has no field 'clip_eps'", "field of PPOConfig", "A2C has no clipping"]),
    (A2CConfig, dict(update_epochs=4), TypeError,
     ["update_epochs", "one gradient step per rollout", "PPOConfig"]),
    (A2CConfig, dict(baseline=False), TypeError, ["baseline", "field of ReinforceConfig"]),
    (A2CConfig, dict(optimizer="sgd"), ValueError, ["optimizer must be 'rmsprop' or 'adam'", "'sgd'"]),
    (ReinforceConfig, dict(optimizer="RMSprop", num_steps=500), ValueError,
     ["optimizer must be 'rmsprop' or 'adam'", "'RMSprop'"]),
    (A2CConfig, dict(rmsprop_alpha=1.0), ValueError, ["rmsprop_alpha", "[0, 1)"]),
    (A2CConfig, dict(rmsprop_eps=0.0), ValueError, ["rmsprop_eps", "> 0"]),
    (A2CConfig, dict(gae_lambda=1.5), ValueError, ["gae_lambda", "[0, 1]"]),
    (A2CConfig, dict(lr=0.0), ValueError, ["lr", "> 0"]),
    (A2CConfig, dict(num_steps=0), ValueError, ["num_steps", "positive"]),
    (A2CConfig, dict(normalize_adv=1), TypeError, ["normalize_adv", "True or False"]),
    (A2CConfig, dict(bootstrap_truncation="no"), TypeError, ["bootstrap_truncation", "True or False"]),
    (A2CConfig, dict(lrr=1e-3), TypeError, ["'lrr'", "Did you mean 'lr'"]),
    (A2CConfig, dict(num_envs=1, num_steps=1, normalize_adv=True, total_timesteps=10), ValueError,
     ["batch of one transition", "normalize_adv=False"]),
    (PPOConfig, dict(optimizer="adam"), TypeError, ["PPOConfig has no field 'optimizer'", "PPO uses Adam"]),
])
def test_config_errors_name_the_field_and_the_fix(config_cls, kwargs, exc, words):
    with pytest.raises(exc) as info:
        config_cls(**kwargs)
    for w in words:
        assert w in str(info.value), (w, str(info.value))


def test_config_defaults_roundtrip_and_docstring():
    c = A2CConfig()
    assert (c.num_envs, c.num_steps, c.lr, c.gamma, c.gae_lambda, c.ent_coef, c.vf_coef, c.max_grad_norm,
            c.optimizer, c.rmsprop_alpha, c.rmsprop_eps, c.normalize_adv, c.anneal_lr) == (
        8, 5, 7e-4, 0.99, 1.0, 0.0, 0.5, 0.5, "rmsprop", 0.99, 1e-5, False, False)  # SB3's A2C
    assert A2CConfig.from_dict(c.to_dict()) == c and hash(c) == hash(A2CConfig.from_dict(c.to_dict()))
    assert fusedrl.train.CONFIGS[c.algo] is A2CConfig
    hp = c.hparams(env_params=None)
    assert isinstance(hp, Hyperparams) and hp.names == ("lr", "gamma", "gae_lambda", "ent_coef", "vf_coef",
                                                         "max_grad_norm")
    with pytest.raises(TypeError, match="static A2CConfig field"):
        hp.replace(rmsprop_alpha=0.9)
    import dataclasses
    import re
    described = re.findall(r"^      (\w+(?:, \w+)*):", A2CConfig.__doc__.split("Fields:")[1], re.MULTILINE)
    assert {n for e in described for n in e.split(", ")} == {f.name for f in dataclasses.fields(A2CConfig)}


# ---------------------------------------------------------------------------------- learning
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a2c_learns_cartpole():
    # The CartPole-v1 preset on a smaller budget, 4 seeds at once; greedy evaluation, 32 episodes per
    # seed. A random policy scores about 22.
    config = fusedrl.preset("CartPole-v1", algo="a2c", total_timesteps=100_000)
    out = jax.jit(jax.vmap(make_train(config)))(jax.random.split(jax.random.key(0), 4))
    returns = np.asarray(fusedrl.evaluate(config, out, jax.random.key(1), num_episodes=32)).mean(-1)
    assert returns.mean() >= 200, returns  # measured 416 (per seed 500, 165, 500, 500)
