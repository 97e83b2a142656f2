"""Learning curves with matplotlib (no pyplot state: safe in scripts, CLIs and notebooks)."""

from __future__ import annotations

import io
import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from fusedrl.files import write_atomic
from fusedrl.metrics import EPISODE_METRICS, episode_values


def curve_figure(metrics: Mapping[str, np.ndarray], *, metric: str = "episode_return",
                 title: str | None = None, smooth: int | None = None):
    """A matplotlib Figure: `metric` against env steps, the mean over seeds and the per-seed band.

    Args:
      metrics: a run's metrics, each [num_updates] or [num_seeds, num_updates] (vmapped run).
      metric: which metric to plot.
      title: the axes title.
      smooth: trailing moving-average window in updates, applied to each seed before the
        statistics (default: 1/50 of the run; 1 plots the raw values).

    The band spans the lowest to the highest seed at each update, the darker band mean +- std, and
    every seed is drawn as a thin line, so one failing seed stays visible. Episode statistics start
    at a seed's first completed episode: before it, the trainer reports 0.0 (`episode_length` 0),
    which is no episode's return, so those updates are left out.
    """
    from matplotlib.figure import Figure

    y = episode_values(metrics, metric)
    x = np.asarray(metrics["env_steps"], np.float64)
    if y.ndim == 1:
        y, x = y[None], x[None]
    x = x[0]
    window = max(1, y.shape[1] // 50) if smooth is None else max(1, int(smooth))
    raw = y
    if window > 1:
        y = _moving_average(y, window)
    fig = Figure(figsize=(6.4, 3.8), dpi=100)
    ax = fig.add_subplot()
    mean, std, low, high = seed_statistics(y)
    if y.shape[0] > 1:
        ax.fill_between(x, low, high, color="C0", alpha=0.15, linewidth=0,
                        label="min-max over seeds")
        ax.fill_between(x, mean - std, mean + std, color="C0", alpha=0.3, linewidth=0, label="mean +- std")
        for seed_curve in y:
            ax.plot(x, seed_curve, color="C0", alpha=0.25, linewidth=0.6)
    label = f"mean of {y.shape[0]} seeds" if y.shape[0] > 1 else None
    if raw.shape[0] == 1 and window > 1:
        ax.plot(x, raw[0], color="C0", alpha=0.25, linewidth=0.6, label="per update")
        label = f"moving average ({window} updates)"
    ax.plot(x, mean, color="C0", linewidth=2, label=label)
    if np.isnan(mean).all():  # nothing to draw (matplotlib would show an empty axis around 0): say why
        ax.set_xlim(0, x[-1])
        why = "no episode ended in this run" if metric in EPISODE_METRICS else f"no finite {metric}"
        ax.text(0.5, 0.5, why, transform=ax.transAxes, ha="center", va="center")
    ax.set_xlabel("env steps (per seed)")
    ax.set_ylabel(metric.replace("_", " ") + (f"\n(moving average, {window} updates)" if window > 1 else ""))
    if title:
        ax.set_title(title)
    ax.grid(alpha=0.3)
    if y.shape[0] > 1 or window > 1:
        ax.legend(loc="lower right", fontsize="small")
    fig.tight_layout()
    return fig


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
