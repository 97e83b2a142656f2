"""A run folder and its records: config.json, metrics.csv, the checkpoint, summary.json.

    config.json          the algorithm ("algo"), its resolved config and the run options
                         (`fusedrl train --config` reads it)
    metrics.csv          one row per update and seed (streamed during training, completed at the end)
    learning_curve.png   mean episode return with the per-seed band
    checkpoint/          the latest RunnerState of every seed (see fusedrl.checkpoint): the final
                         one, and during training one every `checkpoint_every` updates
    summary.json         greedy evaluation per seed, timings, status

This module writes and reads those files and nothing else: what is trained (`fusedrl.run_programs`,
`fusedrl.run_driver`) and what is reported (`fusedrl.run_report`) come in through it. Every file is
written to a temporary name and renamed, so a crash or Ctrl-C leaves complete files only.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tomllib
from pathlib import Path
from typing import Any

import numpy as np

from fusedrl import checkpoint as ckpt
from fusedrl import run_lock
from fusedrl._argtypes import UsageError, import_modules, module_name_error, seed_error
from fusedrl.envs.host import is_host_env_id
from fusedrl.envs.registry import jax_instead
from fusedrl.files import write_atomic, write_json
from fusedrl.loggers import format_rows, metrics_to_rows
from fusedrl.train import TrainResult
from fusedrl.train.config import CONFIGS, OnPolicyConfig
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


def read_run_config(run_dir: Path, trust_imports: bool) -> tuple[dict[str, Any], RunOptions, str]:
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
    ppo, options, algo = read_run_config(run_dir, trust_imports)
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


# ------------------------------------------------------------------------------ the records
def write_summary(path: Path | None, summary: dict[str, Any]) -> None:
    """summary.json as it stands (nothing for a run kept in memory: `path` None)."""
    if path is not None:
        write_json(path / SUMMARY_FILE, summary)


def error_record(e: BaseException) -> dict[str, str]:
    """An error as summary.json records it."""
    return {"type": type(e).__name__, "message": str(e)}


def write_metrics(path: Path, metrics: dict[str, Any]) -> None:
    """metrics.csv, whole, from per-update metrics [num_seeds, updates] (on the host)."""
    write_atomic(path / METRICS_FILE, format_rows(metrics_to_rows(metrics), header=True))


def save_checkpoint(path: Path, config: OnPolicyConfig, options: RunOptions, result: TrainResult,
                    summary: dict[str, Any]) -> None:
    """The folder's checkpoint of `result`, whose metrics cover every update so far; summary's
    "checkpoint_update" says which update it holds."""
    update = int(result.metrics["env_steps"].shape[1])
    ckpt.save(path / CHECKPOINT_DIR, config, result.state, result.hparams, num_seeds=options.num_seeds,
              extra={"seed": options.seed, "update": update}, metrics=result.metrics)
    summary["checkpoint_update"] = update


def save_results(path: Path, config: OnPolicyConfig, options: RunOptions, metrics: dict[str, Any],
                 result: TrainResult, summary: dict[str, Any]) -> None:
    """A trained run's metrics.csv (from `metrics`: `result`'s, on the host) and final checkpoint."""
    write_metrics(path, metrics)
    save_checkpoint(path, config, options, result, summary)


def create_folder(out: str | os.PathLike, config: OnPolicyConfig, options: RunOptions, *,
                  overwrite: bool) -> tuple[Path, run_lock.RunLock]:
    """The run folder of a new run (`prepare_folder`), locked and holding its config.json."""
    path, lock = prepare_folder(out, overwrite=overwrite)
    try:
        write_json(path / CONFIG_FILE, config_document(config, options))
    except BaseException:
        lock.release()
        raise
    return path, lock


class ResumeError(ValueError):
    """A run folder that cannot be resumed; the message says why and what to do instead."""


@dataclasses.dataclass
class Resumed:
    """Where a resumed run starts: the restored states [num_seeds, ...] at update `update`, and
    the metrics [num_seeds, update] of the updates before it."""

    state: Any
    hparams: Any
    metrics: dict[str, np.ndarray]
    update: int
    streams: int | None = None  # host threads of the run before (summary.json), if known


def resume_point(path: Path, config: OnPolicyConfig, options: RunOptions,
                 env: tuple[Any, Any] | None = None) -> Resumed:
    """Where the unfinished run in `path` (its config.json read as `config`, `options`) continues:
    its latest checkpoint, checked against config.json; metrics.csv is cut back to it (the rows
    the interrupted run logged after the checkpoint are trained again). Raises ResumeError, saying
    what to do, for a run that has finished, has no checkpoint, or whose checkpoint is damaged or
    does not match. `env`: the run's (env, env_params), if built already (for the checkpoint's
    templates)."""
    try:
        previous = json.loads((path / SUMMARY_FILE).read_text(encoding="utf-8"))
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
        _, state, hparams, meta = ckpt.restore(path / CHECKPOINT_DIR, config, env=env)
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
    write_metrics(path, metrics)
    streams = previous.get("streams") if isinstance(previous, dict) else None
    return Resumed(state, hparams, metrics, start, streams)
