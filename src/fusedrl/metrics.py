"""The names of a run's per-update metrics and how to read their episode statistics.

Every learner (the fused trainer, the host trainer) reports these metrics; loggers, progress
displays, plots and summaries read them. Plain NumPy: reading metrics needs no JAX or trainer.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

#: The metrics every learner reports per update, in this order (arrays [num_updates] in a
#: `TrainResult`, one row per update in a run's metrics.csv).
METRIC_NAMES = (
    "episode_return",
    "episode_length",
    "episodes_completed",
    "policy_loss",
    "value_loss",
    "entropy",
    "approx_kl",
    "clip_fraction",
    "gradient_steps",
    "explained_variance",
    "learning_rate",
    "env_steps",
)

#: Metrics that are means over the episodes completed in an update (see `TrainResult`).
EPISODE_METRICS = ("episode_return", "episode_length")

#: A multi-agent env's runs also report each agent's own return, `episode_return_<agent>` (an
#: episode metric too); the team's `episode_return` is their mean (docs/multiagent.md).
AGENT_RETURN_PREFIX = "episode_return_"


def agent_return_name(agent: str) -> str:
    """The metric of `agent`'s own return: `episode_return_<agent>`."""
    return AGENT_RETURN_PREFIX + agent


def agent_return_names(names: Iterable[str]) -> tuple[str, ...]:
    """The per-agent returns among metric `names`, in the natural order of their names (agent_2
    before agent_10): metrics.csv's extra columns, the same for every update, seed and resume."""
    found = {n for n in names if isinstance(n, str) and n.startswith(AGENT_RETURN_PREFIX)}
    return tuple(sorted(found, key=lambda n: [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", n)]))


def is_episode_metric(name: str) -> bool:
    """Whether metric `name` is a mean over the episodes completed in an update (a placeholder before
    the first: `has_episode`): `EPISODE_METRICS` and the per-agent returns."""
    return name in EPISODE_METRICS or name.startswith(AGENT_RETURN_PREFIX)


def has_episode(metrics: Mapping[str, Any]):
    """Whether each update's episode statistics (in metrics arrays, or one logged row) come from a
    completed episode: False before the first (where they are 0.0, with `episode_length` 0, which
    no completed episode has). True where `episode_length` is not recorded."""
    return np.asarray(metrics.get("episode_length", 1)) > 0


def episode_values(metrics: Mapping[str, Any], name: str) -> np.ndarray:
    """`metrics[name]` as float64, NaN where it is no episode's statistic (`has_episode` False);
    other metrics unchanged. For summaries and plots: `np.nanmax`, gaps in curves."""
    values = np.asarray(metrics[name], np.float64)
    if is_episode_metric(name):
        values = np.where(has_episode(metrics), values, np.nan)
    return values


__all__ = ["AGENT_RETURN_PREFIX", "EPISODE_METRICS", "METRIC_NAMES", "agent_return_name",
           "agent_return_names", "episode_values", "has_episode", "is_episode_metric"]
