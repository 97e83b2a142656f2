"""Actor-critic networks: MLPs with separate actor and critic torsos (as PureJaxRL and CleanRL use for
PPO), a convolutional torso for image observations (`network="cnn"`), dict observations and action
masks, a recurrent (GRU/LSTM) actor-critic, and the checks a user's own network passes."""

from __future__ import annotations

import contextlib
import importlib
import inspect
import keyword
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

import flax
import flax.errors
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from fusedrl.distributions import Categorical, DiagGaussian, MultiCategorical, mask_policy
from fusedrl.initializers import orthogonal

ACTIVATIONS = {"tanh": nn.tanh, "relu": nn.relu, "gelu": nn.gelu, "silu": nn.silu}

#: The built-in network's computation dtypes (`compute_dtype`); parameters stay float32.
COMPUTE_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}


def compute_params(params, compute_dtype: str):
    """`params` with every layer's kernel and bias cast to `compute_dtype`, as the built-in
    networks' layers cast them when applied (their `dtype`); other parameters (a Gaussian's
    log-std) stay as they are. Applying a built-in network to the result gives its outputs on
    `params` bit for bit, with the casts done once: the rollout's loop reuses one set of parameters
    for every step, and XLA does not move the layers' casts out of the loop by itself (on a GPU,
    one kernel per layer per step). float32: `params` unchanged."""
    dtype = COMPUTE_DTYPES[compute_dtype]
    if dtype == jnp.float32:
        return params

    def cast(path, x):
        name = getattr(path[-1], "key", None)
        return x.astype(dtype) if name in ("kernel", "bias") and jnp.issubdtype(x.dtype, jnp.floating) else x

    return jax.tree_util.tree_map_with_path(cast, params)


class Dense(nn.Module):
    """`flax.linen.Dense` (same parameters: kernel [n, m], bias [m], always float32), computing in
    `dtype`, without implicit rank promotion."""

    features: int
    kernel_init: Callable = nn.initializers.lecun_normal()
    bias_init: Callable = nn.initializers.zeros
    dtype: Any = jnp.float32  # computation dtype; parameters are always float32

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        kernel = self._param("kernel", self.kernel_init, (x.shape[-1], self.features))
        bias = self._param("bias", self.bias_init, (self.features,))
        x, kernel, bias = (a.astype(self.dtype) for a in (x, kernel, bias))
        y = x @ kernel
        return y + bias.reshape((1,) * (y.ndim - 1) + (-1,))  # no implicit rank promotion

    def _param(self, name: str, init: Callable, shape: tuple[int, ...]) -> jax.Array:
        """`self.param(name, init, shape, float32)`, with the stored parameter's shape checked
        directly when applied: flax's own check traces `init` again (`jax.eval_shape`) at every
        call of the module, which made the initialisers a large share of a training program's
        tracing time."""
        if not self.has_variable("params", name):
            return self.param(name, init, shape, jnp.float32)
        value = nn.meta.unbox(self.get_variable("params", name))  # as self.param: no partitioning box
        if np.shape(value) != shape:
            raise flax.errors.ScopeParamShapeError(name, self.scope.path_text, np.shape(value), shape)
        return value


def _dense(features: int, scale: float, name: str, dtype: Any) -> Dense:
    return Dense(features, kernel_init=orthogonal(scale), bias_init=nn.initializers.zeros, dtype=dtype,
                 name=name)


def _torso(dense: Callable, act: Callable, widths: Sequence[int], prefix: str, x: jax.Array) -> jax.Array:
    """Hidden layers `{prefix}_0`, `{prefix}_1`, ... of `widths`, each followed by `act`."""
    hidden_scale = float(np.sqrt(2.0))
    for i, width in enumerate(widths):
        x = act(dense(width, hidden_scale, f"{prefix}_{i}")(x))
    return x


#: The observation entry that holds the allowed actions (bool [n] for Discrete(n), [sum(nvec)] for
#: MultiDiscrete): the built-in networks never encode it; they mask the policy's logits with it.
ACTION_MASK = "action_mask"

