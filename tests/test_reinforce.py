"""REINFORCE (`fusedrl.ReinforceConfig`): returns-to-go with episode ends and rollout boundaries,
its weighted loss and gradients against NumPy references, the guarantees of DESIGN.md on the shared
skeleton, its config errors, and learning CartPole."""

import dataclasses
import re

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fusedrl
from fusedrl.distributions import Categorical
from fusedrl.train import ReinforceConfig, make_train
from fusedrl.train.advantages import returns_to_go
from fusedrl.train.losses import Batch, policy_gradient_loss
from fusedrl.train.reinforce import REINFORCE_ALGORITHM
from fusedrl.train.rollout import Transition

# A time limit of 20 steps, so that 20-step rollouts are allowed (num_steps >= the limit).
SMALL = dict(env_id="CartPole-v1", num_envs=4, num_steps=20, total_timesteps=4 * 20 * 6, hidden_sizes=(16,),
             env_params={"max_steps_in_episode": 20})


# ------------------------------------------------------------------------------ returns-to-go
def _rtg_reference(r, done, gamma):
    """Returns-to-go by summing forward from each step to its episode's end; None where the
    episode does not end within the trajectory."""
    out = []
    for t in range(len(r)):
        g, k = 0.0, t
        while k < len(r):
            g += gamma ** (k - t) * r[k]
            if done[k]:
                break
            k += 1
        out.append(g if k < len(r) else None)
    return out


def test_returns_to_go_stop_at_episode_ends_and_mark_the_unfinished_episode():
    # Episode ends at t=2 (a termination) and t=5 (a time-limit truncation: it ends the return the
    # same way); steps 6..7 belong to an episode that continues into the next rollout.
    r = np.array([1.0, 2.0, 3.0, 0.5, -1.0, 2.0, 4.0, 1.0], np.float32)
    done = np.array([0, 0, 1, 0, 0, 1, 0, 0], bool)
    g, complete = returns_to_go(jnp.asarray(r), jnp.asarray(done), jnp.float32(0.9))
    want = _rtg_reference(r, done, 0.9)
    np.testing.assert_array_equal(np.asarray(complete), [w is not None for w in want])
    got = np.asarray(g)[np.asarray(complete)]
    np.testing.assert_allclose(got, [w for w in want if w is not None], rtol=1e-6)
    np.testing.assert_allclose(float(g[0]), 1 + 0.9 * 2 + 0.81 * 3, rtol=1e-6)  # by hand
    np.testing.assert_allclose(float(g[3]), 0.5 - 0.9 + 0.81 * 2, rtol=1e-6)  # truncation: no bootstrap


