"""Wrappers over the vectorised env contract (`VecEnv` and wrappers of it).

Every wrapper takes an object with `VecEnv`'s interface and exposes the same one:

    reset(key, params) -> (obs [N, ...], state)
    step(state, action [N, ...], params, draws=None)
        -> (obs, state, reward [N], terminated [N], truncated [N], info)
    predraw(key, params, num_steps) -> StepDraws  (the VecEnv's, passed through)
    rollout_draws(key, params, num_steps, *, max_bytes) -> StepDraws | None  (likewise)

plus `env` (the single underlying env), `num_envs`, `action_space(params)` and
`observation_space(params)` (single-env spaces, as in gymnax). Wrappers are static Python objects;
everything that changes at run time lives in the state, a `flax.struct.dataclass` whose `inner`
field holds the wrapped env's state, so a stack of wrappers is safe under `jit`, `vmap` and `scan`.

A typical training stack, innermost first:

    venv = VecEnv(env, num_envs)
    venv = EpisodeStatistics(venv)          # raw returns, before any reward scaling
    venv = NormalizeReward(venv, gamma=gamma)
    venv = NormalizeObservation(venv)

Normalisers use the statistics *after* including the current batch (as Gymnasium and SB3's
`VecNormalize` do), so the very first observations are already well scaled.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from fusedrl.envs._gymnax import spaces
from fusedrl.envs.base import Box, check_action, check_params

#: The observation entry that holds an env's allowed actions (bool, one entry per action): kept as
#: it is by `StructuredObservation`, never normalised; the built-in networks mask the policy with it.
ACTION_MASK = "action_mask"

#: The normalisers' defaults (`NormalizeObservation`, `NormalizeReward`, `scale_reward`): added to the
#: variance, and the bound on a normalised value's magnitude. The host bridge and saved policies
#: normalise with these too.
NORM_EPSILON = 1e-8
NORM_CLIP = 10.0

#: Weight of the prior (mean 0, variance 1) a fresh `RunningMeanStd` starts from. Tiny, so the first
#: batch sets the statistics almost alone, yet the count is never zero. Same value as Gymnasium and
#: SB3, so statistics carry over between libraries.
INITIAL_COUNT = 1e-4


@struct.dataclass
class RunningMeanStd:
    """Running mean and (population) variance of a stream of batches, in float32.

    Batches are merged with the parallel algorithm of Chan, Golub & LeVeque (1979): after merging,
    `mean`/`var` are those of every sample seen, plus a prior sample (mean 0, variance 1) of weight
    `count - samples seen` (`INITIAL_COUNT` for `create`'s default).
    """

    mean: jax.Array  # [*shape] float32
    var: jax.Array  # [*shape] float32, population variance (divides by count)
    count: jax.Array  # [] float32, samples seen plus the prior's weight

    @classmethod
    def create(cls, shape: tuple[int, ...] = (), count: float = INITIAL_COUNT) -> RunningMeanStd:
        """Fresh statistics of samples of `shape`: mean 0, variance 1, weight `count`.

        `count=0.0` makes the first `update` set the batch's own statistics exactly.
        """
        shape = tuple(shape)
        return cls(
            mean=jnp.zeros(shape, jnp.float32),
            var=jnp.ones(shape, jnp.float32),
            count=jnp.asarray(count, jnp.float32),
        )

    def update(self, batch: jax.Array, axis_name: str | None = None) -> RunningMeanStd:
        """Returns the statistics with `batch` [B, *shape] merged in (B >= 1).

        With `axis_name` (a mapped axis over which shards of one agent run, each with its own
        batch of the same size B), every shard's batch is merged in: shards that start from the same
        statistics keep the same statistics.
        """
        batch = jnp.asarray(batch, jnp.float32)
        if batch.ndim < 1 or batch.shape[1:] != self.mean.shape or batch.shape[0] < 1:
            raise ValueError(
                f"RunningMeanStd.update expects a batch of shape [B >= 1, *{self.mean.shape}], "
                f"got {batch.shape}."
            )
        batch_count = batch.shape[0]
        batch_mean = jnp.mean(batch, axis=0)
        batch_var = jnp.var(batch, axis=0)
        if axis_name is not None:  # the pooled batch: equal sizes, so plain means over shards
            pooled_mean = jax.lax.pmean(batch_mean, axis_name)
            batch_var = jax.lax.pmean(batch_var + (batch_mean - pooled_mean) ** 2, axis_name)
            batch_mean = pooled_mean
            batch_count = batch_count * jax.lax.axis_size(axis_name)
        delta = batch_mean - self.mean
        total = self.count + batch_count
        mean = self.mean + delta * (batch_count / total)
        m2 = self.var * self.count + batch_var * batch_count + delta**2 * (self.count * batch_count / total)
        return RunningMeanStd(mean=mean, var=m2 / total, count=total)

    def normalize(self, x: jax.Array, *, epsilon=NORM_EPSILON, clip=None, center: bool = True) -> jax.Array:
        """`(x - mean) / sqrt(var + epsilon)` (no centring if `center=False`), clipped to ±`clip`.

        Args:
          x: [..., *shape]; leading axes are batch axes.
          epsilon: added to the variance.
          clip: bound on the result's magnitude, or None for no clipping.
          center: subtract the mean (observations) or not (rewards, which keep their sign).
        """
        x = jnp.asarray(x, jnp.float32)
        lead = x.ndim - self.mean.ndim
        if lead < 0 or x.shape[lead:] != self.mean.shape:
            raise ValueError(f"RunningMeanStd.normalize expects [..., *{self.mean.shape}], got {x.shape}.")
        # Explicit leading axes: no implicit rank promotion.
        expand = (1,) * lead + self.mean.shape
        if center:
            x = x - self.mean.reshape(expand)
        x = x / jnp.sqrt(self.var.reshape(expand) + epsilon)
        if clip is not None:
            x = jnp.clip(x, -clip, clip)
        return x


@struct.dataclass
class WrapperState:
    """State of a wrapper that keeps nothing of its own."""

    inner: Any  # state of the wrapped (vectorised) env


class VecEnvWrapper:
    """Base class: passes everything through to the wrapped vectorised env.

    Subclasses override `reset`/`step` (and the spaces, if they change them). The default `reset`
    and `step` wrap the inner state in a `WrapperState`, so every wrapper's state has `inner`.

    Args:
      venv: a `VecEnv` or another wrapper (static).
    """

    def __init__(self, venv):
        missing = [a for a in ("reset", "step", "env", "num_envs") if not hasattr(venv, a)]
        if missing:
            raise TypeError(
                f"{type(self).__name__} wraps a vectorised env (fusedrl.envs.VecEnv or another "
                f"wrapper); got {type(venv).__name__}, which lacks {missing}. Wrap a single env "
                f"with VecEnv(env, num_envs) first."
            )
        self.venv = venv

    @property
    def env(self):
        """The single underlying environment."""
        return self.venv.env

    @property
    def num_envs(self) -> int:
        return self.venv.num_envs

    def action_space(self, params=None):
        """The single-env action space (the wrapped env's, unless this wrapper changes it)."""
        return _inner_space(self.venv, "action_space", params)

    def observation_space(self, params=None):
        """The single-env observation space (the wrapped env's, unless this wrapper changes it)."""
        return _inner_space(self.venv, "observation_space", params)

    def reset(self, key: jax.Array, params=None):
        """Returns observations [N, *obs_shape] and this wrapper's state."""
        obs, inner = self.venv.reset(key, params)
        return obs, WrapperState(inner=inner)

    def predraw(self, key: jax.Array, params, num_steps: int):
        """The wrapped `VecEnv`'s `predraw` (wrappers add no randomness of their own)."""
        return self.venv.predraw(key, params, num_steps)

    def predraw_bytes(self, params, num_steps: int) -> int:
        return self.venv.predraw_bytes(params, num_steps)

    def rollout_draws(self, key: jax.Array, params, num_steps: int, *, max_bytes: int):
        """The wrapped `VecEnv`'s `rollout_draws`: a predraw for the rollout, or None."""
        return self.venv.rollout_draws(key, params, num_steps, max_bytes=max_bytes)

    def step(self, state, action: jax.Array, params=None, draws=None):
        """Steps with `action` [N, *action_shape] (and optionally one step of `predraw`'s draws);
        returns what `VecEnv.step` returns."""
        obs, inner, reward, terminated, truncated, info = self.venv.step(state.inner, action, params, draws)
        return obs, state.replace(inner=inner), reward, terminated, truncated, info

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.venv!r})"


