"""JaxMARL's multi-agent envs as `jaxmarl:<id>` (the `jaxmarl` extra).

They are already on the contract the learners take (JaxMARL's `MultiAgentEnv`, see
`fusedrl.envs.multiagent`), so the adapter runs their code where it broadcasts across ranks
(`suite_code`), builds each offered id with its settings, and tells `TeamEnv` what JaxMARL's `dones`
leave out. The ids (tests/test_suite_jaxmarl.py checks each family step by step against JaxMARL):

    MPE_<name>            JaxMARL's MPE envs with discrete actions. Their only end of episode is the
                          time limit (`max_steps` = 25: JaxMARL ends the episode on its 26th step),
                          which `TeamEnv` reports as truncation where JaxMARL's `dones` call it done.
                          Agents that differ (speaker_listener, push, adversary, tag, crypto) are
                          padded by `TeamEnv`.
    smax_<map>            SMAX's scenario <map> (3m, 2s3z, 5m_vs_6m, ...) against JaxMARL's heuristic
                          enemy (`HeuristicEnemySMAX`, as JaxMARL's IPPO/MAPPO baselines run it): the
                          allies are the agents. Masks from `get_avail_actions`; the battle's end is a
                          termination, its time limit (100 steps) a truncation; `world_state` (every
                          unit's features) is the centralised critic's input.
    HeuristicEnemySMAX    the same with JaxMARL's defaults (5 marines against 5).
    overcooked_<layout>   Overcooked (cramped_room, asymm_advantages, coord_ring, forced_coord,
                          counter_circuit), with its sparse delivery reward (20 per soup; JaxMARL's
                          shaped reward, info["shaped_reward"], is not added); its episodes end only
                          at the time limit (400 steps): truncated.
    hanabi                Hanabi for 2 players; the legal moves (`get_legal_moves`: the player not to
                          move may only pass) are the action masks; no time limit.
"""

from __future__ import annotations

import functools
import os
import sys
import warnings
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

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

from jaxmarl.environments.overcooked import overcooked_layouts  # noqa: E402 (after the quiet import)
from jaxmarl.environments.smax import map_name_to_scenario  # noqa: E402
from jaxmarl.environments.smax.smax_env import MAP_NAME_TO_SCENARIO  # noqa: E402

#: JaxMARL's MPE envs offered: discrete actions (the padded ones: agents that differ).
MPE_NAMES = ("MPE_simple_v3", "MPE_simple_spread_v3", "MPE_simple_reference_v3",
             "MPE_simple_speaker_listener_v4", "MPE_simple_push_v3", "MPE_simple_adversary_v3",
             "MPE_simple_tag_v3", "MPE_simple_crypto_v3")
SMAX_PREFIX, OVERCOOKED_PREFIX = "smax_", "overcooked_"

#: Why JaxMARL's other ids are not offered (by name), and what to use instead.
REFUSED = {
    "SMAX": "its agents are both teams (self-play); one shared policy and a team reward that "
            "averages the two opposing teams would mean nothing. Use jaxmarl:smax_<map> (the allies "
            "against JaxMARL's heuristic enemy), e.g. jaxmarl:smax_3m.",
    "LearnedPolicyEnemySMAX": "it needs the enemy's policy and parameters as arguments. Use "
                              "jaxmarl:smax_<map>, e.g. jaxmarl:smax_3m.",
    "overcooked": "name the layout: jaxmarl:overcooked_cramped_room (or asymm_advantages, coord_ring, "
                  "forced_coord, counter_circuit).",
    "MPE_simple_world_comm_v3": "its agents act continuously with actions of different sizes "
                                "(leadadversary_0 Box(9), the others Box(5)), which one policy "
                                "cannot pad (only discrete actions can be masked).",
}


def _smax(map_name: str):
    return jaxmarl.make("HeuristicEnemySMAX", scenario=map_name_to_scenario(map_name))


def _overcooked(layout: str):
    # jaxmarl warns (DeprecationWarning) on every Overcooked it builds that OvercookedV2 exists.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="OvercookedV2 is now released", category=DeprecationWarning)
        return jaxmarl.make("overcooked", layout=overcooked_layouts[layout])


def _builders() -> dict[str, Callable[[], Any]]:
    """Every offered name -> a function that builds its JaxMARL env."""
    out: dict[str, Callable[[], Any]] = {n: (lambda n=n: jaxmarl.make(n)) for n in MPE_NAMES}
    out.update({f"{SMAX_PREFIX}{m}": (lambda m=m: _smax(m)) for m in MAP_NAME_TO_SCENARIO})
    out["HeuristicEnemySMAX"] = lambda: jaxmarl.make("HeuristicEnemySMAX")
    out.update({f"{OVERCOOKED_PREFIX}{lay}": (lambda lay=lay: _overcooked(lay))
                for lay in overcooked_layouts})
    out["hanabi"] = lambda: jaxmarl.make("hanabi")
    return out


class JaxMARLEnv:
    """A JaxMARL env with its JaxMARL contract, its code run under `suite_code`; its observation
    spaces are the shapes its observations have (Overcooked declares (width, height, 26) and returns
    (height, width, 26); Hanabi's shape is an int)."""

    def __init__(self, env: Any, name: str):
        self.env, self.env_name = env, name
        self.agents = list(env.agents)
        self.num_agents = len(self.agents)
        self.max_steps = getattr(env, "max_steps", None)
        self._hanabi = name == "hanabi"
        if type(env).__name__ == "HeuristicEnemySMAX":  # TeamEnv reads it where defined
            self.ended_at_time_limit = self._smax_time_limit

    @functools.cached_property
    def _obs(self) -> dict:
        """{agent: ShapeDtypeStruct} of what reset returns (traced once, on first use)."""
        with suite_code():
            return jax.eval_shape(lambda k: self.env.reset(k)[0], jax.random.key(0))

    def observation_space(self, agent: str):
        space, obs = self.env.observation_space(agent), self._obs[agent]
        return spaces.Box(jnp.asarray(space.low, obs.dtype), jnp.asarray(space.high, obs.dtype), obs.shape,
                          obs.dtype)

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
            if self._hanabi:  # Hanabi's masks are its legal moves (get_avail_actions is not implemented)
                return self.env.get_legal_moves(state)
            return self.env.get_avail_actions(state)

    def _smax_time_limit(self, state) -> jax.Array:
        """Whether a SMAX episode that ended on this step ended at the time limit rather than with one
        side wiped out (JaxMARL's `is_terminal` is either; a battle won on the last step is won)."""
        inner, allies = state.state, self.env.num_allies
        battle_over = ~inner.unit_alive[:allies].any() | ~inner.unit_alive[allies:].any()
        return (inner.step >= self.env.max_steps) & ~battle_over

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
    return list(_builders())


def unavailable(name: str) -> str | None:
    if name in REFUSED:
        return f"JaxMARL's {name} is not offered: {REFUSED[name]}"
    if name in jaxmarl.registered_envs:
        return (f"JaxMARL's {name} is not offered yet: its adapter is not written and tested. Offered: "
                f"{', '.join(env_names())}.")
    return None


def make_env(name: str) -> JaxMARLEnv:
    # Constant arrays (MPE's radii, checked with `assert jnp.all(...)`) stay concrete when the env is
    # built while a program is traced (config.hparams() makes the env).
    with suite_code(), jax.ensure_compile_time_eval():
        return JaxMARLEnv(_builders()[name](), name)
