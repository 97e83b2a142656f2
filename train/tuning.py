"""The trainer's speed choices: one frozen record, resolved from the platform and the run's sizes.

Each choice changes how the program computes, never what: a test trains with every choice on and
with `Tuning()` (all off) and compares the runs. `make_train(config, tuning=...)` takes a record
explicitly (tests and benchmarks pass their own); by default `resolve_tuning` picks one for the
platform `fusedrl.platform.choices_platform()` names (jax's default backend unless forced). A
choice is on only where it was measured to pay across a grid of sizes (1-64 vmapped agents, 4-2048
envs per agent) on every supported jax version; it never depends on the number of vmapped agents
(the trainer cannot see it) or on the jax version. The measurements and the command that repeats
them are in docs/speed.md (`python -m fusedrl.bench tuning`).

On platforms other than the CPU nothing has been measured yet, so there every choice is off.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Tuning:
    """How the fused trainer computes one update (see the module docstring).

    Fields:
      shuffle_ahead: draw each epoch's minibatch permutation one epoch ahead, so that XLA can
        overlap the sort with the previous epoch's gradient steps (same permutations either way).
      cpu_weight_grad: the built-in network's layers compute their weight gradient with the narrower
        operand transposed first (`fusedrl.networks.matmul`), a layout XLA:CPU's fast matmul
        kernels take; it costs forward-mode autodiff of the built-in network (`jax.jvp`).
      predraw_max_bytes: the largest rollout-ahead draw of reset states (`VecEnv.rollout_draws`);
        not a speed trick but a memory bound: above it envs reset from their per-env pool.
    """

    shuffle_ahead: bool = False
    cpu_weight_grad: bool = False
    predraw_max_bytes: int = 256 * 2**20

    def __post_init__(self):
        for name in ("shuffle_ahead", "cpu_weight_grad"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"Tuning.{name} must be True or False, got {getattr(self, name)!r}.")
        if not isinstance(self.predraw_max_bytes, int) or self.predraw_max_bytes < 0:
            raise ValueError(f"Tuning.predraw_max_bytes must be an int >= 0, got {self.predraw_max_bytes!r}.")


def resolve_tuning(backend: str, *, num_envs: int, batch_size: int) -> Tuning:
    """The speed choices for one agent's `num_envs` envs and `batch_size` transitions per update,
    on `backend` (`jax.default_backend()`: "cpu", "gpu", "tpu", ...)."""
    if backend != "cpu":
        return Tuning()
    return Tuning(
        shuffle_ahead=batch_size > 4096,
        cpu_weight_grad=True,
    )


__all__ = ["Tuning", "resolve_tuning"]
