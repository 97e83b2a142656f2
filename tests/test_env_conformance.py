"""One conformance suite for every environment id we register, plus a sample of gymnax ids.

Each env is checked through the single-env API (`reset`/`step`, jitted, vmapped over 1000 envs,
no retrace) and through `VecEnv` (batched stepping with the reset pool). Compiling dominates the
run time on CPU, so each env compiles few programs: its `reset` and `step`, one vmapped rollout,
one `VecEnv` rollout; several tests check different properties of the same (cached) rollouts.
Random actions and step keys come from numpy, so no extra random-number programs get compiled.
"""

from __future__ import annotations

import functools
import json
import math
import subprocess
import sys

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct

import fusedrl
from fusedrl.envs import Discrete, Environment, EnvParams, EnvState, VecEnv

# Our built-in ids, listed here rather than read from the registry at import: other test files
# register test envs at import, so what the registry holds depends on which files pytest collected
# first. `test_the_list_holds_every_builtin_id` compares it with a fresh interpreter's registry.
OUR_IDS = ["CartPole-v1", "CartPole-NoVelocity-v1", "Acrobot-v1", "MountainCar-v0",
           "MountainCarContinuous-v0", "Pendulum-v1", *fusedrl.envs.PROBE_IDS]
GYMNAX_IDS = ["gymnax:Breakout-MinAtar", "gymnax:Catch-bsuite", "gymnax:FourRooms-misc"]
ALL_IDS = OUR_IDS + GYMNAX_IDS

# gymnax 1.0.1 declares these observation spaces with a dtype its envs do not return (upstream bug);
# we check the dtype the env actually returns, consistently, and that the mismatch is still there.
GYMNAX_OBS_DTYPE = {"gymnax:Catch-bsuite": jnp.float32, "gymnax:FourRooms-misc": jnp.int32}

# Our documented reset distributions: independent uniforms per state field (low == high: constant).
RESET_UNIFORM = {
    "CartPole-v1": {f: (-0.05, 0.05) for f in ("x", "x_dot", "theta", "theta_dot")},
    "CartPole-NoVelocity-v1": {f: (-0.05, 0.05) for f in ("x", "x_dot", "theta", "theta_dot")},
    "Acrobot-v1": {f: (-0.1, 0.1) for f in ("theta1", "theta2", "theta1_dot", "theta2_dot")},
    "MountainCar-v0": {"position": (-0.6, -0.4), "velocity": (0.0, 0.0)},
    "MountainCarContinuous-v0": {"position": (-0.6, -0.4), "velocity": (0.0, 0.0)},
    "Pendulum-v1": {"theta": (-math.pi, math.pi), "theta_dot": (-1.0, 1.0)},
}
# Initial states with a single float32 random variable (~8M distinct values): among thousands of
# draws, equal initial states happen by chance, so "never the same state twice" is not testable.
ONE_RANDOM_VARIABLE = {"MountainCar-v0", "MountainCarContinuous-v0"}
# The probes (fusedrl.envs.probes): one or two initial states, no physics params, and episodes of one
# step in all but TwoStep (so the first step from a reset already ends the episode, and every env of
# a VecEnv finishes on every step).
PROBE_IDS = set(fusedrl.envs.PROBE_IDS)
ONE_STEP_EPISODES = PROBE_IDS - {"probe:TwoStep-v0"}
NEVER_TERMINATES = {"Pendulum-v1"}
# For ours, state fields (over a reset state) and an action whose step terminates; gymnax envs take
# a terminating transition from the random rollout instead.
TERMINAL_TRANSITIONS = {
    "CartPole-v1": ({"x": 2.39, "x_dot": 1.0}, 1),
    "CartPole-NoVelocity-v1": ({"x": 2.39, "x_dot": 1.0}, 1),
    "Acrobot-v1": ({"theta1": math.pi, "theta2": 0.0, "theta1_dot": 0.0, "theta2_dot": 0.0}, 1),
    "MountainCar-v0": ({"position": 0.49, "velocity": 0.05}, 2),
    "MountainCarContinuous-v0": ({"position": 0.44, "velocity": 0.05}, [1.0]),
}

NUM_ENVS = 1000
NUM_STEPS = 32
VEC_MAX_STEPS = 6  # short episodes in the VecEnv rollout: many resets, pool redraws and partial use
# These programs check behaviour, not speed: without LLVM's optimisations they compile ~3x faster
# (XLA's own graph passes still run). Results may then differ from other programs by an ulp.
FAST_COMPILE = {"xla_backend_optimization_level": 0}


