"""File-system helpers for the cache: trust checks, private directories, atomic writes, file locks
and counters shared between processes.

Role: everything here is small and policy-free; store.py decides when to call what.

Invariants:
- A path is *trusted* only if it is owned by the effective user and not writable by group or others;
  entry files are opened with O_NOFOLLOW and checked on the open descriptor (fstat), so a file cannot be
  swapped between the check and the read.
- Directories framejit creates are 0o700, files 0o600 (independent of the umask).
- `write_atomic` publishes a complete file or nothing: readers see the old file, the new one, or none.
- Counter files are updated under an exclusive `flock`, so concurrent processes never lose an update.

Main names: `trust_problem`, `dir_problem`, `ensure_private_dir`, `open_trusted`, `Untrusted`,
`write_atomic`, `file_lock`, `add_counters`, `read_counters`.
"""
from __future__ import annotations

import contextlib
import itertools
import os
import stat
import struct
import time
from typing import Iterator

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX; locks and counters degrade to best effort
    fcntl = None

_COUNTER = struct.Struct("<q")
_tmp_serial = itertools.count()


class Untrusted(Exception):
    """A path that must not be loaded; str(exc) says why."""


def current_uid() -> int:
    return os.geteuid()


def trust_problem(st: os.stat_result, path: str, what: str) -> str | None:
    """Why a file or directory with this stat must not be trusted, or None."""
    uid = current_uid()
    if st.st_uid != uid:
        return f"{what} {path} is owned by uid {st.st_uid}, not by this user (uid {uid})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"{what} {path} is writable by group or others (mode {stat.S_IMODE(st.st_mode):o}); run `chmod go-w`"
    return None


def dir_problem(path: str, follow_symlinks: bool = False) -> str | None:
    """Why `path` is not a trusted directory (missing, not a directory, foreign, writable), or None."""
    try:
        st = os.stat(path) if follow_symlinks else os.lstat(path)
    except FileNotFoundError:
        return f"directory {path} does not exist"
    except OSError as exc:
        return f"cannot read directory {path}: {exc.strerror}"
    if not stat.S_ISDIR(st.st_mode):
        return f"{path} is not a directory"
    return trust_problem(st, path, "directory")


def ensure_private_dir(path: str) -> None:
    """Create `path` (and missing parents, with default permissions) as a 0o700 directory."""
    if os.path.lexists(path):
        return  # whatever it is, the caller's trust check judges it
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        return
    os.chmod(path, 0o700)  # the umask may have removed bits we want; never adds any beyond 0o700


def open_trusted(path: str) -> tuple[int, os.stat_result]:
    """Open a regular file for reading after checking it on the descriptor; raises Untrusted or OSError."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Untrusted(f"{path} is not a regular file")
        problem = trust_problem(st, path, "file")
        if problem:
            raise Untrusted(problem)
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def _create_temp(tmp_dir: str) -> tuple[int, str]:
    # NOTE [Temp file names]: pid plus a per-process counter (no random names); O_EXCL makes a name
    # left behind by a crashed process with the same pid a retry, never a shared file.
    while True:
        path = os.path.join(tmp_dir, f"{os.getpid()}-{next(_tmp_serial)}.tmp")
        try:
            return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600), path
        except FileExistsError:
            continue


def write_atomic(tmp_dir: str, final_path: str, data: bytes) -> None:
    """Write `data` to a temp file in `tmp_dir` (same file system) and rename it onto `final_path`."""
    # NOTE [No fsync]: a crash may leave an empty or partial file after the rename on some file
    # systems; the entry checksum turns that into a miss, so durability is not worth an fsync per write.
    fd, tmp_path = _create_temp(tmp_dir)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp_path, final_path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp_path)
        raise


@contextlib.contextmanager
def file_lock(path: str, timeout_s: float | None) -> Iterator[bool]:
    """Hold an exclusive flock on `path` (created 0o600); yields whether it was acquired.

    timeout_s None waits forever; 0 tries once. Not acquiring is not an error: the caller decides.
    """
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        yield _acquire(fd, timeout_s)
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def _acquire(fd: int, timeout_s: float | None) -> bool:
    if fcntl is None:
        return True
    if timeout_s is None:
        fcntl.flock(fd, fcntl.LOCK_EX)
        return True
    deadline = time.monotonic() + timeout_s
    delay = 0.001
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(delay)
            delay = min(delay * 2, 0.05)


def _read_values(fd: int, count: int) -> list[int]:
    data = os.pread(fd, count * _COUNTER.size, 0)
    values = [0] * count
    for i in range(min(count, len(data) // _COUNTER.size)):
        (values[i],) = _COUNTER.unpack_from(data, i * _COUNTER.size)
    return values


def add_counters(path: str, deltas: list[int]) -> None:
    """Add `deltas` to the little-endian int64 counters stored in `path`, under an exclusive lock."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        values = _read_values(fd, len(deltas))
        new = b"".join(_COUNTER.pack(v + d) for v, d in zip(values, deltas))
        os.pwrite(fd, new, 0)
    finally:
        os.close(fd)


def read_counters(path: str, count: int) -> list[int]:
    """The first `count` counters in `path` (zeros for a missing file or missing slots)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return [0] * count
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_SH)
        return _read_values(fd, count)
    finally:
        os.close(fd)
