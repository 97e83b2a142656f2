"""`ppo_loss` and `explained_variance` against a NumPy (float64) reference of their formulas."""

import jax.numpy as jnp
import numpy as np
import pytest

from fusedrl.distributions import Categorical
from fusedrl.train.losses import Batch, explained_variance, ppo_loss


def _apply(params, obs):
    """A stand-in network: the policy and values are the parameters themselves."""
    return Categorical(params["logits"]), params["value"]


def _case():
    """64 transitions of 3 actions, with ratios from ~0.6 to ~2 (both sides of the clip) and
    advantages of mean 0.5, std 2 (so normalising them matters)."""
    rng = np.random.default_rng(0)
    B, K = 64, 3
    logits = rng.normal(0, 1.0, (B, K)).astype(np.float32)
    action = rng.integers(0, K, B).astype(np.int32)
    logp_new = logits[np.arange(B), action] - np.log(np.exp(logits).sum(-1))
    # old log-probs: ratios from ~0.5 to ~1.6, many outside [0.8, 1.2]
    log_prob_old = (logp_new - rng.uniform(-0.7, 0.5, B)).astype(np.float32)
    value_old = rng.normal(0, 1, B).astype(np.float32)
    value_new = (value_old + rng.uniform(-0.6, 0.6, B)).astype(np.float32)
    adv = rng.normal(0.5, 2.0, B).astype(np.float32)
    target = (value_old + rng.normal(0, 1, B)).astype(np.float32)
    batch = Batch(obs=jnp.zeros((B, 1)), action=jnp.asarray(action), log_prob=jnp.asarray(log_prob_old),
                  value=jnp.asarray(value_old), advantage=jnp.asarray(adv), target=jnp.asarray(target))
    params = {"logits": jnp.asarray(logits), "value": jnp.asarray(value_new)}
    return params, batch, dict(logits=logits, logp_new=logp_new, logp_old=log_prob_old, v_old=value_old,
                               v=value_new, adv=adv, target=target)


def _reference(d, eps, vf, ent, normalize_adv, clip_value_loss):
    f = {k: np.asarray(v, np.float64) for k, v in d.items()}
    log_ratio = f["logp_new"] - f["logp_old"]
    ratio = np.exp(log_ratio)
    a = f["adv"]
    if normalize_adv:
        a = (a - a.mean()) / (a.std() + 1e-8)
    pg = -np.mean(np.minimum(ratio * a, np.clip(ratio, 1 - eps, 1 + eps) * a))
    err = (f["v"] - f["target"]) ** 2
    if clip_value_loss:
        vc = f["v_old"] + np.clip(f["v"] - f["v_old"], -eps, eps)
        err = np.maximum(err, (vc - f["target"]) ** 2)
    vl = 0.5 * err.mean()
    p = np.exp(f["logits"] - f["logits"].max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    h = -(p * np.log(p)).sum(-1).mean()
    kl = np.mean((ratio - 1) - log_ratio)
    cf = np.mean(np.abs(ratio - 1) > eps)
    stats = dict(policy_loss=pg, value_loss=vl, entropy=h, approx_kl=kl, clip_fraction=cf)
    return pg + vf * vl - ent * h, stats


@pytest.mark.parametrize("normalize_adv", [False, True])
@pytest.mark.parametrize("clip_value_loss", [False, True])
def test_ppo_loss_matches_numpy_reference(normalize_adv, clip_value_loss):
    params, batch, d = _case()
    eps, vf, ent = 0.2, 0.5, 0.01
    loss, stats = ppo_loss(params, _apply, batch, clip_eps=jnp.float32(eps), vf_coef=jnp.float32(vf),
                           ent_coef=jnp.float32(ent), normalize_adv=normalize_adv,
                           clip_value_loss=clip_value_loss)
    want_loss, want = _reference(d, eps, vf, ent, normalize_adv, clip_value_loss)
    ratio = np.exp(d["logp_new"] - d["logp_old"])
    assert (ratio < 1 - eps).any() and (ratio > 1 + eps).any()  # both sides of the clip are hit
    for name, w in want.items():
        np.testing.assert_allclose(float(getattr(stats, name)), w, rtol=1e-4, atol=1e-6, err_msg=name)
    np.testing.assert_allclose(float(loss), want_loss, rtol=1e-4, atol=1e-6)
    # the entropy bonus lowers the loss; the value term raises it in proportion to vf_coef
    loss2, _ = ppo_loss(params, _apply, batch, clip_eps=jnp.float32(eps), vf_coef=jnp.float32(2 * vf),
                        ent_coef=jnp.float32(2 * ent), normalize_adv=normalize_adv,
                        clip_value_loss=clip_value_loss)
    np.testing.assert_allclose(float(loss2 - loss), vf * want["value_loss"] - ent * want["entropy"],
                               rtol=1e-3, atol=1e-6)


def test_ppo_loss_is_finite_when_a_minibatch_has_constant_advantages():
    # e.g. a rollout of constant reward (PPOConfig refuses 1-sample minibatches with normalize_adv):
    # std 0, and the 1e-8 keeps it finite.
    params, batch, _ = _case()
    batch = batch._replace(advantage=jnp.full_like(batch.advantage, 3.0))
    loss, stats = ppo_loss(params, _apply, batch, clip_eps=jnp.float32(0.2), vf_coef=jnp.float32(0.5),
                           ent_coef=jnp.float32(0.01), normalize_adv=True, clip_value_loss=True)
    assert np.isfinite(float(loss)) and float(stats.policy_loss) == 0.0


def test_explained_variance_matches_its_definition():
    rng = np.random.default_rng(1)
    target = rng.normal(0, 2, 256).astype(np.float32)
    pred = (0.5 * target + rng.normal(0, 0.5, 256)).astype(np.float32)
    want = 1 - np.var(target.astype(np.float64) - pred) / np.var(target.astype(np.float64))
    got = float(explained_variance(jnp.asarray(pred), jnp.asarray(target)))
    np.testing.assert_allclose(got, want, rtol=1e-4)
    assert float(explained_variance(jnp.asarray(target), jnp.asarray(target))) == pytest.approx(1.0)
    assert float(explained_variance(jnp.asarray(pred), jnp.full(256, 2.0))) == 0.0
