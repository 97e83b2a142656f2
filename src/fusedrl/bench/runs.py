"""`fusedrl train --num-seeds N`'s program: seeds split over host threads vs one vmap.

    python -m fusedrl.bench runs [--env CartPole-v1] [--num-seeds 8] [--repeats 5]
                                 [--set total_timesteps=100000]

Compiles the program `fusedrl.runs.train_run` runs (progress callback on, feeding the CSV logger
and a progress bar as the CLI does) twice: with the seeds split over one host thread per usable
core (`fusedrl.runs.num_streams`, the default) and as one vmap of every seed (streams=1). Then it
alternates timed runs of the two and prints the median aggregate env steps/s of each and their
ratio. Only the ratio means anything on a shared machine; both are measured in the same process.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from collections.abc import Sequence
from pathlib import Path

import jax

from fusedrl.cli import CLIError, parse_overrides
from fusedrl.progress_cost import timed_run
from fusedrl.runs import RunOptions, compiled_run, num_streams
from fusedrl.train.presets import preset


def measure(config, num_seeds: int, repeats: int) -> dict[int, list[float]]:
    """{streams: [aggregate env steps/s per timed run]} for the default streams and for 1."""
    every = RunOptions().callback_every(config)
    keys = jax.random.split(jax.random.key(0), num_seeds)
    programs = {}
    for streams in dict.fromkeys([num_streams(num_seeds), 1]):
        train, run, seconds = compiled_run(config, num_seeds, every, streams)
        programs[streams] = (run, train.default_hparams())
        print(f"compiled streams={streams} ({num_seeds // streams} seed(s) per program) in {seconds:.1f} s",
              flush=True)
    sps: dict[int, list[float]] = {s: [] for s in programs}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(repeats):
            for streams, (run, hparams) in (programs.items() if r % 2 == 0 else reversed(programs.items())):
                wall, _ = timed_run(run, keys, hparams, config, Path(tmp) / f"m{streams}_{r}.csv")
                sps[streams].append(config.env_steps * num_seeds / wall)
                print(f"repeat {r}: streams={streams}: {sps[streams][-1]:,.0f} env steps/s", flush=True)
    return sps


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m fusedrl.bench runs", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", default="CartPole-v1")
    p.add_argument("--num-seeds", type=int, default=8)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="override a preset field, parsed as `fusedrl train --set` does")
    args = p.parse_args(argv)
    if args.num_seeds < 1 or args.repeats < 1:
        p.error("--num-seeds and --repeats must be positive integers")
    try:
        overrides = parse_overrides(args.set)
    except CLIError as e:
        p.error(str(e))
    config = preset(args.env, **overrides)
    sps = measure(config, args.num_seeds, args.repeats)
    print(f"\n{args.env} preset, {args.num_seeds} seeds x {config.env_steps:,} env steps, "
          f"{args.repeats} alternating repeats, progress callback on:")
    base = statistics.median(sps[1])
    for streams, values in sps.items():
        m = statistics.median(values)
        print(f"  streams={streams}  median {m:12,.0f} env steps/s  ({m / base:.2f}x the single vmap)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
