"""A2C (Mnih et al. 2016: the synchronous form of A3C) as parts of the one training skeleton
(`fusedrl.train.trainer`), with Stable-Baselines3's defaults (`A2CConfig`).

A2C's parts: GAE targets (n-step returns at gae_lambda 1; train/advantages.py), the plain
policy-gradient loss (`fusedrl.train.losses.policy_gradient_loss`) and RMSprop (or Adam) after a
global-norm clip (train/optimizers.py), one gradient step per rollout on the whole batch.
"""

from __future__ import annotations

from functools import partial

from fusedrl.train.advantages import gae_targets
from fusedrl.train.config import A2CConfig, Hyperparams
from fusedrl.train.losses import policy_gradient_loss
from fusedrl.train.optimizers import (  # rmsprop re-exported
    one_step_learning_rate,
    one_step_optimizer,
    rmsprop,
)
from fusedrl.train.trainer import Algorithm


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
    normalize_adv=lambda c: c.normalize_adv,
)

__all__ = ["A2C_ALGORITHM", "one_step_learning_rate", "one_step_optimizer", "rmsprop"]