@pytest.mark.parametrize("T", [41, 128])
def test_returns_to_go_match_the_reference_past_one_unrolled_iteration(T):
    """The recursion runs `BACKWARD_UNROLL` steps per loop iteration: over several iterations and a
    remainder (T = 41) every complete return still matches the float64 reference."""
    from fusedrl.train.advantages import BACKWARD_UNROLL

    assert T > 2 * BACKWARD_UNROLL
    rng = np.random.default_rng(T)
    r = rng.normal(size=T).astype(np.float32)
    done = rng.random(T) < 0.1
    done[T // 2] = True  # at least one end before the last unrolled iteration
    g, complete = jax.jit(returns_to_go)(jnp.asarray(r), jnp.asarray(done), jnp.float32(0.9))
    want = _rtg_reference(r.astype(np.float64), done, 0.9)
    np.testing.assert_array_equal(np.asarray(complete), [w is not None for w in want])
    np.testing.assert_allclose(np.asarray(g)[np.asarray(complete)], [w for w in want if w is not None],
                               rtol=1e-5, atol=1e-5)


def test_an_episode_crossing_the_rollout_boundary_gets_weight_zero_then_exact_returns():
    # Two envs, two consecutive rollouts of 4 steps. Env 0's second episode starts at t=2 of the first
    # rollout and ends at t=1 of the second; env 1 ends an episode at the last step of the first.
    r1 = np.array([[1, 1], [1, 2], [1, 3], [1, 4]], np.float32)
    d1 = np.array([[0, 0], [1, 0], [0, 0], [0, 1]], bool)
    r2 = np.array([[5, 1], [6, 1], [7, 1], [8, 1]], np.float32)
    d2 = np.array([[0, 0], [1, 0], [0, 0], [0, 0]], bool)
    v = np.array([[0.5, -0.5], [0.25, 1.0], [2.0, 0.0], [-1.0, 3.0]], np.float32)
    hp = ReinforceConfig(gamma=0.5, **{k: SMALL[k] for k in ("num_steps", "env_params")}).hparams()

    def targets(r, d):
        traj = Transition(obs=None, action=None, log_prob=None, value=jnp.asarray(v), reward=jnp.asarray(r),
                          terminated=jnp.asarray(d), done=jnp.asarray(d), next_obs=None, episode_done=None,
                          episode_return=None, episode_length=None)
        return [np.asarray(x) for x in REINFORCE_ALGORITHM.targets(traj, jnp.full(r.shape, 99.0), hp)]

    adv, target, weight = targets(r1, d1)
    np.testing.assert_array_equal(weight, [[1, 1], [1, 1], [0, 1], [0, 1]])
    np.testing.assert_allclose(target[:, 1], [1 + 0.5 * 2 + 0.25 * 3 + 0.125 * 4, 2 + 0.5 * 3 + 0.25 * 4,
                                              3 + 0.5 * 4, 4])
    np.testing.assert_allclose(target[:2, 0], [1.5, 1.0])
    np.testing.assert_allclose(adv, np.where(weight > 0, target - v, 0.0), rtol=1e-6)
    np.testing.assert_allclose(target[2:, 0], v[2:, 0])  # no return: V itself, never a bootstrap (99)
    adv, target, weight = targets(r2, d2)  # the episode's later steps have their exact returns-to-go
    np.testing.assert_array_equal(weight[:, 0], [1, 1, 0, 0])
    np.testing.assert_allclose(target[:2, 0], [5 + 0.5 * 6, 6])
    np.testing.assert_array_equal(weight[:, 1], 0)


# --------------------------------------------------------------------------------------- loss
def _apply(params, obs):
    return Categorical(params["logits"]), params["value"]


def _case(B=40, K=3):
    rng = np.random.default_rng(1)
    logits = rng.normal(0, 1.0, (B, K)).astype(np.float32)
    action = rng.integers(0, K, B).astype(np.int32)
    value = rng.normal(0, 1, B).astype(np.float32)
    g = rng.normal(3.0, 2.0, B).astype(np.float32)
    weight = (rng.uniform(size=B) < 0.7).astype(np.float32)
    value_old = (value + 0.2).astype(np.float32)
    adv = np.where(weight > 0, g - value_old, 0.0)
    batch = Batch(obs=jnp.zeros((B, 1)), action=jnp.asarray(action), log_prob=jnp.zeros(B),
                  value=jnp.asarray(value_old), advantage=jnp.asarray(adv),
                  target=jnp.asarray(np.where(weight > 0, g, value_old)), weight=jnp.asarray(weight))
    return {"logits": jnp.asarray(logits), "value": jnp.asarray(value)}, batch, g


def _reference(params, batch, g, vf, ent, baseline, normalize):
    """The weighted REINFORCE loss and its gradient in float64 (closed form, as in test_a2c.py),
    means over the W = sum(w) steps that have a return."""
    z = np.asarray(params["logits"], np.float64)
    v = np.asarray(params["value"], np.float64)
    w = np.asarray(batch.weight, np.float64)
    a = np.asarray(batch.action)
    B, K = z.shape
    W = w.sum()
    logp_all = z - np.log(np.exp(z).sum(-1, keepdims=True))
    p = np.exp(logp_all)
    logp = logp_all[np.arange(B), a]
    h = -(p * logp_all).sum(-1)
    adv = g - np.asarray(batch.value, np.float64) if baseline else g.astype(np.float64)
    if normalize:
        mean = np.sum(w * adv) / W
        adv = (adv - mean) / (np.sqrt(np.sum(w * (adv - mean) ** 2) / W) + 1e-8)
    pg = -np.sum(w * logp * adv) / W
    vl = 0.5 * np.sum(w * (v - g) ** 2) / W
    loss = pg - ent * np.sum(w * h) / W + (vf * vl if baseline else 0.0)
    onehot = np.eye(K)[a]
    g_logits = (-(w * adv)[:, None] * (onehot - p) + ent * (w[:, None] * p * (logp_all + h[:, None]))) / W
    g_value = vf * w * (v - g) / W if baseline else np.zeros(B)
    return loss, dict(policy_loss=pg, value_loss=vl, entropy=np.sum(w * h) / W), {"logits": g_logits,
                                                                                "value": g_value}


@pytest.mark.parametrize("baseline, normalize", [(True, False), (True, True), (False, False), (False, True)])
def test_reinforce_loss_and_gradient_match_numpy_reference(baseline, normalize):
    params, batch, g = _case()
    vf, ent = 0.5, 0.02
    fn = jax.value_and_grad(policy_gradient_loss, has_aux=True)
    (loss, stats), grads = fn(params, _apply, batch, vf_coef=jnp.float32(vf), ent_coef=jnp.float32(ent),
                              normalize_adv=normalize, baseline=baseline)
    want_loss, want_stats, want_grads = _reference(params, batch, g, vf, ent, baseline, normalize)
    np.testing.assert_allclose(float(loss), want_loss, rtol=1e-5, atol=1e-6)
    for name, w in want_stats.items():
        np.testing.assert_allclose(float(getattr(stats, name)), w, rtol=1e-4, atol=1e-6, err_msg=name)
    for name, w in want_grads.items():
        np.testing.assert_allclose(np.asarray(grads[name]), w, rtol=1e-4, atol=1e-7, err_msg=name)
    assert float(stats.clip_fraction) == 0.0


def test_a_batch_without_any_return_changes_nothing():
    params, batch, _ = _case()
    batch = batch._replace(weight=jnp.zeros_like(batch.weight))
    (loss, _), grads = jax.value_and_grad(policy_gradient_loss, has_aux=True)(
        params, _apply, batch, vf_coef=jnp.float32(0.5), ent_coef=jnp.float32(0.01), normalize_adv=True)
    assert float(loss) == 0.0
    assert all(np.all(np.asarray(x) == 0) for x in jax.tree.leaves(grads))


# --------------------------------------------------------------------------------- guarantees
@pytest.fixture(scope="module")
def small():
    config = ReinforceConfig(**SMALL)
    train = make_train(config)
    jitted = jax.jit(train)
    return config, train, jitted, jitted(jax.random.key(0))


def test_trains_with_the_weighted_batch(small):
    config, train, _, result = small
    assert train.algorithm is REINFORCE_ALGORITHM
    m = result.metrics
    assert set(m) == {*fusedrl.train.METRIC_NAMES, "env_fault"}
    np.testing.assert_array_equal(m["gradient_steps"], 1)
    assert np.all(np.asarray(m["episodes_completed"]) > 0)  # every rollout completes episodes
    assert np.all(np.isfinite(np.asarray(m["policy_loss"]))) and np.any(np.asarray(m["value_loss"]) > 0)


def test_a_rollout_without_episode_ends_leaves_the_parameters_alone(small):
    # No step has a return, so every weight is 0: the loss, its entropy term included, is 0 and
    # Adam's step is 0. (Unweighted, the entropy bonus alone would move the policy.)
    config, train, _, _ = small
    hp = config.hparams().replace(ent_coef=jnp.float32(0.01))

    @jax.jit
    def one_update(key):
        state = train.init(key, hp)
        state, traj = train.rollout(state, hp, train.make_env(hp), key)
        traj = traj._replace(done=jnp.zeros_like(traj.done), terminated=jnp.zeros_like(traj.terminated))
        return state, train.learn_from_rollout(state, traj, hp)[0]

    before, after = one_update(jax.random.key(0))
    chex.assert_trees_all_equal(after.params, before.params)


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


@pytest.mark.slow
def test_vmap_over_seeds_and_hyperparameters_traces_once(small):
    config, train, jitted, _ = small
    # The counter is keyed by the method's hash, which a trainer of another test file, collected,
    # may have left at this address: start from 0.
    chex.clear_trace_counter()
    traced = chex.assert_max_traces(train.__call__, n=1)
    fn = jax.jit(jax.vmap(traced))
    hp = jax.tree.map(lambda x: jnp.stack([x] * 3), config.hparams())
    out = fn(jax.random.split(jax.random.key(0), 3), hp)
    out2 = fn(jax.random.split(jax.random.key(1), 3), hp.replace(gamma=jnp.array([0.9, 0.99, 1.0])))
    assert out.metrics["policy_loss"].shape == out2.metrics["policy_loss"].shape == (3, config.num_updates)
    keys = jax.random.split(jax.random.key(0), 3)
    np.testing.assert_allclose(out.metrics["episode_return"][2], jitted(keys[2]).metrics["episode_return"],
                               rtol=1e-4)


def test_resume_continues_the_same_run(small):
    config, train, _, result = small
    hp = config.hparams()
    run3 = jax.jit(lambda s: train.run(s, hp, 3))
    half = run3(jax.jit(train.init)(jax.random.key(0), hp))
    rest = run3(half.state)
    joined = np.concatenate([half.metrics["policy_loss"], rest.metrics["policy_loss"]])
    np.testing.assert_allclose(joined, result.metrics["policy_loss"], rtol=1e-5, atol=1e-7)


def test_memory_does_not_grow_with_total_timesteps():
    def out_bytes(total):
        config = ReinforceConfig(**{**SMALL, "total_timesteps": total})
        shapes = jax.eval_shape(make_train(config), jax.random.key(0))
        state = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(shapes.state))
        metrics = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(shapes.metrics))
        return state, metrics, config.num_updates

    s1, m1, n1 = out_bytes(80 * 10)
    s2, m2, n2 = out_bytes(80 * 10_000)
    assert s1 == s2
    assert m2 / m1 == n2 / n1


