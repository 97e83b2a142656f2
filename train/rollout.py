"""The rollout: `num_steps` steps of the vectorised envs under the current policy.

One pure function, `rollout`, shared by every on-policy algorithm. It returns the batch of
transitions [T, N] that the algorithm's targets and loss consume (`Transition`).

The observation after each step, before any auto-reset (`info["final_observation"]`), is checked
where it is made (is it finite: the broken-env check), and kept (`next_obs`) for the targets to value
when the caller asks; or valued where it is made (`next_value`) and not kept, which saves storing
every observation twice (inside an episode it is the next step's `obs`) at the cost of a critic pass
per step (`Tuning.value_in_rollout`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from fusedrl.train.phases import scoped
from fusedrl.train.tuning import Tuning


class Transition(NamedTuple):
    """One rollout step of N envs; the rollout stacks these to [T, N, ...]."""

    obs: jax.Array  # [N, obs_dim] observation acted on (dict observations: {name: [N, ...]})
    action: jax.Array  # [N] or [N, act_dim]
    log_prob: jax.Array  # [N]
    value: jax.Array  # [N] V(obs)
    reward: jax.Array  # [N] (normalised if normalize_reward)
    terminated: jax.Array  # [N] bool
    done: jax.Array  # [N] bool, terminated | truncated
    # [N, obs_dim] observation after the step, before any auto-reset; None where the rollout did not
    # keep it (valued as it came: `next_value`; or not needed: an algorithm that does not bootstrap).
    next_obs: jax.Array | None
    episode_done: jax.Array  # [N] bool, an episode completed here (for statistics)
    episode_return: jax.Array  # [N] raw return of that episode, 0 elsewhere
    episode_length: jax.Array  # [N] its length, 0 elsewhere
    # [N] V of the observation after the step, before any auto-reset (a recurrent policy's from its
    # carry after the step); None where not computed (an algorithm that does not bootstrap, or a
    # rollout from elsewhere that gives `next_obs`).
    next_value: jax.Array | None = None
    # Per floating entry of the observation after the step (leaf order; a flat observation: one),
    # [N] bool: a NaN or inf in it. None where not computed (a rollout that gives `next_obs`).
    next_nonfinite: tuple[jax.Array, ...] | None = None


def nonfinite_rows(obs) -> tuple[jax.Array, ...]:
    """Per floating leaf of a batch of observations (leaves [N, ...]), [N] bool: the row has a NaN or
    inf in it."""
    return tuple(~jnp.all(jnp.isfinite(x.reshape(x.shape[0], -1)), axis=1)
                 for x in jax.tree.leaves(obs) if jnp.issubdtype(x.dtype, jnp.floating))


def batched_values(apply_fn: Callable, params, obs: jax.Array) -> jax.Array:
    """V of [T, N, ...] observations, [T, N], in one network call over them flattened to [T * N, ...]
    (the network takes a batch, and a user's may read its size from obs.shape[0])."""
    num_steps, num_envs = jax.tree.leaves(obs)[0].shape[:2]
    flat_obs = jax.tree.map(lambda x: x.reshape((num_steps * num_envs,) + x.shape[2:]), obs)
    return apply_fn(params, flat_obs)[1].reshape(num_steps, num_envs)


def rollout(policy_step: Callable, params, venv, env_state, obs: jax.Array, policy_state, env_params: Any,
            key: jax.Array, *, num_steps: int, noise: Callable, tuning: Tuning,
            reset_policy_state: Callable, next_value: Callable | None = None, keep_next_obs: bool = False):
    """Steps the envs `num_steps` times with the policy.

    `policy_step(params, policy_state, obs) -> (policy_state, pi, value)` is one policy call on a
    batch of observations; `policy_state` is what a recurrent policy carries between steps (None for
    a feed-forward one). After each env step, `reset_policy_state(policy_state, done)` sets the
    state of the envs whose episode ended back to its start, since those envs have auto-reset.

    `next_value(params, policy_state, obs) -> [N]` values the observation after each step (before
    any auto-reset) from the policy state after that step (`Transition.next_value`); None: not
    valued. `keep_next_obs` also keeps that observation (`Transition.next_obs`, for inspection).

    All of the rollout's randomness comes in a few large draws before the step loop: the action
    sampling noise (`noise(key, num_steps)`, from the policy distribution's `noise`) and, when the
    env finds it worth it, the envs' reset states and step keys (`venv.rollout_draws`). Inside the
    loop there are no random numbers and no branches (see `fusedrl.envs.vector`).

    Returns:
      (env_state, obs, policy_state, traj): after the last step, and the `Transition`s stacked to
      [T, N, ...].
    """

    policy_step, env_step = scoped("policy", policy_step), scoped("env", venv.step)
    value_next = None if next_value is None else scoped("advantages", next_value)

    def step(carry, xs):
        env_state, obs, policy_state = carry
        eps, draws = xs
        policy_state, pi, value = policy_step(params, policy_state, obs)
        action = scoped("policy", pi.sample_from_noise)(eps)
        next_obs, env_state, reward, terminated, truncated, info = env_step(
            env_state, action, env_params, draws)
        done = terminated | truncated
        final = info["final_observation"]
        t = Transition(
            obs=obs,
            action=action,
            log_prob=scoped("policy", pi.log_prob)(action),
            value=value,
            reward=reward,
            terminated=terminated,
            done=done,
            next_obs=final if keep_next_obs else None,
            episode_done=info["episode_done"],
            episode_return=info["episode_return"],
            episode_length=info["episode_length"],
            next_value=None if next_value is None else value_next(params, policy_state, final),
            next_nonfinite=nonfinite_rows(final),
        )
        return (env_state, next_obs, reset_policy_state(policy_state, done)), t

    k_noise, k_env = jax.random.split(key)
    draws = scoped("env", venv.rollout_draws)(k_env, env_params, num_steps,
                                              max_bytes=tuning.predraw_max_bytes)
    (env_state, obs, policy_state), traj = jax.lax.scan(
        step, (env_state, obs, policy_state), (scoped("policy", noise)(k_noise, num_steps), draws)
    )
    return env_state, obs, policy_state, traj


__all__ = ["Transition", "batched_values", "nonfinite_rows", "rollout"]
