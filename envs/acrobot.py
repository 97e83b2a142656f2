"""Acrobot-v1 (Sutton 1996; Sutton & Barto's book dynamics), matching Gymnasium 1.x."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import struct

from fusedrl.envs.base import Box, Discrete, Environment, EnvParams, EnvState


@struct.dataclass
class AcrobotState(EnvState):
    theta1: jax.Array  # [] float32 angle of link 1 (rad) in [-pi, pi], 0 = hanging down
    theta2: jax.Array  # [] float32 angle of link 2 relative to link 1 (rad) in [-pi, pi]
    theta1_dot: jax.Array  # [] float32 angular velocity of link 1, in [-max_vel_1, max_vel_1]
    theta2_dot: jax.Array  # [] float32 angular velocity of link 2, in [-max_vel_2, max_vel_2]
    time: jax.Array  # [] int32 steps taken in this episode


@struct.dataclass
class AcrobotParams(EnvParams):
    gravity: float = 9.8
    link_length_1: float = 1.0  # only link 1's length enters the dynamics
    link_mass_1: float = 1.0
    link_mass_2: float = 1.0
    link_com_pos_1: float = 0.5  # distance from joint 1 to link 1's centre of mass
    link_com_pos_2: float = 0.5  # distance from joint 2 to link 2's centre of mass
    link_moi: float = 1.0  # moment of inertia of each link
    torque_mag: float = 1.0  # actions 0, 1, 2 apply -torque_mag, 0, +torque_mag
    max_vel_1: float = 4 * math.pi
    max_vel_2: float = 9 * math.pi
    dt: float = 0.2  # seconds per step, one classical Runge-Kutta (RK4) step
    max_steps_in_episode: int = 500


class Acrobot(Environment):
    """Swing the tip of a two-link chain above a line by torquing the joint between the links.

    Observation: float32 [6]: cos(theta1), sin(theta1), cos(theta2), sin(theta2), theta1_dot,
      theta2_dot; the velocities are bounded by max_vel_1 = 4*pi and max_vel_2 = 9*pi.
    Action: int32 [], Discrete(3): torque -torque_mag, 0, +torque_mag on the middle joint.
    Reward: float32 [], -1 for every step, 0 on the step that reaches the goal.
    Terminated: the tip is above the goal line, -cos(theta1) - cos(theta1 + theta2) > 1.
    Truncated: after `max_steps_in_episode` (500) steps.
    Reset: theta1, theta2, theta1_dot, theta2_dot uniform in [-0.1, 0.1] (hanging down).

    Dynamics are the book's (Gymnasium's default `book_or_nips="book"`) without torque noise
    (Gymnasium's `torque_noise_max` is 0), so the step ignores its key.
    """

    deterministic_step = True

    # A reset draws a few uniforms, about what a step costs: declared, so that no run measures it.

    expensive_reset = False

    @property
    def name(self) -> str:
        return "Acrobot-v1"

    @property
    def default_params(self) -> AcrobotParams:
        return AcrobotParams()

    @property
    def num_actions(self) -> int:
        return 3

    def step_env(self, key, state: AcrobotState, action, params: AcrobotParams):
        del key
        torque = (action - 1) * params.torque_mag
        s = jnp.stack([state.theta1, state.theta2, state.theta1_dot, state.theta2_dot])
        # One RK4 step over [0, dt] with the torque held constant, as Gymnasium's `rk4`.
        dt = params.dt
        k1 = _derivatives(s, torque, params)
        k2 = _derivatives(s + dt / 2 * k1, torque, params)
        k3 = _derivatives(s + dt / 2 * k2, torque, params)
        k4 = _derivatives(s + dt * k3, torque, params)
        s = s + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        state = AcrobotState(
            theta1=_wrap(s[0], -math.pi, math.pi),
            theta2=_wrap(s[1], -math.pi, math.pi),
            theta1_dot=jnp.clip(s[2], -params.max_vel_1, params.max_vel_1),
            theta2_dot=jnp.clip(s[3], -params.max_vel_2, params.max_vel_2),
            time=state.time + 1,
        )
        terminated = self.is_terminated(state, params)
        reward = jnp.where(terminated, 0.0, -1.0).astype(jnp.float32)
        return self.get_obs(state), state, reward, terminated, {}

    def reset_env(self, key, params: AcrobotParams):
        s = jax.random.uniform(key, (4,), jnp.float32, minval=-0.1, maxval=0.1)
        state = AcrobotState(theta1=s[0], theta2=s[1], theta1_dot=s[2], theta2_dot=s[3], time=jnp.int32(0))
        return self.get_obs(state), state

    def get_obs(self, state: AcrobotState, params=None, key=None) -> jax.Array:
        return jnp.stack(
            [
                jnp.cos(state.theta1),
                jnp.sin(state.theta1),
                jnp.cos(state.theta2),
                jnp.sin(state.theta2),
                state.theta1_dot,
                state.theta2_dot,
            ]
        ).astype(jnp.float32)

    def is_terminated(self, state: AcrobotState, params: AcrobotParams) -> jax.Array:
        return -jnp.cos(state.theta1) - jnp.cos(state.theta1 + state.theta2) > 1.0

    def action_space(self, params=None) -> Discrete:
        return Discrete(3)

    def observation_space(self, params: AcrobotParams) -> Box:
        high = jnp.array([1.0, 1.0, 1.0, 1.0, params.max_vel_1, params.max_vel_2], jnp.float32)
        return Box(-high, high, (6,), jnp.float32)


def _derivatives(s: jax.Array, torque: jax.Array, params: AcrobotParams) -> jax.Array:
    """d/dt of [theta1, theta2, theta1_dot, theta2_dot] [4] under a constant joint torque."""
    theta1, theta2, dtheta1, dtheta2 = s[0], s[1], s[2], s[3]
    m1, m2 = params.link_mass_1, params.link_mass_2
    l1, lc1, lc2 = params.link_length_1, params.link_com_pos_1, params.link_com_pos_2
    inertia, g = params.link_moi, params.gravity
    cos2, sin2 = jnp.cos(theta2), jnp.sin(theta2)
    d1 = m1 * lc1**2 + m2 * (l1**2 + lc2**2 + 2 * l1 * lc2 * cos2) + 2 * inertia
    d2 = m2 * (lc2**2 + l1 * lc2 * cos2) + inertia
    # The book writes cos(angle - pi/2); sin(angle) is the same value without float32 rounding of pi.
    phi2 = m2 * lc2 * g * jnp.sin(theta1 + theta2)
    phi1 = (
        -m2 * l1 * lc2 * dtheta2**2 * sin2
        - 2 * m2 * l1 * lc2 * dtheta2 * dtheta1 * sin2
        + (m1 * lc1 + m2 * l1) * g * jnp.sin(theta1)
        + phi2
    )
    ddtheta2 = (torque + d2 / d1 * phi1 - m2 * l1 * lc2 * dtheta1**2 * sin2 - phi2) / (
        m2 * lc2**2 + inertia - d2**2 / d1
    )
    ddtheta1 = -(d2 * ddtheta2 + phi1) / d1
    return jnp.stack([dtheta1, dtheta2, ddtheta1, ddtheta2])


def _wrap(x: jax.Array, low: float, high: float) -> jax.Array:
    """Shifts `x` by whole periods into [low, high]; like Gymnasium's `wrap`, `high` itself stays."""
    span = high - low
    x = jnp.where(x > high, x - span * jnp.ceil((x - high) / span), x)
    return jnp.where(x < low, x + span * jnp.ceil((low - x) / span), x)
