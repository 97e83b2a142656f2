"""The algorithms' configs, frozen and validated (`PPOConfig`, `A2CConfig`, `ReinforceConfig`, on one
base, `OnPolicyConfig`); `Hyperparams`: the traced numbers.

Static fields fix shapes and control flow (env id, counts, layer sizes, flags): changing one means a
new compile. Traced fields are plain numbers that become leaves of a `Hyperparams` pytree, which
`train(key, hparams)` takes explicitly, so `jax.vmap` over them (sweeps) compiles once.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from collections.abc import Mapping
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from fusedrl._numbers import is_int
from fusedrl._suggest import close_names
from fusedrl.envs import make
from fusedrl.networks import ACTIVATIONS, BUILTIN_NETWORKS, RECURRENT_CELLS, network_path_error


def traced(default: float):
    """Declares a config field traced: a number that becomes a leaf of the run's `Hyperparams`, so
    `train(key, hparams)` takes it as an argument and `jax.vmap` over it compiles once. Fields not
    declared so are static: they fix shapes or control flow, and a change compiles a new program."""
    return dataclasses.field(default=default, metadata={"traced": True})


def traced_fields(config_cls) -> tuple[str, ...]:
    """The names of `config_cls`'s traced fields (declared with `traced`), in declaration order."""
    return tuple(f.name for f in dataclasses.fields(config_cls) if f.metadata.get("traced"))


@jax.tree_util.register_pytree_with_keys_class
class Hyperparams:
    """Traced hyperparameters of one run; every leaf may carry a leading vmap axis.

    One attribute per traced field of the config that made it (`config.hparams()`), plus
    `env_params`, the env's params dataclass (physics constants, time limit). A pytree: its leaves
    are those numbers and the env params' leaves.

    Their values are not checked here (they may be traced): the config checks its own fields and
    `fusedrl.sweep` the values it sweeps, but a value put in by hand (`hparams.replace(gamma=1.5)`)
    trains as given.
    """

    __slots__ = ("_config_cls", "_values", "env_params")

    def __init__(self, config_cls, values: Mapping[str, Any], env_params: Any):
        object.__setattr__(self, "_config_cls", config_cls)
        object.__setattr__(self, "_values", dict(values))
        object.__setattr__(self, "env_params", env_params)

    @property
    def names(self) -> tuple[str, ...]:
        """The traced field names, in the config's order (`env_params` not included)."""
        return tuple(self._values)

    def __getattr__(self, name):
        values = object.__getattribute__(self, "_values")
        if name in values:
            return values[name]
        raise AttributeError(f"Hyperparams has no field {name!r}; its fields are "
                             f"{', '.join(list(values) + ['env_params'])}.")

    def __setattr__(self, name, value):
        raise dataclasses.FrozenInstanceError(f"Hyperparams is frozen: use hparams.replace({name}=...).")

    def __repr__(self):
        items = ", ".join(f"{k}={v!r}" for k, v in self._values.items())
        return f"Hyperparams({items}, env_params={self.env_params!r})"

    def tree_flatten_with_keys(self):
        keys = [jax.tree_util.GetAttrKey(k) for k in self._values] + [jax.tree_util.GetAttrKey("env_params")]
        children = list(self._values.values()) + [self.env_params]
        return list(zip(keys, children, strict=True)), (self._config_cls, tuple(self._values))

    @classmethod
    def tree_unflatten(cls, aux, children):
        config_cls, names = aux
        return cls(config_cls, dict(zip(names, children[:-1], strict=True)), children[-1])

    def replace(self, **changes) -> Hyperparams:
        """A copy with `changes`; a name that is no traced hyperparameter is refused, with where it
        lives (a static config field, an env param, or the closest names)."""
        names = list(self._values) + ["env_params"]
        for name in changes:
            if name in names:
                continue
            env_fields = ([f.name for f in dataclasses.fields(self.env_params)]
                          if dataclasses.is_dataclass(self.env_params) else [])
            config = self._config_cls.__name__
            if name in env_fields:
                fix = ("it is an env param: "
                       f"hparams.replace(env_params=hparams.env_params.replace({name}=...))")
            elif name in {f.name for f in dataclasses.fields(self._config_cls)}:
                fix = (f"it is a static {config} field (it fixes shapes or control flow): "
                       f"make_train(config.replace({name}=...)) compiles a new program")
            else:
                close = difflib.get_close_matches(name, names + env_fields, n=3)
                fix = f"the closest are {', '.join(close)}" if close else f"its fields are {', '.join(names)}"
            raise TypeError(f"Hyperparams has no field {name!r}: {fix}.")
        env_params = changes.pop("env_params", self.env_params)
        return Hyperparams(self._config_cls, {**self._values, **changes}, env_params)


def number_dtype(x) -> np.dtype | None:
    """The dtype the trainer computes with for a Python number or a weakly typed array: bool, int32
    or float32, whatever jax_enable_x64. None for any other value (it keeps its own dtype).

    Env params default to Python numbers (dataclass fields, `config.env_params`), which are weakly
    typed under jit: they take the 32-bit type of the env state they meet. As arrays of these
    dtypes they compute alike, and a run's hparams fresh from `train_run` (which converts them) and
    restored from its checkpoint have one signature; float64 or int64 arrays (what numpy makes of a
    Python number under x64) would make a float32 env state float64.
    """
    if isinstance(x, bool | np.bool_):
        return np.dtype(np.bool_)
    if not jax.typeof(x).weak_type:
        return None
    dtype = jax.typeof(x).dtype
    if jnp.issubdtype(dtype, jnp.integer):
        return np.dtype(np.int32)
    return np.dtype(np.float32) if jnp.issubdtype(dtype, jnp.floating) else None


def strong_hparams(hparams: Hyperparams) -> Hyperparams:
    """`hparams` with its Python numbers and weakly typed arrays as arrays of `number_dtype`."""
    return jax.tree.map(lambda x: x if (d := number_dtype(x)) is None else jnp.asarray(x, d), hparams)


