"""Transition-by-transition parity of our classic-control envs with Gymnasium 1.x.

For every env, Gymnasium's own implementation (with its TimeLimit wrapper) and ours step from the
same states with the same actions: random states from a wide but valid range, plus hand-built
states that land just inside and just outside every termination threshold and the time limit.
Our side runs as one jitted `vmap` over all states.

Tolerance: Gymnasium integrates in float64, we in float32, so floats are compared with
rtol=1e-5 and atol=1e-5 (the atol covers values near 0, e.g. sin of an angle near 0, where
float32 rounding of the angle dominates). Flags (terminated, truncated) must be equal. The
hand-built boundary states sit 1e-4 (positions), 1e-5 (velocities) or 1e-3 rad (Acrobot's
theta1) from a threshold, far outside float32 rounding.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fusedrl

RTOL, ATOL = 1e-5, 1e-5
SLACK_FACTOR = 10.0
NUM_RANDOM = 1500


@dataclasses.dataclass(frozen=True)
class Case:
    env_id: str
    # (rng, n) -> states [n, k] float32, actions [n] int or [n, 1] float32
    sample: Callable[[np.random.Generator, int], tuple[np.ndarray, np.ndarray]]
    # (rng, gym_env) -> states and actions that land next to a termination threshold
    boundary: Callable[[np.random.Generator, gym.Env], tuple[np.ndarray, np.ndarray]]
    gym_state_dtype: type  # dtype Gymnasium itself keeps its state in after a step
    angles: tuple[int, ...] = ()  # state columns compared modulo 2*pi (wrapping may differ at +-pi)


def _uniform(rng, n, bounds):
    return np.stack([rng.uniform(lo, hi, n) for lo, hi in bounds], axis=1).astype(np.float32)


# CartPole-v1 -------------------------------------------------------------------------------------
THETA_T = 12 * 2 * math.pi / 360


def _cartpole_sample(rng, n):
    states = _uniform(rng, n, [(-2.4, 2.4), (-3.0, 3.0), (-THETA_T, THETA_T), (-3.5, 3.5)])
    return states, rng.integers(0, 2, n)


def _cartpole_boundary(rng, gym_env):
    # Start 1e-3 inside a threshold with the velocity that ends the step 1e-4 inside or outside.
    tau, states = 0.02, []
    for sign in (1.0, -1.0):
        for overshoot in (-1e-4, 1e-4):
            v = sign * (1e-3 + overshoot) / tau
            states.append([sign * (2.4 - 1e-3), v, 0.0, 0.0])
            states.append([0.0, 0.0, sign * (THETA_T - 1e-3), v])
    states = np.array(states, np.float32)
    return states, rng.integers(0, 2, len(states))


# Acrobot-v1 --------------------------------------------------------------------------------------
def _acrobot_sample(rng, n):
    pi = math.pi
    states = _uniform(rng, n, [(-pi, pi), (-pi, pi), (-4 * pi, 4 * pi), (-9 * pi, 9 * pi)])
    return states, rng.integers(0, 3, n)


def _acrobot_next_height(core, s, a):
    core.state = np.array(s, np.float64)
    core.step(a)
    t1, t2 = core.state[0], core.state[1]
    return -math.cos(t1) - math.cos(t1 + t2)


def _acrobot_boundary(rng, gym_env):
    """theta1 = (root of next height == 1) +- 1e-3, the root found by bisection on Gymnasium's step."""
    core, states, actions = gym_env.unwrapped, [], []
    grid = np.linspace(-math.pi, math.pi, 65)
    while len(states) < 24:
        rest = [rng.uniform(-math.pi, math.pi), rng.uniform(-2, 2), rng.uniform(-3, 3)]
        a = int(rng.integers(0, 3))
        h = np.array([_acrobot_next_height(core, [t, *rest], a) - 1.0 for t in grid])
        crossings = np.nonzero(np.sign(h[:-1]) != np.sign(h[1:]))[0]
        for i in crossings[:2]:
            lo, hi, h_lo = grid[i], grid[i + 1], h[i]
            for _ in range(40):
                mid = (lo + hi) / 2
                h_mid = _acrobot_next_height(core, [mid, *rest], a) - 1.0
                if np.sign(h_mid) == np.sign(h_lo):
                    lo, h_lo = mid, h_mid
                else:
                    hi = mid
            for d in (-1e-3, 1e-3):
                states.append([lo + d, *rest])
                actions.append(a)
    return np.array(states, np.float32), np.array(actions)


