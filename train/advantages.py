"""Generalised advantage estimation with correct episode ends.

Per-trajectory op in rlax's style: it takes one env's trajectory [T] and the caller vmaps over envs.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp


def gae(
    r_t: jax.Array,
    v_t: jax.Array,
    v_next_t: jax.Array,
    terminated_t: jax.Array,
    done_t: jax.Array,
    gamma: jax.Array,
    lambda_: jax.Array,
) -> jax.Array:
    """GAE(gamma, lambda) advantages of one trajectory.

        delta_t = r_t + gamma * (1 - terminated_t) * v_next_t - v_t
        A_t     = delta_t + gamma * lambda * (1 - done_t) * A_{t+1},   A_T = 0

    `v_next_t` is the value of the observation that *followed* step t, before any automatic reset
    (the env's `info["final_observation"]`). So a truncated episode (time limit, not a terminal
    state) bootstraps from the value of its real last observation, a terminated one does not
    bootstrap, and no trace crosses an episode boundary. The last step of the rollout bootstraps from
    `v_next_{T-1}` like any other step.

    Args:
      r_t: rewards [T].
      v_t: values of the observations acted on, V(s_t) [T].
      v_next_t: values of the next observations, V(s'_t) [T].
      terminated_t: [T] bool, s'_t is a terminal state.
      done_t: [T] bool, the episode ended at t (terminated or truncated).
      gamma, lambda_: scalars (may be traced).

    Returns:
      advantages [T] float32; value targets are `advantages + v_t`.
    """
    chex.assert_rank([r_t, v_t, v_next_t, terminated_t, done_t], 1)
    chex.assert_equal_shape([r_t, v_t, v_next_t, terminated_t, done_t])
    not_term = 1.0 - terminated_t.astype(jnp.float32)
    not_done = 1.0 - done_t.astype(jnp.float32)
    # A terminal state's value is selected away, not only multiplied by 0: a non-finite value there
    # (a custom env's terminal observation) would make 0 * inf = NaN and spread through the trace.
    v_next_t = jnp.where(terminated_t, 0.0, v_next_t)
    # float32 throughout, also for float64 hyperparameters (jax_enable_x64): the scan's carry is.
    delta_t = (r_t + gamma * not_term * v_next_t - v_t).astype(jnp.float32)
    decay_t = (gamma * lambda_ * not_done).astype(jnp.float32)

    def backward(a_next, x):
        delta, decay = x
        a = delta + decay * a_next
        return a, a

    _, adv = jax.lax.scan(backward, jnp.zeros((), jnp.float32), (delta_t, decay_t), reverse=True)
    return adv
