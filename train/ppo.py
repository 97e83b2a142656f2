"""PPO as one pure function: `make_train(config)(key, hparams) -> TrainResult`.

The whole run is a `lax.scan` over updates; each update is a rollout (`lax.scan` over steps of
`num_envs` vectorised envs), GAE, and `update_epochs` passes of shuffled minibatch Adam steps
(`lax.scan` over epochs and minibatches). Discrete and continuous policies share this skeleton;
only the network's distribution head differs. Nothing leaves the device unless a callback is set.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct

from fusedrl._argtypes import is_int
from fusedrl.distributions import Categorical, DiagGaussian
from fusedrl.envs import Box, Discrete, VecEnv, make, space_info
from fusedrl.envs import wrappers as W
from fusedrl.networks import ActorCritic, build_network
from fusedrl.train.advantages import gae
from fusedrl.train.config import Hyperparams, PPOConfig
from fusedrl.train.losses import Batch, explained_variance, ppo_loss
from fusedrl.train.shuffle import permutations

METRIC_NAMES = (
    "episode_return",
    "episode_length",
    "episodes_completed",
    "policy_loss",
    "value_loss",
    "entropy",
    "approx_kl",
    "clip_fraction",
    "gradient_steps",
    "explained_variance",
    "learning_rate",
    "env_steps",
)


#: Metrics that are means over the episodes completed in an update (see `TrainResult`).
EPISODE_METRICS = ("episode_return", "episode_length")


def typed_key(key: jax.Array) -> jax.Array:
    """`key` as a typed PRNG key: a legacy uint32 key (`jax.random.PRNGKey`) is wrapped, with the
    same random streams, so every state holds typed keys (and checkpoints restore them)."""
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        return key
    return jax.random.wrap_key_data(key)


def has_episode(metrics: Mapping[str, Any]):
    """Whether each update's episode statistics (in metrics arrays, or one logged row) come from a
    completed episode: False before the first (where they are 0.0, with `episode_length` 0, which
    no completed episode has). True where `episode_length` is not recorded."""
    return np.asarray(metrics.get("episode_length", 1)) > 0


def episode_values(metrics: Mapping[str, Any], name: str) -> np.ndarray:
    """`metrics[name]` as float64, NaN where it is no episode's statistic (`has_episode` False);
    other metrics unchanged. For summaries and plots: `np.nanmax`, gaps in curves."""
    values = np.asarray(metrics[name], np.float64)
    if name in EPISODE_METRICS:
        values = np.where(has_episode(metrics), values, np.nan)
    return values


#: Largest rollout-ahead draw of env resets (`VecEnv.predraw`) the rollout makes; beyond it (very
#: many envs x steps with large states) envs fall back to their per-env reset pool.
PREDRAW_MAX_BYTES = 256 * 2**20


#: Batches up to this size draw each epoch's permutation inside the epoch; larger ones draw it one
#: epoch ahead (both with `fusedrl.train.shuffle.permutations`; see `PPO.learn`).
SMALL_BATCH_SHUFFLE = 4096

#: Rollouts of at most this many envs unroll their step loop ROLLOUT_UNROLL times (see `PPO.rollout`).
ROLLOUT_UNROLL_MAX_ENVS = 64
ROLLOUT_UNROLL = 2

#: Rollouts of at most this many envs compute the built-in network's values after their step loop
#: (see `PPO.values_after_loop`).
VALUES_AFTER_LOOP_MAX_ENVS = 256

#: `jax.vmap` sizes (agents) at which an update's minibatch loop is unrolled 2x (see `PPO.learn`);
#: with jax 0.10 only: on jax 0.11.2 it made no difference (1.028x and 1.003x, paired A/Bs).
MINIBATCH_UNROLL_AGENTS = range(7, 10) if jax.__version_info__ < (0, 11) else range(0)


class Transition(NamedTuple):
    """One rollout step of N envs; the rollout stacks these to [T, N, ...]."""

    obs: jax.Array  # [N, obs_dim] observation acted on
    action: jax.Array  # [N] or [N, act_dim]
    log_prob: jax.Array  # [N]
    value: jax.Array  # [N] V(obs)
    reward: jax.Array  # [N] (normalised if normalize_reward)
    terminated: jax.Array  # [N] bool
    done: jax.Array  # [N] bool, terminated | truncated
    next_obs: jax.Array  # [N, obs_dim] observation after the step, before any auto-reset
    episode_done: jax.Array  # [N] bool, an episode completed here (for statistics)
    episode_return: jax.Array  # [N] raw return of that episode, 0 elsewhere
    episode_length: jax.Array  # [N] its length, 0 elsewhere


@struct.dataclass
class RunnerState:
    """Everything a run carries from one update to the next (and what a checkpoint saves)."""

    params: Any  # actor-critic parameters
    opt_state: Any  # optax state (its step count drives the learning-rate schedule)
    env_state: Any  # wrapped VecEnv state: env states, reset pool, normaliser statistics, env key
    obs: jax.Array  # [N, obs_dim] float32 current observations
    key: jax.Array  # PRNG key for actions and minibatch shuffling
    update: jax.Array  # [] int32 updates completed
    last_return: jax.Array  # [] float32 mean return of the latest update that completed an episode
    last_length: jax.Array  # [] float32 its mean length


@struct.dataclass
class TrainResult:
    """Final state of a run and its per-update metrics (each metric [num_updates]).

    `episode_return` and `episode_length` are means over the episodes that completed during the
    update (`episodes_completed`); an update in which none did repeats the latest update that had
    one, and updates before the first completed episode report 0.0, marked by `episode_length` 0
    (a completed episode has length >= 1). Never NaN.
    """

    state: RunnerState
    metrics: dict[str, jax.Array]
    hparams: Hyperparams

    @property
    def params(self):
        return self.state.params


class PPO:
    """The train function `make_train` returns: `train(key, hparams=None) -> TrainResult`.

    Also exposes the pieces for resuming and inspection: `init(key, hparams)` builds a
    `RunnerState`; `run(state, hparams, num_updates)` continues training from one.

    Args:
      config: a validated `PPOConfig`.
      callback: optional host function `callback(metrics: dict[str, np.ndarray])`, called every
        `callback_every` updates from inside the jitted run via `jax.debug.callback`. Under vmap
        (jax 0.10) it is called once per seed, in no guaranteed order and without the seed's index:
        `fusedrl.progress.SeedTaggedPPO` adds a "seed" entry. Off by default: no host transfer.
      callback_every: updates between callbacks.
      axis_name: data parallelism (`fusedrl.sweep.data_parallel_train`): the name of a mapped axis
        (`shard_map`/`vmap`) over which shards of one agent run. Each shard steps its own envs with
        its own randomness; gradients and advantage-normalisation statistics are averaged over the
        axis (`lax.pmean`), and the observation and reward normalisers pool the shards' samples, so
        parameters and normaliser statistics stay identical on every shard. None: a plain agent.
    """

    def __init__(
        self,
        config: PPOConfig,
        *,
        callback: Callable[[dict[str, Any]], None] | None = None,
        callback_every: int = 1,
        axis_name: str | None = None,
    ):
        if not isinstance(config, PPOConfig):
            raise TypeError(f"make_train takes a PPOConfig, got {type(config).__name__}.")
        check_callback(callback, callback_every)
        self.config = config
        self.callback = callback
        self.callback_every = int(callback_every)
        self.axis_name = axis_name
        self.env, self.env_params = make(config.env_id, **config.env_params)
        _check_observation_space(config.env_id, self.env, self.env_params)
        act_space = self.env.action_space(self.env_params)
        if isinstance(act_space, Discrete):
            self.discrete, action_dim = True, int(act_space.n)
        elif isinstance(act_space, Box) and len(act_space.shape) == 1:
            self.discrete, action_dim = False, int(act_space.shape[0])
            _warn_bounds_exclude_zero(config.env_id, act_space)
        else:
            raise ValueError(
                f"{config.env_id}: PPO supports Discrete and 1-D Box action spaces, "
                f"got {space_info(act_space)}."
            )
        self.action_dim = action_dim
        obs_shape = tuple(getattr(self.env.observation_space(self.env_params), "shape", None) or ())
        flat = (min(config.num_envs, 2), int(np.prod(obs_shape, dtype=np.int64)))  # FlattenObservation's
        self.network = build_network(config, action_dim=action_dim, discrete=self.discrete,
                                     obs_shape=obs_shape,
                                     obs_example=jax.ShapeDtypeStruct(flat, jnp.float32))

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
        venv = W.EpisodeStatistics(VecEnv(self.env, num_envs or c.num_envs))
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
        hparams = self._check_hparams(hparams, shapes=False)
        venv = self.make_env(hparams)
        return W.find_wrapper_state(venv, state.env_state, W.NormalizeObservation).obs_stats

    def make_optimizer(self, hparams: Hyperparams) -> optax.GradientTransformation:
        c = self.config
        steps_per_update = c.update_epochs * c.num_minibatches
        if c.anneal_lr:
            lr = partial(_linear_anneal, lr=hparams.lr, steps_per_update=steps_per_update,
                         num_updates=c.num_updates)
        else:
            lr = hparams.lr
        # flatten: Adam and the norm clip run on one vector instead of a dozen small leaves (fewer,
        # larger kernels; measured +5-15% PPO steps/s at PureJaxRL's CartPole configs on CPU).
        return optax.flatten(
            optax.chain(
                optax.clip_by_global_norm(hparams.max_grad_norm),
                optax.adam(learning_rate=lr, eps=1e-5),
            )
        )

    def learning_rate(self, hparams: Hyperparams, update: jax.Array) -> jax.Array:
        """The learning rate in effect at the start of update `update` (0-based)."""
        c = self.config
        if not c.anneal_lr:
            return hparams.lr
        steps = c.update_epochs * c.num_minibatches
        return _linear_anneal(update * steps, hparams.lr, steps, c.num_updates)

    def _check_hparams(self, hparams, *, shapes: bool = True):
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

    # ------------------------------------------------------------------------------------ init
    def init(self, key: jax.Array, hparams: Hyperparams | None = None) -> RunnerState:
        hparams = self._check_hparams(hparams)
        k_env, k_net, key = jax.random.split(typed_key(key), 3)
        if self.axis_name is not None:  # data parallel: shard-specific envs and actions, shared params
            shard = jax.lax.axis_index(self.axis_name)
            k_env, key = jax.random.fold_in(k_env, shard), jax.random.fold_in(key, shard)
        venv = self.make_env(hparams)
        obs, env_state = venv.reset(k_env, hparams.env_params)
        params = self.network.init(k_net, obs[:1])
        opt_state = self.make_optimizer(hparams).init(params)
        zero = jnp.zeros((), jnp.float32)
        return RunnerState(params, opt_state, env_state, obs, key, jnp.int32(0), zero, zero)

    # --------------------------------------------------------------------------------- rollout
    def values_after_loop(self, num_envs: int) -> bool:
        """Whether a rollout of `num_envs` envs computes V(obs) in one batched call over its [T, N]
        observations after the step loop, rather than at each step.

        Choosing actions needs only the actor: when the critic has a torso of its own (the built-in
        ActorCritic), XLA then drops it from the loop. Paired in-process A/Bs on a 2-core CPU (CartPole,
        2x64 MLPs, 4 epochs; docs/speed.md): +7% at 4 envs (1 and 8 vmapped agents), +2% at 16,
        +10% at 64, +8% at 256; 0.99x-1.01x at 512 and 1024 envs, 0.92x-1.00x at 2048, so wider
        rollouts keep the critic in the loop. A user's network may share its torso with the actor,
        which the call after the loop would run a second time: its values always come from the loop.
        """
        return isinstance(self.network, ActorCritic) and num_envs <= VALUES_AFTER_LOOP_MAX_ENVS

    def values(self, params, obs: jax.Array) -> jax.Array:
        """V of [T, N, obs_dim] observations, [T, N], in one call over them flattened to [T * N, obs_dim]:
        the network takes a batch (docs/networks.md), and a user's may read its size from obs.shape[0]."""
        num_steps, num_envs = obs.shape[:2]
        flat_obs = obs.reshape((num_steps * num_envs,) + obs.shape[2:])
        return self.network.apply(params, flat_obs)[1].reshape(num_steps, num_envs)

    def rollout(self, state: RunnerState, hparams: Hyperparams, venv, key):
        """Steps the envs `num_steps` times with the current policy; returns (state, [T, N] batch)."""
        c = self.config
        values_after_loop = self.values_after_loop(state.obs.shape[0])

        def step(carry, xs):
            env_state, obs = carry
            noise, draws = xs
            pi, value = self.network.apply(state.params, obs)
            if values_after_loop:
                value = None  # computed after the loop
            action = pi.sample_from_noise(noise)
            log_prob = pi.log_prob(action)
            next_obs, env_state, reward, terminated, truncated, info = venv.step(
                env_state, action, hparams.env_params, draws
            )
            t = Transition(
                obs=obs,
                action=action,
                log_prob=log_prob,
                value=value,
                reward=reward,
                terminated=terminated,
                done=terminated | truncated,
                next_obs=info["final_observation"],
                episode_done=info["episode_done"],
                episode_return=info["episode_return"],
                episode_length=info["episode_length"],
            )
            return (env_state, next_obs), t

        # All of the rollout's randomness in a few large draws, outside the step loop: the action
        # sampling noise and (when it fits in PREDRAW_MAX_BYTES) the envs' reset states and step
        # keys. Inside the loop, no random numbers and no branches (see fusedrl.envs.vector).
        k_noise, k_env = jax.random.split(key)
        dist = Categorical if self.discrete else DiagGaussian
        noise = dist.noise(k_noise, (c.num_steps, state.obs.shape[0], self.action_dim))
        draws = None
        if venv.predraw_bytes(hparams.env_params, c.num_steps) <= PREDRAW_MAX_BYTES:
            draws = venv.predraw(k_env, hparams.env_params, c.num_steps)
        # A step of a few envs is a few microseconds of work per kernel, so the loop's own cost per
        # iteration counts. Paired in-process A/Bs on a 2-core CPU, against the rolled loop: unrolled
        # 4x, +6-19% at 1 agent x 4 envs and +28% at 8 vmapped agents (an earlier trainer); at 2048
        # envs -11%, so wide rollouts stay rolled. With the current trainer, 2x beats 4x: +1.7% at
        # 1 agent x 4 envs, +6% at 8 vmapped agents, +5.5% at 64 envs, +9% at 16 envs (CartPole;
        # bit-identical results there). Nothing between 64 and 2048 envs was measured, so the 64-env
        # cut-off is a bound, not a tuned value.
        unroll = ROLLOUT_UNROLL if state.obs.shape[0] <= ROLLOUT_UNROLL_MAX_ENVS else 1
        (env_state, obs), traj = jax.lax.scan(
            step, (state.env_state, state.obs), (noise, draws), unroll=unroll
        )
        if values_after_loop:
            traj = traj._replace(value=self.values(state.params, traj.obs))
        return state.replace(env_state=env_state, obs=obs), traj

    # ---------------------------------------------------------------------------------- update
    def advantages(self, params, traj: Transition, hparams: Hyperparams):
        """GAE over the [T, N] rollout; returns (advantages, targets), each [T, N]."""
        v_next = self.values(params, traj.next_obs)
        adv = jax.vmap(gae, in_axes=(1, 1, 1, 1, 1, None, None), out_axes=1)(
            traj.reward, traj.value, v_next, traj.terminated, traj.done,
            hparams.gamma, hparams.gae_lambda,
        )
        return adv, adv + traj.value

    def learn(self, params, opt_state, batch: Batch, hparams: Hyperparams, key):
        """`update_epochs` passes of shuffled minibatch gradient steps over a flat batch [B, ...].

        Returns (params, opt_state, the loss statistics' means, the number of steps taken:
        update_epochs * num_minibatches unless `target_kl` stopped the update early). After an early
        stop the means cover the steps taken and the minibatch that stopped them, whose losses and
        KL were computed but whose step was not taken, as SB3 reports them: so approx_kl shows how
        far past 1.5 * target_kl the policy had moved.

        Under `jax.vmap` over 7 to 9 agents (`MINIBATCH_UNROLL_AGENTS`, e.g. `jax.vmap(train)` over 8
        seeds) the minibatch loop is unrolled 2x: a custom batching rule sees the number of agents,
        which the vmapped function cannot. Paired in-process A/Bs on a 2-core CPU (jax 0.10.2, CartPole,
        2x64 tanh MLPs, 4 epochs; docs/speed.md): at 8 agents +7%, +6% and +9% with 128-row minibatches
        and +2-3% with 256-row ones; at 7 and 9 agents +3% and +4%; at 1 and 4 agents none; at 16
        agents -10%, so the window stays narrow; on jax 0.11 it made no difference, so there it is empty.
        Elsewhere (one agent, other counts, the data-parallel path) the loop stays rolled and the
        program is unchanged.
        """
        if self.axis_name is not None:
            return self._learn_epochs(params, opt_state, batch, hparams, key, unroll=1)
        return _batchable_learn(self)(params, opt_state, batch, hparams, key)

    def _learn_epochs(self, params, opt_state, batch: Batch, hparams: Hyperparams, key, *, unroll: int):
        """`learn` with the minibatch loop unrolled `unroll` times."""
        c = self.config
        batch_size = batch.advantage.shape[0]
        optimizer = self.make_optimizer(hparams)
        loss_fn = partial(
            ppo_loss,
            apply_fn=self.network.apply,
            clip_eps=hparams.clip_eps,
            vf_coef=hparams.vf_coef,
            ent_coef=hparams.ent_coef,
            normalize_adv=c.normalize_adv and self.axis_name is None,
            clip_value_loss=c.clip_value_loss,
        )
        grad_fn = jax.grad(loss_fn, has_aux=True)

        def minibatch_step(carry, mb):
            params, opt_state = carry[:2]
            if self.axis_name is not None and c.normalize_adv:  # statistics of the global minibatch
                mean = jax.lax.pmean(mb.advantage.mean(), self.axis_name)
                var = jax.lax.pmean(jnp.mean((mb.advantage - mean) ** 2), self.axis_name)
                mb = mb._replace(advantage=(mb.advantage - mean) / (jnp.sqrt(var) + 1e-8))
            grads, stats = grad_fn(params, batch=mb)
            if self.axis_name is not None:
                grads = jax.lax.pmean(grads, self.axis_name)
            updates, new_opt_state = optimizer.update(grads, opt_state, params)
            new_params = optax.apply_updates(params, updates)
            if c.target_kl is None:
                return (new_params, new_opt_state), stats
            # Early stop (SB3's rule): once a minibatch starts more than 1.5 * target_kl away from
            # the rollout's policy (k3 estimate, before its step), it and every later step of this
            # update are skipped. Skipped steps still run, as selects, so the loops keep their shape.
            kl = stats.approx_kl
            if self.axis_name is not None:  # every shard takes the same decision
                kl = jax.lax.pmean(kl, self.axis_name)
            stopped = carry[2] | (kl > 1.5 * c.target_kl)
            params, opt_state = _unless(stopped, (params, opt_state), (new_params, new_opt_state))
            # Reported: every minibatch evaluated before the stop, the one that triggered it too.
            return (params, opt_state, stopped), (stats, ~stopped, ~carry[2])

        def draw(k):
            return permutations(k, 1, batch_size)[0]

        def shuffle_and_step(carry, perm):
            shuffled = jax.tree.map(
                lambda x: x[perm].reshape((c.num_minibatches, -1) + x.shape[1:]), batch
            )
            return jax.lax.scan(minibatch_step, carry, shuffled, unroll=unroll)

        def epoch(carry, k):  # small batches: the epoch draws its own permutation
            return shuffle_and_step(carry, draw(k))

        def epoch_ahead(carry, xs):  # large batches: it draws the next epoch's
            carry, perm = carry
            i, k_next = xs
            # No draw after the last epoch (a cond: measured +3% over drawing and discarding it).
            perm_next = jax.lax.cond(i + 1 < c.update_epochs, draw, lambda k: perm, k_next)
            carry, stats = shuffle_and_step(carry, perm)
            return (carry, perm_next), stats

        # Permutations from packed-key sorts (train/shuffle.py: 2x cheaper than jax.random.permutation
        # at 512 elements, 3.6x at 32768). Small batches draw each epoch's inside the epoch, from its
        # key: drawn up front, the 1-agent x 512-sample run was 1.35x slower end to end on a 2-core CPU
        # (XLA's thunk executor farmed the loop's tiny kernels out to the second core;
        # docs/speed.md). Large batches draw each epoch's one epoch ahead: the sort does not depend
        # on that epoch's minibatch steps, so XLA runs the two side by side instead of one after the
        # other (the sort of 32768 keys is single-threaded on CPU).
        keys = jax.random.split(key, c.update_epochs)
        carry = (params, opt_state) if c.target_kl is None else (params, opt_state, jnp.bool_(False))
        if batch_size <= SMALL_BATCH_SHUFFLE:
            carry, stats = jax.lax.scan(epoch, carry, keys)
        else:
            ahead = (jnp.arange(c.update_epochs), jnp.concatenate([keys[1:], keys[:1]]))  # last unused
            (carry, _), stats = jax.lax.scan(epoch_ahead, (carry, draw(keys[0])), ahead)
        params, opt_state = carry[:2]
        if c.target_kl is None:
            steps = jnp.int32(c.update_epochs * c.num_minibatches)
            return params, opt_state, jax.tree.map(jnp.mean, stats), steps
        stats, taken, reported = stats
        steps = taken.sum(dtype=jnp.int32)  # >= 1: the first step starts at the rollout's policy
        n = reported.sum(dtype=jnp.int32)
        mean = jax.tree.map(lambda x: jnp.sum(jnp.where(reported, x, 0.0)) / n, stats)
        return params, opt_state, mean, steps

    def update_step(self, state: RunnerState, hparams: Hyperparams, venv):
        """One PPO update: rollout, then `learn_from_rollout`. Returns (new state, metrics)."""
        key, k_roll = jax.random.split(state.key)
        state, traj = self.rollout(state.replace(key=key), hparams, venv, k_roll)
        return self.learn_from_rollout(state, traj, hparams)

    def learn_from_rollout(self, state: RunnerState, traj: Transition, hparams: Hyperparams):
        """GAE and `update_epochs` of minibatch steps on a [T, N] rollout, plus this update's
        metrics. Independent of where the rollout came from (the fused envs or a host bridge).

        Returns (state with new params/opt_state/key/update counter, metrics dict of scalars).
        """
        c = self.config
        key, k_learn = jax.random.split(state.key)
        adv, targets = self.advantages(state.params, traj, hparams)
        num_steps, num_envs = traj.reward.shape

        def flat(x):
            return x.reshape((num_steps * num_envs,) + x.shape[2:])

        batch = Batch(
            obs=flat(traj.obs), action=flat(traj.action), log_prob=flat(traj.log_prob),
            value=flat(traj.value), advantage=flat(adv), target=flat(targets),
        )
        lr = self.learning_rate(hparams, state.update)
        params, opt_state, stats, steps = self.learn(
            state.params, state.opt_state, batch, hparams, k_learn
        )

        # Episode statistics over the episodes that completed during this update. When none did,
        # report the latest update that had one (episodes_completed = 0 says so), never NaN; before
        # the first, 0.0 with episode_length 0, which no completed episode has.
        n_done = traj.episode_done.sum()
        has = n_done > 0
        denom = jnp.maximum(n_done, 1).astype(jnp.float32)
        ret = jnp.where(has, jnp.sum(traj.episode_return * traj.episode_done) / denom, state.last_return)
        length = jnp.where(
            has, jnp.sum(traj.episode_length * traj.episode_done) / denom, state.last_length
        )
        update = state.update + 1
        metrics = {
            "episode_return": ret,
            "episode_length": length,
            "episodes_completed": n_done.astype(jnp.int32),
            **stats._asdict(),
            "gradient_steps": steps,
            "explained_variance": explained_variance(batch.value, batch.target),
            "learning_rate": jnp.asarray(lr, jnp.float32),
            "env_steps": update * c.batch_size,
        }
        state = state.replace(
            params=params, opt_state=opt_state, key=key, update=update,
            last_return=ret.astype(jnp.float32), last_length=length.astype(jnp.float32),
        )
        return state, metrics

    # ------------------------------------------------------------------------------------- run
    def run(
        self, state: RunnerState, hparams: Hyperparams | None = None, num_updates: int | None = None,
        first_update: int = 0, *, callback_extra: Mapping[str, Any] | None = None,
    ) -> TrainResult:
        """Continues training from `state` for `num_updates` updates (default: the config's).

        `first_update` (an int, possibly traced): the index of the first of them in the whole run,
        so that a run continued in pieces calls back on the same updates as one run would
        (`fusedrl.sweep`'s streams run in pieces). `callback_extra`: arrays (possibly traced) added
        to the metrics the callback receives, not to the result's (`fusedrl.sweep`: the run index).

        Updates past the config's `num_updates` (a state at its end, or a larger `num_updates`)
        run, but with `anneal_lr` their learning rate is 0 (the schedule ends at the budget), so
        they leave the parameters as they are: raise `total_timesteps` to train longer.
        """
        hparams = self._check_hparams(hparams)
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

    def __call__(self, key: jax.Array, hparams: Hyperparams | None = None) -> TrainResult:
        hparams = self._check_hparams(hparams)
        return self.run(self.init(key, hparams), hparams)


