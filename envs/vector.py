"""Batched stepping of N environments with automatic reset, built for throughput.

Stepping thousands of small environments costs more in random numbers than in physics: gymnax's
`step` splits a key per env per step and draws a fresh initial state for every env at every step,
only to throw it away unless that env's episode ended. `VecEnv` keeps a *reset pool* instead: one
initial state per env, drawn for all N in one batch. An env whose episode ends takes its own pool
slot and marks it used; when an env finishes whose slot is already used, the whole pool is redrawn
first (under `lax.cond`, so only then). Every episode still starts from a fresh, never-reused draw
of the env's own `reset_env`, and which draw an env gets never depends on the draws' values, so
the distribution of initial states is unchanged. Slot i belongs to env i, so handing states out
is an elementwise select: no prefix sums, no gathers.

A caller that knows how many steps it will take (a PPO rollout) can do better still: `predraw`
draws every random input of the next T steps in one batched call (an initial state for every
(step, env) slot, and per-step keys for stochastic envs), and `step(..., draws=draws[t])` consumes
them. No random numbers are drawn and no branch is taken inside the step loop, which matters under
`vmap` (where the pool's `lax.cond` becomes a select that redraws at every step) and on CPU (where
every threefry call is a small loop of its own). Each slot is still used at most once and whether
it is used never depends on its value, so the initial-state distribution is unchanged.

Predrawing makes T * N resets where episodes use at most as many, so it pays only when a reset costs
about what a step does. `rollout_draws` chooses: a predraw, or None (step with the reset pool) for
an env whose resets are expensive (declared by `Environment.expensive_reset`, else measured from
XLA's cost estimate of `reset_env` against `step_env`) or whose predraw exceeds a memory budget.
"""

from __future__ import annotations

import contextlib
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from fusedrl._numbers import is_int
from fusedrl._warnings import warn_user
from fusedrl.envs._gymnax import environment
from fusedrl.envs.base import (
    Environment,
    check_action,
    check_observation,
    check_params,
    check_scalar_output,
    tree_select,
)


def _warn_own_step_or_reset(env) -> None:
    """Warns when the env's class overrides `step` or `reset` with something VecEnv would skip.

    VecEnv never calls an env's `step` or `reset`: it steps each env with `step_env` and
    `is_truncated` and resets it with `reset_env`, as gymnax's own `step` does. The contract: an
    override of `step`/`reset` must return what gymnax's does (an auto-reset written by hand, as in
    envs derived from older gymnax, say); one that adds anything (a reward scaled in `step`) is
    warned about, since training would skip it silently. gymnax's and fusedrl's base classes are
    trusted; any other override is run once per class (one small compiled program, one env, the
    default params) beside gymnax's auto-reset of the same `step_env`/`reset_env` with the same
    keys, and the warning is raised only when their results differ (or the override fails to run).
    """
    for name in ("step", "reset"):
        owner = next((c for c in type(env).__mro__ if name in vars(c)), None)
        if owner is None or owner is Environment or owner.__module__.split(".")[0] == "gymnax":
            continue
        if _override_matches_gymnax(env, name):
            continue
        warn_user(
            f"{type(env).__name__} overrides {name} (in {owner.__name__}), which VecEnv, and so training and "
            f"evaluation, never calls: it steps each env with step_env and is_truncated and resets it with "
            f"reset_env. {owner.__name__}.{name} returns other results than gymnax's {name} built from them "
            f"(run with the same key): put what it adds into step_env (or reset_env).",
            UserWarning,
        )


_OVERRIDE_CHECKS: dict[tuple[type, str], bool] = {}


def _override_matches_gymnax(env, name: str) -> bool:
    """Whether the env's `step` (or `reset`) returns what gymnax's returns, on a reset state of the
    default params with a sampled action (checked once per class). False if it cannot be run."""
    cls = type(env)
    if (cls, name) not in _OVERRIDE_CHECKS:
        try:
            with jax.ensure_compile_time_eval():  # concrete values, even when built inside a trace
                _OVERRIDE_CHECKS[cls, name] = bool(_compare_with_gymnax(env, name))
        except Exception:  # noqa: BLE001  (an env that needs arguments, a crashing override: warn)
            _OVERRIDE_CHECKS[cls, name] = False
    return _OVERRIDE_CHECKS[cls, name]