#: `network` values that name a built-in torso rather than "module:function".
BUILTIN_NETWORKS = ("cnn",)

#: Image-like observation leaves (rank 3 per env, [H, W, C]) at least this large in both spatial
#: dimensions get the Nature-DQN torso; smaller ones (MinAtar's 10x10) the MinAtar torso.
NATURE_MIN_SIZE = 36


def is_image(shape: Sequence[int]) -> bool:
    """Whether one env's observation leaf of `shape` is image-like: [H, W, C]."""
    return len(shape) == 3


def _as_float(x: jax.Array) -> jax.Array:
    """An observation leaf as float32: uint8 (pixels) scaled by 1/255, bool as 0/1, others cast."""
    if x.dtype == jnp.uint8:
        return x.astype(jnp.float32) * (1.0 / 255.0)
    return x.astype(jnp.float32)


def _conv_torso(x: jax.Array, name: str, dtype: Any) -> jax.Array:
    """[B, H, W, C] -> [B, features], relu after every conv. MinAtar's torso (Young & Tian 2019: one
    conv of 16 3x3 filters, stride 1) for small images; the Nature-DQN torso (Mnih et al. 2015: 32
    8x8 stride 4, 64 4x4 stride 2, 64 3x3 stride 1) for images of at least `NATURE_MIN_SIZE` pixels
    a side (e.g. Craftax's 130x110). Kernels are orthogonal (sqrt 2), without QR."""
    if min(x.shape[1:3]) >= NATURE_MIN_SIZE:
        layers = ((32, 8, 4), (64, 4, 2), (64, 3, 1))
    else:
        layers = ((16, 3, 1),)
    for i, (features, size, stride) in enumerate(layers):
        conv = nn.Conv(features, (size, size), strides=(stride, stride), padding="VALID", dtype=dtype,
                       param_dtype=jnp.float32, kernel_init=orthogonal(float(np.sqrt(2.0))),
                       bias_init=nn.initializers.zeros, name=f"{name}_{i}")
        x = nn.relu(conv(x))
    return x.reshape((x.shape[0], -1))


def _leaf_name(key: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in key)


def encode_observation(obs: Mapping[str, jax.Array], cnn: bool, dtype: Any = jnp.float32) -> jax.Array:
    """A batch of dict observations {name: [B, ...]} -> features [B, F], inside a flax module's
    compact call: each leaf but `ACTION_MASK`, in sorted name order, as float32 (`_as_float`), through
    a conv torso (`conv_{name}_{i}`) when `cnn` and image-like ([B, H, W, C]), else flattened;
    then concatenated."""
    feats = []
    for name in sorted(obs):
        if name == ACTION_MASK:
            continue
        x = _as_float(obs[name])
        if cnn and x.ndim == 4:
            x = _conv_torso(x, f"conv_{_leaf_name(name)}", dtype)
        feats.append(x.reshape((x.shape[0], -1)))
    if not feats:
        raise ValueError(f"the observation has no entry besides {ACTION_MASK!r}: nothing for the network "
                         f"to see.")
    return feats[0] if len(feats) == 1 else jnp.concatenate(feats, axis=-1)


def _split_obs(obs, cnn: bool, dtype: Any):
    """(features [B, F], action mask or None) of a batch of observations: a flat array as it is, a
    dict through `encode_observation`."""
    if isinstance(obs, Mapping):
        return encode_observation(obs, cnn, dtype), obs.get(ACTION_MASK)
    return obs, None


def _policy(module: nn.Module, head: jax.Array, discrete: bool, log_std_init: float,
            nvec: tuple[int, ...] | None = None, mask: jax.Array | None = None):
    """The policy distribution on the actor head's output: categorical logits (factorised over
    `nvec` for MultiDiscrete actions), masked by `mask` if given; or a Gaussian's mean with a
    state-independent log-std parameter of `module` (initialised at `log_std_init`)."""
    if discrete:
        pi = Categorical(logits=head) if nvec is None else MultiCategorical(logits=head, nvec=tuple(nvec))
        return pi if mask is None else mask_policy(pi, mask)
    init = nn.initializers.constant(log_std_init)
    return DiagGaussian(mean=head, log_std=module.param("log_std", init, (head.shape[-1],), jnp.float32))