def _inner_space(venv, name: str, params):
    if hasattr(venv, name):  # a wrapper
        return getattr(venv, name)(params)
    # A VecEnv has no spaces of its own: they are the single env's.
    return getattr(venv.env, name)(check_params(venv.env, params))


def _map_obs(fn, obs, info):
    """Applies `fn` to the observations and to info["final_observation"] (if present)."""
    if "final_observation" in info:
        info = {**info, "final_observation": fn(info["final_observation"])}
    return fn(obs), info


# ---------------------------------------------------------------------------------------------
# Episode statistics


@struct.dataclass
class EpisodeStatisticsState(WrapperState):
    episode_return: jax.Array  # [N] float32, return of each env's current episode so far
    episode_length: jax.Array  # [N] int32, steps of each env's current episode so far


class EpisodeStatistics(VecEnvWrapper):
    """Reports the return and length of every episode when it ends.

    Adds to info, each [N]: `episode_done` (bool, `terminated | truncated`), `episode_return`
    (float32) and `episode_length` (int32), the latter two holding the finished episode's value
    where `episode_done` and 0 elsewhere. Only the running sums are kept, never a history.

    It sums the reward of the env it wraps: put it directly on the `VecEnv` (below any reward
    normalisation) to report raw returns.
    """

    def reset(self, key: jax.Array, params=None):
        obs, inner = self.venv.reset(key, params)
        n = self.num_envs
        state = EpisodeStatisticsState(
            inner=inner,
            episode_return=jnp.zeros((n,), jnp.float32),
            episode_length=jnp.zeros((n,), jnp.int32),
        )
        return obs, state

    def step(self, state: EpisodeStatisticsState, action: jax.Array, params=None, draws=None):
        obs, inner, reward, terminated, truncated, info = self.venv.step(state.inner, action, params, draws)
        done = terminated | truncated
        episode_return = state.episode_return + reward
        episode_length = state.episode_length + 1
        info = {
            **info,
            "episode_done": done,
            "episode_return": jnp.where(done, episode_return, 0.0),
            "episode_length": jnp.where(done, episode_length, 0),
        }
        state = state.replace(
            inner=inner,
            episode_return=jnp.where(done, 0.0, episode_return),
            episode_length=jnp.where(done, 0, episode_length),
        )
        return obs, state, reward, terminated, truncated, info


