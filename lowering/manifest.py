"""The artifact folder's manifest (``manifest.json``): one entry per (op, target, dtype, ISA class).

A CPU library's entry names the ISA class it was built for (``isa_class``,
e.g. "x86-64-v3"; None or absent for other targets), so one folder may hold
the same op built for several classes and a loader picks the best one the
running CPU supports (fusedgrad.runtime).

An entry records what a loader needs to check and call an artifact (see
lowering.build for a library's fields, lowering.packagers for a source
package's); ``mismatch`` checks a library's entry against ``LIBRARY_ENTRY``,
the type of every field a loader uses.  The file is rewritten atomically,
entries sorted, so a failed build leaves the previous manifest in place and
two builds of the same artifacts write the same bytes.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import NamedTuple

MANIFEST = "manifest.json"
FORMAT = 1


class ListOf(NamedTuple):
    """Schema of a list whose every item matches ``item``, at least ``at_least`` of them."""
    item: object
    at_least: int = 0


class MapOf(NamedTuple):
    """Schema of an object (string keys) whose every value matches ``value``."""
    value: object


class OneOf(NamedTuple):
    """Schema of a value that is one of ``values``."""
    values: tuple


_NONE = type(None)
_ARG = {"name": str, "role": OneOf(("input", "scalar", "output")), "dtype": str,
        "shape?": ListOf(str), "kernel_shape?": ListOf(str), "default?": (int, float)}
_KERNEL = {"symbol": str, "variant": MapOf(bool), "rule?": (str, _NONE), "args": ListOf(_ARG)}

# What a library's entry (lowering.build writes it) holds that a loader relies on, field by field: a
# type or a tuple of types; {field: schema} for an object (a field ending in "?" may be absent, fields
# not named are free); ListOf, MapOf, OneOf.  Other fields are records for people and tools.
LIBRARY_ENTRY = {
    "op": str, "target": str, "dtype": str, "library": str, "sha256": str, "tvm": str, "tvm_ffi": str,
    "tvm_target": {"kind": str, "mtriple?": str, "mcpu?": str}, "isa_class?": (str, _NONE),
    "source?": str, "cache_key?": str, "definition_hash?": str, "schedule_hash?": str,
    "kernels": ListOf(_KERNEL, at_least=1),
}


def _got(where: str, expected: str, value) -> str:
    text = repr(value)
    return f"{where}: expected {expected}, got {type(value).__name__} {text[:60] + '...' if len(text) > 60 else text}"


def mismatch(value, schema=LIBRARY_ENTRY, where: str = "entry") -> str | None:
    """The first place where ``value`` does not match ``schema`` (by default a library's entry), as
    "<where>.kernels[0].variant.x: expected bool, got str 'abc'"; None when it matches."""
    if isinstance(schema, dict):
        if not isinstance(value, dict):
            return _got(where, "an object", value)
        for name, sub in schema.items():
            field = name.rstrip("?")
            if field not in value:
                if name.endswith("?"):
                    continue
                return f"{where}.{field}: missing"
            bad = mismatch(value[field], sub, f"{where}.{field}")
            if bad:
                return bad
        return None
    if isinstance(schema, ListOf):
        if not isinstance(value, list):
            return _got(where, "a list", value)
        if len(value) < schema.at_least:
            return f"{where}: expected at least {schema.at_least} item(s), got an empty list"
        return next((bad for k, item in enumerate(value) if (bad := mismatch(item, schema.item, f"{where}[{k}]"))),
                    None)
    if isinstance(schema, MapOf):
        if not isinstance(value, dict):
            return _got(where, "an object", value)
        return next((bad for k, v in value.items() if (bad := mismatch(v, schema.value, f"{where}.{k}"))), None)
    if isinstance(schema, OneOf):
        return None if value in schema.values else _got(where, f"one of {list(schema.values)}", value)
    types = schema if isinstance(schema, tuple) else (schema,)
    if isinstance(value, types) and not (isinstance(value, bool) and bool not in types):
        return None
    return _got(where, " or ".join("null" if t is _NONE else t.__name__ for t in types), value)


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