class OnPolicyConfig:
    """What every algorithm's config shares: the methods below, the fields in `COMMON_FIELDS`
    (each config declares them itself, in its own order and with its own defaults) and their
    validation. Not a config itself: `PPOConfig`, `A2CConfig` and `ReinforceConfig` are.

    A subclass is a frozen dataclass that sets `algo` and the class attributes that group its fields
    for conversion and validation, and may add checks in `_check_structure` (after the sizes) and
    `_check_rest` (after the numbers' ranges).
    """

    #: The algorithm's short name: "ppo", "a2c" or "reinforce" (`CONFIGS` maps it back to the class).
    algo: ClassVar[str] = ""
    #: Fields that must be ints > 0.
    _INT_FIELDS: ClassVar[tuple[str, ...]] = ("num_envs", "num_steps", "total_timesteps")
    #: Static fields that are numbers (besides the traced ones); `_OPTIONAL_NUMBER_FIELDS` may be None.
    _NUMBER_FIELDS: ClassVar[tuple[str, ...]] = ("log_std_init",)
    _OPTIONAL_NUMBER_FIELDS: ClassVar[tuple[str, ...]] = ()
    #: Fields that must be True or False.
    _BOOL_FIELDS: ClassVar[tuple[str, ...]] = ("anneal_lr", "normalize_obs", "normalize_reward")
    #: Why this algorithm has no field that another's config has (the unknown-name error adds it).
    _MISSING_FIELD_NOTES: ClassVar[dict[str, str]] = {}
    #: The recurrent cell of the network: a field of PPOConfig; the other algorithms' networks are
    #: feed-forward, which this says, so that the trainer reads `config.recurrent` of every config.
    recurrent: ClassVar[str | None] = None
    #: Multi-agent choices: fields of PPOConfig; the other algorithms run IPPO with shared parameters,
    #: which these say, so that the multi-agent trainer reads them from every config.
    critic: ClassVar[str] = "decentralized"
    share_parameters: ClassVar[bool] = True
    agent_id: ClassVar[bool] = True
    clip_grad_per_network: ClassVar[bool] = False
    #: Whether a truncated episode (time limit) bootstraps from V of its final observation: a field of
    #: PPOConfig and A2CConfig; REINFORCE never bootstraps, which this says for the trainer.
    bootstrap_truncation: ClassVar[bool] = True

    def __new__(cls, *args, **kwargs):
        # Before the dataclass __init__: an unknown keyword gets a "did you mean" instead of
        # Python's bare "unexpected keyword argument".
        _check_names(cls, kwargs)
        return super().__new__(cls)

    def __post_init__(self):
        # Normalise containers so the config is hashable and prints the same however it was built,
        # and NumPy/JAX scalars to Python numbers, so that it is hashable and writes as JSON.
        object.__setattr__(self, "hidden_sizes", _as_int_tuple(self.hidden_sizes))
        object.__setattr__(self, "env_params", _as_env_params(self.env_params, type(self).__name__))
        numbers = self.traced_fields() + self._NUMBER_FIELDS + self._OPTIONAL_NUMBER_FIELDS
        for name in self._INT_FIELDS + numbers:
            value = _as_python_number(getattr(self, name), integer=name in self._INT_FIELDS)
            object.__setattr__(self, name, value)
        _validate(self)

    def _check_structure(self) -> None:
        """The algorithm's own checks of static choices, after the sizes are known to be ints."""

    def _range_checks(self) -> dict[str, tuple[bool, str]]:
        """(in range?, the rule) of the algorithm's own static numbers."""
        return {}

    def _check_rest(self) -> None:
        """The algorithm's own checks after every number is known to be in range."""

    def check_env_params(self, env_params) -> None:
        """The algorithm's checks that need the env's params (`make_train` calls it before anything
        compiles); none by default."""

    def check_time_limit(self, limit: int | None, keyword: str, note: str = "") -> None:
        """The algorithm's rule on the env's time limit `limit` (None: none known), set by the env's
        `keyword`; `note` ends the error's fix. Both learners call it: the fused trainer through
        `check_env_params`, the host trainer with Gymnasium's limit. None by default."""

    # Derived values are computed, never stored.
    @property
    def batch_size(self) -> int:
        """Transitions collected per update: num_envs * num_steps."""
        return self.num_envs * self.num_steps

    @property
    def num_updates(self) -> int:
        return self.total_timesteps // self.batch_size

    @property
    def env_steps(self) -> int:
        """Env steps actually taken: num_updates * batch_size (<= total_timesteps)."""
        return self.num_updates * self.batch_size

    @classmethod
    def traced_fields(cls) -> tuple[str, ...]:
        """The names of the traced fields (the leaves of `hparams()`), in declaration order."""
        return traced_fields(cls)

    def static_part(self):
        """This config with every traced field at its default: what fixes the compiled program."""
        defaults = {f.name: f.default for f in dataclasses.fields(self) if f.metadata.get("traced")}
        return self.replace(**defaults)

    def replace(self, **changes):
        _check_names(type(self), changes)
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """The fields as plain Python values (JSON-ready). The algorithm is the class, not a key:
        `CONFIGS[config.algo].from_dict(d)` rebuilds the config."""
        d = dataclasses.asdict(self)
        d["hidden_sizes"] = list(self.hidden_sizes)
        d["env_params"] = dict(self.env_params)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]):
        _check_names(cls, d)
        return cls(**d)

    def hparams(self, env_params=None) -> Hyperparams:
        """The traced hyperparameters as float32 arrays, with the env's params.

        Args:
          env_params: the env's params; default: `fusedrl.make(env_id, **self.env_params)[1]`.
        """
        if env_params is None:
            env_params = make(self.env_id, **self.env_params)[1]
        values = {f: jnp.asarray(getattr(self, f), jnp.float32) for f in self.traced_fields()}
        return Hyperparams(type(self), values, env_params)


