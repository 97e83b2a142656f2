"""Tuned PPO hyperparameters per environment, in one readable place.

`preset(env_id, **overrides)` returns a validated `PPOConfig`. Every preset here was measured
(see the results table in README.md and the command that reproduces each row); the budget is part
of the preset, since PPO's learning-rate annealing ties the schedule to `total_timesteps`.
"""

from __future__ import annotations

from typing import Any

from fusedrl.train.config import PPOConfig

PRESETS: dict[str, dict[str, Any]] = {
    # PureJaxRL's CartPole settings.
    "CartPole-v1": dict(
        num_envs=4, num_steps=128, total_timesteps=500_000, update_epochs=4, num_minibatches=4,
        lr=2.5e-4, gamma=0.99, gae_lambda=0.95, clip_eps=0.2, ent_coef=0.01, vf_coef=0.5,
        max_grad_norm=0.5, hidden_sizes=(64, 64), activation="tanh",
    ),
}


def preset(env_id: str, **overrides) -> PPOConfig:
    """The tuned `PPOConfig` for `env_id`, with `overrides` applied.

    An env without a preset gets `PPOConfig`'s defaults (PureJaxRL's) and `env_id`.
    """
    kwargs = {**PRESETS.get(env_id, {}), **overrides, "env_id": env_id}
    return PPOConfig(**kwargs)


def has_preset(env_id: str) -> bool:
    return env_id in PRESETS
