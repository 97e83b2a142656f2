"""The algorithms' losses on one minibatch (PPO's clipped surrogate; the plain policy gradient of
A2C and REINFORCE), and the statistics users watch."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp


class Batch(NamedTuple):
    """One minibatch of B transitions, flattened over time and envs."""

    obs: jax.Array  # [B, obs_dim] float32
    action: jax.Array  # [B] int32 or [B, act_dim] float32
    log_prob: jax.Array  # [B] log pi_old(a|s)
    value: jax.Array  # [B] V_old(s)
    advantage: jax.Array  # [B]
    target: jax.Array  # [B] value target = advantage + V_old(s)
    # [B] float32 weight of each transition in the loss's means, or None: all ones. REINFORCE gives 0
    # to the steps without a Monte-Carlo return (`fusedrl.train.advantages.monte_carlo_targets`).
    weight: jax.Array | None = None


class LossStats(NamedTuple):
    """The loss's statistics, the same for every algorithm (so every metric name stays):
    `clip_fraction` is 0 for algorithms without clipping."""

    policy_loss: jax.Array
    value_loss: jax.Array
    entropy: jax.Array
    approx_kl: jax.Array
    clip_fraction: jax.Array


def ppo_loss(
    params,
    apply_fn,
    batch: Batch,
    *,
    clip_eps: jax.Array,
    vf_coef: jax.Array,
    ent_coef: jax.Array,
    normalize_adv: bool,
    clip_value_loss: bool,
) -> tuple[jax.Array, LossStats]:
    """Clipped-surrogate PPO loss (Schulman et al. 2017) with value and entropy terms.

    loss = -E[min(rho A, clip(rho, 1-eps, 1+eps) A)] + vf_coef * L_V - ent_coef * H[pi]
    with rho = pi(a|s) / pi_old(a|s), and L_V = 0.5 E[(V - target)^2], or, with
    `clip_value_loss`, 0.5 E[max((V - target)^2, (V_old + clip(V - V_old, -eps, eps) - target)^2)].
    """
    pi, value = apply_fn(params, batch.obs)
    log_prob = pi.log_prob(batch.action)
    log_ratio = log_prob - batch.log_prob
    ratio = jnp.exp(log_ratio)
    adv = batch.advantage
    if normalize_adv:
        adv = standardize(adv)
    pg_loss = -jnp.minimum(ratio * adv, jnp.clip(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * adv).mean()
    v_err = jnp.square(value - batch.target)
    if clip_value_loss:
        v_clipped = batch.value + jnp.clip(value - batch.value, -clip_eps, clip_eps)
        v_err = jnp.maximum(v_err, jnp.square(v_clipped - batch.target))
    value_loss = 0.5 * v_err.mean()
    entropy = pi.entropy().mean()
    loss = pg_loss + vf_coef * value_loss - ent_coef * entropy
    stats = LossStats(
        policy_loss=pg_loss,
        value_loss=value_loss,
        entropy=entropy,
        # The low-variance k3 estimator of KL(pi_old || pi) (Schulman's blog; CleanRL's approx_kl).
        approx_kl=jnp.mean((ratio - 1.0) - log_ratio),
        clip_fraction=jnp.mean((jnp.abs(ratio - 1.0) > clip_eps).astype(jnp.float32)),
    )
    return loss, stats


def weighted_mean(x: jax.Array, weight: jax.Array | None, axis_name: str | None = None) -> jax.Array:
    """sum(weight * x) / sum(weight), 0 where every weight is 0; the plain mean for None.

    With `axis_name` (data parallelism: shards of one agent, each with its part of the batch) the
    denominator is the mean over the shards of their weight sums, so that the `lax.pmean` over the
    shards of the result (and of its gradient) is the weighted mean of the agent's whole batch,
    however the weights fall among the shards. The plain mean (`weight` None) needs nothing: the
    shards' parts are equal in size.
    """
    if weight is None:
        return x.mean()
    total = jnp.sum(weight)
    if axis_name is not None:
        total = jax.lax.pmean(total, axis_name)
    return jnp.sum(weight * x) / jnp.maximum(total, 1e-8)


def standardize(adv: jax.Array, weight: jax.Array | None = None, axis_name: str | None = None) -> jax.Array:
    """(adv - mean) / (std + 1e-8): the one advantage standardisation (PPO's and A2C's normalize_adv,
    REINFORCE's normalize_returns), with the population mean and std weighted by `weight` (None: the
    plain ones). With `axis_name` (data parallelism) the statistics are those of all shards' batches
    together: plain ones as the mean over the shards of theirs (equal-size shards), weighted ones as
    `weighted_mean` takes them."""
    if weight is None:
        if axis_name is None:
            return (adv - adv.mean()) / (adv.std() + 1e-8)
        mean = jax.lax.pmean(adv.mean(), axis_name)
        var = jax.lax.pmean(jnp.mean((adv - mean) ** 2), axis_name)
        return (adv - mean) / (jnp.sqrt(var) + 1e-8)

    def mean_of(x):
        m = weighted_mean(x, weight, axis_name)
        return m if axis_name is None else jax.lax.pmean(m, axis_name)

    mean = mean_of(adv)
    std = jnp.sqrt(mean_of(jnp.square(adv - mean)))
    return (adv - mean) / (std + 1e-8)


def policy_gradient_loss(
    params,
    apply_fn,
    batch: Batch,
    *,
    vf_coef: jax.Array,
    ent_coef: jax.Array,
    normalize_adv: bool,
    baseline: bool = True,
    axis_name: str | None = None,
) -> tuple[jax.Array, LossStats]:
    """The actor-critic policy-gradient loss of A2C (Mnih et al. 2016) and REINFORCE (Williams 1992).

        loss = -E_w[log pi(a|s) A] + vf_coef * 0.5 E_w[(V - target)^2] - ent_coef * E_w[H[pi]]

    with E_w the mean weighted by `batch.weight` (the plain mean without weights). The advantage A is
    data (no gradient flows into it): `batch.advantage`, or without `baseline` (REINFORCE without a
    baseline) `batch.advantage + batch.value`, the return itself, and the value term is left out of
    the loss (its statistic is still reported). With `normalize_adv` A is standardised over the
    batch (`standardize`, with the same weights).

    `axis_name` (data parallelism, weighted batches): the weighted means and the standardisation are
    over all shards' batches together (`weighted_mean`), so that the mean over the shards of the
    gradients and of the statistics is the agent's, however the weights fall among the shards.

    Statistics: `approx_kl` is the k3 estimate of KL(pi_old || pi) against the rollout's log-probs
    (0 at the one step these algorithms take on a rollout, which starts at the rollout's policy);
    `clip_fraction` is 0 (nothing is clipped).
    """
    pi, value = apply_fn(params, batch.obs)
    w = batch.weight
    log_prob = pi.log_prob(batch.action)
    adv = batch.advantage if baseline else batch.advantage + batch.value
    if normalize_adv:
        adv = standardize(adv, w, axis_name)
    pg_loss = -weighted_mean(log_prob * adv, w, axis_name)
    v_loss = 0.5 * weighted_mean(jnp.square(value - batch.target), w, axis_name)
    entropy = weighted_mean(pi.entropy(), w, axis_name)
    loss = pg_loss - ent_coef * entropy
    if baseline:
        loss = loss + vf_coef * v_loss
    log_ratio = log_prob - batch.log_prob
    stats = LossStats(
        policy_loss=pg_loss,
        value_loss=v_loss,
        entropy=entropy,
        approx_kl=weighted_mean(jnp.exp(log_ratio) - 1.0 - log_ratio, w, axis_name),
        clip_fraction=jnp.zeros((), jnp.float32),
    )
    return loss, stats


def explained_variance(pred: jax.Array, target: jax.Array) -> jax.Array:
    """1 - Var[target - pred] / Var[target]; NaN-free (0 when the targets have no variance)."""
    var_t = jnp.var(target)
    return jnp.where(var_t > 0, 1.0 - jnp.var(target - pred) / jnp.where(var_t > 0, var_t, 1.0), 0.0)
