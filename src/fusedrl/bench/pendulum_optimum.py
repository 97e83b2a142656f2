"""How well a near-optimal controller scores on Pendulum-v1: about the best its preset row can be.

    python -m fusedrl.bench pendulum_optimum [--grid 721x641] [--actions 81] [--episodes 4096]
        [--gamma G]
    python -m fusedrl.bench pendulum_optimum --episodes 1024 --compare-preset [--seeds 4] [--set F=V]
        [--hybrid A ...]

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

`--gamma G` solves instead for the discounted return that PPO with discount G maximises (infinite
horizon, since the trainer bootstraps at truncation), by value iteration to one stationary value
grid; its controller is still scored by its undiscounted 200-step returns. The difference from the
undiscounted optimum is what choosing G costs a perfect learner: the part of a preset's gap to the
optimum that lies in its objective, not in how well PPO optimises it.

`--compare-preset` then shows where a trained preset loses to the controller. It trains the
Pendulum-v1 preset exactly as `bench presets` does (same program, same keys: the row's policies),
takes the `--episodes` greedy episodes per seed that `fusedrl.evaluate` runs for the row, and runs
the controller from the very states those episodes started in. Pairing the starts removes the
start-state noise from the comparison. The table splits the starts by their angle from upright:
per bin, both mean returns, the mean gap, and the share of starts where the policy loses more than
50 (about one extra swing). `--hybrid A` adds rows where the controller acts at some steps and the
policy at the others: where the pendulum is more than A rad from upright, then where it is at most
A. Each row tells how much of the gap the policy's actions in that region cost.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from fusedrl._argtypes import seed_arg

BLOCK = 64  # episodes per seed in a `bench presets` row


class Solution(NamedTuple):
    """What `solve` computed: the value grids, the torques tried, the interpolation, the env."""

    values: jax.Array  # [horizon + 1, T, V]: values[k] with k steps to go; discounted: [1, T, V]
    torques: jax.Array  # [num_actions], an even grid over [-max_torque, max_torque]
    value_at: Callable  # value_at(grid, theta, theta_dot): one grid, interpolated at any state
    env: Any
    params: Any
    gamma: float | None = None  # None: the episode's undiscounted return; else the discounted one

    def grid(self, steps_to_go):
        """The value grid to act on with `steps_to_go` steps left (discounted: the one grid)."""
        return self.values[0] if self.gamma is not None else self.values[steps_to_go]

    def lookahead_value(self, grid, state):
        """What a step into `state` is worth after its reward: the (discounted) value there."""
        return _discount(self.value_at(grid, state.theta, state.theta_dot), self.gamma)


def _discount(value, gamma: float | None):
    """A next state's value as a backup adds it to the step's reward."""
    return value if gamma is None else gamma * value


def solve(num_theta: int, num_velocity: int, num_actions: int, gamma: float | None = None) -> Solution:
    """DP for Pendulum-v1 on a num_theta x num_velocity grid.

    Without `gamma`: finite-horizon DP of the episode's undiscounted return, the score evaluation
    reports; values[k] is the grid of optimal returns with k steps to go (k = 0..horizon). With
    `gamma` (0 < gamma < 1): value iteration of the infinite-horizon discounted return, the
    objective PPO with that gamma optimises (the trainer bootstraps at truncation, so the
    200-step limit is not part of it); values[0] is the one stationary grid, iterated until its
    error is below 1e-3.
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
            return reward + _discount(value_at(grid, nxt.theta, nxt.theta_dot), gamma)

        return jax.lax.map(q, torques).max(0).reshape(num_theta, num_velocity), grid

    zeros = jnp.zeros((num_theta, num_velocity), jnp.float32)
    if gamma is None:
        # horizon + 1 iterations, so the last backup is computed and dropped: one grid more work,
        # but the stacked values are the scan's own output, never copied.
        _, values = jax.jit(lambda g: jax.lax.scan(backup, g, None, length=horizon + 1))(zeros)
    else:
        # From zeros, k backups leave an error of at most gamma^k * max|reward| / (1 - gamma).
        worst = math.pi**2 + 0.1 * vmax**2 + 0.001 * float(params.max_torque) ** 2
        sweeps = math.ceil(math.log(1e-3 * (1 - gamma) / worst) / math.log(gamma))
        values = jax.jit(lambda g: jax.lax.fori_loop(0, sweeps, lambda _, g: backup(g, None)[0], g))(zeros)
        values = values[None]
    return Solution(values, torques, value_at, env, params, gamma)