# MountainCar-v0 and MountainCarContinuous-v0 -----------------------------------------------------
def _mountain_car_sample(rng, n):
    return _uniform(rng, n, [(-1.2, 0.6), (-0.07, 0.07)]), rng.integers(0, 3, n)


def _car_boundary(goal, push):
    """States whose next (position, velocity) is given; `push(a)` is the throttle's velocity change."""

    def build(rng, gym_env, actions):
        targets = []  # next (position, velocity)
        for d in (-1e-4, 1e-4):
            targets += [(goal + d, 0.01), (-1.2 + d, -0.02)]  # goal line; left wall
        for dv in (-1e-5, 1e-5):
            targets += [(goal + 0.01, dv)]  # goal_velocity 0
        targets += [(0.6 + 0.01, 0.05), (-1.2 - 0.01, -0.05)]  # clipped at either wall
        states, acts = [], []
        for a, (p_next, v_next) in itertools.product(actions, targets):
            p = p_next - v_next
            states.append([p, v_next - push(a) + 0.0025 * math.cos(3 * p)])
            acts.append(a)
        # Velocity clipping at max_speed, both signs.
        for a in actions:
            states += [[0.0, 0.0699], [0.0, -0.0699]]
            acts += [a, a]
        return np.array(states, np.float32), np.array(acts)

    return build


def _mountain_car_boundary(rng, gym_env):
    return _car_boundary(0.5, lambda a: (a - 1) * 0.001)(rng, gym_env, np.array([0, 1, 2]))


def _continuous_sample(rng, n):
    # Throttles beyond [-1, 1] check the clipping (the dynamics clip, the cost does not).
    states = _uniform(rng, n, [(-1.2, 0.6), (-0.07, 0.07)])
    return states, rng.uniform(-1.5, 1.5, (n, 1)).astype(np.float32)


def _continuous_boundary(rng, gym_env):
    actions = np.array([[-1.0], [0.3], [1.0], [1.4]], np.float32)
    push = lambda a: float(np.clip(a[0], -1.0, 1.0)) * 0.0015  # noqa: E731
    return _car_boundary(0.45, push)(rng, gym_env, actions)


# Pendulum-v1 -------------------------------------------------------------------------------------
def _pendulum_sample(rng, n):
    states = _uniform(rng, n, [(-3 * math.pi, 3 * math.pi), (-8.0, 8.0)])
    return states, rng.uniform(-3.0, 3.0, (n, 1)).astype(np.float32)


def _pendulum_boundary(rng, gym_env):
    # No termination; angles on either side of the cost's wrap-around at odd multiples of pi, and
    # speeds that hit the max_speed clip.
    thetas = [k * math.pi + d for k in (-3, -1, 1, 3) for d in (-1e-4, 1e-4)]
    states = [[t, 0.5] for t in thetas] + [[1.0, 7.99], [-1.0, -7.99]]
    states = np.array(states, np.float32)
    return states, rng.uniform(-2.0, 2.0, (len(states), 1)).astype(np.float32)


CASES = [
    Case("CartPole-v1", _cartpole_sample, _cartpole_boundary, np.float64),
    Case("Acrobot-v1", _acrobot_sample, _acrobot_boundary, np.float64, angles=(0, 1)),
    Case("MountainCar-v0", _mountain_car_sample, _mountain_car_boundary, np.float64),
    Case("MountainCarContinuous-v0", _continuous_sample, _continuous_boundary, np.float32),
    Case("Pendulum-v1", _pendulum_sample, _pendulum_boundary, np.float64),
]


