"""Running many agents on one CPU device: streams of runs, each trained in pieces of updates.

XLA:CPU runs an agent's many small kernels no faster batched over runs than one run at a time,
and does not spread them over its cores. So on a lone CPU device `fusedrl.sweep` and
`fusedrl.runs` split their runs into equal shares, one host thread ("stream") per usable core,
each calling the same compiled executables on its share. The numbers behind this choice are in
docs/speed.md.

A share trains in pieces of about `STREAM_PIECE_UPDATES` updates, one execution per piece, its
runs' states staying on the device in between: XLA:CPU holds some memory until an execution ends
when several executions run at once, so whole runs in parallel threads would grow without bound.
Pieces also let every share stop together, at a checkpoint or after an error in another share.

The pieces of a run (`update_pieces`) are given as a plan: a list of segments, each a list of
(first update, count) pieces. All shares finish a segment before the next starts (`drive`), which
is where `fusedrl.runs` saves its checkpoints.
"""

from __future__ import annotations

import concurrent.futures
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from fusedrl._numbers import is_int
from fusedrl.platform import choices_platform
from fusedrl.train import TrainResult

#: A stream runs its share in pieces of about this many updates in all (its runs' updates added
#: up), one execution each; see the module docstring for why executions must end regularly.
STREAM_PIECE_UPDATES = 128

Pieces = Sequence[tuple[int, int]]  # (first update, number of updates) of consecutive pieces


def usable_cores() -> int:
    """CPU cores this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def check_devices(devices) -> None:
    """Refuses a `devices` argument (of `fusedrl.sweep` or `fusedrl.data_parallel_train`) that is
    neither None nor a non-empty list of `jax.Device` objects."""
    if devices is None:
        return
    if isinstance(devices, str | jax.Device) or not isinstance(devices, Sequence | np.ndarray):
        raise TypeError(f"devices must be a list of jax.Device objects (e.g. jax.devices('cpu')), or "
                        f"None for jax.devices(); got {devices!r}.")
    for d in devices:
        if not isinstance(d, jax.Device):
            raise TypeError(f"devices must be jax.Device objects (e.g. jax.devices('cpu')), got "
                            f"{d!r} ({type(d).__name__}).")
    if len(devices) == 0:
        raise ValueError("devices is empty: give at least one device, or None for jax.devices().")


def resolve_streams(streams: int | None, devices: Sequence[jax.Device], num_runs: int) -> int:
    """How many host threads share `num_runs` runs on `devices` (1: one vmapped program).

    `streams=None` picks the default: one per usable core, at most one per run, on a lone CPU
    device; 1 elsewhere (several devices split the runs, and an accelerator runs one vmapped
    program best). A count > 1 is refused unless the runs are on a lone CPU device.
    """
    cpu_alone = len(devices) == 1 and choices_platform(devices[0].platform) == "cpu"
    if streams is None:
        return min(num_runs, usable_cores()) if cpu_alone else 1
    if not is_int(streams) or streams < 1:
        raise ValueError(f"streams must be a positive int (or None for the default), got {streams!r}.")
    if streams > 1 and not cpu_alone:
        raise ValueError(
            f"streams={streams} runs host threads on one CPU device, but this sweep runs on "
            f"{len(devices)} {devices[0].platform} device(s). Leave streams=None (or 1): several "
            f"devices already split the runs, and an accelerator runs the vmapped program best."
        )
    return int(streams)


def piece_size(runs_per_stream: int) -> int:
    """Updates per piece for each run of a stream of `runs_per_stream` runs trained one after
    another: `STREAM_PIECE_UPDATES` shared among them, at least 1."""
    return max(1, STREAM_PIECE_UPDATES // runs_per_stream)


def update_pieces(num_updates: int, size: int | None = None) -> list[tuple[int, int]]:
    """(first update, count) of consecutive pieces covering `num_updates`, none longer than `size`
    (default `STREAM_PIECE_UPDATES`): equal pieces when some count between ceil(n / size) and
    twice that divides n (one program to compile), else two sizes that differ by one."""
    size = STREAM_PIECE_UPDATES if size is None else size
    k = max(1, -(-num_updates // size))
    k = next((d for d in range(k, 2 * k + 1) if num_updates % d == 0), k)
    q, r = divmod(num_updates, k)
    counts = [q + 1] * r + [q] * (k - r)
    firsts = np.cumsum([0] + counts[:-1])
    return [(int(f), c) for f, c in zip(firsts, counts, strict=True)]


def compile_in_pieces(init, init_args: Sequence, advance, advance_args: Sequence,
                      pieces: Pieces) -> tuple[Any, dict[int, Any]]:
    """Compiles jitted `init(*init_args)` -> states and, once per distinct piece length n in
    `pieces`, jitted `advance(states, *advance_args, first_update, n)` (n static): the executables
    `continue_in_pieces` calls. The states' shapes come from the lowered `init` (no second trace).

    XLA compiles `init` (or loads it from the persistent compile cache) in a second thread while
    this one traces and lowers `advance`: XLA works without holding Python's lock, tracing holds it."""
    lowered = init.lower(*init_args)
    first = jax.ShapeDtypeStruct((), jnp.int32)
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="fusedrl-compile") as pool:
        init_compiled = pool.submit(lowered.compile)
        advances = {n: advance.lower(lowered.out_info, *advance_args, first, n).compile()
                    for n in sorted({n for _, n in pieces})}
        return init_compiled.result(), advances


