"""Pendulum-v1 (inverted pendulum swing-up), matching Gymnasium 1.x."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import struct

from fusedrl.envs.base import Box, Environment, EnvParams, EnvState


@struct.dataclass
class PendulumState(EnvState):
    theta: jax.Array  # [] float32 angle (rad), 0 = upright; not wrapped, it accumulates turns
    theta_dot: jax.Array  # [] float32 angular velocity in [-max_speed, max_speed]
    time: jax.Array  # [] int32 steps taken in this episode


@struct.dataclass
class PendulumParams(EnvParams):
    max_speed: float = 8.0
    max_torque: float = 2.0
    dt: float = 0.05  # seconds per step (semi-implicit Euler)
    g: float = 10.0  # gravity, named as Gymnasium's `gym.make("Pendulum-v1", g=...)`
    mass: float = 1.0
    length: float = 1.0
    max_steps_in_episode: int = 200


class Pendulum(Environment):
    """Swing a pendulum up and hold it upright with a limited torque.

    Observation: float32 [3]: cos(theta), sin(theta), theta_dot.
    Action: float32 [1], Box(-max_torque, max_torque) = Box(-2, 2): the torque, clipped to that range.
    Reward: float32 [], -(normalize(theta)**2 + 0.1 * theta_dot**2 + 0.001 * torque**2), with
      theta and theta_dot before the step, the clipped torque, and normalize(theta) in [-pi, pi).
    Terminated: never.
    Truncated: after `max_steps_in_episode` (200) steps.
    Reset: theta uniform in [-pi, pi], theta_dot uniform in [-1, 1].
    """

    deterministic_step = True

    # A reset draws a few uniforms, about what a step costs: declared, so that no run measures it.

    expensive_reset = False

    @property
    def name(self) -> str:
        return "Pendulum-v1"

    @property
    def default_params(self) -> PendulumParams:
        return PendulumParams()

    @property
    def num_actions(self) -> int:
        return 1

    def step_env(self, key, state: PendulumState, action, params: PendulumParams):
        del key
        torque = jnp.clip(action[0], -params.max_torque, params.max_torque)
        cost = _angle_normalize(state.theta) ** 2 + 0.1 * state.theta_dot**2 + 0.001 * torque**2
        theta_ddot = (
            3 * params.g / (2 * params.length) * jnp.sin(state.theta)
            + 3.0 / (params.mass * params.length**2) * torque
        )
        theta_dot = jnp.clip(state.theta_dot + theta_ddot * params.dt, -params.max_speed, params.max_speed)
        state = PendulumState(
            theta=state.theta + theta_dot * params.dt, theta_dot=theta_dot, time=state.time + 1
        )
        terminated = jnp.zeros((), bool)
        return self.get_obs(state), state, (-cost).astype(jnp.float32), terminated, {}

    def reset_env(self, key, params: PendulumParams):
        high = jnp.array([math.pi, 1.0], jnp.float32)
        s = jax.random.uniform(key, (2,), jnp.float32, minval=-high, maxval=high)
        state = PendulumState(theta=s[0], theta_dot=s[1], time=jnp.int32(0))
        return self.get_obs(state), state

    def get_obs(self, state: PendulumState, params=None, key=None) -> jax.Array:
        return jnp.stack([jnp.cos(state.theta), jnp.sin(state.theta), state.theta_dot]).astype(jnp.float32)

    def is_terminated(self, state: PendulumState, params: PendulumParams) -> jax.Array:
        return jnp.zeros((), bool)

    def action_space(self, params: PendulumParams | None = None) -> Box:
        params = self.default_params if params is None else params
        return Box(-params.max_torque, params.max_torque, (1,), jnp.float32)

    def observation_space(self, params: PendulumParams) -> Box:
        high = jnp.array([1.0, 1.0, params.max_speed], jnp.float32)
        return Box(-high, high, (3,), jnp.float32)


def _angle_normalize(x: jax.Array) -> jax.Array:
    """The same angle in [-pi, pi)."""
    return jnp.mod(x + math.pi, 2 * math.pi) - math.pi
