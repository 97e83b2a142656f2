"""Host-side progress of a run: per-seed metrics, a progress bar, Ctrl-C.

`fusedrl.runs` trains a run with progress in pieces of updates and hands each progress update's
per-seed rows to `Monitor` from the host, between pieces (`fusedrl.runs.report_progress`): its
programs have no host callback, so JAX's persistent compile cache keeps them. A trainer built with
`make_train(config, callback=...)`, and the host bridge, call `Monitor` from inside the run instead.

The trainer calls its `callback(metrics)` through `jax.debug.callback`. Under `jax.vmap` (many
seeds in one program) jax 0.10 unrolls that callback across the mapped axis: the host is called
once per seed with that seed's unbatched metrics, in an order XLA is free to choose, and nothing
in the metrics says which seed they belong to. The caller therefore passes each seed's number at
the vmap site (`train.run(..., callback_extra={"seed": s})`, as `fusedrl.runs` does), and `Monitor`
gathers the calls of one update until every seed has reported, then hands the rows to the
loggers in seed order.

On CPU the callbacks run on the thread that launched the program (`fusedrl.runs` launches one per
core, so `Monitor` takes a lock), and a Ctrl-C can arrive inside one of them. `interrupt_guard`
turns SIGINT into a flag that `Monitor` checks before it writes anything, so an interrupted run
never leaves a half-written row.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

import numpy as np

from fusedrl.metrics import has_episode


class Logger(Protocol):
    """Receives the rows of one update, one row per seed in seed order."""

    def log(self, update: int, rows: Sequence[dict[str, float]]) -> None: ...

    def close(self) -> None: ...


class Monitor:
    """The host end of the trainer's callback: collects per-seed calls, emits whole updates.

    Args:
      num_seeds: how many seeds report each logged update.
      batch_size: env steps per update per seed (turns `env_steps` into an update number).
      loggers: objects with `log(update, rows)`; called in update order.
    """

    def __init__(self, num_seeds: int, batch_size: int, loggers: Sequence[Logger] = ()):
        self.num_seeds = int(num_seeds)
        self.batch_size = int(batch_size)
        self.loggers = list(loggers)
        self.stop_requested = False  # set by interrupt_guard's SIGINT handler
        self.interrupted = False  # a KeyboardInterrupt left through this monitor
        self.last_update = 0
        self._pending: dict[int, dict[int, dict[str, float]]] = {}
        self._lock = threading.Lock()  # programs on several host threads may report at once

    def stop_if_requested(self) -> None:
        """Raises KeyboardInterrupt (the run stops here) once a Ctrl-C asked for a stop."""
        if self.stop_requested:
            self.interrupted = True
            raise KeyboardInterrupt

    def __call__(self, metrics: dict[str, Any]) -> None:
        try:
            if self.stop_requested:
                raise KeyboardInterrupt
            row = {k: np.asarray(v).item() for k, v in metrics.items()}
            seed = int(row.pop("seed", 0))
            update = int(row["env_steps"]) // self.batch_size
            with self._lock:
                seeds = self._pending.setdefault(update, {})
                seeds[seed] = {"update": update, "seed": seed, **row}
                if len(seeds) == self.num_seeds:
                    del self._pending[update]
                    rows = [seeds[s] for s in sorted(seeds)]
                    self.last_update = max(self.last_update, update)  # the latest handed to loggers
                    for logger in self.loggers:
                        logger.log(update, rows)
        except KeyboardInterrupt:
            self.interrupted = True
            raise


class _Dispatcher:
    """One stable callback for compiled programs; forwards to the monitor of the current run.

    A compiled program keeps the Python callable it was traced with, so programs cached across
    runs call this object and each run installs its own `Monitor` with `active(monitor)`.
    """

    def __init__(self):
        self.monitor: Monitor | None = None

    def __call__(self, metrics):
        if self.monitor is not None:
            self.monitor(metrics)

    @contextlib.contextmanager
    def active(self, monitor: Monitor) -> Iterator[Monitor]:
        previous, self.monitor = self.monitor, monitor
        try:
            yield monitor
        finally:
            self.monitor = previous


dispatch = _Dispatcher()


class _DropCallbackTraceback(logging.Filter):
    """jax logs a traceback when a callback raises; an interrupt is not worth one."""

    def __init__(self, monitor: Monitor):
        super().__init__()
        self.monitor = monitor

    def filter(self, record):
        return not (self.monitor.interrupted or self.monitor.stop_requested)


@contextlib.contextmanager
def interrupt_guard(monitor: Monitor) -> Iterator[None]:
    """While active, the first Ctrl-C asks `monitor` to stop at its next callback (a clean
    point); a second Ctrl-C interrupts at once. Outside the main thread it does nothing."""
    jax_logger = logging.getLogger("jax._src.debugging")
    quiet = _DropCallbackTraceback(monitor)
    jax_logger.addFilter(quiet)
    if threading.current_thread() is not threading.main_thread():
        try:
            yield
        finally:
            jax_logger.removeFilter(quiet)
        return

    def handler(signum, frame):
        if monitor.stop_requested:
            raise KeyboardInterrupt
        monitor.stop_requested = True

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        jax_logger.removeFilter(quiet)


#: What `hold_interrupt` shows a spinner for, when `show_spinner` turned it on: compiles (the one
#: training program, and evaluation's, which compiles first).
SPINNER_PHASES = ("compiling", "evaluating")
_spinner: dict[str, Any] = {"on": False, "force_terminal": None}
_live_bars = [0]  # ProgressBars drawing now: they show the compile (spinner, elapsed time) themselves


def show_spinner(on: bool = True, *, force_terminal: bool | None = None) -> dict[str, Any]:
    """Turns the spinner of `hold_interrupt`'s compile phases on (the command line does, with its
    progress) or off; returns the previous setting, for `restore_spinner`. `force_terminal`: draw it
    on a file that is not a terminal too (tests); by default only a terminal shows it."""
    previous = dict(_spinner)
    _spinner.update(on=bool(on), force_terminal=force_terminal)
    return previous


def restore_spinner(previous: dict[str, Any]) -> None:
    _spinner.update(previous)


@contextlib.contextmanager
def spinner(what: str, file=None, *, force_terminal: bool | None = None) -> Iterator[None]:
    """A spinner with the elapsed time ("compiling ... 12 s") on `file` (default stderr) while the
    block runs, cleared when it ends. Nothing on a file that is not a terminal (logs, pipes),
    unless `force_terminal`. Compiling is most of a short run's time: this shows it is not stuck."""
    from rich.console import Console  # start-up time: rich loads only when something is displayed

    console = Console(file=file or sys.stderr, force_terminal=force_terminal)
    if not console.is_terminal:
        yield
        return
    start = time.perf_counter()
    stop = threading.Event()
    with console.status(f"{what} ...", spinner="dots") as status:
        def tick() -> None:  # the elapsed time, once a second (rich redraws the spinner itself)
            while not stop.wait(1.0):
                status.update(f"{what} ... {time.perf_counter() - start:.0f} s")

        thread = threading.Thread(target=tick, name="fusedrl-spinner", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()


@contextlib.contextmanager
def hold_interrupt(what: str, file=None) -> Iterator[None]:
    """`_hold_interrupt`, with a spinner while compiling when `show_spinner` turned it on (main
    thread only: one spinner, not one per thread)."""
    if (_spinner["on"] and what in SPINNER_PHASES and not _live_bars[0]
            and threading.current_thread() is threading.main_thread()):
        with spinner(what, file, force_terminal=_spinner["force_terminal"]), _hold_interrupt(what, file):
            yield
    else:
        with _hold_interrupt(what, file):
            yield


@contextlib.contextmanager
def _hold_interrupt(what: str, file=None) -> Iterator[None]:
    """Holds Ctrl-C (SIGINT) until the block ends, then acts on it there (raises KeyboardInterrupt,
    or calls the handler that was in place before). For compiling: a Ctrl-C that lands inside XLA's
    compile abandons it, and the interpreter can then crash as it exits (a segfault, or "pure virtual
    method called" and an abort, instead of exit status 130). Outside the main thread, or while
    SIGINT is ignored, it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held = []

    def handler(signum, frame):
        if not held:
            print(f"Ctrl-C: stopping once {what} ends (it cannot be interrupted safely)",
                  file=file or sys.stderr, flush=True)
        held.append(frame)

    previous = signal.getsignal(signal.SIGINT)
    if previous is signal.SIG_IGN or previous is None:  # ignored (a background job), or not set by Python
        yield
        return
    signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if held:
        if callable(previous):
            previous(signal.SIGINT, held[0])
        else:  # SIG_DFL: what Python's own handler does
            raise KeyboardInterrupt


def is_interrupt(error: BaseException, monitor: Monitor | None = None) -> bool:
    """Whether a failed run was stopped by a KeyboardInterrupt inside a callback."""
    if monitor is not None and monitor.interrupted:
        return True
    return isinstance(error, KeyboardInterrupt) or "KeyboardInterrupt" in str(error)


# ----------------------------------------------------------------------------- progress bar
class ProgressBar:
    """Live bar (rich) of updates, env steps, SPS and the latest mean return; a `Logger`.

    On a terminal it redraws in place; elsewhere (CI logs, pipes) it prints a plain line about
    every 10% of the run. A resumed run starts the bar at `start_update`, and its SPS counts only
    the updates trained since.
    """

    def __init__(self, num_updates: int, batch_size: int, num_seeds: int, *, file=None,
                 description: str = "training", start_update: int = 0):
        from rich.console import Console  # start-up time: rich loads only when something is displayed

        self.num_updates, self.batch_size, self.num_seeds = num_updates, batch_size, num_seeds
        self.start_update = start_update
        self.console = Console(file=file or sys.stderr)
        self.start = time.perf_counter()
        self._next_plain = 0.1
        self._progress = None
        if self.console.is_terminal:
            from rich.progress import (  # start-up time, as rich.console above
                BarColumn,
                MofNCompleteColumn,
                Progress,
                SpinnerColumn,
                TextColumn,
                TimeElapsedColumn,
            )

            # Fits an 80-column terminal: spinner, bar, updates done/total, steps, SPS, return,
            # elapsed. While compiling: the spinner, "compiling" and its elapsed time.
            self._progress = Progress(
                SpinnerColumn(finished_text=" "),
                BarColumn(bar_width=18),
                MofNCompleteColumn(),
                TextColumn("{task.fields[info]}"),
                TimeElapsedColumn(),
                console=self.console,
                transient=False,
            )
            self._task = self._progress.add_task(description, total=num_updates, completed=start_update,
                                                 info="compiling")
            self._progress.start()
            _live_bars[0] += 1

    def restart_clock(self) -> None:
        """Starts timing now (after compiling), for SPS and the elapsed-time column."""
        self.start = time.perf_counter()
        if self._progress is not None:
            self._progress.reset(self._task, total=self.num_updates, completed=self.start_update,
                                 info="running")

    def info(self, update: int, rows: Sequence[dict[str, float]]) -> str:
        elapsed = max(time.perf_counter() - self.start, 1e-9)
        steps = update * self.batch_size
        sps = (update - self.start_update) * self.batch_size * self.num_seeds / elapsed
        # Seeds before their first completed episode report 0.0 with episode_length 0: no return.
        known = [r["episode_return"] for r in rows if has_episode(r)]
        ret = f"{float(np.mean(known)):.1f}" if known else "n/a"
        seeds = f" x{self.num_seeds}" if self.num_seeds > 1 else ""
        return f"{_si(steps)} steps{seeds}  {_si(sps)} SPS  return {ret}"

    def log(self, update: int, rows: Sequence[dict[str, float]]) -> None:
        text = self.info(update, rows)
        if self._progress is not None:
            self._progress.update(self._task, completed=update, info=text)
        elif update >= self._next_plain * self.num_updates or update == self.num_updates:
            self.console.print(f"update {update}/{self.num_updates}  {text}", highlight=False, soft_wrap=True)
            self._next_plain = (update / self.num_updates) + 0.1

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
            _live_bars[0] -= 1


class CallbackLogger:
    """Adapts a plain function `fn(update, rows)` to the `Logger` protocol."""

    def __init__(self, fn: Callable[[int, Sequence[dict[str, float]]], None]):
        self.fn = fn

    def log(self, update, rows):
        self.fn(update, rows)

    def close(self):
        pass


def _si(x: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.3g}{unit}"
    return f"{x:.0f}"
