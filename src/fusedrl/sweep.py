"""Many agents in one program: sweeps over seeds and traced hyperparameters, and data parallelism.

    swept = fusedrl.sweep(config, num_seeds=4, lr=[1e-4, 3e-4, 1e-3], gamma=[0.98, 0.99])
    swept.metrics["episode_return"].shape      # (4, 3, 2, num_updates): dims seed, lr, gamma
    swept.sel(lr=3e-4, seed=0)                 # one run (dims dropped)
    swept.to_table()                           # one row per run: hyperparameters, seed, summaries
    swept.plot(by="lr")                        # learning curves by value (matplotlib)

Only traced numbers can be swept: the `Hyperparams` fields (`TRACED_FIELDS`) and any field of the
env's params dataclass (e.g. CartPole's `gravity`). One compile per sweep, whatever the number of
runs. Swept leaves carry a leading run axis; the other leaves are passed once, unbatched. How the
runs execute:
- Several devices: one `jax.vmap` of `train(key, hparams)`, its run axis split across the devices
  (`shard_map` over a one-axis `Mesh`).
- One accelerator, or `streams=1`: one `jax.vmap` of all runs on it.
- One CPU device (the default there): `streams` host threads, one per usable core, each running
  its equal share of the runs one after another (a `lax.map` of the single-run program; every
  stream runs the same compiled executables), in pieces of about `STREAM_PIECE_UPDATES` updates
  of all its runs together: one fused execution per piece, the runs' states staying on the
  device between pieces (XLA:CPU holds some memory until an execution ends when several run at
  once; see that constant). Only the next piece's launch crosses the host boundary during
  training. Why streams: XLA:CPU runs an agent's many small kernels no faster batched over runs
  than one run at a time, and cannot spread them over its cores. Measured on a 2-core CPU at
  PureJaxRL's CartPole config (4 envs x 128 steps, 8 runs): the vmap gave 74.7k aggregate env
  steps/s on 1.4 cores, the same runs one after another 89.0k on one core, and two streams
  137-169k against 81-86k for the vmap (2026-11-22; current figures: README, "Speed").
Runs are padded to a multiple of the device (or stream) count and trimmed afterwards (on the
host when they were sharded over devices: see `_on_host`). Results are [runs, num_updates] per
metric plus one final state per run; nothing else grows with total timesteps.

Modes (the keyword arguments after `**` are the axes):
- "grid" (default): the Cartesian product; each field is a dimension of the result.
- "zip": the i-th values of every field form trial i (all lists of the same length); dims
  ("seed", "trial").
- "random": `num_samples` trials, each field drawn independently from its spec; dims
  ("seed", "trial"). A spec is `(low, high)`: uniform, but log-uniform for `lr` (the only field
  whose natural scale is logarithmic), integer-uniform (inclusive) for integer env params;
  `LogUniform(low, high)` / `Uniform(low, high)` to choose explicitly; a list: uniform choice
  among its values. Draws come from `key` (folded with a constant, so they do not correlate with
  the seeds' keys) and are reproducible.

Seeds: `seed_keys = jax.random.split(key, num_seeds)`; every run with seed index i uses
`seed_keys[i]`, so the run (seed=i, lr=v) is `jax.jit(train)(seed_keys[i], hparams with lr=v)`.
That single run is the same computation as its sweep slice, but not bit for bit: a reduction or
fused elementwise op over a batched [runs, ...] array is compiled with another loop order or
vectorisation than the same op on one run's [...] array, and a stream's `lax.map` body is
compiled inside a loop, with other fusion decisions than the standalone program. The differences
start at float32 rounding (~1e-7 after one update) and training amplifies them: under the vmap
(one stream, and every GPU/TPU sweep), a 200-update CartPole run first differed from its
standalone twin around update 40 and ended with another return (327 against 370). So a rerun
reproduces a sweep's run in distribution, not its exact curve; keep the sweep's own result for a
run's numbers. (On one CPU device, streams of `lax.map` matched standalone runs bit for bit in a
check at 30 and 200 updates, 2026-11-24; XLA does not promise it.)
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import csv
import dataclasses
import difflib
import functools
import math
import numbers
import operator
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from fusedrl._argtypes import is_int
from fusedrl.envs.host import is_host_env_id, jax_instead
from fusedrl.envs.registry import GYMNAX_DERIVED_PARAMS, check_env_param, on_register
from fusedrl.plotting import seed_statistics
from fusedrl.progress import hold_interrupt
from fusedrl.train.config import TRACED_FIELDS, Hyperparams, PPOConfig, number_dtype
from fusedrl.train.ppo import TrainResult, check_callback, episode_values, make_train, typed_key

MODES = ("grid", "zip", "random")
RUN_AXIS = "runs"  # mesh axis the sweep's runs are split along
LOG_UNIFORM_FIELDS = ("lr",)  # (low, high) ranges of these are drawn log-uniformly in random mode
_RANDOM_SALT = 0x5EED  # folded into `key` for random-search draws


# ------------------------------------------------------------------------------- random specs
@dataclasses.dataclass(frozen=True)
class Uniform:
    """Random-search spec: uniform on [low, high] (integers: inclusive, for integer fields)."""

    low: float
    high: float


@dataclasses.dataclass(frozen=True)
class LogUniform:
    """Random-search spec: log-uniform on [low, high], both > 0."""

    low: float
    high: float


@dataclasses.dataclass(frozen=True)
class Choice:
    """Random-search spec: uniform choice among `values`."""

    values: tuple


# ------------------------------------------------------------------------------------- result
@dataclasses.dataclass(frozen=True, eq=False)
class SweepResult:
    """The runs of a sweep, with named dimensions.

    Attributes:
      config: the base `PPOConfig` (its values of the swept fields are unused).
      mode: "grid", "zip" or "random".
      dims: dimension names, e.g. ("seed", "lr", "gamma") for a grid, ("seed", "trial") otherwise.
      axes: the coordinate of each dimension: seed -> [0..num_seeds), a grid field -> its values,
        trial -> [0..num_trials).
      values: each swept field's value for every run, shape `shape` (broadcast over the dims).
      metrics: each of the trainer's metrics, float/int numpy arrays [*shape, num_updates].
      result: the final `TrainResult` of every run, each leaf [*shape, ...] (None if dropped).
      seed_keys: [num_seeds] the PRNG key each seed index ran with.
    """

    config: PPOConfig
    mode: str
    dims: tuple[str, ...]
    axes: dict[str, np.ndarray]
    values: dict[str, np.ndarray]
    metrics: dict[str, np.ndarray]
    result: TrainResult | None
    seed_keys: jax.Array

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(self.axes[d]) for d in self.dims)

    @property
    def num_runs(self) -> int:
        return math.prod(self.shape)

    @property
    def fields(self) -> tuple[str, ...]:
        """The swept fields, in the order they were given."""
        return tuple(self.values)

    def axis(self, dim: str) -> int:
        """The position of dimension `dim` (for numpy reductions: `.mean(axis=r.axis("seed"))`)."""
        if dim not in self.dims:
            raise KeyError(f"no dimension {dim!r}; dims are {self.dims}.")
        return self.dims.index(dim)

    # ---------------------------------------------------------------------------- selection
    def isel(self, **indices: int | Sequence[int] | np.ndarray | slice) -> SweepResult:
        """Selects by position along dims: an int drops the dim, a list, 1-D array or slice keeps it."""
        out = self
        for dim, idx in indices.items():
            out = out._take(out.axis(dim), idx)
        return out

    def sel(self, **selectors: Any) -> SweepResult:
        """Selects by value: `sel(lr=3e-4, seed=0)`. A scalar drops its dim, a list keeps it.

        Floats match to a relative 1e-6 (values are stored as float32). In zip/random mode a swept
        field is not a dim: the trials whose value matches are kept (and the "trial" dim dropped
        when exactly one trial matches every scalar selector); with `trial=` as well, the given
        trials (in its order) whose values match, whatever the order of the arguments. A field
        that no longer varies (its dim, or "trial", dropped by an earlier selection) must match
        its one value, and then leaves the selection unchanged.
        """
        out = self
        trial_mask, trial_scalar = None, True
        for name, want in selectors.items():
            wants = [want] if np.ndim(want) == 0 else list(want)
            if name == "trial" and name in out.dims:
                continue  # taken last, together with the fields' matches along "trial"
            if name in out.dims:
                coord = out.axes[name]
                if np.ndim(want) == 0:
                    out = out._take(out.axis(name), _find(name, coord, want))
                else:
                    out = out._take(out.axis(name), [_find(name, coord, w) for w in wants])
            elif name in out.values and "trial" in out.dims:
                # In zip/random mode every field varies along "trial" only: read it there.
                first = tuple(slice(None) if d == "trial" else 0 for d in out.dims)
                along = out.values[name][first]
                trial_scalar &= np.ndim(want) == 0
                mask = np.zeros(len(along), bool)
                for w in wants:
                    mask |= _matches(along, w)
                trial_mask = mask if trial_mask is None else trial_mask & mask
            elif name in out.values:
                have = np.asarray(out.values[name])
                if not any(_matches(have, w).all() for w in wants):
                    value = _py(have.reshape(-1)[0]) if have.size else None
                    raise KeyError(f"{name}={want!r} does not match this selection: an earlier selection "
                                   f"left only {name}={value}.")
            else:
                valid = list(out.dims) + [f for f in out.values if f not in out.dims]
                raise KeyError(f"cannot select on {name!r}; valid names: {valid}.")
        if "trial" in selectors and "trial" in out.dims:
            want = selectors["trial"]
            coord = out.axes["trial"]
            scalar = np.ndim(want) == 0
            given = [_find("trial", coord, w) for w in ([want] if scalar else want)]
            kept = given if trial_mask is None else [t for t in given if trial_mask[t]]
            if not kept:
                raise KeyError(f"no trial matches {selectors}.")
            return out._take(out.axis("trial"), kept[0] if scalar else kept)
        if trial_mask is not None:
            hits = np.flatnonzero(trial_mask)
            if hits.size == 0:
                raise KeyError(f"no trial matches {selectors}.")
            idx = int(hits[0]) if (trial_scalar and hits.size == 1) else hits.tolist()
            out = out._take(out.axis("trial"), idx)
        return out

    def _take(self, ax: int, idx) -> SweepResult:
        dim = self.dims[ax]
        idx = _positions(idx, len(self.axes[dim]))
        keep = isinstance(idx, np.ndarray)
        index = (slice(None),) * ax + (idx,)

        def take(x):
            return x[index]

        dims = self.dims if keep else self.dims[:ax] + self.dims[ax + 1 :]
        axes = {d: (take_1d(c, idx) if d == dim else c) for d, c in self.axes.items() if keep or d != dim}
        seed_keys = self.seed_keys[idx] if dim == "seed" else self.seed_keys
        return dataclasses.replace(
            self,
            dims=dims,
            axes=axes,
            values={k: take(v) for k, v in self.values.items()},
            metrics={k: take(v) for k, v in self.metrics.items()},
            result=None if self.result is None else jax.tree.map(take, self.result),
            seed_keys=seed_keys,
        )

    def hparams(self, **index: int) -> Hyperparams:
        """The `Hyperparams` of one run, given its position along every dim except seed.

        With `seed_keys[i]` this trains the same run outside the sweep (up to float rounding,
        which training amplifies: see the module docstring):
        `jax.jit(make_train(r.config))(r.seed_keys[i], r.hparams(lr=1))`.
        """
        unknown = [n for n in index if n not in self.dims]
        if unknown:
            raise TypeError(f"hparams() got {unknown}, which are not dims of this result; dims are "
                            f"{self.dims}.")
        missing = [d for d in self.dims if d != "seed" and d not in index]
        if missing:
            raise TypeError(f"hparams() needs an index for every dim but seed; missing {missing}.")
        pos = tuple(0 if d == "seed" else int(index[d]) for d in self.dims)
        base = make_train(self.config).default_hparams()
        hp_changes, env_changes = {}, {}
        for name, v in self.values.items():
            value = jnp.asarray(v[pos])
            (hp_changes if name in TRACED_FIELDS else env_changes)[name] = value
        return base.replace(**hp_changes, env_params=base.env_params.replace(**env_changes))

    # ------------------------------------------------------------------------------ tables
    def to_table(self, metric: str = "episode_return") -> list[dict[str, Any]]:
        """One row per run (seed, swept values, summaries of `metric`), as a list of dicts.

        Row keys: the dims' coordinates ("seed", grid fields or "trial"), every swept field, then
        `final_<m>` (last update), `last10_<m>` (mean of the last 10% of updates, at least one)
        and `best_<m>` (maximum over updates), where <m> is `metric` without "episode_". Episode
        statistics count only from a run's first completed episode (NaN if none is in range).
        """
        curves = self._metric(metric)
        short = metric.removeprefix("episode_")
        num_updates = curves.shape[-1]
        tail = max(1, math.ceil(0.1 * num_updates))
        rows = []
        for pos in np.ndindex(self.shape):
            row: dict[str, Any] = {}
            for d, i in zip(self.dims, pos, strict=True):
                row[d] = _py(self.axes[d][i])
            for name, v in self.values.items():
                row[name] = _py(v[pos])
            c = curves[pos]  # NaN: no episode had ended yet (episode metrics)
            row[f"final_{short}"] = float(c[-1])
            row[f"last10_{short}"] = _nan_reduce(np.mean, c[-tail:])
            row[f"best_{short}"] = _nan_reduce(np.max, c)
            rows.append(row)
        return rows

    def to_dataframe(self, metric: str = "episode_return"):
        """`to_table` as a pandas DataFrame (needs pandas, which fusedrl does not depend on)."""
        try:
            import pandas as pd
        except ImportError as e:
            raise ImportError("to_dataframe needs pandas (pip install pandas); to_table() does not.") from e
        return pd.DataFrame.from_records(self.to_table(metric))

    def to_csv(self, path, metric: str = "episode_return") -> None:
        """Writes `to_table(metric)` as CSV (standard library only)."""
        rows = self.to_table(metric)
        with open(path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)

    def plot(self, by: str | None = None, metric: str = "episode_return", ax=None):
        """Learning curves of `metric` against env steps, one line per value of `by`.

        Each line is the mean over every run with that value (seeds and the other fields), with a
        band of one standard deviation. `by` defaults to the first swept field (or "seed").
        Returns the matplotlib Axes (needs matplotlib, imported here only).
        """
        try:
            import matplotlib.pyplot as plt
        except ImportError as e:
            raise ImportError("plot needs matplotlib (pip install matplotlib).") from e
        by = by or (self.fields[0] if self.fields else "seed")
        if by in self.values:
            labels = self.values[by]
        elif by in self.dims:
            labels = np.broadcast_to(
                self.axes[by].reshape([-1 if d == by else 1 for d in self.dims]), self.shape
            )
        else:
            raise KeyError(f"cannot plot by {by!r}; choose among {list(self.dims) + list(self.fields)}.")
        curves = self._metric(metric).reshape(-1, self._metric(metric).shape[-1])
        steps = np.asarray(self.metrics["env_steps"]).reshape(curves.shape)[0]
        labels = np.asarray(labels).reshape(-1)
        if ax is None:
            _, ax = plt.subplots(figsize=(6, 4))
        for value in np.unique(labels):
            group = curves[labels == value]
            mean, std, _, _ = seed_statistics(group)  # NaN-aware: before episodes end
            (line,) = ax.plot(steps, mean, label=f"{by}={_py(value):g}" if by != "seed" else f"seed {value}")
            if len(group) > 1:
                ax.fill_between(steps, mean - std, mean + std, color=line.get_color(), alpha=0.2)
        ax.set_xlabel("env steps")
        ax.set_ylabel(metric)
        ax.set_title(f"{self.config.env_id}: {metric} by {by}")
        ax.legend()
        return ax

    def _metric(self, metric: str) -> np.ndarray:
        if metric not in self.metrics:
            raise KeyError(f"no metric {metric!r}; metrics: {sorted(self.metrics)}.")
        return episode_values(self.metrics, metric)

    def __repr__(self) -> str:
        sizes = ", ".join(f"{d}={len(self.axes[d])}" for d in self.dims)
        return f"SweepResult({self.config.env_id}, {self.mode}, {sizes}, {self.num_runs} runs)"


def _nan_reduce(reduce, values: np.ndarray) -> float:
    """`reduce` over the values that are not NaN; NaN if there are none."""
    known = values[~np.isnan(values)]
    return float(reduce(known)) if known.size else float("nan")


def _positions(idx, size: int) -> int | np.ndarray:
    """A selector along a dim of `size` as an int (drops the dim) or a 1-D int array (keeps it).

    Slices, lists, tuples and arrays become a numpy int array: numpy, JAX and JAX key arrays (the
    seed keys) all index by it alike, whereas JAX rejects a Python list as an index.
    """
    if isinstance(idx, slice):
        return np.arange(size)[idx]
    if np.ndim(idx) == 0:
        return operator.index(idx)  # ints, numpy ints and 0-d int arrays; a float is a TypeError
    pos = np.asarray(idx)
    if pos.dtype == np.bool_:  # a mask, as in numpy
        if pos.shape != (size,):
            raise IndexError(f"a boolean selector needs shape ({size},), got {pos.shape}.")
        return np.flatnonzero(pos)
    if pos.ndim != 1 or (pos.size and not np.issubdtype(pos.dtype, np.integer)):
        raise IndexError(f"positions must be an int, a slice or a 1-D list of ints, got {idx!r}.")
    return pos.astype(int)


def take_1d(coord: np.ndarray, idx) -> np.ndarray:
    return np.asarray(coord)[np.asarray(idx, dtype=int)]


def _matches(values: np.ndarray, want) -> np.ndarray:
    values = np.asarray(values)
    if np.issubdtype(values.dtype, np.floating):
        return np.isclose(values, want, rtol=1e-6, atol=0.0)
    return values == want


def _find(name: str, coord: np.ndarray, want) -> int:
    hits = np.flatnonzero(_matches(coord, want))
    if hits.size == 0:
        raise KeyError(f"{name}={want!r} is not in the sweep; {name} values: {[_py(c) for c in coord]}.")
    return int(hits[0])


def _py(x):
    """A numpy scalar as a plain Python number (tables and CSV); float32 3e-4 stays 0.0003."""
    x = np.asarray(x)
    if np.issubdtype(x.dtype, np.floating):
        return float(str(x.astype(x.dtype.type)))
    if np.issubdtype(x.dtype, np.bool_):
        return bool(x)
    return int(x)


# --------------------------------------------------------------------------------- axis specs
def _env_fields(config: PPOConfig) -> dict[str, Any]:
    """The env's params fields and their values for `config` (defaults with overrides)."""
    from fusedrl.envs import make

    params = make(config.env_id, **config.env_params)[1]
    return {f.name: getattr(params, f.name) for f in dataclasses.fields(params)}


