"""Driving a run: its compiled programs (`fusedrl.run_programs`) launched piece by piece over host
threads, progress reported from the host between pieces, a checkpoint at every stretch's end, and
the host bridge's one seed; the stage `train_seeds` returns what the report needs (`Trained`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np

from fusedrl.bridge import make_host_train
from fusedrl.envs.host import is_host_env_id
from fusedrl.loggers import CSVLogger, metrics_to_rows
from fusedrl.progress import Monitor, ProgressBar, dispatch, hold_interrupt, interrupt_guard, is_interrupt
from fusedrl.run_folder import METRICS_FILE, Resumed, RunOptions, error_record
from fusedrl.run_programs import compiled_programs, num_streams, pieces_plan
from fusedrl.streams import drive, join_updates
from fusedrl.train import TrainResult, make_train
from fusedrl.train.config import OnPolicyConfig


def progress_updates(first: int, count: int, every: int) -> list[int]:
    """The updates (1-based) among updates `first`+1 ... `first`+`count` that report progress:
    every `every`-th of the run (none when `every` is 0)."""
    if every <= 0:
        return []
    return list(range(first + every - first % every, first + count + 1, every))


def report_progress(metrics: Mapping[str, Any], first: int, every: int, first_seed: int = 0) -> None:
    """Hands the rows of the progress updates among a piece's updates `first`+1 ... (metrics
    [seeds, updates] of seeds numbered from `first_seed`) to the running `Monitor`, one call per
    update and seed, as the trainer's callback would from inside the program; nothing when no
    monitor is active. The monitor raises KeyboardInterrupt there once a Ctrl-C asked it to stop."""
    monitor = dispatch.monitor
    if monitor is None:
        return
    monitor.stop_if_requested()  # a Ctrl-C: stop at the end of this piece, with or without a row
    count = int(np.shape(metrics["env_steps"])[1])
    updates = progress_updates(first, count, every)
    if not updates:
        return
    values = jax.device_get({k: metrics[k] for k in sorted(metrics)})
    for update in updates:
        for s in range(values["env_steps"].shape[0]):
            monitor({**{k: v[s, update - first - 1] for k, v in values.items()}, "seed": first_seed + s})


def compiled_run(config: OnPolicyConfig, num_seeds: int, callback_every: int, streams: int | None = None, *,
                 checkpoint_every: int = 0, start_update: int = 0, env: tuple[Any, Any] | None = None):
    """(trainer, `run(keys [num_seeds], hparams, states=None, on_checkpoint=None) -> TrainResult`,
    seconds spent compiling now: 0.0 when reused).

    `run` splits the seeds over `streams` host threads (default `num_streams`), each calling the
    same compiled programs on its consecutive share. One share trained from the start without
    checkpoints or progress (`callback_every=0`) is one program; otherwise each share runs in
    pieces of `piece_length` updates (`pieces_plan`), one execution per piece, and all shares stop
    together at every checkpoint (`checkpoint_segments`): `on_checkpoint(result so far)` is called
    there, with the metrics from `start_update` on. `states` (leaves [num_seeds, ...]) continues a
    run at update `start_update` (a restored checkpoint) instead of starting one from `keys`.

    Progress: every `callback_every` updates, the rows of that update reach the running `Monitor`
    (`dispatch.active`) from the host, once the piece that holds it has ended (`report_progress`);
    the first Ctrl-C (`interrupt_guard`) stops the run at the end of a piece. No compiled program
    has a host callback, so every one of them is stored in JAX's persistent compile cache.

    `env`: the run's (env, env_params), if built already (see `compiled_programs`).

    Pieces compile separately from the one-program run, so their results agree with it to float32
    rounding, not bit for bit; the same pieces (a resumed run and the same run uninterrupted, or the
    same run with another progress interval) agree exactly.
    """
    streams = num_streams(num_seeds) if streams is None else int(streams)
    if num_seeds % streams:
        raise ValueError(f"streams={streams} must divide num_seeds={num_seeds}.")
    per = num_seeds // streams
    plan = pieces_plan(config, callback_every, streams, checkpoint_every=checkpoint_every,
                       start_update=start_update)
    whole = plan is None
    train, compiled, seconds = compiled_programs(config, per, plan, env)

    def run(keys, hparams, states=None, on_checkpoint=None) -> TrainResult:
        if whole:
            if states is not None:
                raise ValueError("states continue a run at start_update > 0; this program starts one.")
            return compiled(keys, hparams)
        if states is None and start_update:
            raise ValueError(f"a run continued at update {start_update} needs the states to continue.")
        init, advance = compiled
        # Each share's latest piece (first update, metrics), reported once the next is launched:
        # the device runs a piece while the host writes the rows of the one before.
        unreported: dict[int, tuple[int, Any]] = {}

        def report(i):
            if i in unreported:
                first, metrics = unreported.pop(i)
                report_progress(metrics, first, callback_every, i * per)
                train.check(metrics, first_update=first)  # a broken env stops the run at this piece

        def advance_share(i, share, first, n):
            out = advance[n](share, hparams, np.int32(first))
            try:
                report(i)
            except BaseException:
                jax.block_until_ready(out)  # leave no piece running (see continue_in_pieces)
                raise
            unreported[i] = (first, out.metrics)
            return out

        def on_error(e):
            # Ctrl-C (or a KeyboardInterrupt from a logger) in one share: the others stop at
            # their next piece. Other errors are left to surface as themselves.
            if is_interrupt(e) and dispatch.monitor is not None:
                dispatch.monitor.stop_requested = True

        def segment_end(result):
            for i in range(streams):
                try:
                    report(i)
                except KeyboardInterrupt:  # a Ctrl-C: its checkpoint first, then stop (below)
                    if dispatch.monitor is None or not dispatch.monitor.stop_requested:
                        raise
            if on_checkpoint is not None:
                on_checkpoint(result)
            if dispatch.monitor is not None and dispatch.monitor.stop_requested:
                raise KeyboardInterrupt  # a Ctrl-C during the stretch: stop at its checkpoint

        result = drive(
            lambda i: init(keys[i * per:(i + 1) * per], hparams),
            advance_share, streams, plan, states=states, between=segment_end,
            on_error=on_error, thread_name_prefix="fusedrl-run",
        )
        for i in range(streams):
            report(i)
        if result is None:  # nothing left to train
            return TrainResult(state=states, metrics={}, hparams=hparams)
        return result

    return train, run, seconds


# ---------------------------------------------------------------------------- the training stage
@dataclasses.dataclass
class Trained:
    """What `train_seeds` hands the report (`fusedrl.run_report`): the result of every update
    (leaves [num_seeds, ...], metrics from update 1 on, also for a resumed run), the trainer of the
    run's config (the fused one, whose env the evaluation reuses; or the host bridge's), and the
    times."""

    result: TrainResult
    trainer: Any
    start: int  # the update training started from: 0, or where a resumed run continued
    progress_every: int  # updates between progress rows (`RunOptions.callback_every`; 0: none)
    compile_seconds: float | None  # None: the host bridge compiles while it trains
    train_seconds: float


def train_seeds(config: OnPolicyConfig, options: RunOptions, env: tuple[Any, Any], summary: dict[str, Any], *,
                path: Path | None, progress: bool, loggers: Sequence[Any], progress_file,
                resumed: Resumed | None = None, on_checkpoint=None) -> Trained:
    """Trains every seed of the run (from `resumed` if given) with progress and loggers (metrics.csv
    too, in `path`); `on_checkpoint(result so far)` at every checkpoint (`options.checkpoint_every`),
    the result's metrics from update 1 on. `summary` gets the mode and host threads; an interrupted
    or failed run raises with `summary` saying so (status, updates logged, the error)."""
    bridge = is_host_env_id(config.env_id)
    start = 0 if resumed is None else resumed.update
    every = options.callback_every(config)
    sinks: list[Any] = []
    bar = None
    try:
        if every and path is not None:
            sinks.append(CSVLogger(path / METRICS_FILE))
        # Factories (callables taking the run folder) build their logger once the folder exists.
        for lg in loggers:  # one at a time: those built before a failing one are closed
            sinks.append(lg if hasattr(lg, "log") else lg(path))
        if every and progress:
            bar = ProgressBar(config.num_updates, config.batch_size, options.num_seeds, file=progress_file,
                              start_update=start)
            sinks.append(bar)
    except BaseException as e:  # a logger that fails to start (e.g. wandb.init): close the others
        _close(sinks)
        status = "interrupted" if isinstance(e, KeyboardInterrupt) else "failed"
        summary.update(status=status, failed_while="starting loggers", updates_logged=0,
                       error=error_record(e))
        raise
    monitor = Monitor(options.num_seeds, config.batch_size, sinks)
    monitor.last_update = start
    keys = jax.random.split(jax.random.key(options.seed), options.num_seeds)

    def checkpoint(result: TrainResult) -> None:  # its metrics from the start of this process
        if resumed is not None:
            result = result.replace(metrics=join_updates([resumed.metrics, result.metrics]))
        on_checkpoint(result)
    try:
        train = None
        if start == config.num_updates:  # resumed after its last update: nothing left to train
            if not bridge:  # the trainer the evaluation needs, from the run's env
                train = make_train(config, env=env)
            compile_s, t = 0.0, time.perf_counter()
            result = TrainResult(state=resumed.state, metrics=resumed.metrics, hparams=resumed.hparams)
        elif bridge:
            summary["mode"] = "bridge"
            compile_s = None  # the bridge compiles during its first update: part of train_seconds
            if bar is not None:
                bar.restart_clock()
            t = time.perf_counter()
            train, result = train_bridge(config, keys[0], every, monitor, env)
        else:
            _status(progress_file, progress, "compiling ...")
            streams = num_streams(options.num_seeds)
            summary["streams"] = streams
            if resumed is not None and resumed.streams not in (None, streams):  # said with progress off too
                _status(progress_file, True,
                        f"note: the run trained its seeds on {resumed.streams} host thread(s) and resumes on "
                        f"{streams} (this machine's cores): other programs, so it will match the run "
                        f"uninterrupted to float32 rounding only, not bit for bit.")
            with hold_interrupt("compiling", progress_file):  # see hold_interrupt: XLA and Ctrl-C
                train, run_seeds, compile_s = compiled_run(config, options.num_seeds, every, streams,
                                                           checkpoint_every=options.checkpoint_every,
                                                           start_update=start, env=env)
            hparams = train.default_hparams()
            if bar is not None:
                bar.restart_clock()
            t = time.perf_counter()
            with dispatch.active(monitor), stop_guard(monitor, every, config.num_updates):
                try:
                    result = jax.block_until_ready(run_seeds(
                        keys, hparams, states=None if resumed is None else resumed.state,
                        on_checkpoint=None if on_checkpoint is None else checkpoint,
                    ))
                except Exception as e:
                    if is_interrupt(e, monitor):
                        raise KeyboardInterrupt from None
                    raise
            train.check(result, first_update=start)  # the one-program run's (pieces check as they end)
            if resumed is not None:
                result = result.replace(metrics=join_updates([resumed.metrics, result.metrics]))
        run_s = time.perf_counter() - t
        if every and monitor.last_update < config.num_updates:
            # Rows come every `every` updates; the bar and the loggers still end on the last.
            last = jax.device_get({k: v[:, -1:] for k, v in result.metrics.items()})
            rows = metrics_to_rows(last, first_update=config.num_updates)
            for sink in sinks:
                sink.log(config.num_updates, rows)
    except KeyboardInterrupt:
        summary.update(status="interrupted", updates_logged=monitor.last_update)
        raise
    except Exception as e:
        summary.update(status="failed", failed_while="training", updates_logged=monitor.last_update,
                       error=error_record(e))
        raise
    finally:
        _close(sinks)
    return Trained(result, train, start, every, compile_s, run_s)


def train_bridge(config: OnPolicyConfig, key: jax.Array, every: int, monitor: Monitor,
                 env: tuple[Any, Any] | None = None):
    """(host trainer, result) of one seed through the host bridge (`fusedrl.bridge`), the result
    with a seed axis of 1.

    The host loop calls `monitor` itself every `every` updates (0: never). A Gymnasium env steps in
    Python, so neither vmap (several seeds) nor one compiled program (compile time apart) applies.
    """
    progress = {"callback": monitor, "callback_every": every} if every else {}
    train = make_host_train(config, env=env, **progress)
    with stop_guard(monitor, every, config.num_updates):
        result = jax.block_until_ready(train(key))
    train.trainer.check(result)
    return train, jax.tree.map(lambda x: x[None], result)


def stop_guard(monitor: Monitor, every: int, num_updates: int):
    """`interrupt_guard` (the first Ctrl-C stops the run at its next progress row, or the end of a
    piece) if rows come at all (`every` updates apart, from update `every`); without them Ctrl-C
    interrupts as usual, rather than being held for a row that never comes."""
    return interrupt_guard(monitor) if 0 < every <= num_updates else contextlib.nullcontext()


def _status(file, enabled: bool, text: str) -> None:
    if enabled:
        print(text, file=file or sys.stderr, flush=True)


def _close(sinks) -> None:
    for s in sinks:
        s.close()
