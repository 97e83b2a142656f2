"""`make_train`: the learner for a config, the fused trainer or the host trainer, by env id.

The two learners stand side by side on the trainer's parts and know nothing of each other:
`fusedrl.train` fuses JAX envs, rollout and update into one program (`Trainer`); the host bridge
(`fusedrl.bridge.HostTrainer`) steps Gymnasium envs on the host and learns with the same parts.
This module, one floor above both, is where the choice is made.
"""

from __future__ import annotations

from fusedrl.bridge import HostTrainer
from fusedrl.envs.host import is_host_env_id
from fusedrl.train.config import OnPolicyConfig
from fusedrl.train.ppo import algorithm_of
from fusedrl.train.ppo import make_train as make_fused_train
from fusedrl.train.trainer import Trainer


def make_train(config: OnPolicyConfig, **kwargs) -> Trainer | HostTrainer:
    """Returns the train function for `config`: `train(key, hparams=None) -> TrainResult`.

    The algorithm is the config's type: `PPOConfig`, `A2CConfig` or `ReinforceConfig`. For a JAX
    env it is the fused `Trainer` (`fusedrl.train.make_train`): `jax.jit(train)(key)` runs the whole
    training on the device; `jax.jit(jax.vmap(train))(keys)` trains one agent per key in one
    program. Keyword arguments go to `Trainer` (callback, callback_every, axis_name, tuning).

    A "gymnasium:<id>" env_id gives the host trainer instead (`fusedrl.bridge.HostTrainer`, every
    algorithm's config; keyword arguments callback and callback_every): same parts and results
    format, but envs step on the host, so `train(key)` is not jittable.
    """
    algorithm_of(config)  # anything but an algorithm's config is refused first, by name
    if is_host_env_id(config.env_id):
        return HostTrainer(config, **kwargs)
    return make_fused_train(config, **kwargs)


__all__ = ["make_train"]