#: The fields every algorithm's config has.
COMMON_FIELDS = ("env_id", "num_envs", "num_steps", "total_timesteps", "lr", "anneal_lr", "gamma", "ent_coef",
                 "max_grad_norm", "hidden_sizes", "activation", "log_std_init", "network", "normalize_obs",
                 "normalize_reward", "compute_dtype", "env_params")


@dataclasses.dataclass(frozen=True)
class PPOConfig(OnPolicyConfig):
    """Configuration of a PPO run. Field names follow PureJaxRL's (lower-case).

    Static (a change recompiles): env_id, num_envs, num_steps, total_timesteps, update_epochs,
    num_minibatches, anneal_lr, hidden_sizes, activation, log_std_init, network, normalize_obs,
    normalize_reward, normalize_adv, clip_value_loss, target_kl, recurrent, recurrent_size,
    compute_dtype, env_params, critic, share_parameters, agent_id, bootstrap_truncation,
    clip_grad_per_network.
    Traced (vmappable, see `traced_fields()`): lr, gamma, gae_lambda, clip_eps, ent_coef, vf_coef,
    max_grad_norm; and the env's params (physics), which start from `fusedrl.make(env_id)`'s
    defaults with `env_params` overrides applied.

    Fields:
      env_id: a registered env id ("CartPole-v1", "gymnax:...", "gymnasium:..." for the host bridge).
      num_envs, num_steps: a rollout is num_steps steps of num_envs envs (batch_size transitions).
      total_timesteps: env steps of the run; num_updates = total_timesteps // batch_size.
      update_epochs, num_minibatches: each update takes update_epochs passes over the rollout, each
        shuffled and cut into num_minibatches minibatches, one Adam step (eps 1e-5) per minibatch.
      lr: Adam's learning rate.
      anneal_lr: decay it linearly per update (constant within one), from lr at the first update
        to lr / num_updates at the last; steps skipped by target_kl still advance the schedule.
      gamma, gae_lambda: discount and GAE lambda. Truncated episodes bootstrap from V of their
        final observation, terminated ones do not (see bootstrap_truncation).
      clip_eps: the policy ratio's clip range, and also the value clip's (see clip_value_loss).
      ent_coef, vf_coef: weights of the entropy bonus and the value loss 0.5 * E[(V - target)^2].
      max_grad_norm: clip the gradient to this global norm before Adam (inf: no clipping); each
        network's on its own with clip_grad_per_network.
      hidden_sizes, activation: the MLP torsos (separate for actor and critic); orthogonal init,
        scale sqrt(2) for hidden layers, 0.01 for the policy head and 1 for the value head.
      log_std_init: continuous actions: the initial (state-independent, learned) log-std. Actions
        are sampled unclipped (the log-prob is the sample's) and clipped to the bounds for the env.
      network: None for the MLP actor-critic; "cnn" for the built-in one with a conv torso on
        image-like observations ([H, W, C] arrays, or such entries of dict observations; see
        docs/networks.md), the MLP torsos (hidden_sizes) after it; or "module:function", a function
        that builds your own flax module (see `fusedrl.networks.build_network`); hidden_sizes,
        activation and log_std_init then go to it in the config, for it to use or ignore.
      normalize_obs: running mean/variance of observations (updated with each step's observations,
        then applied; clipped to +-10); evaluation and saved policies use the run's final statistics.
      normalize_reward: divide rewards by the running std of the discounted return (SB3's
        VecNormalize: scaled, not shifted, clipped to +-10); episode returns are reported raw.
      normalize_adv: standardise advantages per minibatch (population std, + 1e-8); value targets
        are the unnormalised advantages plus the rollout's values.
      clip_value_loss: 0.5 * E[max((V - target)^2, (V_old + clip(V - V_old, +-clip_eps) - target)^2)]
        (PureJaxRL's and CleanRL's), with V_old the rollout's values: clip_eps is in the value's own
        units, so without normalize_reward it limits how fast large returns are learned.
      target_kl: None, or stop an update's remaining minibatch steps once one starts more than
        1.5 * target_kl (approx. KL, k3 estimator) from the rollout's policy (SB3's rule).
      recurrent, recurrent_size: None for the feed-forward networks above, or "gru" / "lstm": a
        recurrent actor-critic (`fusedrl.networks.RecurrentActorCritic`) whose cell state, of
        recurrent_size units, is carried through the rollout and reset where an env's episode
        starts; the update replays each env's sequence from the state it had, with minibatches of
        whole envs (num_minibatches must divide num_envs).
      compute_dtype: "float32", or "bfloat16" for mixed precision: the built-in networks (MLP, CNN,
        recurrent) compute their layers in bfloat16 from float32 parameters (Adam's state stays
        float32; log-probabilities and losses are computed in float32). Not with your own network.
      env_params: overrides of the env's params (physics constants, time limit).
      critic: multi-agent envs: "decentralized" (IPPO: each agent's value from its own observation and
        id) or "centralized" (MAPPO: from the global state, the env's `world_state` or all agents'
        observations). Refused on a single-agent env.
      share_parameters: multi-agent envs: one network for every agent (each sees its one-hot id), or
        False for one per agent. See fusedrl.train.multiagent.
      agent_id: multi-agent envs: the networks read each agent's one-hot id beside its observation
        (and beside the global state, for the centralised critic); False leaves it out of their
        input (JaxMARL's MAPPO scripts), so one shared network acts alike for agents that see the
        same thing. Refused on a single-agent env.
      bootstrap_truncation: True: an episode cut by a time limit (truncated) bootstraps from V of
        its final observation, as the time limit is not a state of the task. False: it ends like a
        terminated one, with no bootstrap (PureJaxRL's and JaxMARL's scripts): the fixed-horizon
        return, for a task whose horizon is part of it and not shown in the observation.
      clip_grad_per_network: with critic="centralized" (two networks): clip the actor's gradient and
        the critic's each to max_grad_norm on its own, as two optimisers would (JaxMARL's MAPPO),
        instead of their joint global norm. Refused with one actor-critic.
    """

    env_id: str = "CartPole-v1"
    num_envs: int = 4
    num_steps: int = 128
    total_timesteps: int = 500_000
    update_epochs: int = 4
    num_minibatches: int = 4
    lr: float = traced(2.5e-4)
    anneal_lr: bool = True
    gamma: float = traced(0.99)
    gae_lambda: float = traced(0.95)
    clip_eps: float = traced(0.2)
    ent_coef: float = traced(0.01)
    vf_coef: float = traced(0.5)
    max_grad_norm: float = traced(0.5)
    hidden_sizes: tuple[int, ...] = (64, 64)
    activation: str = "tanh"
    log_std_init: float = 0.0  # continuous actions: the initial log-std of the Gaussian policy
    # None: the MLP actor-critic above. "cnn": with a conv torso on image observations. "module:function":
    # your own network (fusedrl.networks.build_network).
    network: str | None = None
    normalize_obs: bool = False
    normalize_reward: bool = False
    normalize_adv: bool = True
    clip_value_loss: bool = True
    # None: every update takes all its minibatch steps. A number: an update stops early once a
    # minibatch starts more than 1.5 * target_kl (approx. KL) from the rollout's policy (as SB3).
    target_kl: float | None = None
    recurrent: str | None = None
    recurrent_size: int = 128
    compute_dtype: str = "float32"
    env_params: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    # Multi-agent envs (fusedrl.train.multiagent): "decentralized" (IPPO: each agent's critic reads its own
    # observation) or "centralized" (MAPPO: the global state); and one network for all agents, or one each.
    critic: str = "decentralized"
    share_parameters: bool = True
    # Multi-agent envs: whether the networks read each agent's one-hot id (it routes rows in any case).
    agent_id: bool = True
    # False: a time limit ends the return like a terminal state (no bootstrap from V of the final obs).
    bootstrap_truncation: bool = True
    # MAPPO: clip the actor's and the critic's gradients each on its own (two optimisers' way).
    clip_grad_per_network: bool = False

    algo: ClassVar[str] = "ppo"
    _INT_FIELDS: ClassVar[tuple[str, ...]] = OnPolicyConfig._INT_FIELDS + ("update_epochs", "num_minibatches",
                                                                           "recurrent_size")
    _OPTIONAL_NUMBER_FIELDS: ClassVar[tuple[str, ...]] = ("target_kl",)
    _BOOL_FIELDS: ClassVar[tuple[str, ...]] = (*OnPolicyConfig._BOOL_FIELDS, "normalize_adv",
                                               "clip_value_loss", "share_parameters", "agent_id",
                                               "bootstrap_truncation", "clip_grad_per_network")
    _MISSING_FIELD_NOTES: ClassVar[dict[str, str]] = {
        "optimizer": "PPO uses Adam (eps 1e-5)",
        "rmsprop_alpha": "PPO uses Adam (eps 1e-5)",
        "rmsprop_eps": "PPO uses Adam (eps 1e-5)",
    }

    @property
    def minibatch_size(self) -> int:
        return self.batch_size // self.num_minibatches

    def _check_structure(self) -> None:
        if self.batch_size % self.num_minibatches:
            divisors = [d for d in range(1, min(self.batch_size, 64) + 1) if self.batch_size % d == 0]
            raise ValueError(
                f"num_minibatches={self.num_minibatches} does not divide the batch "
                f"(num_envs * num_steps = {self.num_envs} * {self.num_steps} = {self.batch_size}); "
                f"choose num_minibatches among {divisors} or change num_envs/num_steps."
            )

    def _range_checks(self) -> dict[str, tuple[bool, str]]:
        return {"target_kl": (self.target_kl is None or self.target_kl > 0,
                              "must be > 0 (e.g. 0.01), or None to turn early stopping off")}

    def _check_rest(self) -> None:
        if self.normalize_adv and self.minibatch_size == 1:
            raise ValueError(
                f"num_minibatches={self.num_minibatches} makes minibatches of one transition (batch "
                f"{self.batch_size}), and normalize_adv=True then makes every advantage 0: the policy would "
                f"never learn. Use fewer minibatches, or normalize_adv=False."
            )
        _validate_recurrent(self)
        if self.critic not in ("decentralized", "centralized"):
            raise ValueError(f"critic must be 'decentralized' (IPPO: each agent's critic reads its own "
                             f"observation) or 'centralized' (MAPPO: the global state), got {self.critic!r}.")
        if self.clip_grad_per_network and self.critic != "centralized":
            raise ValueError("clip_grad_per_network=True clips the actor's and the critic's gradients apart, "
                             "which needs two networks: critic='centralized' (MAPPO). With one actor-critic "
                             "(critic='decentralized') use clip_grad_per_network=False.")