@functools.cache
def _make(env_id):
    return fusedrl.make(env_id)


def _obs_dtype(env_id, space):
    return jnp.dtype(GYMNAX_OBS_DTYPE.get(env_id, space.dtype))


def _keys(rng: np.random.Generator, shape) -> jax.Array:
    """Typed PRNG keys from numpy bits (any bits are a valid threefry key)."""
    return jax.random.wrap_key_data(rng.integers(0, 2**32, (*shape, 2), dtype=np.uint32))


def _actions(rng: np.random.Generator, space, shape) -> np.ndarray:
    """Uniform random actions [*shape, *space.shape] in the space's dtype."""
    if isinstance(space, Discrete):
        return rng.integers(0, space.n, shape).astype(np.int32)
    low = np.broadcast_to(np.asarray(space.low, np.float32), space.shape)
    high = np.broadcast_to(np.asarray(space.high, np.float32), space.shape)
    return rng.uniform(low, high, (*shape, *space.shape)).astype(np.float32)


def _in_box(space, x) -> bool:
    """`x` [..., *space.shape] lies within the Box's bounds (numpy broadcasting over leading axes)."""
    x = np.asarray(x)
    return bool(np.all(x >= np.asarray(space.low)) and np.all(x <= np.asarray(space.high)))


def _state_columns(state) -> np.ndarray:
    """Every state leaf but `time`, flattened per env: [N, columns] float64."""
    n = len(state.time)
    leaves = [np.asarray(v).reshape(n, -1) for k, v in vars(state).items() if k != "time"]
    return np.concatenate([np.zeros((n, 0)), *leaves], axis=1).astype(np.float64)


def test_the_list_holds_every_builtin_id():
    # What `import fusedrl` registers, in a fresh interpreter (no test file's envs): each is checked.
    code = "import json, fusedrl; print(json.dumps(fusedrl.registered_ids(include_gymnax=False)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         timeout=300)
    assert json.loads(out.stdout) == OUR_IDS


# Single-env API ----------------------------------------------------------------------------------
@functools.cache
def _jit(fn):
    """`jax.jit(fn)` with FAST_COMPILE, one per function (bound methods of one env compare equal)."""
    return jax.jit(fn, compiler_options=FAST_COMPILE)


def _single_action(env, params, seed):
    return _actions(np.random.default_rng(seed), env.action_space(params), ())


@pytest.mark.parametrize("env_id", ALL_IDS)
def test_reset_and_step_match_spaces(env_id):
    env, params = _make(env_id)
    obs_space, act_space = env.observation_space(params), env.action_space(params)
    obs_dtype = _obs_dtype(env_id, obs_space)
    if env_id in GYMNAX_OBS_DTYPE:
        assert jnp.dtype(obs_space.dtype) != obs_dtype, "gymnax fixed its space: drop the exception"

    obs, state = _jit(env.reset)(jax.random.key(0), params)
    assert obs.shape == tuple(obs_space.shape) and obs.dtype == obs_dtype
    action = _single_action(env, params, 1)
    assert action.shape == tuple(act_space.shape) and action.dtype == jnp.dtype(act_space.dtype)
    obs2, state2, reward, terminated, truncated, info = _jit(env.step)(
        jax.random.key(2), state, action, params
    )
    assert obs2.shape == obs.shape and obs2.dtype == obs.dtype
    assert reward.shape == () and jnp.issubdtype(reward.dtype, jnp.floating)
    assert terminated.shape == () and terminated.dtype == jnp.bool_
    assert truncated.shape == () and truncated.dtype == jnp.bool_
    final = info["final_observation"]
    assert final.shape == obs.shape and final.dtype == obs.dtype
    # The state is a scan carry: same structure, shapes and dtypes after a step.
    chex.assert_trees_all_equal_shapes_and_dtypes(state2, state)
    time_after = 0 if env_id in ONE_STEP_EPISODES else 1  # a one-step episode has reset already
    assert state.time.dtype == jnp.int32 and int(state.time) == 0 and int(state2.time) == time_after
    assert _in_box(obs_space, obs) and _in_box(obs_space, obs2)
    if env_id in OUR_IDS:
        assert isinstance(env, Environment) and isinstance(params, EnvParams)
        assert obs.dtype == jnp.float32 and reward.dtype == jnp.float32


