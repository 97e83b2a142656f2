"""A trained policy loaded from a run folder or checkpoint: `load(run_dir).act(obs, key=None)`."""

from __future__ import annotations

import difflib
import os
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from fusedrl import checkpoint as ckpt
from fusedrl._argtypes import UsageError, import_modules
from fusedrl._numbers import is_int
from fusedrl.envs import wrappers as W
from fusedrl.envs.host import is_host_env_id
from fusedrl.learners import make_train
from fusedrl.runs import load_run_config
from fusedrl.train.config import OnPolicyConfig
from fusedrl.trust import check_trusted, named_modules


class Policy:
    """The actor of a trained agent (PPO, A2C or REINFORCE), with the run's frozen observation normalisation.

    `act(obs, key=None)` takes one observation (the env's observation shape) or a batch of them
    (a leading axis) and returns the action(s): the distribution's mode when `key` is None
    (greedy), else a sample. Continuous actions are clipped to the action space, as the
    training env did. Dict (or NamedTuple) observations, and those of a `network="cnn"` policy, are
    taken as the env returns them (a batch: a leading axis on every entry); an `action_mask` entry
    rules actions out, as in training. A policy trained through the host bridge ("gymnasium:" env ids)
    takes the Gymnasium env's own observations and returns actions its `step` takes (NumPy).

    A recurrent policy (`recurrent="gru"` or `"lstm"`) carries its state from one `act` call to
    the next, one state per row of the batch: call `act` once per env step with the same batch
    size, and `reset()` when episodes start (`reset(done)` with a bool [B] resets those rows only,
    e.g. with the `terminated | truncated` of the step just taken). A call with another batch size,
    or the first call, starts every row at the start of an episode.

    Attributes:
      config: the run's config (`PPOConfig`, `A2CConfig` or `ReinforceConfig`: its algorithm).
      params: the network parameters of this seed.
      obs_stats: the observation normaliser's statistics (None without normalize_obs).
      update: the number of updates the parameters were trained for (`config.num_updates` for a
        finished run; fewer for the checkpoint of an unfinished one).
    """

    def __init__(self, config: OnPolicyConfig, state, hparams):
        self.config = config
        self.params = state.params
        self.hparams = hparams
        self.update = int(np.ravel(state.update)[0])
        self._encode = self._decode = self._example = None
        if is_host_env_id(config.env_id):
            self.trainer = make_train(config)
            env = self.trainer.env
            self.obs_shape = tuple(env.gym_observation_space.shape)
            self._encode, self._decode = env.encode_obs, env.decode_action  # host side, NumPy
            norm = (W.NORM_EPSILON, W.NORM_CLIP)
        else:
            self.trainer = make_train(config)
            if self.trainer.structured:  # dict observations, or network="cnn": one env's as reset gives it
                env = self.trainer.env
                reset = jax.tree_util.Partial(env.reset, params=hparams.env_params)
                self._example = jax.eval_shape(lambda k: reset(k)[0], jax.random.key(0))
                self.obs_shape = jax.tree.map(lambda x: tuple(x.shape), self._example)
            else:
                self.obs_shape = tuple(self.trainer.env.observation_space(hparams.env_params).shape)
            stats = self.trainer.obs_stats(state, hparams)
            venv = self.trainer.make_env(hparams, num_envs=1, obs_stats=stats, evaluation=True)
            wrapper = W.find_wrapper(venv, W.NormalizeObservation)
            norm = None if wrapper is None else (wrapper.epsilon, wrapper.clip)
        self._policy = getattr(self.trainer, "trainer", self.trainer)  # the bridge's fused Trainer
        self.obs_stats = self.trainer.obs_stats(state, hparams)
        self._norm = norm if self.obs_stats is not None else None
        # params and obs_stats are arguments, not constants baked in at the first call: a policy
        # whose params are replaced afterwards acts with the new ones.
        self._act = jax.jit(self._act_batch)
        self.policy_state = None  # a recurrent policy's carry for the rows of the last batch

    def reset(self, done=None) -> None:
        """A recurrent policy's state back to the start of an episode: every row, or the rows where
        `done` (bool [B]) is True. Nothing to do for a feed-forward policy."""
        if self.policy_state is None:
            return
        if done is None:
            self.policy_state = None
            return
        done = jnp.asarray(np.asarray(done, bool).reshape(-1))
        self.policy_state = self._policy.reset_policy_state(self.policy_state, done)

    def _act_batch(self, params, obs_stats, obs, key, policy_state):
        rows = jax.tree.leaves(obs)[0].shape[0]
        if self._example is not None:  # as the training stack's StructuredObservation gives them
            x = W.structure_observation(obs, rows, self.trainer.cnn)
        else:
            x = jnp.asarray(obs, jnp.float32).reshape((rows, -1))
        if self._norm is not None:
            epsilon, clip = self._norm
            x = W.normalize_observation(obs_stats, x, epsilon=epsilon, clip=clip)
        policy_state, pi, _ = self._policy.policy_step(params, policy_state, x)
        action = pi.mode() if key is None else pi.sample(key)
        if not self.trainer.discrete and self._decode is None:  # the bridge's decode clips on the host
            space = self.trainer.env.action_space(self.hparams.env_params)  # the run's bounds
            low = jnp.broadcast_to(jnp.asarray(space.low, action.dtype), action.shape[1:])
            high = jnp.broadcast_to(jnp.asarray(space.high, action.dtype), action.shape[1:])
            action = jnp.clip(action, low[None], high[None])
        return action, policy_state

    def _act_on(self, batch, key):
        rows = jax.tree.leaves(batch)[0].shape[0]
        state = self.policy_state
        if state is None or jax.tree.leaves(state)[0].shape[0] != rows:
            state = self._policy.initial_policy_state(rows)
        if self._encode is None:
            action, self.policy_state = self._act(self.params, self.obs_stats, batch, key, state)
            return action
        encoded = self._encode(np.asarray(batch))
        action, self.policy_state = self._act(self.params, self.obs_stats, encoded, key, state)
        return self._decode(np.asarray(action))

    def act(self, obs, key: jax.Array | None = None) -> jax.Array:
        if self._example is not None:
            return self._act_structured(obs, key)
        obs = jnp.asarray(obs) if self._encode is None else np.asarray(obs)
        n = len(self.obs_shape)
        if obs.shape == self.obs_shape:
            return self._act_on(obs[None], key)[0]
        if obs.ndim == n + 1 and obs.shape[1:] == self.obs_shape:
            return self._act_on(obs, key)
        raise ValueError(
            f"{self.config.env_id}: act expects an observation of shape {self.obs_shape} or a batch "
            f"[B, *{self.obs_shape}], got {obs.shape}."
        )

    __call__ = act

    def _act_structured(self, obs, key):
        """`act` for dict (or NamedTuple) observations and network="cnn": one env's observation as its
        reset returns it, or a batch of them (a leading axis on every entry)."""
        want = jax.tree.structure(self._example)
        if isinstance(obs, dict) and hasattr(self._example, "_asdict"):  # a NamedTuple's entries as a dict
            obs = type(self._example)(**obs)
        if jax.tree.structure(obs) != want:
            raise ValueError(f"{self.config.env_id}: act expects an observation structured as the env's "
                             f"({self.obs_shape}), got {jax.tree.map(np.shape, obs)}.")
        obs = jax.tree.map(jnp.asarray, obs)
        got = [tuple(x.shape) for x in jax.tree.leaves(obs)]
        single = [tuple(x.shape) for x in jax.tree.leaves(self._example)]
        if got == single:
            return self._act_on(jax.tree.map(lambda x: x[None], obs), key)[0]
        rows = {g[0] for g in got if len(g) >= 1}
        if len(rows) == 1 and [g[1:] for g in got] == single:
            return self._act_on(obs, key)
        raise ValueError(f"{self.config.env_id}: act expects an observation of shapes {self.obs_shape} or "
                         f"a batch of them (a leading axis B on every entry), got "
                         f"{jax.tree.map(np.shape, obs)}.")

    def __repr__(self):
        # hidden_sizes go to the user's own network, to use or ignore
        if self.config.network is not None and self.config.network != "cnn":
            return f"Policy({self.config.env_id!r}, network={self.config.network!r})"
        return f"Policy({self.config.env_id!r}, hidden_sizes={self.config.hidden_sizes})"