#: The optimisers A2C and REINFORCE offer (`optimizer`).
OPTIMIZERS = ("rmsprop", "adam")


def _check_optimizer(c) -> None:
    if not isinstance(c.optimizer, str) or c.optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer must be 'rmsprop' or 'adam', got {c.optimizer!r}: set "
                         f"optimizer='rmsprop' (RMSprop as in the A3C paper and SB3) or optimizer='adam'.")


def _optimizer_range_checks(c) -> dict[str, tuple[bool, str]]:
    return {
        "rmsprop_alpha": (0 <= c.rmsprop_alpha < 1,
                          "must be in [0, 1) (RMSprop's decay of the squared-gradient average; "
                          "0.99 is SB3's)"),
        "rmsprop_eps": (0 < c.rmsprop_eps < math.inf, "must be > 0 and finite (1e-5 is SB3's)"),
    }


_NO_CLIPPING = "{algo} has no clipping (its policy loss is -mean(log_prob * advantage))"
_ONE_STEP = ("{algo} takes one gradient step per rollout on the whole batch; for several epochs of "
             "minibatches use fusedrl.PPOConfig")


@dataclasses.dataclass(frozen=True)
class A2CConfig(OnPolicyConfig):
    """Configuration of an A2C run: synchronous advantage actor-critic (Mnih et al. 2016, the
    synchronous form of A3C), with Stable-Baselines3's defaults.

    Each update is one rollout of num_steps steps of num_envs envs and one gradient step on the
    whole batch of the loss -mean(log_prob * A) + vf_coef * 0.5 * mean((V - target)^2)
    - ent_coef * entropy, with A the n-step (gae_lambda 1) or GAE advantages.

    Static (a change recompiles): env_id, num_envs, num_steps, total_timesteps, anneal_lr,
    hidden_sizes, activation, log_std_init, network, normalize_obs, normalize_reward, normalize_adv,
    optimizer, rmsprop_alpha, rmsprop_eps, compute_dtype, env_params, bootstrap_truncation.
    Traced (vmappable): lr, gamma, gae_lambda, ent_coef, vf_coef, max_grad_norm; and the env's params.

    Fields:
      env_id: a registered env id ("CartPole-v1", "gymnax:..."), or "gymnasium:<id>" for a
        Gymnasium env stepped on the host (the host bridge, `fusedrl.bridge`).
      num_envs, num_steps: a rollout is num_steps steps of num_envs envs (batch_size transitions);
        each update takes one gradient step on it.
      total_timesteps: env steps of the run; num_updates = total_timesteps // batch_size.
      lr: the optimiser's learning rate.
      anneal_lr: decay it linearly per update, from lr at the first update to lr / num_updates.
      gamma, gae_lambda: discount and GAE lambda. gae_lambda 1 gives the n-step returns of the A3C
        paper (bootstrapped from V at the rollout's end); < 1 gives GAE. Truncated episodes
        bootstrap from V of their final observation, terminated ones do not (see
        bootstrap_truncation).
      ent_coef, vf_coef: weights of the entropy bonus and the value loss 0.5 * E[(V - target)^2].
      max_grad_norm: clip the gradient to this global norm before the optimiser (inf: no clipping).
      hidden_sizes, activation: the MLP torsos (separate for actor and critic), as PPOConfig's.
      log_std_init: continuous actions: the initial (state-independent, learned) log-std.
      network: None for the MLP actor-critic, "cnn", or "module:function" (see PPOConfig.network).
      normalize_obs: running mean/variance of observations, as PPOConfig's.
      normalize_reward: divide rewards by the running std of the discounted return, as PPOConfig's.
      normalize_adv: standardise advantages per batch (population std, + 1e-8); off in SB3's A2C.
      optimizer: "rmsprop" (PyTorch's RMSprop as SB3 uses it: not centered, eps added to the root
        of the squared-gradient average) or "adam" (eps 1e-5).
      rmsprop_alpha, rmsprop_eps: RMSprop's decay of the squared-gradient average and its epsilon.
      compute_dtype: "float32", or "bfloat16" for mixed precision in the built-in networks, as
        PPOConfig's (parameters and optimiser state float32; log-probabilities and losses float32).
      env_params: overrides of the env's params (physics constants, time limit).
      bootstrap_truncation: False ends a time-limited episode like a terminated one, with no
        bootstrap, as PPOConfig's.
    """

    env_id: str = "CartPole-v1"
    num_envs: int = 8
    num_steps: int = 5
    total_timesteps: int = 500_000
    lr: float = traced(7e-4)
    anneal_lr: bool = False
    gamma: float = traced(0.99)
    gae_lambda: float = traced(1.0)
    ent_coef: float = traced(0.0)
    vf_coef: float = traced(0.5)
    max_grad_norm: float = traced(0.5)
    hidden_sizes: tuple[int, ...] = (64, 64)
    activation: str = "tanh"
    log_std_init: float = 0.0
    network: str | None = None
    normalize_obs: bool = False
    normalize_reward: bool = False
    normalize_adv: bool = False
    optimizer: str = "rmsprop"
    rmsprop_alpha: float = 0.99
    rmsprop_eps: float = 1e-5
    compute_dtype: str = "float32"
    env_params: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    bootstrap_truncation: bool = True

    algo: ClassVar[str] = "a2c"
    _NUMBER_FIELDS: ClassVar[tuple[str, ...]] = ("log_std_init", "rmsprop_alpha", "rmsprop_eps")
    _BOOL_FIELDS: ClassVar[tuple[str, ...]] = OnPolicyConfig._BOOL_FIELDS + ("normalize_adv",
                                                                             "bootstrap_truncation")
    _MISSING_FIELD_NOTES: ClassVar[dict[str, str]] = {
        "clip_eps": _NO_CLIPPING.format(algo="A2C"),
        "clip_value_loss": _NO_CLIPPING.format(algo="A2C"),
        "target_kl": _ONE_STEP.format(algo="A2C"),
        "update_epochs": _ONE_STEP.format(algo="A2C"),
        "num_minibatches": _ONE_STEP.format(algo="A2C"),
        "baseline": "A2C always learns a critic (its advantages need V)",
        "normalize_returns": "A2C standardises advantages with normalize_adv",
    }

    def _check_structure(self) -> None:
        _check_optimizer(self)

    def _range_checks(self) -> dict[str, tuple[bool, str]]:
        return _optimizer_range_checks(self)

    def _check_rest(self) -> None:
        if self.normalize_adv and self.batch_size == 1:
            raise ValueError("num_envs=1 and num_steps=1 make a batch of one transition, and "
                             "normalize_adv=True then makes its advantage 0: the policy would never learn. "
                             "Use more envs or steps, or normalize_adv=False.")