@pytest.mark.parametrize("env_id", ALL_IDS)
def test_auto_reset_after_truncation(env_id):
    env, params = _make(env_id)
    _, state = _jit(env.reset)(jax.random.key(4), params)
    state = state.replace(time=state.time + (params.max_steps_in_episode - 1))  # keeps its dtype
    _, truncated = _check_auto_reset_step(
        env, params, jax.random.key(3), state, _single_action(env, params, 5)
    )
    assert bool(truncated)


@pytest.mark.parametrize("env_id", [i for i in ALL_IDS if i not in NEVER_TERMINATES])
def test_auto_reset_after_termination(env_id):
    env, params = _make(env_id)
    key, state, action = _terminating_transition(env_id)
    terminated, truncated = _check_auto_reset_step(env, params, key, state, action)
    assert bool(terminated) and not bool(truncated)


def _check_auto_reset_step(env, params, key, state, action):
    """One auto-resetting `step` against its parts. gymnax 1.0's `Environment.step` splits
    `key_step, key_reset = split(key)`, steps with the first and resets with the second. (Close,
    not equal: XLA may fuse the parts differently, which moves float32 results by an ulp.)"""
    obs, new_state, _, terminated, truncated, info = _jit(env.step)(key, state, action, params)
    key_step, key_reset = jax.random.split(key)
    obs_stepped = _jit(env.step_env)(key_step, state, action, params)[0]
    obs_reset, state_reset = _jit(env.reset)(key_reset, params)
    chex.assert_trees_all_close(info["final_observation"], obs_stepped, rtol=1e-6, atol=1e-7)
    chex.assert_trees_all_close((obs, new_state), (obs_reset, state_reset), rtol=1e-6, atol=1e-7)
    assert int(new_state.time) == 0
    assert not np.array_equal(obs, obs_stepped), "the fresh obs should differ from the final one"
    return terminated, truncated


def _terminating_transition(env_id):
    """(key, state, action) whose step terminates: hand-built for ours, else from the rollout.

    Leaves keep the dtypes (and weak types) of a reset state, so the jitted step is not recompiled.
    """
    env, params = _make(env_id)
    _, reset_state = _jit(env.reset)(jax.random.key(0), params)
    if env_id in TERMINAL_TRANSITIONS:
        fields, action = TERMINAL_TRANSITIONS[env_id]
        state = reset_state.replace(
            **{k: jnp.full_like(getattr(reset_state, k), v) for k, v in fields.items()}
        )
        return jax.random.key(0), state, np.asarray(action, env.action_space(params).dtype)
    out = _rollout(env_id)
    hits = np.argwhere(out["terminated"] & ~out["truncated"])
    assert len(hits), f"{env_id}: no termination in the random rollout; add it to TERMINAL_TRANSITIONS"
    t, i = hits[0]
    # A Python scalar is what jit sees as weakly typed.
    pick = lambda ref, x: x[t, i].item() if ref.weak_type else x[t, i]  # noqa: E731
    state = jax.tree.map(pick, reset_state, out["prev_state"])
    key = jax.random.wrap_key_data(out["key_data"][t, i])
    return key, state, out["action"][t, i]


@functools.cache
def _rollout(env_id):
    """NUM_STEPS random steps of NUM_ENVS envs through `jit(vmap(env.step))` in a scan, run twice
    (the second call with new keys, actions and state) under `chex.assert_max_traces(n=1)`.

    Starts from the VecEnv rollout's first (directly reset) states; before each run, the times are
    spread over the whole episode so that some envs hit the time limit. Returns the second run.
    """
    env, params = _make(env_id)

    def rollout(state, keys, actions):
        def body(state, x):
            keys, action = x
            step = jax.vmap(env.step, in_axes=(0, 0, 0, None))
            obs, next_state, reward, terminated, truncated, info = step(keys, state, action, params)
            out = dict(
                obs=obs,
                reward=reward,
                terminated=terminated,
                truncated=truncated,
                final_obs=info["final_observation"],
                action=action,
                key_data=jax.random.key_data(keys),
                prev_state=state,
                time=next_state.time,
            )
            return next_state, out

        return jax.lax.scan(body, state, (keys, actions))

    rollout.__name__ = f"rollout[{env_id}]"  # chex counts traces per name and call site
    rollout = jax.jit(chex.assert_max_traces(rollout, n=1), compiler_options=FAST_COMPILE)
    rng = np.random.default_rng(10)
    space = env.action_space(params)
    _, state, _ = _vec_rollout(env_id)
    for _ in range(2):  # a retrace on the second call would raise
        times = rng.integers(0, params.max_steps_in_episode, NUM_ENVS).astype(np.int32)
        keys = _keys(rng, (NUM_STEPS, NUM_ENVS))
        actions = _actions(rng, space, (NUM_STEPS, NUM_ENVS))
        state, out = rollout(state.replace(time=times), keys, actions)
    return jax.tree.map(np.asarray, out)


