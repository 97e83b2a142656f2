"""Compile once: JAX's persistent compilation cache in a per-user folder.

Training compiles one XLA program per config (seconds to a minute on a CPU) and runs it for
seconds. With the cache on, a second process that builds the same program loads the executable
from disk instead of compiling it again:

    import fusedrl
    fusedrl.enable_compile_cache()          # ~/.cache/fusedrl/jax, or $XDG_CACHE_HOME/fusedrl/jax

The `fusedrl` command line turns it on for `train`, `evaluate`, `sweep` and `profile` unless given
`--no-compile-cache` or run with FUSEDRL_COMPILE_CACHE=0 (JAX_COMPILATION_CACHE_DIR, when set,
names the folder). Entries are keyed by JAX itself: the
program, the jax and jaxlib versions, the backend and its devices, the compile options and XLA
flags; an entry written by another version or for another processor is never loaded in their place.
The cache is trusted code: keep the folder private (see `jax.experimental.compilation_cache`).
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

#: Environment variable that turns the command line's cache off ("0", "false", "no", "off").
ENV_VAR = "FUSEDRL_COMPILE_CACHE"

_lock = threading.Lock()
_counts = {"requests": 0, "hits": 0}
_listening = False


def default_cache_dir() -> Path:
    """$XDG_CACHE_HOME/fusedrl/jax, or ~/.cache/fusedrl/jax when XDG_CACHE_HOME is unset."""
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(root) / "fusedrl" / "jax"


def disabled_by_env() -> bool:
    """Whether FUSEDRL_COMPILE_CACHE turns the cache off (0, false, no, off; any case)."""
    return os.environ.get(ENV_VAR, "").strip().lower() in ("0", "false", "no", "off")


def enable_compile_cache(path: str | os.PathLike | None = None) -> Path:
    """Turns on JAX's persistent compilation cache in `path` (default: `default_cache_dir()`).

    Every program is cached, however small or quick to compile (JAX's defaults skip programs that
    compile in under a second). Call it before training; programs compiled earlier in the process
    are not written. Returns the cache folder.

    Args:
      path: the cache folder (created if missing). None: the folder JAX is already set to use
        (`jax_compilation_cache_dir`, e.g. from JAX_COMPILATION_CACHE_DIR), else
        $XDG_CACHE_HOME/fusedrl/jax or ~/.cache/fusedrl/jax.
    """
    # Start-up time: the CLI imports this module at once and turns the cache on before JAX loads.
    import jax
    from jax._src import compilation_cache

    if path is None:  # a folder JAX was told to use (JAX_COMPILATION_CACHE_DIR) stays in use
        path = jax.config.jax_compilation_cache_dir or default_cache_dir()
    folder = Path(path).expanduser()
    folder.mkdir(parents=True, exist_ok=True)
    if jax.config.jax_compilation_cache_dir != str(folder):
        jax.config.update("jax_compilation_cache_dir", str(folder))
        # JAX opens its cache once per process, at the first compile: point it at the new folder.
        compilation_cache.reset_cache()
    jax.config.update("jax_enable_compilation_cache", True)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)  # -1: no size threshold
    _listen()
    return folder


def cache_counts() -> dict[str, int]:
    """Programs looked up in the persistent cache since the process started ("requests") and how
    many of them were loaded from it ("hits"). Take the difference of two calls for one step."""
    with _lock:
        return dict(_counts)


def _listen() -> None:
    global _listening
    from jax._src import monitoring  # start-up time, as in enable_compile_cache

    with _lock:
        if _listening:
            return
        _listening = True

    def on_event(event: str, **_) -> None:
        key = {"/jax/compilation_cache/compile_requests_use_cache": "requests",
               "/jax/compilation_cache/cache_hits": "hits"}.get(event)
        if key is not None:
            with _lock:
                _counts[key] += 1

    monitoring.register_event_listener(on_event)


def describe(before: dict[str, int], after: dict[str, int]) -> str | None:
    """One phrase for the XLA programs compiled between two `cache_counts()`, or None when none was
    looked up: "all 4 XLA programs loaded, none compiled", "3 of 4 XLA programs loaded, 1 compiled and
    saved" or "4 XLA programs compiled and saved (an identical run loads them)"."""
    requests = after["requests"] - before["requests"]
    hits = after["hits"] - before["hits"]
    if requests <= 0:
        return None
    if hits == requests:
        return f"all {requests} XLA programs loaded, none compiled"
    if hits:
        return f"{hits} of {requests} XLA programs loaded, {requests - hits} compiled and saved"
    return f"{requests} XLA programs compiled and saved (an identical run loads them)"


def use_compile_cache(off: bool) -> Path | None:
    """The commands' switch (`fusedrl train`, `fusedrl profile`): turns the compile cache on unless
    `off` (--no-compile-cache) or FUSEDRL_COMPILE_CACHE=0 says not to; a folder that cannot be
    created is a warning, not an error. Returns the folder, or None."""
    if off or disabled_by_env():
        return None
    try:
        return enable_compile_cache()
    except OSError as e:
        print(f"warning: compile cache off: cannot use {default_cache_dir()} ({e}); set XDG_CACHE_HOME "
              f"to a writable folder, or pass --no-compile-cache", file=sys.stderr)
        return None