def _compare_with_gymnax(env, name: str):
    params = env.default_params

    def gymnax_step(key, state, action):
        key_step, key_reset = jax.random.split(key)
        obs_st, state_st, reward, terminated, info = env.step_env(key_step, state, action, params)
        truncated = env.is_truncated(state_st, params)
        done = jnp.logical_or(terminated, truncated)
        obs_re, state_re = env.reset_env(key_reset, params)
        obs, state = jax.tree.map(lambda r, s: jax.lax.select(done, r, s),
                                  (obs_re, state_re), (obs_st, state_st))
        return obs, state, reward, terminated, truncated

    def compare(key):
        k_reset, k_action, k_step = jax.random.split(key, 3)
        got_reset, want_reset = tuple(env.reset(k_reset, params)), env.reset_env(k_reset, params)
        if name == "reset":
            return _close(got_reset[:2], want_reset)
        state = want_reset[1]
        action = env.action_space(params).sample(k_action)
        got = tuple(env.step(k_step, state, action, params))
        want = gymnax_step(k_step, state, action)
        if len(got) == 5:  # gymnax < 1.0's step: (obs, state, reward, done, info)
            want = (*want[:3], want[3] | want[4])
        return _close(got[:len(want)], want)

    return jax.jit(compare)(jax.random.key(0))


def _close(got, want) -> jax.Array:
    """[] bool: the pytrees have one structure and their leaves agree to float32 rounding."""
    if jax.tree.structure(got) != jax.tree.structure(want):
        return jnp.asarray(False)

    def numbers(x):
        x = jnp.asarray(x)
        return jax.random.key_data(x) if jnp.issubdtype(x.dtype, jax.dtypes.prng_key) else x

    same = [jnp.asarray(False) if jnp.shape(a) != jnp.shape(b) else
            jnp.allclose(numbers(a).astype(jnp.float32), numbers(b).astype(jnp.float32), rtol=1e-5, atol=1e-6)
            for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True)]
    return jnp.all(jnp.stack(same)) if same else jnp.asarray(True)


#: `VecEnv.rollout_draws` predraws resets unless one `reset_env` accesses more than this many times the
#: memory one `step_env` does (XLA's cost analysis, "bytes accessed", one env each). A reset that
#: draws a start state accesses at most a few times a step's memory (the classic-control envs, gymnax's
#: and MinAtar's: 0.1 to 5); one that generates a world (Craftax's) over ten times: predrawing those
#: would cost a world per step. XLA's flop counts do not separate the two kinds, bytes accessed do.
#: A reset that accesses at most `CHEAP_RESET_BYTES` counts as cheap whatever the step: drawing a few
#: random numbers (CartPole's, MinAtar's resets) costs little even against a step that does nothing.
EXPENSIVE_RESET_RATIO = 8.0
CHEAP_RESET_BYTES = 16 * 2**10

_RESET_COSTS: dict[tuple, bool] = {}