def _check_axes(config: PPOConfig, axes: Mapping[str, Any]) -> dict[str, Any]:
    """Validates axis names; returns the env params fields (name -> default value)."""
    env_fields = _env_fields(config)
    static = [f.name for f in dataclasses.fields(PPOConfig) if f.name not in TRACED_FIELDS]
    valid = list(TRACED_FIELDS) + [f for f in env_fields if f not in TRACED_FIELDS]
    for name in axes:
        if name in env_fields and name not in TRACED_FIELDS and np.shape(env_fields[name]) != ():
            shape = np.shape(env_fields[name])
            raise ValueError(
                f"cannot sweep {name!r}: it is an array-valued env param (shape {shape}), and a sweep "
                f"axis takes one number per run. Vmap train over it instead: hp = config.hparams(); "
                f"hps = hp.replace(env_params=hp.env_params.replace({name}=VALUES)) with VALUES of shape "
                f"[runs, *{shape}], and in_axes (keys, a tree of None with 0 at env_params.{name}), as the "
                f"README's learning-rate example does for lr."
            )
        if name in TRACED_FIELDS or name in env_fields:
            continue
        if name in ("seed", "seeds", "trial"):
            raise ValueError(
                f"{name!r} is not a hyperparameter: seeds are set with num_seeds=..., and 'trial' "
                f"is the dimension of zip/random sweeps."
            )
        if name in static:
            raise ValueError(
                f"cannot sweep {name!r}: it is a static field of PPOConfig (it sets array shapes, "
                f"the structure of the program or its initial parameters), so runs with different "
                f"values are different compiled programs and cannot be vmapped together. Run one "
                f"sweep per value, e.g. "
                f"`[fusedrl.sweep(config.replace({name}=v), ...) for v in values]`, or separate "
                f"runs. Sweepable (traced) names for {config.env_id}: {', '.join(valid)}."
            )
        close = difflib.get_close_matches(name, valid + static, n=3)
        hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        raise ValueError(
            f"unknown sweep axis {name!r}.{hint} Sweepable (traced) names for {config.env_id}: "
            f"{', '.join(valid)}."
        )
    return env_fields