@dataclasses.dataclass(frozen=True)
class ReinforceConfig(OnPolicyConfig):
    """Configuration of a REINFORCE run (Williams 1992): Monte-Carlo returns of whole episodes, with
    an optional learned baseline and return normalisation.

    Each update is one rollout of num_steps steps of num_envs envs and one gradient step on the
    whole batch of the loss -mean(log_prob * A) + vf_coef * 0.5 * mean((V - G)^2) - ent_coef *
    entropy, with G_t the discounted return-to-go of step t's episode and A = G - V(s_t) (baseline)
    or G. Means are over the steps that have a return (below).

    Episodes that cross a rollout boundary: returns-to-go are computed backward within the rollout,
    and nothing is bootstrapped. A step whose episode has not ended by the rollout's last step has
    no Monte-Carlo return: its weight in the loss is 0 (and it is left out of the means and of the
    normalisation). The episode's later steps, in the next rollout, have exact returns-to-go (the
    return from there on). A time-limit truncation ends the return like a termination: G is the sum
    of the rewards up to the limit. So that every rollout completes episodes, num_steps must be at
    least the env's time limit (`max_steps_in_episode` of its params, checked by make_train for
    envs whose params have one, against the config's env params; a time limit changed through the
    traced hparams is not checked).

    Static (a change recompiles): env_id, num_envs, num_steps, total_timesteps, anneal_lr,
    hidden_sizes, activation, log_std_init, network, normalize_obs, normalize_reward, baseline,
    normalize_returns, optimizer, rmsprop_alpha, rmsprop_eps, compute_dtype, env_params.
    Traced (vmappable): lr, gamma, ent_coef, vf_coef, max_grad_norm; and the env's params.

    Fields:
      env_id: a registered env id ("CartPole-v1", "gymnax:..."), or "gymnasium:<id>" for a
        Gymnasium env stepped on the host (the host bridge, `fusedrl.bridge`).
      num_envs, num_steps: a rollout is num_steps steps of num_envs envs (batch_size transitions);
        each update takes one gradient step on it. num_steps must be >= the env's time limit.
      total_timesteps: env steps of the run; num_updates = total_timesteps // batch_size.
      lr: the optimiser's learning rate.
      anneal_lr: decay it linearly per update, from lr at the first update to lr / num_updates.
      gamma: the discount of the returns-to-go.
      ent_coef: weight of the entropy bonus.
      vf_coef: weight of the baseline's loss 0.5 * E[(V - G)^2] (with baseline).
      max_grad_norm: clip the gradient to this global norm before the optimiser (inf: no clipping).
      hidden_sizes, activation: the MLP torsos (separate for actor and critic), as PPOConfig's.
      log_std_init: continuous actions: the initial (state-independent, learned) log-std.
      network: None for the MLP actor-critic, "cnn", or "module:function" (see PPOConfig.network).
      normalize_obs: running mean/variance of observations, as PPOConfig's.
      normalize_reward: divide rewards by the running std of the discounted return, as PPOConfig's.
      baseline: learn V on the returns and use A = G - V; False: A = G, and the critic is not trained.
      normalize_returns: standardise the advantages (G - V, or G) per batch over the steps that have
        a return (population std, + 1e-8).
      optimizer: "adam" (eps 1e-5) or "rmsprop" (as A2CConfig's).
      rmsprop_alpha, rmsprop_eps: RMSprop's decay of the squared-gradient average and its epsilon.
      compute_dtype: "float32", or "bfloat16" for mixed precision in the built-in networks, as
        PPOConfig's (parameters and optimiser state float32; log-probabilities and losses float32).
      env_params: overrides of the env's params (physics constants, time limit).
    """

    env_id: str = "CartPole-v1"
    num_envs: int = 8
    num_steps: int = 500
    total_timesteps: int = 500_000
    lr: float = traced(1e-3)
    anneal_lr: bool = False
    gamma: float = traced(0.99)
    ent_coef: float = traced(0.0)
    vf_coef: float = traced(0.5)
    max_grad_norm: float = traced(0.5)
    hidden_sizes: tuple[int, ...] = (64, 64)
    activation: str = "tanh"
    log_std_init: float = 0.0
    network: str | None = None
    normalize_obs: bool = False
    normalize_reward: bool = False
    baseline: bool = True
    normalize_returns: bool = True
    optimizer: str = "adam"
    rmsprop_alpha: float = 0.99
    rmsprop_eps: float = 1e-5
    compute_dtype: str = "float32"
    env_params: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    algo: ClassVar[str] = "reinforce"
    _NUMBER_FIELDS: ClassVar[tuple[str, ...]] = ("log_std_init", "rmsprop_alpha", "rmsprop_eps")
    _BOOL_FIELDS: ClassVar[tuple[str, ...]] = OnPolicyConfig._BOOL_FIELDS + ("baseline", "normalize_returns")
    _MISSING_FIELD_NOTES: ClassVar[dict[str, str]] = {
        "clip_eps": _NO_CLIPPING.format(algo="REINFORCE"),
        "clip_value_loss": _NO_CLIPPING.format(algo="REINFORCE"),
        "target_kl": _ONE_STEP.format(algo="REINFORCE"),
        "update_epochs": _ONE_STEP.format(algo="REINFORCE"),
        "num_minibatches": _ONE_STEP.format(algo="REINFORCE"),
        "gae_lambda": ("REINFORCE uses Monte-Carlo returns, never bootstrapped; for n-step or GAE advantages "
                       "use fusedrl.A2CConfig"),
        "normalize_adv": "REINFORCE's is normalize_returns",
        "bootstrap_truncation": ("REINFORCE never bootstraps: a time limit ends the return like a "
                                 "termination"),
    }

    def _check_structure(self) -> None:
        _check_optimizer(self)

    def _range_checks(self) -> dict[str, tuple[bool, str]]:
        return _optimizer_range_checks(self)

    def check_env_params(self, env_params) -> None:
        """Refuses rollouts shorter than the env's time limit (`env_params.max_steps_in_episode`,
        where the params have it): every rollout must be able to complete an episode."""
        limit = getattr(env_params, "max_steps_in_episode", None)
        if limit is None or isinstance(limit, jax.core.Tracer) or np.ndim(limit) != 0:
            return
        self.check_time_limit(int(limit), "max_steps_in_episode")

    def check_time_limit(self, limit: int | None, keyword: str, note: str = "") -> None:
        """REINFORCE learns only from episodes that end inside a rollout (nothing is bootstrapped):
        a rollout shorter than the time limit is refused, with the env's `keyword` to lower it."""
        if limit is not None and self.num_steps < limit:
            raise ValueError(
                f"num_steps={self.num_steps} is shorter than {self.env_id}'s time limit "
                f"({keyword}={limit}): REINFORCE learns only from episodes that end inside a "
                f"rollout, so most rollouts would have none. Set num_steps >= {limit}, or lower the time "
                f"limit with env_params={{'{keyword}': {self.num_steps}}}{note}."
            )