def _measured_expensive_reset(env, params) -> bool:
    """`reset_env` accesses more than `EXPENSIVE_RESET_RATIO` times the memory of `step_env` and more
    than `CHEAP_RESET_BYTES`, by XLA's estimate of one env's programs (lowered from abstract inputs,
    never compiled). False when the estimate is not available."""
    abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(jnp.shape(x), jnp.result_type(x)), params)
    # Per class, not per instance: every trainer makes its own env, and lowering costs ~0.2 s.
    cache_key = (type(env), jax.tree.structure(abstract), tuple(jax.tree.leaves(abstract)))
    if cache_key in _RESET_COSTS:
        return _RESET_COSTS[cache_key]
    key = jax.ShapeDtypeStruct((), jax.random.key(0).dtype)
    try:
        _, state = jax.eval_shape(env.reset_env, key, abstract)
        action = jax.eval_shape(lambda k: env.action_space(params).sample(k), key)
        reset = jax.jit(env.reset_env).lower(key, abstract).cost_analysis()
        step = jax.jit(env.step_env).lower(key, state, action, abstract).cost_analysis()
        reset_bytes, step_bytes = (float(c["bytes accessed"]) for c in (reset, step))
        expensive = reset_bytes > max(EXPENSIVE_RESET_RATIO * step_bytes, CHEAP_RESET_BYTES)
    except Exception:  # noqa: BLE001  (no cost analysis on this backend, an env that needs concrete
        expensive = False  # params to build its action space): predraw, right for most envs
    _RESET_COSTS[cache_key] = expensive
    return expensive


@struct.dataclass
class StepDraws:
    """Random inputs of one or more steps, drawn ahead by `VecEnv.predraw`.

    Leaves have a leading [T] axis from `predraw`; `step` takes one step's slice (`draws[t]`,
    or the scanned slice inside `lax.scan`), leaves [N, ...].
    """

    reset_obs: Any  # [T, N, *obs_shape] a fresh initial observation for every (step, env) slot
    reset_state: Any  # env state pytree [T, N, ...] matching reset_obs
    step_keys: jax.Array | None  # [T, N] keys for stochastic envs' step_env; None if deterministic

    def __getitem__(self, t):
        return jax.tree.map(lambda x: x[t], self)


@struct.dataclass
class VecEnvState:
    env_state: Any  # env state pytree, leaves [N, ...]
    pool_obs: Any  # [N, *obs_shape] one fresh initial observation per env
    pool_state: Any  # env state pytree [N, ...] matching pool_obs
    pool_fresh: jax.Array  # [N] bool, slot i not handed out since the last redraw
    key: jax.Array  # key for pool redraws and (stochastic envs) per-env step noise

    @property
    def pool_used(self) -> jax.Array:
        """[] int32, pool slots handed out since the last redraw."""
        return jnp.sum(~self.pool_fresh, axis=-1, dtype=jnp.int32)


