"""fusedrl.train: rollout, advantage estimation, losses and the fused PPO learner."""

from fusedrl.train.advantages import gae
from fusedrl.train.config import TRACED_FIELDS, Hyperparams, PPOConfig
from fusedrl.train.losses import Batch, LossStats, explained_variance, ppo_loss
from fusedrl.train.ppo import (
    METRIC_NAMES,
    PPO,
    PPO_ALGORITHM,
    RunnerState,
    Trainer,
    TrainResult,
    Transition,
    make_train,
)
from fusedrl.train.presets import PRESETS, has_preset, preset
from fusedrl.train.trainer import Algorithm
from fusedrl.train.tuning import Tuning, resolve_tuning

__all__ = [
    "Algorithm",
    "PPO_ALGORITHM",
    "Trainer",
    "Tuning",
    "resolve_tuning",
    "METRIC_NAMES",
    "PPO",
    "PRESETS",
    "TRACED_FIELDS",
    "Batch",
    "Hyperparams",
    "LossStats",
    "PPOConfig",
    "RunnerState",
    "TrainResult",
    "Transition",
    "explained_variance",
    "gae",
    "has_preset",
    "make_train",
    "ppo_loss",
    "preset",
]
