"""JaxMARL's Overcooked with its shaped reward added to each cook's reward (docs/multiagent.md).

`jaxmarl:overcooked_<layout>` rewards only deliveries (20 per soup, both cooks). JaxMARL's Overcooked
also returns a shaped reward per cook in its info (`info["shaped_reward"]`: 3 for an onion put in a
pot, 3 for a plate picked up while a soup cooks, 5 for a soup picked up), which JaxMARL's own IPPO
baseline adds to the reward, annealed from 1 to 0 over its first 2.5M env steps
(`REW_SHAPING_HORIZON`). This env adds it with a constant weight `coef` (no annealing: an env does
not know how far training has gone); its `episode_return` then counts the shaped reward too.

Train it:  fusedrl train --import overcooked_shaped --env OvercookedShaped-v0
"""

from __future__ import annotations

import fusedrl


class ShapedOvercooked:
    """`jaxmarl:overcooked_<layout>`, each cook's reward + `coef` * its `info["shaped_reward"]`."""

    def __init__(self, layout: str = "cramped_room", coef: float = 1.0):
        self.env, _ = fusedrl.make(f"jaxmarl:overcooked_{layout}")
        self.coef = float(coef)
        self.agents = list(self.env.agents)
        self.num_agents = len(self.agents)
        self.max_steps = self.env.max_steps  # episodes end at this limit: a truncation

    def observation_space(self, agent):
        return self.env.observation_space(agent)

    def action_space(self, agent):
        return self.env.action_space(agent)

    def reset(self, key):
        return self.env.reset(key)

    def step_env(self, key, state, actions):
        obs, state, rewards, dones, info = self.env.step_env(key, state, actions)
        shaped = info["shaped_reward"]
        rewards = {a: rewards[a] + self.coef * shaped[a] for a in self.agents}
        return obs, state, rewards, dones, info


fusedrl.register("OvercookedShaped-v0", ShapedOvercooked, overwrite=True)
