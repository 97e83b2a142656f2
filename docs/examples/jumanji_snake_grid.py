"""Jumanji's Snake seen through its grid alone, for the learners that take one Box observation.

`fusedrl.make("jumanji:Snake-v1")` observes a dict (`grid`, `step_count`, `action_mask`); until the
networks take dict observations and action masks, this registers "SnakeGrid-v1": the same env
(the adapter's episode ends and time limit) observing only the [12, 12, 5] grid and taking any of
the 4 actions (a move into the snake's own neck ends the episode, as Jumanji's Snake has it). It is
Stoix's Snake setup (`observation_attribute: grid`, no mask). Needs the jumanji extra.

    fusedrl train --import docs.examples.jumanji_snake_grid --env SnakeGrid-v1 --num-seeds 4
"""

from __future__ import annotations

import fusedrl
from fusedrl.envs import Environment


class SnakeGrid(Environment):
    """jumanji:Snake-v1 with observation `obs["grid"]` (float32 [12, 12, 5]); all else unchanged."""

    deterministic_step = True  # as the adapter: Jumanji draws from the key in its state

    def __init__(self):
        super().__init__()
        self.env, _ = fusedrl.make("jumanji:Snake-v1")

    @property
    def name(self) -> str:
        return "SnakeGrid-v1"

    @property
    def default_params(self):
        return self.env.default_params

    def action_space(self, params):
        return self.env.action_space(params)

    def observation_space(self, params):
        return self.env.observation_space(params).spaces["grid"]

    def reset_env(self, key, params):
        obs, state = self.env.reset_env(key, params)
        return obs["grid"], state

    def step_env(self, key, state, action, params):
        obs, state, reward, terminated, info = self.env.step_env(key, state, action, params)
        return obs["grid"], state, reward, terminated, info

    def is_truncated(self, state, params):
        return self.env.is_truncated(state, params)


fusedrl.register("SnakeGrid-v1", SnakeGrid, overwrite=True)
