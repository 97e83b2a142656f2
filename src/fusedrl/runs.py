"""Training runs with a folder of results: the layer the CLI and notebooks share.

    run = train_run(preset("CartPole-v1"), out="runs/cartpole", num_seeds=4)
    run.summary["eval_return_mean"], run.result.metrics["episode_return"]   # [4, num_updates]

A run folder holds:

    config.json          the algorithm ("algo"), its resolved config and the run options
                         (`fusedrl train --config` reads it)
    metrics.csv          one row per update and seed (streamed during training, completed at the end)
    learning_curve.png   mean episode return with the per-seed band
    checkpoint/          the latest RunnerState of every seed (see fusedrl.checkpoint): the final
                         one, and during training one every `checkpoint_every` updates, from which
                         `resume_run` (`fusedrl train --resume DIR`) continues an interrupted run
    summary.json         greedy evaluation per seed, timings, status; diverged seeds (parameters not
                         finite: not evaluated) and evaluation episodes cut at EVAL_MAX_STEPS

Every file is written to a temporary name and renamed, so a crash or Ctrl-C leaves complete files
only; metrics.csv grows by whole rows.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import math
import os
import shutil
import sys
import time
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np

from fusedrl import checkpoint as ckpt
from fusedrl import run_lock
from fusedrl import streams as _streams
from fusedrl._argtypes import MAX_KEY_SEED, UsageError, import_modules, module_name_error, seed_error
from fusedrl.bridge import evaluate as evaluate_on_host
from fusedrl.bridge import make_host_train
from fusedrl.envs import make
from fusedrl.envs.host import is_host_env_id
from fusedrl.envs.registry import jax_instead, on_register
from fusedrl.evaluation import EVAL_MAX_STEPS, evaluate  # EVAL_MAX_STEPS re-exported
from fusedrl.files import write_atomic, write_json
from fusedrl.loggers import CSVLogger, format_rows, metrics_to_rows
from fusedrl.metrics import has_episode
from fusedrl.platform import choices_platform
from fusedrl.plotting import plot_learning_curve
from fusedrl.progress import Monitor, ProgressBar, dispatch, hold_interrupt, interrupt_guard, is_interrupt
from fusedrl.streams import compile_in_pieces, drive, join_updates, resolve_streams
from fusedrl.train import TrainResult, make_train
from fusedrl.train.config import CONFIGS, OnPolicyConfig, strong_hparams
from fusedrl.trust import check_trusted, named_modules
from fusedrl.version import __version__

CONFIG_FILE = "config.json"
METRICS_FILE = "metrics.csv"
CURVE_FILE = "learning_curve.png"
CHECKPOINT_DIR = "checkpoint"
SUMMARY_FILE = "summary.json"


class RunFolderExists(FileExistsError):
    pass


# ------------------------------------------------------------------------------- run options
@dataclasses.dataclass(frozen=True)
class RunOptions:
    """How a config is run (not part of the config): seeds, evaluation, progress."""

    num_seeds: int = 1
    seed: int = 0
    eval_episodes: int = 64
    progress_every: int | None = None  # updates between progress rows; None: about 50 per run
    checkpoint_every: int = 0  # updates between checkpoints during training; 0: only the final one
    # Modules that register the run's env (`fusedrl train --import`): reading the run folder again
    # (`load_run_config`: evaluate, --resume, fusedrl.load) imports them first.
    imports: tuple[str, ...] = ()

    def __post_init__(self):
        imports = self.imports
        if isinstance(imports, str) or not isinstance(imports, (list, tuple)):
            raise ValueError(f"imports must be a list of module names, got {imports!r}.")
        for name in imports:
            if (error := module_name_error(name)) is not None:
                raise ValueError(f"imports: {error}")
        object.__setattr__(self, "imports", tuple(imports))
        for name in ("num_seeds", "eval_episodes"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"{name} must be a positive int, got {v!r}.")
        ce = self.checkpoint_every
        if not isinstance(ce, int) or isinstance(ce, bool) or ce < 0:
            raise ValueError(f"checkpoint_every must be an int >= 0 (0: only the final checkpoint), "
                             f"got {ce!r}.")
        if (error := seed_error(self.seed)) is not None:
            raise ValueError(f"seed (--seed): {error}.")
        pe = self.progress_every
        if pe is not None and (not isinstance(pe, int) or isinstance(pe, bool) or pe < 0):
            raise ValueError(f"progress_every must be an int >= 0 (0 turns progress off), got {pe!r}.")

    def callback_every(self, config: OnPolicyConfig) -> int:
        """Updates between progress rows (to the loggers and the bar); 0 means no progress."""
        if self.progress_every is None:
            # About 50 rows per run: a smooth bar, and each row costs ~1 ms of host time.
            return max(1, config.num_updates // 50)
        return self.progress_every


def config_document(config: OnPolicyConfig, options: RunOptions) -> dict[str, Any]:
    """The content of config.json."""
    return {
        "fusedrl_version": __version__,
        "algo": config.algo,
        config.algo: config.to_dict(),  # the section is named by the algorithm: "ppo", "a2c", "reinforce"
        "run": dataclasses.asdict(options),
    }


def check_supported(config: OnPolicyConfig, options: RunOptions) -> None:
    """Raises ValueError for a run that `train_run` cannot do, naming the option to change."""
    if is_host_env_id(config.env_id) and options.num_seeds != 1:
        raise ValueError(
            f"num_seeds (--num-seeds) must be 1 for {config.env_id}, got {options.num_seeds}: a Gymnasium "
            f"env trains through the host bridge, one seed per run (its envs step on the host, so seeds "
            f"cannot be vmapped into one program). Train each seed as its own run (--seed S), or use "
            f"{jax_instead(config.env_id)} to train many at once."
        )
    if is_host_env_id(config.env_id) and options.checkpoint_every:
        raise ValueError(
            f"checkpoint_every (--checkpoint-every) must be 0 for {config.env_id}: a run through the host "
            f"bridge cannot be resumed (its Gymnasium envs live on the host), so it saves only its final "
            f"checkpoint."
        )


def read_config_file(path: str | os.PathLike) -> tuple[dict[str, Any], dict[str, Any], str]:
    """(config fields, run options, algorithm) from a JSON or TOML file.

    The file is either a run's config.json ({"algo": "a2c", "a2c": {...}, "run": {...}}: one
    section named by its algorithm; a file without "algo" is PPO's, {"ppo": {...}, ...}) or a flat
    table of config fields, with an optional `algo` ("ppo" by default).
    """
    path = Path(path)
    if path.is_dir():
        run = path / CONFIG_FILE
        hint = f"; its run's config is {run}" if run.is_file() else ""
        raise IsADirectoryError(f"config file {path} is a folder{hint}.")
    if not path.is_file():
        raise FileNotFoundError(f"config file {path} does not exist.")
    text = path.read_text(encoding="utf-8")
    toml = path.suffix.lower() == ".toml"
    try:
        doc = tomllib.loads(text) if toml else json.loads(text)
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as e:
        raise ValueError(f"config file {path} is not valid {'TOML' if toml else 'JSON'}: {e}") from None
    if not isinstance(doc, dict):
        raise ValueError(f"config file {path} must hold a table/object, got {type(doc).__name__}.")
    algo = doc.get("algo")
    if algo is not None and algo not in CONFIGS:
        raise ValueError(f"config file {path}: algo must be one of {', '.join(map(repr, CONFIGS))}, "
                         f"got {algo!r}.")
    sections = [a for a in CONFIGS if a in doc]
    if len(sections) > 1:
        raise ValueError(f"config file {path} has a section for each of {sections}; a run has one algorithm.")
    if sections:
        section = sections[0]
        if algo not in (None, section):
            raise ValueError(f"config file {path}: algo is {algo!r} but its config section is {section!r}.")
        algo = section
        ppo, run = doc[section], doc.get("run", {})
        unknown = sorted(set(doc) - {section, "run", "fusedrl_version", "algo"})
        if unknown:
            raise ValueError(f"config file {path}: unknown section(s) {unknown}; expected {section!r} and "
                             f"'run'.")
    else:
        section = algo = algo or "ppo"
        ppo, run = {k: v for k, v in doc.items() if k != "algo"}, {}
    env_params = ppo.get("env_params", {}) if isinstance(ppo, dict) else {}
    for name, table in ((section, ppo), ("run", run), ("env_params", env_params)):
        if not isinstance(table, dict):
            raise ValueError(f"config file {path}: {name!r} must be a table/object of names to values, "
                             f"got {table!r} ({type(table).__name__}).")
    valid = {f.name for f in dataclasses.fields(RunOptions)}
    bad = sorted(set(run) - valid)
    if bad:
        raise ValueError(f"config file {path}: unknown run option(s) {bad}; valid: {sorted(valid)}.")
    return dict(ppo), dict(run), algo


# ---------------------------------------------------------------------------- run folders
def prepare_folder(out: str | os.PathLike, *, overwrite: bool) -> tuple[Path, run_lock.RunLock]:
    """Creates the run folder and takes its lock (`fusedrl.run_lock`), then returns (folder, lock).

    An existing non-empty folder is refused unless `overwrite`, and one that is not a run folder
    even then. A folder another process trains or resumes into is refused (`RunFolderLocked`, with
    its pid) before anything in it is touched, with or without `overwrite`. The lock is taken before
    the contents are checked and removed, and its file is kept while the rest is removed, so no
    second process can claim the folder meanwhile."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise RunFolderExists(f"{out} exists and is not a directory.")
    if (pid := run_lock.holder(out)) is not None:  # said first: --overwrite would not help
        raise run_lock.RunFolderLocked(out, pid or None)
    _check_replaceable(out, overwrite)  # before a lock file is left in a folder that is not ours
    out.mkdir(parents=True, exist_ok=True)
    lock = run_lock.acquire(out)
    try:
        entries = _check_replaceable(out, overwrite)  # again, now that no other process can write
        # The config and summary last: a removal cut short leaves a folder still seen as a run's.
        last = (CONFIG_FILE, SUMMARY_FILE)
        for entry in sorted(entries, key=lambda p: p.name in last):
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
    except BaseException:
        lock.release()
        raise
    return out, lock


