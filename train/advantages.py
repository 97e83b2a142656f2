"""Advantage estimation with correct episode ends: GAE (PPO, A2C) and Monte-Carlo returns-to-go
(REINFORCE).

Per-trajectory ops in rlax's style (`gae`, `returns_to_go`) take one env's trajectory [T]; the
algorithms' targets (`gae_targets`, `monte_carlo_targets`) vmap them over a [T, N] rollout.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp

#: Steps of the backward recursions below (GAE, returns-to-go) per loop iteration. Each step is a
#: multiply-add on [N] values, so in a rolled loop nearly all of a step's cost is the loop's own:
#: on a GPU several kernel launches per step (4-5 for GAE on an H200), where XLA fuses the steps of
#: an unrolled iteration into about as many; on a CPU a few thunks. The arithmetic and its order are
#: the same at any unroll, so the results are bit-identical to the rolled loop's
#: (`tests/test_advantages.py`).
BACKWARD_UNROLL = 16


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

    _, adv = jax.lax.scan(backward, jnp.zeros((), jnp.float32), (delta_t, decay_t), reverse=True,
                          unroll=BACKWARD_UNROLL)
    return adv


def returns_to_go(r_t: jax.Array, done_t: jax.Array, gamma: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Monte-Carlo discounted returns-to-go of one trajectory, never bootstrapped.

        G_t = r_t + gamma * (1 - done_t) * G_{t+1}
        complete_t = done_t or complete_{t+1},   complete_T = False

    An episode end (`done_t`: terminated or truncated; a time limit ends the return like a
    termination) stops the sum. G_t is step t's exact return-to-go where `complete_t`, that is
    where its episode ends within the trajectory; elsewhere (the steps after the last episode end)
    it is a partial sum with no meaning, which callers must leave out.

    Args:
      r_t: rewards [T].
      done_t: [T] bool, the episode ended at t.
      gamma: scalar (may be traced).

    Returns:
      (G_t [T] float32, complete_t [T] bool).
    """
    chex.assert_rank([r_t, done_t], 1)
    chex.assert_equal_shape([r_t, done_t])
    not_done = 1.0 - done_t.astype(jnp.float32)

    def backward(carry, x):
        g_next, complete_next = carry
        r, nd, done = x
        g = (r + gamma * nd * g_next).astype(jnp.float32)
        complete = done | complete_next
        return (g, complete), (g, complete)

    init = (jnp.zeros((), jnp.float32), jnp.bool_(False))
    _, (g, complete) = jax.lax.scan(backward, init, (r_t.astype(jnp.float32), not_done, done_t), reverse=True,
                                    unroll=BACKWARD_UNROLL)
    return g, complete


def gae_targets(traj, v_next: jax.Array, hparams):
    """GAE(gamma, lambda) advantages over the [T, N] rollout `traj` (a `Transition`), one env's
    trajectory at a time, and the value targets advantage + V(obs); each [T, N]. PPO's and A2C's
    targets (`Algorithm.targets`)."""
    adv = jax.vmap(gae, in_axes=(1, 1, 1, 1, 1, None, None), out_axes=1)(
        traj.reward, traj.value, v_next, traj.terminated, traj.done, hparams.gamma, hparams.gae_lambda
    )
    return adv, adv + traj.value


def monte_carlo_targets(traj, v_next: jax.Array | None, hparams):
    """REINFORCE's targets (`Algorithm.targets`) over the [T, N] rollout `traj`: (advantage, value
    target, weight), each [T, N].

    The value target is the return-to-go G (`returns_to_go`, per env) and the advantage G - V(obs),
    the baseline's (REINFORCE without a baseline uses advantage + V(obs) = G). The weight is 1 where
    G is an exact return (the step's episode ends within the rollout) and 0 elsewhere, where the
    advantage is 0 and the target V(obs): nothing is bootstrapped. `v_next` is unused (Monte-Carlo
    returns need no next value: REINFORCE's `Algorithm` says so, and the trainer passes None).
    """
    del v_next
    per_env = jax.vmap(returns_to_go, in_axes=(1, 1, None), out_axes=1)
    g, complete = per_env(traj.reward, traj.done, hparams.gamma)
    adv = jnp.where(complete, g - traj.value, 0.0)
    target = jnp.where(complete, g, traj.value)
    return adv, target, complete.astype(jnp.float32)
