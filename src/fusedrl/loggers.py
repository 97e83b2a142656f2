"""Metric loggers fed by `fusedrl.progress.Monitor`: CSV always, TensorBoard and W&B if installed.

Every logger receives the rows of one update, one row per seed (`update`, `seed`, `env_steps`
and the trainer's metrics), so per-seed curves stay per seed. The optional backends are imported
only when asked for, with an error that names the package to install.
"""

from __future__ import annotations

import csv
import importlib
import io
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fusedrl.metrics import METRIC_NAMES, agent_return_names, has_episode, is_episode_metric

# Column order of metrics.csv: identifiers first, then the trainer's metrics; a multi-agent env's
# runs add each agent's return at the end (`csv_columns`).
CSV_COLUMNS = ("update", "seed", "env_steps") + tuple(m for m in METRIC_NAMES if m != "env_steps")


def csv_columns(names: Sequence[str] = ()) -> tuple[str, ...]:
    """metrics.csv's columns for a run whose metrics are `names`: `CSV_COLUMNS`, then one column per
    agent of a multi-agent env (`episode_return_<agent>`, in `agent_return_names`' order)."""
    return CSV_COLUMNS + agent_return_names(names)


def format_rows(rows: Sequence[Mapping[str, float]], *, header: bool,
                columns: Sequence[str] | None = None) -> str:
    """CSV text of `rows` in `columns` order (default: `csv_columns` of the first row's names), with
    the header line if `header`. A seed's episode statistics (its per-agent returns too) before its
    first completed episode (0.0 in the metrics: `has_episode`) are left empty, so that no reader
    takes them for a return of 0.0 (read as NaN by pandas)."""
    if columns is None:
        columns = csv_columns(rows[0] if rows else ())
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
    if header:
        writer.writeheader()
    writer.writerows(row if has_episode(row) else _blank_episode_metrics(row) for row in rows)
    return buf.getvalue()


def _blank_episode_metrics(row: Mapping[str, Any]) -> dict[str, Any]:
    return {k: "" if is_episode_metric(k) else v for k, v in row.items()}


def metrics_to_rows(metrics: Mapping[str, np.ndarray], *, first_update: int = 1) -> list[dict]:
    """Rows, one per update and seed (update-major), from metrics shaped [num_seeds, U] or [U]: the
    logged metrics (`METRIC_NAMES` and each agent's return), not the trainer's internal ones."""
    logged = set(METRIC_NAMES) | set(agent_return_names(metrics))
    arrays = {k: np.asarray(v) for k, v in metrics.items() if k in logged}
    ref = arrays["env_steps"]
    if ref.ndim == 1:
        arrays = {k: v[None] for k, v in arrays.items()}
    num_seeds, num_updates = arrays["env_steps"].shape
    rows = []
    for u in range(num_updates):
        for s in range(num_seeds):
            row = {"update": first_update + u, "seed": s}
            row.update({k: v[s, u].item() for k, v in arrays.items()})
            rows.append(row)
    return rows


class CSVLogger:
    """Appends whole rows to `path` as they arrive (flushed per update, never a partial row).

    The columns are `csv_columns` of the first rows' metrics, the same for every update; a resumed
    run appends to the file `fusedrl.run_folder.resume_point` wrote from the same metrics, so its
    header holds."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._file = None
        self._columns: tuple[str, ...] | None = None

    def log(self, update: int, rows: Sequence[Mapping[str, float]]) -> None:
        if self._file is None:
            new = not self.path.exists() or self.path.stat().st_size == 0
            self._file = open(self.path, "a", encoding="utf-8", newline="")
            header = new
        else:
            header = False
        if self._columns is None:
            self._columns = csv_columns(rows[0] if rows else ())
        # One write per update: the text is built first, so an error cannot split a row.
        self._file.write(format_rows(rows, header=header, columns=self._columns))
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def _require(module: str, package: str, what: str):
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(f"{what} logging needs the {package!r} package: pip install {package}") from e


class TensorBoardLogger:
    """Writes each seed's scalars under `seed_<i>/<metric>` to a TensorBoard event directory.

    Uses `tensorboardX` (or `torch.utils.tensorboard` when torch is installed instead).
    """

    def __init__(self, logdir: str | Path):
        self.writer = self.check_installed().SummaryWriter(str(logdir))

    @staticmethod
    def check_installed():
        """The module providing SummaryWriter; ImportError naming the package if there is none."""
        try:
            return importlib.import_module("tensorboardX")
        except ImportError:
            try:
                return importlib.import_module("torch.utils.tensorboard")
            except ImportError:
                return _require("tensorboardX", "tensorboardX", "TensorBoard")

    def log(self, update, rows):
        for row in rows:
            step = int(row["env_steps"])
            for name, value in _without_placeholders(row).items():
                if name not in ("update", "seed", "env_steps"):
                    self.writer.add_scalar(f"seed_{row['seed']}/{name}", value, step)
        self.writer.flush()

    def close(self):
        self.writer.close()


class WandbLogger:
    """Logs to Weights & Biases: one run per seed in a group, so curves are per seed.

    `run_ids` (one per seed, e.g. an interrupted run's `self.run_ids`) continues those W&B runs
    (`wandb.init(id=..., resume="allow")`) instead of starting new ones.
    """

    #: The first wandb with `wandb.init(reinit="create_new")` (several runs open in one process).
    MIN_VERSION = (0, 19, 10)

    def __init__(self, project: str, *, name: str, num_seeds: int, config: Mapping | None = None,
                 run_ids: Sequence[str] | None = None):
        wandb = self.check_installed()
        if run_ids is not None and len(run_ids) != num_seeds:
            raise ValueError(f"run_ids has {len(run_ids)} W&B run ids for {num_seeds} seeds.")
        self.runs = []
        try:
            for s in range(num_seeds):
                again = {} if run_ids is None else {"id": run_ids[s], "resume": "allow"}
                self.runs.append(wandb.init(project=project, group=name, name=f"{name}-seed{s}",
                                            config=dict(config or {}), reinit="create_new", **again))
        except BaseException:
            self.close()  # the seeds' runs already started
            raise

    @property
    def run_ids(self) -> list[str]:
        """Each seed's W&B run id."""
        return [run.id for run in self.runs]

    @classmethod
    def check_installed(cls):
        wandb = _require("wandb", "wandb", "Weights & Biases")
        version = getattr(wandb, "__version__", None)
        if version is not None and _release(version) < cls.MIN_VERSION:
            need = ".".join(map(str, cls.MIN_VERSION))
            raise ImportError(f"Weights & Biases logging needs wandb >= {need} (one run per seed), found "
                              f"{version}: pip install -U 'wandb>={need}'")
        return wandb

    def log(self, update, rows):
        for row in rows:
            payload = {k: v for k, v in _without_placeholders(row).items() if k not in ("seed",)}
            self.runs[int(row["seed"])].log(payload, step=int(row["env_steps"]))

    def close(self):
        for run in self.runs:
            run.finish()


def _release(version: str) -> tuple[int, ...]:
    """(0, 19, 10) from "0.19.10" (or "0.19.10rc1", "0.20.dev0")."""
    return tuple(int(re.match(r"\d*", part).group() or 0) for part in version.split(".")[:3])


def _without_placeholders(row: Mapping[str, Any]) -> dict[str, Any]:
    """`row` without its episode statistics while no episode has ended (the trainer reports 0.0
    with episode_length 0 then, which is no episode's return); metrics.csv leaves them empty."""
    if has_episode(row):
        return dict(row)
    return {k: v for k, v in row.items() if not is_episode_metric(k)}
