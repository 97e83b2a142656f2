"""fusedrl: on-policy reinforcement learning fused into one device-resident JAX program.

    env, env_params = fusedrl.make("CartPole-v1")
    config = fusedrl.PPOConfig(env_id="CartPole-v1", num_envs=16, num_steps=128,
                               total_timesteps=500_000)
    train = fusedrl.make_train(config)
    result = jax.jit(train)(jax.random.key(0))
    returns = fusedrl.evaluate(config, result, jax.random.key(1), num_episodes=64)
    swept = fusedrl.sweep(config, num_seeds=4, lr=[1e-4, 3e-4, 1e-3])   # one compile
"""

from fusedrl.envs import make, register, registered_ids
from fusedrl.evaluation import evaluate
from fusedrl.policy import Policy, load
from fusedrl.sweep import SweepResult, data_parallel_train, sweep
from fusedrl.train import (
    PRESETS,
    TRACED_FIELDS,
    A2CConfig,
    Hyperparams,
    PPOConfig,
    ReinforceConfig,
    RunnerState,
    TrainResult,
    make_train,
    preset,
)

__version__ = "0.1.0"

__all__ = [
    "A2CConfig",
    "PRESETS",
    "TRACED_FIELDS",
    "Hyperparams",
    "PPOConfig",
    "Policy",
    "ReinforceConfig",
    "RunnerState",
    "SweepResult",
    "TrainResult",
    "__version__",
    "data_parallel_train",
    "evaluate",
    "load",
    "make",
    "make_train",
    "preset",
    "register",
    "registered_ids",
    "sweep",
]