def _gym_steps(gym_env, case: Case, states, actions, times):
    """Steps Gymnasium (through its TimeLimit wrapper) from each state; returns stacked results."""
    core = gym_env.unwrapped
    out = {"obs": [], "reward": [], "terminated": [], "truncated": [], "state": []}
    for s, a, t in zip(states, actions, times, strict=True):
        core.state = np.array(s, case.gym_state_dtype)
        if hasattr(core, "steps_beyond_terminated"):
            core.steps_beyond_terminated = None  # else CartPole pays 0 after a terminal step
        gym_env._elapsed_steps = int(t)  # TimeLimit's counter: truncates when it reaches the limit
        action = int(a) if np.ndim(a) == 0 else np.asarray(a, np.float32)
        obs, reward, terminated, truncated, _ = gym_env.step(action)
        results = (obs, reward, terminated, truncated, np.asarray(core.state, np.float64))
        for k, v in zip(out, results, strict=True):
            out[k].append(v)
    return {k: np.array(v) for k, v in out.items()}


def _wrap_angles(case: Case, state_diff):
    state_diff = state_diff.copy()
    for i in case.angles:
        state_diff[:, i] = (state_diff[:, i] + math.pi) % (2 * math.pi) - math.pi
    return state_diff


def _conditioning(gym_env, case: Case, states, actions, times, ref):
    """How far Gymnasium's own float64 results move when the start state moves by one float32 ulp.

    Summed over the state variables, per element of each result. It is negligible except where a
    step is ill-conditioned (Acrobot at high speed), where no float32 implementation can match
    float64 to 1e-5; there it widens the tolerance.
    """
    total = {k: np.zeros(ref[k].shape) for k in ("obs", "reward", "state")}
    for j in range(states.shape[1]):
        moved = states.copy()
        moved[:, j] = np.nextafter(states[:, j], np.float32(np.inf))
        out = _gym_steps(gym_env, case, moved, actions, times)
        total["obs"] += np.abs(out["obs"] - ref["obs"])
        total["reward"] += np.abs(out["reward"] - ref["reward"])
        total["state"] += np.abs(_wrap_angles(case, out["state"] - ref["state"]))
    return total


def _our_steps(env, params, states, actions, times):
    """Our step_env and is_truncated (what `step` and `VecEnv.step` run), one jitted vmap."""
    state_cls = type(env.reset(jax.random.key(0), params)[1])
    names = [f.name for f in dataclasses.fields(state_cls) if f.name != "time"]
    batch = state_cls(
        time=jnp.asarray(times, jnp.int32), **{n: jnp.asarray(states[:, i]) for i, n in enumerate(names)}
    )

    def step(key, state, action):
        obs, state, reward, terminated, _ = env.step_env(key, state, action, params)
        return obs, state, reward, terminated, env.is_truncated(state, params)

    keys = jax.random.split(jax.random.key(0), len(states))
    obs, new_state, reward, terminated, truncated = jax.jit(jax.vmap(step))(keys, batch, jnp.asarray(actions))
    return {
        "obs": np.asarray(obs),
        "reward": np.asarray(reward),
        "terminated": np.asarray(terminated),
        "truncated": np.asarray(truncated),
        "state": np.stack([np.asarray(getattr(new_state, n)) for n in names], axis=1),
    }