#: Each algorithm's config class, by its short name (`config.algo`).
CONFIGS: dict[str, type[OnPolicyConfig]] = {"ppo": PPOConfig, "a2c": A2CConfig, "reinforce": ReinforceConfig}


def config_class(algo: str) -> type[OnPolicyConfig]:
    """The config class of algorithm `algo` ("ppo", "a2c" or "reinforce")."""
    if algo not in CONFIGS:
        raise ValueError(f"algo must be one of {', '.join(repr(a) for a in CONFIGS)}, got {algo!r}.")
    return CONFIGS[algo]

class _FrozenDict(dict):
    """A dict that refuses mutation and can be hashed (configs are frozen); `owner` names the config
    class in the error."""

    owner = "config"  # set to the config class's name by `_as_env_params`

    def __hash__(self):
        return hash(tuple(sorted(self.items())))

    def _immutable(self, *args, **kwargs):
        raise TypeError(f"{self.owner}.env_params is read-only; use config.replace(env_params={{...}}).")

    __setitem__ = __delitem__ = update = pop = popitem = clear = setdefault = _immutable


def _check_names(config_cls, d: Mapping[str, Any]) -> None:
    valid = [f.name for f in dataclasses.fields(config_cls)]
    for name in d:
        if name in valid:
            continue
        owners = [c.__name__ for c in CONFIGS.values()
                  if c is not config_cls and name in {f.name for f in dataclasses.fields(c)}]
        if owners:  # another algorithm's field
            note = config_cls._MISSING_FIELD_NOTES.get(name)
            raise TypeError(f"{config_cls.__name__} has no field {name!r}: {name} is a field of "
                            f"{' and '.join(owners)}{'; ' + note if note else ''}. Valid fields: "
                            f"{', '.join(valid)}.")
        close = close_names(name, valid)
        hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        raise TypeError(f"{config_cls.__name__} has no field {name!r}.{hint} Valid fields: "
                        f"{', '.join(valid)}.")


