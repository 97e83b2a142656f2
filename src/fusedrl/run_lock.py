"""One process per run folder: an OS lock (`fcntl.flock`) on the folder's LOCK_FILE.

A process that trains or resumes a run holds the lock of its folder until it is done; a second one
is refused (`RunFolderLocked`, naming the holder's pid) before it deletes or writes anything. The
operating system releases the lock when its holder exits in any way, kill -9 included, so a crashed
run's folder is free again at once, and a folder whose summary.json still says "running" but whose
lock is free was left by a writer that died (`fusedrl.runs.run_status`: "interrupted").

The lock file stays in the folder (an `--overwrite` keeps it while it removes the rest): a process
that removed and recreated it would hold a lock on a file the next process no longer opens. flock
locks are reliable on local file systems; on a network file system they may not be.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from pathlib import Path

#: The lock file inside a run folder; it holds the pid of its latest holder.
LOCK_FILE = ".lock"

# A process that only looks (`holder`) holds the lock for an instant: a taker tries a few times
# before it calls the folder taken.
_TRIES, _WAIT_S = 5, 0.05


class RunFolderLocked(OSError):
    """Another process trains or resumes the run in this folder (it holds the folder's lock)."""

    def __init__(self, folder: str | os.PathLike, pid: int | None):
        self.folder, self.pid = Path(folder), pid
        who = "another process" if pid is None else f"process {pid}"
        super().__init__(
            f"{self.folder} is in use: {who} is training or resuming the run in it (it holds "
            f"{self.folder / LOCK_FILE}). Wait for it to end, or stop it, or choose another folder; "
            f"a process that was killed holds no lock."
        )


class RunLock:
    """A held lock on a run folder; `release()` (or leaving a `with` block) frees it."""

    def __init__(self, folder: Path, fd: int):
        self.folder, self._fd = folder, fd

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)  # closing the last descriptor of the open file frees the flock

    def __enter__(self) -> RunLock:
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def __del__(self):
        with contextlib.suppress(Exception):  # at interpreter exit the OS frees it anyway
            self.release()


def acquire(folder: str | os.PathLike) -> RunLock:
    """Takes the lock of the existing folder `folder` (creating its LOCK_FILE) and writes this
    process's pid in it. Raises RunFolderLocked, naming the holder's pid, if another holds it."""
    folder = Path(folder)
    fd = os.open(folder / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        for attempt in range(_TRIES):
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if attempt == _TRIES - 1:
                    raise RunFolderLocked(folder, _read_pid(fd)) from None
                time.sleep(_WAIT_S)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    except BaseException:
        os.close(fd)
        raise
    return RunLock(folder, fd)


def holder(folder: str | os.PathLike) -> int | None:
    """The pid of the process that holds `folder`'s lock (0 if it has not written it yet), or None
    when no process does (or the folder has no lock file). Writes nothing."""
    try:
        fd = os.open(Path(folder) / LOCK_FILE, os.O_RDONLY | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError, PermissionError):  # no lock file, or not ours to read
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _read_pid(fd)
            return 0 if pid is None else pid
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def _read_pid(fd: int) -> int | None:
    with contextlib.suppress(OSError, ValueError):
        return int(os.pread(fd, 32, 0).decode("ascii").strip())
    return None
