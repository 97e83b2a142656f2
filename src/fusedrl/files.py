"""Files written whole or not at all: a temporary file next to the target, renamed over it.

A crash or Ctrl-C in the middle of a write leaves the previous file (or none), never half of one.
Run folders (`fusedrl.runs`) and learning-curve images (`fusedrl.plotting`) are written this way.
A temporary name holds its writer (`writer_tag`: pid and machine), so that what a killed writer left
can be told from what a running one is writing (`remove_stale_temporaries`).
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
import tempfile
from pathlib import Path

from fusedrl._json import dumps as strict_json

# The process's umask, read once (os.umask can only be read by setting it): `write_atomic` gives
# its files the mode a plain `open` would.
_UMASK = os.umask(0)
os.umask(_UMASK)


def host_id() -> str:
    """8 hex digits naming this machine (and container): a writer's pid means something only there."""
    return hashlib.sha256(socket.gethostname().encode("utf-8", "replace")).hexdigest()[:8]


def writer_tag() -> str:
    """"PID-HOST" of this process, in the names of the temporary files and folders it writes."""
    return f"{os.getpid()}-{host_id()}"


def pid_alive(pid: int) -> bool:
    """Whether process `pid` of this machine still runs (a zombie, killed and not yet reaped, does not)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's
        return True
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def stale(tag_pid: str, tag_host: str | None) -> bool:
    """Whether the writer of a temporary name (its pid and host id; None: a name without a host,
    taken as this machine's) no longer runs. Another machine's writers are never stale here."""
    return tag_host in (None, host_id()) and not pid_alive(int(tag_pid))


_TEMP_FILE = re.compile(r"\.(?P<name>.+)\.(?P<pid>\d+)-(?P<host>[0-9a-f]{8})\.[^.]*\.tmp")


def remove_stale_temporaries(folder: str | os.PathLike) -> list[Path]:
    """Removes the temporary files `write_atomic` left in `folder` when its writer was killed (see
    `stale`); returns them. Files that cannot be removed (a read-only folder) are left."""
    removed = []
    try:
        entries = list(Path(folder).iterdir())
    except OSError:
        return removed
    for entry in entries:
        m = _TEMP_FILE.fullmatch(entry.name)
        if m is not None and entry.is_file() and stale(m["pid"], m["host"]):
            try:
                entry.unlink()
                removed.append(entry)
            except OSError:
                pass
    return removed


def write_atomic(path: str | os.PathLike, data: str | bytes) -> Path:
    """Writes `data` to a temporary file next to `path`, then renames it over `path`."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{writer_tag()}.", suffix=".tmp", dir=path.parent)
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