class VecEnv:
    """`num_envs` copies of a gymnax-contract environment stepped as one batch.

    Works for any environment with gymnax's `step_env`/`reset_env`/`is_truncated` (ours and
    gymnax's). The key lives in the state, so `step` takes none. What the env returns is checked at
    trace time (static shapes, no runtime cost): observations of `observation_space(params).shape`
    (when the env defines one), scalar reward/terminated/truncated per env, and observations of one
    dtype from `reset_env` and `step_env`.

    Args:
      env: the environment (static).
      num_envs: batch size N (static).
    """

    def __init__(self, env, num_envs: int):
        if not is_int(num_envs) or num_envs < 1:
            raise ValueError(f"num_envs must be a positive integer, got {num_envs!r}.")
        # A gymnax wrapper (gymnax.wrappers.purerl.GymnaxWrapper) has reset/step of its own but
        # forwards every other attribute to the env it wraps: its reset_env/step_env are the inner
        # env's, and stepping them would train the unwrapped env, silently.
        proxied = [m for m in ("reset_env", "step_env") if not hasattr(type(env), m)]
        if proxied:
            raise TypeError(
                f"VecEnv steps an env through its own reset_env and step_env, which "
                f"{type(env).__name__} does not define ({' and '.join(proxied)} come from "
                f"attribute forwarding, e.g. a gymnax wrapper's from the env it wraps, so its own "
                f"reset/step would be skipped). Write the wrapper's effect into a subclass of the "
                f"env (its step_env/reset_env), or use fusedrl.envs.wrappers on the VecEnv."
            )
        _warn_own_step_or_reset(env)
        self.env = env
        self.num_envs = int(num_envs)

    def _reset_batch(self, key, params, size=None):
        keys = jax.random.split(key, self.num_envs if size is None else size)
        with _explain_tracer_errors(self.env, "reset_env"):
            out = jax.vmap(self.env.reset_env, in_axes=(0, None))(keys, params)
        obs, state = _two(self.env, out)
        check_observation(self.env, params, "reset_env", obs)
        _check_time_field(self.env, "reset_env", state)
        return obs, state

    def reset(self, key: jax.Array, params=None) -> tuple[Any, VecEnvState]:
        """Returns observations [N, *obs_shape] and the batched state."""
        params = check_params(self.env, params)
        k_env, k_pool, key = jax.random.split(key, 3)
        obs, env_state = self._reset_batch(k_env, params)
        pool_obs, pool_state = self._reset_batch(k_pool, params)
        fresh = jnp.ones(self.num_envs, bool)
        return obs, VecEnvState(env_state, pool_obs, pool_state, fresh, key)

    def predraw(self, key: jax.Array, params, num_steps: int) -> StepDraws:
        """Every random input of the next `num_steps` steps, drawn in one batch (see the module doc).

        Costs `num_steps * N` calls of `reset_env`, batched, and memory for as many initial
        states: `predraw_bytes` says how much.
        """
        params = check_params(self.env, params)
        t, n = int(num_steps), self.num_envs
        k_reset, k_step = jax.random.split(key)
        obs, state = self._reset_batch(k_reset, params, t * n)
        obs, state = jax.tree.map(lambda x: x.reshape((t, n) + x.shape[1:]), (obs, state))
        step_keys = None
        if not getattr(self.env, "deterministic_step", False):
            step_keys = jax.random.split(k_step, (t, n))
        return StepDraws(obs, state, step_keys)

    def predraw_bytes(self, params, num_steps: int) -> int:
        """Bytes of device memory `predraw(key, params, num_steps)` returns (computed abstractly)."""
        shapes = jax.eval_shape(lambda k: self.predraw(k, params, num_steps), jax.random.key(0))
        return sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(shapes))

    def reset_is_expensive(self, params) -> bool:
        """Whether one `reset_env` costs much more than one `step_env`: the env's own
        `expensive_reset` when it declares one (True or False), else XLA's estimate of the memory
        each accesses (one env, abstract params, no compile; once per env class), against
        `EXPENSIVE_RESET_RATIO` and `CHEAP_RESET_BYTES`."""
        declared = getattr(self.env, "expensive_reset", None)
        if declared is not None:
            return bool(declared)
        return _measured_expensive_reset(self.env, check_params(self.env, params))

    def rollout_draws(self, key: jax.Array, params, num_steps: int, *, max_bytes: int) -> StepDraws | None:
        """The draws a rollout of `num_steps` steps passes to `step` (`draws[t]` at step t), or None,
        in which case it steps without draws (each env resets from the reset pool).

        Predrawing makes `num_steps * N` resets for the at most as many that episodes end on: worth
        it when a reset costs about what a step does (classic control, MinAtar), where the step loop
        then draws no random numbers and takes no branch. It returns None when the predraw would
        take more than `max_bytes` of device memory, or when resets are expensive
        (`reset_is_expensive`: an env that generates a world per reset, such as Craftax, draws only
        the resets its episodes use).
        """
        params = check_params(self.env, params)
        if self.reset_is_expensive(params) or self.predraw_bytes(params, num_steps) > max_bytes:
            return None
        return self.predraw(key, params, num_steps)

    def step(self, state: VecEnvState, action: jax.Array, params=None, draws: StepDraws | None = None):
        """Steps all N envs with `action` [N, *action_shape]; resets those whose episode ended.

        With `draws` (one step's slice of `predraw`), finished envs restart from `draws` and
        stochastic envs step with its keys; the reset pool and the state's key are left untouched.

        Returns:
          obs [N, ...] (after any reset), new state, reward [N] float32, terminated [N] bool,
          truncated [N] bool, info dict with "final_observation" [N, ...] (before any reset) and
          the env's own per-step info, each with a leading N axis.
        """
        env, n = self.env, self.num_envs
        params = check_params(env, params)
        action = check_action(env.action_space(params), action, env.name, (n,))
        key = state.key
        if draws is not None:
            _check_draws(draws, state, n)
        with _explain_tracer_errors(env, "step_env"):  # Python if on a traced value, say
            if getattr(env, "deterministic_step", False):
                step_fn = jax.vmap(lambda s, a: env.step_env(None, s, a, params))
                try:
                    out = step_fn(state.env_state, action)
                except TypeError as e:  # "unexpected PRNG key type NoneType", naming neither env nor flag
                    if "PRNG key" in str(e):
                        e.add_note(f"{type(env).__name__}.deterministic_step is True, so its step_env is "
                                   f"called with key=None: if step_env uses its key, set deterministic_step "
                                   f"= False.")
                    raise
                obs_st, env_state, reward, terminated, info = _five(env, out)
            else:
                if draws is not None:
                    step_keys = draws.step_keys
                else:
                    key, k_step = jax.random.split(key)
                    step_keys = jax.random.split(k_step, n)
                step_fn = jax.vmap(env.step_env, in_axes=(0, 0, 0, None))
                obs_st, env_state, reward, terminated, info = _five(
                    env, step_fn(step_keys, state.env_state, action, params)
                )
        _check_state(env, state.env_state, env_state)
        truncated = jax.vmap(env.is_truncated, in_axes=(0, None))(env_state, params)
        _check_step_outputs(env, params, obs_st, reward, terminated, truncated, state.pool_obs)
        terminated = jnp.asarray(terminated, bool)
        # As in Gymnasium, both flags can be set on the same step; learners treat that as terminal.
        truncated = jnp.asarray(truncated, bool)
        done = terminated | truncated
        info = {**info, "final_observation": obs_st}

        if draws is not None:
            obs = tree_select(done, draws.reset_obs, obs_st)
            env_state = tree_select(done, draws.reset_state, env_state)
            new_state = state.replace(env_state=env_state)
            return obs, new_state, jnp.asarray(reward, jnp.float32), terminated, truncated, info

        # Env i restarts from pool slot i; if some finishing env's slot was already used, redraw
        # the pool first. Under vmap (seeds) the cond becomes a select: still correct, merely no
        # longer skipped.
        def redraw(args):
            key, _, _, _ = args
            key, k_pool = jax.random.split(key)
            pool_obs, pool_state = self._reset_batch(k_pool, params)
            return key, pool_obs, pool_state, jnp.ones(n, bool)

        key, pool_obs, pool_state, fresh = jax.lax.cond(
            jnp.any(done & ~state.pool_fresh),
            redraw,
            lambda args: args,
            (key, state.pool_obs, state.pool_state, state.pool_fresh),
        )
        obs = tree_select(done, pool_obs, obs_st)
        env_state = tree_select(done, pool_state, env_state)
        new_state = VecEnvState(env_state, pool_obs, pool_state, fresh & ~done, key)
        return obs, new_state, jnp.asarray(reward, jnp.float32), terminated, truncated, info


