"""The phases of a training update, each a `jax.named_scope` around its part of the program.

XLA keeps a scope's name in the metadata (`op_name`) of every operation traced inside it, and the
profiler's events name those operations (`hlo_op`), so a trace of a run says how much device time
each phase took (`fusedrl profile --phases`, `fusedrl.profile.profile_phases`). Each phase's scope
name is defined here once; the trainer's parts wrap their code with `scope(phase)` or `scoped`,
and `hlo_phases` reads them back from a compiled program (for the profile's device time per phase
and `fusedrl.launches`' kernel count per phase).
"""

from __future__ import annotations

import functools
import re
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


# ---- reading the phases back from a compiled program's HLO ----------------------------------------

#: The rows of the phase table, in order: the trainer's phases (`fusedrl.train.phases.PHASES`), then
#: "other" (operations under no phase's scope: per-update metrics, loop bookkeeping, XLA's copies).
PHASE_ROWS = (*PHASES, "other")

_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?([^\s=]+)\s*=\s*(.*)$")
_COMPUTATION = re.compile(r"^\s*(?:ENTRY\s+)?%?([^\s(]+)\s*\(.*\{\s*$")
_OPCODE = re.compile(r"(?<![\w.\-])([a-z][a-z0-9\-]*)\(")
_OP_NAME = re.compile(r'metadata=\{[^}]*?op_name="([^"]*)"')
_CALLS = re.compile(r"calls=%?([\w.\-]+)")
_SCOPE = re.compile("(?<![A-Za-z0-9_])(" + "|".join(map(re.escape, PHASES.values())) + ")(?![A-Za-z0-9_])")
_PHASE_OF_SCOPE = {v: k for k, v in PHASES.items()}


def phase_of(op_name: str) -> str:
    """The phase of an operation from its `op_name` (the scope path jax wrote into its metadata):
    the innermost phase scope on the path, "other" under none."""
    found = _SCOPE.findall(op_name or "")
    return _PHASE_OF_SCOPE[found[-1]] if found else "other"


def hlo_computations(hlo_text: str) -> tuple[str, str | None, dict[str | None, list[tuple[str, str, str]]]]:
    """(module name, entry computation, {computation: [(instruction, opcode, rest of its line)]}) of
    a compiled program's HLO text (`compiled.as_text()`), the instructions in their order. The one
    reader of that text here: `hlo_phases` and `fusedrl.launches.count_launches` both start from it."""
    module, entry, current = "", None, None
    computations: dict[str | None, list[tuple[str, str, str]]] = {}
    for line in hlo_text.splitlines():
        if line.startswith("HloModule "):
            module = line.split()[1].rstrip(",")
            continue
        c = _COMPUTATION.match(line)
        if c and "=" not in line.split("(", 1)[0]:
            current = c.group(1)
            computations[current] = []
            if line.lstrip().startswith("ENTRY"):
                entry = current
            continue
        m = _INSTRUCTION.match(line)
        if m and not line.rstrip().endswith("{"):
            name, rest = m.groups()
            opcode = _OPCODE.search(rest)
            computations.setdefault(current, []).append((name, opcode.group(1) if opcode else "", rest))
    return module, entry, computations


def hlo_phases(hlo_text: str, computations=None) -> tuple[str, dict[str, tuple[str, str]]]:
    """(module name, {instruction name: (opcode, phase)}) of a compiled program's HLO text
    (`compiled.as_text()`; or its `hlo_computations`, already read). A fusion's phase is its own
    metadata's, or, where it has none, the most common phase among the operations it fuses."""
    module, _, computations = hlo_computations(hlo_text) if computations is None else ("", None, computations)
    ops: dict[str, tuple[str, str | None]] = {}
    calls: dict[str, str] = {}
    members: dict[str, list[str]] = {}
    for computation, instructions in computations.items():
        for name, opcode, rest in instructions:
            op_name = _OP_NAME.search(rest)
            ops[name] = (opcode, phase_of(op_name.group(1)) if op_name else None)
            called = _CALLS.search(rest)
            if called:
                calls[name] = called.group(1)
            if computation is not None:
                members.setdefault(computation, []).append(name)
    out = {}
    for name, (opcode, phase) in ops.items():
        if phase is None:
            inner = [ops[i][1] for i in members.get(calls.get(name, ""), []) if ops[i][1] is not None]
            named = [p for p in inner if p != "other"] or inner
            phase = max(set(named), key=named.count) if named else "other"
        out[name] = (opcode, phase)
    return module, out


__all__ = ["PHASES", "PHASE_ROWS", "hlo_computations", "hlo_phases", "phase_of", "scope", "scoped"]
