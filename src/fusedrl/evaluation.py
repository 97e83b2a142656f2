"""Evaluation of a trained policy, on device: N episodes in parallel, greedy by default."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from fusedrl._numbers import is_int
from fusedrl.distributions import no_allowed_action
from fusedrl.envs.host import is_host_env_id
from fusedrl.envs.registry import on_register
from fusedrl.envs.wrappers import ACTION_MASK
from fusedrl.metrics import agent_return_name
from fusedrl.train.config import OnPolicyConfig
from fusedrl.train.ppo import make_train
from fusedrl.train.state import TrainResult
from fusedrl.train.trainer import ENV_FAULT, Trainer

#: The bound on each episode of a run's evaluation (`evaluate(max_steps=...)`) in `fusedrl.runs`
#: (`train_run`, `evaluate_run`) and in sweeps: an episode still running after it reports NaN
#: (counted in summary.json's "eval_unfinished_episodes"), instead of the evaluation never returning
#: (an env without a working time limit). Far above the time limits of our envs and gymnax's (at
#: most a few thousand steps).
EVAL_MAX_STEPS = 1_000_000


def evaluate(
    config: OnPolicyConfig,
    result: TrainResult,
    key: jax.Array,
    num_episodes: int = 64,
    *,
    greedy: bool = True,
    max_steps: int | None = None,
    trainer: Trainer | None = None,
    per_agent: bool = False,
) -> jax.Array | dict[str, jax.Array]:
    """Returns of `num_episodes` episodes of the trained policy, float32 [num_episodes].

    On a multi-agent env an episode's return is the team's: the episode's sum of the team reward
    (the mean over agents of their rewards). With `per_agent`, a dict instead, named as the training
    metrics are: {"episode_return": those team returns, "episode_return_<agent>": that agent's own
    return in the same episodes, for each agent}, every entry shaped as the returns (a single-agent
    env's: "episode_return" alone).

    Runs the episodes as `num_episodes` parallel envs until each has finished its first episode
    (a `lax.while_loop`, jittable). Observations are normalised with the run's final statistics,
    frozen; returns are raw (never reward-normalised). Actions are the policy's mode when `greedy`,
    else samples.

    The loop runs until every episode has ended, so it does not return if some episode never ends
    (an env without a working time limit, e.g. `max_steps_in_episode` never reached, and a policy
    that never reaches a terminal state). `max_steps` bounds it: after that many steps, episodes
    that have not ended report NaN, as on the host bridge (`fusedrl.bridge.evaluate`): a partial
    return is no episode's return, and `fusedrl.runs` counts the NaNs as unfinished episodes.

    A policy whose parameters are not all finite (a run that diverged) is not run: its returns are
    NaN, not the returns of whatever its NaN outputs happen to pick. A result whose env broke in
    training (`metrics["env_fault"]`, see `Trainer.check`) is refused with `EnvFaultError`, and so
    is an evaluation in which an `action_mask` row allows no action (ValueError naming it).

    `config` must be the one the result was trained with: its network (hidden sizes, activation:
    the parameters do not record the activation) and wrappers. The envs step with the result's own
    env params (`result.hparams.env_params`); a config whose `env_params` set another value is
    refused, with the way to evaluate under other params.

    `result` may come from `jax.vmap(train)` (a leading seed axis on every leaf): then the returns
    have shape [num_seeds, num_episodes], one row per seed, each with its own key. More leading
    axes (a `SweepResult.result`, leaves [seed, *axis sizes, ...]) give returns
    [*leading axes, num_episodes]: the runs flattened in C order, as one seed axis, and reshaped.

    The whole evaluation is one jitted program, compiled once per (config, num_episodes, greedy)
    and result shape, so an eager call costs one compile rather than one per operation.
    `max_steps` is an input of that program, not part of it: bounded and unbounded evaluations
    share it (`train_run` bounds its evaluation; `fusedrl.evaluate` does not by default).

    `trainer`: `config`'s trainer (`fusedrl.make_train(config)`), if the caller has one (a run
    does): the evaluation uses its env and network instead of building them again.
    """
    num_episodes, greedy, max_steps = check_evaluate_args(num_episodes, greedy, max_steps)
    if not isinstance(result, TrainResult):
        raise TypeError(f"result must be the TrainResult that training returned (or a vmapped one), "
                        f"got {type(result).__name__}; from a run folder, use fusedrl.load or "
                        f"fusedrl.runs.evaluate_run.")
    if is_host_env_id(config.env_id):
        raise TypeError(f"{config.env_id} is a Gymnasium env stepped on the host, and fusedrl.evaluate runs "
                        f"its episodes on the device. Evaluate with fusedrl.bridge.evaluate(config, result, "
                        f"key, num_episodes).")
    _check_env_params(config, result)
    # The program reads the parameters, the env state (normaliser statistics) and the hparams, not
    # the metrics: without them, one compiled program serves a result fresh from training and the
    # same result restored from its run folder (no metrics), or trained for another number of updates.
    # The bound is put on the device explicitly: a Python int would be an implicit transfer, which
    # `jax.transfer_guard("disallow")` refuses.
    fault = result.metrics.get(ENV_FAULT)
    if fault is not None and not isinstance(fault, jax.core.Tracer) and jax.device_get(fault).any():
        (trainer or make_train(config)).check(result)  # raises, naming the field and the update
    bound = jax.device_put(np.int32(-1 if max_steps is None else max_steps))
    if not isinstance(per_agent, bool):
        raise TypeError(f"per_agent must be True (a dict with each agent's returns too) or False (the "
                        f"returns), got {per_agent!r}.")
    program, agents = _evaluator(config, num_episodes, greedy, trainer)
    returns, rows, no_action = program(result.replace(metrics={}), key, bound)
    if not isinstance(no_action, jax.core.Tracer) and jax.device_get(no_action).any():
        raise ValueError(
            f"{config.env_id}: an observation's {ACTION_MASK} allowed no action during the evaluation "
            f"(the policy would take a masked one). Every observation's {ACTION_MASK} must allow at "
            f"least one action (of each component, for MultiDiscrete).")
    if not per_agent:
        return returns
    return {"episode_return": returns, **{agent_return_name(a): rows[..., i] for i, a in enumerate(agents)}}


def _check_env_params(config: OnPolicyConfig, result: TrainResult) -> None:
    """Refuses a config whose `env_params` set a value the result was not trained with: the envs
    step with the result's own params (`result.hparams.env_params`), so the config's would be
    ignored. Params that differ between the runs of a result (a sweep's axis) are not compared."""
    trained = result.hparams.env_params
    for name, want in config.env_params.items():
        got = getattr(trained, name, None)
        if got is None or isinstance(got, jax.core.Tracer):
            continue
        got = np.ravel(np.asarray(got))
        if got.size == 0 or not np.all(got == got[0]) or np.shape(want) != ():
            continue
        if not np.isclose(float(got[0]), float(want), rtol=1e-6, atol=0.0):  # float32-held values
            raise ValueError(
                f"config.env_params[{name!r}] is {want!r}, but the result was trained with {name}="
                f"{got[0].item()!r}, and evaluate steps the envs with the result's own env params "
                f"(result.hparams.env_params). Pass the config the result was trained with; to "
                f"evaluate under other env params, replace them in the result: result.replace("
                f"hparams=result.hparams.replace(env_params=result.hparams.env_params.replace("
                f"{name}=...)))."
            )


def check_evaluate_args(num_episodes, greedy, max_steps) -> tuple[int, bool, int | None]:
    """`evaluate`'s (num_episodes, greedy, max_steps) as plain Python values; a value of the wrong
    kind (num_episodes=2.7 gave 2 episodes, greedy="no" was greedy) is an error naming it."""
    if not is_int(num_episodes) or num_episodes < 1:
        raise ValueError(f"num_episodes must be an int >= 1, got {num_episodes!r}.")
    if not isinstance(greedy, bool):
        raise TypeError(f"greedy must be True (the policy's mode) or False (sampled actions), got "
                        f"{greedy!r}.")
    if max_steps is not None and (not is_int(max_steps) or max_steps < 1):
        raise ValueError(f"max_steps must be an int >= 1 (or None: until every episode ends), got "
                         f"{max_steps!r}.")
    return int(num_episodes), greedy, None if max_steps is None else int(max_steps)


#: `evaluate`'s programs (and the env's agents) of the latest (config, num_episodes, greedy).
_EVALUATORS: dict[tuple[OnPolicyConfig, int, bool], Any] = {}


def _evaluator(config: OnPolicyConfig, num_episodes: int, greedy: bool, trainer: Trainer | None = None):
    """(`evaluate`'s program, the agents of a multi-agent env: () for one agent). The program:
    (result, key, max_steps) -> (returns [..., E], each agent's [..., E, A], no_action).
    `max_steps` (an int32; < 0: no bound) is traced: one program serves every bound. `greedy` stays
    a constant: a program that could do both would compile the sampling into every greedy evaluation
    too. Built from `trainer`, or from `make_train(config)` when not given, once per (config,
    num_episodes, greedy)."""
    cache_key = (config, num_episodes, greedy)
    if cache_key not in _EVALUATORS:
        trainer = trainer or make_train(config)

        def run(result, key, max_steps):
            rows, no_action = _evaluate_any(trainer, result, key, num_episodes, greedy, max_steps)
            # A multi-agent env's episode return is the team's: the mean of its agents' own returns.
            return rows.mean(axis=-1), rows, no_action

        if len(_EVALUATORS) >= 16:
            _EVALUATORS.pop(next(iter(_EVALUATORS)))
        agents = () if trainer.team is None else tuple(trainer.team.agents)
        _EVALUATORS[cache_key] = (jax.jit(run), agents)
    _EVALUATORS[cache_key] = _EVALUATORS.pop(cache_key)  # the latest used last: the first to go is the oldest
    return _EVALUATORS[cache_key]


on_register(lambda env_id: _EVALUATORS.clear())  # a replaced env: rebuild the evaluator


def _evaluate_any(trainer: Trainer, result: TrainResult, key: jax.Array, num_episodes: int, greedy: bool,
                  max_steps=None):
    """`_evaluate` of one result, or of each seed's slice of a vmapped one: returns [..., E, A]."""
    single_state = jax.eval_shape(trainer.init, jax.random.key(0))
    seed_axes = _check_fits(trainer.config, result, single_state)  # 1: vmapped, one agent per seed
    if seed_axes > 1:  # a sweep's runs [seed, *axes]: evaluate them as one flat run axis
        lead = jax.tree.leaves(result.params)[0].shape[:seed_axes]
        flat = jax.tree.map(lambda x: x.reshape((-1,) + x.shape[seed_axes:]), result)
        out, no_action = _evaluate_any(trainer, flat, key, num_episodes, greedy, max_steps)
        return out.reshape(lead + out.shape[1:]), no_action
    if jax.tree.leaves(result.state.obs)[0].ndim == jax.tree.leaves(single_state.obs)[0].ndim + seed_axes + 1:
        # `data_parallel_train`'s result (per seed, if vmapped): one agent, per-shard envs whose
        # normaliser statistics are pooled over the shards, hence equal: any shard's will do.
        shard0 = jax.tree.map(lambda x: x[:, 0] if seed_axes else x[0], result.state.env_state)
        result = result.replace(state=result.state.replace(env_state=shard0))
    if seed_axes == 1:
        keys = jax.random.split(key, jax.tree.leaves(result.params)[0].shape[0])
        return jax.vmap(lambda r, k: _evaluate(trainer, r, k, num_episodes, greedy, max_steps))(result, keys)
    return _evaluate(trainer, result, key, num_episodes, greedy, max_steps)


def _check_fits(config: OnPolicyConfig, result: TrainResult, single_state) -> int:
    """Raises ValueError, naming what differs, unless `result` was trained with a config like
    `config` (one agent's shapes, or leading run axes on every parameter). Returns the number
    of leading run axes: 0 (one agent), 1 (seeds) or more (a sweep's [seed, *axes])."""
    fix = f"Pass evaluate the {type(config).__name__} the result was trained with."
    got, want = result.params, single_state.params
    if jax.tree.structure(got) != jax.tree.structure(want):
        raise ValueError(
            f"result does not fit config {config.env_id!r}: its parameters are another network's "
            f"(layers {_layers(got)}, this config's {_layers(want)}; hidden_sizes="
            f"{config.hidden_sizes}). {fix}"
        )
    seed_axes = set()
    for (path, g), w in zip(jax.tree_util.tree_leaves_with_path(got), jax.tree.leaves(want), strict=True):
        extra = g.ndim - w.ndim
        if extra < 0 or g.shape[extra:] != w.shape:
            raise ValueError(
                f"result does not fit config {config.env_id!r}: parameter "
                f"{jax.tree_util.keystr(path)} has shape {g.shape}, this config's network has "
                f"{w.shape} (or leading seed/run axes); hidden_sizes={config.hidden_sizes}. {fix}"
            )
        seed_axes.add(extra)
    if len(seed_axes) > 1:
        raise ValueError(f"result.params mix leaves with different numbers of leading seed/run axes. {fix}")
    (num_seed_axes,) = seed_axes
    if jax.tree.structure(result.state.env_state) != jax.tree.structure(single_state.env_state):
        raise ValueError(
            f"result does not fit config {config.env_id!r}: its env state has another wrapper stack "
            f"(normalize_obs={config.normalize_obs}, normalize_reward={config.normalize_reward} "
            f"here; one of them, or the env, differs from the training run's). {fix}"
        )
    return num_seed_axes


def _layers(params) -> list[str]:
    return sorted(params["params"]) if "params" in params else sorted(params)


def _evaluate(trainer: Trainer, result: TrainResult, key, num_episodes: int, greedy: bool, max_steps=None):
    """(each agent's returns [num_episodes, A] (A = 1 for a single-agent env), whether an action_mask
    row allowed no action in a running episode)."""
    venv, obs, env_state, key = eval_reset(trainer, result, key, num_episodes)
    returns, no_action = _episode_loop(trainer, result, venv, obs, env_state, key, greedy, max_steps)
    # A multi-agent env's episode is its agents' rows, env-major (row n * A + a: env n, agent a).
    return returns.reshape(num_episodes, trainer.num_agents), no_action


def eval_reset(trainer: Trainer, result: TrainResult, key, num_episodes: int):
    """The evaluation env stack of one (unvmapped) `result`, reset as `evaluate` resets it.

    Returns (venv, obs, env_state, key): the key left for `episode_returns`. A caller may read the
    start states from `env_state` (e.g. to run another controller from the same starts).
    """
    hparams = result.hparams
    stats = trainer.obs_stats(result.state, hparams)
    venv = trainer.make_env(hparams, num_envs=num_episodes, obs_stats=stats, evaluation=True)
    k_reset, key = jax.random.split(key)
    obs, env_state = venv.reset(k_reset, hparams.env_params)
    return venv, obs, env_state, key


def episode_returns(trainer: Trainer, result: TrainResult, venv, obs, env_state, key, greedy: bool,
                    max_steps=None):
    """Each env's first-episode return [venv.num_envs] of `result`'s policy, from the reset
    (`obs`, `env_state`) of `eval_reset`: the loop `evaluate` runs. With `max_steps`, at most that
    many steps; episodes that have not ended by then report NaN. `max_steps` may be an int or a
    traced int32 scalar (`evaluate`'s, for which < 0 means no bound)."""
    return _episode_loop(trainer, result, venv, obs, env_state, key, greedy, max_steps)[0]


def _episode_loop(trainer: Trainer, result: TrainResult, venv, obs, env_state, key, greedy: bool, max_steps):
    """`episode_returns`, and [] bool: whether an `action_mask` row allowed no action in an episode
    still running (where the policy, uniform over every action, may take a masked one)."""
    hparams, params, num_episodes = result.hparams, result.params, venv.num_envs
    zeros = jnp.zeros(num_episodes, jnp.float32)
    finished = jnp.zeros(num_episodes, bool)
    # A diverged policy (NaN or inf parameters) is not run: argmax of NaN logits is action 0, which
    # would give it plausible returns, and NaN actions could keep its episodes from ever ending.
    finite = jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(params)]))

    def cond(carry):
        going = ~jnp.all(carry[4]) & finite
        return going if max_steps is None else going & ((max_steps < 0) | (carry[5] < max_steps))

    def body(carry):
        env_state, obs, key, returns, finished, t, policy_state, no_action = carry
        if isinstance(obs, dict) and ACTION_MASK in obs:
            no_action |= jnp.any(no_allowed_action(obs[ACTION_MASK], trainer.nvec) & ~finished)
        key, k_act = jax.random.split(key)
        policy_state, pi, _ = trainer.policy_step(params, policy_state, obs)
        action = pi.mode() if greedy else pi.sample(k_act)
        obs, env_state, _, _, _, info = venv.step(env_state, action, hparams.env_params)
        first = info["episode_done"] & ~finished
        returns = jnp.where(first, info["episode_return"], returns)
        policy_state = trainer.reset_policy_state(policy_state, info["episode_done"])
        return env_state, obs, key, returns, finished | info["episode_done"], t + 1, policy_state, no_action

    start = (env_state, obs, key, zeros, finished, jnp.int32(0), trainer.initial_policy_state(num_episodes),
             jnp.zeros((), bool))
    carry = jax.lax.while_loop(cond, body, start)
    return jnp.where(carry[4], carry[3], jnp.nan), carry[7]  # a diverged policy's episodes never started