# ---------------------------------------------------------------------------------------------
# Normalisation


def _check_positive(name: str, value, allow_none: bool = False):
    """Checks a concrete number (Python's or NumPy's); traced values pass through unchecked."""
    if value is None and allow_none:
        return
    if isinstance(value, numbers.Real) and not value > 0:
        raise ValueError(f"{name} must be positive, got {value!r}.")


@struct.dataclass
class NormalizeObservationState(WrapperState):
    obs_stats: Any  # RunningMeanStd: mean/var [*obs_shape], count []; dict observations: {name: one}


def normalized_entries(obs: dict) -> list[str]:
    """The entries of a dict observation that `NormalizeObservation` normalises: floating-point ones,
    except the action mask. uint8 entries (pixels) are left alone (the networks scale them by 1/255:
    a known range, where per-pixel running statistics would keep moving the CNN's inputs), and
    so are bool and other integer entries."""
    return [k for k, v in obs.items() if k != ACTION_MASK and jnp.issubdtype(v.dtype, jnp.floating)]


def observation_stats(obs):
    """Fresh statistics for a batch of observations [N, ...]: a `RunningMeanStd`, or for a dict of
    arrays {name: [N, ...]} a dict of them, one per `normalized_entries` entry."""
    if isinstance(obs, dict):
        return {k: RunningMeanStd.create(obs[k].shape[1:]) for k in normalized_entries(obs)}
    return RunningMeanStd.create(obs.shape[1:])


def update_observation_stats(stats, obs, axis_name: str | None = None):
    """`stats` (of `observation_stats`) with the batch `obs` merged in."""
    if isinstance(obs, dict):
        return {k: s.update(obs[k], axis_name) for k, s in stats.items()}
    return stats.update(obs, axis_name)