def _dtype_of(name: str, env_fields: Mapping[str, Any]):
    if name in TRACED_FIELDS:
        return np.float32
    default = np.asarray(env_fields[name])
    if np.issubdtype(default.dtype, np.bool_):
        return np.bool_
    if np.issubdtype(default.dtype, np.integer):
        return np.int32
    return np.float32


def _as_values(name: str, values, dtype) -> np.ndarray:
    if isinstance(values, Uniform | LogUniform | Choice):
        raise TypeError(f"{name}: {type(values).__name__} is a random-search spec; use mode='random'.")
    arr = np.asarray(values)
    if arr.ndim == 0:
        raise ValueError(
            f"{name}={values!r}: an axis needs a list of values; to fix one value for every run, "
            f"set it in the config (config.replace({name}=...), or env_params={{...}} for env params)."
        )
    return _numbers(name, values, dtype)


def _numbers(name: str, values, dtype, what: str = "values") -> np.ndarray:
    """A non-empty 1-D list of numbers as a `dtype` array (grid and zip values, random choices),
    refusing what the cast would change silently: anything but numbers (strings such as '1e-3'
    too) and, for an integer field, numbers that are not whole."""
    arr = np.asarray(values)  # an object array for ints beyond 64 bits (2**70)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{name}: expected a non-empty 1-D list of {what}, got shape {arr.shape}.")
    if arr.dtype.kind not in "biuf" and not (
            arr.dtype.kind == "O" and all(isinstance(v, numbers.Real) for v in arr.tolist())):
        raise ValueError(
            f"{name}: {what} must be numbers, got {arr.tolist()!r}; write them as numbers "
            f"(1e-3, not '1e-3'), as the config field takes them."
        )
    _check_cast(name, arr.tolist(), dtype, what)
    return arr.astype(dtype)


