"""The tuning records every build reads: where they are, which one stands for this machine, and
its knobs (``fusedgrad tune``, the search that writes them, is :mod:`fusedgrad.lowering.tuning`).

Records.  A record stands for a machine class, ``<target>-<ISA class>-<cores>c``
(e.g. ``llvm-x86-64-v3-2c``: the psABI level of the CPU builds are for, from
targets.llvm's CPU facts, and this machine's core count), not for one CPU
model.  Its folder holds per op and dtype meta-schedule's JSON database
(``<op>.<dtype>/database_{workload,tuning_record}.json``) and a summary
``<op>.<dtype>.json``: the knobs of the best record, the shape, the CPU it was
tuned on, the TVM version, and the tuned and hand times measured side by side
(interleaved medians) after the search.  ``use`` is true only when the tuned
schedule was faster by more than 3% (``tuning.MARGIN``); builds apply a record only then,
and the manifest says which record an artifact got.

Where records are.  The committed ones (generated/tuning) ship inside the
package (fusedgrad/generated/tuning, summaries only).  ``fusedgrad tune``
writes to $FUSEDGRAD_TUNING, else the source tree's generated/tuning when
fusedgrad runs from a checkout, else the user's folder
($XDG_DATA_HOME/fusedgrad/tuning): never into an installed package.  A build
takes the nearest record (``candidates``): this machine's class, else a lower
ISA class of the same architecture, the nearest core count first; the user's
records before the shipped ones; $FUSEDGRAD_TUNING, when set, is the only
place looked in.  A record from another TVM version, of another format, or
corrupt is an error naming the file.  Summary and database are written to a
temporary name and renamed, so a failed or interrupted run leaves the old
record whole.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
from pathlib import Path

from .. import schedules, targets
from ..targets import llvm
from . import naming, tvm_api

TUNING_ENV = "FUSEDGRAD_TUNING"
FORMAT = 2
_KEY = re.compile(r"^(?P<target>[a-z0-9_]+)-(?P<isa>[a-z0-9_.-]+)-(?P<cores>[0-9]+)c$")


def shipped_root() -> Path:
    """The records that come with fusedgrad: generated/tuning of the source tree, which an install
    carries as package data at the same place relative to the package (fusedgrad/generated/tuning)."""
    return Path(__file__).resolve().parents[1] / "generated" / "tuning"


def _checkout() -> bool:
    """Whether fusedgrad runs from its source tree (where the shipped records may be rewritten)."""
    return (Path(__file__).resolve().parents[1] / "pyproject.toml").exists()


def user_root() -> Path:
    """Records this user tuned on an installed fusedgrad: $XDG_DATA_HOME/fusedgrad/tuning
    (default ~/.local/share/fusedgrad/tuning)."""
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(base) / "fusedgrad" / "tuning"


def tuning_root() -> Path:
    """Where ``fusedgrad tune`` writes: $FUSEDGRAD_TUNING, else the source tree's generated/tuning when
    fusedgrad runs from one, else the user's records (never into an installed package)."""
    env = os.environ.get(TUNING_ENV)
    if env:
        return Path(env)
    return shipped_root() if _checkout() else user_root()


def search_roots() -> list[Path]:
    """Where builds look for records, first found first: $FUSEDGRAD_TUNING alone when it is set (a
    folder of one's own records, or an empty one for the hand schedules), else the user's records,
    then the shipped ones."""
    env = os.environ.get(TUNING_ENV)
    if env:
        return [Path(env)]
    roots = [user_root()] if not _checkout() else []
    return roots + [shipped_root()]


@dataclasses.dataclass(frozen=True)
class MachineClass:
    """What a record stands for: the target, the ISA class of the CPU builds are for
    (``llvm.CpuFacts.isa_class``) and this machine's core count."""

    target: str
    isa_class: str
    cores: int
    arch: str

    @property
    def key(self) -> str:
        """The folder name of the class's records, e.g. ``llvm-x86-64-v3-2c``."""
        return f"{self.target}-{self.isa_class}-{self.cores}c"


def machine_class(target_name: str) -> MachineClass:
    if target_name != "llvm":
        raise ValueError(f"--target: expected a target that runs on this machine ('llvm'), got {target_name!r}")
    info = targets.get(target_name)
    spec = info.tvm_target()
    arch = (spec.get("mtriple") or llvm.host_triple() or "").split("-")[0]
    return MachineClass(target_name, info.isa_class(spec), os.cpu_count() or 1, arch)


def target_key(target_name: str) -> str:
    """The machine class a record is for, e.g. ``llvm-x86-64-v4-2c``."""
    return machine_class(target_name).key


