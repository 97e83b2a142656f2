"""The state a run carries and the result it returns, general to every algorithm and to both
learners (the fused `Trainer` and the host `fusedrl.bridge.HostTrainer`).

`RunnerState` is what one update hands the next (and what a checkpoint saves); `TrainResult` is a
run's final state with its per-update metrics (named in `fusedrl.metrics`, with the helpers that
read them); `Transition` is one rollout step ([T, N] leaves in a rollout); `typed_key` makes every
state hold typed PRNG keys.
"""

from __future__ import annotations

from typing import Any

import jax
from flax import struct

from fusedrl.train.config import Hyperparams
from fusedrl.train.rollout import Transition  # re-exported


def typed_key(key: jax.Array) -> jax.Array:
    """`key` as a typed PRNG key: a legacy uint32 key (`jax.random.PRNGKey`) is wrapped, with the
    same random streams, so every state holds typed keys (and checkpoints restore them)."""
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        return key
    return jax.random.wrap_key_data(key)


@struct.dataclass
class RunnerState:
    """Everything a run carries from one update to the next (and what a checkpoint saves)."""

    params: Any  # network parameters
    opt_state: Any  # optax state (its step count drives the learning-rate schedule)
    env_state: Any  # wrapped VecEnv state: env states, reset pool, normaliser statistics, env key
    obs: jax.Array  # [N, obs_dim] float32 current observations
    key: jax.Array  # PRNG key for actions and minibatch shuffling
    update: jax.Array  # [] int32 updates completed
    last_return: jax.Array  # [] float32 mean return of the latest update that completed an episode
    last_length: jax.Array  # [] float32 its mean length
    policy_state: Any = None  # a recurrent policy's carry per env ([N, H] leaves); None feed-forward
    agent_return: Any = None  # multi-agent envs: [A] float32 each agent's latest mean return; else None


@struct.dataclass
class TrainResult:
    """Final state of a run and its per-update metrics (each metric [num_updates]).

    `episode_return` and `episode_length` are means over the episodes that completed during the
    update (`episodes_completed`); an update in which none did repeats the latest update that had
    one, and updates before the first completed episode report 0.0, marked by `episode_length` 0
    (a completed episode has length >= 1). Never NaN.

    `metrics["env_fault"]` is nonzero in updates where the env returned a NaN or inf, or an action
    mask allowing no action (those updates left the parameters unchanged): `train.check(result)`
    raises naming the env, the field and the update (`Trainer.check`).
    """

    state: RunnerState
    metrics: dict[str, jax.Array]
    hparams: Hyperparams

    @property
    def params(self):
        return self.state.params


__all__ = [
    "RunnerState",
    "TrainResult",
    "Transition",
    "typed_key",
]