# ------------------------------------------------------------------------------------ config
def test_rollouts_shorter_than_the_time_limit_are_refused_before_compiling():
    with pytest.raises(ValueError) as info:
        make_train(ReinforceConfig(num_steps=200, total_timesteps=8 * 200))  # CartPole-v1: 500 steps
    for w in ["num_steps=200", "max_steps_in_episode=500", "num_steps >= 500",
              "env_params={'max_steps_in_episode': 200}"]:
        assert w in str(info.value), (w, str(info.value))
    make_train(ReinforceConfig(num_steps=200, total_timesteps=8 * 200,
                               env_params={"max_steps_in_episode": 200}))


@pytest.mark.parametrize("kwargs, exc, words", [
    (dict(clip_eps=0.2), TypeError, ["ReinforceConfig has no field 'clip_eps'", "PPOConfig", "no clipping"]),
    (dict(gae_lambda=0.95), TypeError, ["gae_lambda", "Monte-Carlo returns", "A2CConfig"]),
    (dict(normalize_adv=True), TypeError, ["normalize_adv", "normalize_returns"]),
    (dict(bootstrap_truncation=False), TypeError, ["bootstrap_truncation", "never bootstraps"]),
    (dict(optimizer="sgd"), ValueError, ["optimizer must be 'rmsprop' or 'adam'", "'sgd'"]),
    (dict(baseline=1), TypeError, ["baseline", "True or False"]),
    (dict(normalize_returns="yes"), TypeError, ["normalize_returns", "True or False"]),
    (dict(gamma=0.0), ValueError, ["gamma", "(0, 1]"]),
])
def test_config_errors_name_the_field_and_the_fix(kwargs, exc, words):
    with pytest.raises(exc) as info:
        ReinforceConfig(**kwargs)
    for w in words:
        assert w in str(info.value), (w, str(info.value))