def normalize_observation(stats, obs, *, epsilon=NORM_EPSILON, clip=NORM_CLIP):
    """`obs` normalised with `stats` (of `observation_stats`): each entry that has statistics; the
    others (masks, pixels) as they are."""
    if isinstance(obs, dict):
        return {k: stats[k].normalize(v, epsilon=epsilon, clip=clip) if k in stats else v
                for k, v in obs.items()}
    return stats.normalize(obs, epsilon=epsilon, clip=clip)


class NormalizeObservation(VecEnvWrapper):
    """Normalises observations by their running mean and variance.

    `obs` and `info["final_observation"]` both become `clip((x - mean) / sqrt(var + epsilon))`
    with the same statistics, float32. With `update=True` the statistics first absorb this step's
    `obs` [N, ...] (the observations the policy sees, including those returned by `reset`; final
    observations are normalised but not counted), then normalise it: statistics *after* the
    current batch.

    Args:
      venv: the vectorised env to wrap.
      update: keep updating the statistics (training) or freeze them (evaluation).
      epsilon: added to the variance.
      clip: bound on the magnitude of normalised observations, or None.
      stats: statistics `reset` starts from (a `RunningMeanStd` of the observation shape); default
        `RunningMeanStd.create(obs_shape)`. Pass the trained statistics with `update=False` to
        evaluate; they may be traced arrays when the wrapper is built inside a traced function.
      axis_name: shards of one agent along this mapped axis (data parallelism) pool their
        observations into one statistics, the same on every shard; None: this env's alone.
    """

    def __init__(self, venv, *, update: bool = True, epsilon=NORM_EPSILON, clip=NORM_CLIP,
                 stats=None,
                 axis_name: str | None = None):
        super().__init__(venv)
        self.axis_name = axis_name
        _check_positive("epsilon", epsilon)
        _check_positive("clip", clip, allow_none=True)
        if stats is not None and not isinstance(stats, RunningMeanStd | dict):
            raise TypeError(f"stats must be a RunningMeanStd (a dict of them for dict observations), got "
                            f"{type(stats).__name__}.")
        self.update = bool(update)
        self.epsilon = epsilon
        self.clip = clip
        self.stats = stats

    def observation_space(self, params=None):
        space = super().observation_space(params)
        if not hasattr(space, "shape"):  # dict observations: normalised per entry, bounds not tracked
            return space
        bound = jnp.inf if self.clip is None else self.clip
        return Box(-bound, bound, tuple(space.shape), jnp.float32)

    def _normalize(self, stats, x):
        return normalize_observation(stats, x, epsilon=self.epsilon, clip=self.clip)

    def with_stats(self, state: NormalizeObservationState, stats: RunningMeanStd):
        """Returns this wrapper's `state` with its statistics replaced by `stats`.

        Observations already returned keep the old normalisation; to normalise from the first
        observation on, pass `stats=` to the constructor instead.
        """
        _check_same_shape(state.obs_stats, stats)
        return state.replace(obs_stats=stats)

    def reset(self, key: jax.Array, params=None):
        obs, inner = self.venv.reset(key, params)
        stats = self.stats if self.stats is not None else observation_stats(obs)
        if isinstance(obs, dict):
            want = {k: obs[k].shape[1:] for k in normalized_entries(obs)}
            got = {k: s.mean.shape for k, s in stats.items()} if isinstance(stats, dict) else stats.mean.shape
            if got != want:
                raise ValueError(f"NormalizeObservation: stats have shapes {got}, the observations' "
                                 f"normalised entries {want}.")
        elif not isinstance(stats, RunningMeanStd) or stats.mean.shape != obs.shape[1:]:
            got = stats.mean.shape if isinstance(stats, RunningMeanStd) else type(stats).__name__
            raise ValueError(f"NormalizeObservation: stats have shape {got}, observations {obs.shape[1:]}.")
        if self.update:
            stats = update_observation_stats(stats, obs, self.axis_name)
        state = NormalizeObservationState(inner=inner, obs_stats=stats)
        return self._normalize(stats, obs), state

    def step(self, state: NormalizeObservationState, action: jax.Array, params=None, draws=None):
        obs, inner, reward, terminated, truncated, info = self.venv.step(state.inner, action, params, draws)
        stats = state.obs_stats
        if self.update:
            stats = update_observation_stats(stats, obs, self.axis_name)
        obs, info = _map_obs(lambda x: self._normalize(stats, x), obs, info)
        state = state.replace(inner=inner, obs_stats=stats)
        return obs, state, reward, terminated, truncated, info


