"""The trainer's speed choices: one frozen record, resolved from the platform and the run's sizes.

A speed choice changes how the program computes, never what. It belongs here only where it was
measured to pay across a grid of sizes (1-64 vmapped agents, 4-2048 envs per agent) on every
supported jax version, and it never depends on the number of vmapped agents (the trainer cannot see
it) or on the jax version. `python -m fusedrl.bench tuning` measures a choice across that grid
(docs/speed.md has the table). No choice has passed so far: the record holds a memory bound the rollout
needs and choices kept off until measured, and `resolve_tuning` gives the same record on every platform.
`make_train(config, tuning=...)` takes a record explicitly (tests and benchmarks pass their own).
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Tuning:
    """How the fused trainer computes one update (see the module docstring).

    Fields:
      predraw_max_bytes: the largest rollout-ahead draw of reset states (`VecEnv.rollout_draws`);
        a memory bound: above it, and for envs with expensive resets, envs reset from their per-env
        pool instead.
      value_in_rollout: value each step's next observation inside the rollout step
        (`Transition.next_value`) instead of storing it (`next_obs` [T, N, ...]) for the targets to
        value in one batched call: the same values up to float rounding, one observation per
        transition less in memory (12.5 MiB per MinAtar-Breakout agent at its preset), but 2-8%
        slower on the CPU grid (docs/gpu.md), so off until a GPU measurement shows where it pays.
    """

    predraw_max_bytes: int = 256 * 2**20
    value_in_rollout: bool = False

    def __post_init__(self):
        if not isinstance(self.predraw_max_bytes, int) or self.predraw_max_bytes < 0:
            raise ValueError(f"Tuning.predraw_max_bytes must be an int >= 0, got {self.predraw_max_bytes!r}.")
        if not isinstance(self.value_in_rollout, bool):
            raise ValueError(f"Tuning.value_in_rollout must be a bool, got {self.value_in_rollout!r}.")


def resolve_tuning(backend: str, *, num_envs: int, batch_size: int) -> Tuning:
    """The speed choices for one agent's `num_envs` envs and `batch_size` transitions per update, on
    `backend` (`fusedrl.platform.choices_platform()`: "cpu", "gpu", "tpu", ...). The one place a
    choice that passes the grid is added."""
    del backend, num_envs, batch_size  # no choice depends on them today
    return Tuning()


__all__ = ["Tuning", "resolve_tuning"]
