"""One agent whose environments are split across devices (or shards of one device).

    train = fusedrl.data_parallel_train(config)          # one shard per device
    result = train(jax.random.key(0))

Every shard steps its part of the envs; gradients, advantage statistics and normaliser statistics
are averaged over the shards, so the shards hold one agent (see `data_parallel_train`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from fusedrl._numbers import is_int
from fusedrl.envs.host import is_host_env_id
from fusedrl.envs.registry import jax_instead
from fusedrl.streams import check_devices
from fusedrl.train import A2CConfig, PPOConfig, ReinforceConfig, TrainResult, make_train
from fusedrl.train.ppo import algorithm_of

DATA_AXIS = "data"  # axis the shards of one data-parallel agent run along


#: The configs whose runs split over shards as one agent (see `data_parallel_train`).
SHARDABLE = (PPOConfig, A2CConfig, ReinforceConfig)


def data_parallel_train(
    config: PPOConfig | A2CConfig | ReinforceConfig,
    devices: Sequence[jax.Device] | None = None,
    *,
    num_shards: int | None = None,
) -> Callable[..., TrainResult]:
    """One agent whose environments are split across devices: `train(key, hparams=None)`.

    Each of `num_shards` shards steps `num_envs // num_shards` envs with its own randomness and
    learns on its part of every minibatch; gradients (and the advantage-normalisation statistics of
    each minibatch) are averaged over the shards with `lax.pmean`, so the parameters stay equal on
    every shard, and the observation and reward normalisers pool every shard's samples, so their
    statistics do too. With as many shards as devices it is a `shard_map` over a one-axis `Mesh`;
    on one device (`devices=[d]`, `num_shards=N`) the same N-shard program runs as a `vmap` with an
    axis name, which is how the multi-device result is checked. num_updates, minibatch count and
    the learning-rate schedule are those of `config`; each minibatch is the union of the shards'
    local minibatches (stratified across shards), so the run is a valid PPO run but not the same
    random run as `make_train(config)`. An `A2CConfig` splits the same way (its one minibatch is the
    whole rollout), and so does a `ReinforceConfig`: its Monte-Carlo returns are per env, so each
    shard computes its envs' exactly, and its loss's means over the steps whose episode ended inside
    the rollout (a count each shard has its own of) and its return normalisation are taken over all
    shards' steps together (`fusedrl.train.losses.weighted_mean` with the axis name), so the mean of
    the shards' gradients is the agent's gradient.

    Returns a jitted function. Its `TrainResult` holds one copy of `params`/`opt_state` (shard 0's;
    every shard holds the same) and the per-shard env state, observations and key with a leading
    [num_shards] axis (`fusedrl.evaluate` takes it as it is); its `last_return`/`last_length` are
    the agent's, the last update's `episode_return`/`episode_length`. Metrics are [num_updates] for
    the whole agent: `env_steps` and `episodes_completed` are totals, episode returns/lengths are
    averaged over the episodes of all shards (an update in which no shard completed one repeats
    the latest that had one, as `make_train`'s metrics do), the loss statistics are the means over
    shards (exactly the global minibatch means, the shards being equal in size);
    `explained_variance` is the mean of the shards' values.

    Each `pmean` waits for every shard. XLA:CPU (e.g. with `--xla_force_host_platform_device_count`)
    aborts the process when one waits more than 40 s; on a heavily loaded machine raise that with
    `--xla_cpu_collective_call_terminate_timeout_seconds` in `XLA_FLAGS`.
    """
    if type(config) not in SHARDABLE:
        raise TypeError(f"data_parallel_train takes a {', '.join(c.__name__ for c in SHARDABLE)}, got "
                        f"{type(config).__name__}: it is no algorithm's config.")
    if is_host_env_id(config.env_id):
        raise ValueError(
            f"cannot split {config.env_id} over shards: a Gymnasium env steps on the host (the host "
            f"bridge), outside the compiled program the shards run. Use {jax_instead(config.env_id)} "
            f"instead, or train the Gymnasium env as one agent (`fusedrl.make_train(config)`)."
        )
    check_devices(devices)
    devices = tuple(jax.devices() if devices is None else devices)
    if num_shards is not None and (not is_int(num_shards) or num_shards < 1):
        raise ValueError(f"num_shards must be an int >= 1 (or None: one per device), got {num_shards!r}.")
    num_shards = len(devices) if num_shards is None else int(num_shards)
    if len(devices) not in (1, num_shards):
        raise ValueError(
            f"num_shards={num_shards} needs one device per shard (got {len(devices)} devices), or a "
            f"single device that runs every shard."
        )
    if config.num_envs % num_shards:
        raise ValueError(
            f"num_envs={config.num_envs} must be a multiple of the number of shards ({num_shards}): "
            f"each shard steps num_envs // num_shards envs."
        )
    local = shard_config(config, num_shards)
    # The shard's config may have been validated with normalize_adv=False (see `shard_config`):
    # the trainer normalises as the agent's config says, over the global minibatch.
    normalize_adv = algorithm_of(config).normalize_adv(config)
    train = make_train(local, axis_name=DATA_AXIS, normalize_adv=normalize_adv)

    def shard(key, hparams):
        return train(key, hparams)

    if len(devices) > 1:
        mesh = Mesh(np.asarray(devices), (DATA_AXIS,))

        def all_shards(key, hparams):
            impl = jax.random.key_impl(key)

            def one_shard(key_data, hparams):
                out = shard(jax.random.wrap_key_data(key_data, impl=impl), hparams)
                return jax.tree.map(lambda x: x[None], out)

            mapped = jax.shard_map(one_shard, mesh=mesh, in_specs=(P(), P()), out_specs=P(DATA_AXIS),
                                   check_vma=False)  # see `fusedrl.sweeps.program`; pmean is explicit
            return mapped(jax.random.key_data(key), hparams)
    else:
        def all_shards(key, hparams):
            return jax.vmap(shard, in_axes=None, axis_size=num_shards, axis_name=DATA_AXIS)(key, hparams)

    @jax.jit
    def run(key, hparams=None):
        hparams = train.default_hparams() if hparams is None else hparams
        out = all_shards(key, hparams)
        first = jax.tree.map(lambda x: x[0], out)
        metrics = _combine(out.metrics)
        state = out.state.replace(
            params=first.state.params, opt_state=first.state.opt_state, update=first.state.update,
            # The agent's latest episode statistics, as its metrics report them (not one shard's).
            last_return=metrics["episode_return"][-1].astype(jnp.float32),
            last_length=metrics["episode_length"][-1].astype(jnp.float32),
        )
        return TrainResult(state=state, metrics=metrics, hparams=hparams)

    return run


def shard_config(config: PPOConfig | A2CConfig | ReinforceConfig, num_shards: int):
    """The config one of `num_shards` shards trains with: `num_envs // num_shards` envs and the
    same number of updates, built (and validated) by `config.replace`.

    One rule of `PPOConfig` and `A2CConfig` does not hold for a shard: under `normalize_adv` they
    refuse minibatches of one transition (their advantages would all normalise to 0), but a shard
    normalises its minibatch with the statistics of the agent's, all shards' together, whose size
    `config` has passed that check with. For that one case the shard's config has normalize_adv=False, and the
    caller passes the agent's `normalize_adv` to `make_train` (the trainer's `normalize_adv`).
    """
    local_envs = config.num_envs // num_shards
    changes = dict(num_envs=local_envs, total_timesteps=config.num_updates * local_envs * config.num_steps)
    try:
        return config.replace(**changes)
    except ValueError as e:
        algorithm = algorithm_of(config)
        local_minibatch = config.batch_size // num_shards // algorithm.minibatches(config)
        if not (algorithm.normalize_adv(config) and local_minibatch == 1):
            raise ValueError(f"per-shard config of a {num_shards}-way data-parallel run: {e}") from None
    try:
        return config.replace(**changes, normalize_adv=False)
    except ValueError as e:
        raise ValueError(f"per-shard config of a {num_shards}-way data-parallel run: {e}") from None


def _combine(m: dict[str, jax.Array]) -> dict[str, jax.Array]:
    """Per-shard metrics [S, num_updates] -> the agent's metrics [num_updates].

    Episode returns/lengths follow the single-agent contract (`TrainResult`): the mean over the
    episodes all shards completed in the update; an update in which no shard completed one
    repeats the latest update that had one; before the first, 0.0 with `episode_length` 0. (A
    shard's own values in such an update are its carried-over ones, or 0 before its first episode:
    averaging those would invent episodes.)"""
    n = m["episodes_completed"]
    total = n.sum(0, keepdims=True)  # [1, num_updates]: no implicit rank promotion
    out = {k: v.mean(0).astype(v.dtype) for k, v in m.items()}
    out["episodes_completed"] = total[0]
    out["env_steps"] = m["env_steps"].sum(0)
    has = total[0] > 0
    # Per update, the latest update up to it in which some shard completed an episode (-1: none yet).
    latest = jax.lax.cummax(jnp.where(has, jnp.arange(has.shape[0]), -1))
    for k in ("episode_return", "episode_length"):
        mean = (m[k] * (n / jnp.maximum(total, 1))).sum(0)
        out[k] = jnp.where(latest >= 0, mean[jnp.maximum(latest, 0)], 0.0).astype(m[k].dtype)
    out["learning_rate"] = m["learning_rate"][0]
    out["gradient_steps"] = m["gradient_steps"][0]  # the shards stop together (their KL is pmean'd)
    return out
