"""The update: epochs of shuffled minibatch gradient steps over one rollout's flat batch.

One pure function, `minibatch_epochs`, shared by every on-policy algorithm: PPO takes several
epochs of several minibatches; A2C and REINFORCE take one step on the whole batch (1 epoch, 1
minibatch). The algorithm supplies the loss and the optimiser.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax

from fusedrl.train.losses import standardize
from fusedrl.train.phases import scoped
from fusedrl.train.shuffle import permutations


def minibatch_epochs(loss_fn: Callable, optimizer: optax.GradientTransformation, params, opt_state, batch,
                     key: jax.Array, *, epochs: int, minibatches: int, target_kl: float | None = None,
                     normalize_adv_across: str | None = None, axis_name: str | None = None):
    """`epochs` passes over `batch` (a NamedTuple of [B, ...] arrays), each shuffled and cut into
    `minibatches` minibatches, one optimiser step per minibatch.

    Args:
      loss_fn: `loss_fn(params, batch=minibatch) -> (loss, stats)`, stats a NamedTuple of scalars.
      optimizer: the optax transformation `opt_state` belongs to.
      key: the update's shuffling key; epoch i shuffles with the i-th of `epochs` keys split from it.
      target_kl: None, or stop the update's remaining steps once a minibatch starts more than
        1.5 * target_kl (`stats.approx_kl`, before its step) from the rollout's policy (SB3's rule).
        Skipped steps still run, as selects, so the loops keep their shape.
      axis_name: data parallelism: the mapped axis over which shards of one agent run; gradients
        (and the early-stop KL) are averaged over it, so every shard takes the same step.
      normalize_adv_across: with `axis_name`, standardise `batch.advantage` per minibatch with the
        statistics of the global minibatch (all shards'); the loss must then not standardise again.

    Returns:
      (params, opt_state, means of the loss statistics, number of steps taken). After an early stop
      the means cover the steps taken and the minibatch that stopped them, whose losses and KL were
      computed but whose step was not taken, as SB3 reports them.
    """
    batch_size = jax.tree.leaves(batch)[0].shape[0]
    grad_fn = scoped("loss", jax.grad(loss_fn, has_aux=True))
    optimizer_update = scoped("optimizer", optimizer.update)
    apply_updates = scoped("optimizer", optax.apply_updates)
    permute = scoped("shuffle", jax.tree.map)

    def minibatch_step(carry, mb):
        params, opt_state = carry[:2]
        if normalize_adv_across is not None:
            mb = mb._replace(advantage=standardize(mb.advantage, axis_name=normalize_adv_across))
        grads, stats = grad_fn(params, batch=mb)
        if axis_name is not None:
            grads = jax.lax.pmean(grads, axis_name)
        updates, new_opt_state = optimizer_update(grads, opt_state, params)
        new_params = apply_updates(params, updates)
        if target_kl is None:
            return (new_params, new_opt_state), stats
        kl = stats.approx_kl
        if axis_name is not None:  # every shard takes the same decision
            kl = jax.lax.pmean(kl, axis_name)
        stopped = carry[2] | (kl > 1.5 * target_kl)
        params, opt_state = _unless(stopped, (params, opt_state), (new_params, new_opt_state))
        # Reported: every minibatch evaluated before the stop, the one that triggered it too.
        return (params, opt_state, stopped), (stats, ~stopped, ~carry[2])

    @functools.partial(scoped, "shuffle")
    def draw(k):
        return permutations(k, 1, batch_size)[0]

    def shuffle_and_step(carry, perm):
        shuffled = permute(lambda x: x[perm].reshape((minibatches, -1) + x.shape[1:]), batch)
        return jax.lax.scan(minibatch_step, carry, shuffled)

    def epoch(carry, k):
        return shuffle_and_step(carry, draw(k))

    keys = jax.random.split(key, epochs)
    carry = (params, opt_state) if target_kl is None else (params, opt_state, jnp.bool_(False))
    carry, stats = jax.lax.scan(epoch, carry, keys)
    params, opt_state = carry[:2]
    if target_kl is None:
        return params, opt_state, jax.tree.map(jnp.mean, stats), jnp.int32(epochs * minibatches)
    stats, taken, reported = stats
    steps = taken.sum(dtype=jnp.int32)  # >= 1: the first step starts at the rollout's policy
    n = reported.sum(dtype=jnp.int32)
    mean = jax.tree.map(lambda x: jnp.sum(jnp.where(reported, x, 0.0)) / n, stats)
    return params, opt_state, mean, steps


def _unless(stopped, old: Any, new: Any):
    """`new`, or `old` where `stopped`, except the learning-rate schedule's step count, which always
    advances: the schedule follows the update number whether its steps were taken or not. Adam's
    own count stays with its moments: a skipped step changes nothing, as in SB3, where it is never
    taken (advancing the count alone would shrink Adam's bias correction of moments that saw fewer
    steps, enlarging the steps it then takes)."""

    def schedule(x):
        return isinstance(x, optax.ScaleByScheduleState)

    def pick(o, n):
        if schedule(o):
            return n
        return jax.tree.map(lambda a, b: jnp.where(stopped, a, b), o, n)

    return jax.tree.map(pick, old, new, is_leaf=schedule)


__all__ = ["minibatch_epochs"]
