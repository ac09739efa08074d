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


# the fields an entry must hold for this module (its key), and of which type; the others a loader
# checks (fusedgrad.runtime), but those present must be of the type a writer gives them
_KEY_FIELDS = {"op": str, "target": str, "dtype": str}
_OPTIONAL_FIELDS = {"isa_class": (str, type(None)), "library": str, "tvm_target": dict, "files": dict,
                    "kernels": list}


def read_manifest(out_dir: str | os.PathLike) -> dict:
    """``out_dir``'s manifest (an empty one when it has none); ValueError naming the file when it
    cannot be read, is not JSON, is of another format or an entry lacks its key or holds a field of
    another type, so that nothing is added to a manifest that would be lost or misread."""
    path = Path(out_dir) / MANIFEST
    if not path.exists() and not path.is_symlink():
        return {"format": FORMAT, "artifacts": []}
    try:
        manifest = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: not a readable manifest ({e})") from None
    if not isinstance(manifest, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(manifest).__name__}")
    if manifest.get("format") != FORMAT:
        raise ValueError(f"{path}: expected manifest format {FORMAT}, got {manifest.get('format')!r}")
    entries = manifest.get("artifacts")
    if not isinstance(entries, list):
        raise ValueError(f"{path}: expected a list under 'artifacts', got {type(entries).__name__}")
    for k, e in enumerate(entries):
        if not isinstance(e, dict):
            raise ValueError(f"{path}: artifacts[{k}]: expected a JSON object, got {type(e).__name__}")
        for field, kind in {**_KEY_FIELDS, **_OPTIONAL_FIELDS}.items():
            if (field in e or field in _KEY_FIELDS) and not isinstance(e.get(field), kind):
                expected = " or ".join("null" if t is type(None) else t.__name__
                                       for t in (kind if isinstance(kind, tuple) else (kind,)))
                raise ValueError(f"{path}: artifacts[{k}][{field!r}]: expected {expected}, got "
                                 + (f"{type(e[field]).__name__}" if field in e else "nothing"))
    return manifest




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
