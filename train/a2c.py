"""A2C (Mnih et al. 2016: the synchronous form of A3C) as parts of the one training skeleton
(`fusedrl.train.trainer`), with Stable-Baselines3's defaults (`A2CConfig`).

A2C's parts: GAE targets (n-step returns at gae_lambda 1; train/advantages.py), the plain
policy-gradient loss (`fusedrl.train.losses.policy_gradient_loss`) and RMSprop (or Adam) after a
global-norm clip, one gradient step per rollout on the whole batch. REINFORCE (train/reinforce.py)
takes the same optimiser.
"""

from __future__ import annotations

from functools import partial

import optax

from fusedrl.train.advantages import gae_targets
from fusedrl.train.config import A2CConfig, Hyperparams
from fusedrl.train.losses import policy_gradient_loss
from fusedrl.train.trainer import Algorithm, adam, linear_anneal


def rmsprop(config, hparams: Hyperparams, *, steps_per_update: int) -> optax.GradientTransformation:
    """RMSprop as PyTorch's (and so SB3's A2C): the squared-gradient average starts at 0, decays
    with `rmsprop_alpha`, is not centered, and `rmsprop_eps` is added to its root:
    g / (sqrt(avg) + eps). After a global-norm clip; the learning rate is annealed as `adam`'s."""
    if config.anneal_lr:
        lr = partial(linear_anneal, lr=hparams.lr, steps_per_update=steps_per_update,
                     num_updates=config.num_updates)
    else:
        lr = hparams.lr
    return optax.flatten(optax.chain(
        optax.clip_by_global_norm(hparams.max_grad_norm),
        optax.rmsprop(learning_rate=lr, decay=config.rmsprop_alpha, eps=config.rmsprop_eps,
                      initial_scale=0.0, eps_in_sqrt=False, centered=False),
    ))


def one_step_optimizer(config, hparams: Hyperparams) -> optax.GradientTransformation:
    """The config's `optimizer` ("rmsprop" or "adam"), for one step per update."""
    make = rmsprop if config.optimizer == "rmsprop" else adam
    return make(config, hparams, steps_per_update=1)


def one_step_learning_rate(config, hparams: Hyperparams, update):
    """The learning rate of update `update` (0-based) with one optimiser step per update."""
    if not config.anneal_lr:
        return hparams.lr
    return linear_anneal(update, hparams.lr, 1, config.num_updates)


def _a2c_loss(config: A2CConfig, apply_fn, hparams: Hyperparams, normalize_adv: bool, *, axis_name=None):
    del axis_name  # unweighted means over equal shards: the trainer's pmean of gradients suffices
    return partial(policy_gradient_loss, apply_fn=apply_fn, vf_coef=hparams.vf_coef,
                   ent_coef=hparams.ent_coef,
                   normalize_adv=normalize_adv)


#: A2C's parts over the shared skeleton.
A2C_ALGORITHM = Algorithm(
    targets=gae_targets,
    loss=_a2c_loss,
    optimizer=one_step_optimizer,
    learning_rate=one_step_learning_rate,
    epochs=lambda c: 1,
    minibatches=lambda c: 1,
)

__all__ = ["A2C_ALGORITHM", "one_step_learning_rate", "one_step_optimizer", "rmsprop"]
