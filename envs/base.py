"""The environment contract: gymnax 1.0's `Environment`, with checks at the boundary.

fusedrl environments subclass gymnax's base class rather than copying its interface, so gymnax's
own wrappers, and peer libraries written against gymnax, run ours unchanged:

    reset(key, params) -> (obs, state)
    step(key, state, action, params) -> (obs, state, reward, terminated, truncated, info)

`step` resets automatically when an episode ends; `info["final_observation"]` holds the observation
before that reset. `terminated` (a terminal state of the MDP) and `truncated` (a time limit) are
separate flags: a learner bootstraps from the final observation's value only when truncated.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from fusedrl.envs._gymnax import environment, spaces

EnvState = environment.EnvState
EnvParams = environment.EnvParams
Discrete = spaces.Discrete
Box = spaces.Box
Dict = spaces.Dict  # a dict observation of Boxes (an `action_mask` entry masks the policy)


class MultiDiscrete(spaces.Space):
    """A vector of independent discrete choices: action [len(nvec)] int32, component i in 0..nvec[i]-1.

    gymnax has no such space; this one follows gymnax's (`sample`, `contains`, `shape`, `dtype`)
    and Gymnasium's `MultiDiscrete(nvec)`. The learners' policy for it is a factorised categorical
    (`fusedrl.distributions.MultiCategorical`): one categorical per component.
    """

    def __init__(self, nvec, *, dtype=jnp.int32):
        values = np.asarray(nvec)
        if values.ndim != 1 or values.size == 0 or not np.issubdtype(values.dtype, np.integer) or (
                values < 1).any():
            raise ValueError(f"MultiDiscrete(nvec): nvec must be a non-empty 1-D sequence of ints >= 1 (the "
                             f"number of choices of each component), got {nvec!r}.")
        self.nvec = tuple(int(n) for n in values)
        self.shape = (len(self.nvec),)
        self.dtype = dtype

    def __repr__(self) -> str:
        return f"MultiDiscrete({list(self.nvec)})"

    def sample(self, key: jax.Array) -> jax.Array:
        return jax.random.randint(key, self.shape, 0, jnp.asarray(self.nvec, jnp.int32)).astype(self.dtype)

    def contains(self, x: jax.Array) -> jax.Array:
        x = jnp.asarray(x)
        return (x.shape == self.shape) & jnp.all((x >= 0) & (x < jnp.asarray(self.nvec)))


class Environment(environment.Environment):
    """Base class of fusedrl's pure-JAX environments.

    Subclasses implement gymnax's `step_env`, `reset_env`, `get_obs`, `is_terminated`,
    `action_space`, `observation_space` and `default_params`, and set `deterministic_step = True`
    when `step_env` ignores its key (lets the vectorised stepper skip per-env key splitting).

    The learners step envs through `fusedrl.envs.VecEnv`, which calls `step_env`, `is_truncated`
    and `reset_env` and resets finished envs itself: an env's own `step` and `reset` are never
    called. Overriding them is harmless when the override returns what gymnax's `step`/`reset`
    return (an auto-reset written by hand, as in envs derived from older gymnax); an override that
    changes the results (a reward scaled in `step`) would be skipped in training, so `VecEnv` warns
    about it (checked once per class on one step; see `fusedrl.envs.vector`).
    """

    deterministic_step: bool = False
    #: Whether one `reset_env` costs much more than one `step_env` (it generates a level, say). The
    #: rollout then resets finished envs as their episodes end instead of drawing an initial state
    #: for every (step, env) ahead (`VecEnv.rollout_draws`). None: measured from XLA's cost estimate.
    expensive_reset: bool | None = None

    def step(self, key, state, action, params=None):
        params = check_params(self, params)
        action = check_action(self.action_space(params), action, self.name)
        return super().step(key, state, action, params)

    def reset(self, key, params=None):
        return super().reset(key, check_params(self, params))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


def check_params(env, params):
    """Returns `params` (or the env's defaults for None) after checking its type."""
    default = env.default_params
    if params is None:
        return default
    if not isinstance(params, type(default)):
        raise TypeError(
            f"{env.name}: params must be a {type(default).__name__} (as returned by fusedrl.make or "
            f"env.default_params, changed with .replace(...)), got {type(params).__name__}."
        )
    return params


def check_action(space, action, env_name: str, batch_shape: tuple[int, ...] = ()):
    """Checks an action's shape and dtype against `space` at trace time; returns it as an array.

    A `Discrete(n)` action given as a host value (a Python int or NumPy array) must lie in
    0..n-1 (a `MultiDiscrete` one, each component in 0..nvec[i]-1); a traced or device array
    cannot be checked without a host round trip, so it is clipped
    to that range (as JAX clamps an out-of-range index), never used as an out-of-range force.

    Args:
      space: the env's action space (gymnax `Discrete` or `Box`, or `MultiDiscrete`).
      action: the action, with leading `batch_shape` axes.
      env_name: named in the error message.
      batch_shape: leading axes expected before the space's own shape (e.g. `(num_envs,)`).
    """
    host = isinstance(action, int | np.integer | np.ndarray | list | tuple)
    host_value = np.asarray(action) if host else None
    action = jnp.asarray(action)
    expected = tuple(batch_shape) + tuple(space.shape)
    if isinstance(space, spaces.Discrete | MultiDiscrete):
        if not jnp.issubdtype(action.dtype, jnp.integer):
            raise TypeError(
                f"{env_name}: a {space!r} action must be an integer array, got dtype {action.dtype}; "
                f"cast it with .astype(jnp.int32)."
            )
    elif isinstance(space, spaces.Box):
        if not jnp.issubdtype(action.dtype, jnp.floating):
            raise TypeError(
                f"{env_name}: a Box action must be a float array, got dtype {action.dtype}; "
                f"cast it with .astype(jnp.float32)."
            )
    if action.shape != expected:
        hint = " (one action per environment)" if batch_shape else ""
        raise ValueError(
            f"{env_name}: action has shape {action.shape}, expected {expected}{hint} for {space!r}."
        )
    if isinstance(space, spaces.Discrete):
        n = int(space.n)
        if host_value is not None and np.any((host_value < 0) | (host_value >= n)):
            raise ValueError(
                f"{env_name}: action {host_value.tolist()} is outside {space!r}: actions are the "
                f"integers 0..{n - 1}."
            )
        action = jnp.clip(action, 0, n - 1)
    elif isinstance(space, MultiDiscrete):
        high = np.asarray(space.nvec) - 1
        if host_value is not None and np.any((host_value < 0) | (host_value > high)):
            raise ValueError(
                f"{env_name}: action {host_value.tolist()} is outside {space!r}: component i is an "
                f"integer 0..nvec[i]-1."
            )
        bound = jnp.asarray(high, action.dtype).reshape((1,) * (action.ndim - 1) + (-1,))  # no rank promotion
        action = jnp.clip(action, 0, bound)
    # A Python int/float is weakly typed; casting to the space's dtype keeps one compiled program.
    dtype = getattr(space, "dtype", None)
    return action if dtype is None else action.astype(dtype)


def check_output_shape(env, method: str, field: str, value, expected, fix: str) -> None:
    """Checks at trace time (static shapes, no runtime cost) one output of a single env's `method`,
    batched by `jax.vmap`: `value` [B, *expected]. The error names the env class, the method, the
    field, the shape got and expected, and `fix`.
    """
    if not hasattr(value, "shape"):  # a pytree observation: nothing to compare with a space's shape
        return
    got, expected = tuple(value.shape[1:]), tuple(expected)
    if got != expected:
        raise ValueError(
            f"{type(env).__name__}.{method} returned {field} of shape {got} per env, expected {expected}; "
            f"{fix}."
        )


def check_observation(env, params, method: str, obs) -> None:
    """Checks a batch of observations [B, ...] from `method` against `observation_space(params)`.

    Only the shape: the dtype is cast to float32 by the networks, and gymnax's own envs disagree
    with their spaces' dtypes (Catch-bsuite: int32 space, float32 observations).
    """
    try:
        space = env.observation_space(params)
    except NotImplementedError:  # gymnax's default: VecEnv itself needs no spaces
        return
    if not hasattr(space, "shape"):  # e.g. a gymnax Dict space
        return
    fix = (
        f"return observations of observation_space(params).shape from reset_env and step_env, or make "
        f"observation_space(params) ({type(space).__name__}) describe them"
    )
    check_output_shape(env, method, "observation", obs, space.shape, fix)


def check_scalar_output(env, method: str, field: str, value) -> None:
    """Checks that `method` returned one scalar `field` per env (batched: [B])."""
    fix = f"return one scalar {field} per env (shape ()), e.g. {field}.squeeze() for shape (1,)"
    check_output_shape(env, method, field, jnp.asarray(value), (), fix)


def space_info(space) -> dict[str, Any]:
    """A plain description of a gymnax space, for listings and error messages."""
    if isinstance(space, spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n)}
    if isinstance(space, MultiDiscrete):
        return {"type": "MultiDiscrete", "nvec": list(space.nvec)}
    if isinstance(space, spaces.Box):
        return {
            "type": "Box",
            "shape": tuple(space.shape),
            "low": np.asarray(space.low).min().item(),
            "high": np.asarray(space.high).max().item(),
        }
    return {"type": type(space).__name__}


def tree_select(pred: jax.Array, on_true, on_false):
    """Per-env `where` over two pytrees whose leaves have a leading batch axis like `pred` [N]."""

    def sel(a, b):
        p = pred.reshape(pred.shape + (1,) * (a.ndim - pred.ndim))
        return jnp.where(p, a, b)

    return jax.tree.map(sel, on_true, on_false)
