"""A multi-agent env of your own on JaxMARL's `MultiAgentEnv` contract: two agents that must pick
different, matching actions (docs/multiagent.md walks through it).

Every step both agents see the same cue c (one-hot of `num_cues`). Agent i scores when it picks
(c + i) % num_cues; each agent's reward is 0.5 for its own score plus 0.5 when both scored. Since
both see the same thing, one shared policy can only tell them apart by the one-hot agent id the
learners append: without it the best expected team reward is far below 1. Episodes are `max_steps`
long (a time limit: the learners bootstrap through it).

Train it:  fusedrl train --import my_team --env MatchingTeam-v0 --total-timesteps 20000
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct
from gymnax.environments import spaces

import fusedrl


@struct.dataclass
class TeamState:
    cue: jax.Array  # [] int32 the cue both agents see
    step: jax.Array  # [] int32 steps taken in the episode


class MatchingTeam:
    """Observation per agent: one-hot cue [num_cues] float32. Action per agent: Discrete(num_cues).
    Reward per agent: 0.5 * own score + 0.5 * team score. dones["__all__"] at `max_steps`."""

    def __init__(self, num_cues: int = 3, max_steps: int = 8):
        self.num_cues, self.max_steps = num_cues, max_steps
        self.agents = ["agent_0", "agent_1"]
        self.num_agents = len(self.agents)

    def observation_space(self, agent: str):
        return spaces.Box(0.0, 1.0, (self.num_cues,), jnp.float32)

    def action_space(self, agent: str):
        return spaces.Discrete(self.num_cues)

    def get_obs(self, state: TeamState) -> dict[str, jax.Array]:
        cue = jax.nn.one_hot(state.cue, self.num_cues, dtype=jnp.float32)
        return {a: cue for a in self.agents}

    def reset(self, key: jax.Array):
        state = TeamState(cue=jax.random.randint(key, (), 0, self.num_cues), step=jnp.int32(0))
        return self.get_obs(state), state

    def step_env(self, key: jax.Array, state: TeamState, actions: dict[str, jax.Array]):
        scores = [actions[a] == (state.cue + i) % self.num_cues for i, a in enumerate(self.agents)]
        team = jnp.logical_and(*scores).astype(jnp.float32)
        own = [s.astype(jnp.float32) for s in scores]
        rewards = {a: 0.5 * r + 0.5 * team for a, r in zip(self.agents, own, strict=True)}
        new = TeamState(cue=jax.random.randint(key, (), 0, self.num_cues), step=state.step + 1)
        done = new.step >= self.max_steps
        dones = {**{a: done for a in self.agents}, "__all__": done}
        return self.get_obs(new), new, rewards, dones, {}


fusedrl.register("MatchingTeam-v0", MatchingTeam, overwrite=True)
