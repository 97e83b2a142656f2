"""The optimisers of every algorithm and the one learning-rate schedule they and the metrics read.

`learning_rate_schedule` is the rule: the config's lr, linearly annealed per update with `anneal_lr`.
The optimisers (`adam`, `rmsprop`) step with it, and an algorithm's `learning_rate` (the metric)
evaluates the same schedule at the update's first optimiser step (`learning_rate_at`), so the
reported rate is the one applied.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import jax
import jax.numpy as jnp
import optax

from fusedrl.train.config import Hyperparams


def linear_anneal(count, lr, steps_per_update, num_updates):
    """PureJaxRL's schedule: lr * (1 - update / num_updates), constant within an update; clamped at
    0, so a run resumed past its budget keeps lr at 0 instead of going negative."""
    frac = jnp.maximum(1.0 - (count // steps_per_update) / num_updates, 0.0)
    return lr * frac


def learning_rate_schedule(config, hparams: Hyperparams, *,
                           steps_per_update: int) -> Callable[[jax.Array], jax.Array] | jax.Array:
    """The learning rate as optax takes it: with `anneal_lr` a schedule of the optimiser's step count
    (`linear_anneal`, `steps_per_update` optimiser steps per update), else the constant `hparams.lr`."""
    if not config.anneal_lr:
        return hparams.lr
    return partial(linear_anneal, lr=hparams.lr, steps_per_update=steps_per_update,
                   num_updates=config.num_updates)


def learning_rate_at(config, hparams: Hyperparams, update, *, steps_per_update: int):
    """The rate `learning_rate_schedule` applies throughout update `update` (0-based)."""
    schedule = learning_rate_schedule(config, hparams, steps_per_update=steps_per_update)
    return schedule(update * steps_per_update) if callable(schedule) else schedule


#: The networks `clip_each_network` clips apart: the top-level modules of a MAPPO network's params.
NETWORKS = ("actor", "critic")


def clip_each_network(max_norm) -> optax.GradientTransformation:
    """`optax.clip_by_global_norm(max_norm)` on each network's gradient on its own: the leaves under
    params["params"]["actor"] and those under ["critic"] (MAPPO's two networks), as two optimisers
    would clip them (JaxMARL's MAPPO scripts)."""
    def labels(params):
        return {name: jax.tree_util.tree_map_with_path(lambda path, _: path[0].key, tree)
                for name, tree in params.items()}

    clip = optax.clip_by_global_norm(max_norm)
    return optax.multi_transform(dict.fromkeys(NETWORKS, clip), labels)


def adam(config, hparams: Hyperparams, *, steps_per_update: int) -> optax.GradientTransformation:
    """Adam (eps 1e-5) after a global-norm clip, with the config's learning rate, linearly annealed
    per update with `anneal_lr`. `optax.flatten` runs both on one vector instead of a dozen small
    parameter leaves (fewer, larger kernels). With `config.clip_grad_per_network` the clip is
    `clip_each_network`'s, on the tree (Adam, per parameter, is the same on one vector or two)."""
    lr = learning_rate_schedule(config, hparams, steps_per_update=steps_per_update)
    step = optax.adam(learning_rate=lr, eps=1e-5)
    if config.clip_grad_per_network:
        return optax.chain(clip_each_network(hparams.max_grad_norm), optax.flatten(step))
    return optax.flatten(optax.chain(optax.clip_by_global_norm(hparams.max_grad_norm), step))


def rmsprop(config, hparams: Hyperparams, *, steps_per_update: int) -> optax.GradientTransformation:
    """RMSprop as PyTorch's (and so SB3's A2C): the squared-gradient average starts at 0, decays
    with `rmsprop_alpha`, is not centered, and `rmsprop_eps` is added to its root:
    g / (sqrt(avg) + eps). After a global-norm clip; the learning rate is annealed as `adam`'s."""
    lr = learning_rate_schedule(config, hparams, steps_per_update=steps_per_update)
    return optax.flatten(optax.chain(
        optax.clip_by_global_norm(hparams.max_grad_norm),
        optax.rmsprop(learning_rate=lr, decay=config.rmsprop_alpha, eps=config.rmsprop_eps,
                      initial_scale=0.0, eps_in_sqrt=False, centered=False),
    ))


def one_step_optimizer(config, hparams: Hyperparams) -> optax.GradientTransformation:
    """The config's `optimizer` ("rmsprop" or "adam"), for one step per update (A2C, REINFORCE)."""
    make = rmsprop if config.optimizer == "rmsprop" else adam
    return make(config, hparams, steps_per_update=1)


def one_step_learning_rate(config, hparams: Hyperparams, update):
    """The learning rate of update `update` (0-based) with one optimiser step per update."""
    return learning_rate_at(config, hparams, update, steps_per_update=1)


__all__ = [
    "NETWORKS",
    "adam",
    "clip_each_network",
    "learning_rate_at",
    "learning_rate_schedule",
    "linear_anneal",
    "one_step_learning_rate",
    "one_step_optimizer",
    "rmsprop",
]
