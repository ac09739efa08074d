"""The artifact folder's manifest (``manifest.json``): one entry per (op, target, dtype, ISA class).

A CPU library's entry names the ISA class it was built for (``isa_class``,
e.g. "x86-64-v3"; None or absent for other targets), so one folder may hold
the same op built for several classes and a loader picks the best one the
running CPU supports (fusedgrad.runtime).

An entry records what a loader needs to check and call an artifact (see
lowering.build for a library's fields, lowering.packagers for a source
package's).  The file is rewritten atomically, entries sorted, so a failed
build leaves the previous manifest in place and two builds of the same
artifacts write the same bytes.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

MANIFEST = "manifest.json"
FORMAT = 1


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read_manifest(out_dir: str | os.PathLike) -> dict:
    path = Path(out_dir) / MANIFEST
    if not path.exists():
        return {"format": FORMAT, "artifacts": []}
    return json.loads(path.read_text())


def entry_key(entry: dict) -> tuple[str, str, str, str]:
    """What an entry is unique by: (op, target, dtype, ISA class or "")."""
    return entry["op"], entry["target"], entry["dtype"], entry.get("isa_class") or ""


def update_manifest(out_dir: str | os.PathLike, entry: dict) -> None:
    """Add ``entry`` to ``out_dir``'s manifest, replacing the entry of the same (op, target, dtype,
    ISA class); the entries of other classes stay."""
    out_dir = Path(out_dir)
    manifest = read_manifest(out_dir)
    key = entry_key(entry)
    arts = [a for a in manifest["artifacts"] if entry_key(a) != key]
    arts.append(entry)
    arts.sort(key=entry_key)
    manifest = {"format": FORMAT, "artifacts": arts}
    fd, tmp = tempfile.mkstemp(dir=out_dir, suffix=".json.tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, out_dir / MANIFEST)