@contextlib.contextmanager
def _explain_tracer_errors(env, method: str):
    """Adds to jax's error for Python control flow on a traced value (`if action == 1:`) what runs
    traced and what to write instead."""
    try:
        yield
    except (jax.errors.ConcretizationTypeError,  # TracerBoolConversionError is one too
            jax.errors.TracerIntegerConversionError,  # a Python list indexed by a traced action
            jax.errors.TracerArrayConversionError) as e:  # np.clip(state.x, ...) and other NumPy calls
        e.add_note(
            f"{type(env).__name__}.{method} runs under jax.vmap and jax.jit: its key, state, action and "
            f"params are traced arrays without values, so Python if/while, and/or, bool(), int() and "
            f"float(), indexing a Python list and NumPy functions cannot read them. Use "
            f"jnp.where(cond, a, b) for values, jax.lax.cond or jax.lax.switch for branches, "
            f"jax.lax.fori_loop or jax.lax.while_loop for loops, a jnp.array to index and jnp for np."
        )
        raise


def _check_length(env, method: str, out, n: int, fields: str, advice: str) -> None:
    """`out` is a tuple (or list) of `n` values, or a ValueError names the method, what it returned
    and gymnax's `fields`."""
    if not isinstance(out, tuple | list) or len(out) != n:
        got = f"a {len(out)}-{type(out).__name__}" if isinstance(out, tuple | list) else type(out).__name__
        raise ValueError(f"{type(env).__name__}.{method} returned {got}, expected gymnax's {n}-tuple "
                         f"({fields}). {advice}")