def _check_replaceable(out: Path, overwrite: bool) -> list[Path]:
    """The entries of the run folder `out` (none if it does not exist) but its lock file; raises
    RunFolderExists if there are any and not `overwrite`, or they are not a run folder's."""
    entries = [p for p in out.iterdir() if p.name != run_lock.LOCK_FILE] if out.is_dir() else []
    if entries and not overwrite:
        raise RunFolderExists(
            f"run folder {out} already exists; pass --overwrite to replace it "
            f"(or choose another --out)."
        )
    if entries and not (out / CONFIG_FILE).exists() and not (out / SUMMARY_FILE).exists():
        raise RunFolderExists(
            f"{out} exists but does not look like a fusedrl run folder (no {CONFIG_FILE}); "
            f"refusing to delete it even with --overwrite."
        )
    return entries


# ------------------------------------------------------------------------------- programs
def num_streams(num_seeds: int) -> int:
    """Host threads that share a run's `num_seeds` seeds, each running a vmap of an equal share.

    On a lone CPU device: the largest count of usable cores that divides `num_seeds` (one program
    per core: see `fusedrl.streams`; `python -m fusedrl.bench runs` measures this program).
    Elsewhere 1: one vmap of every seed.
    """
    cap = resolve_streams(None, tuple(jax.devices()), num_seeds)  # the sweep's default: cores, or 1
    return max(s for s in range(1, cap + 1) if num_seeds % s == 0)