def test_config_roundtrip_and_docstring():
    c = ReinforceConfig(env_params={"max_steps_in_episode": 100}, num_steps=100)
    assert ReinforceConfig.from_dict(c.to_dict()) == c
    assert c.normalize_returns and c.baseline and c.optimizer == "adam"
    # The loss standardises the returns when the config asks (the trainer's normalize_adv is PPO's
    # and A2C's field: False here), and trains the baseline only with `baseline`.
    for normalize, baseline in [(True, True), (False, False)]:
        cfg = c.replace(normalize_returns=normalize, baseline=baseline)
        loss_fn = REINFORCE_ALGORITHM.loss(cfg, _apply, cfg.hparams(), False)
        assert (loss_fn.keywords["normalize_adv"], loss_fn.keywords["baseline"]) == (normalize, baseline)
    assert c.hparams().names == ("lr", "gamma", "ent_coef", "vf_coef", "max_grad_norm")
    doc = ReinforceConfig.__doc__
    described = re.findall(r"^      (\w+(?:, \w+)*):", doc.split("Fields:")[1], re.MULTILINE)
    fields = {f.name for f in dataclasses.fields(ReinforceConfig)}
    assert {n for e in described for n in e.split(", ")} == fields
    assert "truncation ends the return like a termination" in " ".join(doc.split())


# ---------------------------------------------------------------------------------- learning
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_reinforce_learns_cartpole():
    # The CartPole-v1 preset on a smaller budget, 4 seeds at once; greedy evaluation, 32 episodes per
    # seed. A random policy scores about 22.
    config = fusedrl.preset("CartPole-v1", algo="reinforce", total_timesteps=200_000)
    out = jax.jit(jax.vmap(make_train(config)))(jax.random.split(jax.random.key(0), 4))
    returns = np.asarray(fusedrl.evaluate(config, out, jax.random.key(1), num_episodes=32)).mean(-1)
    assert returns.mean() >= 300, returns  # measured 478 (per seed 459, 481, 500, 471)


@pytest.mark.parametrize("algo", ["reinforce", "ppo"])
def test_only_bootstrapping_algorithms_compute_next_values(algo, monkeypatch):
    # REINFORCE's Monte-Carlo targets read no V(next obs) (`Algorithm.bootstraps` False), so the
    # trainer does not compute it; PPO's GAE does. Traced abstractly (jax.eval_shape): nothing compiles.
    config = (ReinforceConfig(**SMALL) if algo == "reinforce"
              else fusedrl.PPOConfig(**SMALL, num_minibatches=1, update_epochs=1))
    train = make_train(config)
    calls = []

    def next_values(*args, **kwargs):
        calls.append(1)
        return jnp.zeros((config.num_steps, config.num_envs))

    monkeypatch.setattr(train, "next_values", next_values)
    jax.eval_shape(train, jax.random.key(0))
    assert bool(calls) == (algo == "ppo")