def _assert_close(actual, desired, slack, what):
    """|actual - desired| <= ATOL + RTOL |desired| + SLACK_FACTOR * slack, element-wise."""
    actual, desired = np.asarray(actual, np.float64), np.asarray(desired, np.float64)
    err = np.abs(actual - desired)
    bad = err > ATOL + RTOL * np.abs(desired) + SLACK_FACTOR * slack
    if bad.any():
        worst = np.unravel_index(np.argmax(np.where(bad, err, 0)), err.shape)
        raise AssertionError(
            f"{what}: {bad.sum()} of {bad.size} elements differ; worst at {worst}: ours "
            f"{actual[worst]!r}, Gymnasium {desired[worst]!r} (conditioning slack {slack[worst]:.2g})."
        )


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.env_id)
def test_step_parity_with_gymnasium(case: Case):
    rng = np.random.default_rng(0)
    env, params = fusedrl.make(case.env_id)
    gym_env = gym.make(case.env_id, disable_env_checker=True)
    gym_env.reset(seed=0)
    limit = gym_env.spec.max_episode_steps
    assert params.max_steps_in_episode == limit

    s_rand, a_rand = case.sample(rng, NUM_RANDOM)
    s_edge, a_edge = case.boundary(rng, gym_env)
    states = np.concatenate([s_rand, s_edge])
    actions = np.concatenate([a_rand, a_edge])
    times = rng.integers(0, limit - 2, len(states))
    # The time limit: the step from limit - 1 truncates, the one from limit - 2 does not; some of
    # each land on boundary states, so terminated and truncated can be set together.
    times[:100:2], times[1:100:2] = limit - 1, limit - 2
    times[-len(s_edge) :: 3] = limit - 1

    ref = _gym_steps(gym_env, case, states, actions, times)
    slack = _conditioning(gym_env, case, states, actions, times, ref)
    ours = _our_steps(env, params, states, actions, times)

    np.testing.assert_array_equal(ours["terminated"], ref["terminated"], err_msg="terminated")
    np.testing.assert_array_equal(ours["truncated"], ref["truncated"], err_msg="truncated")
    _assert_close(ours["obs"], ref["obs"], slack["obs"], "observation")
    _assert_close(ours["reward"], ref["reward"], slack["reward"], "reward")
    state = ref["state"] + _wrap_angles(case, ours["state"] - ref["state"])
    _assert_close(state, ref["state"], slack["state"], "next state")
    # The slack only matters for a few ill-conditioned Acrobot steps; elsewhere it is tiny.
    assert np.quantile(slack["obs"], 0.9) < 1e-5

    # The sample exercised what it claims to: both outcomes of each flag, and on boundary states.
    edge = slice(len(s_rand), None)
    assert ref["truncated"].any() and not ref["truncated"].all()
    if case.env_id != "Pendulum-v1":
        assert ref["terminated"][edge].any() and not ref["terminated"][edge].all()
        assert (ref["terminated"] & ref["truncated"]).any()


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.env_id)
def test_spaces_match_gymnasium(case: Case):
    env, params = fusedrl.make(case.env_id)
    gym_env = gym.make(case.env_id, disable_env_checker=True)
    ours_obs, ref_obs = env.observation_space(params), gym_env.observation_space
    assert tuple(ours_obs.shape) == ref_obs.shape
    assert jnp.dtype(ours_obs.dtype) == ref_obs.dtype
    ref_act, ours_act = gym_env.action_space, env.action_space(params)
    if isinstance(ref_act, gym.spaces.Discrete):
        assert isinstance(ours_act, fusedrl.envs.Discrete) and ours_act.n == ref_act.n
    else:
        assert isinstance(ours_act, fusedrl.envs.Box) and tuple(ours_act.shape) == ref_act.shape
        np.testing.assert_allclose(np.broadcast_to(ours_act.low, ref_act.shape), ref_act.low)
        np.testing.assert_allclose(np.broadcast_to(ours_act.high, ref_act.shape), ref_act.high)
    low = np.broadcast_to(np.asarray(ours_obs.low, np.float32), ref_obs.shape)
    high = np.broadcast_to(np.asarray(ours_obs.high, np.float32), ref_obs.shape)
    # Gymnasium bounds CartPole's velocities with inf, ours (as gymnax) with float32's largest
    # finite value, so that Box.sample stays finite: compare finite bounds, and unbounded as unbounded.
    f32max = np.finfo(np.float32).max
    for ours_b, ref_b in ((low, ref_obs.low), (high, ref_obs.high)):
        finite = np.isfinite(ref_b)
        np.testing.assert_allclose(ours_b[finite], ref_b[finite], rtol=1e-6)
        np.testing.assert_array_equal(np.abs(ours_b[~finite]), f32max)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.env_id)
