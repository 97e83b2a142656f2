"""`fusedrl plot RUN [RUN ...] [--out FILE.png]`: the learning curves of saved runs on one figure.

Each run folder's metrics.csv (one row per update and seed) is read back; over seeds, a run is drawn
as its interquartile mean with a 95% stratified-bootstrap interval (`fusedrl.plotting.iqm_band`).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
from pathlib import Path

from fusedrl._argtypes import UsageError, positive_int

# Start-up time: NumPy, matplotlib and the plotting module are imported inside the functions that
# read and draw runs, so that `fusedrl --help` and the other commands do not load them.

EPILOG = """\
examples:
  fusedrl plot runs/CartPole-v1                          one run (each seed, their IQM and interval)
  fusedrl plot runs/cp-lr3e-4 runs/cp-lr1e-3 --out lr.png   two runs compared
  fusedrl plot runs/CartPole-v1 --metric entropy --smooth 1"""


def add_plot_parser(subparsers) -> argparse.ArgumentParser:
    """Adds the `plot` subcommand to an argparse subparsers object; returns its parser."""
    p = subparsers.add_parser(
        "plot", help="learning curves of saved runs on one figure (PNG)",
        description="Plot the learning curves of run folders written by `fusedrl train`: over seeds, "
                    "the interquartile mean (IQM) with its 95% stratified-bootstrap interval.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("runs", nargs="+", type=Path, metavar="RUN", help="run folders (with metrics.csv)")
    p.add_argument("--out", type=Path, default=Path("curves.png"), metavar="FILE.png",
                   help="the image to write (default curves.png)")
    p.add_argument("--metric", default="episode_return", metavar="NAME",
                   help="the metrics.csv column to plot (default episode_return)")
    p.add_argument("--smooth", type=positive_int, metavar="K",
                   help="moving-average window in updates (default: 1/50 of each run; 1: raw values)")
    return p


def read_run_metrics(run_dir: Path) -> dict:
    """The metrics of a run folder's metrics.csv, each [num_seeds, num_updates] float64 (NaN: empty
    cell, e.g. episode statistics before a seed's first episode). A row repeated for the same update
    and seed (a resumed run) counts once, the later one."""
    import numpy as np

    path = Path(run_dir)
    if not path.is_dir():
        raise UsageError(f"no run folder {path} (it does not exist or is not a folder).")
    file = path / "metrics.csv"
    if not file.is_file():
        if (path / "sweep.json").is_file():
            raise UsageError(f"{path} is a sweep folder: its plots are its curves_by_*.png; "
                             f"`fusedrl plot` reads run folders of `fusedrl train`.")
        raise UsageError(f"{path} has no metrics.csv: not a run folder of `fusedrl train`.")
    rows = list(csv.DictReader(io.StringIO(file.read_text(encoding="utf-8"))))
    if not rows or not {"update", "seed", "env_steps"} <= set(rows[0]):
        raise UsageError(f"{file} has no rows of metrics (columns update, seed, env_steps, ...).")
    try:
        updates = sorted({int(r["update"]) for r in rows})
        seeds = sorted({int(r["seed"]) for r in rows})
    except (TypeError, ValueError) as e:
        raise UsageError(f"{file} is damaged: {e}.") from None
    u_index = {u: i for i, u in enumerate(updates)}
    s_index = {s: i for i, s in enumerate(seeds)}
    names = [c for c in rows[0] if c not in ("update", "seed")]
    out = {name: np.full((len(seeds), len(updates)), np.nan) for name in names}
    for r in rows:
        i, j = s_index[int(r["seed"])], u_index[int(r["update"])]
        for name in names:
            out[name][i, j] = _number(r.get(name))
    return out


def _number(text: str | None) -> float:
    try:
        return float(text) if text not in (None, "") else math.nan
    except ValueError:
        return math.nan


def _env_id(run_dir: Path) -> str | None:
    try:
        doc = json.loads((run_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    section = doc.get(doc.get("algo")) if isinstance(doc, dict) else None  # {"algo": "ppo", "ppo": {...}}
    return section.get("env_id") if isinstance(section, dict) else None


def cmd_plot(args) -> int:
    from fusedrl.files import write_atomic
    from fusedrl.plotting import runs_figure

    if args.out.suffix.lower() != ".png":
        raise UsageError(f"--out {args.out}: the figure is a PNG; give a FILE.png.")
    runs = [(str(run), read_run_metrics(run)) for run in args.runs]
    for name, metrics in runs:
        if args.metric not in metrics:
            raise UsageError(f"{name}/metrics.csv has no column {args.metric!r}; its columns: "
                             f"{', '.join(metrics)}.")
    env_ids = {_env_id(run) for run in args.runs}
    title = env_ids.pop() if len(env_ids) == 1 and None not in env_ids else None
    if len(runs) == 1:  # one run: each seed in its own colour, as in its learning_curve.png
        runs = [(None, runs[0][1])]
        title = f"{title}: {args.runs[0]}" if title else str(args.runs[0])
    fig = runs_figure(runs, metric=args.metric, title=title, smooth=args.smooth)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    if args.out.parent != Path("") and not args.out.parent.is_dir():
        raise UsageError(f"--out {args.out}: the folder {args.out.parent} does not exist.")
    write_atomic(args.out, buf.getvalue())
    print(f"wrote {args.out}")
    return 0