def _check_cast(name: str, values: Sequence, dtype, what: str = "values") -> None:
    """Refuses numbers that a cast to `dtype` (int32, bool or float32: `_dtype_of`) would not keep:
    for an integer field anything but whole numbers in its range (numpy wraps 2**32 + 5 around to
    5 and turns 3e9 into -2**31), for a boolean one anything but 0 and 1, for a float32 one finite
    numbers that overflow to inf or underflow below its smallest normal number (0 or a subnormal,
    which XLA may flush to 0). NaN and inf stay NaN and inf in float32: the range checks of
    PPOConfig (`_validate_values`) and of env params decide about them."""
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        wrong = [v for v in values if not isinstance(v, numbers.Integral) and not math.isfinite(v)]
        if wrong:
            raise ValueError(f"{name} is an integer field; got {wrong[0]} among its {what} {list(values)}: "
                             f"give whole numbers in [{info.min}, {info.max}].")
        if not all(isinstance(v, numbers.Integral) or float(v).is_integer() for v in values):
            raise ValueError(f"{name} is an integer field; got non-integer {what} {list(values)}: give "
                             f"whole numbers.")
        wrong = [v for v in values if not info.min <= v <= info.max]
        if wrong:
            raise ValueError(
                f"{name}: {what} {wrong} out of range: {name} is an {np.dtype(dtype).name} field, whose "
                f"valid range is [{info.min}, {info.max}] (a cast would wrap them around)."
            )
    elif np.issubdtype(dtype, np.bool_):
        wrong = [v for v in values if not (v == 0 or v == 1)]
        if wrong:
            raise ValueError(f"{name} is a boolean field; got {wrong} among its {what}: give True/False "
                             f"(or 1/0).")
    else:
        tiny, big = float(np.finfo(dtype).smallest_normal), float(np.finfo(dtype).max)  # Python floats:
        # compared with a numpy float32, a Python float is cast to float32 (NEP 50), 1e39 to inf.

        def fits(v) -> bool:
            try:
                m = abs(float(v))
            except OverflowError:  # an int beyond a float64
                return False
            return not math.isfinite(m) or m == 0 or tiny <= m <= big

        wrong = [v for v in values if not fits(v)]
        if wrong:
            kind = np.dtype(dtype).name
            raise ValueError(
                f"{name}: {what} {wrong} out of {kind}'s range (values are cast to {kind}, where they "
                f"would become inf, or 0 or lose their precision): give 0 or magnitudes in "
                f"[{tiny:.4g}, {big:.4g}]."
            )


