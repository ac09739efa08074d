"""Load compiled artifacts through their manifest, and the on-disk kernel cache.

``load(path)`` reads ``path/manifest.json``, chooses for each (op, target,
dtype) the library of the best ISA class this CPU runs (a folder may hold one
per class: ``targets.llvm.ISA_CLASSES`` ranks them, the target's
``cannot_run`` says which this machine cannot run, and those are never
loaded), checks it (manifest format and every field's type, TVM and tvm-ffi
versions, sha256 of the library, every entry symbol present) and returns a
:class:`Library` of callable kernels.  ``artifact(op, dtype)`` is what the
public API uses: it looks in the artifact directories listed in
``$FUSEDGRAD_ARTIFACTS`` (``os.pathsep``-separated; what ``fusedgrad
generate`` wrote, possibly on another machine -- an entry is taken when its
definition and schedule hashes are this source's), then in this process, then
in the disk cache (``$FUSEDGRAD_CACHE``, default ``~/.cache/fusedgrad``) under
a key made of op, target, dtype, definition/schedule/lowering hashes and TVM
version, and builds into the cache only when nothing usable is there (a
damaged entry is rebuilt, with a WARNING; of processes building one key at
once, all use the first entry put in place: ``_write_slot``).  ``install``
puts an artifact ``fusedgrad generate`` built into the slot of its key, so the
API uses it without building.  A build is logged at INFO on the "fusedgrad"
logger (silent unless the application configures logging).
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Mapping

# fusedgrad.team first: it sets TVM's thread-pool variables before TVM is imported
from . import cache_files, team  # noqa: E402,I001
from .lowering import build as _build  # noqa: E402
from .lowering import manifest as _manifest  # noqa: E402
from .lowering import naming  # noqa: E402
from .lowering import tvm_api  # noqa: E402

__all__ = ["load", "best_runnable_entry", "load_entry", "Library", "Artifact", "Kernel", "artifact", "install",
           "cache_dir", "ArtifactError"]

log = logging.getLogger("fusedgrad")


class ArtifactError(RuntimeError):
    """An artifact cannot be used here (version mismatch, corrupt file, missing symbol)."""


class Kernel:
    """One entry point: ``kernel(*args)`` with args in the manifest's order."""

    def __init__(self, func, spec: Mapping):
        self._func = func
        self.func = func  # the bare entry point, for hot loops that pass exactly ``args``
        self.symbol = spec["symbol"]
        self.variant = dict(spec["variant"])
        self.args = list(spec["args"])

    def __call__(self, *args):
        if len(args) != len(self.args):
            raise TypeError(f"{self.symbol}: expected {len(self.args)} arguments, got {len(args)}")
        self._func(*args)

    def __repr__(self) -> str:
        return f"Kernel({self.symbol}({', '.join(a['name'] for a in self.args)}))"


class Artifact:
    """One loaded library: every variant of one op for one target and dtype."""

    def __init__(self, entry: Mapping, module, path: Path):
        self.entry = dict(entry)
        self.path = path
        self.module = module
        self.kernels = {k["symbol"]: Kernel(module[k["symbol"]], k) for k in entry["kernels"]}

    @property
    def key(self) -> tuple[str, str, str]:
        return self.entry["op"], self.entry["target"], self.entry["dtype"]

    @property
    def isa_class(self) -> str | None:
        """The ISA class of the library chosen (e.g. "x86-64-v4"; None for a target without classes)."""
        return self.entry.get("isa_class")

    def kernel(self, variant: Mapping[str, bool]) -> Kernel:
        for k in self.kernels.values():
            if k.variant == dict(variant):
                return k
        have = "; ".join(str(k.variant) for k in self.kernels.values())
        raise KeyError(f"{self.key}: no kernel for variant {dict(variant)}; its variants: {have}")


class Library(dict):
    """Loaded artifacts keyed by (op, target, dtype)."""

    def kernel(self, op: str, dtype: str, variant: Mapping[str, bool] | None = None, target: str = "llvm") -> Kernel:
        try:
            art = self[(op, target, dtype)]
        except KeyError:
            have = ", ".join(str(k) for k in sorted(self)) or "none"
            raise KeyError(f"no artifact for (op, target, dtype) = ({op!r}, {target!r}, {dtype!r}); "
                           f"this library has {have}") from None
        return art.kernel(variant or {})


