"""Training runs with a folder of results: the layer the CLI and notebooks share.

    run = train_run(preset("CartPole-v1"), out="runs/cartpole", num_seeds=4)
    run.summary["eval_return_mean"], run.result.metrics["episode_return"]   # [4, num_updates]

A run is four steps, each in its own module, each handing the next what it needs:

    fusedrl.run_folder    the folder and its records: config.json, metrics.csv, checkpoint/,
                          summary.json (`prepare_folder`, `load_run_config`, `resume_point`)
    fusedrl.run_programs  the run's compiled programs and their one cache (`compiled_programs`)
    fusedrl.run_driver    driving them: pieces over host threads, progress, checkpoints, the host
                          bridge (`train_seeds` -> `Trained`)
    fusedrl.run_report    evaluation and the report: greedy returns, the learning curve, the
                          summary (`report`, `evaluate_run`, `summary_table`)

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
only; metrics.csv grows by whole rows. The names of the four modules that users and tests import
from here stay importable from here.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fusedrl import run_lock
from fusedrl.envs import make
from fusedrl.files import write_json
from fusedrl.run_driver import compiled_run, progress_updates, report_progress, train_seeds
from fusedrl.run_folder import (
    CHECKPOINT_DIR,
    CONFIG_FILE,
    CURVE_FILE,
    METRICS_FILE,
    SUMMARY_FILE,
    ResumeError,
    RunFolderExists,
    RunOptions,
    check_supported,
    config_document,
    create_folder,
    load_run_config,
    prepare_folder,
    read_config_file,
    read_run_config,
    resume_point,
    run_status,
    save_checkpoint,
    write_summary,
)
from fusedrl.run_programs import PIECES_PER_RUN, checkpoint_segments, num_streams, piece_length
from fusedrl.run_report import (
    EVAL_MAX_STEPS,
    diverged_seeds,
    eval_key,
    eval_seed,
    evaluate_run,
    evaluate_seeds,
    evaluation_warnings,
    report,
    summary_table,
    unfinished_episodes,
)
from fusedrl.train import TrainResult
from fusedrl.train.config import OnPolicyConfig


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
    env: tuple[Any, Any] | None = None,
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
      env: the (env, env_params) that `fusedrl.make(config.env_id, **config.env_params)` gave, if
        the caller has built it (the command line has): the run builds its env once.

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
    env = env or make(config.env_id, **config.env_params)  # unknown env: fail before any work
    check_supported(config, options)
    if out is None:
        return _run(config, options, None, env, progress=progress, loggers=loggers,
                    progress_file=progress_file)
    path, lock = create_folder(out, config, options, overwrite=overwrite)
    with lock:  # held until the run is saved, evaluated and summarised (or has failed)
        return _run(config, options, path, env, progress=progress, loggers=loggers,
                    progress_file=progress_file)



def resume_run(
    run_dir: str | os.PathLike,
    *,
    progress: bool = True,
    loggers: Sequence[Any] = (),
    progress_file=None,
    trust_imports: bool = False,
    env: tuple[Any, Any] | None = None,
) -> Run:
    """Continues an unfinished run (interrupted, or failed in a logger) from the latest checkpoint in
    its folder, to the end of the run its config.json describes, then saves and evaluates it as
    `train_run` does. The run's checkpoints come every `checkpoint_every` updates
    (`fusedrl train --checkpoint-every K`); it continues exactly as the same run uninterrupted
    would have, bit for bit, on a machine with as many cores (`num_streams` splits the seeds over
    them, which decides the programs).

    `trust_imports`: import the modules config.json names (its `imports`, its network's module); see
    `load_run_config`. `env`: the (env, env_params) of the run's config, if the caller has built it
    (the command line has). The process holds the folder's lock (`fusedrl.run_lock`) until this returns.

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
    read_run_config(path, trust_imports)  # before the folder's lock file is made, or anything imported
    with run_lock.acquire(path):
        config, options = load_run_config(path, trust_imports=trust_imports)
        check_supported(config, options)
        # Built here, before the checkpoint's templates need it, so that they and the run share one env.
        env = env or make(config.env_id, **config.env_params)
        resumed = resume_point(path, config, options, env)
        return _run(config, options, path, env, progress=progress, loggers=loggers,
                    progress_file=progress_file, resumed=resumed)


def _run(config: OnPolicyConfig, options: RunOptions, path: Path | None, env, *, progress: bool,
         loggers: Sequence[Any], progress_file, resumed=None) -> Run:
    """The steps of a run once its folder (if any) holds config.json: train every seed (from
    `resumed` if given), then save, evaluate and summarise."""
    summary: dict[str, Any] = {"env_id": config.env_id, "num_seeds": options.num_seeds,
                               "seed": options.seed, "status": "running"}
    if resumed is not None:
        summary.update(resumed_at_update=resumed.update, checkpoint_update=resumed.update)

    def checkpoint(result: TrainResult) -> None:  # during training: the checkpoint, and the summary naming it
        save_checkpoint(path, config, options, result, summary)
        write_summary(path, summary)
    try:
        trained = train_seeds(config, options, env, summary, path=path, progress=progress, loggers=loggers,
                              progress_file=progress_file, resumed=resumed,
                              on_checkpoint=None if path is None else checkpoint)
        report(config, options, path, trained, summary, progress_file=progress_file)
    finally:  # finished, or saying where it stopped
        write_summary(path, summary)
    return Run(config, options, trained.result, summary, path)


__all__ = [
    "CHECKPOINT_DIR",
    "CONFIG_FILE",
    "CURVE_FILE",
    "EVAL_MAX_STEPS",
    "METRICS_FILE",
    "PIECES_PER_RUN",
    "SUMMARY_FILE",
    "ResumeError",
    "Run",
    "RunFolderExists",
    "RunOptions",
    "check_supported",
    "checkpoint_segments",
    "compiled_run",
    "config_document",
    "diverged_seeds",
    "eval_key",
    "eval_seed",
    "evaluate_run",
    "evaluate_seeds",
    "evaluation_warnings",
    "load_run_config",
    "num_streams",
    "piece_length",
    "prepare_folder",
    "progress_updates",
    "read_config_file",
    "report_progress",
    "resume_run",
    "run_status",
    "summary_table",
    "train_run",
    "unfinished_episodes",
    "write_json",
]