def _validate_values(config: PPOConfig, name: str, values: np.ndarray, default: Any) -> None:
    """Runs on each value the checks its field gets outside a sweep: PPOConfig's range checks of a
    traced field (lr > 0, gamma in (0, 1], ...), `fusedrl.make`'s of an env param (`default`: its
    value in the config; NaN and a time limit below 1 are refused, inf may be a limit that never
    binds, e.g. CartPole's x_threshold)."""
    for v in np.unique(values):
        try:
            if name in TRACED_FIELDS:
                config.replace(**{name: float(v)})
            else:
                check_env_param(config.env_id, name, v.item(), default)
        except (TypeError, ValueError) as e:
            got = "" if name in TRACED_FIELDS else f"got {v.item()}: "  # the config's message has it
            raise ValueError(f"sweep axis {name}: {got}{e}") from None


def _same_every_trial(name: str, spec, value) -> None:
    raise ValueError(
        f"{name}={spec!r}: a random-search axis with one value gives every trial {value}. Fix it in "
        f"the config instead (config.replace({name}=...); --set {name}=V in `fusedrl sweep`), or give "
        f"a range (low, high) or two or more values to choose from."
    )


def _sample(name: str, spec, dtype, num: int, key: jax.Array) -> np.ndarray:
    """`num` random-search draws of field `name` from `spec` (see the module docstring)."""
    if isinstance(spec, Choice) or (isinstance(spec, list | np.ndarray) and not isinstance(spec, tuple)):
        given = spec.values if isinstance(spec, Choice) else spec
        choices = _numbers(name, given, dtype, "choices")
        if np.unique(choices).size < 2:
            given = np.asarray(given).tolist()  # as given (choices are float32)
            _same_every_trial(name, given, given[0])
        idx = np.asarray(jax.random.randint(key, (num,), 0, choices.size))
        return choices[idx]
    if isinstance(spec, tuple) and len(spec) == 2:
        spec = (LogUniform if name in LOG_UNIFORM_FIELDS else Uniform)(*spec)
    if not isinstance(spec, Uniform | LogUniform):
        raise ValueError(
            f"{name}={spec!r}: in random mode give (low, high), Uniform(low, high), "
            f"LogUniform(low, high), or a list of values to choose from."
        )
    if not all(isinstance(b, numbers.Real) and not isinstance(b, bool) for b in (spec.low, spec.high)):
        raise ValueError(f"{name}={spec!r}: low and high must be numbers (1e-3, not '1e-3').")
    try:
        low, high = float(spec.low), float(spec.high)
    except OverflowError:  # an int beyond a float64
        low, high = math.inf, math.inf
    if not (math.isfinite(low) and math.isfinite(high)):
        raise ValueError(f"{name}: low and high must be finite, got ({spec.low}, {spec.high}).")
    if not low <= high:
        raise ValueError(f"{name}: low must be <= high, got ({low}, {high}).")
    if np.issubdtype(dtype, np.bool_):
        raise ValueError(f"{name} is a boolean field: give the values to choose from, [False, True].")
    if np.issubdtype(dtype, np.integer):
        if isinstance(spec, LogUniform):
            raise ValueError(f"{name} is an integer field: use Uniform(low, high), not LogUniform.")
        if not (low.is_integer() and high.is_integer()):
            raise ValueError(
                f"{name} is an integer field: its bounds (both inclusive) must be whole numbers, got "
                f"({spec.low}, {spec.high}); e.g. Uniform({math.ceil(low)}, {math.floor(high)}), or a "
                f"list of the values to choose from."
            )
        low, high = int(spec.low), int(spec.high)  # exact (a float of 2**53 + 1 is not)
        _check_cast(name, [low, high], dtype, "bounds")
        if low == high:
            _same_every_trial(name, spec, spec.low)
        info = np.iinfo(dtype)
        if (low, high) == (info.min, info.max):  # every value: what randint's span cannot hold
            return np.asarray(jax.random.bits(key, (num,), jnp.uint32)).view(np.int32).astype(dtype)
        # randint's bounds are parsed as `dtype`: its exclusive maxval must fit too.
        shift = int(high == info.max)
        draws = jax.random.randint(key, (num,), low - shift, high + 1 - shift, dtype) + shift
        return np.asarray(draws).astype(dtype)
    _check_cast(name, [low, high], dtype, "bounds")
    if np.float32(low) == np.float32(high):  # as drawn: float32
        _same_every_trial(name, spec, spec.low)
    u = np.asarray(jax.random.uniform(key, (num,), jnp.float32), np.float64)
    if isinstance(spec, LogUniform):
        if low <= 0:
            raise ValueError(f"{name}: LogUniform needs low > 0, got {low}.")
        return np.exp(np.log(low) + u * (np.log(high) - np.log(low))).astype(dtype)
    return (low + u * (high - low)).astype(dtype)