def _batchable_learn(ppo: PPO):
    """`ppo._learn_epochs`, rolled; its batching rule unrolls the minibatch loop 2x when `jax.vmap` maps it
    over `MINIBATCH_UNROLL_AGENTS` agents (see `PPO.learn`)."""

    @jax.custom_batching.custom_vmap
    def learn(params, opt_state, batch, hparams, key):
        return ppo._learn_epochs(params, opt_state, batch, hparams, key, unroll=1)

    @learn.def_vmap
    def learn_vmap(axis_size, in_batched, *args):
        unroll = 2 if axis_size in MINIBATCH_UNROLL_AGENTS else 1
        in_axes = tuple(jax.tree.map(lambda batched: 0 if batched else None, b) for b in in_batched)
        out = jax.vmap(partial(ppo._learn_epochs, unroll=unroll), in_axes=in_axes)(*args)
        return out, jax.tree.map(lambda _: True, out)

    return learn


def check_callback(callback, callback_every) -> None:
    """Raises the error `make_train` raises for a `callback` that is not callable (or None) or a
    `callback_every` that is not an int >= 1."""
    if callback is not None and not callable(callback):
        raise TypeError(f"callback must be a function of the metrics dict (or None), got {callback!r}.")
    if not is_int(callback_every) or callback_every < 1:
        raise ValueError(f"callback_every must be an int >= 1, got {callback_every!r}.")