def test_reset_distribution_matches_gymnasium(case: Case):
    """Per state variable, min/max/mean/std of 2000 resets agree with 2000 of Gymnasium's."""
    n = 2000
    env, params = fusedrl.make(case.env_id)
    gym_env = gym.make(case.env_id, disable_env_checker=True)
    gym_env.reset(seed=0)
    ref = []
    for _ in range(n):
        gym_env.reset()
        ref.append(np.asarray(gym_env.unwrapped.state, np.float64))
    ref = np.array(ref)
    _, state = jax.jit(jax.vmap(env.reset, in_axes=(0, None)))(jax.random.split(jax.random.key(1), n), params)
    names = [f.name for f in dataclasses.fields(state) if f.name != "time"]
    ours = np.stack([np.asarray(getattr(state, f)) for f in names], axis=1)
    np.testing.assert_array_equal(np.asarray(state.time), 0)
    # In units of each variable's range (1 where it is constant, e.g. MountainCar's velocity 0).
    span = ref.max(0) - ref.min(0)
    span = np.where(span > 0, span, 1.0)
    ours, ref = ours / span, ref / span
    # A uniform's mean over n draws has std span / sqrt(12 n); allow 6 of those for two samples.
    tol = 6 * math.sqrt(2 / (12 * n))
    np.testing.assert_allclose(ours.mean(0), ref.mean(0), atol=tol, err_msg="mean / range")
    np.testing.assert_allclose(ours.std(0), ref.std(0), atol=tol, err_msg="std / range")
    np.testing.assert_allclose(ours.min(0), ref.min(0), atol=0.01, err_msg="min / range")
    np.testing.assert_allclose(ours.max(0), ref.max(0), atol=0.01, err_msg="max / range")


def test_acrobot_wraps_angles_into_the_same_period_as_gymnasium():
    """The step's state keeps both angles in [-pi, pi] as Gymnasium's `wrap` does (the parity test
    compares angles modulo 2*pi, so it cannot see this). At the ends, float32's pi (just above
    math.pi) stays itself, as Gymnasium keeps its own float64 bounds."""
    from gymnasium.envs.classic_control.acrobot import wrap

    from fusedrl.envs.acrobot import _wrap

    x = np.array([0.5, 3.5, -3.5, 3 * math.pi + 0.2, -3 * math.pi - 0.2, 10.0, -10.0], np.float32)
    ends = np.array([math.pi, -math.pi], np.float32)
    ours = np.asarray(jax.jit(lambda x: _wrap(x, -math.pi, math.pi))(np.concatenate([x, ends])))
    ref = np.array([wrap(float(v), -math.pi, math.pi) for v in x])
    np.testing.assert_allclose(ours[: len(x)], ref, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(ours[len(x) :], ends)


# (env id, param overrides, state, action, threshold column, terminated): a step that ends exactly
# on a termination threshold (the column keeps its value), and Gymnasium's verdict there.
EXACT_THRESHOLDS = [
    ("CartPole-v1", {}, [2.4, 0.0, 0.0, 0.0], 1, 0, False),  # |x| > x_threshold: strict
    ("CartPole-v1", {}, [0.0, 0.0, -THETA_T, 0.0], 0, 2, False),  # |theta| > threshold: strict
    # With no gravity the car keeps velocity 0: position >= goal and velocity >= 0, both inclusive.
    ("MountainCar-v0", {"gravity": 0.0}, [0.5, 0.0], 1, 0, True),
]


@pytest.mark.parametrize("env_id, overrides, state, action, column, terminated", EXACT_THRESHOLDS)
def test_exact_thresholds_match_gymnasium(env_id, overrides, state, action, column, terminated):
    """Each side at its own precision: ours with float32 states and thresholds, Gymnasium's with
    the same decimal values in the dtype it keeps its state in."""
    case = next(c for c in CASES if c.env_id == env_id)
    env, params = fusedrl.make(env_id, **overrides)
    gym_env = gym.make(env_id, disable_env_checker=True)
    gym_env.reset(seed=0)
    for name, value in overrides.items():
        setattr(gym_env.unwrapped, name, value)
    actions, times = np.array([action]), np.zeros(1, np.int64)
    ref = _gym_steps(gym_env, case, np.array([state], case.gym_state_dtype), actions, times)
    ours = _our_steps(env, params, np.array([state], np.float32), actions, times)
    np.testing.assert_array_equal(ours["state"][0, column], np.float32(state[column]))
    assert ref["state"][0, column] == np.asarray(state[column], case.gym_state_dtype)
    assert bool(ref["terminated"][0]) is terminated and bool(ours["terminated"][0]) is terminated