class ActorCritic(nn.Module):
    """obs [..., obs_dim] -> (policy distribution over actions [...], value [...]).

    `obs` may also be a dict of batched arrays {name: [B, ...]} (what the trainer gives for dict
    observations, and with `torso="cnn"`): each entry is encoded (`encode_observation`: flattened,
    or through a conv torso shared by actor and critic when image-like and `torso="cnn"`) and the
    features concatenated; an `action_mask` entry is not encoded but masks the policy.

    Attributes:
      action_dim: number of discrete actions (sum(nvec) for MultiDiscrete), or the dimension of a
        continuous action.
      discrete: categorical policy if True, else a diagonal Gaussian with a state-independent
        log-std parameter (initialised at `log_std_init`).
      nvec: MultiDiscrete actions: each component's number of choices (a factorised categorical,
        `MultiCategorical`); None: one categorical (or a Gaussian).
      torso: "mlp", or "cnn" for a conv torso on image-like dict entries.
      hidden_sizes: widths of the hidden layers of each torso.
      activation: a key of ACTIVATIONS.
      log_std_init: the initial log-std of the Gaussian policy (unused when discrete).
      compute_dtype: "float32", or "bfloat16" for mixed precision: the layers compute in bfloat16
        from float32 parameters (the optimiser keeps float32), and the heads' outputs (logits or
        mean, value) are cast back to float32 for the log-probabilities and the losses.
    """

    action_dim: int
    discrete: bool
    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "tanh"
    log_std_init: float = 0.0
    compute_dtype: str = "float32"
    nvec: tuple[int, ...] | None = None
    torso: str = "mlp"

    @nn.compact
    def __call__(self, obs):
        act = ACTIVATIONS[self.activation]
        dtype = COMPUTE_DTYPES[self.compute_dtype]
        dense = partial(_dense, dtype=dtype)
        obs, mask = _split_obs(obs, self.torso == "cnn", dtype)
        x = _torso(dense, act, self.hidden_sizes, "actor", obs)
        head = dense(self.action_dim, 0.01, "actor_head")(x).astype(jnp.float32)
        pi = _policy(self, head, self.discrete, self.log_std_init, self.nvec, mask)
        v = _torso(dense, act, self.hidden_sizes, "critic", obs)
        value = dense(1, 1.0, "critic_head")(v)[..., 0].astype(jnp.float32)
        return pi, value


#: The recurrent cells of `RecurrentActorCritic` (PPOConfig.recurrent).
RECURRENT_CELLS = ("gru", "lstm")


class RecurrentActorCritic(nn.Module):
    """(carry, obs [B, obs_dim]) -> (carry, (policy distribution [B], value [B])): one step.

    The observation goes through a dense layer (`hidden_sizes[0]` wide), then the recurrent cell
    (`cell`, `recurrent_size` wide), whose output feeds separate actor and critic heads, each with
    the remaining hidden layers (`hidden_sizes[1:]`). The carry is the cell's state ([B, H] for a
    GRU, a pair for an LSTM); `initial_carry(B)` is its start of episode (zeros): the trainer resets
    an env's carry to it exactly where the env auto-resets. Every orthogonal initialiser is
    `fusedrl.initializers.orthogonal` (no QR decomposition).

    `compute_dtype="bfloat16"`: mixed precision as in `ActorCritic` (float32 parameters, layers and
    cell computing in bfloat16, the heads' outputs cast back to float32); the carry stays float32
    between steps, so the rollout and the replay hold the same state.
    """

    action_dim: int
    discrete: bool
    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "tanh"
    log_std_init: float = 0.0
    cell: str = "gru"
    recurrent_size: int = 128
    nvec: tuple[int, ...] | None = None
    torso: str = "mlp"
    compute_dtype: str = "float32"

    def initial_carry(self, batch: int):
        zeros = jnp.zeros((batch, self.recurrent_size), jnp.float32)
        return zeros if self.cell == "gru" else (zeros, zeros)

    @nn.compact
    def __call__(self, carry, obs: jax.Array):
        act = ACTIVATIONS[self.activation]
        dtype = COMPUTE_DTYPES[self.compute_dtype]
        dense = partial(_dense, dtype=dtype)
        obs, mask = _split_obs(obs, self.torso == "cnn", dtype)
        x = _torso(dense, act, self.hidden_sizes[:1], "embed", obs)
        cells = {"gru": nn.GRUCell, "lstm": nn.OptimizedLSTMCell}
        carry, x = cells[self.cell](self.recurrent_size, kernel_init=orthogonal(1.0),
                                    recurrent_kernel_init=orthogonal(1.0), dtype=dtype,
                                    param_dtype=jnp.float32, name="cell")(carry, x)
        carry = jax.tree.map(lambda c: c.astype(jnp.float32), carry)
        a = _torso(dense, act, self.hidden_sizes[1:], "actor", x)
        head = dense(self.action_dim, 0.01, "actor_head")(a).astype(jnp.float32)
        pi = _policy(self, head, self.discrete, self.log_std_init, self.nvec, mask)
        v = _torso(dense, act, self.hidden_sizes[1:], "critic", x)
        return carry, (pi, dense(1, 1.0, "critic_head")(v)[..., 0].astype(jnp.float32))