def _five(env, out):
    """`step_env`'s output, checked to be gymnax's 5-tuple (obs, state, reward, terminated, info)."""
    _check_length(env, "step_env", out, 5, "obs, state, reward, terminated, info",
                  "Truncation is not returned by step_env: it comes from is_truncated(state, params), by "
                  "default state.time >= params.max_steps_in_episode (override is_truncated for another "
                  "rule).")
    info = out[4]
    taken = sorted(set(info) & set(RESERVED_INFO_KEYS)) if isinstance(info, dict) else []
    if taken:
        raise ValueError(
            f"{type(env).__name__}.step_env's info has {', '.join(map(repr, taken))}, which fusedrl's "
            f"vector env and wrappers set themselves (and would replace yours silently): rename "
            f"{'that key' if len(taken) == 1 else 'those keys'} in step_env's info."
        )
    return out


def _two(env, out):
    """`reset_env`'s output, checked to be gymnax's 2-tuple (obs, state)."""
    _check_length(env, "reset_env", out, 2, "obs, state",
                  "Keep anything else the episode needs in the state.")
    return out


def _check_time_field(env, method: str, state) -> None:
    """The default `is_truncated` reads `state.time`: a state without it failed inside gymnax with
    an AttributeError naming neither the method nor the fix."""
    if getattr(type(env), "is_truncated", None) is environment.Environment.is_truncated and not hasattr(
            state, "time"):
        raise TypeError(
            f"{type(env).__name__}.{method} returned a state ({type(state).__name__}) without a time "
            f"field, which the default is_truncated reads (state.time >= params.max_steps_in_episode). "
            f"Subclass fusedrl.envs.EnvState (its `time` counts the episode's steps: return time + 1 "
            f"from step_env), or override is_truncated."
        )


def _check_state(env, before, after) -> None:
    """`step_env` must return a state of the same structure, shapes and dtypes as it was given (a
    rollout carries it through `lax.scan`): name the field, not the scan's carry."""
    name = type(env).__name__
    if jax.tree.structure(before) != jax.tree.structure(after):
        raise TypeError(
            f"{name}.step_env returned a state of another structure than reset_env's: "
            f"{jax.tree.structure(after)} instead of {jax.tree.structure(before)}; return the same "
            f"state class, with every field set (state.replace(...))."
        )
    for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(before), jax.tree.leaves(after), strict=True):
        a_shape, b_shape = jnp.shape(a), jnp.shape(b)
        a_dtype, b_dtype = (x.dtype if hasattr(x, "dtype") else jnp.asarray(x).dtype for x in (a, b))
        if (a_shape, a_dtype) != (b_shape, b_dtype) and not (a_shape == b_shape and _promotes(a, b)):
            raise TypeError(
                f"{name}.step_env returned state{jax.tree_util.keystr(path)} of shape {b_shape[1:]} and "
                f"dtype {b_dtype} per env, but reset_env {a_shape[1:]} and {a_dtype}; return the same "
                f"shape and dtype from both (e.g. .astype(jnp.{a_dtype}))."
            )


def _weak(x) -> bool:
    return bool(getattr(x, "weak_type", False) or getattr(getattr(x, "aval", None), "weak_type", False))


