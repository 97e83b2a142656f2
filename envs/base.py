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
from gymnax.environments import environment, spaces

EnvState = environment.EnvState
EnvParams = environment.EnvParams
Discrete = spaces.Discrete
Box = spaces.Box


class Environment(environment.Environment):
    """Base class of fusedrl's pure-JAX environments.

    Subclasses implement gymnax's `step_env`, `reset_env`, `get_obs`, `is_terminated`,
    `action_space`, `observation_space` and `default_params`, and set `deterministic_step = True`
    when `step_env` ignores its key (lets the vectorised stepper skip per-env key splitting).
    """

    deterministic_step: bool = False

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

    Args:
      space: the env's action space (gymnax `Discrete` or `Box`).
      action: the action, with leading `batch_shape` axes.
      env_name: named in the error message.
      batch_shape: leading axes expected before the space's own shape (e.g. `(num_envs,)`).
    """
    action = jnp.asarray(action)
    expected = tuple(batch_shape) + tuple(space.shape)
    if isinstance(space, spaces.Discrete):
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
    # A Python int/float is weakly typed; casting to the space's dtype keeps one compiled program.
    dtype = getattr(space, "dtype", None)
    return action if dtype is None else action.astype(dtype)


def space_info(space) -> dict[str, Any]:
    """A plain description of a gymnax space, for listings and error messages."""
    if isinstance(space, spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n)}
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
