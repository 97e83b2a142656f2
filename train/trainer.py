"""The one training skeleton every on-policy algorithm runs on.

One update is

    rollout (train/rollout.py) -> [T, N] Transitions -> targets (the algorithm's: e.g. GAE)
      -> flat Batch -> epochs of minibatch optimiser steps on the algorithm's loss (train/update.py)

and a run is a `lax.scan` of updates. An algorithm is an `Algorithm`: a few pure parts (targets,
loss, optimiser) that `Trainer` composes; nothing else of the loop is per algorithm. docs/design.md
draws the data flow.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from fusedrl._numbers import is_int
from fusedrl._warnings import warn_user
from fusedrl.distributions import Categorical, DiagGaussian, MultiCategorical, no_allowed_action
from fusedrl.envs import Box, Discrete, MultiDiscrete, VecEnv, make, space_info
from fusedrl.envs import wrappers as W
from fusedrl.envs.multiagent import AgentsAsRows, is_multi_agent
from fusedrl.metrics import (  # re-exported
    EPISODE_METRICS,
    METRIC_NAMES,
    agent_return_name,
    episode_values,
    has_episode,
)
from fusedrl.networks import RecurrentActorCritic, build_network, compute_params, is_image
from fusedrl.platform import choices_platform
from fusedrl.train import multiagent as MA
from fusedrl.train.config import Hyperparams
from fusedrl.train.losses import Batch, LossStats, explained_variance
from fusedrl.train.optimizers import adam, linear_anneal  # re-exported
from fusedrl.train.phases import scope
from fusedrl.train.rollout import Transition, batched_values, rollout
from fusedrl.train.state import RunnerState, TrainResult, typed_key  # typed_key re-exported
from fusedrl.train.tuning import Tuning, resolve_tuning
from fusedrl.train.update import minibatch_epochs

#: The per-update metric that says whether the env broke in that update (0: it did not); a bit per
#: field of `Trainer.fault_fields`. Not in `METRIC_NAMES` (not logged): `Trainer.check` reads it.
ENV_FAULT = "env_fault"


class EnvFaultError(RuntimeError):
    """The env returned non-finite observations or rewards, or an action mask that allows no action."""


class Algorithm(NamedTuple):
    """The parts that make an on-policy algorithm; `Trainer` supplies everything else.

    targets: `targets(traj, v_next, hparams) -> (advantage, target)`, each [T, N], from the [T, N]
      rollout `traj` and V of its next observations `v_next` [T, N] (before any auto-reset); or
      `(advantage, target, weight)`, with each transition's weight in the loss [T, N] (`Batch.weight`).
    loss: `loss(config, apply_fn, hparams, normalize_adv[, axis_name=...]) -> loss_fn`, where
      `loss_fn(params, batch=Batch) -> (scalar loss, LossStats)`. `axis_name` is passed only under data
      parallelism (the trainer's): a loss whose means are weighted (`Batch.weight`) takes them over all
      shards (`fusedrl.train.losses.weighted_mean`); plain means need nothing (equal-size shards).
    optimizer: `optimizer(config, hparams) -> optax.GradientTransformation`.
    learning_rate: `learning_rate(config, hparams, update) -> lr` in effect at the start of update
      `update` (0-based), as the optimiser applies it (reported in the metrics).
    epochs, minibatches: `epochs(config)`, `minibatches(config)`: the update's loop sizes.
    normalize_adv: `normalize_adv(config) -> bool`: whether the trainer standardises advantages per
      minibatch (default: never).
    target_kl: `target_kl(config) -> float | None`: the early-stopping KL of the update's minibatch
      steps (`fusedrl.train.update.minibatch_epochs`; default None: no early stop).
    bootstraps: whether `targets` reads `v_next`; False (Monte-Carlo targets) passes None instead,
      and the values of the next observations are not computed.
    """

    targets: Callable[[Transition, jax.Array, Hyperparams], tuple[jax.Array, jax.Array]]
    loss: Callable[..., Callable[..., tuple[jax.Array, LossStats]]]
    optimizer: Callable[[Any, Hyperparams], optax.GradientTransformation]
    learning_rate: Callable[[Any, Hyperparams, jax.Array], jax.Array]
    epochs: Callable[[Any], int]
    minibatches: Callable[[Any], int]
    normalize_adv: Callable[[Any], bool] = lambda config: False
    target_kl: Callable[[Any], float | None] = lambda config: None
    bootstraps: bool = True


class Trainer:
    """The train function `make_train` returns: `train(key, hparams=None) -> TrainResult`.

    Also exposes the pieces for resuming and inspection: `init(key, hparams)` builds a
    `RunnerState`; `run(state, hparams, num_updates)` continues training from one; `update_step`
    is one update; `make_env` the wrapped vectorised env.

    Args:
      config: a validated algorithm config (e.g. `PPOConfig`).
      algorithm: its parts (`Algorithm`).
      callback: optional host function `callback(metrics: dict[str, np.ndarray])`, called every
        `callback_every` updates from inside the jitted run via `jax.debug.callback`. Under vmap
        it is called once per run, in no guaranteed order: pass `callback_extra={"seed": ...}` at
        the vmap site to tell the runs apart. Off by default: no host transfer.
      callback_every: updates between callbacks.
      axis_name: data parallelism (`fusedrl.data_parallel_train`): the name of a mapped axis
        (`shard_map`/`vmap`) over which shards of one agent run. Each shard steps its own envs with
        its own randomness; gradients and advantage-normalisation statistics are averaged over the
        axis (`lax.pmean`), and the observation and reward normalisers pool the shards' samples, so
        parameters and normaliser statistics stay identical on every shard. None: a plain agent.
      tuning: the speed choices (`fusedrl.train.tuning.Tuning`); default: `resolve_tuning` for the
        platform (`fusedrl.platform.choices_platform`) and this config's sizes.
      normalize_adv: standardise advantages per minibatch; default: the algorithm's
        (`Algorithm.normalize_adv` of the config). `fusedrl.data_parallel_train` sets it for a shard whose own
        minibatch is one transition, normalised with the statistics of all shards' minibatches.
      env: the (env, env_params) that `fusedrl.make(config.env_id, **config.env_params)` gave, if
        the caller has built it already (a run builds its env once); default: built here.
    """

    def __init__(self, config, algorithm: Algorithm, *,
                 callback: Callable[[dict[str, Any]], None] | None = None, callback_every: int = 1,
                 axis_name: str | None = None, tuning: Tuning | None = None,
                 normalize_adv: bool | None = None, env: tuple[Any, Any] | None = None):
        check_callback(callback, callback_every)
        if tuning is not None and not isinstance(tuning, Tuning):
            raise TypeError(f"tuning must be a fusedrl.train.tuning.Tuning (or None), got "
                            f"{type(tuning).__name__}.")
        self.config = config
        self.algorithm = algorithm
        self.callback = callback
        self.callback_every = int(callback_every)
        self.axis_name = axis_name
        if normalize_adv is None:
            normalize_adv = algorithm.normalize_adv(config)
        self.normalize_adv = normalize_adv
        self.env, self.env_params = make(config.env_id, **config.env_params) if env is None else env
        # A multi-agent env (JaxMARL's contract) is stepped as a TeamEnv whose agents are rows of the
        # batch (`make_env`): everything below sees one agent's row (fusedrl.train.multiagent).
        self.team = MA.team_env(config, self.env) if is_multi_agent(self.env) else None
        MA.check_config(config, self.team)
        self.num_agents = 1 if self.team is None else self.team.num_agents
        if self.team is not None:
            self.env = self.team
        act_space = self.env.action_space(self.env_params) if self.team is None else self.env.row_action_space
        self.nvec = None  # MultiDiscrete actions: each component's number of choices
        if isinstance(act_space, Discrete) and tuple(act_space.shape) == ():
            self.discrete, self.action_dim = True, int(act_space.n)
        elif isinstance(act_space, MultiDiscrete):
            self.discrete, self.nvec, self.action_dim = True, act_space.nvec, int(sum(act_space.nvec))
        elif isinstance(act_space, Box) and len(act_space.shape) == 1:
            self.discrete, self.action_dim = False, int(act_space.shape[0])
            _warn_bounds_exclude_zero(config.env_id, act_space)
        else:
            raise ValueError(
                f"{config.env_id}: the action space {act_space!r} ({space_info(act_space)}) is not "
                f"supported. "
                f"The learners take Discrete(n) (one action per step), fusedrl.envs.MultiDiscrete(nvec) (a "
                f"vector of discrete choices) and 1-D Box actions; not Tuple or Dict actions, nor an agent "
                f"axis (one action per agent: flatten the agents' choices into a MultiDiscrete, or wrap "
                f"the env so one policy acts for one agent).")
        # Dict (or NamedTuple) observations, and image observations for network="cnn", go to the
        # built-in networks as a dict of arrays (`StructuredObservation`); a single Box observation
        # otherwise as one flat float32 array (`FlattenObservation`).
        self.cnn = config.network == "cnn"
        obs_leaves, bare = _observation_leaves(self.env, self.env_params, self.cnn, self.team)
        self.structured = self.cnn or not bare
        if self.cnn:
            _check_images(config.env_id, obs_leaves)
        if tuning is None:
            tuning = resolve_tuning(choices_platform(), num_envs=config.num_envs,
                                    batch_size=config.num_envs * config.num_steps)
        self.tuning = tuning
        obs_shape = tuple(getattr(self.env.observation_space(self.env_params), "shape", None) or ())
        batch = min(config.num_envs, 2)
        if self.structured:
            example = {name: jax.ShapeDtypeStruct((batch,) + x.shape, x.dtype) for name, x in obs_leaves}
            example = jax.eval_shape(lambda o: W.structure_observation(o, batch, self.cnn), example)
        else:
            flat = (batch, int(np.prod(obs_shape, dtype=np.int64)))  # FlattenObservation's
            example = jax.ShapeDtypeStruct(flat, jnp.float32)
        build = functools.partial(build_network, config, action_dim=self.action_dim, discrete=self.discrete,
                                  nvec=self.nvec)
        self.network = build(obs_shape=obs_shape, obs_example=example)
        if self.team is not None:
            self.network = MA.wrap_network(config, self.network, self.team, example, build)
        self.recurrent = isinstance(self.network, RecurrentActorCritic)
        # What `env_fault` flags, bit i for field i: reward, an all-false action_mask row, then each
        # floating observation entry ("observation" for a flat one), in the order of the leaves.
        entries = [W.ACTION_MASK] if isinstance(example, dict) and W.ACTION_MASK in example else []
        self.fault_fields = ("reward", *entries, *(
            "observation" if not path else jax.tree_util.keystr(path, simple=True, separator=".")
            for path, x in jax.tree_util.tree_leaves_with_path(example)
            if jnp.issubdtype(x.dtype, jnp.floating)))

    # ----------------------------------------------------------------------------------- pieces
    def default_hparams(self) -> Hyperparams:
        return self.config.hparams(self.env_params)

    def make_env(self, hparams: Hyperparams, *, num_envs: int | None = None, obs_stats=None,
                 evaluation: bool = False):
        """The wrapped vectorised env (built per call: reward normalisation uses traced gamma).

        With `evaluation` (or `obs_stats`, a `RunningMeanStd`) it is the evaluation stack instead:
        observations are normalised with the frozen `obs_stats` and rewards are left alone.
        """
        c = self.config
        training = obs_stats is None and not evaluation
        venv = VecEnv(self.env, num_envs or c.num_envs)
        venv = W.EpisodeStatistics(venv if self.team is None else AgentsAsRows(venv))
        if self.structured:
            venv = W.StructuredObservation(venv, keep_images=self.cnn)
        else:
            venv = W.FlattenObservation(venv)
        if not self.discrete:
            venv = W.ClipAction(venv)
        if c.normalize_reward and training:
            venv = W.NormalizeReward(venv, gamma=hparams.gamma, axis_name=self.axis_name)
        if c.normalize_obs:
            axis_name = self.axis_name if training else None
            venv = W.NormalizeObservation(venv, update=training, stats=obs_stats, axis_name=axis_name)
        return venv

    def obs_stats(self, state: RunnerState, hparams: Hyperparams | None = None):
        """The observation normaliser's statistics in `state` (None without normalize_obs)."""
        if not self.config.normalize_obs:
            return None
        # `hparams` only shapes the wrapper stack here: a vmapped result's (leaves [num_seeds]) fits
        # its vmapped state, so it is not held to one run's shapes as train/init/run hold it.
        hparams = self.check_hparams(hparams, shapes=False)
        venv = self.make_env(hparams)
        return W.find_wrapper_state(venv, state.env_state, W.NormalizeObservation).obs_stats

    def make_optimizer(self, hparams: Hyperparams) -> optax.GradientTransformation:
        return self.algorithm.optimizer(self.config, hparams)

    def learning_rate(self, hparams: Hyperparams, update: jax.Array) -> jax.Array:
        """The learning rate in effect at the start of update `update` (0-based)."""
        return self.algorithm.learning_rate(self.config, hparams, update)

    def check_hparams(self, hparams, *, shapes: bool = True) -> Hyperparams:
        """`hparams`, or the config's defaults for None; refuses another type (and, with `shapes`,
        leaves not shaped for one run)."""
        if hparams is None:
            return self.default_hparams()
        if not isinstance(hparams, Hyperparams):
            raise TypeError(
                f"hparams must be a fusedrl Hyperparams (config.hparams() or train.default_hparams()), "
                f"got {type(hparams).__name__}."
            )
        if shapes:
            _check_hparams_shapes(hparams, self.default_hparams())
        return hparams

    def noise(self, key: jax.Array, num_steps: int) -> jax.Array:
        """The rollout's action-sampling noise for `num_steps` steps of the configured envs."""
        dist = (Categorical if self.nvec is None else MultiCategorical) if self.discrete else DiagGaussian
        return dist.noise(key, (num_steps, self.config.num_envs * self.num_agents, self.action_dim))

    # ------------------------------------------------------------------------------------ init
    def init(self, key: jax.Array, hparams: Hyperparams | None = None) -> RunnerState:
        hparams = self.check_hparams(hparams)
        k_env, k_net, key = jax.random.split(typed_key(key), 3)
        if self.axis_name is not None:  # data parallel: shard-specific envs and actions, shared params
            shard = jax.lax.axis_index(self.axis_name)
            k_env, key = jax.random.fold_in(k_env, shard), jax.random.fold_in(key, shard)
        venv = self.make_env(hparams)
        obs, env_state = venv.reset(k_env, hparams.env_params)
        policy_state = self.initial_policy_state(jax.tree.leaves(obs)[0].shape[0])
        first = jax.tree.map(lambda x: x[:1], obs)
        if self.recurrent:
            params = self.network.init(k_net, jax.tree.map(lambda x: x[:1], policy_state), first)
        else:
            params = self.network.init(k_net, first)
        opt_state = self.make_optimizer(hparams).init(params)
        zero = jnp.zeros((), jnp.float32)
        agent_return = None if self.team is None else jnp.zeros((self.num_agents,), jnp.float32)
        return RunnerState(params, opt_state, env_state, obs, key, jnp.int32(0), zero, zero, policy_state,
                           agent_return)

    # ---------------------------------------------------------------------------------- policy
    def initial_policy_state(self, num_envs: int):
        """What the policy carries between steps at the start of an episode, for `num_envs` envs:
        a recurrent network's zero carry ([num_envs, H] leaves); None for a feed-forward network."""
        return self.network.initial_carry(num_envs) if self.recurrent else None

    def policy_step(self, params, policy_state, obs: jax.Array):
        """One policy call on obs [N, ...]: (policy_state after it, pi, value [N])."""
        if self.recurrent:
            policy_state, (pi, value) = self.network.apply(params, policy_state, obs)
            return policy_state, pi, value
        pi, value = self.network.apply(params, obs)
        return policy_state, pi, value

    def reset_policy_state(self, policy_state, done: jax.Array):
        """`policy_state` with the envs where `done` [N] back at the start of an episode."""
        if not self.recurrent:
            return policy_state
        start = self.initial_policy_state(done.shape[0])
        return jax.tree.map(lambda s, x: jnp.where(done[:, None], s, x), start, policy_state)

    def replay(self, params, policy_state, obs: jax.Array, done: jax.Array):
        """A recurrent policy over a [T, N] sequence from `policy_state` (its carry before step 0),
        reset after each step where `done`, as the rollout ran it. Returns (pi over [T, N], value
        [T, N], the carry after each step before any reset, leaves [T, N, H])."""

        def step(carry, xs):
            o, d = xs
            carry, (pi, value) = self.network.apply(params, carry, o)
            return self.reset_policy_state(carry, d), (pi, value, carry)

        _, (pi, value, after) = jax.lax.scan(step, policy_state, (obs, done))
        return pi, value, after

    # ---------------------------------------------------------------------------------- update
    def rollout(self, state: RunnerState, hparams: Hyperparams, venv, key: jax.Array, *,
                keep_next_obs: bool = False):
        """`num_steps` steps of the fused envs with the current policy: (state, [T, N] Transitions).
        Each step's next observation is checked for NaN and inf there; with
        `tuning.value_in_rollout` it is valued there too (when the algorithm bootstraps), else kept
        (`next_obs`) for the targets to value; `keep_next_obs` keeps it in any case. A network that
        computes in bfloat16 gets its layers' parameters cast once, before the step loop
        (`compute_params`: the same outputs)."""
        in_rollout = self.algorithm.bootstraps and self.tuning.value_in_rollout
        keep_next_obs = keep_next_obs or (self.algorithm.bootstraps and not in_rollout)
        env_state, obs, policy_state, traj = rollout(
            self.policy_step, compute_params(state.params, self.config.compute_dtype), venv, state.env_state,
            state.obs, state.policy_state,
            hparams.env_params, key, num_steps=self.config.num_steps, noise=self.noise, tuning=self.tuning,
            reset_policy_state=self.reset_policy_state,
            next_value=self.value_after_step if in_rollout else None,
            keep_next_obs=keep_next_obs,
        )
        return state.replace(env_state=env_state, obs=obs, policy_state=policy_state), traj

    def value_after_step(self, params, policy_state, obs: jax.Array) -> jax.Array:
        """V [N] of the observations obs [N, ...] that followed a step, before any auto-reset, from
        `policy_state`, the policy's state after that step (a recurrent policy's carry; None)."""
        if self.recurrent:
            return self.network.apply(params, policy_state, obs)[1][1]
        return self.network.apply(params, obs)[1]

    def values(self, params, obs: jax.Array) -> jax.Array:
        """V of [T, N, ...] observations, [T, N]."""
        return batched_values(self.network.apply, params, obs)

    def next_values(self, params, traj: Transition, policy_state=None) -> jax.Array:
        """V of each step's next observation (before any auto-reset), [T, N]: the rollout's
        `next_value`, or for a rollout that gives `next_obs` instead (the host bridge's) V of those.
        A recurrent policy values it from its carry after that step (`policy_state`: the carry
        before the rollout)."""
        if traj.next_value is not None:
            return traj.next_value
        if not self.recurrent:
            return self.values(params, traj.next_obs)
        _, _, after = self.replay(params, policy_state, traj.obs, traj.done)
        flat = jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), after)
        next_obs = jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), traj.next_obs)
        _, (_, value) = self.network.apply(params, flat, next_obs)
        return value.reshape(traj.reward.shape)

    def advantages(self, params, traj: Transition, hparams: Hyperparams, policy_state=None):
        """The algorithm's (advantages, targets[, weights]), each [T, N], of a [T, N] rollout."""
        with scope("advantages"):
            if not self.config.bootstrap_truncation:  # a time limit ends the return as a terminal state does
                traj = traj._replace(terminated=traj.done)
            v_next = self.next_values(params, traj, policy_state) if self.algorithm.bootstraps else None
            return self.algorithm.targets(traj, v_next, hparams)

    def sequence_apply(self, params, obs):
        """The recurrent network on a minibatch of whole sequences, `obs` = (observations [B, T, ...],
        done [B, T], carry before step 0 [B, H]): (pi, value) over [B, T]. It replays each
        sequence as the rollout ran it, so the losses see the log-probabilities and values of the
        rollout's own policy states."""
        o, done, carry = obs
        o = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), o)
        pi, value, _ = self.replay(params, carry, o, jnp.swapaxes(done, 0, 1))
        # The scan stacked every leaf of the per-step pi along time: per-env leaves ([B, A] logits or
        # mean) are now [T, B, A] and go env-major; a state-independent log_std ([A]) is [T, A],
        # the same at every step.
        pi = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1) if x.ndim >= 3 else x[0], pi)
        return pi, jnp.swapaxes(value, 0, 1)

    def learn(self, params, opt_state, batch: Batch, hparams: Hyperparams, key: jax.Array):
        """The update's optimiser steps on a flat batch [B, ...]: (params, opt_state, loss statistics'
        means, steps taken); see `fusedrl.train.update.minibatch_epochs`."""
        c, algo = self.config, self.algorithm
        normalize_adv = self.normalize_adv
        across = self.axis_name if normalize_adv and self.axis_name is not None else None
        apply_fn = self.sequence_apply if self.recurrent else self.network.apply
        # `axis_name` only under data parallelism: an Algorithm whose loss predates it still runs alone.
        sharded = {} if self.axis_name is None else {"axis_name": self.axis_name}
        loss_fn = algo.loss(c, apply_fn, hparams, normalize_adv and across is None, **sharded)
        return minibatch_epochs(
            loss_fn, self.make_optimizer(hparams), params, opt_state, batch, key,
            epochs=algo.epochs(c), minibatches=algo.minibatches(c), target_kl=algo.target_kl(c),
            normalize_adv_across=across, axis_name=self.axis_name,
        )

    def update_step(self, state: RunnerState, hparams: Hyperparams, venv):
        """One update: a rollout of the fused envs, then `learn_from_rollout`."""
        key, k_roll = jax.random.split(state.key)
        start = state.policy_state
        state, traj = self.rollout(state.replace(key=key), hparams, venv, k_roll)
        return self.learn_from_rollout(state, traj, hparams, start)

    def learn_from_rollout(self, state: RunnerState, traj: Transition, hparams: Hyperparams,
                           policy_state=None):
        """Targets, the optimiser steps and this update's metrics from a [T, N] rollout, wherever it
        came from (the fused envs or the host bridge). `policy_state`: a recurrent policy's carry
        before the rollout's first step.

        Returns (state with new params/opt_state/key/update counter, metrics dict of scalars).
        """
        key, k_learn = jax.random.split(state.key)
        adv, targets, *weight = self.advantages(state.params, traj, hparams, policy_state)
        num_steps, num_envs = traj.reward.shape

        if self.recurrent:  # whole sequences, env-major [N, T, ...]: minibatches are sets of envs
            def flat(x):
                return jnp.swapaxes(x, 0, 1)

            obs = (jax.tree.map(flat, traj.obs), flat(traj.done), policy_state)
        else:  # transitions [T * N, ...]
            def flat(x):
                return x.reshape((num_steps * num_envs,) + x.shape[2:])

            obs = jax.tree.map(flat, traj.obs)
        batch = Batch(obs=obs, action=flat(traj.action), log_prob=flat(traj.log_prob),
                      value=flat(traj.value), advantage=flat(adv), target=flat(targets),
                      weight=flat(weight[0]) if weight else None)
        params, opt_state, stats, steps = self.learn(state.params, state.opt_state, batch, hparams, k_learn)
        # A rollout the env broke (`env_fault`) teaches nothing: its update keeps params and optimiser.
        fault = self.env_fault(traj)
        params, opt_state = jax.tree.map(lambda new, old: jnp.where(fault == 0, new, old),
                                         (params, opt_state), (state.params, state.opt_state))
        ret, length, n_done = _episode_statistics(traj, state.last_return, state.last_length)
        update = state.update + 1
        metrics = {
            "episode_return": ret,
            "episode_length": length,
            "episodes_completed": n_done // self.num_agents,  # a multi-agent env's episode is A rows'
            **stats._asdict(),
            "gradient_steps": steps,
            "explained_variance": explained_variance(batch.value, batch.target),
            "learning_rate": jnp.asarray(self.learning_rate(hparams, state.update), jnp.float32),
            "env_steps": update * (num_steps * num_envs // self.num_agents),
            ENV_FAULT: fault,
        }
        state = state.replace(params=params, opt_state=opt_state, key=key, update=update,
                              last_return=ret.astype(jnp.float32), last_length=length.astype(jnp.float32))
        if self.team is not None:  # each agent's own return too: episode_return_<agent>
            agent_return = MA.agent_returns(traj, self.num_agents, state.agent_return)
            metrics.update({agent_return_name(a): agent_return[i] for i, a in enumerate(self.team.agents)})
            state = state.replace(agent_return=agent_return)
        return state, metrics

    def env_fault(self, traj: Transition) -> jax.Array:
        """[] int32: bit i set when field i of `fault_fields` broke somewhere in the [T, N] rollout
        (a NaN or inf reward or observation entry, before or after an auto-reset; an `action_mask`
        row that allows no action). One reduction per field per update, on the device; under data
        parallelism the shards' flags are pooled, so every shard freezes the same updates."""
        def broken(x):
            return ~jnp.all(jnp.isfinite(x))

        flags = [broken(traj.reward)]
        if W.ACTION_MASK in self.fault_fields:
            flags.append(jnp.any(no_allowed_action(traj.obs[W.ACTION_MASK], self.nvec)))
        floating = [o for o in jax.tree.leaves(traj.obs) if jnp.issubdtype(o.dtype, jnp.floating)]
        # The observations after each step: as the rollout found them, or from a rollout's next_obs.
        after = traj.next_nonfinite
        after = [jnp.any(n) for n in after] if after is not None else [
            broken(n) for n in jax.tree.leaves(traj.next_obs) if jnp.issubdtype(n.dtype, jnp.floating)]
        flags += [broken(o) | n for o, n in zip(floating, after, strict=True)]
        if len(flags) > 31:  # one bit each, the last shared by the fields from the 31st on
            flags = flags[:30] + [jnp.any(jnp.stack(flags[30:]))]
        flags = jnp.stack(flags)
        flags = flags.astype(jnp.int32)
        if self.axis_name is not None:
            flags = jax.lax.pmax(flags, self.axis_name)
        return jnp.sum(flags << jnp.arange(flags.shape[0], dtype=jnp.int32), dtype=jnp.int32)

    def check(self, result, first_update: int = 0) -> None:
        """Raises `EnvFaultError` naming the env, the broken field and the first update where the env
        broke in `result` (a `TrainResult`, vmapped or not, or its metrics; `first_update`: the run's
        update before the first of these metrics). `jax.jit(train)(key)` cannot raise from inside
        the program: call `train.check(result)` on its result (the CLI, `fusedrl.train_run` and
        `fusedrl.evaluate` do). Updates where the env broke left the parameters unchanged."""
        check_env_fault(getattr(result, "metrics", result), self.config.env_id, self.fault_fields,
                        first_update, multi_discrete=self.nvec is not None)

    # ------------------------------------------------------------------------------------- run
    def run(self, state: RunnerState, hparams: Hyperparams | None = None, num_updates: int | None = None,
            first_update: int = 0, *, callback_extra: Mapping[str, Any] | None = None) -> TrainResult:
        """Continues training from `state` for `num_updates` updates (default: the config's).

        `first_update` (an int, possibly traced): the index of the first of them in the whole run,
        so that a run continued in pieces calls back on the same updates as one run would.
        `callback_extra`: arrays (possibly traced, e.g. a seed index mapped by `jax.vmap`) added to
        the metrics the callback receives, not to the result's.

        Updates past the config's `num_updates` (a state at its end, or a larger `num_updates`)
        run, but with `anneal_lr` their learning rate is 0 (the schedule ends at the budget), so
        they leave the parameters as they are: raise `total_timesteps` to train longer.
        """
        hparams = self.check_hparams(hparams)
        if num_updates is not None and (not is_int(num_updates) or num_updates < 0):
            raise ValueError(f"num_updates must be an int >= 0 (or None: the config's "
                             f"{self.config.num_updates}), got {num_updates!r}.")
        n = self.config.num_updates if num_updates is None else int(num_updates)
        venv = self.make_env(hparams)

        def body(state, i):
            state, metrics = self.update_step(state, hparams, venv)
            if self.callback is not None:
                # `i` comes from the scan's xs, so it is never batched by vmap and the cond stays a
                # real branch: the host is called every `callback_every` updates, not every update.
                jax.lax.cond(
                    (i + 1) % self.callback_every == 0,
                    lambda m: jax.debug.callback(self.callback, m),
                    lambda m: None,
                    {**metrics, **(callback_extra or {})},
                )
            return state, metrics

        index = jnp.asarray(first_update, jnp.int32) + jnp.arange(n, dtype=jnp.int32)
        state, metrics = jax.lax.scan(body, state, index)
        return TrainResult(state=state, metrics=metrics, hparams=hparams)

    def __call__(self, key: jax.Array, hparams: Hyperparams | None = None, *,
                 callback_extra: Mapping[str, Any] | None = None) -> TrainResult:
        hparams = self.check_hparams(hparams)
        return self.run(self.init(key, hparams), hparams, callback_extra=callback_extra)


def _episode_statistics(traj: Transition, last_return: jax.Array, last_length: jax.Array):
    """(mean return, mean length, count) of the episodes that completed during the rollout. When
    none did, the latest update's that had one (the count 0 says so), never NaN; before the first,
    0.0 with length 0, which no completed episode has."""
    n_done = traj.episode_done.sum()
    has = n_done > 0
    denom = jnp.maximum(n_done, 1).astype(jnp.float32)
    ret = jnp.where(has, jnp.sum(traj.episode_return * traj.episode_done) / denom, last_return)
    length = jnp.where(has, jnp.sum(traj.episode_length * traj.episode_done) / denom, last_length)
    return ret, length, n_done.astype(jnp.int32)


def check_env_fault(metrics: Mapping[str, Any], env_id: str, fields: tuple[str, ...], first_update: int = 0,
                    *, multi_discrete: bool = False) -> None:
    """`Trainer.check` on metrics whose `env_fault` are [..., U] (absent: nothing to check)."""
    code = metrics.get(ENV_FAULT) if isinstance(metrics, Mapping) else None
    if code is None:
        return
    code = np.asarray(jax.device_get(code))
    code = code.reshape(-1, code.shape[-1]) if code.ndim else code.reshape(1, 1)
    if not code.any():
        return
    u = int(np.argmax(code.any(axis=0)))  # the first update where some run's env broke
    runs = np.flatnonzero(code[:, u])
    bits = int(np.bitwise_or.reduce(code[runs, u]))
    what = []
    for i, name in enumerate(fields):
        if not bits >> min(i, 30) & 1:
            continue
        if name == "reward":
            what.append("a non-finite reward (NaN or inf)")
        elif name == W.ACTION_MASK:
            each = " of some component (MultiDiscrete)" if multi_discrete else ""
            what.append(f"an {W.ACTION_MASK} row that allows no action{each}: the policy would take a masked "
                        f"one; every observation's {W.ACTION_MASK} must allow at least one action")
        else:
            entry = "the observation" if name == "observation" else f"observation entry {name!r}"
            what.append(f"non-finite values (NaN or inf) in {entry}")
    where = f" (run(s) {', '.join(map(str, runs))} of {code.shape[0]})" if code.shape[0] > 1 else ""
    raise EnvFaultError(
        f"{env_id} returned {'; and '.join(what)}, in update {first_update + u + 1}{where}. Training stops "
        f"there: an update where the env broke leaves the parameters unchanged. Check the env's step and "
        f"reset, and its env_params (fusedrl.envs.checks.check_env runs the env alone).")


def check_callback(callback, callback_every) -> None:
    """Raises the error `make_train` raises for a `callback` that is not callable (or None) or a
    `callback_every` that is not an int >= 1."""
    if callback is not None and not callable(callback):
        raise TypeError(f"callback must be a function of the metrics dict (or None), got {callback!r}.")
    if not is_int(callback_every) or callback_every < 1:
        raise ValueError(f"callback_every must be an int >= 1, got {callback_every!r}.")


def _check_hparams_shapes(hparams: Hyperparams, default: Hyperparams) -> None:
    """Trace-time check (static shapes, no runtime cost) that every leaf of one run's `hparams` has
    the shape of the default's (a scalar for every hyperparameter). Under `jax.vmap` the leaves
    are seen per run, so a leading vmapped axis passes; an unbatched array of values does not, and
    would otherwise fail later as an opaque broadcasting error (or, for shape (1,), silently give
    metrics of shape [num_updates, 1])."""
    got = jax.tree_util.tree_leaves_with_path(hparams)
    want = jax.tree.leaves(default)
    if len(got) != len(want):
        raise TypeError(
            f"hparams has {len(got)} leaves, the defaults {len(want)}: build it from "
            f"config.hparams() (or train.default_hparams()) with .replace(...)."
        )
    for (path, g), w in zip(got, want, strict=True):
        if jnp.shape(g) != jnp.shape(w):
            name = jax.tree_util.keystr(path).lstrip(".")
            field = name.split(".")[-1]
            axes = "axes = jax.tree.map(lambda _: None, hparams)"
            axes += (f"; axes = axes.replace(env_params=axes.env_params.replace({field}=0))" if "." in name
                     else f".replace({field}=0)")
            raise ValueError(
                f"hparams.{name} has shape {jnp.shape(g)}, expected {jnp.shape(w)} for one run. To train "
                f"several values at once, vmap over them: jax.vmap(train, in_axes=(None, axes)) with "
                f"{axes} (in_axes=(0, axes) for a seed each too), or fusedrl.sweep(config, {field}=[...])."
            )


def _observation_leaves(env, params, cnn: bool, team=None):
    """(entries, bare) of one env's observation: entries (name, shape and dtype; a bare array is
    "obs") from tracing `reset` (nothing runs), and whether it is one array. (None, True) without
    `cnn` for an env whose observation space is a Box: the flat path, which needs no tracing.
    A multi-agent env's (`team`): one agent's row."""
    if team is not None:
        obs = jax.eval_shape(team.row_observation, jax.random.key(0))
        return W.observation_entries(obs), False
    try:
        space = env.observation_space(params)
    except NotImplementedError:  # gymnax's default: the observations' own shape is used
        space = None
    if not cnn and hasattr(space, "shape"):
        return None, True
    obs = jax.eval_shape(lambda k: env.reset(k, params)[0], jax.random.key(0))
    return W.observation_entries(obs), jax.tree_util.treedef_is_leaf(jax.tree.structure(obs))


def _check_images(env_id: str, leaves) -> None:
    """network="cnn" needs an image-like observation entry ([H, W, C] per env)."""
    if not any(is_image(x.shape) for name, x in leaves if name != W.ACTION_MASK):
        shapes = ", ".join(f"{name} {tuple(x.shape)}" for name, x in leaves)
        raise ValueError(
            f"network='cnn' needs an image-like observation ([H, W, C] per env: e.g. MinAtar's (10, 10, 4) "
            f"or pixels (130, 110, 3)), and {env_id}'s observation has none ({shapes}). Use network=None "
            f"(the MLP) for it, or return the image with its [H, W, C] shape.")


_WARNED_BOUNDS: set[tuple[str, str]] = set()


def _warn_bounds_exclude_zero(env_id: str, space) -> None:
    """Warns when a Box action space's bounds leave out 0 in some dimension. The Gaussian policy
    starts at mean 0 and its actions are clipped to the bounds (not rescaled to them), so there more
    than half of the early actions land on one bound, where the reward does not change with the
    action: such a dimension barely learns (its mean stays near 0, its greedy action on the bound)."""
    try:
        low = np.broadcast_to(np.asarray(space.low, np.float64), space.shape)
        high = np.broadcast_to(np.asarray(space.high, np.float64), space.shape)
    except (TypeError, jax.errors.ConcretizationTypeError):  # bounds traced from params: not known here
        return
    outside = [i for i in range(low.size) if not low[i] <= 0.0 <= high[i]]
    bounds = ", ".join(f"{i}: [{low[i]:g}, {high[i]:g}]" for i in outside)
    if outside and (env_id, bounds) not in _WARNED_BOUNDS:  # once per process: every trainer made warned
        _WARNED_BOUNDS.add((env_id, bounds))
        warn_user(
            f"{env_id}: the Box action space leaves out 0 in dimension(s) {bounds}. The Gaussian policy "
            f"starts at mean 0 and its actions are clipped to the bounds, not rescaled, so most early "
            f"actions land on a bound and the policy barely learns there. Declare "
            f"Box(-1.0, 1.0, shape) and map the action to your range in step_env "
            f"(low + (action + 1) / 2 * (high - low)).",
        )


__all__ = [
    "ENV_FAULT",
    "EPISODE_METRICS",
    "METRIC_NAMES",
    "Algorithm",
    "EnvFaultError",
    "RunnerState",
    "TrainResult",
    "Trainer",
    "adam",
    "check_callback",
    "check_env_fault",
    "episode_values",
    "has_episode",
    "linear_anneal",
    "typed_key",
]
