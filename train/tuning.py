"""The trainer's speed choices: one frozen record, resolved from the platform and the run's sizes.

A speed choice changes how the program computes, never what. It belongs here only where it was
measured to pay across a grid of sizes (1-64 vmapped agents, 4-2048 envs per agent) on every
supported jax version, and it never depends on the number of vmapped agents (the trainer cannot see
it) or on the jax version. `python -m fusedrl.bench tuning` measures a choice across that grid
(docs/speed.md has the table). No choice has passed so far: the record holds the one setting the
rollout needs, a memory bound, and `resolve_tuning` gives the same record on every platform.
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
    """

    predraw_max_bytes: int = 256 * 2**20

    def __post_init__(self):
        if not isinstance(self.predraw_max_bytes, int) or self.predraw_max_bytes < 0:
            raise ValueError(f"Tuning.predraw_max_bytes must be an int >= 0, got {self.predraw_max_bytes!r}.")


def resolve_tuning(backend: str, *, num_envs: int, batch_size: int) -> Tuning:
    """The speed choices for one agent's `num_envs` envs and `batch_size` transitions per update, on
    `backend` (`fusedrl.platform.choices_platform()`: "cpu", "gpu", "tpu", ...). The one place a
    choice that passes the grid is added."""
    del backend, num_envs, batch_size  # no choice depends on them today
    return Tuning()


__all__ = ["Tuning", "resolve_tuning"]
