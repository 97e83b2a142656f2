"""MountainCarContinuous-v0 (Moore 1990, continuous throttle), matching Gymnasium 1.x."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from fusedrl.envs.base import Box, Environment, EnvParams, EnvState
from fusedrl.envs.mountain_car import valley_step


@struct.dataclass
class MountainCarContinuousState(EnvState):
    position: jax.Array  # [] float32 car position in [min_position, max_position]
    velocity: jax.Array  # [] float32 car velocity in [-max_speed, max_speed]
    time: jax.Array  # [] int32 steps taken in this episode


@struct.dataclass
class MountainCarContinuousParams(EnvParams):
    min_action: float = -1.0
    max_action: float = 1.0
    min_position: float = -1.2
    max_position: float = 0.6
    max_speed: float = 0.07
    goal_position: float = 0.45
    goal_velocity: float = 0.0
    power: float = 0.0015  # velocity change per step per unit of throttle
    gravity: float = 0.0025  # scales the slope term cos(3 * position)
    max_steps_in_episode: int = 999


class MountainCarContinuous(Environment):
    """Drive an underpowered car up the right hill of a valley with a continuous throttle.

    Observation: float32 [2]: position, velocity.
    Action: float32 [1], Box(-1, 1): the throttle; values outside [min_action, max_action] are
      clipped for the dynamics.
    Reward: float32 [], -0.1 * action[0]**2 every step, plus 100 on the step that reaches the goal.
      As in Gymnasium, the cost uses the action as given, before clipping.
    Terminated: position >= goal_position (0.45) and velocity >= goal_velocity (0).
    Truncated: after `max_steps_in_episode` (999) steps.
    Reset: position uniform in [-0.6, -0.4], velocity 0.

    Velocity is clipped to [-max_speed, max_speed], position to [min_position, max_position], and
    the car stops (velocity 0) when it hits the left wall while moving left.
    """

    deterministic_step = True

    # A reset draws a few uniforms, about what a step costs: declared, so that no run measures it.

    expensive_reset = False

    @property
    def name(self) -> str:
        return "MountainCarContinuous-v0"

    @property
    def default_params(self) -> MountainCarContinuousParams:
        return MountainCarContinuousParams()

    @property
    def num_actions(self) -> int:
        return 1

    def step_env(self, key, state: MountainCarContinuousState, action, params):
        del key
        throttle = action[0]
        force = jnp.clip(throttle, params.min_action, params.max_action)
        position, velocity = valley_step(state.position, state.velocity, force * params.power, params)
        state = MountainCarContinuousState(position=position, velocity=velocity, time=state.time + 1)
        terminated = self.is_terminated(state, params)
        reward = (jnp.where(terminated, 100.0, 0.0) - 0.1 * throttle**2).astype(jnp.float32)
        return self.get_obs(state), state, reward, terminated, {}

    def reset_env(self, key, params: MountainCarContinuousParams):
        position = jax.random.uniform(key, (), jnp.float32, minval=-0.6, maxval=-0.4)
        state = MountainCarContinuousState(
            position=position, velocity=jnp.zeros((), jnp.float32), time=jnp.int32(0)
        )
        return self.get_obs(state), state

    def get_obs(self, state: MountainCarContinuousState, params=None, key=None) -> jax.Array:
        return jnp.stack([state.position, state.velocity]).astype(jnp.float32)

    def is_terminated(self, state: MountainCarContinuousState, params) -> jax.Array:
        return (state.position >= params.goal_position) & (state.velocity >= params.goal_velocity)

    def action_space(self, params: MountainCarContinuousParams | None = None) -> Box:
        params = self.default_params if params is None else params
        return Box(params.min_action, params.max_action, (1,), jnp.float32)

    def observation_space(self, params: MountainCarContinuousParams) -> Box:
        low = jnp.array([params.min_position, -params.max_speed], jnp.float32)
        high = jnp.array([params.max_position, params.max_speed], jnp.float32)
        return Box(low, high, (2,), jnp.float32)
