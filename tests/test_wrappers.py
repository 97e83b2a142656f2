"""Vectorised-env wrappers against NumPy re-implementations.

Each wrapped run is compared with an unwrapped `VecEnv` run from the same key and actions: the
reference is computed in NumPy from the raw observations, rewards and done flags of that run.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct

from fusedrl.envs import CartPole, MountainCarContinuous, VecEnv
from fusedrl.envs.base import Box, Discrete, Environment, EnvParams, EnvState
from fusedrl.envs.wrappers import (
    INITIAL_COUNT,
    ClipAction,
    EpisodeStatistics,
    EpisodeStatisticsState,
    FlattenObservation,
    NormalizeObservation,
    NormalizeReward,
    RunningMeanStd,
    find_wrapper,
    find_wrapper_state,
    replace_wrapper_state,
)

N = 4  # envs
T = 60  # steps per rollout


@pytest.fixture(scope="module", autouse=True)
def _strict_ranks():
    # Catches accidental [N] vs [N, 1] broadcasts inside the wrappers.
    with jax.numpy_rank_promotion("raise"):
        yield


# --- a tiny env whose transitions are read off its actions -----------------------------------


@struct.dataclass
class ToyState(EnvState):
    level: jax.Array  # [] float32, drawn at reset
    last_action: jax.Array  # [2] float32


@struct.dataclass
class ToyParams(EnvParams):
    max_steps_in_episode: int = 6


class Toy(Environment):
    """Obs [2, 3]: time, level and the last action; reward 3*a0 - 0.5; terminated when a1 > 0.8.

    Truncated after 6 steps. Action: Box(-1, 1, (2,)).
    """

    deterministic_step = True

    @property
    def name(self):
        return "Toy"

    @property
    def default_params(self):
        return ToyParams()

    def reset_env(self, key, params):
        level = jax.random.uniform(key, (), jnp.float32, -1.0, 1.0)
        state = ToyState(time=jnp.int32(0), level=level, last_action=jnp.zeros(2, jnp.float32))
        return self.get_obs(state), state

    def step_env(self, key, state, action, params):
        state = ToyState(time=state.time + 1, level=state.level, last_action=action)
        reward = 3.0 * action[0] - 0.5
        return self.get_obs(state), state, reward, action[1] > 0.8, {}

    def get_obs(self, state, params=None, key=None):
        t = state.time.astype(jnp.float32)
        a = state.last_action
        return jnp.array([[0.3 * t, state.level, 2.0 * state.level], [a[0], a[1], 0.1 * t * t]])

    def action_space(self, params=None):
        return Box(-1.0, 1.0, (2,), jnp.float32)

    def observation_space(self, params=None):
        return Box(-5.0, jnp.array([[5.0, 1.0, 2.0], [1.0, 1.0, 4.0]]), (2, 3), jnp.float32)


def toy_actions():
    """[T, N, 2] actions in [-1.5, 1.5] (for ClipAction) and the same clipped to the bounds."""
    raw = np.random.default_rng(0).uniform(-1.5, 1.5, (T, N, 2)).astype(np.float32)
    return jnp.asarray(raw), jnp.asarray(np.clip(raw, -1.0, 1.0))


def cartpole_actions():
    return jnp.asarray(np.random.default_rng(1).integers(0, 2, (T, N)), jnp.int32)


class Run(NamedTuple):
    obs0: Any  # [N, ...] from reset
    obs: Any  # [T, N, ...]
    reward: jax.Array  # [T, N]
    terminated: jax.Array  # [T, N]
    truncated: jax.Array  # [T, N]
    info: dict  # leaves [T, N, ...]
    extra: Any  # state_fn(state) after each step, leaves [T, ...]
    state: Any  # final state


def scan_rollout(venv, key, actions, state_fn=None) -> Run:
    """Reset, then `lax.scan` over `actions` [T, N, ...]; call it inside `jax.jit`."""
    obs0, state = venv.reset(key)

    def body(state, action):
        obs, state, reward, terminated, truncated, info = venv.step(state, action)
        extra = state_fn(state) if state_fn else None
        return state, (obs, reward, terminated, truncated, info, extra)

    state, out = jax.lax.scan(body, state, actions)
    return Run(obs0, *out, state)


def frozen_obs_stats():
    return RunningMeanStd(
        mean=jnp.asarray(np.linspace(-1, 1, 6).reshape(2, 3), jnp.float32),
        var=jnp.asarray(np.linspace(0.5, 3, 6).reshape(2, 3), jnp.float32),
        count=jnp.float32(1234.0),
    )


def frozen_reward_stats():
    return RunningMeanStd(mean=jnp.float32(0.3), var=jnp.float32(0.04), count=jnp.float32(50.0))


TOY_KEY = 1
GAMMAS = (0.99, 0.5)


def make_stack(env, gamma=0.99):
    """The training stack: VecEnv -> EpisodeStatistics -> NormalizeReward -> NormalizeObservation."""
    venv = EpisodeStatistics(VecEnv(env, N))
    venv = NormalizeReward(venv, gamma=gamma)
    return NormalizeObservation(venv)


class ToyRuns(NamedTuple):
    runs: dict  # name -> Run (leaves with a leading [2] axis for the vmapped ones)
    raw_actions: np.ndarray  # [T, N, 2] in [-1.5, 1.5]
    actions: np.ndarray  # [T, N, 2] the same clipped to [-1, 1]
    program: Any  # the jitted program that produced `runs`, already compiled
    args: tuple  # its device-resident arguments


@pytest.fixture(scope="module")
def toy():
    """Every wrapper on the toy env from the same key and actions, compiled as ONE program.

    (XLA compiles dominate this file's run time, so the runs share a compile.)
    """
    env = Toy()
    raw_actions, actions = toy_actions()

    def venv():
        return VecEnv(env, N)

    @jax.jit
    def program(key, actions, raw_actions, gammas, seed_keys):
        def reward_run(gamma):  # the wrapper is built around a traced gamma, as the trainer does
            return scan_rollout(NormalizeReward(venv(), gamma=gamma), key, actions, lambda s: s.return_stats)

        def stack_run(k):
            return scan_rollout(FlattenObservation(ClipAction(make_stack(env))), k, raw_actions)

        frozen = NormalizeObservation(
            NormalizeReward(venv(), gamma=0.9, update=False, stats=frozen_reward_stats(), clip=5.0),
            update=False,
            stats=frozen_obs_stats(),
            clip=None,
        )
        return {
            "raw": scan_rollout(venv(), key, actions),
            "episode_statistics": scan_rollout(EpisodeStatistics(venv()), key, actions),
            "normalize_obs": scan_rollout(NormalizeObservation(venv()), key, actions, lambda s: s.obs_stats),
            "frozen": scan_rollout(frozen, key, actions),
            "flatten": scan_rollout(FlattenObservation(venv()), key, actions),
            "clip": scan_rollout(ClipAction(venv()), key, raw_actions),
            "reward_sweep": jax.vmap(reward_run)(gammas),
            "stack_seeds": jax.vmap(stack_run)(seed_keys),
        }

    seed_keys = jnp.stack([jax.random.key(TOY_KEY), jax.random.key(10)])
    args = (jax.random.key(TOY_KEY), actions, raw_actions, jnp.array(GAMMAS, jnp.float32), seed_keys)
    return ToyRuns(program(*args), np.asarray(raw_actions), np.asarray(actions), program, args)


@pytest.fixture(scope="module")
def cartpole():
    """Unwrapped CartPole and the composed stack, same key and actions, one program."""
    env = CartPole()
    stack = make_stack(env)

    @jax.jit
    def run(key, actions):
        return scan_rollout(VecEnv(env, N), key, actions), scan_rollout(stack, key, actions)

    raw, wrapped = run(jax.random.key(2), cartpole_actions())
    return env, stack, raw, wrapped


def np_stats(x, prior=INITIAL_COUNT):
    """Mean/var of the rows of `x` [n, ...] merged with a prior sample (mean 0, var 1, weight `prior`)."""
    x = np.asarray(x, np.float64)
    n = x.shape[0]
    mean = x.sum(0) / (n + prior)
    var = (prior * (1.0 + mean**2) + ((x - mean) ** 2).sum(0)) / (n + prior)
    return mean, var


def np_episode_stats(rewards, dones):
    """NumPy loop: per-step [T, N] return/length of episodes ending there, 0 elsewhere."""
    ret, length = np.zeros(N), np.zeros(N, np.int64)
    out_ret, out_len = np.zeros(rewards.shape), np.zeros(rewards.shape, np.int64)
    for t in range(rewards.shape[0]):
        ret, length = ret + rewards[t], length + 1
        out_ret[t] = np.where(dones[t], ret, 0.0)
        out_len[t] = np.where(dones[t], length, 0)
        ret, length = np.where(dones[t], 0.0, ret), np.where(dones[t], 0, length)
    return out_ret, out_len


def np_normalized_rewards(rewards, dones, gamma, epsilon=1e-8, clip=10.0):
    """NumPy re-implementation of the discounted-return reward scaling."""
    g = np.zeros(N)
    seen, out = [], np.zeros(rewards.shape)
    for t in range(rewards.shape[0]):
        g = g * gamma + rewards[t]
        seen.append(g.copy())
        _, var = np_stats(np.concatenate(seen))
        out[t] = np.clip(rewards[t] / np.sqrt(var + epsilon), -clip, clip)
        g = np.where(dones[t], 0.0, g)
    return out, np.concatenate(seen)


# --- RunningMeanStd --------------------------------------------------------------------------


def test_running_mean_std_matches_numpy_over_all_batches():
    rng = np.random.default_rng(0)
    batches = [rng.normal(3.0, s, (5, 2, 3)).astype(np.float32) for s in (0.5, 2.0, 1.0, 4.0)]
    update = jax.jit(RunningMeanStd.update)
    stats, exact = RunningMeanStd.create((2, 3)), RunningMeanStd.create((2, 3), count=0.0)
    for b in batches:
        stats, exact = update(stats, b), update(exact, b)
    seen = np.concatenate(batches)
    mean, var = np_stats(seen)
    np.testing.assert_allclose(stats.mean, mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(stats.var, var, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(stats.count, len(seen) + INITIAL_COUNT, rtol=1e-7)
    # With no prior, exactly the statistics of the samples.
    np.testing.assert_allclose(exact.mean, seen.mean(0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(exact.var, seen.var(0), rtol=1e-5, atol=1e-6)
    assert stats.mean.dtype == stats.var.dtype == stats.count.dtype == jnp.float32


def test_running_mean_std_pools_the_shards_of_a_mapped_axis():
    # Shards of one agent (data parallelism) merge every shard's batch: each ends with the
    # statistics of all shards' samples, as one update with the concatenated batch would give.
    rng = np.random.default_rng(1)
    batches = [rng.normal(m, s, (3, 5, 2)).astype(np.float32) for m, s in ((1.0, 0.5), (-2.0, 3.0))]
    start = RunningMeanStd(mean=jnp.array([0.5, -1.0]), var=jnp.array([2.0, 0.5]), count=jnp.float32(7.0))
    pooled = jax.jit(jax.vmap(lambda s, b: s.update(b, "shards"), in_axes=(None, 0), axis_name="shards"))
    for b in batches:  # [3 shards, 5 samples, 2]
        start_all = start.update(b.reshape(15, 2))
        stats = pooled(start, b)
        for i in range(3):
            np.testing.assert_allclose(stats.mean[i], start_all.mean, rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(stats.var[i], start_all.var, rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(stats.count[i], start.count + 15, rtol=1e-7)
        start = start_all


def test_running_mean_std_rejects_wrong_batch_shape():
    with pytest.raises(ValueError, match=r"\[B >= 1, \*\(3,\)\]"):
        RunningMeanStd.create((3,)).update(jnp.zeros((4, 2)))


# --- EpisodeStatistics -----------------------------------------------------------------------


def test_episode_statistics_match_numpy_loop(toy):
    runs = toy.runs
    raw, run = runs["raw"], runs["episode_statistics"]
    rewards, dones = np.asarray(raw.reward), np.asarray(raw.terminated | raw.truncated)
    np.testing.assert_array_equal(run.reward, rewards)  # the reward passes through unchanged
    np.testing.assert_array_equal(run.terminated | run.truncated, dones)
    ref_ret, ref_len = np_episode_stats(rewards, dones)
    np.testing.assert_array_equal(run.info["episode_done"], dones)
    np.testing.assert_allclose(run.info["episode_return"], ref_ret, rtol=1e-6, atol=1e-5)
    np.testing.assert_array_equal(run.info["episode_length"], ref_len)
    assert run.info["episode_return"].dtype == jnp.float32
    assert run.info["episode_length"].dtype == jnp.int32
    # Not vacuous: many episodes ended, by termination and by truncation alone.
    assert dones.sum() >= 20
    assert np.asarray(raw.terminated).any() and np.asarray(raw.truncated & ~raw.terminated).any()


# --- NormalizeObservation --------------------------------------------------------------------


def test_normalize_observation_matches_numpy_running_stats(toy):
    runs = toy.runs
    raw, run = runs["raw"], runs["normalize_obs"]
    seen = np.concatenate([np.asarray(raw.obs0)[None], np.asarray(raw.obs)])  # [T+1, N, 2, 3]
    final_raw = np.asarray(raw.info["final_observation"])

    # Final statistics: the mean/var of every observation the policy saw (reset's included).
    flat = seen.reshape(-1, 2, 3)
    stats = run.state.obs_stats
    np.testing.assert_allclose(stats.mean, flat.mean(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(stats.var, flat.var(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(stats.count, flat.shape[0] + INITIAL_COUNT, rtol=1e-7)

    # Each step's obs and final obs are normalised with the statistics *including* that step.
    def ref(x, upto):
        mean, var = np_stats(seen[:upto].reshape(-1, 2, 3))
        return np.clip((x - mean) / np.sqrt(var + 1e-8), -10.0, 10.0)

    np.testing.assert_allclose(run.obs0, ref(seen[0], 1), rtol=1e-4, atol=1e-4)
    for t in range(T):
        np.testing.assert_allclose(run.obs[t], ref(seen[t + 1], t + 2), rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(
            run.info["final_observation"][t], ref(final_raw[t], t + 2), rtol=1e-4, atol=1e-4
        )
        mean, var = np_stats(seen[: t + 2].reshape(-1, 2, 3))
        np.testing.assert_allclose(run.extra.mean[t], mean, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(run.extra.var[t], var, rtol=1e-5, atol=1e-6)
    assert run.obs.dtype == jnp.float32
    assert np.abs(np.asarray(run.obs)).max() <= 10.0


def test_normalize_observation_frozen_stats_are_used_and_unchanged(toy):
    runs = toy.runs
    raw, run = runs["raw"], runs["frozen"]
    given = frozen_obs_stats()
    for field in ("mean", "var", "count"):
        np.testing.assert_array_equal(getattr(run.state.obs_stats, field), getattr(given, field))

    def ref(x):
        return (np.asarray(x) - np.asarray(given.mean)) / np.sqrt(np.asarray(given.var) + 1e-8)

    np.testing.assert_allclose(run.obs0, ref(raw.obs0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(run.obs, ref(raw.obs), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(
        run.info["final_observation"], ref(raw.info["final_observation"]), rtol=1e-5, atol=1e-6
    )

    # with_stats swaps the statistics in an existing state, checking the shape.
    norm = NormalizeObservation(VecEnv(Toy(), N), update=False)
    fresh = RunningMeanStd.create((2, 3))
    swapped = norm.with_stats(run.state, fresh)
    np.testing.assert_array_equal(swapped.obs_stats.var, np.ones((2, 3)))
    assert swapped.inner is run.state.inner
    with pytest.raises(ValueError, match="shape"):
        norm.with_stats(run.state, RunningMeanStd.create((6,)))


# --- NormalizeReward -------------------------------------------------------------------------


def test_normalize_reward_matches_numpy_with_traced_swept_gamma(toy):
    raw, out = toy.runs["raw"], toy.runs["reward_sweep"]  # vmapped over GAMMAS
    rewards, dones = np.asarray(raw.reward), np.asarray(raw.terminated | raw.truncated)
    assert dones.any()
    for i, gamma in enumerate(GAMMAS):
        ref, returns = np_normalized_rewards(rewards, dones, gamma)
        np.testing.assert_allclose(out.reward[i], ref, rtol=1e-5, atol=1e-6)
        mean, var = np_stats(returns)
        np.testing.assert_allclose(out.state.return_stats.mean[i], mean, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(out.state.return_stats.var[i], var, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(out.obs[i], raw.obs)  # observations untouched
    assert out.reward.dtype == jnp.float32
    assert not np.allclose(out.reward[0], out.reward[1])


def test_normalize_reward_clips_and_frozen_stats_are_unchanged(toy):
    runs = toy.runs
    raw, run = runs["raw"], runs["frozen"]
    given = frozen_reward_stats()
    for field in ("mean", "var", "count"):
        np.testing.assert_array_equal(getattr(run.state.inner.return_stats, field), getattr(given, field))
    ref = np.clip(np.asarray(raw.reward) / np.sqrt(0.04 + 1e-8), -5.0, 5.0)
    np.testing.assert_allclose(run.reward, ref, rtol=1e-5, atol=1e-6)
    assert (np.abs(ref) == 5.0).any() and (np.abs(ref) < 5.0).any()  # clipping was exercised


def test_normalize_reward_checks_gamma_and_stats():
    venv = VecEnv(CartPole(), N)
    for gamma in (0.0, 1.0):  # both ends of [0, 1] are valid discounts
        assert NormalizeReward(venv, gamma=gamma).gamma == gamma
    with pytest.raises(ValueError, match=r"gamma must be in \[0, 1\], got -0.1"):
        NormalizeReward(venv, gamma=-0.1)
    with pytest.raises(ValueError, match=r"gamma must be in \[0, 1\], got np.float32\(1.5\)"):
        NormalizeReward(venv, gamma=np.float32(1.5))  # NumPy scalars are checked too
    with pytest.raises(TypeError, match="stats must be a RunningMeanStd, got tuple"):
        NormalizeReward(venv, gamma=0.99, stats=(0.0, 1.0))
    with pytest.raises(ValueError, match=r"stats must be scalar, got shape \(4,\)"):
        NormalizeReward(venv, gamma=0.99, stats=RunningMeanStd.create((4,)))
    # with_stats swaps the return statistics in an existing state, checking type and shape.
    norm = NormalizeReward(venv, gamma=0.99)
    _, state = norm.reset(jax.random.key(0))
    assert norm.with_stats(state, frozen_reward_stats()).return_stats.count == 50.0
    with pytest.raises(ValueError, match=r"stats have shape \(4,\), expected \(\)"):
        norm.with_stats(state, RunningMeanStd.create((4,)))
    with pytest.raises(TypeError, match="stats must be a RunningMeanStd"):
        norm.with_stats(state, (0.0, 1.0))


def test_normalize_observation_names_both_shapes_of_mismatched_stats():
    expected = r"NormalizeObservation: stats have shape \(6,\), observations \(2, 3\)"
    for update in (True, False):
        norm = NormalizeObservation(VecEnv(Toy(), N), update=update, stats=RunningMeanStd.create((6,)))
        with pytest.raises(ValueError, match=expected):
            norm.reset(jax.random.key(0))


# --- FlattenObservation and ClipAction -------------------------------------------------------


def test_flatten_observation_shapes_values_and_space(toy):
    runs = toy.runs
    raw, run = runs["raw"], runs["flatten"]
    assert run.obs0.shape == (N, 6) and run.obs.shape == (T, N, 6) and run.obs.dtype == jnp.float32
    assert run.info["final_observation"].shape == (T, N, 6)
    np.testing.assert_array_equal(run.obs0, np.asarray(raw.obs0).reshape(N, 6))
    np.testing.assert_array_equal(run.obs, np.asarray(raw.obs).reshape(T, N, 6))
    np.testing.assert_array_equal(
        run.info["final_observation"], np.asarray(raw.info["final_observation"]).reshape(T, N, 6)
    )
    space = FlattenObservation(VecEnv(Toy(), N)).observation_space()
    assert isinstance(space, Box) and space.shape == (6,) and space.dtype == jnp.float32
    np.testing.assert_array_equal(space.low, np.full(6, -5.0))
    np.testing.assert_array_equal(space.high, [5.0, 1.0, 2.0, 1.0, 1.0, 4.0])


def test_clip_action_clips_to_bounds_before_stepping(toy):
    runs, raw_actions, clipped = toy.runs, toy.raw_actions, toy.actions
    raw, run = runs["raw"], runs["clip"]  # raw: unwrapped env stepped with pre-clipped actions
    assert (np.abs(raw_actions) > 1.0).any()
    # The env saw the clipped action: it is echoed in final_observation[..., 1, :2].
    np.testing.assert_array_equal(run.info["final_observation"][:, :, 1, :2], clipped)
    np.testing.assert_array_equal(run.obs, raw.obs)
    np.testing.assert_array_equal(run.reward, raw.reward)
    np.testing.assert_array_equal(run.terminated, raw.terminated)
    space = ClipAction(VecEnv(Toy(), N)).action_space()
    assert isinstance(space, Box) and space.shape == (2,)


class LopsidedToy(Toy):
    """Toy with asymmetric action bounds: a0 in [0, 1], a1 in [-1, 0.5]."""

    def action_space(self, params=None):
        return Box(jnp.array([0.0, -1.0]), jnp.array([1.0, 0.5]), (2,), jnp.float32)


def test_clip_action_uses_each_bound_of_an_asymmetric_box():
    venv = ClipAction(VecEnv(LopsidedToy(), 2))
    _, state = venv.reset(jax.random.key(0))
    obs, *_ = venv.step(state, jnp.array([[-0.3, -1.7], [1.4, 0.9]]))
    # The env echoes the action it stepped with in obs[..., 1, :2] (no episode ended here).
    np.testing.assert_array_equal(obs[:, 1, :2], [[0.0, -1.0], [1.0, 0.5]])


def test_clip_action_uses_the_bounds_of_the_params_it_steps_with():
    env = MountainCarContinuous()
    params = env.default_params.replace(max_action=0.5)
    venv = ClipAction(VecEnv(env, 2))
    _, state = venv.reset(jax.random.key(0), params)
    _, _, reward, terminated, *_ = venv.step(state, jnp.array([[1.0], [-2.0]]), params)
    # The cost -0.1 * throttle**2 is of the throttle the env received: clipped to [-1, 0.5].
    assert not terminated.any()
    np.testing.assert_allclose(reward, [-0.1 * 0.5**2, -0.1 * 1.0**2], rtol=1e-6)


class IntObsToy(Toy):
    """Toy with int32 observations."""

    def get_obs(self, state, params=None, key=None):
        return jnp.round(super().get_obs(state, params, key)).astype(jnp.int32)


def test_flatten_observation_casts_to_float32():
    venv = FlattenObservation(VecEnv(IntObsToy(), N))
    obs0, state = venv.reset(jax.random.key(0))
    obs, *_, info = venv.step(state, jnp.zeros((N, 2), jnp.float32))
    for x in (obs0, obs, info["final_observation"]):
        assert x.shape == (N, 6) and x.dtype == jnp.float32


def test_normalisers_refuse_non_positive_settings_and_report_their_bounds():
    for wrapper in (NormalizeObservation, lambda v, **kw: NormalizeReward(v, gamma=0.99, **kw)):
        for bad in ({"clip": 0.0}, {"clip": -1.0}, {"epsilon": 0.0}, {"clip": np.float32(-1.0)}):
            with pytest.raises(ValueError, match=f"{next(iter(bad))} must be positive"):
                wrapper(VecEnv(CartPole(), N), **bad)
    for clip, bound in ((5.0, 5.0), (None, np.inf)):
        space = NormalizeObservation(VecEnv(CartPole(), N), clip=clip).observation_space()
        np.testing.assert_array_equal(np.broadcast_to(space.low, (4,)), -bound)
        np.testing.assert_array_equal(np.broadcast_to(space.high, (4,)), bound)


def test_bad_inputs_raise_clear_errors():
    with pytest.raises(TypeError, match="ClipAction needs a Box action space.*Discrete"):
        ClipAction(VecEnv(CartPole(), N))
    with pytest.raises(TypeError, match=r"VecEnv\(env, num_envs\)"):
        EpisodeStatistics(CartPole())
    with pytest.raises(ValueError, match="gamma"):
        NormalizeReward(VecEnv(CartPole(), N), gamma=1.5)
    with pytest.raises(TypeError, match="cast it"):  # ClipAction still checks dtype before clipping
        ClipAction(VecEnv(Toy(), N)).step(None, jnp.zeros((N, 2), jnp.int32))
    with pytest.raises(TypeError, match="only Box"):
        FlattenObservation(VecEnv(DiscreteObsToy(), N)).observation_space()


class DiscreteObsToy(Toy):
    def observation_space(self, params=None):
        return Discrete(3)


# --- composition, jit, scan, vmap ------------------------------------------------------------


def test_composed_stack_in_jitted_scan_matches_references(cartpole):
    env, stack, raw, run = cartpole
    rewards, dones = np.asarray(raw.reward), np.asarray(raw.terminated | raw.truncated)
    assert dones.sum() >= 5
    # Episode statistics (innermost) report raw returns, and pass through the outer wrappers.
    ref_ret, ref_len = np_episode_stats(rewards, dones)
    np.testing.assert_allclose(run.info["episode_return"], ref_ret, rtol=1e-6)
    np.testing.assert_array_equal(run.info["episode_length"], ref_len)
    ref_scaled, _ = np_normalized_rewards(rewards, dones, 0.99)
    np.testing.assert_allclose(run.reward, ref_scaled, rtol=1e-5, atol=1e-6)
    seen = np.concatenate([np.asarray(raw.obs0), np.asarray(raw.obs).reshape(-1, 4)])
    obs_stats = find_wrapper_state(stack, run.state, NormalizeObservation).obs_stats
    np.testing.assert_allclose(obs_stats.mean, seen.mean(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(obs_stats.var, seen.var(0), rtol=1e-5, atol=1e-5)
    # Passthrough attributes.
    assert stack.env is env and stack.num_envs == N
    assert stack.action_space().n == 2 and stack.observation_space().shape == (4,)


def test_find_and_replace_wrapper_state(cartpole):
    _, stack, _, run = cartpole
    state = run.state
    assert find_wrapper_state(stack, state, NormalizeObservation) is state
    episode = find_wrapper_state(stack, state, EpisodeStatistics)
    assert isinstance(episode, EpisodeStatisticsState) and episode is state.inner.inner
    inner = find_wrapper_state(stack, state, NormalizeReward)
    swapped = replace_wrapper_state(
        stack, state, NormalizeReward, inner.replace(discounted_return=jnp.full((N,), 7.0))
    )
    np.testing.assert_array_equal(swapped.inner.discounted_return, np.full(N, 7.0))
    assert swapped.obs_stats is state.obs_stats and swapped.inner.inner is state.inner.inner
    with pytest.raises(ValueError, match="no ClipAction"):
        find_wrapper_state(stack, state, ClipAction)
    bottom = find_wrapper_state(stack, state, VecEnv)  # the stack's own VecEnv, under every wrapper
    assert bottom is episode.inner and bottom.env_state.x.shape == (N,)
    assert find_wrapper(stack, NormalizeObservation) is stack
    assert find_wrapper(stack, EpisodeStatistics) is stack.venv.venv
    assert find_wrapper(stack, VecEnv) is stack.venv.venv.venv  # the VecEnv under EpisodeStatistics
    assert find_wrapper(stack, ClipAction) is None


def test_composed_stack_vmaps_over_seeds_and_matches_references(toy):
    raw, out = toy.runs["raw"], toy.runs["stack_seeds"]  # seed 0 has the raw run's key
    assert out.obs.shape == (2, T, N, 6) and out.reward.shape == (2, T, N)
    # Seed 0 against NumPy: the stack's actions are clipped to the raw run's, so the episodes match.
    rewards, dones = np.asarray(raw.reward), np.asarray(raw.terminated | raw.truncated)
    ref_ret, ref_len = np_episode_stats(rewards, dones)
    np.testing.assert_allclose(out.info["episode_return"][0], ref_ret, rtol=1e-6, atol=1e-5)
    np.testing.assert_array_equal(out.info["episode_length"][0], ref_len)
    ref_scaled, _ = np_normalized_rewards(rewards, dones, 0.99)
    np.testing.assert_allclose(out.reward[0], ref_scaled, rtol=1e-5, atol=1e-6)
    seen = np.concatenate([np.asarray(raw.obs0)[None], np.asarray(raw.obs)]).reshape(-1, 6)
    mean, var = np_stats(seen)
    last = (np.asarray(raw.obs[-1]).reshape(N, 6) - mean) / np.sqrt(var + 1e-8)
    np.testing.assert_allclose(out.obs[0, -1], np.clip(last, -10, 10), rtol=1e-4, atol=1e-4)
    # Seed 1 is a different run (reset levels are random), with the same episode ends.
    assert not np.allclose(out.obs[0], out.obs[1])
    np.testing.assert_array_equal(out.info["episode_done"][1], dones)
    assert np.isfinite(np.asarray(out.obs)).all()


def test_all_wrappers_run_without_host_transfers(toy):
    with jax.transfer_guard("disallow"):  # the program is compiled; its arguments live on device
        again = toy.program(*toy.args)
    # The guard does not see host callbacks inside the program: the program text must have none.
    assert "callback" not in toy.program.lower(*toy.args).as_text()
    np.testing.assert_array_equal(again["stack_seeds"].obs, toy.runs["stack_seeds"].obs)