def _start_states(theta, theta_dot):
    """A batch of Pendulum states at time 0."""
    from fusedrl.envs.pendulum import PendulumState

    return PendulumState(theta=theta, theta_dot=theta_dot, time=jnp.zeros(jnp.shape(theta), jnp.int32))


def run_controller(solved: Solution, key, num_episodes: int):
    """The DP controller on `num_episodes` episodes from the env's reset.

    Returns (returns [num_episodes], value estimates at the start states [num_episodes]).
    """
    keys = jax.random.split(key, num_episodes)
    _, starts = jax.vmap(solved.env.reset_env, in_axes=(0, None))(keys, solved.params)
    return controller_returns(solved, starts)


def _lookahead(solved: Solution):
    """The controller's choice: `choose(state, k)` for one state after k steps (horizon - k to go)
    returns (index of the best torque, next states [num_actions], rewards [num_actions])."""
    env, params = solved.env, solved.params
    horizon = params.max_steps_in_episode

    def choose(state, k):
        step = jax.vmap(lambda u: env.step_env(None, state, u[None], params))  # deterministic
        _, nxt, reward, _, _ = step(solved.torques)
        best = jnp.argmax(reward + solved.lookahead_value(solved.grid(horizon - k - 1), nxt))
        return best, nxt, reward

    return choose


def controller_returns(solved: Solution, starts):
    """The DP controller's episode returns from a batch of start states (a `PendulumState` [N]).

    Returns (returns [N], the DP's value estimates at the start states [N]: the expected return,
    or with `gamma` the discounted one).
    """
    horizon = solved.params.max_steps_in_episode
    choose = _lookahead(solved)

    def episode(state):
        start_value = solved.value_at(solved.grid(horizon), state.theta, state.theta_dot)

        def act(state, k):
            best, nxt, reward = choose(state, k)
            return jax.tree.map(lambda x: x[best], nxt), reward[best]

        _, rewards = jax.lax.scan(act, state, jnp.arange(horizon))
        return rewards.sum(), start_value

    return jax.jit(jax.vmap(episode))(starts)


def policy_and_starts(trainer, result, k_eval, episodes: int):
    """Greedy returns [seeds, episodes] of a vmapped `result`, exactly as
    `fusedrl.evaluate(config, result, k_eval, episodes)` computes them, and the Pendulum states
    [seeds, episodes] those episodes started from."""
    from fusedrl.envs import VecEnv
    from fusedrl.envs.wrappers import find_wrapper_state
    from fusedrl.evaluation import episode_returns, eval_reset

    def one_seed(result, key):
        venv, obs, env_state, key = eval_reset(trainer, result, key, episodes)
        starts = find_wrapper_state(venv, env_state, VecEnv).env_state
        return episode_returns(trainer, result, venv, obs, env_state, key, True), starts

    return _per_seed(one_seed, result, k_eval)


def _per_seed(one_seed, result, k_eval):
    """`one_seed(result_i, key_i)` over the seeds of a vmapped `result`, with `_seed_keys`."""
    return jax.jit(jax.vmap(one_seed))(result, _seed_keys(result, k_eval))


def _seed_keys(result, k_eval):
    """The keys `fusedrl.evaluate` gives the seeds of a vmapped `result`: seed i gets
    split(k_eval, seeds)[i]."""
    return jax.random.split(k_eval, jax.tree.leaves(result.params)[0].shape[0])