@struct.dataclass
class NormalizeRewardState(WrapperState):
    discounted_return: jax.Array  # [N] float32, per-env return so far, 0 after an episode ends
    return_stats: RunningMeanStd  # mean/var [], count []: of every discounted_return seen


class NormalizeReward(VecEnvWrapper):
    """Scales rewards by the running standard deviation of the discounted return.

    As SB3's `VecNormalize`: per env, `G_t = G_{t-1} * gamma * (1 - done_{t-1}) + r_t` with
    `done = terminated | truncated`; the statistics absorb `G_t` [N] (if `update`), then the reward
    becomes `clip(r_t / sqrt(var(G) + epsilon))`. Rewards are scaled, never shifted. Gymnasium
    1.x's `NormalizeReward` differs at episode ends: its `G_t = G_{t-1} * gamma * (1 -
    terminated_t) + r_t` drops the return on the terminating step itself and never on truncation,
    so a truncated episode's return runs on into the next one.

    Args:
      venv: the vectorised env to wrap.
      gamma: discount of the return; may be a traced scalar (e.g. a swept hyperparameter).
      update: keep updating the statistics (training) or freeze them.
      epsilon: added to the variance.
      clip: bound on the magnitude of scaled rewards, or None.
      stats: statistics `reset` starts from (a scalar `RunningMeanStd`); default fresh.
      axis_name: shards of one agent along this mapped axis (data parallelism) pool their returns
        into one statistics, the same on every shard; None: this env's alone.
    """

    def __init__(self, venv, *, gamma, update: bool = True, epsilon=NORM_EPSILON, clip=NORM_CLIP,
                 stats=None,
                 axis_name: str | None = None):
        super().__init__(venv)
        self.axis_name = axis_name
        # gamma is kept as given (possibly a tracer): float() would fail inside a traced function.
        if isinstance(gamma, numbers.Real) and not 0.0 <= gamma <= 1.0:
            raise ValueError(f"gamma must be in [0, 1], got {gamma!r}.")
        _check_positive("epsilon", epsilon)
        _check_positive("clip", clip, allow_none=True)
        if stats is not None and not isinstance(stats, RunningMeanStd):
            raise TypeError(f"stats must be a RunningMeanStd, got {type(stats).__name__}.")
        if stats is not None and stats.mean.shape != ():
            raise ValueError(f"NormalizeReward: stats must be scalar, got shape {stats.mean.shape}.")
        self.gamma = gamma
        self.update = bool(update)
        self.epsilon = epsilon
        self.clip = clip
        self.stats = stats

    def with_stats(self, state: NormalizeRewardState, stats: RunningMeanStd):
        """Returns this wrapper's `state` with its return statistics replaced by `stats`."""
        _check_same_shape(state.return_stats, stats)
        return state.replace(return_stats=stats)

    def reset(self, key: jax.Array, params=None):
        obs, inner = self.venv.reset(key, params)
        stats = self.stats if self.stats is not None else RunningMeanStd.create(())
        state = NormalizeRewardState(
            inner=inner,
            discounted_return=jnp.zeros((self.num_envs,), jnp.float32),
            return_stats=stats,
        )
        return obs, state

    def step(self, state: NormalizeRewardState, action: jax.Array, params=None, draws=None):
        obs, inner, reward, terminated, truncated, info = self.venv.step(state.inner, action, params, draws)
        stats, discounted_return, scaled = scale_reward(
            state.return_stats, state.discounted_return, reward, terminated | truncated, self.gamma,
            update=self.update, epsilon=self.epsilon, clip=self.clip, axis_name=self.axis_name,
        )
        state = state.replace(inner=inner, discounted_return=discounted_return, return_stats=stats)
        return obs, state, scaled, terminated, truncated, info


