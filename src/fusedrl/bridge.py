"""The host-environment bridge: on-policy learners on Gymnasium envs stepped on the host.

`fusedrl.make_train(PPOConfig(env_id="gymnasium:CartPole-v1", ...))` returns a `HostTrainer`: the
architecture of GA3C's predictor or rlstructures' `DeviceEnv`. A `gymnasium.vector.SyncVectorEnv`
steps on the host; each step ships the observations to the device, where one jitted call
normalises them (if asked) and samples the actions, which come back to the host. After `num_steps`
steps the rollout goes to the fused trainer's own `Trainer.learn_from_rollout` (the algorithm's
targets, its optimiser steps and the metrics), jitted once. No algorithm's math lives here, so every
config the fused trainer takes trains here too (`PPOConfig`, recurrent or not, `A2CConfig`,
`ReinforceConfig`), and the results have the fused path's format: a `TrainResult` with the same
metric names, each [num_updates].

A recurrent policy (`recurrent="gru"|"lstm"`) carries its state per env from step to step on the
device, as the fused rollout does: each policy call starts from the carry after the env's previous
step, set back to the start of an episode where that step ended one (the step's `done` goes to the
device with the observations). The learner replays the rollout from the carry before its first step
(`Trainer.learn_from_rollout`'s `policy_state`), so its log-probabilities and values are those the
rollout acted with.

It is a host loop, so `train(key)` is a plain Python function: `jax.jit(train)` and
`jax.vmap(train)` raise an error saying so. Evaluate with `fusedrl.bridge.evaluate` (the env runs
on the host), not `fusedrl.evaluate`.

Episode ends follow Gymnasium 1.x with same-step autoreset: a finished env resets inside the step
that ended its episode and reports its last observation in `info["final_obs"]`, which becomes the
transition's `next_obs`. GAE then bootstraps from that observation's value when the episode was
truncated (time limit), never when it terminated.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from fusedrl.envs.host import HostEnv, HostEnvError, is_host_env_id
from fusedrl.envs.wrappers import NORM_CLIP, NORM_EPSILON, RunningMeanStd, scale_reward
from fusedrl.evaluation import check_evaluate_args
from fusedrl.train.config import Hyperparams, OnPolicyConfig
from fusedrl.train.ppo import algorithm_of
from fusedrl.train.state import RunnerState, TrainResult, Transition, typed_key
from fusedrl.train.trainer import Trainer


@struct.dataclass
class HostEnvState:
    """What of the env lives on the device: the normalisers (the envs themselves are on the host)."""

    obs_stats: RunningMeanStd | None  # mean/var [obs_dim]; None without normalize_obs
    return_stats: RunningMeanStd | None  # mean/var []; None without normalize_reward
    discounted_return: jax.Array | None  # [N] float32 per-env discounted return (reward scaling)


class Probe:
    """Wall-clock accounting of a bridge rollout, by phase (for `fusedrl.profile`).

    With a probe the rollout waits for every device call (`block_until_ready`), so each phase's
    time is its own: "env" (Gymnasium `step`), "to_device" / "to_host" (transfers), "policy"
    (the jitted policy call), "host" (the rest of the Python loop: bookkeeping, encoding).
    """

    def __init__(self):
        self.seconds: dict[str, float] = {}
        self._last = time.perf_counter()

    def start(self):
        self._last = time.perf_counter()

    def tick(self, phase: str):
        now = time.perf_counter()
        self.seconds[phase] = self.seconds.get(phase, 0.0) + now - self._last
        self._last = now


def _refuse_tracers(env_id: str, *args):
    if any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(args)):
        raise TypeError(
            f"The training function for {env_id!r} is the host-environment bridge: Gymnasium steps "
            f"the envs on the host, in a Python loop, so it cannot be traced by jax.jit, jax.vmap "
            f"or jax.grad. Call it directly: train(key). (Only its policy and update run jitted on "
            f"the device; for a fully fused program use a JAX env id such as 'CartPole-v1'.)"
        )


class HostTrainer:
    """An on-policy learner on a host (Gymnasium) env: `train(key, hparams=None) -> TrainResult`,
    not jittable. It trains whatever the config's algorithm is (`HostPPO` is its old name).

    Holds a fused `Trainer` for the config and calls its network, optimiser, learning-rate schedule
    and `learn_from_rollout`; only the rollout is its own, a host loop over a Gymnasium vector env.
    It offers the trainer's interface (`init`, `run`, `make_env`, `obs_stats`, `default_hparams`).

    Args:
      config: a `PPOConfig` (recurrent or not), `A2CConfig` or `ReinforceConfig` whose env_id starts
        with "gymnasium:"; `env_params` go to `gymnasium.make` as keyword arguments.
      callback: optional `callback(metrics: dict[str, np.ndarray])`, called on the host every
        `callback_every` updates with that update's metrics.
      callback_every: updates between callbacks.
      env: the (HostEnv, None) that `fusedrl.make(config.env_id, **config.env_params)` gave, if the
        caller has built it already; default: built here.
    """

    #: `jax.jit(train)` is not possible: callers (the CLI) check this to call `train(key)` directly.
    jittable = False

    def __init__(self, config: OnPolicyConfig, *, callback: Callable | None = None, callback_every: int = 1,
                 env: tuple[Any, Any] | None = None):
        algorithm = algorithm_of(config)
        if not is_host_env_id(config.env_id):
            raise ValueError(f"HostTrainer trains 'gymnasium:' env ids, got {config.env_id!r}.")
        self.trainer = Trainer(config, algorithm, callback=callback, callback_every=callback_every, env=env)
        self.config, self.callback, self.callback_every = config, callback, int(callback_every)
        t = self.trainer
        self.env, self.env_params, self.network = t.env, t.env_params, t.network
        self.discrete, self.action_dim = self.trainer.discrete, self.trainer.action_dim
        self.recurrent = t.recurrent
        assert isinstance(self.env, HostEnv)
        check_host_config(config, self.env)
        # One compile each per trainer; their shapes are fixed by the config.
        self._act = jax.jit(self.act)
        self._observe = jax.jit(self.observe)
        self._next_policy_state = jax.jit(self.next_policy_state)
        self._policy_step = jax.jit(self.policy_step)
        self.learn_step = jax.jit(self.learn_host_rollout)

    # ------------------------------------------------------------- the trainer's interface
    def default_hparams(self) -> Hyperparams:
        return self.trainer.default_hparams()

    def check_hparams(self, hparams, *, shapes: bool = True) -> Hyperparams:
        return self.trainer.check_hparams(hparams, shapes=shapes)

    def make_optimizer(self, hparams: Hyperparams):
        return self.trainer.make_optimizer(hparams)

    def learning_rate(self, hparams: Hyperparams, update):
        return self.trainer.learning_rate(hparams, update)

    def learn_from_rollout(self, state: RunnerState, traj: Transition, hparams: Hyperparams,
                           policy_state=None):
        return self.trainer.learn_from_rollout(state, traj, hparams, policy_state)

    def advantages(self, params, traj: Transition, hparams: Hyperparams, policy_state=None):
        return self.trainer.advantages(params, traj, hparams, policy_state)

    def learn(self, params, opt_state, batch, hparams: Hyperparams, key: jax.Array):
        return self.trainer.learn(params, opt_state, batch, hparams, key)

    def make_env(self, hparams: Hyperparams | None = None, *, num_envs: int | None = None, obs_stats=None,
                 evaluation: bool = False):
        """The bridge's env: a Gymnasium vector env of `num_envs` envs (default: the config's), stepped
        on the host; the caller closes it. The normalisers are not wrappers here but device state
        (`HostEnvState`), applied by `observe`, so `obs_stats` and `evaluation` change nothing."""
        del hparams, obs_stats, evaluation
        return self.env.make_vec(num_envs or self.config.num_envs)

    def obs_stats(self, state: RunnerState, hparams: Hyperparams | None = None):
        return state.env_state.obs_stats

    # ----------------------------------------------------------------------- device pieces
    def init(self, key: jax.Array, hparams: Hyperparams | None = None) -> RunnerState:
        """Parameters, optimiser state, fresh normalisers and (recurrent) the episode-start policy
        state; `obs` is a placeholder of zeros until `run` resets the host envs."""
        hparams = self.check_hparams(hparams)
        c = self.config
        k_env, k_net, key = jax.random.split(typed_key(key), 3)
        del k_env  # same split as Trainer.init, so the network's init key matches the fused path's
        obs = jnp.zeros((c.num_envs, self.env.obs_dim), jnp.float32)
        policy_state = self.trainer.initial_policy_state(c.num_envs)
        if self.recurrent:
            params = self.network.init(k_net, jax.tree.map(lambda x: x[:1], policy_state), obs[:1])
        else:
            params = self.network.init(k_net, obs[:1])
        opt_state = self.make_optimizer(hparams).init(params)
        env_state = HostEnvState(
            obs_stats=RunningMeanStd.create((self.env.obs_dim,)) if c.normalize_obs else None,
            return_stats=RunningMeanStd.create(()) if c.normalize_reward else None,
            discounted_return=jnp.zeros((c.num_envs,), jnp.float32) if c.normalize_reward else None,
        )
        zero = jnp.zeros((), jnp.float32)
        return RunnerState(params, opt_state, env_state, obs, key, jnp.int32(0), zero, zero, policy_state)

    def observe(self, env_state: HostEnvState, raw_obs: jax.Array, raw_final: jax.Array | None = None):
        """Observations [N, obs_dim] as the policy sees them (NormalizeObservation's order: the
        statistics absorb `raw_obs` first; `raw_final`, the pre-reset observations, is normalised
        with the same statistics but not counted). Returns (env_state, obs, final)."""
        raw_obs = jnp.asarray(raw_obs, jnp.float32)
        if env_state.obs_stats is None:
            final = None if raw_final is None else jnp.asarray(raw_final, jnp.float32)
            return env_state, raw_obs, final
        stats = env_state.obs_stats.update(raw_obs)

        def norm(x):
            return stats.normalize(jnp.asarray(x, jnp.float32), epsilon=NORM_EPSILON, clip=NORM_CLIP)

        final = None if raw_final is None else norm(raw_final)
        return env_state.replace(obs_stats=stats), norm(raw_obs), final

    def act(self, params, policy_state, obs: jax.Array, key: jax.Array):
        """Samples actions for obs [N, obs_dim] from `policy_state` (a recurrent policy's carry,
        None feed-forward): returns (policy_state after the call, action, log_prob [N], value [N],
        key)."""
        key, k_act = jax.random.split(key)
        policy_state, pi, value = self.trainer.policy_step(params, policy_state, obs)
        action = pi.sample(k_act)
        return policy_state, action, pi.log_prob(action), value, key

    def next_policy_state(self, env_state, policy_state, raw_obs, raw_final=None, done=None):
        """`observe`, and the policy state set back to an episode's start where the step just taken
        ended one (`done` [N]; None for a feed-forward policy, whose state is None). Returns
        (env_state, obs, final, policy_state)."""
        env_state, obs, final = self.observe(env_state, raw_obs, raw_final)
        if done is not None:
            policy_state = self.trainer.reset_policy_state(policy_state, jnp.asarray(done, bool))
        return env_state, obs, final, policy_state

    def policy_step(self, params, env_state, policy_state, key, raw_obs, raw_final=None, done=None):
        """`next_policy_state` then `act` on the new observations: the one device call per env step.
        Returns (env_state, obs, final, policy_state, action, log_prob, value, key)."""
        env_state, obs, final, policy_state = self.next_policy_state(env_state, policy_state, raw_obs,
                                                                     raw_final, done)
        policy_state, action, log_prob, value, key = self.act(params, policy_state, obs, key)
        return env_state, obs, final, policy_state, action, log_prob, value, key

    def scale_rewards(self, env_state: HostEnvState, reward: jax.Array, done: jax.Array, gamma):
        """NormalizeReward over a [T, N] rollout, step by step as the wrapper does it."""
        if env_state.return_stats is None:
            return env_state, reward

        def step(carry, x):
            stats, disc, scaled = scale_reward(*carry, *x, gamma)
            return (stats, disc), scaled

        (stats, disc), scaled = jax.lax.scan(
            step, (env_state.return_stats, env_state.discounted_return), (reward, done)
        )
        return env_state.replace(return_stats=stats, discounted_return=disc), scaled

    def transition(self, env_state: HostEnvState, steps, host: dict[str, Any], gamma):
        """Assembles the [T, N] `Transition` from the per-step device outputs (`steps`: lists of
        T arrays, then the policy state before the rollout, see `collect`) and the host arrays,
        scaling rewards if the config asks. Returns (env_state, traj)."""
        obs, action, log_prob, value = (jnp.stack(x) for x in steps[:4])
        finals = steps[4]  # T device arrays (normalised on the way) or one host array [T, N, D]
        next_obs = jnp.stack(finals) if isinstance(finals, list | tuple) else jnp.asarray(finals)
        env_state, reward = self.scale_rewards(
            env_state, jnp.asarray(host["reward"], jnp.float32), host["done"], gamma
        )
        traj = Transition(
            obs=obs, action=action, log_prob=log_prob, value=value, reward=reward,
            terminated=host["terminated"], done=host["done"], next_obs=next_obs,
            episode_done=host["episode_done"], episode_return=host["episode_return"],
            episode_length=host["episode_length"],
        )
        return env_state, traj

    def learn_host_rollout(self, state: RunnerState, steps, host: dict[str, Any], hparams: Hyperparams):
        """`transition`, then the fused trainer's `learn_from_rollout` (the algorithm's targets, its
        optimiser steps, the metrics), from the policy state before the rollout (`steps[5]`)."""
        env_state, traj = self.transition(state.env_state, steps, host, hparams.gamma)
        return self.learn_from_rollout(state.replace(env_state=env_state), traj, hparams, steps[5])

    # -------------------------------------------------------------------------- host loop
    def run(self, state: RunnerState, hparams: Hyperparams | None = None, num_updates: int | None = None,
            first_update: int = 0, *, callback_extra: dict[str, Any] | None = None) -> TrainResult:
        """Trains from `state` for `num_updates` updates (default: the config's) on fresh host
        envs, seeded from `state.key`. A resumed run starts new episodes: the host envs are not
        part of `state`. The vector env is closed on return and on error. `first_update` and
        `callback_extra` are the fused trainer's (`Trainer.run`)."""
        _refuse_tracers(self.config.env_id, state, hparams)
        hparams = self.check_hparams(hparams)
        if num_updates is not None and (not isinstance(num_updates, int | np.integer) or num_updates < 0):
            raise ValueError(f"num_updates must be an int >= 0 (or None: the config's "
                             f"{self.config.num_updates}), got {num_updates!r}.")
        n = self.config.num_updates if num_updates is None else int(num_updates)
        envs = self.make_env()
        try:
            state, episode = self.reset_envs(envs, state)
            history = []
            for i in range(n):
                state, episode, traj = self.collect(envs, state, episode)
                state, metrics = self.learn_step(state, *traj, hparams)
                history.append(metrics)
                if self.callback is not None and (int(first_update) + i + 1) % self.callback_every == 0:
                    self.callback(jax.device_get({**metrics, **(callback_extra or {})}))
        finally:
            envs.close()
        metrics = {k: jnp.stack([m[k] for m in history]) for k in history[0]} if history else {}
        return TrainResult(state=state, metrics=metrics, hparams=hparams)

    def __call__(self, key: jax.Array, hparams: Hyperparams | None = None, *,
                 callback_extra: dict[str, Any] | None = None) -> TrainResult:
        _refuse_tracers(self.config.env_id, key, hparams)
        hparams = self.check_hparams(hparams)
        return self.run(self.init(key, hparams), hparams, callback_extra=callback_extra)

    def reset_envs(self, envs, state: RunnerState):
        """Resets the host envs (seeded from `state.key`); returns (state with the first
        observations and the episode-start policy state, per-env episode counters)."""
        key, k_seed = jax.random.split(state.key)
        seed = int(jax.random.randint(k_seed, (), 0, 2**31 - 1))
        try:
            raw, _ = envs.reset(seed=seed)
        except Exception as e:
            raise HostEnvError(f"{self.config.env_id}: reset raised {type(e).__name__}: {e}") from e
        env_state, obs, _ = self._observe(state.env_state, self.env.encode_obs(raw))
        n = self.config.num_envs
        episode = (np.zeros(n, np.float64), np.zeros(n, np.int64))  # running return, length
        policy_state = self.trainer.initial_policy_state(n)  # every env starts an episode
        return state.replace(env_state=env_state, obs=obs, key=key, policy_state=policy_state), episode

    def collect(self, envs, state: RunnerState, episode, probe: Probe | None = None):
        """Steps the host envs `num_steps` times with the current policy.

        Returns (state, episode counters, (steps, host arrays)) where the last pair is what
        `learn_host_rollout` takes. With a `probe`, every phase is timed (and synchronised).
        A recurrent policy's state is carried from step to step on the device and set back to
        an episode's start after each step that ended one (the step's `done` is sent with its
        observations); `steps` ends with the state before the first step, which the learner
        replays the rollout from.
        """
        c, env = self.config, self.env
        T, N = c.num_steps, c.num_envs
        norm = c.normalize_obs
        ep_ret, ep_len = episode
        obs_l, act_l, logp_l, val_l, final_l = [], [], [], [], []
        host = {
            "reward": np.zeros((T, N), np.float32),
            "terminated": np.zeros((T, N), bool),
            "done": np.zeros((T, N), bool),
            "episode_done": np.zeros((T, N), bool),
            "episode_return": np.zeros((T, N), np.float32),
            "episode_length": np.zeros((T, N), np.int32),
        }
        raw_finals = None if norm else np.zeros((T, N, env.obs_dim), np.float32)
        params, env_state, obs, key = state.params, state.env_state, state.obs, state.key
        start = policy_state = state.policy_state
        if probe is not None:
            probe.start()
        policy_state, action, log_prob, value, key = self._act(params, policy_state, obs, key)
        if probe is not None:
            jax.block_until_ready(action)
            probe.tick("policy")
        for t in range(T):
            obs_l.append(obs), act_l.append(action), logp_l.append(log_prob), val_l.append(value)
            a_host = env.decode_action(np.asarray(action))
            if probe is not None:
                probe.tick("to_host")
            try:
                raw, reward, terminated, truncated, info = envs.step(a_host)
            except Exception as e:
                raise HostEnvError(
                    f"{c.env_id}: step raised {type(e).__name__}: {e} (update {int(state.update)}, "
                    f"step {t} of {T}); training stopped and the environments were closed."
                ) from e
            if probe is not None:
                probe.tick("env")
            done = terminated | truncated
            next_obs = env.encode_obs(raw)
            final = next_obs
            if done.any():
                final = next_obs.copy()
                ended = np.flatnonzero(info["_final_obs"])
                final[ended] = env.encode_obs(np.stack([info["final_obs"][i] for i in ended]))
            ep_ret += reward
            ep_len += 1
            h = host
            h["reward"][t], h["terminated"][t], h["done"][t] = reward, terminated, done
            h["episode_done"][t] = done
            h["episode_return"][t] = np.where(done, ep_ret, 0.0)
            h["episode_length"][t] = np.where(done, ep_len, 0)
            ep_ret[done], ep_len[done] = 0.0, 0
            if not norm:
                raw_finals[t] = final
            if probe is not None:
                probe.tick("host")
                next_obs = jax.block_until_ready(jax.device_put(next_obs))
                final = jax.block_until_ready(jax.device_put(final)) if norm else None
                probe.tick("to_device")
            ended = done if self.recurrent else None  # only a recurrent policy's state needs it
            if t + 1 < T:
                env_state, obs, f, policy_state, action, log_prob, value, key = self._policy_step(
                    params, env_state, policy_state, key, next_obs, final if norm else None, ended
                )
            elif self.recurrent:  # the last observation: normalise it, but act on it only after the update
                env_state, obs, f, policy_state = self._next_policy_state(
                    env_state, policy_state, next_obs, final if norm else None, ended
                )
            else:
                env_state, obs, f = self._observe(env_state, next_obs, final if norm else None)
            if norm:
                final_l.append(f)
            if probe is not None:
                jax.block_until_ready((obs, action))
                probe.tick("policy")
        steps = (obs_l, act_l, logp_l, val_l, final_l if norm else raw_finals, start)
        state = state.replace(env_state=env_state, obs=obs, key=key, policy_state=policy_state)
        return state, (ep_ret, ep_len), (steps, host)


def evaluate(
    config: OnPolicyConfig,
    result: TrainResult,
    key: jax.Array,
    num_episodes: int = 64,
    *,
    greedy: bool = True,
    max_steps: int | None = None,
) -> jax.Array:
    """Returns [num_episodes] float32 of a trained bridge policy, run on the host envs.

    The host counterpart of `fusedrl.evaluate`: `num_episodes` Gymnasium envs, each until its first
    episode ends (or `max_steps` steps, default: the env's time limit or 100_000), observations
    normalised with the run's final statistics (frozen), raw returns, greedy (mode) actions unless
    `greedy=False`. A recurrent policy starts each env at an episode's start and carries its state
    through that one episode. An episode that has not ended after `max_steps` steps reports NaN, as
    `fusedrl.evaluate` reports it (its partial return is no episode's return).
    """
    num_episodes, greedy, max_steps = check_evaluate_args(num_episodes, greedy, max_steps)
    trainer = make_host_train(config)
    env = trainer.env
    stats = trainer.obs_stats(result.state)
    limit = max_steps or env.max_episode_steps or 100_000

    @jax.jit
    def policy(params, policy_state, raw_obs, key):
        obs = jnp.asarray(raw_obs, jnp.float32)
        if stats is not None:
            obs = stats.normalize(obs, epsilon=NORM_EPSILON, clip=NORM_CLIP)
        policy_state, pi, _ = trainer.trainer.policy_step(params, policy_state, obs)
        key, k = jax.random.split(key)
        return (pi.mode() if greedy else pi.sample(k)), policy_state, key

    envs = env.make_vec(num_episodes)
    try:
        key, k_seed = jax.random.split(key)
        raw, _ = envs.reset(seed=int(jax.random.randint(k_seed, (), 0, 2**31 - 1)))
        returns = np.zeros(num_episodes, np.float64)
        finished = np.zeros(num_episodes, bool)
        # Each env's one episode: its policy state is never reset (a finished env's actions are unused).
        policy_state = trainer.trainer.initial_policy_state(num_episodes)
        for _ in range(limit):
            action, policy_state, key = policy(result.params, policy_state, env.encode_obs(raw), key)
            try:
                raw, reward, terminated, truncated, _ = envs.step(env.decode_action(np.asarray(action)))
            except Exception as e:
                raise HostEnvError(f"{config.env_id}: step raised {type(e).__name__}: {e}") from e
            returns += np.where(finished, 0.0, reward)
            finished |= terminated | truncated
            if finished.all():
                break
    finally:
        envs.close()
    return jnp.asarray(np.where(finished, returns, np.nan), jnp.float32)


def check_host_config(config: OnPolicyConfig, env: HostEnv) -> None:
    """The config's rules that need the Gymnasium env (the bridge's `config.check_env_params`): its
    rule on the time limit (`OnPolicyConfig.check_time_limit`: REINFORCE's), with Gymnasium's keyword."""
    config.check_time_limit(env.max_episode_steps, "max_episode_steps", " (gymnasium.make's keyword)")


def make_host_train(config: OnPolicyConfig, **kwargs) -> HostTrainer:
    """The bridge trainer for a "gymnasium:" config (what `fusedrl.make_train` returns for it)."""
    return HostTrainer(config, **kwargs)


#: `HostTrainer`'s old name, from when PPO was its one algorithm.
HostPPO = HostTrainer

__all__ = ["HostEnvState", "HostPPO", "HostTrainer", "Probe", "check_host_config", "evaluate",
           "make_host_train"]