def _promotes(a, b) -> bool:
    """A dtype change the rollout absorbs: one side weakly typed (a Python number, `x = 0` in
    reset_env, `1` in step_env) that promotes to the other's dtype, as the auto-reset's select and
    the scan's carry do (a reset_env that sets `x = 0` and a step_env that returns float32 `x + 1.0`
    train as the env means them to)."""
    aw, bw = _weak(a), _weak(b)
    if not (aw or bw):
        return False
    dtype = jnp.result_type(a, b)
    return (aw and dtype == b.dtype) or (bw and dtype == a.dtype)


#: The info keys the vector env and the episode-statistics wrapper set on every step.
RESERVED_INFO_KEYS = ("final_observation", "episode_done", "episode_return", "episode_length")


def _check_step_outputs(env, params, obs, reward, terminated, truncated, reset_obs):
    """Trace-time checks of one batched `step_env` (and `is_truncated`): wrong shapes from a custom
    env otherwise surface later as opaque scan-carry or broadcasting errors, or not at all."""
    check_observation(env, params, "step_env", obs)
    check_scalar_output(env, "step_env", "reward", reward)
    check_scalar_output(env, "step_env", "terminated", terminated)
    check_scalar_output(env, "is_truncated", "truncated", truncated)
    flags = (("step_env", "terminated", terminated), ("is_truncated", "truncated", truncated))
    for method, field, flag in flags:
        dtype = jnp.asarray(flag).dtype
        if jnp.issubdtype(dtype, jnp.inexact):  # read as bool below: any nonzero value would end the episode
            raise TypeError(
                f"{type(env).__name__}.{method} returned {field} of dtype {dtype}; it is a flag, read as "
                f"True wherever it is nonzero. Return a bool (a comparison such as x > limit, or "
                f"{field}.astype(bool) if it only ever holds 0.0 and 1.0)."
            )
    leaves, reset_leaves = jax.tree.leaves(obs), jax.tree.leaves(reset_obs)
    dtypes = [x.dtype for x in leaves]
    if len(leaves) == len(reset_leaves) and dtypes != [x.dtype for x in reset_leaves]:
        raise TypeError(
            f"{type(env).__name__}.step_env returned observation of dtype {_dtypes(dtypes)}, but reset_env "
            f"{_dtypes([x.dtype for x in reset_leaves])}; return the same dtype from both (e.g. "
            f".astype(jnp.float32) in get_obs)."
        )


def _dtypes(dtypes) -> str:
    return str(dtypes[0]) if len(dtypes) == 1 else str([str(d) for d in dtypes])


def _check_draws(draws, state: VecEnvState, num_envs: int):
    if not isinstance(draws, StepDraws):
        raise TypeError(
            f"draws must be one step of VecEnv.predraw (a StepDraws), got {type(draws).__name__}."
        )
    # Compare whole shapes, not only the leading axis: with T == N a whole predraw [T, N, ...]
    # would pass a leading-axis check and broadcast into [N, N, ...] states.
    keys_ok = draws.step_keys is None or jnp.shape(draws.step_keys) == (num_envs,)
    if not keys_ok or _leaf_shapes((draws.reset_obs, draws.reset_state)) != _leaf_shapes(
            (state.pool_obs, state.env_state)):
        raise ValueError(
            f"draws must be ONE step's slice of predraw (leaves [N={num_envs}, ...], shaped like the "
            f"state's), got reset_obs of shape {jnp.shape(draws.reset_obs)} for observations of "
            f"shape {jnp.shape(state.pool_obs)}; pass draws[t], or scan over the predraw result."
        )


def _leaf_shapes(tree) -> list[tuple[str, tuple[int, ...]]]:
    """(path, shape) of every leaf: compares two states without calling their classes' `__eq__`,
    which may return an array (navix's `Event`) or compare NumPy fields (MJX's `Data`)."""
    leaves = jax.tree_util.tree_leaves_with_path(tree)
    return [(jax.tree_util.keystr(path), jnp.shape(x)) for path, x in leaves]
