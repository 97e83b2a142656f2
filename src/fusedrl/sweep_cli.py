"""`fusedrl sweep`: many agents in one program from the command line; writes a tidy table and plots.

    fusedrl sweep --env CartPole-v1 --num-seeds 8 --grid lr=1e-4,3e-4,1e-3 --grid gamma=0.98,0.99
    fusedrl sweep --env CartPole-v1 --zip lr=1e-4,1e-3 --zip ent_coef=0.0,0.01
    fusedrl sweep --env CartPole-v1 --random lr=1e-5:1e-3 --random clip_eps=0.1:0.3 --num-samples 16
    fusedrl sweep --env CartPole-v1 --grid gravity=9.8,12,15 --set total_timesteps=100000
    fusedrl sweep --env CartPole-v1 --algo a2c --grid lr=1e-3,7e-3 --num-seeds 4

Axes: --grid (every combination), --zip (i-th values together) or --random (--num-samples draws:
LOW:HIGH is uniform, log-uniform for lr; log:LOW:HIGH / uniform:LOW:HIGH choose; A,B,C picks
among values); one kind per sweep. Axes are traced fields only (PPO's: lr, gamma, gae_lambda,
clip_eps, ent_coef, vf_coef, max_grad_norm; A2C and REINFORCE have no clip_eps, REINFORCE no
gae_lambda; and the env's params such as gravity). --algo ppo|a2c|reinforce picks the algorithm
(default ppo), as for `fusedrl train`. --set FIELD=VALUE fixes any field of the algorithm's config
for every run (env params as env_params.NAME=VALUE or NAME=VALUE).

The run folder gets table.csv (one row per run), summary.csv (mean over seeds per combination),
curves.npz (every metric [seed, ..., update] with its axes), sweep.json (the algorithm, the base
config with each swept field null, and the axes; for zip and random sweeps each trial's values)
and one PNG of learning curves per swept field. With --eval-episodes N every run ends with a
greedy evaluation of N episodes, and both tables get its mean return (eval_return).

Hook into fusedrl's main parser with `add_sweep_parser(subparsers)`; the parsed args carry
`func=run_sweep`.
"""

from __future__ import annotations

import argparse
import math
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from fusedrl._argtypes import (
    UsageError,
    add_import_option,
    check_network,
    env_param_defaults,
    import_modules,
    parse_overrides,
    seed_arg,
)
from fusedrl._json import dumps as strict_json

# Start-up time: JAX, the environments and the sweeps are imported inside the functions that need
# them, so that `fusedrl sweep --help` and usage errors answer at once.

EPILOG = __doc__.split("\n\n", 1)[1].rsplit("\n\nHook into", 1)[0]


# A bad command line: printed as one line, exit code 2 (the class `fusedrl train` raises too).
SweepCLIError = UsageError