@pytest.mark.parametrize("env_id", ALL_IDS)
def test_vmapped_rollout_shapes_and_finite_values(env_id):
    env, params = _make(env_id)
    out = _rollout(env_id)
    obs_space = env.observation_space(params)
    T, N = NUM_STEPS, NUM_ENVS
    assert out["obs"].shape == (T, N, *obs_space.shape)
    assert out["obs"].dtype == _obs_dtype(env_id, obs_space)
    assert out["final_obs"].shape == out["obs"].shape
    assert out["reward"].shape == (T, N) and out["terminated"].shape == (T, N)
    assert out["truncated"].shape == (T, N) and out["truncated"].dtype == np.bool_
    for name in ("obs", "final_obs", "reward"):
        assert np.isfinite(out[name]).all(), f"non-finite {name}"
    assert _in_box(obs_space, out["obs"]) and _in_box(obs_space, out["final_obs"])


@pytest.mark.parametrize("env_id", ALL_IDS)
def test_vmapped_rollout_auto_resets(env_id):
    _, params = _make(env_id)
    out = _rollout(env_id)
    done = out["terminated"] | out["truncated"]
    assert out["truncated"].any(), "the rollout must cross episode ends"
    # Ended episodes restart at time 0; the others advance by one and return the stepped obs.
    np.testing.assert_array_equal(out["time"][done], 0)
    np.testing.assert_array_equal(out["time"][~done], out["prev_state"].time[~done] + 1)
    np.testing.assert_array_equal(out["obs"][~done], out["final_obs"][~done])
    assert not np.array_equal(out["obs"][done], out["final_obs"][done])
    # Truncation is exactly the time limit.
    np.testing.assert_array_equal(out["truncated"], out["prev_state"].time + 1 >= params.max_steps_in_episode)


# VecEnv ------------------------------------------------------------------------------------------
@functools.cache
def _vec_rollout(env_id):
    """NUM_STEPS random steps through `VecEnv(env, NUM_ENVS)` with episodes of VEC_MAX_STEPS.

    Returns (first obs, first env state, per-step outputs), as numpy. The first states come from
    `VecEnv.reset`, i.e. straight from the env's `reset_env`; later initial states from the pool.
    """
    env, params = _make(env_id)
    params = params.replace(max_steps_in_episode=VEC_MAX_STEPS)
    rng = np.random.default_rng(20)
    times = rng.integers(0, VEC_MAX_STEPS, NUM_ENVS).astype(np.int32)  # desynchronised episodes
    actions = _actions(rng, env.action_space(params), (NUM_STEPS, NUM_ENVS))
    return _run_vec(env, params, jax.random.key(20), times, actions)


@functools.cache
def _vec_rollout_predrawn(env_id):
    """As `_vec_rollout`, with every random input drawn ahead by `VecEnv.predraw` (as PPO's rollout
    does); also returns the draws."""
    env, params = _make(env_id)
    params = params.replace(max_steps_in_episode=VEC_MAX_STEPS)
    rng = np.random.default_rng(21)
    times = rng.integers(0, VEC_MAX_STEPS, NUM_ENVS).astype(np.int32)
    actions = _actions(rng, env.action_space(params), (NUM_STEPS, NUM_ENVS))
    return _run_vec(env, params, jax.random.key(21), times, actions, predraw=True)


def _run_vec(env, params, key, times, actions, predraw=False):
    vec = VecEnv(env, len(times))

    def rollout(key, times, actions):
        k_reset, k_draw = jax.random.split(key)
        obs0, vstate = vec.reset(k_reset, params)
        first_state = vstate.env_state
        vstate = vstate.replace(env_state=first_state.replace(time=times))
        draws = vec.predraw(k_draw, params, actions.shape[0]) if predraw else None

        def body(vstate, xs):
            action, step_draws = xs
            obs, new, reward, terminated, truncated, info = vec.step(vstate, action, params, step_draws)
            out = dict(
                obs=obs,
                action=action,
                reward=reward,
                terminated=terminated,
                truncated=truncated,
                final_obs=info["final_observation"],
                prev_time=vstate.env_state.time,
                state=new.env_state,
                pool_used=new.pool_used,
                pool_redrawn=_any_leaf_differs(vstate.pool_state, new.pool_state),
            )
            return new, out

        _, out = jax.lax.scan(body, vstate, (actions, draws))
        if predraw:
            out["prev_state"] = jax.tree.map(  # the state each step started from
                lambda first, later: jnp.concatenate([first[None], later[:-1]]),
                vstate.env_state,
                out["state"],
            )
            if draws.step_keys is not None:  # numpy-friendly: raw key data
                draws = draws.replace(step_keys=jax.random.key_data(draws.step_keys))
            return obs0, first_state, out, draws
        return obs0, first_state, out

    return jax.tree.map(np.asarray, jax.jit(rollout, compiler_options=FAST_COMPILE)(key, times, actions))