def _check_hparams_shapes(hparams: Hyperparams, default: Hyperparams) -> None:
    """Trace-time check (static shapes, no runtime cost) that every leaf of one run's `hparams` has
    the shape of the default's (a scalar for every PPO hyperparameter). Under `jax.vmap` the leaves
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


def _check_observation_space(env_id: str, env, params) -> None:
    """The MLP takes one array per observation: a Dict or Tuple observation space is refused here
    (its observations failed later, inside the flattening wrapper, as an opaque numpy error)."""
    try:
        space = env.observation_space(params)
    except NotImplementedError:  # gymnax's default: the observations' own shape is used
        return
    if not hasattr(space, "shape"):
        raise ValueError(
            f"{env_id}: PPO's networks take one array per observation (a Box observation space), got "
            f"a {type(space).__name__} observation space. Return one array from reset_env and step_env "
            f"(e.g. jnp.concatenate of the parts, flattened) and describe it with a Box."
        )


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
        warnings.warn(
            f"{env_id}: the Box action space leaves out 0 in dimension(s) {bounds}. PPO's Gaussian policy "
            f"starts at mean 0 and its actions are clipped to the bounds, not rescaled, so most early "
            f"actions land on a bound and the policy barely learns there. Declare "
            f"Box(-1.0, 1.0, shape) and map the action to your range in step_env "
            f"(low + (action + 1) / 2 * (high - low)).",
            UserWarning,
            stacklevel=4,  # the caller of make_train (_warn, PPO.__init__, make_train)
        )


def _unless(stopped, old, new):
    """`new`, or `old` where `stopped`, except the learning-rate schedule's step count, which always
    advances: the schedule follows the update number whether its steps were taken or not. Adam's
    own count stays with its moments: a skipped step changes nothing, as in SB3, where it is never
    taken (advancing the count alone would shrink Adam's bias correction of moments that saw fewer
    steps, enlarging the steps it then takes: up to 2.4x with 2 of 16 steps taken per update)."""

    def schedule(x):
        return isinstance(x, optax.ScaleByScheduleState)

    def pick(o, n):
        if schedule(o):
            return n
        return jax.tree.map(lambda a, b: jnp.where(stopped, a, b), o, n)

    return jax.tree.map(pick, old, new, is_leaf=schedule)


def _linear_anneal(count, lr, steps_per_update, num_updates):
    """PureJaxRL's schedule: lr * (1 - update / num_updates), constant within an update."""
    # Clamped: a run resumed past the configured budget keeps lr at 0 instead of going negative.
    frac = jnp.maximum(1.0 - (count // steps_per_update) / num_updates, 0.0)
    return lr * frac


def make_train(config: PPOConfig, **kwargs) -> PPO:
    """Returns the pure train function for `config`: `train(key, hparams=None) -> TrainResult`.

    `jax.jit(train)(key)` runs the whole training on the device; `jax.jit(jax.vmap(train))(keys)`
    trains one agent per key in one program. Keyword arguments go to `PPO` (callback options).

    A "gymnasium:<id>" env_id gives the host-environment bridge instead (`fusedrl.bridge.HostPPO`):
    same parts and results format, but envs step on the host, so `train(key)` is not jittable.
    """
    # --- host bridge (src/fusedrl/bridge.py): Gymnasium envs step on the host.
    if isinstance(config, PPOConfig) and config.env_id.startswith("gymnasium:"):
        from fusedrl.bridge import HostPPO  # lazy: the bridge imports this module

        return HostPPO(config, **kwargs)
    # --- end host bridge
    return PPO(config, **kwargs)