#: PPOConfig's traced fields, in declaration order: the name kept from when PPO was the one algorithm.
#: Each config class has its own, `A2CConfig.traced_fields()` and so on.
TRACED_FIELDS = traced_fields(PPOConfig)



def _as_python_number(v, *, integer: bool):
    """A NumPy or JAX scalar of a real number type as the Python int/float it holds; anything else
    unchanged (for `_validate` to judge). Booleans stay booleans: they are refused there."""
    if v is None or type(v) in (bool, int, float):
        return v
    dtype = getattr(v, "dtype", None)
    if dtype is None or getattr(v, "shape", None) != () or isinstance(v, jax.core.Tracer):
        return v
    if integer and dtype.kind in "iu":
        return int(v)
    if not integer and dtype.kind in "iuf":
        return float(v)
    return v


def _as_int_tuple(x) -> tuple[int, ...]:
    if isinstance(x, int):
        return (x,)
    if isinstance(x, np.ndarray | jax.Array) and x.ndim == 1 and x.dtype.kind in "iu":
        return tuple(int(w) for w in x)
    if not isinstance(x, list | tuple):  # a set or dict has no layer order; a string is no widths
        raise TypeError(f"hidden_sizes must be a list or tuple of positive ints (one per hidden layer), "
                        f"got {x!r} ({type(x).__name__}).")
    return tuple(int(w) if isinstance(w, np.integer) else w for w in x)


def _as_env_params(x, owner: str) -> _FrozenDict:
    if not isinstance(x, Mapping):
        raise TypeError(
            f"env_params must be a mapping of the env's param names to numbers, e.g. "
            f"{{'gravity': 12.0}}, got {x!r} ({type(x).__name__})."
        )
    # A 0-d NumPy or JAX array (jnp.float32(12.0)) is a number: as its NumPy scalar (the message
    # below, for arrays, told it to vary the value through train's hparams).
    x = {k: np.asarray(v)[()] if isinstance(v, np.ndarray | jax.Array) and np.ndim(v) == 0
         and not isinstance(v, jax.core.Tracer) else v for k, v in x.items()}
    for name, v in x.items():
        if not isinstance(name, str):
            raise TypeError(f"env_params keys must be param names (str), got {name!r}.")
        if not isinstance(v, int | float | bool | np.generic):
            raise TypeError(
                f"env_params[{name!r}] must be a number (a physics constant or a time limit), got "
                f"{v!r} ({type(v).__name__}); to try several values, sweep it: "
                f"fusedrl.sweep(config, {name}=[...]). An array-valued env param cannot be set in the "
                f"config: it keeps its default there; pass another value to train through its hparams "
                f"(hp = config.hparams(); train(key, hp.replace(env_params=hp.env_params.replace("
                f"{name}=...))))."
            )
        if not isinstance(v, bool) and not math.isfinite(v):  # NaN or ±inf: no physics; trains to NaN
            got = "NaN" if v != v else repr(float(v))
            raise ValueError(f"env_params[{name!r}] must be a number, got {got}; "
                             f"give it a finite value (or leave it out for the env's default; for a "
                             f"limit that should never bind, a large finite one, e.g. 1e9).")
    # NumPy scalars become Python numbers: configs are written as JSON (run folders, checkpoints).
    frozen = _FrozenDict({k: v.item() if isinstance(v, np.generic) else v for k, v in x.items()})
    frozen.owner = owner
    return frozen


def _is_number(v) -> bool:
    """A real number (after `_as_python_number`, NumPy/JAX scalars are Python numbers already)."""
    return isinstance(v, int | float) and not isinstance(v, bool)