def _layout(config, num_seeds, mode, num_samples, key, axes, env_fields):
    """The sweep's dims, coordinates, and each swept field's value for every run (full shape)."""
    names = list(axes)
    dtypes = {n: _dtype_of(n, env_fields) for n in names}
    seeds = np.arange(num_seeds)
    if mode == "grid":
        if num_samples is not None:
            raise ValueError("num_samples is for mode='random'; a grid has every combination.")
        coords = {n: _as_values(n, axes[n], dtypes[n]) for n in names}
        for n, c in coords.items():
            # Each grid value is a coordinate: a repeat would train the same runs twice and
            # `sel` could reach only the first.
            repeats = sorted({_py(v) for i, v in enumerate(c) if _matches(c[:i], v).any()})
            if repeats:
                raise ValueError(
                    f"{n} lists {repeats} more than once; give each grid value once (num_seeds sets "
                    f"the repeats of every combination)."
                )
        dims = ("seed", *names)
        axes_out = {"seed": seeds, **coords}
        shape = tuple(len(axes_out[d]) for d in dims)
        values = {
            n: np.broadcast_to(coords[n].reshape([-1 if d == n else 1 for d in dims]), shape)
            for n in names
        }
    elif mode == "zip":
        if num_samples is not None:
            raise ValueError("num_samples is for mode='random'; zip takes the lists' common length.")
        coords = {n: _as_values(n, axes[n], dtypes[n]) for n in names}
        lengths = {n: len(v) for n, v in coords.items()}
        if len(set(lengths.values())) > 1:
            raise ValueError(
                f"mode='zip' pairs the i-th values of every axis, so all lists need the same length; "
                f"got lengths {lengths}. Use mode='grid' for every combination."
            )
        num_trials = next(iter(lengths.values()), 1)
        dims, axes_out = ("seed", "trial"), {"seed": seeds, "trial": np.arange(num_trials)}
        values = {n: np.broadcast_to(coords[n][None], (num_seeds, num_trials)) for n in names}
    elif mode == "random":
        if num_samples is None:
            raise ValueError("mode='random' needs num_samples >= 1 (the number of trials), got None.")
        if not is_int(num_samples):
            raise TypeError(f"num_samples must be an int (the number of random-search trials), got "
                            f"{num_samples!r} ({type(num_samples).__name__}).")
        if num_samples < 1:
            raise ValueError(
                f"mode='random' needs num_samples >= 1 (the number of trials), got {num_samples}."
            )
        if not names:
            raise ValueError(
                f"mode='random' needs at least one field spec to draw from, e.g. lr=(1e-5, 1e-3); "
                f"without one its {num_samples} trials would be the same run. To repeat the config "
                f"with different seeds, use num_seeds={num_samples} (in grid mode, with no axes)."
            )
        num_samples = int(num_samples)
        k = jax.random.fold_in(key, _RANDOM_SALT)
        draws = {n: _sample(n, axes[n], dtypes[n], num_samples, jax.random.fold_in(k, i))
                 for i, n in enumerate(names)}
        dims, axes_out = ("seed", "trial"), {"seed": seeds, "trial": np.arange(num_samples)}
        values = {n: np.broadcast_to(draws[n][None], (num_seeds, num_samples)) for n in names}
    else:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}.")
    for n in names:
        _validate_values(config, n, values[n], env_fields.get(n))
    return dims, axes_out, {n: np.ascontiguousarray(v) for n, v in values.items()}


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
    if not isinstance(config, PPOConfig):
        raise TypeError(f"sweep takes a PPOConfig, got {type(config).__name__}.")
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
    _check_devices(devices)
    env_fields = _check_axes(config, axes)
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
    dims, axes_out, values = _layout(config, num_seeds, mode, num_samples, key, axes, env_fields)
    shape = tuple(len(axes_out[d]) for d in dims)
    num_runs = math.prod(shape)
    devices = tuple(jax.devices() if devices is None else devices)
    streams = _num_streams(streams, devices, num_runs)
    return _Plan(num_seeds, key, dims, axes_out, values, shape, num_runs, devices, streams)


def _check_devices(devices) -> None:
    """Refuses a `devices` argument (of `sweep` or `data_parallel_train`) that is not None or a
    non-empty list of `jax.Device` objects."""
    if devices is None:
        return
    if isinstance(devices, str | jax.Device) or not isinstance(devices, Sequence | np.ndarray):
        raise TypeError(f"devices must be a list of jax.Device objects (e.g. jax.devices('cpu')), or "
                        f"None for jax.devices(); got {devices!r}.")
    for d in devices:
        if not isinstance(d, jax.Device):
            raise TypeError(f"devices must be jax.Device objects (e.g. jax.devices('cpu')), got "
                            f"{d!r} ({type(d).__name__}).")
    if len(devices) == 0:
        raise ValueError("devices is empty: give at least one device, or None for jax.devices().")


def check_sweep(
    config: PPOConfig,
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
    **axes: Any,
) -> None:
    """Raises the TypeError or ValueError `sweep` would raise for these arguments (the same
    arguments), before it compiles or trains anything; returns None if they are valid. `fusedrl
    sweep` calls it first, so that bad input is a usage error and any later error shows its
    traceback."""
    check_callback(callback, callback_every)
    _plan(config, num_seeds, mode, num_samples, key, devices, streams, axes)


def sweep(
    config: PPOConfig,
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
    **axes: Any,
) -> SweepResult:
    """Trains one agent per (seed, hyperparameter combination) in a single compiled program.

    Args:
      config: the base `PPOConfig`; every run uses its static fields and unswept values.
      num_seeds: seeds per combination (a "seed" dimension of that size, always first).
      mode: "grid" (Cartesian product), "zip" (i-th values together) or "random" (`num_samples`
        draws per field; see the module docstring for the specs).
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
        1. See the module docstring for why and for the measurements.
      **axes: field=values, e.g. lr=[1e-4, 3e-4], gravity=[9.8, 12.0]. Traced fields only. Values
        are cast to the field's dtype (float32, or int32 for an integer env param) and must keep
        their value in it; env params must be finite.

    Returns:
      A `SweepResult` with metrics [num_seeds, *axis sizes, num_updates].
    """
    check_callback(callback, callback_every)
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
    swept = tuple((n, "hp" if n in TRACED_FIELDS else "env") for n in values)
    batched = {n: values[n].reshape(-1)[run_index] for n in values}
    if callback is not None:  # "run" for the callback: -1 marks padding, which calls no one
        batched[RUN_TAG] = tags

    program, sharding = _program(_static_part(config), swept, devices, str(key_impl), callback,
                                 callback_every, streams > 1)
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
    if not keep_state:
        out = out.replace(state=None)
    out = _fetch_if_multihost(out)

    def unflatten(x):
        return x[:num_runs].reshape(shape + x.shape[1:])

    metrics = {k: unflatten(np.asarray(v)) for k, v in out.metrics.items()}
    if not keep_state:
        result = None
    elif sharding is None:
        result = jax.tree.map(unflatten, out)
    else:
        result = jax.tree.map(lambda x: _on_host(x, unflatten), out)
    return SweepResult(
        config=config, mode=mode, dims=dims, axes=axes_out, values=values, metrics=metrics,
        result=result, seed_keys=seed_keys,
    )


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