def _any_leaf_differs(a, b) -> jax.Array:
    return jnp.stack(
        [jnp.any(x != y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)]
    ).any()


def _handed_out_initial_states(out):
    """[episodes, columns]: every initial state the pool gave to an env whose episode ended."""
    done = out["terminated"] | out["truncated"]
    return _state_columns(jax.tree.map(lambda x: x[done], out["state"]))


@pytest.mark.parametrize("env_id", ALL_IDS)
def test_vecenv_shapes_and_auto_reset(env_id):
    env, params = _make(env_id)
    obs0, _, out = _vec_rollout(env_id)
    obs_space = env.observation_space(params)
    T, N = NUM_STEPS, NUM_ENVS
    assert obs0.shape == (N, *obs_space.shape) and obs0.dtype == _obs_dtype(env_id, obs_space)
    assert out["obs"].shape == (T, N, *obs_space.shape) and out["obs"].dtype == obs0.dtype
    assert out["final_obs"].shape == out["obs"].shape
    assert out["reward"].shape == (T, N) and out["reward"].dtype == np.float32
    assert out["terminated"].dtype == np.bool_ and out["truncated"].dtype == np.bool_
    for name in ("obs", "final_obs", "reward"):
        assert np.isfinite(out[name]).all(), f"non-finite {name}"

    done = out["terminated"] | out["truncated"]
    np.testing.assert_array_equal(out["truncated"], out["prev_time"] + 1 >= VEC_MAX_STEPS)
    np.testing.assert_array_equal(out["state"].time[done], 0)
    np.testing.assert_array_equal(out["state"].time[~done], out["prev_time"][~done] + 1)
    np.testing.assert_array_equal(out["obs"][~done], out["final_obs"][~done])
    assert not np.array_equal(out["obs"][done], out["final_obs"][done])
    # The pool was partly used at times, and redrawn (for envs with random initial states, a
    # redraw changes the pool's contents).
    if env_id not in ONE_STEP_EPISODES:  # there every env takes its slot on every step
        assert ((out["pool_used"] > 0) & (out["pool_used"] < N)).any()
    if env_id in RESET_UNIFORM:
        assert out["pool_redrawn"].any() and not out["pool_redrawn"].all()
    if env_id in OUR_IDS:
        # A fresh observation belongs to its fresh state (and every other obs to its state).
        expected = jax.vmap(jax.vmap(env.get_obs))(out["state"])
        np.testing.assert_allclose(out["obs"], expected, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("env_id", ALL_IDS)
def test_vecenv_reset_pool_matches_reset_distribution(env_id):
    """Initial states handed out by the pool are distributed like direct `reset_env` draws (the
    first batch, which `VecEnv.reset` draws without the pool)."""
    _, first_state, out = _vec_rollout(env_id)
    pooled, direct = _handed_out_initial_states(out), _state_columns(first_state)
    assert len(pooled) > 4 * NUM_ENVS
    lo, hi = direct.min(0), direct.max(0)
    span = np.where(hi > lo, hi - lo, 1.0)
    pooled, direct = pooled / span, direct / span  # in units of each column's range
    # 6 standard errors of a difference of two means (std at most span / 2).
    tol = 6 * 0.5 * math.sqrt(1 / len(pooled) + 1 / len(direct))
    np.testing.assert_allclose(pooled.mean(0), direct.mean(0), atol=tol, err_msg="mean / range")
    np.testing.assert_allclose(pooled.std(0), direct.std(0), atol=tol, err_msg="std / range")
    np.testing.assert_allclose(pooled.min(0), direct.min(0), atol=0.01, err_msg="min / range")
    np.testing.assert_allclose(pooled.max(0), direct.max(0), atol=0.01, err_msg="max / range")


@pytest.mark.parametrize("env_id", sorted(RESET_UNIFORM))
def test_vecenv_initial_states_follow_documented_uniforms(env_id):
    """Pool-served initial states against the documented distribution itself, e.g. CartPole's
    uniform[-0.05, 0.05] for each variable: min, max, mean and std."""
    _, _, out = _vec_rollout(env_id)
    _assert_served_states_follow_documented_uniforms(env_id, out)


def _assert_served_states_follow_documented_uniforms(env_id, out):
    """Initial states of the episodes that started during `out`: min, max, mean and std of each
    field against its documented uniform."""
    done = out["terminated"] | out["truncated"]
    for field, (low, high) in RESET_UNIFORM[env_id].items():
        x = getattr(out["state"], field)[done].astype(np.float64)
        if low == high:
            np.testing.assert_array_equal(x, low, err_msg=field)
            continue
        width, n = high - low, len(x)
        assert low <= x.min() < low + 0.01 * width and high - 0.01 * width < x.max() <= high, field
        assert abs(x.mean() - (low + high) / 2) < 6 * width / math.sqrt(12 * n), field
        assert abs(x.std() - width / math.sqrt(12)) < 0.03 * width / math.sqrt(12), field


@pytest.mark.parametrize("env_id", [i for i in OUR_IDS if i not in ONE_RANDOM_VARIABLE | PROBE_IDS])
def test_vecenv_never_hands_out_an_initial_state_twice(env_id):
    _, first_state, out = _vec_rollout(env_id)
    states = np.concatenate([_state_columns(first_state), _handed_out_initial_states(out)])
    assert len(np.unique(states, axis=0)) == len(states)


# A probe env whose initial state is 64 random bits: equal initial states mean a reused pool entry.
@struct.dataclass
class ProbeState(EnvState):
    episode_id: jax.Array  # [2] uint32 random bits drawn at reset
    time: jax.Array  # [] int32 steps taken in this episode


@struct.dataclass
class ProbeParams(EnvParams):
    max_steps_in_episode: int = 3


class Probe(Environment):
    """Observation float32 [1]: time. Action Discrete(2): 1 terminates. Reward 0."""

    deterministic_step = True

    @property
    def default_params(self):
        return ProbeParams()

    def step_env(self, key, state, action, params):
        state = state.replace(time=state.time + 1)
        return self.get_obs(state), state, jnp.float32(0.0), action == 1, {}

    def reset_env(self, key, params):
        state = ProbeState(episode_id=jax.random.bits(key, (2,), jnp.uint32), time=jnp.int32(0))
        return self.get_obs(state), state

    def get_obs(self, state, params=None, key=None):
        return state.time[None].astype(jnp.float32)

    def is_terminated(self, state, params):
        return jnp.zeros((), bool)

    def action_space(self, params=None):
        return Discrete(2)


@pytest.mark.parametrize("predraw", [False, True], ids=["pool", "predraw"])
def test_vecenv_never_reuses_an_initial_state(predraw):
    """About half the envs finish every step, so the pool runs out mid-step again and again (or,
    with predraw, about half of every step's predrawn slots are served)."""
    env, n, steps = Probe(), 16, 300
    rng = np.random.default_rng(0)
    actions = _actions(rng, env.action_space(), (steps, n))
    times = np.zeros(n, np.int32)
    _, first_state, out, *_ = _run_vec(
        env, env.default_params, jax.random.key(0), times, actions, predraw=predraw
    )
    done = out["terminated"] | out["truncated"]
    assert done.sum() > 2000
    ids = np.concatenate([_state_columns(first_state), _handed_out_initial_states(out)])
    assert len(np.unique(ids, axis=0)) == len(ids)
    if predraw:
        assert not out["pool_redrawn"].any()
    else:
        assert out["pool_redrawn"].sum() > 100
        # A redraw makes every slot fresh before the step's finished envs take theirs; otherwise the
        # used slots add up.
        handed_out, before = done.sum(1), np.concatenate([[0], out["pool_used"][:-1]])
        expected = np.where(out["pool_redrawn"], handed_out, before + handed_out)
        np.testing.assert_array_equal(out["pool_used"], expected)


class IntRewardProbe(Probe):
    """Probe whose reward is int32: 1 on the terminating action."""

    def step_env(self, key, state, action, params):
        obs, state, _, terminated, info = super().step_env(key, state, action, params)
        return obs, state, action.astype(jnp.int32), terminated, info


@pytest.mark.parametrize("predraw", [False, True], ids=["pool", "predraw"])
def test_vecenv_rewards_are_float32_whatever_the_env_returns(predraw):
    env = IntRewardProbe()
    actions = _actions(np.random.default_rng(1), env.action_space(), (4, 3))
    out = _run_vec(env, env.default_params, jax.random.key(0), np.zeros(3, np.int32), actions, predraw)[2]
    assert out["reward"].dtype == np.float32
    np.testing.assert_array_equal(out["reward"], actions)


# VecEnv with predrawn randomness (the PPO rollout's path) -----------------------------------------
PREDRAW_IDS = sorted(RESET_UNIFORM) + ["gymnax:FourRooms-misc"]  # FourRooms: a stochastic step


@pytest.mark.parametrize("env_id", PREDRAW_IDS)
def test_vecenv_predrawn_steps_use_their_draws(env_id):
    """With `draws`, an env whose episode ended restarts from exactly its (step, env) slot of the
    predraw; the others step as the env's own `step_env` does (with the predrawn key, if the step
    is stochastic); the reset pool and the VecEnv's key are not touched."""
    env, params = _make(env_id)
    params = params.replace(max_steps_in_episode=VEC_MAX_STEPS)
    _, _, out, draws = _vec_rollout_predrawn(env_id)
    T, N = NUM_STEPS, NUM_ENVS
    assert jax.tree.leaves(draws)[0].shape[:2] == (T, N)
    assert (draws.step_keys is None) == getattr(env, "deterministic_step", False)
    done = out["terminated"] | out["truncated"]
    assert 0.1 < done.mean() < 0.9
    served = jax.tree.map(lambda x: x[done], draws.reset_state)
    for got, want in zip(jax.tree.leaves(jax.tree.map(lambda x: x[done], out["state"])),
                         jax.tree.leaves(served), strict=True):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(out["obs"][done], np.asarray(draws.reset_obs)[done])
    # The stepped (pre-reset) observation is what step_env returns from the previous state.
    if draws.step_keys is None:
        keys = jnp.zeros((T, N, 2), jnp.uint32)  # unused by a deterministic step
    else:
        keys = jax.random.wrap_key_data(draws.step_keys)
    step = jax.vmap(jax.vmap(lambda k, s, a: env.step_env(k, s, a, params)[0]))
    want_obs = jax.jit(step, compiler_options=FAST_COMPILE)(keys, out["prev_state"], out["action"])
    np.testing.assert_array_equal(out["final_obs"], np.asarray(want_obs))


@pytest.mark.parametrize("env_id", sorted(RESET_UNIFORM))
def test_vecenv_predrawn_initial_states_follow_documented_uniforms(env_id):
    _, _, out, _ = _vec_rollout_predrawn(env_id)
    done = out["terminated"] | out["truncated"]
    assert done.sum() > 4 * NUM_ENVS
    _assert_served_states_follow_documented_uniforms(env_id, out)
    assert not out["pool_redrawn"].any() and (out["pool_used"] == 0).all()


@pytest.mark.parametrize("env_id", ["CartPole-v1", "gymnax:FourRooms-misc"])
def test_vecenv_predraw_bytes_is_the_size_of_a_predraw(env_id):
    env, params = _make(env_id)
    vec = VecEnv(env, 4)
    draws = vec.predraw(jax.random.key(0), params, 3)
    assert (draws.step_keys is None) == getattr(env, "deterministic_step", False)
    if draws.step_keys is not None:  # typed keys: count their raw key data
        draws = draws.replace(step_keys=jax.random.key_data(draws.step_keys))
    assert vec.predraw_bytes(params, 3) == sum(x.nbytes for x in jax.tree.leaves(draws))


def test_vecenv_rejects_a_whole_predraw_as_one_steps_draws():
    env, params = _make("CartPole-v1")
    vec = VecEnv(env, 4)
    _, vstate = vec.reset(jax.random.key(0), params)
    draws = vec.predraw(jax.random.key(1), params, 8)
    with pytest.raises(ValueError, match=r"ONE step's slice of predraw.*draws\[t\]"):
        vec.step(vstate, jnp.zeros(4, jnp.int32), params, draws)
    with pytest.raises(TypeError, match="StepDraws"):
        vec.step(vstate, jnp.zeros(4, jnp.int32), params, draws=(1, 2))
    # With as many steps as envs every leaf leads with N; the whole shapes still tell them apart.
    square = vec.predraw(jax.random.key(1), params, 4)
    expected = r"reset_obs of shape \(4, 4, 4\) for observations of shape \(4, 4\)"
    with pytest.raises(ValueError, match=expected):
        vec.step(vstate, jnp.zeros(4, jnp.int32), params, square)
    obs, *_ = vec.step(vstate, jnp.zeros(4, jnp.int32), params, draws[0])
    assert obs.shape == (4, 4)


# A probe env with a stochastic step: reset and step each record 64 random bits of their key.
@struct.dataclass
class NoisyProbeState(EnvState):
    reset_noise: jax.Array  # [2] uint32 bits of reset_env's key
    step_noise: jax.Array  # [2] uint32 bits of the last step_env's key (zeros before any step)
    time: jax.Array  # [] int32


class NoisyProbe(Environment):
    """Observation float32 [4]: both noises. Action Discrete(2), ignored. Never ends. Reward 0."""

    @property
    def default_params(self):
        return ProbeParams(max_steps_in_episode=10_000)

    def step_env(self, key, state, action, params):
        state = state.replace(step_noise=jax.random.bits(key, (2,), jnp.uint32), time=state.time + 1)
        return self.get_obs(state), state, jnp.float32(0.0), jnp.zeros((), bool), {}

    def reset_env(self, key, params):
        noise = jax.random.bits(key, (2,), jnp.uint32)
        state = NoisyProbeState(reset_noise=noise, step_noise=jnp.zeros(2, jnp.uint32), time=jnp.int32(0))
        return self.get_obs(state), state

    def get_obs(self, state, params=None, key=None):
        return jnp.concatenate([state.reset_noise, state.step_noise]).astype(jnp.float32)

    def is_terminated(self, state, params):
        return jnp.zeros((), bool)

    def action_space(self, params=None):
        return Discrete(2)


def _noisy_probe_steps(draws=None, n=8, steps=5):
    """Step noise [steps * n, 2] of `steps` VecEnv steps of NoisyProbe, and the reset state."""
    env = NoisyProbe()
    vec = VecEnv(env, n)
    _, vstate = vec.reset(jax.random.key(0), env.default_params)
    reset_state = vstate.env_state
    step = jax.jit(vec.step)
    noise = []
    for t in range(steps):
        _, vstate, *_ = step(vstate, jnp.zeros(n, jnp.int32), env.default_params,
                             None if draws is None else draws[t])
        noise.append(np.asarray(vstate.env_state.step_noise))
    return np.concatenate(noise), reset_state


def test_vecenv_stochastic_step_gets_fresh_keys_every_step():
    """Without draws, every (step, env) gets its own step key: the VecEnv's key advances each step."""
    noise, reset_state = _noisy_probe_steps()
    assert len(np.unique(noise, axis=0)) == len(noise)
    resets = np.asarray(reset_state.reset_noise)
    assert not (noise[:, None] == resets[None]).all(-1).any(), "a step key equals a reset key"


def test_vecenv_predrawn_step_keys_are_independent_of_predrawn_resets():
    """A predraw's step keys are not its reset keys: no step noise equals any predrawn reset's noise."""
    env, n, steps = NoisyProbe(), 8, 5
    draws = VecEnv(env, n).predraw(jax.random.key(1), env.default_params, steps)
    assert draws.step_keys is not None
    noise, _ = _noisy_probe_steps(draws, n, steps)
    assert len(np.unique(noise, axis=0)) == len(noise)
    resets = np.asarray(draws.reset_state.reset_noise).reshape(-1, 2)
    assert not (noise[:, None] == resets[None]).all(-1).any(), "a predrawn step key equals a reset key"


# Params are traced ------------------------------------------------------------------------------
@pytest.mark.parametrize("env_id", [i for i in OUR_IDS if i not in PROBE_IDS])  # probes: no physics
def test_params_can_be_vmapped(env_id):
    """Every float param is a traced leaf: a batch of params steps in one call, and the unchanged
    member gives the unbatched result."""
    env, params = _make(env_id)
    _, state = _jit(env.reset)(jax.random.key(0), params)
    action = _single_action(env, params, 1)
    batched = jax.tree.map(
        lambda x: jnp.asarray(x) * jnp.array([1.0, 1.01]) if isinstance(x, float) else jnp.asarray([x, x]),
        params,
    )
    step = jax.jit(jax.vmap(env.step_env, in_axes=(None, None, None, 0)), compiler_options=FAST_COMPILE)
    obs, *_ = step(jax.random.key(2), state, action, batched)
    ref, *_ = _jit(env.step_env)(jax.random.key(2), state, action, params)
    np.testing.assert_allclose(obs[0], ref, rtol=1e-6, atol=1e-7)
    assert not np.array_equal(obs[0], obs[1]), "scaling the params changed nothing"