def add_sweep_parser(subparsers) -> argparse.ArgumentParser:
    """Adds the `sweep` subcommand to an argparse subparsers object; returns its parser."""
    p = subparsers.add_parser(
        "sweep", help="train many agents at once over seeds and hyperparameters (table + plots)",
        description="Sweep seeds and traced hyperparameters in one compiled program.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--env", metavar="ID", required=True, help="environment id; uses its preset if any")
    p.add_argument("--algo", choices=("ppo", "a2c", "reinforce"), default="ppo",
                   help="the algorithm (default ppo); the env's preset is the algorithm's")
    p.add_argument("--num-seeds", type=int, default=1, metavar="N", help="seeds per combination (default 1)")
    p.add_argument("--seed", type=seed_arg, default=0, metavar="S", help="base random seed (default 0)")
    p.add_argument("--grid", action="append", default=[], metavar="FIELD=V1,V2,...",
                   help="grid axis (repeatable): every combination of the values")
    p.add_argument("--zip", action="append", default=[], metavar="FIELD=V1,V2,...",
                   help="zipped axis (repeatable): the i-th values of every --zip form trial i")
    p.add_argument("--random", action="append", default=[], metavar="FIELD=SPEC",
                   help="random-search axis (repeatable): LOW:HIGH, log:LOW:HIGH, uniform:LOW:HIGH or A,B,C")
    p.add_argument("--num-samples", type=int, metavar="N", help="random-search trials (with --random)")
    p.add_argument("--total-timesteps", type=int, metavar="T", help="env steps per run")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", dest="overrides",
                   help="fix a field of the algorithm's config or an env param for every run (repeatable)")
    p.add_argument("--out", type=Path, metavar="DIR", help="run folder (default runs/sweep-<env id>[-N])")
    p.add_argument("--overwrite", action="store_true",
                   help="replace the outputs of an earlier sweep in --out")
    p.add_argument("--progress-every", type=int, metavar="K",
                   help="updates between progress callbacks; 0 = no progress (default: ~20 per run)")
    p.add_argument("--eval-episodes", type=int, metavar="N",
                   help="end with a greedy evaluation of every run, N episodes each: an eval_return "
                        "column in table.csv and summary.csv (default: none)")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG learning curves")
    add_import_option(p)
    p.set_defaults(func=run_sweep)
    return p


# ------------------------------------------------------------------------------------ parsing
def _split_axis(flag: str, item: str) -> tuple[str, str]:
    if "=" not in item:
        raise SweepCLIError(f"{flag} expects FIELD=VALUES, got {item!r}.")
    name, text = (s.strip() for s in item.split("=", 1))
    if not name or not text:
        raise SweepCLIError(f"{flag} expects FIELD=VALUES, got {item!r}.")
    return name, text


