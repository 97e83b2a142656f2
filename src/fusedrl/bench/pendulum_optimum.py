"""How well a near-optimal controller scores on Pendulum-v1: about the best its preset row can be.

    python -m fusedrl.bench pendulum_optimum [--grid 721x641] [--actions 81] [--episodes 4096]

Pendulum's state is two numbers (angle, angular velocity), so the best achievable return can be
approximated directly: finite-horizon dynamic programming over a grid of states, with the value
between grid points interpolated bilinearly (the angle wraps around, the velocity is clipped to
[-8, 8] by the env). Each backup steps our own `fusedrl.make("Pendulum-v1")` env from every grid
state with every torque in an even grid over [-2, 2]. The resulting controller is time-dependent and
acts with a one-step lookahead on the true continuous state (`step_env` with each torque, plus the
interpolated value of the step after); it is run on `--episodes` fresh episodes from the env's own
reset (random start angle and velocity), which is how `fusedrl.evaluate` scores a preset.

It prints the controller's mean return (with its standard error over start states), the DP's own
value estimate averaged over the same start states, and the spread of means over blocks of 64
episodes, the size of a preset row's evaluation. Whether a grid is fine enough is checked by running
a finer one: the mean should move by about its standard error or less.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

BLOCK = 64  # episodes per seed in a `bench presets` row


def solve(num_theta: int, num_velocity: int, num_actions: int):
    """Finite-horizon DP for Pendulum-v1 on a num_theta x num_velocity grid.

    Returns (values, torques, value_at, env, params): values[k] is the [num_theta, num_velocity] grid
    of optimal returns with k steps to go (k = 0..horizon); value_at(grid, theta, theta_dot) is the
    bilinear interpolation of one such grid at any state.
    """
    from fusedrl.envs import make
    from fusedrl.envs.pendulum import _angle_normalize

    env, params = make("Pendulum-v1")
    horizon = params.max_steps_in_episode
    vmax = params.max_speed
    thetas = jnp.linspace(-math.pi, math.pi, num_theta, endpoint=False, dtype=jnp.float32)
    velocities = jnp.linspace(-vmax, vmax, num_velocity, dtype=jnp.float32)
    torques = jnp.linspace(-params.max_torque, params.max_torque, num_actions, dtype=jnp.float32)
    d_theta = 2 * math.pi / num_theta
    d_vel = 2 * vmax / (num_velocity - 1)

    def value_at(grid, theta, theta_dot):
        x = (_angle_normalize(theta) + math.pi) / d_theta  # in [0, num_theta)
        i0 = jnp.floor(x).astype(jnp.int32)
        fx = x - i0
        i0 = i0 % num_theta
        i1 = (i0 + 1) % num_theta
        y = jnp.clip((theta_dot + vmax) / d_vel, 0.0, num_velocity - 1.0)
        j0 = jnp.minimum(jnp.floor(y).astype(jnp.int32), num_velocity - 2)
        fy = y - j0
        j1 = j0 + 1
        return (
            (1 - fx) * (1 - fy) * grid[i0, j0] + fx * (1 - fy) * grid[i1, j0]
            + (1 - fx) * fy * grid[i0, j1] + fx * fy * grid[i1, j1]
        )

    def step_all(state, torque):  # every state in `state` with one torque
        step = jax.vmap(env.step_env, in_axes=(None, 0, None, None))
        _, nxt, reward, _, _ = step(jax.random.PRNGKey(0), state, torque[None], params)
        return nxt, reward

    theta_grid, vel_grid = (a.ravel() for a in jnp.meshgrid(thetas, velocities, indexing="ij"))
    grid_state = _start_states(theta_grid, vel_grid)

    def backup(grid, _):  # emits the grid it starts from: values[0] (zeros) first
        def q(torque):
            nxt, reward = step_all(grid_state, torque)
            return reward + value_at(grid, nxt.theta, nxt.theta_dot)

        return jax.lax.map(q, torques).max(0).reshape(num_theta, num_velocity), grid

    # horizon + 1 iterations, so the last backup is computed and dropped: one grid more work, but
    # the stacked values are the scan's own output, never copied.
    zeros = jnp.zeros((num_theta, num_velocity), jnp.float32)
    _, values = jax.jit(lambda g: jax.lax.scan(backup, g, None, length=horizon + 1))(zeros)
    return values, torques, value_at, env, params


def _start_states(theta, theta_dot):
    """A batch of Pendulum states at time 0."""
    from fusedrl.envs.pendulum import PendulumState

    return PendulumState(theta=theta, theta_dot=theta_dot, time=jnp.zeros(jnp.shape(theta), jnp.int32))


def run_controller(values, torques, value_at, env, params, key, num_episodes: int):
    """The DP controller on `num_episodes` episodes from the env's reset.

    Returns (returns [num_episodes], value estimates at the start states [num_episodes]).
    """
    horizon = params.max_steps_in_episode

    def episode(key):
        _, state = env.reset_env(key, params)
        start_value = value_at(values[horizon], state.theta, state.theta_dot)

        def act(state, k):  # k steps taken, horizon - k to go
            outcomes = jax.vmap(lambda u: env.step_env(key, state, u[None], params))(torques)
            _, nxt, reward, _, _ = outcomes
            best = jnp.argmax(reward + value_at(values[horizon - k - 1], nxt.theta, nxt.theta_dot))
            return jax.tree.map(lambda x: x[best], nxt), reward[best]

        _, rewards = jax.lax.scan(act, state, jnp.arange(horizon))
        return rewards.sum(), start_value

    return jax.jit(jax.vmap(episode))(jax.random.split(key, num_episodes))


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m fusedrl.bench pendulum_optimum", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--grid", default="721x641", help="angles x velocities, e.g. 361x321")
    p.add_argument("--actions", type=int, default=81, help="torques in the even grid over [-2, 2]")
    p.add_argument("--episodes", type=int, default=4096)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print the result as one JSON line")
    a = p.parse_args(argv)
    try:
        num_theta, num_velocity = (int(n) for n in a.grid.lower().split("x"))
    except ValueError:
        p.error(f"--grid must be ANGLESxVELOCITIES (e.g. 361x321), got {a.grid!r}")
    if num_theta < 4 or num_velocity < 4:
        p.error(f"--grid needs at least 4 points each way, got {a.grid!r}")
    if a.actions < 2:
        p.error(f"--actions must be at least 2 (both torque limits), got {a.actions}")
    if a.episodes < 1:
        p.error(f"--episodes must be positive, got {a.episodes}")

    t0 = time.perf_counter()
    values, torques, value_at, env, params = solve(num_theta, num_velocity, a.actions)
    values.block_until_ready()
    solve_s = time.perf_counter() - t0
    returns, start_values = run_controller(
        values, torques, value_at, env, params, jax.random.PRNGKey(a.seed), a.episodes
    )
    returns, start_values = np.asarray(returns, np.float64), np.asarray(start_values, np.float64)
    row = {
        "grid": f"{num_theta}x{num_velocity}",
        "actions": a.actions,
        "episodes": a.episodes,
        "mean_return": float(returns.mean()),
        "sem": float(returns.std(ddof=1) / math.sqrt(a.episodes)) if a.episodes > 1 else float("nan"),
        "dp_value": float(start_values.mean()),
        "solve_s": solve_s,
    }
    blocks = returns[: a.episodes // BLOCK * BLOCK].reshape(-1, BLOCK).mean(1)
    if blocks.size:
        row["block64_min"], row["block64_max"] = float(blocks.min()), float(blocks.max())
    if a.json:
        print(json.dumps(row))
        return 0
    print(
        f"Pendulum-v1, DP controller on a {row['grid']} grid with {a.actions} torques "
        f"(solved in {solve_s:.1f} s): mean return {row['mean_return']:.1f} "
        f"(standard error {row['sem']:.1f}) over {a.episodes} random starts; "
        f"DP value estimate {row['dp_value']:.1f}"
    )
    if blocks.size:
        print(
            f"means of {blocks.size} blocks of {BLOCK} episodes: {blocks.min():.1f} to {blocks.max():.1f}"
        )
    return 0