def record_path(op: str, target_name: str, dtype: str, root: Path | None = None) -> Path:
    """Where ``fusedgrad tune`` writes this machine class's record for (op, target, dtype)."""
    return (root or tuning_root()) / target_key(target_name) / f"{naming.artifact_stem(op, target_name, dtype)}.json"


@dataclasses.dataclass(frozen=True)
class Found:
    """A record a build uses: its summary, file, class folder, and whether that is this machine's own
    class (``exact``) or the nearest one (``want`` is the class looked for)."""

    record: dict
    path: Path
    key: str
    want: str
    exact: bool


def candidates(op: str, target_name: str, dtype: str) -> list[tuple[tuple, Path]]:
    """Every record that may stand for this machine, nearest first: the same ISA class before a
    lower one of the same architecture (a record tuned for a wider ISA than the build's is never
    taken: its knobs were measured with instructions this build lacks), then the nearest core count,
    then the earlier root."""
    want = machine_class(target_name)
    order = llvm.ISA_CLASSES.get(want.arch, (want.isa_class,))
    rank = order.index(want.isa_class) if want.isa_class in order else 0
    stem = naming.artifact_stem(op, target_name, dtype)
    found = []
    for i, root in enumerate(search_roots()):
        if not root.is_dir():
            continue
        for folder in root.iterdir():
            m = _KEY.match(folder.name)
            if not m or m["target"] != target_name or m["isa"] not in order[rank:]:
                continue
            path = folder / f"{stem}.json"
            if path.is_file():
                found.append(((order.index(m["isa"]) - rank, abs(int(m["cores"]) - want.cores), i), path))
    return sorted(found)


_FIELDS = {"format": int, "op": str, "target": str, "dtype": str, "target_key": str, "shape": dict,
           "knobs": dict, "tuned_ms": float, "hand_ms": float, "use": bool, "trials": int, "tvm": str}


def _read(path: Path, op: str, target_name: str, dtype: str) -> dict:
    """A record's summary, validated; ValueError naming the file when it is corrupt, of another
    format, from another TVM, or not the record of (op, target, dtype) and its folder's class."""
    try:
        rec = json.loads(path.read_text())
        if not isinstance(rec, dict):
            raise ValueError(f"expected a JSON object, got {type(rec).__name__}")
        if rec.get("format") != FORMAT:
            raise ValueError(f"format {rec.get('format')!r}, expected {FORMAT}")
        for field, kind in _FIELDS.items():
            if not isinstance(rec.get(field), (int, float) if kind is float else kind):
                raise ValueError(f"field {field!r}: expected {kind.__name__}, got {rec.get(field)!r}")
        want = {"op": op, "target": target_name, "dtype": dtype, "target_key": path.parent.name}
        wrong = {k: rec[k] for k, v in want.items() if rec[k] != v}
        if wrong:
            raise ValueError(f"it is the record of {wrong}, expected {want}")
        rule = schedules.rule_for(targets.get(target_name).schedules, op)
        rule.tuned(rec["knobs"])  # unknown knob names raise
    except (ValueError, TypeError, AttributeError) as e:
        raise ValueError(f"{path}: corrupt tuning record ({e}); delete it or run `fusedgrad tune` again") from None
    if rec["tvm"] != tvm_api.tvm_version():
        raise ValueError(f"{path}: a tuning record from TVM {rec['tvm']}, this is TVM {tvm_api.tvm_version()}; "
                         f"its times do not hold for this TVM's code: run `fusedgrad tune` again or delete it")
    return rec


def find(op: str, target_name: str, dtype: str) -> Found | None:
    """The record a build of (op, target, dtype) for this machine uses (``candidates``' first), or None."""
    if target_name != "llvm":
        return None
    found = candidates(op, target_name, dtype)
    if not found:
        return None
    path = found[0][1]
    want = target_key(target_name)
    return Found(_read(path, op, target_name, dtype), path, path.parent.name, want, path.parent.name == want)


def read_record(op: str, target_name: str, dtype: str, root: Path | None = None) -> dict | None:
    """This machine class's own record in ``root`` (default: where ``tune`` writes), or None."""
    if target_name != "llvm":
        return None
    path = record_path(op, target_name, dtype, root)
    return _read(path, op, target_name, dtype) if path.exists() else None


def knobs_for(op: str, target_name: str, dtype: str) -> dict | None:
    """Knobs a build applies: the nearest record's, when it measured faster than the hand schedule."""
    found = find(op, target_name, dtype)
    return dict(found.record["knobs"]) if found and found.record["use"] else None
