"""The kernel cache's file handling (fusedgrad.runtime keeps the cache): its lock among processes, the
per-key build locks, the removal of a slot, and of the folders that killed builds left behind.

A slot is a folder named by its cache key; a build writes a temporary folder ``.<key>-*`` beside it
and renames it into place.  Whatever replaces a slot does so holding :func:`locked`.
"""
from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import tempfile
import time
from pathlib import Path

ABANDONED_S = 3600  # a build folder untouched this long was left by a killed build


@contextlib.contextmanager
def flocked(path: Path, flags: int = os.O_RDONLY):
    """Hold an exclusive ``flock`` on ``path`` (opened with ``flags``) among processes; it dies with
    its process.  Where there is no such lock (no fcntl, a file system that refuses it) go on
    without it."""
    try:
        import fcntl
    except ImportError:  # not a POSIX system
        yield
        return
    fd = os.open(path, flags, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:
            pass
        yield
    finally:
        os.close(fd)  # which releases the lock


def locked(cache: Path):
    """Hold the cache's lock among processes (``flock`` on the cache folder) while a slot is checked
    and replaced."""
    return flocked(cache)


LOCKS = ".locks"  # the folder of the per-key build locks, in the cache folder


def building(cache: Path, key: str):
    """Hold ``key``'s build lock among processes (``flock`` on ``<cache>/.locks/<key>``) while its
    artifact is built: a process that finds the slot missing takes it, looks again, and builds only
    if the slot is still missing, so processes that want the same missing entry at once build it
    once and the others load it.  The lock dies with its process (a build that dies releases it;
    the next waiter takes over).  Without such a lock every process builds, as before."""
    (cache / LOCKS).mkdir(parents=True, exist_ok=True)
    return flocked(cache / LOCKS / key, os.O_RDWR | os.O_CREAT)


@contextlib.contextmanager
def staging(slot: Path):
    """A temporary folder beside ``slot`` (named as :func:`remove_abandoned_builds` finds it) to write
    the slot's new content in; whatever is still there afterwards (not renamed into place) is removed."""
    tmp = Path(tempfile.mkdtemp(dir=slot.parent, prefix=f".{slot.name}-"))
    try:
        yield tmp
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def discard(path: Path) -> None:
    """Remove what is at ``path`` (a folder, a file or a link), renamed aside first so that the name is
    free at once; a folder that cannot be removed stays under the name of a killed build's folder."""
    aside = path.with_name(f".{path.name}-old-{os.getpid()}-{secrets.token_hex(4)}")
    os.rename(path, aside)
    if aside.is_dir() and not aside.is_symlink():
        shutil.rmtree(aside, ignore_errors=True)
    else:
        aside.unlink()


def remove_abandoned_builds(cache: Path, key: str) -> None:
    """Remove the temporary folders of ``key``'s builds that a killed process left behind (older
    than ABANDONED_S; a younger one may be another process's build in progress)."""
    now = time.time()
    for d in cache.glob(f".{key}-*"):
        try:
            if d.is_dir() and not d.is_symlink() and now - d.stat().st_mtime > ABANDONED_S:
                shutil.rmtree(d, ignore_errors=True)
        except OSError:
            pass
