"""The phases of a training update, each a `jax.named_scope` around its part of the program.

XLA keeps a scope's name in the metadata (`op_name`) of every operation traced inside it, and the
profiler's events name those operations (`hlo_op`), so a trace of a run says how much device time
each phase took (`fusedrl profile --phases`, `fusedrl.profile.profile_phases`). Each phase's scope
name is defined here once; the trainer's parts wrap their code with `scope(phase)` or `scoped`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax

#: phase -> the scope name its operations carry. Operations under none of them are "other"
#: (the per-update metrics, the loops' own bookkeeping, copies XLA adds).
PHASES = {
    "env": "fusedrl_env",  # the envs' step (and reset), and their pre-drawn randomness
    "policy": "fusedrl_policy",  # the policy's forward pass in the rollout, action sampling, log-prob
    "advantages": "fusedrl_advantages",  # values of the next observations and the targets (GAE)
    "loss": "fusedrl_loss",  # the loss's forward and backward pass on each minibatch
    "optimizer": "fusedrl_optimizer",  # the optimiser's update and applying it to the parameters
    "shuffle": "fusedrl_shuffle",  # each epoch's permutation and gathering the minibatches
}


def scope(phase: str):
    """The `jax.named_scope` of `phase` (a key of `PHASES`)."""
    return jax.named_scope(PHASES[phase])


def scoped(phase: str, fn: Callable) -> Callable:
    """`fn` traced inside the scope of `phase`."""

    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        with scope(phase):
            return fn(*args, **kwargs)

    return wrapped


__all__ = ["PHASES", "scope", "scoped"]
