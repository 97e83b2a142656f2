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
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from fusedrl.envs.base import check_action, check_params, tree_select


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
    gymnax's). The key lives in the state, so `step` takes none.

    Args:
      env: the environment (static).
      num_envs: batch size N (static).
    """

    def __init__(self, env, num_envs: int):
        if int(num_envs) < 1:
            raise ValueError(f"num_envs must be a positive integer, got {num_envs!r}.")
        self.env = env
        self.num_envs = int(num_envs)

    def _reset_batch(self, key, params):
        keys = jax.random.split(key, self.num_envs)
        return jax.vmap(self.env.reset_env, in_axes=(0, None))(keys, params)

    def reset(self, key: jax.Array, params=None) -> tuple[Any, VecEnvState]:
        """Returns observations [N, *obs_shape] and the batched state."""
        params = check_params(self.env, params)
        k_env, k_pool, key = jax.random.split(key, 3)
        obs, env_state = self._reset_batch(k_env, params)
        pool_obs, pool_state = self._reset_batch(k_pool, params)
        fresh = jnp.ones(self.num_envs, bool)
        return obs, VecEnvState(env_state, pool_obs, pool_state, fresh, key)

    def step(self, state: VecEnvState, action: jax.Array, params=None):
        """Steps all N envs with `action` [N, *action_shape]; resets those whose episode ended.

        Returns:
          obs [N, ...] (after any reset), new state, reward [N] float32, terminated [N] bool,
          truncated [N] bool, info dict with "final_observation" [N, ...] (before any reset) and
          the env's own per-step info, each with a leading N axis.
        """
        env, n = self.env, self.num_envs
        params = check_params(env, params)
        action = check_action(env.action_space(params), action, env.name, (n,))
        key = state.key
        if getattr(env, "deterministic_step", False):
            step_keys = None
            step_fn = jax.vmap(lambda s, a: env.step_env(None, s, a, params))
            obs_st, env_state, reward, terminated, info = step_fn(state.env_state, action)
        else:
            key, k_step = jax.random.split(key)
            step_keys = jax.random.split(k_step, n)
            step_fn = jax.vmap(env.step_env, in_axes=(0, 0, 0, None))
            obs_st, env_state, reward, terminated, info = step_fn(
                step_keys, state.env_state, action, params
            )
        truncated = jax.vmap(env.is_truncated, in_axes=(0, None))(env_state, params)
        terminated = jnp.asarray(terminated, bool)
        # As in Gymnasium, both flags can be set on the same step; learners treat that as terminal.
        truncated = jnp.asarray(truncated, bool)
        done = terminated | truncated

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
        info = {**info, "final_observation": obs_st}
        new_state = VecEnvState(env_state, pool_obs, pool_state, fresh & ~done, key)
        return obs, new_state, jnp.asarray(reward, jnp.float32), terminated, truncated, info