def hybrid_program(solved, trainer, episodes: int):
    """`run(result, k_eval, threshold, controller_far)`: each seed's greedy policy of a vmapped
    `result` with the DP controller taking over at some steps: where the pendulum is more than
    `threshold` rad from upright (`controller_far`), or at most that far (not `controller_far`).
    It runs the `episodes` episodes per seed that `policy_and_starts` runs, through the same
    evaluation env stack, so with the controller never acting it earns the policy's returns, and
    with it always acting the controller's.

    `run` returns (returns [seeds, episodes], share of the steps the controller took [seeds,
    episodes]). `threshold` and `controller_far` are inputs of its one compiled program.
    """
    from fusedrl.envs import VecEnv
    from fusedrl.envs.pendulum import _angle_normalize
    from fusedrl.envs.wrappers import find_wrapper_state
    from fusedrl.evaluation import eval_reset

    horizon = solved.params.max_steps_in_episode
    choose = jax.vmap(_lookahead(solved), in_axes=(0, None))

    def one_seed(result, key, threshold, controller_far):
        # Pendulum's episodes all last `horizon` steps, so every env is in its first episode
        # throughout, at step k of the loop.
        venv, obs, env_state, _ = eval_reset(trainer, result, key, episodes)

        def step(carry, k):
            env_state, obs, returns, taken = carry
            state = find_wrapper_state(venv, env_state, VecEnv).env_state
            pi, _ = trainer.network.apply(result.params, obs)
            far = jnp.abs(_angle_normalize(state.theta)) > threshold
            take = jnp.where(controller_far, far, ~far)
            action = jnp.where(take[:, None], solved.torques[choose(state, k)[0]][:, None], pi.mode())
            obs, env_state, reward, _, _, _ = venv.step(env_state, action, result.hparams.env_params)
            return (env_state, obs, returns + reward, taken + take), None

        zeros = jnp.zeros(episodes, jnp.float32)
        carry = (env_state, obs, zeros, zeros)
        (_, _, returns, taken), _ = jax.lax.scan(step, carry, jnp.arange(horizon))
        return returns, taken / horizon

    program = jax.jit(jax.vmap(one_seed, in_axes=(0, 0, None, None)))

    def run(result, k_eval, threshold: float, controller_far: bool):
        return program(result, _seed_keys(result, k_eval), jnp.float32(threshold), jnp.bool_(controller_far))

    return run


# Bins of the start angle's distance from upright, |theta| in radians (the reset draws theta
# uniformly in [-pi, pi)): the top third, the sides, and two bands near the bottom.
ANGLE_BINS = (0.0, 1.0, 2.0, 2.6, math.pi)
EXTRA_SWING = 50.0  # a gap above this many reward units counts as a lost swing-up


def _bin_masks(angle):
    """One mask of `angle`'s entries per ANGLE_BINS bin."""
    return [(angle >= lo) & (angle < hi) if hi < math.pi else angle >= lo
            for lo, hi in itertools.pairwise(ANGLE_BINS)]


def _bin_means(masks, x):
    """Mean of `x` over the starts in each bin of `masks` (None for an empty bin)."""
    return [float(x[m].mean()) if m.any() else None for m in masks]


