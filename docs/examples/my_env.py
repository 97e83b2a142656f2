"""A complete custom environment: walk along a line to a target (docs/environments.md explains it).

Train it from Python:

    import jax, fusedrl
    import docs.examples.my_env  # registers "WalkToTarget-v0" (your own module: import my_env)
    config = fusedrl.PPOConfig(env_id="WalkToTarget-v0", total_timesteps=100_000)
    result = jax.jit(fusedrl.make_train(config))(jax.random.key(0))

or from the command line, in the clone's root folder:

    fusedrl train --import docs.examples.my_env --env WalkToTarget-v0 --total-timesteps 100000
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

import fusedrl
from fusedrl.envs import Box, Discrete, Environment, EnvParams, EnvState


@struct.dataclass
class WalkState(EnvState):
    """Everything that changes during an episode. Every field keeps its shape and dtype."""

    position: jax.Array  # [] float32, in [-1, 1]
    target: jax.Array  # [] float32, in [-1, 1]
    time: jax.Array  # [] int32, steps taken in this episode (the default time limit reads it)


@struct.dataclass
class WalkParams(EnvParams):
    """Numbers the dynamics read. They are traced: `fusedrl.sweep` can vary them without recompiling.

    Anything computed from them is computed in `step_env`, never stored here, so that
    `params.replace(step_size=...)` can never leave a stale derived value behind.
    """

    step_size: float = 0.1  # how far one move goes
    goal_radius: float = 0.05  # the episode ends (terminated) within this distance of the target
    step_penalty: float = 0.1  # reward -step_penalty for every step that does not reach the target
    goal_reward: float = 1.0  # reward for the step that reaches it
    max_steps_in_episode: int = 100  # the time limit: the episode is truncated after this many steps


class WalkToTarget(Environment):
    """Walk along [-1, 1] to a target, in as few steps as possible.

    Observation: float32 [2]: the position and the target.
    Action: int32 [], Discrete(3): 0 moves left, 1 stays, 2 moves right, by `step_size`.
    Reward: `goal_reward` on the step that reaches the target, else `-step_penalty`.
    Terminated: the position is within `goal_radius` of the target.
    Truncated: after `max_steps_in_episode` steps (gymnax's default `is_truncated`).
    Reset: position and target uniform in [-1, 1].
    """

    # step_env ignores its key: the vectorised stepper can skip splitting a key per env and step.
    deterministic_step = True

    @property
    def name(self) -> str:
        return "WalkToTarget-v0"

    @property
    def default_params(self) -> WalkParams:
        return WalkParams()

    def reset_env(self, key, params):
        position, target = jax.random.uniform(key, (2,), jnp.float32, minval=-1.0, maxval=1.0)
        state = WalkState(position=position, target=target, time=jnp.int32(0))
        return self.get_obs(state), state

    def step_env(self, key, state, action, params):
        # key is unused: the dynamics are deterministic (deterministic_step above)
        move = (action - 1).astype(jnp.float32) * params.step_size
        state = state.replace(position=jnp.clip(state.position + move, -1.0, 1.0), time=state.time + 1)
        terminated = jnp.abs(state.position - state.target) < params.goal_radius  # bool []
        reward = jnp.where(terminated, params.goal_reward, -params.step_penalty).astype(jnp.float32)
        # gymnax's 5-tuple; the base class adds `truncated` and resets finished episodes.
        return self.get_obs(state), state, reward, terminated, {}

    def get_obs(self, state: WalkState, params=None, key=None) -> jax.Array:
        return jnp.stack([state.position, state.target]).astype(jnp.float32)

    def action_space(self, params=None) -> Discrete:
        return Discrete(3)

    def observation_space(self, params=None) -> Box:
        return Box(-1.0, 1.0, (2,), jnp.float32)


fusedrl.register("WalkToTarget-v0", WalkToTarget)
