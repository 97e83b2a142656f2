"""Learning curves with matplotlib (no pyplot state: safe in scripts, CLIs and notebooks)."""

from __future__ import annotations

import io
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from fusedrl.files import write_atomic
from fusedrl.metrics import EPISODE_METRICS, episode_values


def curve_figure(metrics: Mapping[str, np.ndarray], *, metric: str = "episode_return",
                 title: str | None = None, smooth: int | None = None):
    """A matplotlib Figure: `metric` against env steps; over seeds, the interquartile mean and its 95%
    stratified-bootstrap interval (`iqm_band`), every seed as a thin labelled line.

    Args:
      metrics: a run's metrics, each [num_updates] or [num_seeds, num_updates] (vmapped run).
      metric: which metric to plot.
      title: the axes title.
      smooth: trailing moving-average window in updates, applied to each seed before the
        statistics (default: 1/50 of the run; 1 plots the raw values).

    Episode statistics start at a seed's first completed episode: before it, the trainer reports 0.0
    (`episode_length` 0), which is no episode's return, so those updates are left out.
    """
    return runs_figure([(None, metrics)], metric=metric, title=title, smooth=smooth)


def runs_figure(runs: Sequence[tuple[str | None, Mapping[str, np.ndarray]]], *,
                metric: str = "episode_return", title: str | None = None, smooth: int | None = None):
    """A matplotlib Figure with the learning curves of several runs (`fusedrl plot`), one colour each.

    Args:
      runs: (label, metrics) pairs; metrics as in `curve_figure`. A label of None (one run) draws
        each seed in its own colour.
      metric, title, smooth: as in `curve_figure` (the window is 1/50 of each run by default).

    Legends sit to the right of the axes, never on the curves.
    """
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8.4, 3.8), dpi=100, layout="constrained")
    ax = fig.add_subplot()
    windows, drawn, x_end = set(), False, 0.0
    for i, (label, metrics) in enumerate(runs):
        x, y, raw, window = _curves(metrics, metric, smooth)
        windows.add(window)
        x_end = max(x_end, float(x[-1]) if len(x) else 0.0)
        drawn |= bool(np.isfinite(y).any())
        _draw_run(ax, x, y, raw, window, color=f"C{i % 10}", label=label)
    if not drawn:  # nothing to draw (matplotlib would show an empty axis around 0): say why
        ax.set_xlim(0, x_end)
        why = "no episode ended in this run" if metric in EPISODE_METRICS else f"no finite {metric}"
        ax.text(0.5, 0.5, why, transform=ax.transAxes, ha="center", va="center")
    ax.set_xlabel("env steps (per seed)")
    window_text = (f"\n(moving average, {windows.pop()} updates)" if len(windows) == 1 else
                   "\n(moving average, 1/50 of each run)") if windows != {1} else ""
    ax.set_ylabel(metric.replace("_", " ") + window_text)
    if title:
        ax.set_title(title)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize="small", frameon=False)
    return fig


