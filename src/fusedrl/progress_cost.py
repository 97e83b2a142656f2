"""Measures what the progress callback costs: `python -m fusedrl.progress_cost --env CartPole-v1`.

Compiles the CLI's program with the callback off and with it on (every k updates, feeding the CSV
logger and the progress bar as `fusedrl train` does), then alternates timed runs of each and
reports the medians and their ratio. Alternating spreads the noise of a shared machine evenly, and
each repeat starts with the next program in turn, so none is always the first to run.
"""

from __future__ import annotations

import argparse
import io
import statistics
import tempfile
import time
from pathlib import Path

import jax

from fusedrl.loggers import CSVLogger
from fusedrl.progress import Monitor, ProgressBar, dispatch, interrupt_guard
from fusedrl.runs import RunOptions, compiled_run
from fusedrl.train.presets import preset


def timed_run(run, keys, hparams, config, csv_path) -> tuple[float, float]:
    """`run(keys, hparams)` (a program from `fusedrl.runs.compiled_run`) fed to the sinks
    `fusedrl train` uses: the CSV logger at `csv_path` and a progress bar drawn into a string.
    Returns (wall seconds, CPU seconds of all threads of this process)."""
    num_seeds = keys.shape[0]
    csv_logger = CSVLogger(csv_path)
    bar = ProgressBar(config.num_updates, config.batch_size, num_seeds, file=io.StringIO())
    monitor = Monitor(num_seeds, config.batch_size, [csv_logger, bar])
    t, c = time.perf_counter(), time.process_time()
    try:
        with dispatch.active(monitor), interrupt_guard(monitor):
            jax.block_until_ready(run(keys, hparams))
        return time.perf_counter() - t, time.process_time() - c
    finally:
        csv_logger.close()


def measure(env_id: str, every: list[int], repeats: int, num_seeds: int):
    """Wall and CPU (all threads of this process) seconds per run: ({k: [wall]}, {k: [cpu]})."""
    config = preset(env_id)
    keys = jax.random.split(jax.random.key(0), num_seeds)
    programs = {}
    for k in [0, *every]:
        train, run, seconds = compiled_run(config, num_seeds, k)
        programs[k] = (run, train.default_hparams())
        print(f"compiled callback_every={k} in {seconds:.1f} s", flush=True)
    times: dict[int, list[float]] = {k: [] for k in programs}
    cpu: dict[int, list[float]] = {k: [] for k in programs}
    with tempfile.TemporaryDirectory() as tmp:
        order = list(programs)
        for r in range(repeats):
            for k in order[r % len(order):] + order[:r % len(order)]:
                run, hparams = programs[k]
                wall, cpu_s = timed_run(run, keys, hparams, config, Path(tmp) / f"m{k}_{r}.csv")
                times[k].append(wall)
                cpu[k].append(cpu_s)
                print(f"repeat {r}: callback_every={k}: wall {times[k][-1]:.2f} s, cpu {cpu[k][-1]:.2f} s",
                      flush=True)
    return times, cpu


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m fusedrl.progress_cost", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", default="CartPole-v1")
    p.add_argument("--every", type=int, nargs="+", default=None,
                   help="callback intervals to measure (default: the CLI's default and 1)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--num-seeds", type=int, default=1)
    args = p.parse_args(argv)
    config = preset(args.env)
    every = args.every or sorted({RunOptions().callback_every(config), 1}, reverse=True)
    times, cpu = measure(args.env, every, args.repeats, args.num_seeds)
    print(f"\n{args.env} preset, {config.num_updates} updates, {args.num_seeds} seed(s), "
          f"{args.repeats} alternating repeats:")
    for label, t in (("wall", times), ("cpu ", cpu)):
        for stat_name, stat in (("median", statistics.median), ("min", min)):
            off = stat(t[0])
            print(f"  {label} {stat_name:<6} callback off        {off:7.2f} s")
            for k in every:
                on = stat(t[k])
                print(f"  {label} {stat_name:<6} callback every {k:<4} {on:7.2f} s   ratio {on / off:.3f} "
                      f"({(on / off - 1) * 100:+.1f}%)")


if __name__ == "__main__":
    main()
