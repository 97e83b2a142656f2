"""MountainCar-v0 (Moore 1990), matching Gymnasium 1.x."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from fusedrl.envs.base import Box, Discrete, Environment, EnvParams, EnvState


@struct.dataclass
class MountainCarState(EnvState):
    position: jax.Array  # [] float32 car position in [min_position, max_position]
    velocity: jax.Array  # [] float32 car velocity in [-max_speed, max_speed]
    time: jax.Array  # [] int32 steps taken in this episode


@struct.dataclass
class MountainCarParams(EnvParams):
    min_position: float = -1.2
    max_position: float = 0.6
    max_speed: float = 0.07
    goal_position: float = 0.5
    goal_velocity: float = 0.0
    force: float = 0.001  # velocity change per step from full throttle
    gravity: float = 0.0025  # scales the slope term cos(3 * position)
    max_steps_in_episode: int = 200


class MountainCar(Environment):
    """Drive an underpowered car up the right hill of a valley by rocking back and forth.

    Observation: float32 [2]: position, velocity.
    Action: int32 [], Discrete(3): 0 accelerates left, 1 does nothing, 2 accelerates right.
    Reward: float32 [], -1 for every step, including the terminating one.
    Terminated: position >= goal_position (0.5) and velocity >= goal_velocity (0).
    Truncated: after `max_steps_in_episode` (200) steps.
    Reset: position uniform in [-0.6, -0.4], velocity 0.

    Velocity is clipped to [-max_speed, max_speed], position to [min_position, max_position], and
    the car stops (velocity 0) when it hits the left wall while moving left.
    """

    deterministic_step = True

    # A reset draws a few uniforms, about what a step costs: declared, so that no run measures it.

    expensive_reset = False

    @property
    def name(self) -> str:
        return "MountainCar-v0"

    @property
    def default_params(self) -> MountainCarParams:
        return MountainCarParams()

    @property
    def num_actions(self) -> int:
        return 3

    def step_env(self, key, state: MountainCarState, action, params: MountainCarParams):
        del key
        position, velocity = valley_step(state.position, state.velocity, (action - 1) * params.force, params)
        state = MountainCarState(position=position, velocity=velocity, time=state.time + 1)
        terminated = self.is_terminated(state, params)
        reward = jnp.full((), -1.0, jnp.float32)
        return self.get_obs(state), state, reward, terminated, {}

    def reset_env(self, key, params: MountainCarParams):
        position = jax.random.uniform(key, (), jnp.float32, minval=-0.6, maxval=-0.4)
        state = MountainCarState(position=position, velocity=jnp.zeros((), jnp.float32), time=jnp.int32(0))
        return self.get_obs(state), state

    def get_obs(self, state: MountainCarState, params=None, key=None) -> jax.Array:
        return jnp.stack([state.position, state.velocity]).astype(jnp.float32)

    def is_terminated(self, state: MountainCarState, params: MountainCarParams) -> jax.Array:
        return (state.position >= params.goal_position) & (state.velocity >= params.goal_velocity)

    def action_space(self, params=None) -> Discrete:
        return Discrete(3)

    def observation_space(self, params: MountainCarParams) -> Box:
        low = jnp.array([params.min_position, -params.max_speed], jnp.float32)
        high = jnp.array([params.max_position, params.max_speed], jnp.float32)
        return Box(low, high, (2,), jnp.float32)


def valley_step(position, velocity, push, params):
    """One step of the valley physics both MountainCars share: `push` is the engine's change of
    velocity; gravity pulls along the hills (height sin(3x)); speed and position are clipped and the
    car stops at the left wall. Returns (position, velocity)."""
    velocity = velocity + push - jnp.cos(3 * position) * params.gravity
    velocity = jnp.clip(velocity, -params.max_speed, params.max_speed)
    position = jnp.clip(position + velocity, params.min_position, params.max_position)
    velocity = jnp.where((position <= params.min_position) & (velocity < 0), 0.0, velocity)
    return position, velocity
