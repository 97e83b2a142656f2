"""Save and restore a whole run state (PPO, A2C or REINFORCE) with orbax-checkpoint, for exact resume.

A checkpoint is a directory:

    checkpoint/
      meta.json   what was saved: the algorithm ("algo"; a checkpoint without it is PPO's) and its
                  config, the number of seeds, every leaf's path, shape and dtype, and which leaves
                  are PRNG keys (saved as their uint32 key data)
      arrays/     the leaves, written by orbax (`StandardCheckpointer`)
      metrics.npz the per-update metrics up to the saved update, if given (for resumed runs)
      checksums.json  the SHA-256 of every other file, written last: `restore` and
                  `restore_metrics` refuse a file that changed or went missing since (a damaged
                  disk or copy), naming it (`CheckpointDamaged`). A checkpoint written before
                  checksums (none) still loads, with an `UnverifiedCheckpointWarning`.

It holds the `RunnerState` (params, optimiser state, env states with their reset pool and keys,
observation/reward normaliser statistics, the update counter) and the `Hyperparams` it trained
with, so `train.run(state, hparams, n)` continues the run bit for bit. The directory is written
next to its final place (`.checkpoint.tmp-PID-HOST-*`) and renamed into it, so a failed save leaves
no partial checkpoint; a Ctrl-C during a save is held until the save ends
(`fusedrl.progress.hold_interrupt`). A writer killed mid-save (kill -9, a power cut of the process)
leaves its temporary folder, or the previous checkpoint moved aside (`.checkpoint.old-PID-HOST`):
`recover` removes those of writers that no longer run, and puts the previous checkpoint back if the
new one never took its place.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import traceback
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from fusedrl._json import dumps as strict_json
from fusedrl._warnings import warn_user
from fusedrl.files import remove_stale_temporaries, stale, writer_tag
from fusedrl.learners import make_train
from fusedrl.progress import hold_interrupt
from fusedrl.train.config import CONFIGS, OnPolicyConfig, number_dtype
from fusedrl.train.state import RunnerState
from fusedrl.version import __version__

FORMAT = "fusedrl-checkpoint-1"
#: The algorithm of a checkpoint whose meta.json names none (those were all PPO runs).
DEFAULT_ALGO = "ppo"
METRICS_FILE = "metrics.npz"
CHECKSUMS_FILE = "checksums.json"
CHECKSUMS_FORMAT = "fusedrl-checksums-1"
#: What to do with a checkpoint whose files changed after they were written.
DAMAGED_ADVICE = ("The checkpoint is damaged: resume from an earlier copy of the run folder (a backup), "
                  "or train the run again.")


class CheckpointError(ValueError):
    """A checkpoint that is missing, corrupt, or does not match what it is restored into."""


class CheckpointDamaged(CheckpointError):
    """A checkpoint file that changed after it was written (its checksum differs), went missing,
    or cannot be read."""


class CheckpointMismatch(CheckpointError):
    """A checkpoint whose config differs from the one expected (e.g. an edited config.json)."""


class UnverifiedCheckpointWarning(UserWarning):
    """A checkpoint written before fusedrl kept checksums: its files are used without a check."""


def _path_name(path) -> str:
    return jax.tree_util.keystr(path, simple=True, separator=".")


def _is_key(x) -> bool:
    return hasattr(x, "dtype") and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)


def _flatten(tree) -> tuple[dict[str, np.ndarray], dict[str, str], dict[str, tuple]]:
    """Leaves by dotted path as NumPy arrays (keys as key data), the key impls, and the specs."""
    arrays, keys, specs = {}, {}, {}
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        name = _path_name(path)
        if _is_key(leaf):
            keys[name] = str(jax.random.key_impl(leaf))
            spec = (tuple(leaf.shape), "key<" + keys[name] + ">")
            leaf = jax.random.key_data(leaf)
        else:
            spec = (tuple(np.shape(leaf)), str(np.asarray(leaf).dtype))
        arrays[name] = np.asarray(leaf)
        specs[name] = spec
    return arrays, keys, specs


def save(path: str | os.PathLike, config: OnPolicyConfig, state: RunnerState, hparams, *,
         num_seeds: int | None = None, extra: Mapping[str, Any] | None = None,
         metrics: Mapping[str, Any] | None = None) -> Path:
    """Writes `state` and `hparams` of a run of `config` to the directory `path` (replaced).

    Args:
      path: checkpoint directory; an existing one is replaced only once the new one is complete.
      config: the run's config: a `PPOConfig`, `A2CConfig` or `ReinforceConfig` (stored with its
        algorithm, and checked on restore).
      state: a `RunnerState`, with a leading seed axis on every leaf if `num_seeds` is set.
      hparams: the run's `Hyperparams` (possibly with a seed axis).
      num_seeds: the size of the leading seed axis of a vmapped run, or None for a single run.
      extra: small JSON-serialisable facts to keep in meta.json.
      metrics: the run's per-update metrics so far (`TrainResult.metrics`), kept in metrics.npz so
        that a resumed run ends with the whole history (`restore_metrics`).
    """
    path = Path(path).absolute()
    tree = {"state": state, "hparams": hparams}
    arrays, keys, specs = _flatten(jax.device_get(tree))
    meta = {
        "format": FORMAT,
        "fusedrl_version": _version(),
        "algo": config.algo,
        "config": config.to_dict(),
        "num_seeds": num_seeds,
        "leaves": {k: {"shape": list(s), "dtype": d} for k, (s, d) in specs.items()},
        "prng_keys": keys,
        "extra": dict(extra or {}),
        "metrics": None if metrics is None else sorted(metrics),
        "checksums": CHECKSUMS_FILE,  # so that a checkpoint without one is known to have lost it
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    # Ctrl-C is held until the save ends: a Ctrl-C inside orbax's save abandons it, its threads then
    # log tracebacks at exit ("cannot schedule new futures after shutdown"), and Python's exit can
    # wait forever on orbax threads that wait for a signal from the abandoned save.
    with hold_interrupt("saving the checkpoint"):
        _write(path, arrays, meta, metrics)
    return path


def _write(path: Path, arrays, meta, metrics) -> None:
    """`save`'s writing: to a temporary directory beside `path`, checksums last, then renamed into it."""
    import orbax.checkpoint as ocp  # start-up time: orbax is slow to import, and only saving needs it

    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-{writer_tag()}-", dir=path.parent))
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes it private; give it a normal directory's mode
    try:
        checkpointer = ocp.StandardCheckpointer()
        # orbax wants to create the directory itself. It refuses arrays of zero size (an MJX physics
        # state holds some, e.g. the contacts of a model without any): meta.json's shape and dtype
        # rebuild them on restore.
        checkpointer.save(tmp / "arrays", {k: v for k, v in arrays.items() if v.size})
        checkpointer.wait_until_finished()
        checkpointer.close()
        if metrics is not None:
            np.savez(tmp / METRICS_FILE, **jax.device_get(dict(metrics)))
        (tmp / "meta.json").write_text(strict_json(meta, indent=1) + "\n", encoding="utf-8")
        write_checksums(tmp)
        if path.exists():
            old = path.with_name(f".{path.name}.old-{writer_tag()}")
            path.rename(old)
            tmp.rename(path)
            shutil.rmtree(old)
        else:
            tmp.rename(path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _sha256(file: Path) -> str:
    with open(file, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def write_checksums(folder: str | os.PathLike) -> Path:
    """Writes `folder`/checksums.json: the SHA-256 of every other file under `folder`, by its
    relative path. `save` calls it once everything else is written; call it yourself only on a
    checkpoint you changed on purpose."""
    folder = Path(folder)
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p != folder / CHECKSUMS_FILE)
    # Compact: a changed byte anywhere breaks the JSON, its format, a name or a digest.
    sums = {p.relative_to(folder).as_posix(): _sha256(p) for p in files}
    doc = {"format": CHECKSUMS_FORMAT, "sha256": sums}
    (folder / CHECKSUMS_FILE).write_text(json.dumps(doc, separators=(",", ":")), encoding="utf-8")
    return folder / CHECKSUMS_FILE


def verify(path: str | os.PathLike, names: Sequence[str] | None = None) -> bool:
    """Checks the files of the checkpoint `path` (or only those of `names`, relative paths) against
    its checksums.json.

    Returns:
      True once every file matches; False for a checkpoint without checksums.json (written before
      fusedrl kept checksums), whose files cannot be checked.

    Raises:
      CheckpointDamaged: naming the first file whose checksum differs, that is missing though
        checksums.json lists it, or that checksums.json does not list; or checksums.json itself
        is damaged.
    """
    path = Path(path)
    manifest = path / CHECKSUMS_FILE
    if not manifest.is_file():
        return False
    try:
        doc = json.loads(manifest.read_text(encoding="utf-8"))
        sums = doc["sha256"]
        if doc.get("format") != CHECKSUMS_FORMAT or not isinstance(sums, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in sums.items()):
            raise ValueError(f"not a {CHECKSUMS_FORMAT} file")
    except (OSError, ValueError, UnicodeDecodeError, KeyError, TypeError, AttributeError) as e:
        raise CheckpointDamaged(f"{manifest} is damaged ({type(e).__name__}: {e}), so the checkpoint's files "
                                f"cannot be checked against their checksums. {DAMAGED_ADVICE}") from None
    for name in sorted(sums) if names is None else names:
        file = path / name
        if name not in sums:
            if file.exists():
                raise CheckpointDamaged(f"{file} is not listed in {manifest.name}: it was added after the "
                                        f"checkpoint was written, so it has no checksum. {DAMAGED_ADVICE}")
            continue
        if Path(name).is_absolute() or ".." in Path(name).parts:
            raise CheckpointDamaged(f"{manifest} is damaged: it lists {name!r}, outside the checkpoint, "
                                    f"so its checksums cannot be trusted. {DAMAGED_ADVICE}")
        if not file.is_file():
            raise CheckpointDamaged(f"{file} is missing, but {manifest.name} lists it with its checksum. "
                                    f"{DAMAGED_ADVICE}")
        try:
            digest = _sha256(file)
        except OSError as e:
            raise CheckpointDamaged(f"{file} cannot be read to check its checksum ({e}).") from None
        if digest != sums[name]:
            raise CheckpointDamaged(f"{file} does not match its checksum in {manifest.name}: the file "
                                    f"changed after the checkpoint was written. {DAMAGED_ADVICE}")
    return True


def _unverified(path: Path, meta: Mapping[str, Any]) -> None:
    """For a checkpoint without checksums.json: refused if its meta.json says it had one, else a notice."""
    if "checksums" in meta:
        raise CheckpointDamaged(f"{path / CHECKSUMS_FILE} is missing, but meta.json says the checkpoint was "
                                f"written with it: its files cannot be checked against their checksums. "
                                f"{DAMAGED_ADVICE}")
    warn_user(f"{path} has no {CHECKSUMS_FILE} (written by an earlier fusedrl, before checkpoints had "
              f"checksums): its files are used without checking them for damage.",
              UnverifiedCheckpointWarning)


_DEBRIS = re.compile(r"\.(?P<name>.+)\.(?:tmp-(?P<pid>\d+)-(?P<host>[0-9a-f]{8})-.*|"
                     r"old-(?P<old_pid>\d+)(?:-(?P<old_host>[0-9a-f]{8}))?)")


def recover(path: str | os.PathLike) -> list[Path]:
    """Cleans up after writers of the checkpoint `path` killed during a save: removes the temporary
    folders and the previous checkpoints moved aside that they left, once their process no longer
    runs on this machine, and first puts the previous checkpoint back if the new one never took its
    place (killed between the two renames of `_write`). Folders of a writer that runs, or of another
    machine, are left alone; so are the temporary files of `fusedrl.files.write_atomic` beside it.
    Returns what was removed or put back; what cannot be removed (a read-only copy) is left."""
    path = Path(path).absolute()
    try:
        entries = list(path.parent.iterdir())
    except OSError:
        return []
    done, old = remove_stale_temporaries(path.parent), []  # the run folder's other files' (`write_atomic`)
    for entry in sorted(entries):
        m = _DEBRIS.fullmatch(entry.name)
        if m is None or m["name"] != path.name or not entry.is_dir():
            continue
        pid, their_host = (m["pid"], m["host"]) if m["pid"] else (m["old_pid"], m["old_host"])
        if not stale(pid, their_host):  # no host: written before names had one
            continue
        if m["old_pid"]:
            old.append(entry)
            continue
        shutil.rmtree(entry, ignore_errors=True)
        done.append(entry)
    for entry in old:
        try:
            if not path.exists():
                entry.rename(path)  # the previous checkpoint: complete, and nothing replaced it
            else:
                shutil.rmtree(entry, ignore_errors=True)
            done.append(entry)
        except OSError:
            pass
    return done


def _version() -> str:
    return __version__


def read_meta(path: str | os.PathLike) -> dict[str, Any]:
    """The checkpoint's meta.json, checked to be a fusedrl checkpoint."""
    path = Path(path)
    meta_file = path / "meta.json"
    if not meta_file.is_file():
        raise CheckpointError(f"{path} is not a fusedrl checkpoint: {meta_file.name} is missing.")
    try:
        meta = json.loads(meta_file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{meta_file} is corrupt: {e}.") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise CheckpointError(f"{meta_file} is not a {FORMAT} file (format {meta.get('format')!r}).")
    return meta


def saved_algo(meta: Mapping[str, Any]) -> str:
    """The algorithm of the checkpoint whose meta.json is `meta` ("ppo" where it names none)."""
    return meta.get("algo", DEFAULT_ALGO)


def config_differences(saved: Mapping[str, Any], expected: OnPolicyConfig,
                       saved_algo: str = DEFAULT_ALGO) -> list[str]:
    """Human-readable `field: checkpoint has X, expected Y` lines for the fields that differ (the
    algorithm first, as `algo`, when the checkpoint's `saved_algo` is not `expected`'s)."""
    want = expected.to_dict()
    lines = []
    if saved_algo != expected.algo:
        lines.append(f"algo: checkpoint has {saved_algo!r}, expected {expected.algo!r}")
    for name in sorted(set(saved) | set(want)):
        a, b = saved.get(name, "<missing>"), want.get(name, "<missing>")
        if a != b:
            lines.append(f"{name}: checkpoint has {a!r}, expected {b!r}")
    return lines


def templates(config: OnPolicyConfig, num_seeds: int | None, key_impl: str | None = None, *,
              env: tuple[Any, Any] | None = None):
    """Abstract (shape/dtype) state and hparams a checkpoint of `config` must match; its PRNG keys
    of `key_impl` (default: JAX's default). `env`: `config`'s (env, env_params), if built already."""
    train = make_train(config, env=env)
    hparams = config.hparams(train.env_params)
    key = jax.random.key(0, impl=key_impl)
    if num_seeds is None:
        state = jax.eval_shape(train.init, key, hparams)
    else:
        keys = jax.random.split(key, num_seeds)
        state = jax.eval_shape(jax.vmap(train.init, in_axes=(0, None)), keys, hparams)
    return state, hparams


def _ignore_callbacks_into_closed_loops() -> None:
    """After orbax fails to read a checkpoint, the reads of its other arrays still run in
    tensorstore's threads; orbax has already closed the event loop they report to, so each one's
    callback raises "Event loop is closed", which Python prints as a traceback through
    `sys.unraisablehook`, at any moment until the process exits. This hook drops exactly those (a
    RuntimeError raised in asyncio's `call_soon_threadsafe`) and passes everything else on."""
    previous = sys.unraisablehook
    if getattr(previous, "_fusedrl_closed_loop_filter", False):
        return

    def hook(unraisable):
        exc = unraisable.exc_value
        frames = traceback.extract_tb(unraisable.exc_traceback) if unraisable.exc_traceback else []
        if (isinstance(exc, RuntimeError) and str(exc) == "Event loop is closed"
                and any(f.name == "call_soon_threadsafe" for f in frames)):
            return
        previous(unraisable)

    hook._fusedrl_closed_loop_filter = True
    sys.unraisablehook = hook


def restore(path: str | os.PathLike, config: OnPolicyConfig | None = None, *,
            env: tuple[Any, Any] | None = None):
    """Reads a checkpoint written by `save`.

    Args:
      path: the checkpoint directory.
      config: the config the caller expects; any field that differs from the checkpoint's is
        named in the error. Default: the checkpoint's own config.
      env: `config`'s (env, env_params), if the caller has built it (a run builds its env once);
        used only with `config`.

    Returns:
      (config, state, hparams, meta): the checkpoint's config (of its algorithm's class:
      `PPOConfig`, `A2CConfig` or `ReinforceConfig`), `RunnerState` (jax arrays, PRNG keys rebuilt),
      `Hyperparams` and meta.json contents.
    """
    path = Path(path).absolute()
    recover(path)
    verified = verify(path)  # every file, before any is read
    meta = read_meta(path)
    if not verified:
        _unverified(path, meta)
    algo = saved_algo(meta)
    if not isinstance(algo, str) or algo not in CONFIGS:
        raise CheckpointError(f"{path}: the checkpoint is of algorithm {algo!r}, which this fusedrl "
                              f"({_version()}) does not know; it knows {', '.join(map(repr, CONFIGS))}.")
    try:
        saved_config = CONFIGS[algo].from_dict(meta["config"])
    except (TypeError, ValueError, KeyError) as e:
        raise CheckpointError(f"{path}: the stored config is invalid: {e}") from None
    if config is not None:
        diffs = config_differences(meta["config"], config, algo)
        if diffs:
            raise CheckpointMismatch(
                f"{path} does not match the expected config; differing field(s):\n  " + "\n  ".join(diffs)
            )
    num_seeds = meta.get("num_seeds")
    key_impls = set(meta.get("prng_keys", {}).values())  # a run's keys share one impl
    state_t, hparams_t = templates(saved_config, num_seeds, key_impls.pop() if len(key_impls) == 1 else None,
                                   env=None if config is None else env)
    template = {"state": state_t, "hparams": hparams_t}
    leaves, treedef = jax.tree_util.tree_flatten_with_path(template)
    names = [_path_name(p) for p, _ in leaves]
    saved_leaves = meta.get("leaves", {})
    missing = [n for n in names if n not in saved_leaves]
    unexpected = [n for n in saved_leaves if n not in set(names)]
    if missing or unexpected:
        raise CheckpointError(
            f"{path} does not fit the state of {saved_config.env_id!r} with hidden_sizes="
            f"{saved_config.hidden_sizes} in this fusedrl ({_version()}; the checkpoint was written by "
            f"{meta.get('fusedrl_version', 'an unknown version')}): fields missing from the checkpoint "
            f"{missing[:5]}, fields the code does not know {unexpected[:5]}."
        )
    import orbax.checkpoint as ocp  # start-up time: orbax is slow to import, and only restoring needs it

    checkpointer = ocp.StandardCheckpointer()
    try:
        arrays = dict(checkpointer.restore(path / "arrays"))
    except Exception as e:  # orbax raises many types for damaged files
        _ignore_callbacks_into_closed_loops()
        raise CheckpointDamaged(f"{path}: cannot read the checkpoint arrays ({type(e).__name__}: "
                                f"{e}).") from e
    finally:
        # Also after a failed read: an unclosed checkpointer's threads print "Event loop is closed"
        # tracebacks when the process exits.
        checkpointer.close()
    out = []
    for (_, ref), name in zip(leaves, names, strict=True):
        spec = saved_leaves[name]
        if name not in arrays and 0 in spec["shape"] and name not in meta.get("prng_keys", {}):
            arrays[name] = np.zeros(spec["shape"], spec["dtype"])  # not stored (see `_write`)
        if name not in arrays:
            raise CheckpointError(f"{path}: field {name} is missing from the arrays.")
        value = np.asarray(arrays[name])
        if name in meta.get("prng_keys", {}):
            value = jax.random.wrap_key_data(jnp.asarray(value), impl=meta["prng_keys"][name])
        elif isinstance(ref, bool | int | float) and value.shape == ():
            # Env params default to Python numbers (weakly typed under jit): keep them so, so the
            # resumed program is the same program.
            value = type(ref)(value.item())
        elif isinstance(ref, bool | int | float):  # with a seed axis: the dtype training gave them
            value = jnp.asarray(value, number_dtype(ref))
        else:
            value = jnp.asarray(value)
        # The hparams leaves are plain Python floats in the template (shape ()): a seed axis is fine.
        ref_shape = tuple(np.shape(ref))
        shape = tuple(np.shape(value))
        ok_shape = shape == ref_shape or (name.startswith("hparams") and shape[1:] == ref_shape)
        ref_dtype = getattr(ref, "dtype", None)
        dtype = getattr(value, "dtype", type(value).__name__)
        if not ok_shape or (ref_dtype is not None and dtype != ref_dtype):
            raise CheckpointError(
                f"{path}: field {name} has shape {shape} dtype {dtype}, expected "
                f"{ref_shape} {ref_dtype} for {saved_config.env_id!r} with hidden_sizes="
                f"{saved_config.hidden_sizes} (the checkpoint is corrupt or from another version)."
            )
        out.append(value)
    tree = jax.tree_util.tree_unflatten(treedef, out)
    return saved_config, tree["state"], tree["hparams"], meta


def restore_metrics(path: str | os.PathLike) -> dict[str, np.ndarray] | None:
    """The per-update metrics saved with a checkpoint (`save(..., metrics=...)`), or None if it
    holds none."""
    path = Path(path)
    verified = verify(path, ["meta.json", METRICS_FILE])
    meta = read_meta(path)
    if not verified and "checksums" in meta:
        _unverified(path, meta)  # raises
    names = meta.get("metrics")
    if names is None:
        return None
    try:
        # np.load leaves a file it opened itself open when the zip is damaged: open it here.
        with open(path / METRICS_FILE, "rb") as fh, np.load(fh, allow_pickle=False) as f:
            metrics = {name: f[name] for name in f.files}
    except (OSError, ValueError, zipfile.BadZipFile) as e:
        raise CheckpointDamaged(f"{path / METRICS_FILE} cannot be read ({type(e).__name__}: {e}): the file "
                                f"is damaged or missing.") from None
    if sorted(metrics) != sorted(names):
        raise CheckpointDamaged(f"{path / METRICS_FILE} holds {sorted(metrics)}, but meta.json lists "
                                f"{names}: one of the two is damaged.")
    return metrics
