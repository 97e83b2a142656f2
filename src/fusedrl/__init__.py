"""fusedrl: on-policy reinforcement learning fused into one device-resident JAX program.

    env, env_params = fusedrl.make("CartPole-v1")
    config = fusedrl.PPOConfig(env_id="CartPole-v1", num_envs=16, num_steps=128,
                               total_timesteps=500_000)
    train = fusedrl.make_train(config)
    result = jax.jit(train)(jax.random.key(0))
    returns = fusedrl.evaluate(config, result, jax.random.key(1), num_episodes=64)
    swept = fusedrl.sweep(config, num_seeds=4, lr=[1e-4, 3e-4, 1e-3])   # one compile
    fusedrl.enable_compile_cache()   # reuse compiled programs across processes

The public names are imported on first use (module `__getattr__`): `import fusedrl` loads neither
JAX nor the environments, so the `fusedrl` command line starts at once.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from fusedrl.version import __version__

# Public name -> the module that defines it.
_EXPORTS = {
    "make": "fusedrl.envs",
    "register": "fusedrl.envs",
    "registered_ids": "fusedrl.envs",
    "evaluate": "fusedrl.evaluation",
    "Policy": "fusedrl.policy",
    "load": "fusedrl.policy",
    "SweepResult": "fusedrl.sweeps",
    "data_parallel_train": "fusedrl.data_parallel",
    "sweep": "fusedrl.sweeps",
    "PRESETS": "fusedrl.train",
    "TRACED_FIELDS": "fusedrl.train",
    "Hyperparams": "fusedrl.train",
    "PPOConfig": "fusedrl.train",
    "A2CConfig": "fusedrl.train",
    "ReinforceConfig": "fusedrl.train",
    "RunnerState": "fusedrl.train",
    "TrainResult": "fusedrl.train",
    "make_train": "fusedrl.learners",
    "preset": "fusedrl.train",
    "enable_compile_cache": "fusedrl.compile_cache",
}

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
    "enable_compile_cache",
    "evaluate",
    "load",
    "make",
    "make_train",
    "preset",
    "register",
    "registered_ids",
    "sweep",
]

if TYPE_CHECKING:  # static analysers and IDEs see the names as if imported here
    from fusedrl.compile_cache import enable_compile_cache
    from fusedrl.data_parallel import data_parallel_train
    from fusedrl.envs import make, register, registered_ids
    from fusedrl.evaluation import evaluate
    from fusedrl.learners import make_train
    from fusedrl.policy import Policy, load
    from fusedrl.sweeps import SweepResult, sweep
    from fusedrl.train import (
        PRESETS,
        TRACED_FIELDS,
        A2CConfig,
        Hyperparams,
        PPOConfig,
        ReinforceConfig,
        RunnerState,
        TrainResult,
        preset,
    )


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'fusedrl' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later look-ups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