@functools.lru_cache(maxsize=8)
def _program(config: OnPolicyConfig, num_seeds: int, platform: str):
    """(trainer, jitted train of `num_seeds` seeds `train_seeds(keys, hparams)`) for a static setup.
    `platform` (`choices_platform()`, which the trainer's choices are made for) keys the cache only.

    No program of a run has a host callback: JAX's persistent compile cache never stores a program
    that has one, and progress comes from the metrics of the pieces instead (`compiled_run`)."""
    train = make_train(config)

    def train_seeds(keys, hparams):
        return _strong(jax.vmap(lambda key: train.run(train.init(key, hparams), hparams))(keys))

    return train, jax.jit(train_seeds)


@functools.lru_cache(maxsize=8)
def _pieces_program(config: OnPolicyConfig, num_seeds: int, platform: str):
    """`_program` for a share run in pieces of updates (`fusedrl.streams`): (trainer, jitted
    `init(keys, hparams)`, jitted `advance(states, hparams, first_update, num_updates)`, the last
    static)."""
    train = make_train(config)

    def init(keys, hparams):
        return jax.vmap(train.init, in_axes=(0, None))(keys, hparams)

    def advance(states, hparams, first_update, num_updates):
        def one(state):
            return train.run(state, hparams, num_updates, first_update)

        return _strong(jax.vmap(one)(states))

    return train, jax.jit(init), jax.jit(advance, static_argnums=3)


#: About this many pieces per run when a run is trained in pieces (progress, several host threads,
#: checkpoints): the progress bar moves at each piece's end, and each piece costs one launch.
PIECES_PER_RUN = 50


