"""Checks of the command line's path options, made before any work: a folder option must name a
folder or a path where one can be made, a file option a file name whose folder exists or can be made.

Each failure is a ValueError naming the option, the path and what is in the way (a file where a
folder is needed, or the other way round), so the command refuses in one line instead of failing
after a build or a benchmark.
"""
from __future__ import annotations

import os
from pathlib import Path

__all__ = ["check_file", "check_folder"]


def _in_the_way(path: Path) -> Path | None:
    """The first of ``path`` and its parents that exists and is not a folder (a file, or a symbolic
    link to nothing), or None when ``path`` is a folder or mkdir(parents=True) can make it."""
    for p in (path, *path.parents):
        if p.is_dir():
            return None  # every parent of a folder is a folder
        if p.exists() or p.is_symlink():
            return p
    return None


def _what(p: Path) -> str:
    return "a file" if p.exists() else "a symbolic link to nothing"


def check_folder(option: str, path: str | os.PathLike) -> Path:
    """``path`` as a Path when it is a folder or can be made one; else ValueError naming ``option``."""
    path = Path(path)
    p = _in_the_way(path)
    if p is not None:
        where = f"which is {_what(p)}" if p == path else f"which lies under {str(p)!r}, {_what(p)}"
        raise ValueError(f"{option}: expected a folder (or a path where one can be made), got {str(path)!r}, "
                         f"{where}")
    return path


def check_file(option: str, path: str | os.PathLike) -> Path:
    """``path`` as a Path when it can be written as a file (not a folder; its folder exists or can be
    made); else ValueError naming ``option``."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{option}: expected a file name, got {str(path)!r}, which is a folder")
    p = _in_the_way(path.parent)
    if p is not None:
        raise ValueError(f"{option}: expected a file name in a folder (or where one can be made), got "
                         f"{str(path)!r}, which lies under {str(p)!r}, {_what(p)}")
    return path