def _curves(metrics, metric, smooth):
    """(x [U], smoothed y [S, U], raw y [S, U], window) of one run's `metric`."""
    if metric not in metrics:
        raise KeyError(f"no metric {metric!r} in this run; its metrics: {', '.join(sorted(metrics))}.")
    y = episode_values(metrics, metric)
    x = np.asarray(metrics["env_steps"], np.float64)
    if y.ndim == 1:
        y, x = y[None], x[None]
    x = x[0]
    window = max(1, y.shape[1] // 50) if smooth is None else max(1, int(smooth))
    return x, (_moving_average(y, window) if window > 1 else y), y, window


#: Distinct seed colours of a one-run figure (the IQM is black, its interval grey).
_SEED_COLORS = [f"C{i}" for i in range(10)]


def _draw_run(ax, x, y, raw, window, *, color, label):
    """One run's curves on `ax`: a lone seed as its (smoothed) line over the raw values; several
    seeds as their IQM, its 95% interval and a thin line per seed."""
    name = f"{label}: " if label else ""
    if y.shape[0] == 1:
        if window > 1:
            ax.plot(x, raw[0], color=color, alpha=0.25, linewidth=0.6, label=f"{name}per update")
            ax.plot(x, y[0], color=color, linewidth=2, label=f"{name}moving average ({window} updates)")
        else:
            ax.plot(x, y[0], color=color, linewidth=2, label=label)
        return
    center, low, high = iqm_band(y)
    one_run = label is None
    for s, seed_curve in enumerate(y):
        if one_run:
            seed_color = _SEED_COLORS[s % len(_SEED_COLORS)]
            seed_label = f"seed {s}" if s < len(_SEED_COLORS) else None
            if s == len(_SEED_COLORS):
                seed_label = f"seeds {s}-{y.shape[0] - 1} (colours repeat)"
        else:
            seed_color, seed_label = color, (f"{name}each seed ({y.shape[0]})" if s == 0 else None)
        ax.plot(x, seed_curve, color=seed_color, alpha=0.45 if one_run else 0.3, linewidth=0.7,
                label=seed_label)
    band_color, line_color = ("0.5", "black") if one_run else (color, color)
    # Above the seed lines (a filled area's default zorder, 1, would put it under them, out of sight).
    ax.fill_between(x, low, high, color=band_color, alpha=0.5, linewidth=0, zorder=2.5,
                    label=f"{name}95% interval (stratified bootstrap)")
    ax.plot(x, center, color=line_color, linewidth=2.2, zorder=3, label=f"{name}IQM of {y.shape[0]} seeds")


def _moving_average(y: np.ndarray, window: int) -> np.ndarray:
    """Trailing mean over the last `window` updates (fewer at the start), along the last axis.

    NaN entries (no value) are left out of the means; a window of only NaN gives NaN.
    """

    def trailing_sum(v):
        c = np.cumsum(v, axis=-1)
        c[..., window:] = c[..., window:] - c[..., :-window]
        return c

    known = ~np.isnan(y)
    total, counts = trailing_sum(np.where(known, y, 0.0)), trailing_sum(known.astype(np.float64))
    return np.divide(total, counts, out=np.full_like(total, np.nan), where=counts > 0)


def iqm(scores: np.ndarray, axis: int | None = 0) -> np.ndarray:
    """The interquartile mean: the mean of the middle 50% of `scores` along `axis` (None: all), i.e.
    `scipy.stats.trim_mean(scores, 0.25)`, rliable's `aggregate_iqm` (Agarwal et al., 2021)."""
    from scipy.stats import trim_mean  # start-up time: scipy.stats is slow to import; only plots need it

    return trim_mean(scores, proportiontocut=0.25, axis=axis)


def stratified_bootstrap_interval(scores: np.ndarray, *, reps: int = 2000, size: float = 0.95,
                                  seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """rliable's percentile interval of the IQM over runs and tasks, at each point.

    Args:
      scores: [num_runs, num_tasks, num_points] (a curve: points are updates), no NaN.
      reps: bootstrap resamples; each draws `num_runs` runs with replacement within every task
        (stratified: every task keeps its count of runs).
      size: the interval's coverage (0.95: from the 2.5th to the 97.5th percentile).
      seed: of the resampling (numpy's Generator): the same scores give the same interval.

    Returns:
      (low, high), each [num_points]: percentiles of the resampled IQMs. Every resampled IQM is a mean
      of observed scores, so the interval never leaves the range the runs reached.
    """
    scores = np.asarray(scores, np.float64)
    runs, tasks, points = scores.shape
    rng = np.random.default_rng(seed)
    task = np.arange(tasks)[None, None, :]
    chunk = max(1, 2_000_000 // max(1, runs * tasks * points))  # bounded memory for long curves
    stats = []
    for start in range(0, reps, chunk):
        n = min(chunk, reps - start)
        picked = scores[rng.integers(0, runs, size=(n, runs, tasks)), task]  # [n, runs, tasks, points]
        stats.append(iqm(picked.reshape(n, runs * tasks, points), axis=1))
    tail = 100.0 * (1.0 - size) / 2.0
    low, high = np.percentile(np.concatenate(stats), [tail, 100.0 - tail], axis=0)
    return low, high


def iqm_band(y: np.ndarray, *, reps: int = 2000, seed: int = 0):
    """(IQM, low, high) over seeds (axis 0) of curves `y` [num_seeds, num_updates], at each update.

    Each update uses the seeds that have a value there (not NaN: before a seed's first completed
    episode it has none); NaN where none has. The interval is `stratified_bootstrap_interval` of one
    task, clipped to the lowest and highest seed at that update (a guarantee, whatever the resampling).
    """
    y = np.asarray(y, np.float64)
    center, low, high = (np.full(y.shape[1], np.nan) for _ in range(3))
    known = ~np.isnan(y)
    # Updates where the same seeds have values share one bootstrap (seeds start one by one: few groups).
    masks, group = np.unique(known.T, axis=0, return_inverse=True)
    for g, mask in enumerate(masks):
        cols = np.flatnonzero(group.reshape(-1) == g)
        if not mask.any():
            continue
        part = y[mask][:, cols]  # [seeds with values, updates of this group]
        center[cols] = iqm(part, axis=0)
        if part.shape[0] > 1:
            lo, hi = stratified_bootstrap_interval(part[:, None, :], reps=reps, seed=seed)
        else:
            lo = hi = part[0]
        low[cols] = np.clip(lo, part.min(0), part.max(0))
        high[cols] = np.clip(hi, part.min(0), part.max(0))
    return center, low, high


def seed_statistics(y: np.ndarray):
    """Mean, std, min and max over seeds (axis 0) of the seeds that have a value (not NaN);
    NaN where none has."""
    known = ~np.isnan(y)
    n = known.sum(0)
    has = n > 0
    safe_n = np.maximum(n, 1)
    mean = np.where(has, np.where(known, y, 0.0).sum(0) / safe_n, np.nan)
    var = np.where(known, (y - mean) ** 2, 0.0).sum(0) / safe_n
    std = np.where(has, np.sqrt(var), np.nan)
    low = np.where(has, np.where(known, y, np.inf).min(0), np.nan)
    high = np.where(has, np.where(known, y, -np.inf).max(0), np.nan)
    return mean, std, low, high


def plot_learning_curve(metrics: Mapping[str, np.ndarray], path: str | os.PathLike | None = None, **kwargs):
    """Draws `curve_figure(metrics, **kwargs)`; with `path`, writes it as a PNG (atomically).

    Returns the Figure (a notebook displays it).
    """
    fig = curve_figure(metrics, **kwargs)
    if path is not None:
        buf = io.BytesIO()
        fig.savefig(buf, format="png")
        write_atomic(Path(path), buf.getvalue())
    return fig