def _check(entry: Mapping, path: Path) -> None:
    where = f"{path} ({entry.get('op')}, {entry.get('target')}, {entry.get('dtype')})"
    for field, have in (("tvm", tvm_api.tvm_version()), ("tvm_ffi", tvm_api.tvm_ffi_version())):
        if entry.get(field) != have:
            raise ArtifactError(f"{where}: built with {field} {entry.get(field)}, this process has {have}; rebuild it")
    lib = path / entry["library"]
    if lib.is_symlink():
        raise ArtifactError(f"{where}: library {lib} is a symbolic link (a library must be a file of the folder)")
    if not lib.exists():
        raise ArtifactError(f"{where}: library {lib} is missing")
    if not lib.is_file():
        raise ArtifactError(f"{where}: library {lib} is not a file")
    digest = _build.file_sha256(lib)
    if digest != entry["sha256"]:
        raise ArtifactError(f"{where}: sha256 of {lib.name} is {digest}, manifest says {entry['sha256']}")


def _read(path: Path) -> list[dict]:
    """The entries of ``path/manifest.json``; ArtifactError naming the file when it is missing,
    unreadable, of another format, or an entry does not match the schema of a library's entry
    (lowering.manifest.LIBRARY_ENTRY: a field missing or of another type) or names a file outside the
    folder."""
    manifest_path = path / _build.MANIFEST
    if not manifest_path.exists():
        raise ArtifactError(f"{manifest_path} not found: not an artifact directory")
    try:
        manifest = json.loads(manifest_path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ArtifactError(f"{manifest_path}: not a readable manifest ({e})") from None
    if not isinstance(manifest, dict):
        raise ArtifactError(f"{manifest_path}: expected a JSON object, got {type(manifest).__name__}")
    if manifest.get("format") != _build.FORMAT:
        raise ArtifactError(f"{manifest_path}: manifest format {manifest.get('format')}, expected {_build.FORMAT}")
    entries = manifest.get("artifacts")
    if not isinstance(entries, list):
        raise ArtifactError(f"{manifest_path}: expected a list under 'artifacts', got {type(entries).__name__}")
    for k, e in enumerate(entries):
        bad = _manifest.mismatch(e, where=f"artifacts[{k}]")
        if bad:
            raise ArtifactError(f"{manifest_path}: {bad}")
        for field, name in ((f, e[f]) for f in ("library", "source") if f in e):
            if Path(name).name != name or name in ("", ".", ".."):
                raise ArtifactError(f"{manifest_path}: artifacts[{k}] {field} {name!r} is not a file name "
                                    "in the folder (libraries run as native code: none from elsewhere)")
    return entries


def load(path: str | os.PathLike, targets: tuple[str, ...] = ("llvm",)) -> Library:
    """Load, for each (op, target, dtype) of ``path/manifest.json`` whose target is in ``targets``, the
    library of the best ISA class this machine runs (:func:`best_runnable_entry`)."""
    path = Path(path)
    groups: dict[tuple[str, str, str], list[dict]] = {}
    for entry in _read(path):
        if entry["target"] in targets:
            groups.setdefault((entry["op"], entry["target"], entry["dtype"]), []).append(entry)
    lib = Library()
    for key, entries in groups.items():
        lib[key] = load_entry(best_runnable_entry(entries, path), path)
    return lib


def _rank(entry: Mapping) -> int:
    """Where an entry's ISA class stands, best first (``targets.llvm.ISA_CLASSES``); no class: last."""
    from .targets.llvm import ISA_CLASSES

    order = [c for classes in ISA_CLASSES.values() for c in classes]
    cls = entry.get("isa_class")
    return order.index(cls) if cls in order else len(order)


def best_runnable_entry(entries: list[Mapping], path: str | os.PathLike) -> Mapping:
    """Of one (op, target, dtype)'s entries, the one of the best ISA class this machine can run; the
    others are skipped, not loaded.  ArtifactError naming every library and why when none runs here."""
    path, why = Path(path), {}
    for entry in sorted(entries, key=lambda e: (_rank(e), e["library"])):
        reason = _cannot_run(entry, path / entry["library"])
        if reason is None:
            return entry
        why[entry["library"]] = reason
    e = entries[0]
    raise ArtifactError(f"{path} ({e['op']}, {e['target']}, {e['dtype']}): no library this machine can run: "
                        + "; ".join(f"{path / lib}: {reason}" for lib, reason in why.items()))


def load_entry(entry: Mapping, path: str | os.PathLike) -> Artifact:
    """Check one entry of ``path``'s manifest (this machine runs it, versions, sha256, device runtime,
    entry symbols) and load its library."""
    path = Path(path)
    library = path / entry["library"]
    why = _cannot_run(entry, library)
    if why:
        raise ArtifactError(f"{library}: {why}")
    try:
        _check(entry, path)
        _device_runtime(entry, library)
        why = _elf_truncated(library)
    except OSError as e:  # unreadable, or gone while read
        raise ArtifactError(f"{library}: cannot be read: {e}") from None
    if why:
        raise ArtifactError(f"{library}: {why}")
    try:
        module = tvm_api.load_module(str(library))
    except Exception as e:  # TVM's own error types: a file the loader refuses
        raise ArtifactError(f"{library}: cannot be loaded: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
    missing = [k["symbol"] for k in entry["kernels"] if not _has_function(module, k["symbol"])]
    if missing:
        raise ArtifactError(f"{library}: entry symbols missing: {missing}")
    if entry["target"] == "llvm":
        team.adopt(library)  # its parallel regions run on the process's OpenMP team (fusedgrad.team)
    return Artifact(entry, module, path)


def _elf_truncated(library: Path) -> str | None:
    """Why an ELF file is cut short (a segment or the section table past its end), which the dynamic
    loader would only find by faulting (SIGBUS) on the missing pages; None when whole or not ELF."""
    import struct

    size = library.stat().st_size
    with open(library, "rb") as f:
        head = f.read(64)
        if head[:4] != b"\x7fELF" or len(head) < 52:
            return None if head[:4] != b"\x7fELF" else f"truncated ELF header ({size} bytes)"
        wide, order = head[4] == 2, "<" if head[5] == 1 else ">"
        if wide:
            phoff, shoff = struct.unpack_from(order + "QQ", head, 32)
            phentsize, phnum, shentsize, shnum = struct.unpack_from(order + "HHHH", head, 54)
        else:
            phoff, shoff = struct.unpack_from(order + "II", head, 28)
            phentsize, phnum, shentsize, shnum = struct.unpack_from(order + "HHHH", head, 42)
        if phoff + phnum * phentsize > size or shoff + shnum * shentsize > size:
            return f"truncated: its headers reach past its {size} bytes"
        f.seek(phoff)
        table = f.read(phnum * phentsize)
        for k in range(phnum):
            if wide:
                ptype, _, offset, _, _, filesz = struct.unpack_from(order + "IIQQQQ", table, k * phentsize)
            else:
                ptype, offset, _, _, filesz = struct.unpack_from(order + "IIIII", table, k * phentsize)
            if ptype == 1 and offset + filesz > size:  # PT_LOAD
                return f"truncated: a loadable segment ends at byte {offset + filesz} of {size}"
    return None


def _target_record(entry: Mapping, library: Path):
    """The record of the entry's target; an entry of a target no record names is an ArtifactError
    naming the file."""
    from . import targets as _targets

    try:
        return _targets.get(entry["target"])
    except ValueError as e:
        raise ArtifactError(f"{library}: {e}") from None


def _cannot_run(entry: Mapping, library: Path) -> str | None:
    """Why this machine cannot run ``library`` -- built for another architecture or for instructions
    this CPU lacks, as the target's record judges -- or None when it can."""
    info = _target_record(entry, library)
    return info.cannot_run(entry.get("tvm_target") or {}) if info.cannot_run else None


def _device_runtime(entry: Mapping, library: Path) -> None:
    """Make TVM's runtime for the artifact's device available (for CUDA: libcudart and the driver);
    host code needs none.  ArtifactError naming the file when it cannot be loaded."""
    info = _target_record(entry, library)
    try:
        kind = info.tvm_target()["kind"]
    except ValueError as e:
        raise ArtifactError(f"{library}: {e}") from None
    if tvm_api.runs_on_host(kind):
        return
    try:
        tvm_api.load_device_runtime(kind)
    except OSError as e:
        raise ArtifactError(f"{library}: cannot load a {entry['target']} artifact in this process: {e}") from None


def _has_function(module, symbol: str) -> bool:
    try:
        module[symbol]
    except Exception:  # TVM raises its own error type for a missing function
        return False
    return True


def cache_dir() -> Path:
    return Path(os.environ.get("FUSEDGRAD_CACHE") or Path.home() / ".cache" / "fusedgrad")


_LOADED: dict[tuple[str, str, str, str], Artifact] = {}
_LOCK = threading.Lock()


ARTIFACTS_ENV = "FUSEDGRAD_ARTIFACTS"
_PREBUILT: dict[tuple[str, str, str, str], Artifact | None] = {}


def _prebuilt(op: str, target: str, dtype: str) -> Artifact | None:
    """The (op, target, dtype) artifact in $FUSEDGRAD_ARTIFACTS built from this very source, if any: of
    the first directory holding one, the library of the best ISA class this machine runs (ArtifactError
    when it runs none of them)."""
    from . import schedules as _schedules
    from . import targets as _targets

    dirs = [d for d in os.environ.get(ARTIFACTS_ENV, "").split(os.pathsep) if d]
    if not dirs:
        return None
    memo = (op, target, dtype, os.environ[ARTIFACTS_ENV])
    if memo in _PREBUILT:
        return _PREBUILT[memo]
    want = {"definition_hash": _build.definition_hash(op),
            "schedule_hash": _schedules.source_hash(_targets.get(target).schedules)}
    found = None
    for d in dirs:
        manifest = Path(d) / _build.MANIFEST
        if not manifest.exists():
            raise ArtifactError(f"{ARTIFACTS_ENV}: expected artifact directories, {d} has no {_build.MANIFEST}")
        entries = [e for e in _read(Path(d)) if (e["op"], e["target"], e["dtype"]) == (op, target, dtype)
                   and all(e.get(k) == v for k, v in want.items())]
        if entries:  # the best ISA class this machine runs, as load chooses
            found = load_entry(best_runnable_entry(entries, Path(d)), Path(d))
            break
    _PREBUILT[memo] = found
    return found


def _not_as_built(entry: Mapping, slot: Path) -> str | None:
    """Why a cache slot's entry is not what this source builds under the slot's key (another key, or
    kernels -- symbols, variants, arguments -- other than the op's definition gives), or None."""
    from . import te_defs

    if entry.get("cache_key") != slot.name:
        return f"its cache_key is {entry.get('cache_key')!r}, the slot's {slot.name!r}"
    op, dtype = te_defs.get(entry["op"]), entry["dtype"]
    want = {naming.entry_symbol(entry["op"], dtype, v): (dict(v), _build.arg_specs(op, v, dtype))
            for v in op.variants_for(entry["target"])}
    have = {k["symbol"]: (k["variant"], k["args"]) for k in entry["kernels"]}
    if have.keys() != want.keys() or len(entry["kernels"]) != len(want):
        return f"its kernels are {[k['symbol'] for k in entry['kernels']]}, the op's are {sorted(want)}"
    bad = [symbol for symbol in want if have[symbol] != want[symbol]]
    return f"kernels {bad}: variant or arguments other than the op's definition gives" if bad else None


def _open_slot(slot: Path, key: tuple[str, str, str]) -> tuple[Artifact | None, str | None]:
    """Cache slot ``slot``'s artifact ``key``: (artifact, None) when it loads and is what this source
    builds under the slot's key; (None, None) when there is no slot; (None, why) when it is damaged."""
    if not os.path.lexists(slot):
        return None, None
    if slot.is_symlink() or not slot.is_dir():
        return None, f"it is {'a symbolic link' if slot.is_symlink() else 'not a folder'}"
    try:
        art = load(slot, targets=(key[1],)).get(key)
    except ArtifactError as e:
        return None, str(e)
    why = _not_as_built(art.entry, slot) if art is not None else f"holds no {key} artifact"
    return (None, f"{slot / _build.MANIFEST}: {why}") if why else (art, None)


def _write_slot(slot: Path, fill, key: tuple[str, str, str]) -> Artifact | None:
    """Write the cache slot ``slot`` whole: ``fill(tmp)`` writes a temporary folder beside it, which is
    renamed into place, so a slot is never half-written.  The slot is checked and replaced under the
    cache's lock: one that another process put there meanwhile and that loads is used and never
    removed (that process may be loading it): returns its artifact, ours is dropped; a damaged one is
    renamed aside and removed.  None when ours was put there."""
    slot.parent.mkdir(parents=True, exist_ok=True)
    cache_files.remove_abandoned_builds(slot.parent, slot.name)
    with cache_files.staging(slot) as tmp:
        fill(tmp)
        with cache_files.locked(slot.parent):
            art, _ = _open_slot(slot, key)
            if art is not None:
                return art
            if os.path.lexists(slot):
                cache_files.discard(slot)
            try:
                os.replace(tmp, slot)
            except OSError as e:  # without the lock, another process may have put its slot first
                art, _ = _open_slot(slot, key)
                if art is None:
                    raise ArtifactError(f"{slot}: cannot put the build there: {e}") from None
                return art
            return None


def _warn_damaged(slot: Path, why: str | None) -> None:
    if why:
        log.warning("cache entry %s is unusable, writing it again: %s", slot, why)


def install(entry: Mapping, path: str | os.PathLike) -> bool:
    """Put the artifact of ``entry`` (an entry of ``path``'s manifest that lowering.build wrote, as
    ``fusedgrad generate`` does) into the disk cache slot of its ``cache_key``: its library (and device
    source, if any) and a manifest of that entry alone, as :func:`artifact` would have built it.  A
    slot that already loads is left as it is.  Returns whether the slot was written.

    The slot is named by the key lowering.build recorded when it built the artifact, which stands for
    every input of its bytes; a caller that wants the API to use the artifact checks that this key is
    the one :func:`artifact` computes (``fusedgrad generate`` does: not so for another CPU's build).
    ArtifactError when the library does not match its entry."""
    path, key = Path(path), (entry["op"], entry["target"], entry["dtype"])
    slot = cache_dir() / entry["cache_key"]
    with _LOCK:
        art, why = _open_slot(slot, key)
        if art is not None:
            return False
        _warn_damaged(slot, why)

        def fill(tmp: Path) -> None:
            for name in (entry["library"], entry.get("source")):
                if name:
                    shutil.copyfile(path / Path(name).name, tmp / Path(name).name)
            try:
                _check(entry, tmp)  # the copy is the library its entry describes
            except ArtifactError as e:
                raise ArtifactError(f"{e}; not put into the cache") from None
            _build.update_manifest(tmp, dict(entry))

        return _write_slot(slot, fill, key) is None


def _build_once(op: str, target: str, dtype: str, slot: Path) -> Artifact:
    """Build (op, target, dtype) into its missing or damaged cache slot holding the key's build lock."""
    key = (op, target, dtype)
    with cache_files.building(slot.parent, slot.name):  # which makes the cache folder
        art, why = _open_slot(slot, key)
        if art is not None:  # another process built it meanwhile
            return art
        _warn_damaged(slot, why)
        log.info("building %s %s %s into %s (first use; `fusedgrad generate` builds ahead)", op, target, dtype, slot)
        t0 = time.perf_counter()
        art = (_write_slot(slot, lambda tmp: _build.build(op, target, dtype, tmp), key)
               or load(slot, targets=(target,))[key])
        log.info("built %s %s %s in %.1f s", op, target, dtype, time.perf_counter() - t0)
        return art


def artifact(op: str, dtype: str, target: str = "llvm") -> Artifact:
    """The artifact for (op, target, dtype): from $FUSEDGRAD_ARTIFACTS, this process,
    the disk cache (which ``fusedgrad generate`` fills), or a fresh build."""
    with _LOCK:
        prebuilt = _prebuilt(op, target, dtype)
    if prebuilt is not None:
        return prebuilt
    key = _build.cache_key(op, target, dtype)
    with _LOCK:
        if (op, target, dtype, key) in _LOADED:
            return _LOADED[(op, target, dtype, key)]
        slot = cache_dir() / key
        art, why = _open_slot(slot, (op, target, dtype))
        if art is None and tvm_api.has_compiler():
            art = _build_once(op, target, dtype, slot)
        elif art is None:
            where = os.environ.get(ARTIFACTS_ENV) or "unset"
            raise ArtifactError(
                f"{op} {target} {dtype}: no artifact built from this source in ${ARTIFACTS_ENV} ({where}) or "
                f"the cache ({slot}), and this TVM has no compiler library to build one (a runtime-only "
                f"install): build the artifacts from this source where TVM's compiler is "
                f"(`fusedgrad generate --target {target}`, or benchmarks/gpu_check.py stage) and point "
                f"${ARTIFACTS_ENV} at them")
        else:
            log.debug("%s %s %s from the cache, %s", op, target, dtype, slot)
        _LOADED[(op, target, dtype, key)] = art
        return art
