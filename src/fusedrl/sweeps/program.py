"""How a sweep executes: its plan, its one compiled program, and where the runs go.

Swept leaves carry a leading run axis; the other leaves are passed once, unbatched. One compile
per sweep, whatever the number of runs:
- Several devices: one `jax.vmap` of `train(key, hparams)`, its run axis split across the devices
  (`shard_map` over a one-axis `Mesh`).
- One accelerator, or `streams=1`: one `jax.vmap` of all runs on it.
- One CPU device (the default there): `streams` host threads, one per usable core, each running
  its equal share of the runs one after another (a `lax.map` of the single-run program), in
  pieces of updates (`fusedrl.streams`). Only the next piece's launch crosses the host boundary.
Runs are padded to a multiple of the device (or stream) count and trimmed afterwards (on the
host when they were sharded over devices: see `_on_host`). Results are [runs, num_updates] per
metric plus one final state per run; nothing else grows with total timesteps.

Seeds: `seed_keys = jax.random.split(key, num_seeds)`; every run with seed index i uses
`seed_keys[i]`, so the run (seed=i, lr=v) is `jax.jit(train)(seed_keys[i], hparams with lr=v)`.
That single run is the same computation as its sweep slice, but not bit for bit: a reduction or
fused elementwise op over a batched [runs, ...] array is compiled with another loop order or
vectorisation than the same op on one run's [...] array, and a stream's `lax.map` body is
compiled inside a loop, with other fusion decisions than the standalone program. The differences
start at float32 rounding and training amplifies them, so a rerun reproduces a sweep's run in
distribution, not its exact curve: keep the sweep's own result for a run's numbers.
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from fusedrl._numbers import is_int
from fusedrl.envs.host import is_host_env_id
from fusedrl.envs.registry import GYMNAX_DERIVED_PARAMS, jax_instead, on_register
from fusedrl.evaluation import EVAL_MAX_STEPS, evaluate
from fusedrl.platform import choices_platform
from fusedrl.progress import hold_interrupt
from fusedrl.streams import (
    check_devices,
    compile_in_pieces,
    drive,
    piece_size,
    resolve_streams,
    update_pieces,
)
from fusedrl.sweeps.result import SweepResult
from fusedrl.sweeps.space import check_axes, layout
from fusedrl.train import CONFIGS, Hyperparams, OnPolicyConfig, TrainResult, make_train
from fusedrl.train.config import number_dtype
from fusedrl.train.state import typed_key
from fusedrl.train.trainer import check_callback

RUN_AXIS = "runs"  # mesh axis the sweep's runs are split along


# --------------------------------------------------------------------------------- the sweep
class _Plan(NamedTuple):
    """What `sweep` runs, worked out (and checked) from its arguments before anything compiles."""

    num_seeds: int
    key: jax.Array
    dims: tuple[str, ...]
    axes: dict[str, np.ndarray]
    values: dict[str, np.ndarray]
    shape: tuple[int, ...]
    num_runs: int
    devices: tuple[jax.Device, ...]
    streams: int


def _plan(config, num_seeds, mode, num_samples, key, devices, streams, axes) -> _Plan:
    if type(config) not in CONFIGS.values():
        names = ", ".join(c.__name__ for c in CONFIGS.values())
        raise TypeError(f"sweep takes an algorithm's config ({names}), got {type(config).__name__}.")
    if not is_int(num_seeds) or num_seeds < 1:
        raise ValueError(f"num_seeds must be a positive int, got {num_seeds!r}.")
    num_seeds = int(num_seeds)
    if is_host_env_id(config.env_id):
        raise ValueError(
            f"cannot sweep {config.env_id}: a Gymnasium env steps on the host (the host bridge), so "
            f"its runs cannot be vmapped into one program. Sweep {jax_instead(config.env_id)} instead, or "
            f"train the Gymnasium env one run per seed and setting (`fusedrl train --env {config.env_id} "
            f"--seed S`)."
        )
    check_devices(devices)
    env_fields = check_axes(config, axes)
    for derived, (_, sources) in GYMNAX_DERIVED_PARAMS.get(config.env_id, {}).items():
        swept = [name for name in sources if name in axes]
        if swept and derived not in axes:
            raise ValueError(
                f"cannot sweep {', '.join(swept)} of {config.env_id} without {derived}: gymnax stores "
                f"{derived} (computed from {' and '.join(sources)} at their defaults) and its step uses "
                f"it as stored, so only part of the physics would change. Sweep our "
                f"{config.env_id[len('gymnax:'):]} (which computes it), or give {derived} alongside in "
                f"mode='zip'."
            )
    key = _base_key(key)
    dims, axes_out, values = layout(config, num_seeds, mode, num_samples, key, axes, env_fields)
    shape = tuple(len(axes_out[d]) for d in dims)
    num_runs = math.prod(shape)
    devices = tuple(jax.devices() if devices is None else devices)
    streams = resolve_streams(streams, devices, num_runs)
    return _Plan(num_seeds, key, dims, axes_out, values, shape, num_runs, devices, streams)


def check_sweep(
    config: OnPolicyConfig,
    num_seeds: int = 1,
    *,
    mode: str = "grid",
    num_samples: int | None = None,
    key: jax.Array | None = None,
    devices: Sequence[jax.Device] | None = None,
    keep_state: bool = True,
    callback: Callable[[dict[str, Any]], None] | None = None,
    callback_every: int = 1,
    streams: int | None = None,
    eval_episodes: int | None = None,
    **axes: Any,
) -> None:
    """Raises the TypeError or ValueError `sweep` would raise for these arguments (the same
    arguments), before it compiles or trains anything; returns None if they are valid. `fusedrl
    sweep` calls it first, so that bad input is a usage error and any later error shows its
    traceback."""
    check_callback(callback, callback_every)
    _check_eval_episodes(eval_episodes)
    _plan(config, num_seeds, mode, num_samples, key, devices, streams, axes)


def sweep(
    config: OnPolicyConfig,
    num_seeds: int = 1,
    *,
    mode: str = "grid",
    num_samples: int | None = None,
    key: jax.Array | None = None,
    devices: Sequence[jax.Device] | None = None,
    keep_state: bool = True,
    callback: Callable[[dict[str, Any]], None] | None = None,
    callback_every: int = 1,
    streams: int | None = None,
    eval_episodes: int | None = None,
    **axes: Any,
) -> SweepResult:
    """Trains one agent per (seed, hyperparameter combination) in a single compiled program.

    Args:
      config: the base config (`PPOConfig`, `A2CConfig` or `ReinforceConfig`); every run uses its
        static fields and unswept values.
      num_seeds: seeds per combination (a "seed" dimension of that size, always first).
      mode: "grid" (Cartesian product), "zip" (i-th values together) or "random" (`num_samples`
        draws per field; see `fusedrl.sweeps.space` for the specs).
      num_samples: number of random-search trials, an int (mode="random" only, which needs at least
        one field spec: for repeats of one config, use num_seeds).
      key: base PRNG key (default `jax.random.key(0)`); seed i runs with `split(key, num_seeds)[i]`.
      devices: devices to split the runs over (default: all of `jax.devices()`, on every host);
        given one device, the runs execute there and their `result` stays there.
      keep_state: keep every run's final `TrainResult` (parameters, optimiser and env state) in
        `result`; False keeps only the metrics.
      callback, callback_every: passed to `make_train` (called per run every `callback_every`
        updates from inside the program; with streams > 1, from several host threads at once).
        Its metrics carry "run" too: the run's index in the result's flattened (C-order) shape
        [num_seeds, *axis sizes] (`np.unravel_index(m["run"], shape)`). Padding runs (see
        below) do not call back.
      streams: on one CPU device, the number of host threads that each run an equal share of the
        runs one after another (`lax.map`), concurrently; 1 runs them all as one `vmap`. Default:
        one stream per usable CPU core (capped at the number of runs) on a single CPU device, else
        1. See the module docstring and `fusedrl.streams` for why.
      eval_episodes: end the sweep with a greedy evaluation of every run, this many episodes each
        (`fusedrl.evaluate`, episodes bounded by `fusedrl.evaluation.EVAL_MAX_STEPS` steps), into
        `SweepResult.eval_returns` and the tables' "eval_return". The evaluation key is `key`
        folded with a constant, split into one key per run. None (default): no evaluation.
      **axes: field=values, e.g. lr=[1e-4, 3e-4], gravity=[9.8, 12.0]. Traced fields only. Values
        are cast to the field's dtype (float32, or int32 for an integer env param) and must keep
        their value in it; env params must be finite.

    Returns:
      A `SweepResult` with metrics [num_seeds, *axis sizes, num_updates].
    """
    check_callback(callback, callback_every)
    _check_eval_episodes(eval_episodes)
    num_seeds, key, dims, axes_out, values, shape, num_runs, devices, streams = _plan(
        config, num_seeds, mode, num_samples, key, devices, streams, axes)
    seed_keys = jax.random.split(key, num_seeds)
    num_dev = len(devices)
    num_parts = max(num_dev, streams)
    padded = -(-num_runs // num_parts) * num_parts
    # Run r of the flattened (C-order) grid; padding repeats run 0 and is trimmed afterwards.
    run_index = np.concatenate([np.arange(num_runs), np.zeros(padded - num_runs, int)])
    tags = np.concatenate([np.arange(num_runs), np.full(padded - num_runs, -1)]).astype(np.int32)
    seed_of_run = np.indices(shape)[0].reshape(-1)[run_index]
    key_impl = jax.random.key_impl(key)
    run_keys = np.asarray(jax.random.key_data(seed_keys))[seed_of_run]
    traced = config.traced_fields()
    swept = tuple((n, "hp" if n in traced else "env") for n in values)
    batched = {n: values[n].reshape(-1)[run_index] for n in values}
    if callback is not None:  # "run" for the callback: -1 marks padding, which calls no one
        batched[RUN_TAG] = tags

    program, sharding = _program(_static_part(config), swept, devices, str(key_impl), callback,
                                 callback_every, streams > 1, choices_platform())
    # Unswept values are traced arguments shared by every run (numpy: replicated on every host).
    base = _base_hparams(config)
    if streams > 1:
        out = _run_streams(program, streams, run_keys, batched, base, config.num_updates, devices[0])
    else:
        args_keys = _global_array(run_keys, sharding, devices[0])
        args_swept = {n: _global_array(v, sharding, devices[0]) for n, v in batched.items()}
        with hold_interrupt("compiling"):  # see hold_interrupt: XLA and Ctrl-C
            compiled = program.lower(args_keys, args_swept, base).compile()
        out = compiled(args_keys, args_swept, base)
    if not keep_state and eval_episodes is None:
        out = out.replace(state=None)
    out = _fetch_if_multihost(out)

    def unflatten(x):
        return x[:num_runs].reshape(shape + x.shape[1:])

    metrics = {k: unflatten(np.asarray(v)) for k, v in out.metrics.items()}
    if out.state is None:
        result = None
    elif sharding is None:
        result = jax.tree.map(unflatten, out)
    else:
        result = jax.tree.map(lambda x: _on_host(x, unflatten), out)
    eval_returns = None
    if eval_episodes is not None:
        eval_returns = _evaluate_runs(config, values, result, key, int(eval_episodes))
        if not keep_state:
            result = None
    return SweepResult(
        config=config, mode=mode, dims=dims, axes=axes_out, values=values, metrics=metrics,
        result=result, seed_keys=seed_keys, eval_returns=eval_returns,
    )


_EVAL_SALT = 0xE7A1  # folded into `key` for the final evaluation's episodes


def _check_eval_episodes(eval_episodes) -> None:
    if eval_episodes is not None and (not is_int(eval_episodes) or eval_episodes < 1):
        raise ValueError(f"eval_episodes must be an int >= 1 (episodes per run), or None for no final "
                         f"evaluation; got {eval_episodes!r}.")


def _evaluate_runs(config: OnPolicyConfig, values, result: TrainResult, key: jax.Array,
                   num_episodes: int) -> np.ndarray:
    """Greedy returns [*shape, num_episodes] of every run of `result` (leaves [*shape, ...]),
    each run with its own key split from `key` folded with `_EVAL_SALT`. Each run's envs step with
    its own env params; the config's values of swept env params are no run's, so they are left
    out of the config `evaluate` checks the result against."""

    unswept = {k: v for k, v in config.env_params.items() if k not in values}
    eval_config = config.replace(env_params=unswept)
    with hold_interrupt("evaluating"):  # it compiles first: see hold_interrupt
        returns = evaluate(eval_config, result, jax.random.fold_in(key, _EVAL_SALT), num_episodes,
                           max_steps=EVAL_MAX_STEPS)
    return np.asarray(returns)


def _base_key(key) -> jax.Array:
    """`sweep`'s `key` as one typed PRNG key (raw key data, e.g. `jax.random.PRNGKey(0)`, is wrapped
    by `typed_key`, as `PPO.init` does)."""
    if key is None:
        return jax.random.key(0)
    is_key = isinstance(key, jax.Array | np.ndarray) and (
        key.dtype == np.uint32 or jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key))
    if not is_key:
        raise TypeError(f"key must be a JAX PRNG key such as jax.random.key(0), got {key!r}.")
    key = typed_key(key)
    if key.shape != ():
        raise ValueError(f"key must be one PRNG key, got an array of keys of shape {key.shape}.")
    return key


def _base_hparams(config: OnPolicyConfig) -> Hyperparams:
    """The trainer's default hyperparameters as numpy arrays of the dtypes they train with.

    The env params' Python numbers (dataclass defaults, `config.env_params`) are weakly typed in
    the trainer: float32 and int32 in its float32 computations, whatever jax_enable_x64. As numpy
    arrays they become float32 and int32 too (the swept values' dtypes, `_dtype_of`), not float64
    and int64 (`np.asarray(9.8)`), which under x64 would make the env state float64 and the
    training loop's carry change type. Arrays keep their dtype, as in the trainer."""

    return jax.tree.map(lambda x: np.asarray(x, number_dtype(x)), make_train(config).default_hparams())


def _static_part(config: OnPolicyConfig) -> OnPolicyConfig:
    """`config` with its traced values reset, so sweeps that differ only there share a program."""
    return config.static_part()


_STREAM_EXECUTABLES: dict[tuple, Any] = {}  # compiled stream programs, by program and shapes


class StreamProgram(NamedTuple):
    """A stream's jitted programs: `init(keys, swept, base)` -> the runs' `RunnerState`s, and
    `advance(states, swept, base, first_update, num_updates)` (the last static) -> `TrainResult`
    of the runs continued for `num_updates` updates; both `lax.map` over the runs."""

    init: Any
    advance: Any


def _run_streams(program: StreamProgram, streams: int, run_keys, batched, base,
                 num_updates: int, device: jax.Device | None = None) -> TrainResult:
    """Runs the runs in `streams` equal slices, one host thread each, every slice in pieces of
    updates (`fusedrl.streams.drive`), and concatenates the results in run order; on `device` if
    given (the executables are compiled for it and the inputs committed to it)."""
    if device is not None:
        run_keys, batched = jax.device_put((run_keys, batched), device)
    per = run_keys.shape[0] // streams
    args = [(run_keys[i * per:(i + 1) * per], {n: v[i * per:(i + 1) * per] for n, v in batched.items()})
            for i in range(streams)]
    pieces = update_pieces(num_updates, piece_size(per))
    # Compiled here, once, rather than by the first call of each thread at the same time.
    # The executables are compiled for these dtypes: an env param given as 12 or 12.0 leaves equal
    # configs (hence programs) but int32 or float32 arrays.
    dtypes = tuple((n, v.dtype.str) for n, v in batched.items())
    base_dtypes = tuple(np.asarray(x).dtype.str for x in jax.tree.leaves(base))
    cache_key = (program, per, tuple(pieces), dtypes, base_dtypes, device, jax.config.jax_enable_x64)
    if cache_key not in _STREAM_EXECUTABLES:
        if len(_STREAM_EXECUTABLES) >= 16:
            _STREAM_EXECUTABLES.pop(next(iter(_STREAM_EXECUTABLES)))
        # The default device decides where a program with no committed input runs (a sweep of
        # seeds only has none but the keys, and `advance` is lowered from shapes).
        with (jax.default_device(device) if device is not None else contextlib.nullcontext(),
              hold_interrupt("compiling")):  # see hold_interrupt: XLA and Ctrl-C
            _STREAM_EXECUTABLES[cache_key] = compile_in_pieces(
                program.init, (*args[0], base), program.advance, (args[0][1], base), pieces)
    init, advance = _STREAM_EXECUTABLES[cache_key]
    return drive(
        lambda i: init(*args[i], base),
        lambda i, states, first, n: advance[n](states, args[i][1], base, np.int32(first)),
        streams, [pieces], device=device, thread_name_prefix="fusedrl-sweep",
    )


RUN_TAG = "_run"  # the run index among the swept values, when there is a callback


class _RunCallback:
    """The user's sweep callback, given the run index as "run" and not called for padding runs
    (index -1)."""

    def __init__(self, callback):
        self.callback = callback

    def __call__(self, metrics):
        run = int(metrics["run"])
        if run >= 0:
            self.callback({**metrics, "run": run})


@functools.lru_cache(maxsize=16)
def _program(config, swept, devices, key_impl, callback, callback_every, mapped=False, platform=None):
    """The jitted sweep program for a (static config, set of swept fields, devices): compiled
    once, reused by later sweeps of the same shapes. Returns (program, run-axis sharding or None).
    mapped: for one stream of several, a `StreamProgram` that runs its runs one after another
    (`lax.map`) and in pieces of updates, instead of a vmap of whole runs. platform: the
    `choices_platform()` the trainer's choices are made for; it keys the cache only."""
    train = make_train(config, callback=None if callback is None else _RunCallback(callback),
                       callback_every=callback_every)

    def hparams_of(swept_values, base):
        hp = {n: swept_values[n] for n, kind in swept if kind == "hp"}
        env = {n: swept_values[n] for n, kind in swept if kind == "env"}
        if not env:  # nothing of the env swept (a multi-agent env has no params at all)
            return base.replace(**hp)
        return base.replace(**hp, env_params=base.env_params.replace(**env))

    def key_of(key_data):
        return jax.random.wrap_key_data(key_data, impl=key_impl)

    def tag_of(swept_values):
        return {"run": swept_values[RUN_TAG]} if RUN_TAG in swept_values else None

    if mapped:
        def init(keys, swept_values, base):
            return jax.lax.map(lambda xs: train.init(key_of(xs[0]), hparams_of(xs[1], base)),
                               (keys, swept_values))

        def advance(states, swept_values, base, first_update, num_updates):
            return jax.lax.map(
                lambda xs: train.run(xs[0], hparams_of(xs[1], base), num_updates, first_update,
                                     callback_extra=tag_of(xs[1])),
                (states, swept_values),
            )

        return StreamProgram(jax.jit(init), jax.jit(advance, static_argnums=4)), None

    def one_run(key_data, swept_values, base):
        hparams = hparams_of(swept_values, base)
        return train.run(train.init(key_of(key_data), hparams), hparams,
                         callback_extra=tag_of(swept_values))

    def runs(keys, swept_values, base):
        # Only swept leaves carry the run axis; the unswept `base` is shared, not copied per run.
        return jax.vmap(lambda k, v: one_run(k, v, base))(keys, swept_values)

    if len(devices) == 1:
        return jax.jit(runs), None
    mesh = Mesh(np.asarray(devices), (RUN_AXIS,))
    spec = P(RUN_AXIS)
    # check_vma=False: the trainer's loops start from unvarying constants (zeros) and carry
    # run-varying values, which the varying-axis type check would reject; nothing here communicates.
    sharded = jax.shard_map(runs, mesh=mesh, in_specs=(spec, spec, P()), out_specs=spec, check_vma=False)
    return jax.jit(sharded), NamedSharding(mesh, spec)


on_register(lambda env_id: _program.cache_clear())  # a replaced env: rebuild its sweep programs


def _global_array(x: np.ndarray, sharding, device: jax.Device):
    """Host values (identical on every process) as a run-sharded global array, or without a
    sharding (one device) as an array committed to `device`, where the program then runs."""
    if sharding is None:
        return jax.device_put(x, device)
    return jax.make_array_from_callback(x.shape, sharding, lambda index: x[index])


def _on_host(x, fn):
    """`fn` applied on the host to a run-sharded array, the result put back on the default device.

    Slicing the padding off (or reshaping) an array sharded over several devices is, on the
    device, an SPMD program with an all-gather: one per leaf, dispatched back to back, each waiting
    for every device thread at a rendezvous that XLA:CPU aborts the process over after 40 s (on a
    loaded machine it has). Copying the shards to the host needs no device program at all, costs
    one copy of the final state, and leaves each leaf on one device instead of replicated on
    every one."""
    return _through_key_data(lambda a: jax.device_put(fn(np.asarray(a))), x)


def _through_key_data(fn, x):
    """`fn(x)`; for a typed PRNG key array, `fn` of its raw key data, wrapped back as keys."""
    if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
        return jax.random.wrap_key_data(fn(jax.random.key_data(x)), impl=jax.random.key_impl(x))
    return fn(x)


def _fetch_if_multihost(out):
    """On several processes each holds only its devices' runs: gather every run to every host."""
    if jax.process_count() == 1:
        return out

    return jax.tree.map(
        lambda x: _through_key_data(lambda a: multihost_utils.process_allgather(a, tiled=True), x), out
    )