#: Each traced field's rule: (in range?, the rule as the error states it).
_RANGES = {
    "lr": (lambda x: 0 < x < math.inf, "must be > 0 and finite"),
    "gamma": (lambda x: 0 < x <= 1, "must be in (0, 1]"),
    "gae_lambda": (lambda x: 0 <= x <= 1, "must be in [0, 1]"),
    "clip_eps": (lambda x: 0 < x < math.inf, "must be > 0 and finite"),
    "ent_coef": (lambda x: 0 <= x < math.inf, "must be >= 0 and finite"),
    "vf_coef": (lambda x: 0 <= x < math.inf, "must be >= 0 and finite"),
    "max_grad_norm": (lambda x: x > 0, "must be > 0 (inf: no clipping)"),
}


def _range_checks(v: Mapping[str, float]) -> dict[str, tuple[bool, str]]:
    """(in range?, the rule) of each traced field's value in `v`."""
    return {name: (_RANGES[name][0](x), _RANGES[name][1]) for name, x in v.items()}


def _validate(c: OnPolicyConfig) -> None:
    if not isinstance(c.env_id, str) or not c.env_id:
        raise TypeError(f"env_id must be an environment id string, got {c.env_id!r}.")
    for name in c._INT_FIELDS:
        v = getattr(c, name)
        if not is_int(v):
            raise TypeError(f"{name} must be an int, got {v!r} ({type(v).__name__}).")
        if v <= 0:
            raise ValueError(f"{name} must be positive, got {v}.")
    if c.total_timesteps < c.batch_size:
        raise ValueError(
            f"total_timesteps={c.total_timesteps} is smaller than one update's batch "
            f"(num_envs * num_steps = {c.batch_size}); raise total_timesteps or lower num_envs/num_steps."
        )
    if c.total_timesteps >= 2**31:
        raise ValueError(f"total_timesteps={c.total_timesteps} must be < 2**31 (int32 step counters).")
    c._check_structure()
    traced = c.traced_fields()
    optional = tuple(name for name in c._OPTIONAL_NUMBER_FIELDS if getattr(c, name) is not None)
    for name in traced + c._NUMBER_FIELDS + optional:
        v = getattr(c, name)
        if not _is_number(v):
            raise TypeError(f"{name} must be a number, got {v!r} ({type(v).__name__}).")
    checks = {
        **_range_checks({name: getattr(c, name) for name in traced}),
        "log_std_init": (math.isfinite(c.log_std_init), "must be finite (0.0 is std 1, -1.0 std 0.37)"),
        **c._range_checks(),
    }
    for name, (ok, rule) in checks.items():
        if not ok:
            raise ValueError(f"{name} {rule}, got {getattr(c, name)}.")
    # Training holds the traced values in float32: one that passes above may not survive the cast
    # (lr=1e300 is inf there, lr=1e-50 is 0, gamma=1e-46 is 0).
    with np.errstate(over="ignore", under="ignore"):
        as_f32 = {name: float(np.float32(getattr(c, name))) for name in traced}
    checks32 = _range_checks(as_f32)
    for name, (ok, rule) in checks32.items():
        if not ok:
            raise ValueError(f"{name} {rule}, got {getattr(c, name)}: that is {as_f32[name]} in float32, the "
                             f"precision training uses.")
    c._check_rest()
    for name in c._BOOL_FIELDS:
        v = getattr(c, name)
        if not isinstance(v, bool):
            raise TypeError(f"{name} must be True or False, got {v!r}.")
    if not c.hidden_sizes or not all(is_int(w) and w > 0 for w in c.hidden_sizes):
        raise ValueError(f"hidden_sizes must be a non-empty sequence of positive ints, got {c.hidden_sizes}.")

    if not isinstance(c.activation, str) or c.activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {c.activation!r}.")
    if c.network is not None:
        if error := network_path_error(c.network):
            raise ValueError(f"network {error}")
    _validate_compute_dtype(c)


def _validate_compute_dtype(c) -> None:
    """Every algorithm's built-in networks (MLP, CNN, recurrent) take `compute_dtype`; a user's
    network does not (it picks its own dtypes)."""
    if c.compute_dtype not in ("float32", "bfloat16"):
        raise ValueError(f"compute_dtype must be 'float32' or 'bfloat16' (mixed precision), got "
                         f"{c.compute_dtype!r}.")

    custom = c.network is not None and c.network not in BUILTIN_NETWORKS  # "cnn" is built in
    if c.compute_dtype != "float32" and custom:
        raise ValueError(f"compute_dtype={c.compute_dtype!r} applies to the built-in networks only: set "
                         f"network=None (or 'cnn'), or compute_dtype='float32' (your own network "
                         f"picks its dtype itself, e.g. nn.Dense(64, dtype=jnp.bfloat16)).")


def _validate_recurrent(c) -> None:
    if c.recurrent is not None and c.recurrent not in RECURRENT_CELLS:
        raise ValueError(f"recurrent must be None (a feed-forward network) or one of "
                         f"{list(RECURRENT_CELLS)}, got {c.recurrent!r}.")
    if not is_int(c.recurrent_size) or c.recurrent_size <= 0:
        raise ValueError(f"recurrent_size must be a positive int (the cell's width, e.g. 128), got "
                         f"{c.recurrent_size!r}.")

    custom = c.network is not None and c.network not in BUILTIN_NETWORKS
    if c.recurrent is None:
        return
    if custom:
        raise ValueError(f"recurrent={c.recurrent!r} builds the built-in recurrent actor-critic, and network="
                         f"{c.network!r} names your own: set one of them (network=None for the built-in).")
    if c.num_envs % c.num_minibatches:
        divisors = [d for d in range(1, c.num_envs + 1) if c.num_envs % d == 0]
        raise ValueError(f"num_minibatches={c.num_minibatches} must divide num_envs={c.num_envs} with "
                         f"recurrent={c.recurrent!r}: minibatches are whole envs' sequences. Choose "
                         f"num_minibatches among {divisors}.")