def continue_in_pieces(states, advance: Callable, pieces: Pieces,
                       stop: threading.Event | None = None) -> TrainResult:
    """`advance(states, first_update, num_updates) -> TrainResult` called piece after piece, each
    from the previous one's states; the pieces' metrics joined along their update axis (1).

    With `stop`, at most two pieces are in flight (each launched once the one two before it has
    ended, so the device never waits for a launch), and once `stop` is set no further piece starts:
    KeyboardInterrupt is raised instead (`run_shares` sets it when another share fails or Ctrl-C
    arrives, so every share stops within about two pieces)."""
    metrics, in_flight = [], []  # only the last two pieces' results: each holds its states
    try:
        for first, n in pieces:
            if stop is not None:
                if len(in_flight) >= 2:
                    jax.block_until_ready(in_flight.pop(0))
                if stop.is_set():
                    raise KeyboardInterrupt
            out = advance(states, first, n)
            states = out.state
            metrics.append(out.metrics)
            if stop is not None:
                in_flight.append(out)
    except BaseException:
        # Leave no piece running: a process that exits while an execution runs (Ctrl-C, then
        # exit 130) can abort in XLA ("terminate called without an active exception").
        for out in in_flight:
            try:
                jax.block_until_ready(out)
            except Exception:  # e.g. its callback stopped it: the error raised here says enough
                pass
        raise
    return out.replace(metrics=join_updates(metrics))


def join_updates(metrics: Sequence[Mapping[str, Any]]) -> dict[str, np.ndarray]:
    """Per-update metrics [runs, U_i] of consecutive stretches of updates, joined along axis 1 on
    the host (NumPy arrays). Joined on the device, every new count of stretches (a checkpoint's:
    one more each time) would compile a new concatenation, and keep it."""
    metrics = jax.device_get(list(metrics))
    return {k: np.concatenate([np.asarray(m[k]) for m in metrics], axis=1) for k in metrics[0]}


def _join_runs(parts: Sequence[Any]):
    """Pytrees of shares of runs concatenated along axis 0: NumPy leaves (metrics joined on the
    host) on the host, device arrays on the device."""
    def join(*xs):
        return np.concatenate(xs) if all(isinstance(x, np.ndarray) for x in xs) else jnp.concatenate(xs)

    return jax.tree.map(join, *parts)


