"""JaxMARL's multi-agent envs as `jaxmarl:<name>` (the `jaxmarl` extra).

They are already on the contract the learners take (JaxMARL's `MultiAgentEnv`, see
`fusedrl.envs.multiagent`), so the adapter only runs their code where it broadcasts across ranks
(`suite_code`) and offers the envs whose agents share one observation shape and one action space.
MPE's time limit (`max_steps` = 25: JaxMARL ends the episode on its 26th step) is its only end of
episode: `TeamEnv` reports it as truncation, where JaxMARL's own `dones` call it done.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import jax

from fusedrl.envs._gymnax import spaces
from fusedrl.envs.suites import suite_code


def _import_quietly():
    """`import jaxmarl`, leaving stdout and stderr as they were. jaxmarl 0.2.0 prints two lines to
    stdout when imported ("Importing submoduled environments..."), and its MABrax module sets
    `sys.stdout` and `sys.stderr` back to `sys.__stdout__`/`sys.__stderr__` after importing brax,
    which undoes any redirection (pytest's capture, `contextlib.redirect_stdout`, a notebook's). So
    file descriptor 1 points at /dev/null during the import, and the two streams are put back after."""
    out, err = sys.stdout, sys.stderr
    out.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            import jaxmarl  # optional dependency: the jaxmarl extra

            sys.stdout.flush()
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        sys.stdout, sys.stderr = out, err
    return jaxmarl


jaxmarl = _import_quietly()

#: The JaxMARL envs offered (tests/test_suite_jaxmarl.py): MPE with discrete actions, whose agents share one
#: observation shape and action space.
NAMES = ("MPE_simple_v3", "MPE_simple_spread_v3", "MPE_simple_reference_v3")


class JaxMARLEnv:
    """A JaxMARL env with its JaxMARL contract unchanged, its code run under `suite_code`."""

    def __init__(self, env: Any, name: str):
        self.env, self.env_name = env, name
        self.agents = list(env.agents)
        self.num_agents = len(self.agents)
        self.max_steps = getattr(env, "max_steps", None)

    def observation_space(self, agent: str):
        return _gymnax_space(self.env.observation_space(agent))

    def action_space(self, agent: str):
        return _gymnax_space(self.env.action_space(agent))

    def reset(self, key):
        with suite_code():
            return self.env.reset(key)

    def step_env(self, key, state, actions):
        with suite_code():
            return self.env.step_env(key, state, actions)

    def get_obs(self, state):
        with suite_code():
            return self.env.get_obs(state)

    def get_avail_actions(self, state):
        with suite_code():
            return self.env.get_avail_actions(state)

    def __repr__(self) -> str:
        return f"JaxMARLEnv({self.env_name!r})"


def _gymnax_space(space):
    """JaxMARL's Discrete and Box spaces as gymnax's (the classes the rest of fusedrl reads); others as
    they are."""
    name = type(space).__name__
    if name == "Discrete":
        return spaces.Discrete(int(space.n))
    if name == "Box":
        return spaces.Box(space.low, space.high, tuple(space.shape), space.dtype)
    return space


def env_names() -> list[str]:
    return [n for n in NAMES if n in jaxmarl.registered_envs]


def unavailable(name: str) -> str | None:
    if name in jaxmarl.registered_envs:
        return (f"JaxMARL's {name} is not offered yet: its agents differ in observation shape or action "
                f"space (padding them is a later step), or its adapter is not written and tested yet. "
                f"Offered: {', '.join(env_names())}.")
    return None


def make_env(name: str) -> JaxMARLEnv:
    # Constant arrays (MPE's radii, checked with `assert jnp.all(...)`) stay concrete when the env is
    # built while a program is traced (config.hparams() makes the env).
    with suite_code(), jax.ensure_compile_time_eval():
        return JaxMARLEnv(jaxmarl.make(name), name)