def network_path_error(path) -> str | None:
    """Why `path` is not a "module:function" network path (None: it is one); the text follows
    "network " in the config's error."""
    if path in BUILTIN_NETWORKS:
        return None
    if isinstance(path, str) and path.count(":") == 1:
        module, name = path.split(":")
        if module and all(p.isidentifier() and not keyword.iskeyword(p) for p in module.split(".")) and (
                name.isidentifier() and not keyword.iskeyword(name)):
            return None
    return (f"must be None (the MLP actor-critic), \"cnn\" (the built-in with a conv torso on image "
            f"observations) or \"module:function\", a function that builds your "
            f"own flax module, e.g. \"my_nets:cnn\" for def cnn(...) in my_nets.py; got {path!r}.")


def network_module(path: str) -> str:
    """The module part of a "module:function" network path (checked by `network_path_error`)."""
    return path.split(":")[0]


def build_network(config, *, action_dim: int, discrete: bool, obs_shape: tuple[int, ...],
                  obs_example: jax.ShapeDtypeStruct, nvec: tuple[int, ...] | None = None) -> nn.Module:
    """The trainer's network: `ActorCritic` from the config (with a conv torso for
    `network="cnn"`), or the module `config.network` builds.

    `nvec`: MultiDiscrete actions (`action_dim` is then sum(nvec)). `obs_example`: one batch of what
    the trainer's wrappers give the network, an array or a dict of arrays (dict observations, and
    `network="cnn"`: see `fusedrl.envs.wrappers.StructuredObservation`).

    `config.network = "module:function"` imports `module` (from the Python path; the command-line
    tools put the current directory on it) and calls
    `function(action_dim=..., discrete=..., obs_shape=..., config=...)`, which must return a flax
    `nn.Module` whose `__call__(obs)` takes a batch of flat observations `[B, prod(obs_shape)]`
    (what the trainer's wrappers give: flattened, normalised if `normalize_obs`; reshape it to
    `obs_shape` for a CNN) and returns `(pi, value)`: `pi` a `fusedrl.distributions.Categorical`
    with logits `[B, action_dim]` when `discrete`, else a `DiagGaussian` with mean
    `[B, action_dim]` and log_std `[action_dim]` (or `[B, action_dim]`); `value` `[B]`. This is
    checked here, by tracing one call (no compile). Use `fusedrl.initializers.orthogonal`, not
    flax's, for orthogonal weights: flax's uses a QR decomposition, which has deadlocked XLA's CPU
    thread pool under `jax.vmap` on 2 cores.
    """
    torso = "cnn" if config.network == "cnn" else "mlp"
    nvec = None if nvec is None else tuple(int(n) for n in nvec)
    if config.recurrent is not None:
        return RecurrentActorCritic(
            action_dim=action_dim, discrete=discrete, hidden_sizes=config.hidden_sizes,
            activation=config.activation, log_std_init=float(config.log_std_init),
            cell=config.recurrent, recurrent_size=config.recurrent_size, nvec=nvec, torso=torso,
            compute_dtype=config.compute_dtype)
    if config.network is None or config.network in BUILTIN_NETWORKS:
        return ActorCritic(action_dim=action_dim, discrete=discrete, hidden_sizes=config.hidden_sizes,
                           activation=config.activation, log_std_init=float(config.log_std_init),
                           compute_dtype=config.compute_dtype, nvec=nvec, torso=torso)

    path = config.network
    module_name, name = path.split(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name is None or not (module_name == e.name or module_name.startswith(e.name + ".")):
            raise  # the module was found, and itself imports something missing
        raise ValueError(f"network {path!r}: no module named {e.name!r} on the Python path; run from the "
                         f"folder that holds it (the command-line tools look there), or install its "
                         f"package.") from None
    factory = getattr(module, name, None)
    if not callable(factory):
        raise ValueError(f"network {path!r}: module {module_name!r} has no function {name!r}"
                         + ("." if factory is None else f" ({name} is a {type(factory).__name__})."))
    kwargs = dict(action_dim=action_dim, discrete=discrete, obs_shape=tuple(obs_shape), config=config)

    try:
        inspect.signature(factory).bind(**kwargs)
    except TypeError as e:
        raise TypeError(f"network {path!r}: {name} must take the keyword arguments action_dim, discrete, "
                        f"obs_shape and config, e.g. def {name}(action_dim, discrete, obs_shape, config) "
                        f"(or **kwargs for those it ignores); calling it: {e}.") from None
    except ValueError:  # no signature to inspect (some builtins): the call below says what is wrong
        pass
    with _noting(f"while make_train built network {path!r} ({name}(**{sorted(kwargs)}))"):
        net = factory(**kwargs)
    if not isinstance(net, nn.Module):
        raise TypeError(f"network {path!r}: {name}(...) must return a flax.linen.Module, got "
                        f"{type(net).__name__}.")
    shapes = jax.tree.map(lambda x: tuple(x.shape), obs_example)
    with _noting(f"while make_train traced network {path!r} on observations {shapes}"):
        _check_network_outputs(path, net, action_dim, discrete, obs_example, nvec)
    if isinstance(obs_example, Mapping) and ACTION_MASK in obs_example:
        return MaskedNetwork(net)  # masked actions are never taken, whatever the user's module does
    return net


class MaskedNetwork(nn.Module):
    """A user's network on observations with an `action_mask` entry: its policy, masked
    (`fusedrl.distributions.mask_policy`). Its parameters are under "net"."""

    net: nn.Module

    def __call__(self, obs):
        pi, value = self.net(obs)
        return mask_policy(pi, obs[ACTION_MASK]), value


@contextlib.contextmanager
def _noting(note: str):
    """Adds `note` to an error raised by the user's code (a factory or module that raises its own
    error, which names no network), unless it is one of ours, which names it already."""
    try:
        yield
    except Exception as e:
        if not str(e).startswith("network "):
            e.add_note(note)
        raise


def _check_network_outputs(path: str, net: nn.Module, action_dim: int, discrete: bool,
                           obs: jax.ShapeDtypeStruct, nvec: tuple[int, ...] | None = None) -> None:
    def call(key, x):
        variables = net.init(key, x)
        return variables, net.apply(variables, x)

    # The trainer initialises the module with one PRNG stream ('params'), calls it with none and no
    # mutable collections, and optimises every variable init returns with Adam.
    try:
        variables, out = jax.eval_shape(call, jax.random.key(0), obs)
    except flax.errors.InvalidRngError as e:
        raise ValueError(f"network {path!r}: the trainer calls the module without PRNG streams, so it cannot "
                         f"draw random numbers ({e}). Dropout (or self.make_rng) is not supported: leave it "
                         f"out, or pass deterministic=True.") from None
    except flax.errors.ModifyScopeVariableError as e:
        raise ValueError(f"network {path!r}: the trainer calls the module without mutable collections, so it "
                         f"cannot update its variables ({e}). Running statistics (nn.BatchNorm) are not "
                         f"supported: use nn.LayerNorm, or normalize_obs for the observations.") from None
    extra = sorted(set(variables) - {"params"})
    if extra:
        raise ValueError(f"network {path!r}: the module has variables outside 'params' (collections "
                         f"{extra}), and the trainer would train them by gradient descent as parameters. "
                         f"Use only parameters: nn.LayerNorm instead of nn.BatchNorm, constants as "
                         f"attributes or jnp arrays.")
    leaves = jax.tree_util.tree_leaves_with_path(variables)
    low = [f"{jax.tree_util.keystr(p)} is {leaf.dtype}" for p, leaf in leaves
           if not (jnp.issubdtype(leaf.dtype, jnp.floating) and jnp.finfo(leaf.dtype).bits >= 32)]
    if low:
        raise TypeError(f"network {path!r}: parameters must be float32 ({low[0]}): the trainer's gradient "
                        f"clipping (optax.clip_by_global_norm) fails on other dtypes. Keep param_dtype "
                        f"float32 and compute in bfloat16 with dtype=jnp.bfloat16 (e.g. nn.Dense(64, "
                        f"dtype=jnp.bfloat16)).")
    batch = jax.tree.leaves(obs)[0].shape[0]
    want_pi = (Categorical if nvec is None else MultiCategorical) if discrete else DiagGaussian
    head = "logits" if discrete else "mean"
    shown = (f"[B, {', '.join(map(str, obs.shape[1:]))}]" if hasattr(obs, "shape")
             else str(jax.tree.map(lambda x: ("B",) + tuple(x.shape[1:]), obs)))
    nvec_note = "" if nvec is None else f" and nvec {tuple(nvec)}"
    expected = (f"(pi, value), pi a fusedrl.distributions.{want_pi.__name__} with {head} [B, {action_dim}]"
                f"{nvec_note} and value [B], for obs {shown}")
    if not isinstance(out, tuple) or len(out) != 2:
        raise TypeError(f"network {path!r}: __call__ must return {expected}; got {type(out).__name__}.")
    pi, value = out
    if not isinstance(pi, want_pi):
        raise TypeError(f"network {path!r}: __call__ must return {expected}; pi is a "
                        f"{type(pi).__name__}.")
    got = pi.logits.shape if discrete else pi.mean.shape
    if tuple(got) != (batch, action_dim):
        raise ValueError(f"network {path!r}: {head} has shape {tuple(got)} for a batch of {batch} "
                         f"observations; expected {expected}.")
    if not discrete:
        try:  # DiagGaussian broadcasts log_std to the mean's shape: it must not widen it
            if np.broadcast_shapes(pi.log_std.shape, (batch, action_dim)) != (batch, action_dim):
                raise ValueError
        except ValueError:
            raise ValueError(f"network {path!r}: log_std has shape {tuple(pi.log_std.shape)}; expected "
                             f"[{action_dim}] or [B, {action_dim}].") from None
    if tuple(getattr(value, "shape", ())) != (batch,):
        raise ValueError(f"network {path!r}: value has shape {tuple(getattr(value, 'shape', ()))} for a "
                         f"batch of {batch} observations; expected [B] ({batch},), e.g. "
                         f"nn.Dense(1)(x)[..., 0].")


def value_only(network: ActorCritic, params, obs: jax.Array) -> jax.Array:
    """The critic's value [...] for obs [..., obs_dim] (XLA prunes the unused actor)."""
    return network.apply(params, obs)[1]


def param_count(params) -> int:
    return sum(int(np.prod(x.shape)) for x in jax.tree.leaves(params))


__all__ = ["ACTION_MASK", "ACTIVATIONS", "BUILTIN_NETWORKS", "RECURRENT_CELLS", "ActorCritic", "Dense",
           "RecurrentActorCritic", "build_network", "encode_observation", "is_image", "param_count",
           "value_only"]