def run_shares(part: Callable[[int, threading.Event], Any], streams: int, thread_name_prefix: str):
    """`part(i, stop)` for i in range(streams), each in its own host thread, all at once; their
    result pytrees concatenated along axis 0 in order of i. An exception in a part, or a Ctrl-C
    here, sets `stop` (for `continue_in_pieces`), waits for the parts to return, and is re-raised."""
    stop = threading.Event()
    with concurrent.futures.ThreadPoolExecutor(streams, thread_name_prefix=thread_name_prefix) as pool:
        try:
            futures = [pool.submit(part, i, stop=stop) for i in range(streams)]
            # As soon as any part fails (not only once the parts before it have returned).
            done, _ = concurrent.futures.wait(futures, return_when=concurrent.futures.FIRST_EXCEPTION)
        except BaseException:  # Ctrl-C while starting the parts or waiting for them
            stop.set()
            raise
        failed = [f for f in futures if f in done and f.exception() is not None]
        if failed:  # the first failure itself, not the KeyboardInterrupt `stop` gives the others
            stop.set()
            failed[0].result()
        parts = [f.result() for f in futures]
    return _join_runs(parts)


def drive(
    start: Callable[[int], Any],
    advance: Callable[[int, Any, int, int], TrainResult],
    streams: int,
    plan: Sequence[Pieces],
    *,
    states=None,
    between: Callable[[TrainResult], None] | None = None,
    on_error: Callable[[BaseException], None] | None = None,
    device: jax.Device | None = None,
    thread_name_prefix: str = "fusedrl-stream",
) -> TrainResult | None:
    """Trains `streams` equal shares of runs through the segments of `plan`, piece by piece.

    Args:
      start: `start(i)` -> the initial states of share i (leaves [runs of the share, ...]).
      advance: `advance(i, states, first_update, num_updates)` -> the `TrainResult` of share i
        continued by one piece.
      streams: the number of shares; 1 runs in this thread, more one host thread each
        (`run_shares`), stopping together after an error or Ctrl-C in any of them.
      plan: segments of pieces (`update_pieces`); every share ends a segment before the next starts.
      states: leaves [runs, ...] to continue from instead of `start` (split into equal shares).
      between: called after every segment but the last with the result so far (all shares,
        metrics of every segment so far joined, as NumPy arrays): a checkpoint.
      on_error: called in the failing share's thread with the exception before it propagates.
      device: commit each share's result to this device (an executable's outputs may come back
        uncommitted, and the shares are concatenated on the device of their inputs).
      thread_name_prefix: names the host threads (seen in a debugger or `py-spy`).

    Returns:
      The shares' results concatenated along the run axis, with the metrics of every piece
      joined along the update axis; None if `plan` is empty (nothing left to train).
    """

    def part(i, states, pieces, stop=None):
        if states is None:
            share = start(i)
        else:
            per = jax.tree.leaves(states)[0].shape[0] // streams
            share = jax.tree.map(lambda x: x[i * per:(i + 1) * per], states)
        try:
            out = jax.block_until_ready(continue_in_pieces(
                share, lambda s, first, n: advance(i, s, first, n), pieces, stop))
        except BaseException as e:
            if on_error is not None:
                on_error(e)
            raise
        # Committing outputs to where they already are copies nothing.
        return out if device is None else jax.device_put(out, device)

    metrics, result = None, None  # the metrics of every segment so far, joined on the host
    for j, pieces in enumerate(plan):
        if streams == 1:
            result = part(0, states, pieces)
        else:
            result = run_shares(lambda i, stop, pieces=pieces, states=states: part(i, states, pieces, stop),
                                streams, thread_name_prefix)
        states = result.state
        metrics = result.metrics if metrics is None else join_updates([metrics, result.metrics])
        result = result.replace(metrics=metrics)
        if between is not None and j + 1 < len(plan):
            between(result)
    if result is None:
        return None
    # On the device, as a program's outputs are (a copy, not a compiled concatenation).
    return result.replace(metrics=jax.device_put(metrics, device))
