"""CartPole-v1 (Barto, Sutton & Anderson 1983), matching Gymnasium 1.x."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from fusedrl.envs.base import Box, Discrete, Environment, EnvParams, EnvState


@struct.dataclass
class CartPoleState(EnvState):
    x: jax.Array  # [] float32 cart position
    x_dot: jax.Array  # [] float32 cart velocity
    theta: jax.Array  # [] float32 pole angle (rad), 0 = upright
    theta_dot: jax.Array  # [] float32 pole angular velocity
    time: jax.Array  # [] int32 steps taken in this episode


@struct.dataclass
class CartPoleParams(EnvParams):
    gravity: float = 9.8
    masscart: float = 1.0
    masspole: float = 0.1
    length: float = 0.5  # half the pole's length
    force_mag: float = 10.0
    tau: float = 0.02  # seconds between state updates (explicit Euler)
    theta_threshold_radians: float = 12 * 2 * 3.141592653589793 / 360
    x_threshold: float = 2.4
    max_steps_in_episode: int = 500


class CartPole(Environment):
    """Balance a pole on a cart by pushing the cart left or right.

    Observation: float32 [4]: cart position, cart velocity, pole angle, pole angular velocity.
    Action: int32 [], Discrete(2): 0 pushes left, 1 pushes right, with `force_mag` newtons.
    Reward: +1 for every step, including the terminating one.
    Terminated: |x| > x_threshold or |theta| > theta_threshold_radians.
    Truncated: after `max_steps_in_episode` (500) steps.
    Reset: all four state variables uniform in [-0.05, 0.05].
    """

    deterministic_step = True

    # A reset draws a few uniforms, about what a step costs: declared, so that no run measures it.

    expensive_reset = False

    @property
    def name(self) -> str:
        return "CartPole-v1"

    @property
    def default_params(self) -> CartPoleParams:
        return CartPoleParams()

    @property
    def num_actions(self) -> int:
        return 2

    def step_env(self, key, state: CartPoleState, action, params: CartPoleParams):
        del key
        # Derived masses are computed here, never stored in params, so `params.replace` stays valid.
        total_mass = params.masspole + params.masscart
        polemass_length = params.masspole * params.length
        force = jnp.where(action == 1, params.force_mag, -params.force_mag)
        costheta, sintheta = jnp.cos(state.theta), jnp.sin(state.theta)
        temp = (force + polemass_length * state.theta_dot**2 * sintheta) / total_mass
        thetaacc = (params.gravity * sintheta - costheta * temp) / (
            params.length * (4.0 / 3.0 - params.masspole * costheta**2 / total_mass)
        )
        xacc = temp - polemass_length * thetaacc * costheta / total_mass
        state = CartPoleState(
            x=state.x + params.tau * state.x_dot,
            x_dot=state.x_dot + params.tau * xacc,
            theta=state.theta + params.tau * state.theta_dot,
            theta_dot=state.theta_dot + params.tau * thetaacc,
            time=state.time + 1,
        )
        terminated = self.is_terminated(state, params)
        reward = jnp.ones((), jnp.float32)
        return self.get_obs(state), state, reward, terminated, {}

    def reset_env(self, key, params: CartPoleParams):
        s = jax.random.uniform(key, (4,), jnp.float32, minval=-0.05, maxval=0.05)
        state = CartPoleState(x=s[0], x_dot=s[1], theta=s[2], theta_dot=s[3], time=jnp.int32(0))
        return self.get_obs(state), state

    def get_obs(self, state: CartPoleState, params=None, key=None) -> jax.Array:
        return jnp.stack([state.x, state.x_dot, state.theta, state.theta_dot]).astype(jnp.float32)

    def is_terminated(self, state: CartPoleState, params: CartPoleParams) -> jax.Array:
        return (jnp.abs(state.x) > params.x_threshold) | (
            jnp.abs(state.theta) > params.theta_threshold_radians
        )

    def action_space(self, params=None) -> Discrete:
        return Discrete(2)

    def observation_space(self, params: CartPoleParams) -> Box:
        f32max = jnp.finfo(jnp.float32).max
        high = jnp.array(
            [params.x_threshold * 2, f32max, params.theta_threshold_radians * 2, f32max], jnp.float32
        )
        return Box(-high, high, (4,), jnp.float32)


class CartPoleNoVelocity(CartPole):
    """CartPole-v1 with the velocities hidden: a partially observed task.

    The dynamics, reward, termination, time limit and reset are CartPole-v1's (`CartPoleParams`);
    only the observation changes. A policy must infer the cart's and the pole's velocities from
    successive observations, so a feed-forward policy of the current observation cannot balance
    the pole for long; a recurrent one (`PPOConfig(recurrent="gru")`) can.

    Observation: float32 [2]: cart position, pole angle.
    Action, reward, termination, truncation, reset: as `CartPole`.
    """

    @property
    def name(self) -> str:
        return "CartPole-NoVelocity-v1"

    def get_obs(self, state: CartPoleState, params=None, key=None) -> jax.Array:
        return jnp.stack([state.x, state.theta]).astype(jnp.float32)

    def observation_space(self, params: CartPoleParams) -> Box:
        high = jnp.array([params.x_threshold * 2, params.theta_threshold_radians * 2], jnp.float32)
        return Box(-high, high, (2,), jnp.float32)