def _number(flag: str, name: str, text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise SweepCLIError(f"{flag} {name}=...: {text!r} is not a number.") from None


def parse_list(flag: str, item: str) -> tuple[str, list[float]]:
    """"lr=1e-4,3e-4" -> ("lr", [1e-4, 3e-4])."""
    name, text = _split_axis(flag, item)
    return name, [_number(flag, name, t) for t in text.split(",") if t.strip()]


def parse_random(item: str):
    """"lr=1e-5:1e-3" -> ("lr", (1e-5, 1e-3)); log:/uniform: prefixes; "A,B" -> a choice list."""
    from fusedrl.sweeps import LogUniform, Uniform

    name, text = _split_axis("--random", item)
    if ":" not in text:
        return name, [_number("--random", name, t) for t in text.split(",") if t.strip()]
    parts = text.split(":")
    kind = None
    if parts[0] in ("log", "uniform"):
        kind, parts = parts[0], parts[1:]
    if len(parts) != 2:
        raise SweepCLIError(f"--random {item}: expected LOW:HIGH, log:LOW:HIGH, uniform:LOW:HIGH or A,B,C.")
    low, high = (_number("--random", name, t) for t in parts)
    if kind == "log":
        return name, LogUniform(low, high)
    if kind == "uniform":
        return name, Uniform(low, high)
    return name, (low, high)


def build_config(args, axes: Mapping[str, Any] | None = None):
    """The base config of the sweep, of `--algo`'s class (`PPOConfig`, `A2CConfig` or
    `ReinforceConfig`): the env's preset for that algorithm (if any) with --set/--total-timesteps,
    parsed as `fusedrl train` parses them (`fusedrl._argtypes.parse_overrides`; another
    algorithm's field is refused by name). A field both fixed here and swept in `axes` is an
    error: the sweep would silently override the --set."""
    from fusedrl.envs import make
    from fusedrl.envs.host import is_host_env_id
    from fusedrl.envs.registry import jax_twin
    from fusedrl.train import preset
    from fusedrl.train.config import config_class

    algo = getattr(args, "algo", None) or "ppo"  # an args namespace built before --algo: PPO
    if is_host_env_id(args.env):
        algo_flag = f" --algo {algo}" if algo != "ppo" else ""
        twin = jax_twin(args.env)
        twin = f" Sweep fusedrl's JAX version instead: --env {twin}." if twin else ""
        raise SweepCLIError(
            f"sweeps need a JAX environment: {args.env} is a Gymnasium env stepped on the host (the "
            f"host bridge), so its runs cannot be vmapped into one program.{twin} To train the Gymnasium "
            f"env itself, run `fusedrl train --env {args.env}{algo_flag} --seed S`, one run per seed and "
            f"setting."
        )
    try:
        env_params = make(args.env)[1]
    except (ValueError, TypeError) as e:
        raise SweepCLIError(str(e)) from None
    fields = parse_overrides(args.overrides, env_param_defaults(env_params),
                             total_timesteps=args.total_timesteps, config_cls=config_class(algo))
    if "env_id" in fields:
        raise SweepCLIError("use --env to choose the environment, not --set env_id=...")
    fixed = {**fields, **fields.get("env_params", {})}
    for name in axes or ():
        if name in fixed:  # axis names come from parse_axes, without an env_params. prefix
            raise SweepCLIError(f"{name} is both swept (--grid/--zip/--random) and fixed (--set or "
                                f"--total-timesteps); drop one of them.")
    try:
        return preset(args.env, algo=algo, **fields)  # the config's defaults where no preset
    except (TypeError, ValueError) as e:
        raise SweepCLIError(f"invalid configuration: {e}") from None


def parse_axes(args) -> tuple[str, dict[str, Any]]:
    """(mode, axes) from --grid/--zip/--random; one kind per sweep."""
    kinds = [k for k in ("grid", "zip", "random") if getattr(args, k)]
    if len(kinds) > 1:
        raise SweepCLIError(f"use one kind of axis per sweep; got {' and '.join('--' + k for k in kinds)}.")
    mode = kinds[0] if kinds else "grid"
    if mode == "random":
        pairs = [parse_random(item) for item in args.random]
        if args.num_samples is None:
            raise SweepCLIError("--random needs --num-samples N (the number of trials).")
    else:
        if args.num_samples is not None:
            raise SweepCLIError("--num-samples goes with --random.")
        pairs = [parse_list(f"--{mode}", item) for item in getattr(args, mode)]
    axes: dict[str, Any] = {}
    for name, values in pairs:
        if name.startswith("env_params."):  # an env param as --set names it: the sweep's axis is NAME
            from fusedrl.train.config import config_class

            cls = config_class(getattr(args, "algo", None) or "ppo")
            name = name.removeprefix("env_params.")
            if name in cls.__dataclass_fields__:
                raise SweepCLIError(f"env_params.{name}: {name} is a {cls.__name__} field, not an env param.")
        if name in axes:
            raise SweepCLIError(f"axis {name!r} is given twice.")
        axes[name] = values
    return mode, axes


def default_out(env_id: str, root: Path = Path("runs")) -> Path:
    """runs/sweep-<env id>, or runs/sweep-<env id>-2, -3, ... when taken."""
    name = "sweep-" + env_id.replace(":", "_").replace("/", "_")
    out, n = root / name, 1
    while out.exists():
        n += 1
        out = root / f"{name}-{n}"
    return out


# ------------------------------------------------------------------------------------ progress
class _Progress:
    """Plain progress lines on stderr, about every 10% of the sweep.

    The trainer's callback is called once per run per `every` updates: from one program in no
    fixed order (vmap), or from several host threads, each going through its runs one after
    another (streams). Either way the share of calls made so far is the sweep's progress.
    """

    def __init__(self, num_runs: int, calls_per_run: int, steps_per_call: int, file=sys.stderr):
        self.expected = max(num_runs * calls_per_run, 1)
        self.steps_per_call, self.file = steps_per_call, file
        self.calls, self.next_mark = 0, 0.1
        self.lock = threading.Lock()
        self.start: float | None = None  # time of the first report: compile time excluded

    def __call__(self, metrics) -> None:
        with self.lock:
            self.calls += 1
            now = time.perf_counter()
            if self.start is None:
                self.start = now
                return
            frac = self.calls / self.expected  # padding runs do not call back
            if frac + 1e-9 >= self.next_mark:
                elapsed = now - self.start
                rate = (self.calls - 1) * self.steps_per_call / elapsed if elapsed > 0 else 0.0
                print(f"  {100 * frac:5.1f}%  ~{rate:,.0f} steps/s total", file=self.file, flush=True)
                self.next_mark = math.floor(frac * 10 + 1e-9) / 10 + 0.1


# ---------------------------------------------------------------------------------------- run
def run_sweep(args) -> int:
    """Runs the sweep the parsed `args` describe; writes the run folder; returns an exit code."""
    try:
        import_modules(args.imports)  # done already under `fusedrl sweep`; not by main() below
        return _run(args)
    except UsageError as e:
        print(f"fusedrl sweep: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\nfusedrl sweep: interrupted (a sweep writes its folder once all its runs have finished)",
              file=sys.stderr)
        return 130


def _run(args) -> int:
    import jax

    from fusedrl.sweeps import check_sweep, sweep

    if args.num_seeds < 1:
        raise SweepCLIError(f"--num-seeds must be >= 1, got {args.num_seeds}.")
    if args.eval_episodes is not None and args.eval_episodes < 1:
        raise SweepCLIError(f"--eval-episodes must be >= 1, got {args.eval_episodes} (leave it out for "
                            f"no evaluation).")
    mode, axes = parse_axes(args)
    config = build_config(args, axes)
    check_network(config, SweepCLIError)
    # Bad input is a usage error; an error once the sweep runs is not, and shows its traceback.
    plan = dict(mode=mode, num_samples=args.num_samples, key=jax.random.key(args.seed),
                eval_episodes=args.eval_episodes, **axes)
    try:
        check_sweep(config, args.num_seeds, **plan)
    except (TypeError, ValueError) as e:
        raise SweepCLIError(str(e)) from None
    out = args.out or default_out(config.env_id)
    if out.exists() and not out.is_dir():
        raise SweepCLIError(f"--out {out} exists and is not a directory; choose another --out.")
    if out.exists() and any(out.iterdir()):
        if not args.overwrite:
            raise SweepCLIError(f"{out} exists and is not empty; pass --overwrite or another --out.")
        if not (out / "sweep.json").is_file():
            raise SweepCLIError(f"{out} is not empty and has no sweep.json (not a sweep's folder); "
                                f"refusing to write into it even with --overwrite: choose another --out.")
    every = args.progress_every
    if every is None:
        every = max(1, config.num_updates // 20)
    if every < 0:
        raise SweepCLIError(f"--progress-every must be >= 0, got {every}.")

    progress = None
    if every:
        runs = args.num_seeds * (args.num_samples or 1)
        if mode != "random":
            runs = args.num_seeds * (
                math.prod(len(v) for v in axes.values()) if mode == "grid"
                else (len(next(iter(axes.values()))) if axes else 1)
            )
        progress = _Progress(runs, config.num_updates // every, every * config.batch_size)
    print(f"sweep {config.env_id} ({config.algo}): mode={mode}, {args.num_seeds} seed(s), axes "
          f"{', '.join(axes) or '(none)'}; compiling...", file=sys.stderr, flush=True)
    start = time.perf_counter()
    result = sweep(config, args.num_seeds, keep_state=False, callback=progress,
                   callback_every=max(every, 1), **plan)
    seconds = time.perf_counter() - start

    out.mkdir(parents=True, exist_ok=True)
    for stale in output_files(out):  # --overwrite: no plot of an earlier sweep's field stays behind
        stale.unlink()
    write_outputs(result, out, plots=not args.no_plots, seed=args.seed, seconds=seconds)
    print(format_summary(result), flush=True)
    print(f"{result.num_runs} runs x {config.env_steps:,} env steps in {seconds:.1f} s "
          f"(compile included); results in {out}", flush=True)
    return 0


def summary_rows(result, metric: str = "episode_return") -> list[dict[str, Any]]:
    """The rows of summary.csv: `SweepResult.summary` (means and stds over seeds, best first)."""
    return result.summary(metric)


def format_summary(result, metric: str = "episode_return", limit: int = 10) -> str:
    rows = summary_rows(result, metric)
    short = metric.removeprefix("episode_")
    names = [k for k in rows[0] if not k.startswith(("final_", "last10_", "best_", "seeds"))]
    header = names + [f"last10 {short} (mean ± std over seeds)", f"best {short} (mean over seeds)"]
    lines = []
    for r in rows[:limit]:
        cells = [f"{r[n]:g}" if isinstance(r[n], float) else str(r[n]) for n in names]
        cells += [f"{r[f'last10_{short}_mean']:.1f} ± {r[f'last10_{short}_std']:.1f}",
                  f"{r[f'best_{short}_mean']:.1f}"]
        lines.append(cells)
    widths = [max(len(h), *(len(c[i]) for c in lines)) for i, h in enumerate(header)]
    text = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))]
    text += ["  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) for cells in lines]
    if len(rows) > limit:
        text.append(f"... {len(rows) - limit} more combinations in summary.csv")
    return "\n".join(text)


def output_files(out: Path) -> list[Path]:
    """The files `write_outputs` writes that exist in `out`."""
    names = ("table.csv", "summary.csv", "curves.npz", "sweep.json")
    return [p for p in (*(out / n for n in names), *sorted(out.glob("curves_by_*.png"))) if p.is_file()]


def write_outputs(result, out: Path, *, plots: bool = True, seed: int = 0, seconds: float = 0.0) -> None:
    """table.csv, summary.csv, curves.npz, sweep.json and (if matplotlib) curves_by_<field>.png."""
    from fusedrl.sweeps.result import as_python

    result.to_csv(out / "table.csv")
    result.to_csv(out / "summary.csv", summary=True)
    arrays = {f"metric/{k}": v for k, v in result.metrics.items()}
    arrays.update({f"axis/{k}": np.asarray(v) for k, v in result.axes.items()})
    arrays.update({f"value/{k}": np.asarray(v) for k, v in result.values.items()})
    np.savez_compressed(out / "curves.npz", **arrays)
    config = result.config.to_dict()
    for name in result.fields:  # the base config's value of a swept field is no run's: null
        table = config if name in config else config.get("env_params", {})
        if name in table:
            table[name] = None
    doc = {
        "algo": result.config.algo,  # the class of "config" (`fusedrl.train.config.config_class`)
        "config": config,
        "mode": result.mode,
        "dims": list(result.dims),
        # As the CSVs write them: float32 0.9 as 0.9, not its float64 expansion 0.8999999761581421.
        "axes": {k: [as_python(x) for x in np.asarray(v)] for k, v in result.axes.items()},
        # Each swept field's value per trial (zip/random; a grid's are its axes), as table.csv has them.
        "values": {k: [as_python(x) for x in np.asarray(v)[0].reshape(-1)] for k, v in result.values.items()
                   if "trial" in result.dims},
        "seed": seed,
        "num_runs": result.num_runs,
        "seconds": seconds,
    }
    (out / "sweep.json").write_text(strict_json(doc) + "\n")
    if not plots:
        return
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plots written (pip install matplotlib).", file=sys.stderr)
        return
    for by in result.fields or ("seed",):
        ax = result.plot(by=by)
        ax.figure.savefig(out / f"curves_by_{by}.png", dpi=120)
        plt.close(ax.figure)


def main(argv=None) -> int:
    """Standalone entry (`python -m fusedrl.sweep_cli ...`), the same as `fusedrl sweep ...`."""
    parser = argparse.ArgumentParser(prog="fusedrl")
    sub = parser.add_subparsers(dest="command", required=True)
    add_sweep_parser(sub)
    args = parser.parse_args(["sweep", *(sys.argv[1:] if argv is None else argv)])
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