def _base_hparams(config: PPOConfig) -> Hyperparams:
    """The trainer's default hyperparameters as numpy arrays of the dtypes they train with.

    The env params' Python numbers (dataclass defaults, `config.env_params`) are weakly typed in
    the trainer: float32 and int32 in its float32 computations, whatever jax_enable_x64. As numpy
    arrays they become float32 and int32 too (the swept values' dtypes, `_dtype_of`), not float64
    and int64 (`np.asarray(9.8)`), which under x64 would make the env state float64 and the
    training loop's carry change type. Arrays keep their dtype, as in the trainer."""

    return jax.tree.map(lambda x: np.asarray(x, number_dtype(x)), make_train(config).default_hparams())


def _static_part(config: PPOConfig) -> PPOConfig:
    """`config` with its traced values reset, so sweeps that differ only there share a program."""
    defaults = PPOConfig()
    return config.replace(**{f: getattr(defaults, f) for f in TRACED_FIELDS})


def _num_streams(streams, devices, num_runs: int) -> int:
    """How many host threads share the runs (1: one vmapped program). See `sweep`."""
    cpu_alone = len(devices) == 1 and devices[0].platform == "cpu"
    if streams is None:
        return min(num_runs, usable_cores()) if cpu_alone else 1
    if not is_int(streams) or streams < 1:
        raise ValueError(f"streams must be a positive int (or None for the default), got {streams!r}.")
    if streams > 1 and not cpu_alone:
        raise ValueError(
            f"streams={streams} runs host threads on one CPU device, but this sweep runs on "
            f"{len(devices)} {devices[0].platform} device(s). Leave streams=None (or 1): several "
            f"devices already split the runs, and an accelerator runs the vmapped program best."
        )
    return int(streams)


def usable_cores() -> int:
    """CPU cores this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


_STREAM_EXECUTABLES: dict[tuple, Any] = {}

#: A stream runs its share in pieces of about this many updates in all, one execution each: its
#: `lax.map` trains its runs one after another, so each run advances by this many updates divided
#: by the stream's number of runs (at least 1) per piece. XLA:CPU (jax 0.10.2) keeps memory from
#: YNNPACK's threaded dots and reductions until an execution ends when two executions run at once:
#: Breakout-MinAtar's preset (2x256 MLP) grew ~13 MB/s on two streams and a 4-seed sweep of it was
#: killed for lack of memory after ~40 min on 24 GiB; one execution at a time, or these ops left
#: to other kernels, stayed flat (docs/multihost.md, "Why streams run in pieces").
STREAM_PIECE_UPDATES = 128


class StreamProgram(NamedTuple):
    """A stream's jitted programs: `init(keys, swept, base)` -> the runs' `RunnerState`s, and
    `advance(states, swept, base, first_update, num_updates)` (the last static) -> `TrainResult`
    of the runs continued for `num_updates` updates; both `lax.map` over the runs."""

    init: Any
    advance: Any


def update_pieces(num_updates: int, size: int | None = None) -> list[tuple[int, int]]:
    """(first update, count) of consecutive pieces covering `num_updates`, none longer than `size`
    (default `STREAM_PIECE_UPDATES`): equal pieces when some count between ceil(n / size) and
    twice that divides n (one program to compile), else two sizes that differ by one."""
    size = STREAM_PIECE_UPDATES if size is None else size
    k = max(1, -(-num_updates // size))
    k = next((d for d in range(k, 2 * k + 1) if num_updates % d == 0), k)
    q, r = divmod(num_updates, k)
    counts = [q + 1] * r + [q] * (k - r)
    firsts = np.cumsum([0] + counts[:-1])
    return [(int(f), c) for f, c in zip(firsts, counts, strict=True)]


def compile_in_pieces(init, init_args: Sequence, advance, advance_args: Sequence,
                      pieces: Sequence[tuple[int, int]]) -> tuple[Any, dict[int, Any]]:
    """Compiles jitted `init(*init_args)` -> states and, once per distinct piece length n in
    `pieces`, jitted `advance(states, *advance_args, first_update, n)` (n static): the executables
    `continue_in_pieces` calls. The states' shapes come from the lowered `init` (no second trace)."""
    lowered = init.lower(*init_args)
    first = jax.ShapeDtypeStruct((), jnp.int32)
    return lowered.compile(), {n: advance.lower(lowered.out_info, *advance_args, first, n).compile()
                               for n in sorted({n for _, n in pieces})}


def continue_in_pieces(states, advance: Callable, pieces: Sequence[tuple[int, int]],
                       stop: threading.Event | None = None) -> TrainResult:
    """`advance(states, first_update, num_updates) -> TrainResult` called piece after piece, each
    from the previous one's states; the pieces' metrics joined along their update axis (1).

    With `stop`, at most two pieces are in flight (each launched once the one two before it has
    ended, so the device never waits for a launch), and once `stop` is set no further piece starts:
    KeyboardInterrupt is raised instead (`run_shares` sets it when another share fails or Ctrl-C
    arrives, so a sweep stops within about two pieces instead of running to its end)."""
    metrics, in_flight = [], []  # only the last two pieces' results: each holds its states
    try:
        for first, n in pieces:
            if stop is not None:
                if len(in_flight) >= 2:
                    jax.block_until_ready(in_flight.pop(0))
                if stop.is_set():
                    raise KeyboardInterrupt
            out = advance(states, first, n)
            states = out.state
            metrics.append(out.metrics)
            if stop is not None:
                in_flight.append(out)
    except BaseException:
        # Leave no piece running: a process that exits while one runs (Ctrl-C, then exit 130)
        # can abort ("terminate called without an active exception", jax 0.10.2).
        for out in in_flight:
            try:
                jax.block_until_ready(out)
            except Exception:  # e.g. its callback stopped it: the error raised here says enough
                pass
        raise
    return out.replace(metrics=join_updates(metrics))