def piece_length(num_updates: int, checkpoint_every: int = 0) -> int:
    """Updates per piece of a run trained in pieces: the largest length of at most `num_updates /
    PIECES_PER_RUN` (and `fusedrl.streams.STREAM_PIECE_UPDATES`) that divides every stretch between
    checkpoints (`checkpoint_segments`), so that one advance program serves the whole run. It
    depends on the run's config and checkpoint interval only, never on where a resumed run starts,
    its progress interval or the host threads: the same run is the same pieces, bit for bit."""
    counts = [n for _, n in checkpoint_segments(num_updates, checkpoint_every)]
    whole = functools.reduce(math.gcd, counts, 0)
    target = max(1, min(num_updates // PIECES_PER_RUN, _streams.STREAM_PIECE_UPDATES))
    return max((d for d in range(1, min(target, whole) + 1) if whole % d == 0), default=1)


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


def _strong(result: TrainResult) -> TrainResult:
    """`result` with the hparams a checkpoint restores (`strong_hparams`): the env params' Python
    numbers come out of training as weakly typed arrays, which `evaluate` would compile a second
    program for when the run is evaluated again from its folder."""
    return result.replace(hparams=strong_hparams(result.hparams))


def checkpoint_segments(num_updates: int, checkpoint_every: int, start: int = 0) -> list[tuple[int, int]]:
    """(first update, count) of the stretches of training from update `start` to `num_updates`,
    cut at every multiple of `checkpoint_every` (0: not cut), where a checkpoint is saved."""
    if not 0 <= start <= num_updates:
        raise ValueError(f"start={start} must lie in [0, num_updates={num_updates}].")
    every = checkpoint_every if checkpoint_every > 0 else num_updates + 1
    bounds = sorted({start, num_updates, *range(start - start % every + every, num_updates, every)})
    return [(a, b - a) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


_COMPILED: dict[tuple, Any] = {}


@on_register
def _forget_programs(env_id: str) -> None:
    """A (re-)registered env id: drop the programs built for the env it may replace."""
    _program.cache_clear()
    _pieces_program.cache_clear()
    _COMPILED.clear()


def compiled_run(config: OnPolicyConfig, num_seeds: int, callback_every: int, streams: int | None = None, *,
                 checkpoint_every: int = 0, start_update: int = 0):
    """(trainer, `run(keys [num_seeds], hparams, states=None, on_checkpoint=None) -> TrainResult`,
    seconds spent compiling now: 0.0 when reused).

    `run` splits the seeds over `streams` host threads (default `num_streams`), each calling the
    same compiled programs on its consecutive share. One share trained from the start without
    checkpoints or progress (`callback_every=0`) is one program; otherwise each share runs in
    pieces of `piece_length` updates, one execution per piece, and all shares stop together at every
    checkpoint (`checkpoint_segments`): `on_checkpoint(result so far)` is called there, with the
    metrics from `start_update` on. `states` (leaves [num_seeds, ...]) continues a run at update
    `start_update` (a restored checkpoint) instead of starting one from `keys`.

    Progress: every `callback_every` updates, the rows of that update reach the running `Monitor`
    (`dispatch.active`) from the host, once the piece that holds it has ended (`report_progress`);
    the first Ctrl-C (`interrupt_guard`) stops the run at the end of a piece. No compiled program
    has a host callback, so every one of them is stored in JAX's persistent compile cache.

    Pieces compile separately from the one-program run, so their results agree with it to float32
    rounding, not bit for bit; the same pieces (a resumed run and the same run uninterrupted, or the
    same run with another progress interval) agree exactly.
    """
    streams = num_streams(num_seeds) if streams is None else int(streams)
    if num_seeds % streams:
        raise ValueError(f"streams={streams} must divide num_seeds={num_seeds}.")
    per = num_seeds // streams
    segments = checkpoint_segments(config.num_updates, checkpoint_every, start_update)
    whole = streams == 1 and len(segments) == 1 and start_update == 0 and not callback_every
    if whole:
        plan = None
    else:  # each segment in pieces of one length (one advance program)
        n = piece_length(config.num_updates, checkpoint_every)
        plan = [[(f, n) for f in range(first, first + count, n)] for first, count in segments]
    platform = choices_platform()  # the trainer's choices differ by platform: so do its programs
    cache_key = (config, per, None if plan is None else tuple(map(tuple, plan)), platform)
    seconds = 0.0
    if cache_key not in _COMPILED:
        keys = jax.ShapeDtypeStruct((per,), jax.random.key(0).dtype)
        t = time.perf_counter()
        if whole:
            train, jitted = _program(config, per, platform)
            compiled = jitted.lower(keys, train.default_hparams()).compile()
        else:
            train, init, advance = _pieces_program(config, per, platform)
            hparams = train.default_hparams()
            pieces = [p for seg in plan for p in seg]
            compiled = compile_in_pieces(init, (keys, hparams), advance, (hparams,), pieces)
        seconds = time.perf_counter() - t
        if len(_COMPILED) >= 8:
            _COMPILED.pop(next(iter(_COMPILED)))
        _COMPILED[cache_key] = (train, compiled)
    train, compiled = _COMPILED[cache_key]

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


# -------------------------------------------------------------------------------- training
@dataclasses.dataclass
class Run:
    """What `train_run` returns."""

    config: OnPolicyConfig
    options: RunOptions
    result: TrainResult | None  # per-seed results, leaves [num_seeds, ...]
    summary: dict[str, Any]
    path: Path | None


def train_run(
    config: OnPolicyConfig,
    out: str | os.PathLike | None = None,
    *,
    options: RunOptions | None = None,
    overwrite: bool = False,
    progress: bool = True,
    loggers: Sequence[Any] = (),
    progress_file=None,
    **option_kwargs,
) -> Run:
    """Trains `options.num_seeds` seeds of `config` in one program, evaluates them greedily and,
    with `out`, writes the run folder.

    Args:
      config: the algorithm's config (e.g. `fusedrl.preset("CartPole-v1")`).
      out: the run folder, or None to keep everything in memory.
      options: seeds, evaluation episodes, progress interval, checkpoint interval; or pass them
        as keywords.
      overwrite: replace an existing run folder (otherwise it is refused before any work).
      progress: show the live progress bar (needs `options.progress_every != 0`).
      loggers: extra loggers (`log(update, rows)`, `close()`) fed the progress rows, or
        factories `f(run_folder) -> logger` called once the folder is ready.
      progress_file: where the bar is drawn (default stderr).

    A "gymnasium:" env id trains through the host bridge (`fusedrl.bridge`): one seed per run
    (`num_seeds=1`), compile time counted in the training time.

    With `checkpoint_every=K`, the folder's checkpoint is replaced every K updates during training
    (all seeds stop together to save it), so an interrupted run can continue with `resume_run`.
    With 0 (the default) there is none during training: only the trained agents' final checkpoint.

    The process holds the folder's lock (`fusedrl.run_lock`) until this returns or raises.

    Raises:
      RunFolderExists: `out` is not empty (without `overwrite`) or not a run folder.
      RunFolderLocked: another process trains or resumes into `out` (its pid is named); nothing in
        the folder was touched.
      KeyboardInterrupt: after Ctrl-C, once the folder holds the config, the metrics logged so
        far, the latest checkpoint if any, and a summary marked "interrupted".
      Exception: any other error, re-raised once summary.json says status "failed" with the
        error's type and message.
    """
    if options is not None and option_kwargs:
        raise TypeError(f"pass either options= or option keywords, not both ({sorted(option_kwargs)}).")
    options = options or RunOptions(**option_kwargs)
    make(config.env_id, **config.env_params)  # unknown env: fail before any work
    check_supported(config, options)
    if out is None:
        return _train(config, options, None, progress=progress, loggers=loggers, progress_file=progress_file)
    path, lock = prepare_folder(out, overwrite=overwrite)
    with lock:  # held until the run is saved, evaluated and summarised (or has failed)
        write_json(path / CONFIG_FILE, config_document(config, options))
        return _train(config, options, path, progress=progress, loggers=loggers, progress_file=progress_file)


class ResumeError(ValueError):
    """A run folder that cannot be resumed; the message says why and what to do instead."""


@dataclasses.dataclass
class _Resumed:
    """Where a resumed run starts: the restored states [num_seeds, ...] at update `update`, and
    the metrics [num_seeds, update] of the updates before it."""

    state: Any
    hparams: Any
    metrics: dict[str, np.ndarray]
    update: int
    streams: int | None = None  # host threads of the run before (summary.json), if known


def resume_run(
    run_dir: str | os.PathLike,
    *,
    progress: bool = True,
    loggers: Sequence[Any] = (),
    progress_file=None,
    trust_imports: bool = False,
) -> Run:
    """Continues an unfinished run (interrupted, or failed in a logger) from the latest checkpoint in
    its folder, to the end of the run its config.json describes, then saves and evaluates it as
    `train_run` does. The run's checkpoints come every `checkpoint_every` updates
    (`fusedrl train --checkpoint-every K`); it continues exactly as the same run uninterrupted
    would have, bit for bit, on a machine with as many cores (`num_streams` splits the seeds over
    them, which decides the programs).

    `trust_imports`: import the modules config.json names (its `imports`, its network's module); see
    `load_run_config`. The process holds the folder's lock (`fusedrl.run_lock`) until this returns.

    Raises:
      FileNotFoundError, ValueError: `run_dir` has no valid config.json.
      UntrustedImportsError: config.json names modules to import, without `trust_imports` (checked
        first: nothing is imported, and nothing written).
      RunFolderLocked: another process trains or resumes the run (its pid is named).
      ResumeError: the run has finished, or has no checkpoint (it stopped before the first), or
        the checkpoint is damaged, does not hold the metrics of the updates before it, or does not
        match config.json (the message says what to do).
    """
    path = Path(run_dir)
    _read_run_config(path, trust_imports)  # before the folder's lock file is made, or anything imported
    with run_lock.acquire(path):
        return _resume(path, progress=progress, loggers=loggers, progress_file=progress_file,
                       trust_imports=trust_imports)


def _resume(path: Path, *, progress: bool, loggers: Sequence[Any], progress_file, trust_imports: bool) -> Run:
    """`resume_run`'s work, with the folder's lock held."""
    config, options = load_run_config(path, trust_imports=trust_imports)
    check_supported(config, options)
    summary_file = path / SUMMARY_FILE
    try:
        previous = json.loads(summary_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):  # none yet, or unreadable: it is written again at the end
        previous = {}
    if isinstance(previous, dict) and previous.get("status") == "finished":
        raise ResumeError(f"{path} has finished (summary.json says so): there is nothing to resume.")
    restart = f"start it again with `fusedrl train --config {path / CONFIG_FILE} --out {path} --overwrite`"
    ckpt.recover(path / CHECKPOINT_DIR)  # what a save killed midway left (and its checkpoint before)
    if not (path / CHECKPOINT_DIR).exists():
        every = options.checkpoint_every
        when = (f"before its first checkpoint (checkpoint_every={every} updates)" if every else
                "without checkpoints during training (checkpoint_every=0)")
        raise ResumeError(f"{path} has no checkpoint to resume from: the run stopped {when}; {restart}.")
    try:
        _, state, hparams, meta = ckpt.restore(path / CHECKPOINT_DIR, config)
        metrics = ckpt.restore_metrics(path / CHECKPOINT_DIR)
    except ckpt.CheckpointMismatch as e:
        raise ResumeError(
            f"cannot resume {path}: {e}\nIf {CONFIG_FILE} was edited since the run started, put it back as "
            f"the checkpoint has it, or train the edited config as a new run (`fusedrl train --config "
            f"{path / CONFIG_FILE} --out NEW_DIR`); otherwise {restart}."
        ) from None
    except ckpt.CheckpointError as e:  # damaged, or of another version: config.json has no part in it
        raise ResumeError(f"cannot resume {path}: {e}\nTo train it from the start, {restart}.") from None
    for name, saved, expected in (("num_seeds", meta.get("num_seeds"), options.num_seeds),
                                  ("seed", meta.get("extra", {}).get("seed"), options.seed)):
        if saved != expected:
            raise ResumeError(f"{path / CHECKPOINT_DIR} holds a run of {name}={saved}, but {CONFIG_FILE} "
                              f"says {name}={expected}: put it back as {saved}, or {restart}.")
    update = np.asarray(state.update)
    start = int(update[0])
    shape = (options.num_seeds, start)
    if metrics is None or np.any(update != start) or any(np.shape(v) != shape for v in metrics.values()):
        raise ResumeError(f"{path / CHECKPOINT_DIR} does not hold the metrics of the {start} updates before "
                          f"it (it was written by an older fusedrl or is damaged); {restart}.")
    # The file ends with the checkpoint: rows the interrupted run logged after it are trained again.
    write_atomic(path / METRICS_FILE, format_rows(metrics_to_rows(metrics), header=True))
    streams = previous.get("streams") if isinstance(previous, dict) else None
    return _train(config, options, path, progress=progress, loggers=loggers, progress_file=progress_file,
                  resumed=_Resumed(state, hparams, metrics, start, streams))


def _train(config: OnPolicyConfig, options: RunOptions, path: Path | None, *, progress: bool,
           loggers: Sequence[Any], progress_file, resumed: _Resumed | None = None) -> Run:
    """`train_run`'s work once the folder holds config.json: train (from `resumed` if given),
    save, evaluate, write the summary."""
    bridge = is_host_env_id(config.env_id)
    start = 0 if resumed is None else resumed.update
    every = options.callback_every(config)
    summary: dict[str, Any] = {"env_id": config.env_id, "num_seeds": options.num_seeds,
                               "seed": options.seed, "status": "running"}
    if resumed is not None:
        summary.update(resumed_at_update=start, checkpoint_update=start)
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
        if path is not None:
            status = "interrupted" if isinstance(e, KeyboardInterrupt) else "failed"
            write_json(path / SUMMARY_FILE, {**summary, "status": status, "failed_while": "starting loggers",
                                             "updates_logged": 0, "error": _error(e)})
        raise
    monitor = Monitor(options.num_seeds, config.batch_size, sinks)
    monitor.last_update = start
    keys = jax.random.split(jax.random.key(options.seed), options.num_seeds)

    def save_checkpoint(result: TrainResult) -> None:
        """The folder's checkpoint of `result`, whose metrics cover every update so far."""
        update = int(result.metrics["env_steps"].shape[1])
        ckpt.save(path / CHECKPOINT_DIR, config, result.state, result.hparams, num_seeds=options.num_seeds,
                  extra={"seed": options.seed, "update": update}, metrics=result.metrics)
        summary["checkpoint_update"] = update

    def checkpoint_during_training(result: TrainResult) -> None:  # metrics from the start of this process
        if resumed is not None:
            result = result.replace(metrics=join_updates([resumed.metrics, result.metrics]))
        save_checkpoint(result)
        write_json(path / SUMMARY_FILE, summary)
    try:
        if start == config.num_updates:  # resumed after its last update: nothing left to train
            compile_s, t = 0.0, time.perf_counter()
            result = TrainResult(state=resumed.state, metrics=resumed.metrics, hparams=resumed.hparams)
        elif bridge:
            summary["mode"] = "bridge"
            compile_s = None  # the bridge compiles during its first update: part of train_seconds
            if bar is not None:
                bar.restart_clock()
            t = time.perf_counter()
            result = _train_bridge(config, keys[0], every, monitor)
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
                                                        start_update=start)
            hparams = train.default_hparams()
            if bar is not None:
                bar.restart_clock()
            t = time.perf_counter()
            with dispatch.active(monitor), _stop_guard(monitor, every, config.num_updates):
                try:
                    result = jax.block_until_ready(run_seeds(
                        keys, hparams, states=None if resumed is None else resumed.state,
                        on_checkpoint=None if path is None else checkpoint_during_training,
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
        if path is not None:
            write_json(path / SUMMARY_FILE, summary)
        raise
    except Exception as e:
        summary.update(status="failed", failed_while="training", updates_logged=monitor.last_update,
                       error=_error(e))
        if path is not None:
            write_json(path / SUMMARY_FILE, summary)
        raise
    finally:
        _close(sinks)

    env_steps = (config.num_updates - start) * config.batch_size * options.num_seeds  # trained here
    summary.update(
        num_updates=config.num_updates,
        env_steps_per_seed=config.env_steps,
        compile_seconds=None if compile_s is None else round(compile_s, 3),
        train_seconds=round(run_s, 3),
        sps=round(env_steps / run_s, 1) if env_steps else None,
        progress_every=every,
    )
    try:
        # The most valuable results first: a Ctrl-C from here on still leaves the metrics and the
        # checkpoint of the finished training.
        if path is not None:
            summary["status"] = "saving"
            rows = metrics_to_rows(jax.device_get(result.metrics))
            write_atomic(path / METRICS_FILE, format_rows(rows, header=True))
            save_checkpoint(result)
        summary["status"] = "evaluating"
        t = time.perf_counter()
        returns = evaluate_seeds(config, result, eval_key(options), options.eval_episodes,
                                 progress_file=progress_file, max_steps=EVAL_MAX_STEPS)
        per_seed = returns.mean(axis=1)
        diverged = diverged_seeds(result)
        last = {k: np.asarray(result.metrics[k])[:, -1] for k in ("episode_return", "episode_length")}
        last_train = [round(float(x), 3) if e else None  # None: no episode has ended
                      for x, e in zip(last["episode_return"], has_episode(last), strict=True)]
        summary.update(
            eval_episodes=options.eval_episodes,
            eval_seed=eval_seed(options),
            eval_return_per_seed=[round(float(x), 3) for x in per_seed],
            eval_return_mean=round(float(per_seed.mean()), 3),
            eval_return_std=round(float(per_seed.std()), 3),
            eval_seconds=round(time.perf_counter() - t, 3),
            eval_unfinished_episodes=unfinished_episodes(returns, diverged),
            eval_max_steps=None if is_host_env_id(config.env_id) else EVAL_MAX_STEPS,  # bridge: its own
            diverged_seeds=diverged,
            final_train_return_per_seed=last_train,
        )
        if path is not None:
            title = f"{config.env_id}, {options.num_seeds} seed(s)"
            plot_learning_curve(result.metrics, path / CURVE_FILE, title=title)
        summary["status"] = "finished"
    except KeyboardInterrupt:
        summary.update(status=f"interrupted while {summary['status']}", updates_logged=config.num_updates)
        raise
    except Exception as e:
        summary.update(status="failed", failed_while=summary["status"], updates_logged=config.num_updates,
                       error=_error(e))
        raise
    finally:
        if path is not None:
            write_json(path / SUMMARY_FILE, summary)
    return Run(config, options, result, summary, path)


def _train_bridge(config: OnPolicyConfig, key: jax.Array, every: int, monitor: Monitor) -> TrainResult:
    """One seed through the host bridge (`fusedrl.bridge`), as a result with a seed axis of 1.

    The host loop calls `monitor` itself every `every` updates (0: never). A Gymnasium env steps in
    Python, so neither vmap (several seeds) nor one compiled program (compile time apart) applies.
    """
    train = make_host_train(config, **({"callback": monitor, "callback_every": every} if every else {}))
    with _stop_guard(monitor, every, config.num_updates):
        result = jax.block_until_ready(train(key))
    train.trainer.check(result)
    return jax.tree.map(lambda x: x[None], result)


def _stop_guard(monitor: Monitor, every: int, num_updates: int):
    """`interrupt_guard` (the first Ctrl-C stops the run at its next progress row, or the end of a
    piece) if rows come at all (`every` updates apart, from update `every`); without them Ctrl-C
    interrupts as usual, rather than being held for a row that never comes."""
    return interrupt_guard(monitor) if 0 < every <= num_updates else contextlib.nullcontext()


def eval_seed(options: RunOptions) -> int:
    """The seed of the greedy evaluation in summary.json (`evaluate_run`'s default): seed + 1."""
    return options.seed + 1


def eval_key(options: RunOptions) -> jax.Array:
    return jax.random.key(eval_seed(options))


def diverged_seeds(result: TrainResult) -> list[int]:
    """The seeds (indices on the leading axis) whose parameters are not all finite."""
    ok = None
    for x in jax.tree.leaves(jax.device_get(result.params)):
        x = np.asarray(x)
        finite = np.isfinite(x.reshape(x.shape[0], -1)).all(axis=1)
        ok = finite if ok is None else ok & finite
    return [int(i) for i in np.flatnonzero(~ok)]


def unfinished_episodes(returns: np.ndarray, diverged: Sequence[int]) -> int:
    """Evaluation episodes [num_seeds, num_episodes] that reported NaN (had not ended after the
    evaluation's max_steps), not counting the diverged seeds', which are NaN without running."""
    keep = np.ones(returns.shape[0], bool)
    keep[list(diverged)] = False
    return int(np.isnan(returns[keep]).sum())


def evaluate_seeds(config: OnPolicyConfig, result: TrainResult, key: jax.Array, num_episodes: int, *,
                   progress_file=None, greedy: bool = True, max_steps: int | None = None) -> np.ndarray:
    """Greedy (or, with greedy=False, sampled) returns [num_seeds, num_episodes] of a result whose
    leaves have a seed axis; each seed gets its own key split from `key` (as `fusedrl.evaluate`
    does), also on the host bridge. `progress_file`: where a Ctrl-C held while evaluating is noted
    (default stderr). `max_steps`: see `fusedrl.evaluate` (the host bridge bounds its episodes by
    the env's time limit, or 100,000 steps, instead)."""
    if not is_host_env_id(config.env_id):
        with hold_interrupt("evaluating", progress_file):  # it compiles first: see hold_interrupt
            returns = np.asarray(evaluate(config, result, key, num_episodes, greedy=greedy,
                                          max_steps=max_steps))
        return returns[None] if returns.ndim == 1 else returns

    num_seeds = jax.tree.leaves(result.params)[0].shape[0]
    keys = jax.random.split(key, num_seeds)
    returns = []
    for i in range(num_seeds):
        one = TrainResult(state=jax.tree.map(lambda x, i=i: x[i], result.state), metrics={},
                          hparams=result.hparams)
        returns.append(np.asarray(evaluate_on_host(config, one, keys[i], num_episodes, greedy=greedy)))
    return np.stack(returns)


def _error(e: BaseException) -> dict[str, str]:
    return {"type": type(e).__name__, "message": str(e)}


def _status(file, enabled: bool, text: str) -> None:
    if enabled:
        print(text, file=file or sys.stderr, flush=True)


def _close(sinks) -> None:
    for s in sinks:
        s.close()


# ------------------------------------------------------------------------------ reading runs
def _read_run_config(run_dir: Path, trust_imports: bool) -> tuple[dict[str, Any], RunOptions, str]:
    """(config fields, RunOptions, algorithm) of a run folder's config.json, read without importing
    anything; raises UntrustedImportsError if it names modules to import and not `trust_imports`."""
    if not (run_dir / CONFIG_FILE).is_file():
        raise FileNotFoundError(f"{run_dir} is not a fusedrl run folder: {CONFIG_FILE} is missing.")
    ppo, run, algo = read_config_file(run_dir / CONFIG_FILE)
    try:
        options = RunOptions(**run)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{run_dir / CONFIG_FILE} is invalid: {e} Fix that field in the file.") from None
    check_trusted(str(run_dir / CONFIG_FILE), named_modules(ppo, options.imports), trust=trust_imports)
    return ppo, options, algo


def load_run_config(run_dir: str | os.PathLike, *,
                    trust_imports: bool = False) -> tuple[OnPolicyConfig, RunOptions]:
    """The config (of the run's algorithm) and RunOptions in a run folder's config.json, after
    importing the modules it names: its `imports` (those that register the run's env: `fusedrl
    train --import` records them) and the module of its own network ("module:function").

    Importing a module runs its code, so a config.json that names any is read only with
    `trust_imports=True` (`--trust-imports` on the command line); otherwise UntrustedImportsError (a
    ValueError) names them, and nothing is imported. The current directory is on the path while
    they are imported, and only then.
    """
    run_dir = Path(run_dir)
    ppo, options, algo = _read_run_config(run_dir, trust_imports)
    # A run's own network ("module:function") is imported as its imports are (the current directory
    # on the path): `train_run` from Python does not record its module in `imports`.
    own = [m for m, why in named_modules(ppo, ()) if why.startswith("network")]
    try:  # the modules that register the run's env, as `fusedrl train --import` recorded them
        import_modules(options.imports, source=f"{run_dir / CONFIG_FILE} imports")
        import_modules(own, source=f"{run_dir / CONFIG_FILE} network")
    except UsageError as e:
        raise ValueError(str(e)) from None
    try:
        return CONFIGS[algo].from_dict(ppo), options
    except (TypeError, ValueError) as e:
        raise ValueError(f"{run_dir / CONFIG_FILE} is invalid: {e} Fix that field in the file.") from None


def run_status(run_dir: str | os.PathLike) -> str | None:
    """The status of the run in `run_dir`: "running" while a process holds the folder's lock
    (`fusedrl.run_lock`: it trains, resumes or saves the run), else summary.json's ("finished",
    "failed", "interrupted", "interrupted while saving", ...), except that a run whose summary.json
    says "running", or that has none, reads "interrupted": its writer died without a word (kill -9, a
    lost machine). None: `run_dir` has no config.json."""
    run_dir = Path(run_dir)
    if not (run_dir / CONFIG_FILE).is_file():
        return None
    if run_lock.holder(run_dir) is not None:
        return "running"
    try:
        summary = json.loads((run_dir / SUMMARY_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        summary = None
    status = summary.get("status") if isinstance(summary, dict) else None
    return "interrupted" if status in (None, "running") or not isinstance(status, str) else status


def evaluate_run(run_dir: str | os.PathLike, *, num_episodes: int | None = None,
                 seed: int | None = None, greedy: bool = True,
                 max_steps: int | None = EVAL_MAX_STEPS, trust_imports: bool = False) -> dict[str, Any]:
    """Greedy (or, with greedy=False, sampled) returns of every seed in a saved run: {"per_seed":
    [...], "mean": m, "std": s, "episodes": n, "update": the checkpoint's update, "num_updates":
    the run's, "unfinished": episodes that had not ended after `max_steps` steps (NaN returns),
    "diverged_seeds": seeds whose parameters are not finite (NaN returns), "status": `run_status`,
    "holder": the pid of the process that trains it, if one does}. An unfinished run's checkpoint
    (`checkpoint_every`) is its latest: "update" < "num_updates". A run still training is evaluated
    as it is (reading takes no lock).

    `trust_imports`: import the modules config.json names; see `load_run_config`.

    The defaults reproduce the run's summary.json: greedy, its eval_episodes, the key it used
    (`jax.random.key(seed)` with the run's seed + 1) and its bound on episodes (EVAL_MAX_STEPS).
    """
    if isinstance(seed, np.integer):  # e.g. from np.arange: as jax.random.key takes it
        seed = int(seed)
    if seed is not None and (error := seed_error(seed, MAX_KEY_SEED)) is not None:
        raise ValueError(f"seed: {error}.")
    run_dir = Path(run_dir)
    config, options = load_run_config(run_dir, trust_imports=trust_imports)
    holder, status = run_lock.holder(run_dir), run_status(run_dir)
    num_episodes = options.eval_episodes if num_episodes is None else num_episodes
    key = eval_key(options) if seed is None else jax.random.key(seed)
    try:
        saved_config, state, hparams, meta = ckpt.restore(run_dir / CHECKPOINT_DIR, config)
    except (ckpt.CheckpointError, FileNotFoundError) as e:
        if holder is None:
            raise
        raise type(e)(f"{e}\n(process {holder or '?'} is training this run: its checkpoint may have been "
                      f"replaced while it was read; try again.)") from None
    result = TrainResult(state=state, metrics={}, hparams=hparams)
    returns = evaluate_seeds(config, result, key, num_episodes, greedy=greedy, max_steps=max_steps)
    per_seed = returns.mean(axis=1)
    diverged = diverged_seeds(result)
    return {"per_seed": per_seed.tolist(), "mean": float(per_seed.mean()), "std": float(per_seed.std()),
            "episodes": num_episodes, "update": int(np.ravel(state.update)[0]),
            "num_updates": config.num_updates, "unfinished": unfinished_episodes(returns, diverged),
            "diverged_seeds": diverged, "status": status, "holder": holder or None}


def evaluation_warnings(diverged: Sequence[int] | None, unfinished: int | None,
                        max_steps: int | None) -> list[str]:
    """Lines that say why an evaluation's returns are NaN: diverged seeds, unfinished episodes."""
    lines = []
    if diverged:
        lines.append(f"  WARNING: seed(s) {', '.join(map(str, diverged))} diverged: their parameters are not "
                     f"finite, so they were not evaluated (NaN). Lower lr or max_grad_norm, or check the "
                     f"env's rewards and observations.")
    if unfinished:
        lines.append(f"  WARNING: {unfinished} evaluation episode(s) had not ended after {max_steps:,} steps "
                     f"(NaN): does the env have a working time limit (max_steps_in_episode)?")
    return lines


def summary_table(summary: Mapping[str, Any]) -> str:
    """The plain-text table the CLI prints after training."""
    lines = [f"{summary['env_id']}: {summary['num_seeds']} seed(s) x "
             f"{summary['env_steps_per_seed']:,} env steps ({summary['num_updates']} updates)"]
    lines.append(f"  {'seed':>4}  {'greedy return':>13}  {'last train return':>17}")
    for i, (ev, tr) in enumerate(zip(summary["eval_return_per_seed"], summary["final_train_return_per_seed"],
                                     strict=True)):
        train_text = "no episode ended" if tr is None else f"{tr:.1f}"
        lines.append(f"  {i:>4}  {ev:>13.1f}  {train_text:>17}")
    lines.append(f"  {'mean':>4}  {summary['eval_return_mean']:>8.1f} +- {summary['eval_return_std']:<.1f}"
                 f"   ({summary['eval_episodes']} greedy episodes per seed)")
    lines += evaluation_warnings(summary.get("diverged_seeds"), summary.get("eval_unfinished_episodes"),
                                 summary.get("eval_max_steps"))
    compile_s = summary["compile_seconds"]
    compile_text = "(compile included in train)" if compile_s is None else f"compile {compile_s:.1f} s"
    resumed = summary.get("resumed_at_update")
    if summary["sps"] is None:
        lines.append(f"  resumed after update {resumed}, the last: nothing left to train")
    else:
        since = "" if resumed is None else f", updates {resumed + 1}-{summary['num_updates']}"
        lines.append(f"  {compile_text}   train {summary['train_seconds']:.1f} s   "
                     f"{summary['sps']:,.0f} env steps/s (all seeds{since})")
    return "\n".join(lines)
