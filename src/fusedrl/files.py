"""Files written whole or not at all: a temporary file next to the target, renamed over it.

A crash or Ctrl-C in the middle of a write leaves the previous file (or none), never half of one.
Run folders (`fusedrl.runs`) and learning-curve images (`fusedrl.plotting`) are written this way.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from fusedrl._json import dumps as strict_json

# The process's umask, read once (os.umask can only be read by setting it): `write_atomic` gives
# its files the mode a plain `open` would.
_UMASK = os.umask(0)
os.umask(_UMASK)


def write_atomic(path: str | os.PathLike, data: str | bytes) -> Path:
    """Writes `data` to a temporary file next to `path`, then renames it over `path`."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes it private; give it a normal file's mode
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_json(path: str | os.PathLike, obj) -> Path:
    """`obj` as strict JSON (NaN as null, ±inf as ±1e999: see `fusedrl._json`), atomically."""
    return write_atomic(path, strict_json(obj) + "\n")
