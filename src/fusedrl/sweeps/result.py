"""`SweepResult`: the runs of a sweep with named dimensions, selection, tables and plots."""

from __future__ import annotations

import csv
import dataclasses
import math
import operator
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from fusedrl.metrics import episode_values
from fusedrl.plotting import iqm_band
from fusedrl.train import Hyperparams, OnPolicyConfig, TrainResult, make_train


@dataclasses.dataclass(frozen=True, eq=False)
class SweepResult:
    """The runs of a sweep, with named dimensions.

    Attributes:
      config: the base config (`PPOConfig`, `A2CConfig` or `ReinforceConfig`; its values of the
        swept fields are unused).
      mode: "grid", "zip" or "random".
      dims: dimension names, e.g. ("seed", "lr", "gamma") for a grid, ("seed", "trial") otherwise.
      axes: the coordinate of each dimension: seed -> [0..num_seeds), a grid field -> its values,
        trial -> [0..num_trials).
      values: each swept field's value for every run, shape `shape` (broadcast over the dims).
      metrics: each of the trainer's metrics, float/int numpy arrays [*shape, num_updates].
      result: the final `TrainResult` of every run, each leaf [*shape, ...] (None if dropped).
      seed_keys: [num_seeds] the PRNG key each seed index ran with.
      eval_returns: returns of the greedy evaluation that ends the sweep, float32
        [*shape, eval_episodes] (`fusedrl.sweep(..., eval_episodes=N)`); None without one. NaN
        for an episode that had not ended after `max_steps`, and for every episode of a run whose
        parameters are not finite (see `fusedrl.evaluate`).
    """

    config: OnPolicyConfig
    mode: str
    dims: tuple[str, ...]
    axes: dict[str, np.ndarray]
    values: dict[str, np.ndarray]
    metrics: dict[str, np.ndarray]
    result: TrainResult | None
    seed_keys: jax.Array
    eval_returns: np.ndarray | None = None

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
                    mask |= values_match(along, w)
                trial_mask = mask if trial_mask is None else trial_mask & mask
            elif name in out.values:
                have = np.asarray(out.values[name])
                if not any(values_match(have, w).all() for w in wants):
                    value = as_python(have.reshape(-1)[0]) if have.size else None
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
            eval_returns=None if self.eval_returns is None else take(self.eval_returns),
        )

    def hparams(self, **index: int) -> Hyperparams:
        """The `Hyperparams` of one run, given its position along every dim except seed.

        With `seed_keys[i]` this trains the same run outside the sweep (up to float rounding,
        which training amplifies: see `fusedrl.sweeps.program`):
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
            (hp_changes if name in self.config.traced_fields() else env_changes)[name] = value
        return base.replace(**hp_changes, env_params=base.env_params.replace(**env_changes))

    # ------------------------------------------------------------------------------ tables
    def to_table(self, metric: str = "episode_return") -> list[dict[str, Any]]:
        """One row per run (seed, swept values, summaries of `metric`), as a list of dicts.

        Row keys: the dims' coordinates ("seed", grid fields or "trial"), every swept field, then
        `final_<m>` (last update), `last10_<m>` (mean of the last 10% of updates, at least one)
        and `best_<m>` (maximum over updates), where <m> is `metric` without "episode_". Episode
        statistics count only from a run's first completed episode (NaN if none is in range).
        With a final evaluation (`eval_returns`), `eval_return`: the mean of the run's evaluation
        episodes that ended (NaN if none did).
        """
        curves = self._metric(metric)
        short = metric.removeprefix("episode_")
        num_updates = curves.shape[-1]
        tail = max(1, math.ceil(0.1 * num_updates))
        rows = []
        for pos in np.ndindex(self.shape):
            row: dict[str, Any] = {}
            for d, i in zip(self.dims, pos, strict=True):
                row[d] = as_python(self.axes[d][i])
            for name, v in self.values.items():
                row[name] = as_python(v[pos])
            c = curves[pos]  # NaN: no episode had ended yet (episode metrics)
            row[f"final_{short}"] = float(c[-1])
            row[f"last10_{short}"] = _nan_reduce(np.mean, c[-tail:])
            row[f"best_{short}"] = _nan_reduce(np.max, c)
            if self.eval_returns is not None:
                row["eval_return"] = _nan_reduce(np.mean, np.asarray(self.eval_returns[pos], np.float64))
            rows.append(row)
        return rows

    def summary(self, metric: str = "episode_return") -> list[dict[str, Any]]:
        """The seed-averaged table: one row per combination (grid point or trial), best first.

        Row keys: the combination's dims and swept fields, "seeds" (how many), then the mean and
        the (population) std over seeds of each summary of `to_table`: `<stat>_<m>_mean` and
        `<stat>_<m>_std` for stat in final, last10, best, and `eval_return_mean`/`_std` with a
        final evaluation. Rows are sorted by `last10_<m>_mean`, highest first; a combination with
        a run in which no episode ended has NaN means and comes last.
        """
        rows = self.to_table(metric)
        short = metric.removeprefix("episode_")
        keys = [d for d in self.dims if d != "seed"] + [f for f in self.fields if f not in self.dims]
        stats = [f"{stat}_{short}" for stat in ("final", "last10", "best")]
        if self.eval_returns is not None:
            stats.append("eval_return")
        groups: dict[tuple, list[dict[str, Any]]] = {}
        for row in rows:
            groups.setdefault(tuple(row[k] for k in keys), []).append(row)
        out = []
        for key, members in groups.items():
            entry = dict(zip(keys, key, strict=True))
            entry["seeds"] = len(members)
            for stat in stats:
                vals = np.array([m[stat] for m in members])
                entry[f"{stat}_mean"] = float(vals.mean())
                entry[f"{stat}_std"] = float(vals.std())
            out.append(entry)
        out.sort(key=lambda e: (np.isnan(e[f"last10_{short}_mean"]), -e[f"last10_{short}_mean"]))
        return out

    def to_dataframe(self, metric: str = "episode_return", *, summary: bool = False):
        """`to_table` (or with `summary`, the seed-averaged `summary`) as a pandas DataFrame
        (needs pandas, which fusedrl does not depend on)."""
        try:
            import pandas as pd
        except ImportError as e:
            raise ImportError("to_dataframe needs pandas (pip install pandas); to_table() does not.") from e
        return pd.DataFrame.from_records(self.summary(metric) if summary else self.to_table(metric))

    def to_csv(self, path, metric: str = "episode_return", *, summary: bool = False) -> None:
        """Writes `to_table(metric)` (with `summary`, `summary(metric)`) as CSV (standard library
        only)."""
        rows = self.summary(metric) if summary else self.to_table(metric)
        with open(path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)

    def plot(self, by: str | None = None, metric: str = "episode_return", ax=None):
        """Learning curves of `metric` against env steps, one line per value of `by`.

        Each line is the interquartile mean over every run with that value (seeds and the other
        fields), with its 95% stratified-bootstrap interval (`fusedrl.plotting.iqm_band`); the legend
        sits right of the axes. `by` defaults to the first swept field (or "seed").
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
            _, ax = plt.subplots(figsize=(8.4, 4), layout="constrained")
        for value in np.unique(labels):
            group = curves[labels == value]
            center, low, high = iqm_band(group)  # NaN-aware: before episodes end
            label = f"{by}={as_python(value):g}" if by != "seed" else f"seed {value}"
            if len(group) > 1:
                label += f" (IQM of {len(group)} runs, 95% interval)"
            (line,) = ax.plot(steps, center, label=label)
            if len(group) > 1:
                ax.fill_between(steps, low, high, color=line.get_color(), alpha=0.2, linewidth=0)
        ax.set_xlabel("env steps")
        ax.set_ylabel(metric)
        ax.set_title(f"{self.config.env_id}: {metric} by {by}")
        ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize="small", frameon=False)
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


def values_match(values: np.ndarray, want) -> np.ndarray:
    values = np.asarray(values)
    if np.issubdtype(values.dtype, np.floating):
        return np.isclose(values, want, rtol=1e-6, atol=0.0)
    return values == want


def _find(name: str, coord: np.ndarray, want) -> int:
    hits = np.flatnonzero(values_match(coord, want))
    if hits.size == 0:
        values = [as_python(c) for c in coord]
        raise KeyError(f"{name}={want!r} is not in the sweep; {name} values: {values}.")
    return int(hits[0])


def as_python(x):
    """A numpy scalar as a plain Python number (tables and CSV); float32 3e-4 stays 0.0003."""
    x = np.asarray(x)
    if np.issubdtype(x.dtype, np.floating):
        return float(str(x.astype(x.dtype.type)))
    if np.issubdtype(x.dtype, np.bool_):
        return bool(x)
    return int(x)