def missing_run_error(path: str | os.PathLike) -> FileNotFoundError:
    """The error for a run folder that does not exist, naming folders beside it of a close name: a
    run folder's name is its env id with ':' and '/' as '_' (runs/gymnax_Catch-bsuite)."""
    path = Path(path)
    parent = path.parent
    try:
        siblings = sorted(p.name for p in parent.iterdir() if p.is_dir()) if parent.is_dir() else []
    except OSError:
        siblings = []
    as_saved = path.name.replace(":", "_").replace("/", "_")
    near = [as_saved] if as_saved != path.name and as_saved in siblings else []
    near += difflib.get_close_matches(path.name, siblings, n=3, cutoff=0.75)
    near = list(dict.fromkeys(near))[:3]
    if near:
        hint = " Did you mean " + " or ".join(str(parent / n) for n in near) + "?"
    elif parent.is_dir():
        hint = f" {parent} holds: {', '.join(siblings[:20]) or 'no folders'}." if siblings else ""
    else:
        hint = f" ({parent} does not exist either.)"
    return FileNotFoundError(f"{path} does not exist.{hint}")


def load(path: str | os.PathLike, seed: int | None = None, *, trust_imports: bool = False) -> Policy:
    """The trained policy of a run folder (or a checkpoint directory).

    Args:
      path: a run folder written by `fusedrl train` / `train_run`, or its `checkpoint/` directory.
      seed: which seed of a multi-seed run; default 0. Ignored by single-run checkpoints.
      trust_imports: import the modules the folder names (config.json's `imports`, the module of
        its network "module:function"; a checkpoint's network). Importing runs their code, so
        without it a folder that names any is refused with `fusedrl.trust.UntrustedImportsError`
        (a ValueError), before anything is imported. `sys.path` is left as it was.

    The checkpoint of an unfinished run (interrupted, with `checkpoint_every`) holds the agent at its
    latest checkpoint: `Policy.update` says which update, and a RuntimeWarning says so.

    Raises:
      fusedrl.checkpoint.CheckpointDamaged: a checkpoint file changed after it was written (its
        checksum differs) or is missing.
    """
    if seed is not None and not is_int(seed):
        raise TypeError(f"seed must be the index of a seed of the run (an int), got {seed!r}.")
    path = Path(path)
    if not path.exists():
        raise missing_run_error(path)
    if (path / "config.json").is_file():
        ckpt.recover(path / "checkpoint")  # a save killed between its renames: the checkpoint before
    ckpt_dir = path / "checkpoint" if (path / "checkpoint").is_dir() else path
    expected = None
    if (path / "config.json").is_file():
        expected = load_run_config(path, trust_imports=trust_imports)[0]
    else:  # a checkpoint alone: its config may name a network module, which restoring would import
        saved = ckpt.read_meta(ckpt_dir).get("config")
        named = named_modules(saved if isinstance(saved, dict) else {}, ())
        check_trusted(str(ckpt_dir / "meta.json"), named, trust=trust_imports)
        try:  # from the current directory too, as a run folder's modules are
            import_modules([m for m, _ in named], source=f"{ckpt_dir / 'meta.json'} network")
        except UsageError as e:
            raise ValueError(str(e)) from None
    config, state, hparams, meta = ckpt.restore(ckpt_dir, expected)
    num_seeds = meta.get("num_seeds")
    if num_seeds is not None:
        i = 0 if seed is None else int(seed)
        if not 0 <= i < num_seeds:
            raise IndexError(f"{path} holds seeds 0..{num_seeds - 1}, got seed={seed}.")
        state = jax.tree.map(lambda x: x[i], state)
        if np.ndim(hparams.lr) == 1:  # one set of hyperparameters per seed (a sweep)
            hparams = jax.tree.map(lambda x: x[i] if np.ndim(x) else x, hparams)
    elif seed not in (None, 0):
        raise IndexError(f"{path} holds a single run; seed={seed} does not exist.")
    if not all(np.isfinite(np.asarray(x)).all() for x in jax.tree.leaves(state.params)):
        warnings.warn(f"{path}: the policy's parameters are not all finite (the run diverged), so its "
                      f"actions mean nothing.", RuntimeWarning, stacklevel=2)
    policy = Policy(config, state, hparams)
    if policy.update < config.num_updates:
        warnings.warn(f"{path}: the run has not finished: its checkpoint holds update {policy.update} of "
                      f"{config.num_updates}, so the policy is the agent at that update (`fusedrl train "
                      f"--resume` continues a run folder's run).", RuntimeWarning, stacklevel=2)
    return policy

