"""`check_env`: the conformance checks every env on our contract passes, for your own env too.

    from fusedrl.envs.checks import check_env
    check_env("brax:fast")                   # an id, or (env, params)
    check_env(MyEnv(), MyEnv().default_params, max_steps=8)

It runs a short vmapped rollout of random actions through `VecEnv` (the learners' stepper) under
`jit` and raises AssertionError naming the first property that fails: observations match the
observation space (every leaf of a Dict space), rewards and observations are finite, both episode
flags are booleans, an episode ends no later than its time limit and is then reported as
truncated (unless it terminated on that very step), every finished env restarts (its step counter
back to 0), and `info["final_observation"]` has the observation's structure. Random actions come
from the action space; when the observation has an `action_mask` entry, only allowed actions.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from fusedrl.envs._gymnax import spaces
from fusedrl.envs.base import MultiDiscrete
from fusedrl.envs.registry import make
from fusedrl.envs.vector import VecEnv


def random_action(key: jax.Array, space, obs: Any = None) -> jax.Array:
    """One random action of `space` for one env; with an `action_mask` in `obs`, an allowed one."""
    mask = obs.get("action_mask") if isinstance(obs, dict) else getattr(obs, "action_mask", None)
    if mask is not None and isinstance(space, spaces.Discrete):
        logits = jnp.where(jnp.asarray(mask, bool).reshape(-1), 0.0, -jnp.inf)
        return jax.random.categorical(key, logits).astype(space.dtype)
    if mask is not None and isinstance(space, MultiDiscrete):  # one flat mask over the components' choices
        flat, start, parts = jnp.asarray(mask, bool).reshape(-1), 0, []
        for k, n in zip(jax.random.split(key, len(space.nvec)), space.nvec, strict=True):
            parts.append(jax.random.categorical(k, jnp.where(flat[start:start + n], 0.0, -jnp.inf)))
            start += n
        return jnp.stack(parts).astype(space.dtype)
    return space.sample(key)


def _leaves(space, obs) -> list[tuple[str, Any, Any]]:
    """(path, space, value) for each leaf of a (Dict) space and its observation."""
    if isinstance(space, spaces.Dict):
        items = obs.items() if isinstance(obs, dict) else obs._asdict().items()
        got = dict(items)
        missing = sorted(set(space.spaces) - set(got))
        assert not missing, f"observation lacks {missing} of its Dict space"
        return [(f"[{k!r}]{p}", s, v) for k, sub in space.spaces.items() for p, s, v in _leaves(sub, got[k])]
    return [("", space, obs)]


def check_step_shapes(env, params) -> Any:
    """Traces (does not compile) one env's `reset_env` and `step_env` with a zero action: the
    observations of both have the observation space's shapes and one dtype per entry, and a stepped
    state has the structure, shapes and dtypes of a reset one (VecEnv selects between the two).
    Returns the abstract observation (shapes and dtypes), for further checks."""
    name = getattr(env, "name", type(env).__name__)
    key = jax.random.key(0)
    act_space = env.action_space(params)
    action = jax.eval_shape(act_space.sample, key)
    action = jnp.zeros(action.shape, action.dtype)
    obs, state = jax.eval_shape(env.reset_env, key, params)
    next_obs, next_state, reward, terminated, _ = jax.eval_shape(env.step_env, key, state, action, params)
    space = env.observation_space(params)
    for (path, leaf_space, a), (_, _, b) in zip(_leaves(space, obs), _leaves(space, next_obs), strict=True):
        assert a.shape == b.shape == tuple(leaf_space.shape), f"{name}: observation{path} shapes differ"
        assert a.dtype == b.dtype, f"{name}: observation{path} is {a.dtype} on reset, {b.dtype} on step"
    assert reward.shape == terminated.shape == (), f"{name}: reward and terminated must be scalars"
    assert jax.tree.structure(next_state) == jax.tree.structure(state), f"{name}: step changes the state tree"
    leaves = [[(x.shape, x.dtype) for x in jax.tree.leaves(s)] for s in (state, next_state)]
    assert leaves[0] == leaves[1], f"{name}: step changes a state leaf's shape or dtype"
    return obs


def check_env(env_or_id, params=None, *, num_envs: int = 4, max_steps: int = 6, num_steps: int | None = None,
              seed: int = 0) -> dict[str, Any]:
    """Checks an env on our contract; returns a few counts for the caller to look at.

    Args:
      env_or_id: an env id for `fusedrl.make`, or an env (then `params` are its params, default
        `env.default_params`).
      num_envs: envs stepped side by side.
      max_steps: the time limit (`max_steps_in_episode`) set for the check, so that truncation is
        reached within the rollout; envs whose params have no such field keep their own.
      num_steps: rollout length (default 3 * max_steps + 1).

    Returns:
      {"episodes_ended", "terminations", "truncations"} over the rollout.
    """
    if isinstance(env_or_id, str):
        env, params = make(env_or_id)
    else:
        env = env_or_id
        params = env.default_params if params is None else params
    limited = hasattr(params, "max_steps_in_episode")
    if limited:
        params = params.replace(max_steps_in_episode=max_steps)
    num_steps = 3 * max_steps + 1 if num_steps is None else num_steps
    vec = VecEnv(env, num_envs)
    obs_space, act_space = env.observation_space(params), env.action_space(params)

    def run(key):
        k_reset, k_act = jax.random.split(key)
        obs, state = vec.reset(k_reset, params)

        def step(carry, key):
            obs, state = carry
            keys = jax.random.split(key, num_envs)
            action = jax.vmap(random_action, in_axes=(0, None, 0))(keys, act_space, obs)
            nobs, nstate, reward, term, trunc, info = vec.step(state, action, params)
            time = getattr(nstate.env_state, "time", jnp.zeros(num_envs, jnp.int32))
            return (nobs, nstate), (obs, reward, term, trunc, info["final_observation"], time)

        _, out = jax.lax.scan(step, (obs, state), jax.random.split(k_act, num_steps))
        return obs, out

    first_obs, (obs, reward, term, trunc, final_obs, time) = jax.jit(run)(jax.random.key(seed))
    name = getattr(env, "name", type(env).__name__)

    for path, space, value in _leaves(obs_space, first_obs):
        want = tuple(space.shape)
        assert tuple(value.shape[1:]) == want, (
            f"{name}: reset observation{path} has shape {value.shape[1:]} per env, its space says {want}")
    for path, space, value in _leaves(obs_space, obs):
        assert tuple(value.shape[2:]) == tuple(space.shape), (
            f"{name}: step observation{path} has shape {value.shape[2:]}, its space says {space.shape}")
        v = np.asarray(value)
        if v.dtype.kind == "f":
            assert np.isfinite(v).all(), f"{name}: observation{path} has non-finite values"
        if isinstance(space, spaces.Box) and v.dtype != bool:
            low, high = np.broadcast_to(space.low, space.shape), np.broadcast_to(space.high, space.shape)
            assert ((v >= low) & (v <= high)).all(), f"{name}: observation{path} leaves its Box bounds"
    assert jax.tree.structure(final_obs) == jax.tree.structure(obs), (
        f"{name}: info['final_observation'] has another structure than the observation")
    reward, term, trunc, time = map(np.asarray, (reward, term, trunc, time))
    assert reward.shape == (num_steps, num_envs) and np.isfinite(reward).all(), f"{name}: rewards not finite"
    assert term.dtype == bool and trunc.dtype == bool, f"{name}: episode flags are not booleans"
    done = term | trunc
    if limited:
        # The step counter after each step: 0 on a finished env (it restarted), else it counts up; no
        # episode runs past the limit, and an env that reaches it is truncated (or terminated there).
        assert (time[done] == 0).all(), f"{name}: an env whose episode ended did not restart (time != 0)"
        assert (time <= max_steps).all(), f"{name}: an episode ran past max_steps_in_episode"
        length = np.zeros(num_envs, int)
        for t in range(num_steps):
            length += 1
            at_limit = length >= max_steps
            assert (done[t] | ~at_limit).all(), f"{name}: an episode reached its time limit without ending"
            length[done[t]] = 0
    return {"episodes_ended": int(done.sum()), "terminations": int(term.sum()),
            "truncations": int((trunc & ~term).sum())}
