"""REINFORCE (Williams 1992) as parts of the one training skeleton (`fusedrl.train.trainer`):
Monte-Carlo returns-to-go, an optional learned baseline, return normalisation (`ReinforceConfig`).

REINFORCE's parts: Monte-Carlo targets with a weight per step (`monte_carlo_targets`: 0 for the
steps whose episode has not ended by the rollout's end; nothing is bootstrapped), the plain
policy-gradient loss (`fusedrl.train.losses.policy_gradient_loss`, weighted; A = G - V with the
baseline, G without) and the config's `optimizer` (train/optimizers.py, as A2C's), one gradient
step per rollout on the whole batch. Nothing is bootstrapped, so the skeleton computes no values of
the next observations (`Algorithm.bootstraps` False).
"""

from __future__ import annotations

from functools import partial

from fusedrl.train.advantages import monte_carlo_targets
from fusedrl.train.config import Hyperparams, ReinforceConfig
from fusedrl.train.losses import policy_gradient_loss
from fusedrl.train.optimizers import one_step_learning_rate, one_step_optimizer
from fusedrl.train.trainer import Algorithm


def _reinforce_loss(config: ReinforceConfig, apply_fn, hparams: Hyperparams, normalize_adv: bool, *,
                    axis_name=None):
    # `normalize_adv` is the trainer's flag for PPO's and A2C's field (False here: the config has no
    # such field). The loss standardises the returns itself, weighted, with `normalize_returns`. Under
    # data parallelism (`axis_name`) its weighted means and statistics are over all shards' steps
    # together, since each shard has its own count of steps whose episode ended in the rollout.
    del normalize_adv
    return partial(policy_gradient_loss, apply_fn=apply_fn, vf_coef=hparams.vf_coef,
                   ent_coef=hparams.ent_coef, normalize_adv=config.normalize_returns,
                   baseline=config.baseline, axis_name=axis_name)


#: REINFORCE's parts over the shared skeleton.
REINFORCE_ALGORITHM = Algorithm(
    targets=monte_carlo_targets,
    loss=_reinforce_loss,
    optimizer=one_step_optimizer,
    learning_rate=one_step_learning_rate,
    epochs=lambda c: 1,
    minibatches=lambda c: 1,
    bootstraps=False,
)

__all__ = ["REINFORCE_ALGORITHM"]