def scale_reward(stats: RunningMeanStd, discounted_return: jax.Array, reward: jax.Array, done: jax.Array,
                 gamma, *, update: bool = True, epsilon=NORM_EPSILON, clip=NORM_CLIP,
                 axis_name: str | None = None):
    """One step of `NormalizeReward`'s scaling, for [N] envs (the wrapper's and the host bridge's).

    Args:
      stats: the scalar statistics of the discounted returns so far.
      discounted_return: [N] float32, each env's return so far (0 where the previous step ended
        an episode).
      reward: [N] this step's raw rewards.
      done: [N] bool, this step ended the episode (terminated or truncated).
      gamma: discount of the return (may be traced).
      update: whether the statistics absorb this step's returns first.
      epsilon, clip, axis_name: as `NormalizeReward`'s.

    Returns:
      (stats, discounted_return [N] zeroed where `done`, scaled reward [N] float32).
    """
    returns = (discounted_return * gamma + reward).astype(jnp.float32)
    if update:
        stats = stats.update(returns, axis_name)
    scaled = stats.normalize(reward, epsilon=epsilon, clip=clip, center=False)
    return stats, jnp.where(done, 0.0, returns), scaled


def _check_same_shape(old: RunningMeanStd, new: RunningMeanStd):
    if isinstance(old, dict):
        if not isinstance(new, dict) or jax.tree.map(jnp.shape, new) != jax.tree.map(jnp.shape, old):
            shapes = jax.tree.map(jnp.shape, old)
            raise ValueError(f"stats must be a dict of RunningMeanStd shaped as {shapes}.")
        return
    if not isinstance(new, RunningMeanStd):
        raise TypeError(f"stats must be a RunningMeanStd, got {type(new).__name__}.")
    if new.mean.shape != old.mean.shape:
        raise ValueError(f"stats have shape {new.mean.shape}, expected {old.mean.shape}.")


# ---------------------------------------------------------------------------------------------
# Shape and bounds


class ObservationMap(VecEnvWrapper):
    """Applies `self.observation(obs)` to every batch of observations the env hands out: reset's, and
    step's with its info["final_observation"]. Subclasses define `observation`."""

    def observation(self, obs):
        raise NotImplementedError

    def reset(self, key: jax.Array, params=None):
        obs, state = super().reset(key, params)
        return self.observation(obs), state

    def step(self, state: WrapperState, action: jax.Array, params=None, draws=None):
        obs, state, reward, terminated, truncated, info = super().step(state, action, params, draws)
        obs, info = _map_obs(self.observation, obs, info)
        return obs, state, reward, terminated, truncated, info


class FlattenObservation(ObservationMap):
    """Reshapes observations (and info["final_observation"]) to [N, prod(obs_shape)] float32."""

    def observation_space(self, params=None) -> Box:
        space = super().observation_space(params)
        if not isinstance(space, Box):
            raise TypeError(
                f"FlattenObservation: {self.env.name}'s observation space is {space!r}; only Box "
                f"observation spaces have a flat form."
            )
        shape = tuple(space.shape)
        size = math.prod(shape)

        def flat(bound):
            return jnp.broadcast_to(jnp.asarray(bound, jnp.float32), shape).reshape(size)

        return Box(flat(space.low), flat(space.high), (size,), jnp.float32)

    def observation(self, x):
        return jnp.asarray(x).reshape(self.num_envs, -1).astype(jnp.float32)


def _key_name(k) -> str:
    for attr in ("key", "name", "idx"):
        if hasattr(k, attr):
            return str(getattr(k, attr))
    return str(k)


def observation_entries(obs) -> list[tuple[str, Any]]:
    """(name, leaf) of each leaf of an observation pytree: a dict's (or NamedTuple's) entries by
    their names, nested ones joined with '.', tuple items by index; a bare array is "obs"."""
    pairs = jax.tree_util.tree_flatten_with_path(obs)[0]
    if len(pairs) == 1 and not pairs[0][0]:  # a bare array
        return [("obs", obs)]
    return [(".".join(_key_name(k) for k in path), leaf) for path, leaf in pairs]


