"""PPO (Schulman et al. 2017) as parts of the one training skeleton (`fusedrl.train.trainer`), and
`make_train`, which builds the fused trainer of any algorithm's config (`ALGORITHMS`).

PPO's parts: GAE targets (train/advantages.py), the clipped-surrogate loss (train/losses.py) and
Adam with a global-norm clip, over `update_epochs` epochs of `num_minibatches` minibatches.
`make_train(config)` composes them into `train(key, hparams=None) -> TrainResult`.

This module knows nothing of the host bridge: `fusedrl.make_train` (`fusedrl.learners`) picks the
fused trainer built here or the host trainer (`fusedrl.bridge.HostTrainer`) by env id.
"""

from __future__ import annotations

from functools import partial

from fusedrl.envs.host import is_host_env_id
from fusedrl.metrics import EPISODE_METRICS, METRIC_NAMES, episode_values, has_episode  # re-exported
from fusedrl.train.a2c import A2C_ALGORITHM
from fusedrl.train.advantages import gae_targets
from fusedrl.train.config import A2CConfig, Hyperparams, OnPolicyConfig, PPOConfig, ReinforceConfig
from fusedrl.train.losses import ppo_loss
from fusedrl.train.optimizers import adam, learning_rate_at
from fusedrl.train.reinforce import REINFORCE_ALGORITHM
from fusedrl.train.state import RunnerState, TrainResult, Transition, typed_key  # re-exported
from fusedrl.train.trainer import Algorithm, Trainer, check_callback


def _ppo_loss(config: PPOConfig, apply_fn, hparams: Hyperparams, normalize_adv: bool, *, axis_name=None):
    del axis_name  # unweighted means over equal shards: the trainer's pmean of gradients suffices
    return partial(ppo_loss, apply_fn=apply_fn, clip_eps=hparams.clip_eps, vf_coef=hparams.vf_coef,
                   ent_coef=hparams.ent_coef, normalize_adv=normalize_adv,
                   clip_value_loss=config.clip_value_loss)


def _steps_per_update(config: PPOConfig) -> int:
    return config.update_epochs * config.num_minibatches


def _optimizer(config: PPOConfig, hparams: Hyperparams):
    return adam(config, hparams, steps_per_update=_steps_per_update(config))


def _learning_rate(config: PPOConfig, hparams: Hyperparams, update):
    return learning_rate_at(config, hparams, update, steps_per_update=_steps_per_update(config))


#: PPO's parts over the shared skeleton.
PPO_ALGORITHM = Algorithm(
    targets=gae_targets,
    loss=_ppo_loss,
    optimizer=_optimizer,
    learning_rate=_learning_rate,
    epochs=lambda c: c.update_epochs,
    minibatches=lambda c: c.num_minibatches,
    normalize_adv=lambda c: c.normalize_adv,
    target_kl=lambda c: c.target_kl,
)

#: The fused trainer's old name, from when PPO was its one algorithm (`Trainer` serves every one).
PPO = Trainer


#: Each algorithm's parts, by its config's class: `make_train` dispatches on the config's type.
ALGORITHMS: dict[type, Algorithm] = {
    PPOConfig: PPO_ALGORITHM,
    A2CConfig: A2C_ALGORITHM,
    ReinforceConfig: REINFORCE_ALGORITHM,
}


def algorithm_of(config: OnPolicyConfig) -> Algorithm:
    """The parts of `config`'s algorithm (`ALGORITHMS`, by the config's type); a TypeError naming the
    algorithms' configs for anything else. Both learners look the algorithm up here."""
    algorithm = ALGORITHMS.get(type(config))
    if algorithm is None:
        names = ", ".join(c.__name__ for c in ALGORITHMS)
        raise TypeError(f"make_train takes an algorithm's config ({names}), got {type(config).__name__}.")
    return algorithm


def make_train(config: OnPolicyConfig, **kwargs) -> Trainer:
    """Returns the fused train function for `config`: `train(key, hparams=None) -> TrainResult`.

    The algorithm is the config's type (`ALGORITHMS`): `PPOConfig`, `A2CConfig` or
    `ReinforceConfig`. `jax.jit(train)(key)` runs the whole training on the device;
    `jax.vmap(train)` over keys trains one agent per key in one program. Keyword arguments go
    to `Trainer` (callback, callback_every, axis_name, tuning).

    A "gymnasium:<id>" env (stepped on the host) is refused here: `fusedrl.make_train` gives the
    host trainer for it (`fusedrl.bridge.HostTrainer`, every algorithm's config).
    """
    algorithm = algorithm_of(config)
    if is_host_env_id(config.env_id):
        raise ValueError(
            f"{config.env_id!r} is a Gymnasium env stepped on the host: fusedrl.train.make_train builds "
            f"the fused trainer only. Use fusedrl.make_train(config), which gives the host trainer "
            f"(fusedrl.bridge.HostTrainer) for 'gymnasium:' ids and the fused one otherwise.")
    trainer = Trainer(config, algorithm, **kwargs)
    config.check_env_params(trainer.env_params)  # the config's rules that need the env (before any compile)
    return trainer


__all__ = [
    "ALGORITHMS",
    "EPISODE_METRICS",
    "METRIC_NAMES",
    "PPO",
    "PPO_ALGORITHM",
    "RunnerState",
    "TrainResult",
    "Trainer",
    "Transition",
    "algorithm_of",
    "check_callback",
    "episode_values",
    "gae_targets",
    "has_episode",
    "make_train",
    "typed_key",
]
