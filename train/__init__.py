"""fusedrl.train: rollout, advantage estimation, losses and the fused on-policy learners (PPO, A2C,
REINFORCE) on one skeleton."""

from fusedrl.metrics import METRIC_NAMES
from fusedrl.train.a2c import A2C_ALGORITHM
from fusedrl.train.advantages import gae
from fusedrl.train.config import (
    CONFIGS,
    TRACED_FIELDS,
    A2CConfig,
    Hyperparams,
    OnPolicyConfig,
    PPOConfig,
    ReinforceConfig,
)
from fusedrl.train.losses import Batch, LossStats, explained_variance, policy_gradient_loss, ppo_loss
from fusedrl.train.ppo import ALGORITHMS, PPO, PPO_ALGORITHM, make_train
from fusedrl.train.presets import PRESETS, has_preset, preset
from fusedrl.train.reinforce import REINFORCE_ALGORITHM
from fusedrl.train.state import RunnerState, TrainResult, Transition
from fusedrl.train.trainer import Algorithm, EnvFaultError, Trainer
from fusedrl.train.tuning import Tuning, resolve_tuning

__all__ = [
    "A2C_ALGORITHM",
    "ALGORITHMS",
    "Algorithm",
    "EnvFaultError",
    "A2CConfig",
    "CONFIGS",
    "OnPolicyConfig",
    "PPO_ALGORITHM",
    "REINFORCE_ALGORITHM",
    "ReinforceConfig",
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
    "policy_gradient_loss",
    "ppo_loss",
    "preset",
]
