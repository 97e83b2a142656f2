"""The PPO loss on one minibatch, and the statistics PPO users watch."""

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


class LossStats(NamedTuple):
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
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
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


def explained_variance(pred: jax.Array, target: jax.Array) -> jax.Array:
    """1 - Var[target - pred] / Var[target]; NaN-free (0 when the targets have no variance)."""
    var_t = jnp.var(target)
    return jnp.where(var_t > 0, 1.0 - jnp.var(target - pred) / jnp.where(var_t > 0, var_t, 1.0), 0.0)