def structure_observation(obs, batch: int, keep_images: bool) -> dict[str, jax.Array]:
    """A batch of observations (any pytree of [batch, ...] arrays) -> {name: [batch, ...]}.

    The action mask (`ACTION_MASK`) becomes bool [batch, n]. With `keep_images`, image-like leaves
    ([batch, H, W, C]) keep their shape; every other leaf is flattened to [batch, size]. uint8 and
    bool leaves keep their dtype (pixels travel and are stored as bytes; the networks cast them),
    every other leaf becomes float32."""
    out = {}
    for name, x in observation_entries(obs):
        x = jnp.asarray(x)
        if name == ACTION_MASK:
            out[name] = x.reshape(batch, -1).astype(bool)
            continue
        if not (keep_images and x.ndim == 4):
            x = x.reshape(batch, -1)
        out[name] = x if x.dtype in (jnp.uint8, jnp.bool_) else x.astype(jnp.float32)
    return out


class StructuredObservation(ObservationMap):
    """Observations (and info["final_observation"]) as a dict {name: [N, ...]}, for the built-in
    networks' dict path: what `FlattenObservation` is to one flat array, for dict (or NamedTuple)
    observations and image observations (`structure_observation` says what each entry becomes).

    Args:
      venv: the vectorised env to wrap.
      keep_images: keep image-like leaves ([H, W, C] per env) in their shape, for a CNN.
    """

    def __init__(self, venv, *, keep_images: bool = False):
        super().__init__(venv)
        self.keep_images = bool(keep_images)

    def observation_space(self, params=None):
        example = jax.eval_shape(lambda k: self.venv.reset(k, params)[0], jax.random.key(0))
        structured = jax.eval_shape(self.observation, example)
        return spaces.Dict({k: Box(-jnp.inf, jnp.inf, v.shape[1:], v.dtype) for k, v in structured.items()})

    def observation(self, x):
        return structure_observation(x, self.num_envs, self.keep_images)


class ClipAction(VecEnvWrapper):
    """Clips actions [N, *action_shape] to the Box action space's bounds before stepping.

    The bounds come from `action_space(params)` at every step, so bounds that depend on (possibly
    traced) env params are honoured.
    """

    def __init__(self, venv):
        super().__init__(venv)
        space = self.action_space(None)
        if not isinstance(space, Box):
            raise TypeError(
                f"ClipAction needs a Box action space, but {self.env.name}'s is {space!r}; "
                f"only continuous actions have bounds to clip to."
            )

    def step(self, state: WrapperState, action: jax.Array, params=None, draws=None):
        space = self.action_space(params)
        action = check_action(space, action, self.env.name, (self.num_envs,))
        shape = (1,) + tuple(space.shape)  # explicit batch axis: no implicit rank promotion

        def bound(b):
            return jnp.broadcast_to(jnp.asarray(b, action.dtype), tuple(space.shape)).reshape(shape)

        action = jnp.clip(action, bound(space.low), bound(space.high))
        return super().step(state, action, params, draws)


# ---------------------------------------------------------------------------------------------
# Finding a wrapper's state in a stack


def _depth(venv, cls) -> int:
    depth, w = 0, venv
    while not isinstance(w, cls):
        if not isinstance(w, VecEnvWrapper):
            raise ValueError(f"no {cls.__name__} in the wrapper stack {venv!r}.")
        w, depth = w.venv, depth + 1
    return depth


def find_wrapper(venv, cls: type):
    """The outermost wrapper (or the `VecEnv`) of type `cls` in the stack `venv`; None if none is."""
    w = venv
    while not isinstance(w, cls):
        if not isinstance(w, VecEnvWrapper):
            return None
        w = w.venv
    return w


def find_wrapper_state(venv, state, cls: type):
    """The state of the outermost wrapper of type `cls` in the stack `venv` whose state is `state`.

    E.g. the trained observation statistics:
    `find_wrapper_state(venv, env_state, NormalizeObservation).obs_stats`. With `cls=VecEnv`, the
    `VecEnvState` at the bottom of the stack (its `env_state` holds the single envs' states).
    """
    for _ in range(_depth(venv, cls)):
        state = state.inner
    return state


def replace_wrapper_state(venv, state, cls: type, new_state):
    """Returns `state` with the state of the outermost wrapper of type `cls` replaced."""

    def rebuild(s, depth):
        if depth == 0:
            return new_state
        return s.replace(inner=rebuild(s.inner, depth - 1))

    return rebuild(state, _depth(venv, cls))