def compare_preset(
    solved, episodes: int, seeds: int = 4, seed: int = 0, hybrids: Sequence[float] = (), **overrides
) -> dict:
    """Trains the Pendulum-v1 preset as `bench presets` does (same keys, so the same policies as
    its row) and runs each seed's greedy policy and the DP controller from the same start states:
    the `episodes` starts `fusedrl.evaluate` draws for that seed.

    Returns a dict of per-seed means and, per start-angle bin, the policy's and the controller's
    mean returns, the mean gap (controller minus policy) and the share of starts with a gap above
    EXTRA_SWING. For each threshold A in `hybrids`, two more rows (`hybrid_program`): the
    controller acting where |angle| > A, then where |angle| <= A, the policy elsewhere.
    """
    from fusedrl.bench.presets import train_preset
    from fusedrl.envs.pendulum import _angle_normalize
    from fusedrl.train.ppo import make_train

    config, result, compile_s, train_s, k_eval = train_preset("Pendulum-v1", seeds, seed, **overrides)
    trainer = make_train(config)
    policy, starts = policy_and_starts(trainer, result, k_eval, episodes)
    flat = jax.tree.map(lambda x: x.reshape(-1), starts)
    dp, _ = controller_returns(solved, flat)
    policy = np.asarray(policy, np.float64)
    dp = np.asarray(dp, np.float64).reshape(policy.shape)
    angle = np.abs(np.asarray(_angle_normalize(starts.theta), np.float64))
    gap = dp - policy
    masks = _bin_masks(angle)
    columns = {name: _bin_means(masks, x) for name, x in
               (("policy", policy), ("dp", dp), ("gap", gap), ("lost_swings", gap > EXTRA_SWING))}
    bins = []
    for i, ((lo, hi), m) in enumerate(zip(itertools.pairwise(ANGLE_BINS), masks, strict=True)):
        row = {"angle": [lo, round(hi, 2)], "share": float(m.mean())}
        row.update({name: means[i] for name, means in columns.items()})  # None: no start in the bin
        bins.append(row)
    rows, hybrid = [], hybrid_program(solved, trainer, episodes)
    for threshold in hybrids:
        for far in (True, False):
            returns, taken = hybrid(result, k_eval, threshold, far)
            returns = np.asarray(returns, np.float64)
            rows.append({"threshold": float(threshold), "controller_where": "far" if far else "near",
                         "controller_steps": float(np.mean(taken)), "mean": float(returns.mean()),
                         "bins": _bin_means(masks, returns)})
    return {
        "episodes": episodes,
        "seeds": seeds,
        "overrides": dict(overrides),
        "policy_per_seed": [round(float(x), 1) for x in policy.mean(1)],
        "dp_per_seed": [round(float(x), 1) for x in dp.mean(1)],
        "policy": float(policy.mean()),
        "dp": float(dp.mean()),
        "bins": bins,
        "hybrids": rows,
        "train_s": train_s,
        "compile_s": compile_s,
    }


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m fusedrl.bench pendulum_optimum", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--grid", default="721x641", help="angles x velocities, e.g. 361x321")
    p.add_argument("--actions", type=int, default=81, help="torques in the even grid over [-2, 2]")
    p.add_argument("--episodes", type=int, default=4096,
                   help="random starts (with --compare-preset, also the episodes per seed)")
    p.add_argument("--gamma", type=float,
                   help="solve for the discounted return PPO with this gamma optimises instead "
                        "(0 < G < 1; a stationary controller, scored by its undiscounted returns)")
    p.add_argument("--seed", type=seed_arg, default=0, help="root PRNG seed (as `bench presets --seed`)")
    p.add_argument("--json", action="store_true",
                   help="print the result as one JSON line (a second one for --compare-preset)")
    p.add_argument("--compare-preset", action="store_true",
                   help="also train the Pendulum-v1 preset as `bench presets` does and compare "
                        "each seed's greedy policy with the controller, start by start")
    p.add_argument("--seeds", type=int, help="with --compare-preset: agents trained (default 4)")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="with --compare-preset: override a preset field (repeatable)")
    p.add_argument("--hybrid", type=float, action="append", default=[], metavar="A",
                   help="with --compare-preset: also let the controller act where the pendulum is "
                        "more than A rad from upright, then where it is at most A, the policy "
                        "elsewhere (repeatable; 0 < A < pi)")
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
    if a.gamma is not None and not 0 < a.gamma < 1:
        p.error(f"--gamma takes a discount with 0 < G < 1 (leave it out for the undiscounted "
                f"finite-horizon optimum), got {a.gamma:g}")
    if a.seeds is not None and a.seeds < 1:
        p.error(f"--seeds must be positive, got {a.seeds}")
    if (a.set or a.seeds is not None or a.hybrid) and not a.compare_preset:
        p.error("--seeds, --set and --hybrid apply to --compare-preset only; add it, or drop them")
    for threshold in a.hybrid:
        if not 0 < threshold < math.pi:
            p.error(f"--hybrid takes an angle A from upright with 0 < A < pi, got {threshold:g}")

    t0 = time.perf_counter()
    solved = solve(num_theta, num_velocity, a.actions, a.gamma)
    solved.values.block_until_ready()
    solve_s = time.perf_counter() - t0
    returns, start_values = run_controller(solved, jax.random.PRNGKey(a.seed), a.episodes)
    returns, start_values = np.asarray(returns, np.float64), np.asarray(start_values, np.float64)
    row = {
        "grid": f"{num_theta}x{num_velocity}",
        "actions": a.actions,
        "gamma": a.gamma,
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
        print(json.dumps(row), flush=True)
    else:
        objective = "return" if a.gamma is None else f"discounted return, gamma {a.gamma:g},"
        print(
            f"Pendulum-v1, DP controller on a {row['grid']} grid with {a.actions} torques, best "
            f"{objective} (solved in {solve_s:.1f} s): mean return {row['mean_return']:.1f} "
            f"(standard error {row['sem']:.1f}) over {a.episodes} random starts; "
            f"DP value estimate {row['dp_value']:.1f}{'' if a.gamma is None else ' (discounted)'}"
        )
        if blocks.size:
            print(f"means of {blocks.size} blocks of {BLOCK} episodes: "
                  f"{blocks.min():.1f} to {blocks.max():.1f}", flush=True)
    if a.compare_preset:
        from fusedrl.bench.presets import _parse_set

        cmp = compare_preset(solved, a.episodes, a.seeds or 4, a.seed, a.hybrid, **_parse_set(a.set))
        if a.json:
            print(json.dumps(cmp))
        else:
            print(format_comparison(cmp))
    return 0


def format_comparison(cmp: dict) -> str:
    """The `--compare-preset` table: one line per start-angle bin, then the per-seed means."""
    overrides = f", overrides {cmp['overrides']}" if cmp["overrides"] else ""
    lines = [
        f"Pendulum-v1 preset ({cmp['seeds']} seeds{overrides}; trained in {cmp['train_s']:.1f} s) "
        f"against the controller, greedy, from the same {cmp['episodes']} starts per seed:",
        f"{'|start angle|':>14} {'share':>6} {'policy':>8} {'controller':>10} {'gap':>6} "
        f"{'gap > ' + format(EXTRA_SWING, 'g'):>8}",
    ]
    for b in cmp["bins"]:
        lo, hi = b["angle"]
        if b["policy"] is None:
            lines.append(f"{f'{lo:g} to {hi:g}':>14} {b['share']:>6.0%}  (no start in this bin)")
            continue
        lines.append(
            f"{f'{lo:g} to {hi:g}':>14} {b['share']:>6.0%} {b['policy']:>8.1f} {b['dp']:>10.1f} "
            f"{b['gap']:>6.1f} {b['lost_swings']:>8.0%}"
        )
    lines.append(f"{'all':>14} {'100%':>6} {cmp['policy']:>8.1f} {cmp['dp']:>10.1f} "
                 f"{cmp['dp'] - cmp['policy']:>6.1f}")
    lines.append(f"per seed: policy {cmp['policy_per_seed']}, controller {cmp['dp_per_seed']}")
    if cmp["hybrids"]:
        lines.append("Hybrids, the controller acting at some steps and the policy at the others "
                     "(mean return; by start angle as above):")
        bins = [f"{lo:g} to {hi:g}" for lo, hi in (b["angle"] for b in cmp["bins"])]
        lines.append(f"{'controller acts where':>22} {'its steps':>9} {'all':>8} "
                     + " ".join(f"{b:>10}" for b in bins))
        for h in cmp["hybrids"]:
            where = f"|angle| {'>' if h['controller_where'] == 'far' else '<='} {h['threshold']:g}"
            means = " ".join(f"{'-':>10}" if m is None else f"{m:>10.1f}" for m in h["bins"])
            lines.append(f"{where:>22} {h['controller_steps']:>9.0%} {h['mean']:>8.1f} {means}")
    return "\n".join(lines)