def join_updates(metrics: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per-update metrics [runs, U_i] of consecutive stretches of updates, joined along axis 1."""
    return {k: jnp.concatenate([m[k] for m in metrics], axis=1) for k in metrics[0]}


def _run_streams(program: StreamProgram, streams: int, run_keys, batched, base,
                 num_updates: int, device: jax.Device | None = None) -> TrainResult:
    """Runs the runs in `streams` equal slices, one host thread each, every slice in pieces of
    updates (`update_pieces`, `STREAM_PIECE_UPDATES`), and concatenates the results in run order;
    on `device` if given (the executables are compiled for it and the inputs committed to it)."""
    if device is not None:
        run_keys, batched = jax.device_put((run_keys, batched), device)
    per = run_keys.shape[0] // streams
    args = [(run_keys[i * per:(i + 1) * per], {n: v[i * per:(i + 1) * per] for n, v in batched.items()})
            for i in range(streams)]
    pieces = update_pieces(num_updates, max(1, STREAM_PIECE_UPDATES // per))
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

    def part(i, stop):
        keys, swept = args[i]
        out = jax.block_until_ready(continue_in_pieces(
            init(keys, swept, base),
            lambda states, first, n: advance[n](states, swept, base, np.int32(first)),
            pieces, stop,
        ))
        # An executable's outputs may come back uncommitted (then the concatenation below would
        # run on the default device); committing them to where they are copies nothing.
        return out if device is None else jax.device_put(out, device)

    return run_shares(part, streams, "fusedrl-sweep")


def run_shares(part: Callable[[int, threading.Event], Any], streams: int, thread_name_prefix: str):
    """`part(i, stop)` for i in range(streams), each in its own host thread, all at once; their
    result pytrees concatenated along axis 0 in order of i. An exception in a part, or a Ctrl-C
    here, sets `stop` (for `continue_in_pieces`), waits for the parts to return, and is re-raised."""
    stop = threading.Event()
    with concurrent.futures.ThreadPoolExecutor(streams, thread_name_prefix=thread_name_prefix) as pool:
        try:
            futures = [pool.submit(part, i, stop=stop) for i in range(streams)]
            # As soon as any part fails (not only once the parts before it have returned).
            done, _ = concurrent.futures.wait(futures, return_when=concurrent.futures.FIRST_EXCEPTION)
        except BaseException:  # Ctrl-C while starting the parts or waiting for them
            stop.set()
            raise
        failed = [f for f in futures if f in done and f.exception() is not None]
        if failed:  # the first failure itself, not the KeyboardInterrupt `stop` gives the others
            stop.set()
            failed[0].result()
        parts = [f.result() for f in futures]
    return jax.tree.map(lambda *xs: jnp.concatenate(xs), *parts)


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
def _program(config, swept, devices, key_impl, callback, callback_every, mapped=False):
    """The jitted sweep program for a (static config, set of swept fields, devices): compiled
    once, reused by later sweeps of the same shapes. Returns (program, run-axis sharding or None).
    mapped: for one stream of several, a `StreamProgram` that runs its runs one after another
    (`lax.map`) and in pieces of updates, instead of a vmap of whole runs."""
    train = make_train(config, callback=None if callback is None else _RunCallback(callback),
                       callback_every=callback_every)

    def hparams_of(swept_values, base):
        hp = {n: swept_values[n] for n, kind in swept if kind == "hp"}
        env = {n: swept_values[n] for n, kind in swept if kind == "env"}
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
    device, an SPMD program with an all-gather: one per leaf, dispatched back to back without
    waiting. One such all-gather aborted a CI run on a 2-core machine (XLA:CPU, 4 forced host
    devices: 2 of the 4 device threads reached its rendezvous within XLA's 40 s limit). The cause
    was not found: 12 local runs of that test's script, half of them beside 3 busy loops, passed,
    as did 52,800 such all-gathers in a loop. Copying the shards to the host needs no device
    program at all, costs one copy of the final state, and leaves each leaf on one device instead
    of replicated on every one."""
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
    from jax.experimental import multihost_utils

    return jax.tree.map(
        lambda x: _through_key_data(lambda a: multihost_utils.process_allgather(a, tiled=True), x), out
    )


# ----------------------------------------------------------------------------- data parallel
DATA_AXIS = "data"  # axis the shards of one data-parallel agent run along


def data_parallel_train(
    config: PPOConfig,
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
    random run as `make_train(config)`.

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
    if is_host_env_id(config.env_id):
        raise ValueError(
            f"cannot split {config.env_id} over shards: a Gymnasium env steps on the host (the host "
            f"bridge), outside the compiled program the shards run. Use {jax_instead(config.env_id)} "
            f"instead, or train the Gymnasium env as one agent (`fusedrl.make_train(config)`)."
        )
    _check_devices(devices)
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
    local_envs = config.num_envs // num_shards
    try:
        # Checked without normalize_adv: PPOConfig refuses one-transition minibatches under it, but
        # a shard's minibatch is normalised with the statistics of the agent's (all shards'), whose
        # size `config` has passed that check with.
        local = config.replace(
            num_envs=local_envs, total_timesteps=config.num_updates * local_envs * config.num_steps,
            normalize_adv=False,
        )
    except ValueError as e:
        raise ValueError(f"per-shard config of a {num_shards}-way data-parallel run: {e}") from None
    object.__setattr__(local, "normalize_adv", config.normalize_adv)  # frozen; validated above
    train = make_train(local, axis_name=DATA_AXIS)

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
                                   check_vma=False)  # as in `_program`; pmean is explicit
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
