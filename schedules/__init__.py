"""Schedule rules: each says how to schedule one op on one target, or "not mine".

A rule's ``apply(func, target)`` returns a scheduled ``s_tir.Schedule`` or None.
Rules match on the op name fusedgrad puts on the PrimFunc (attribute
``fusedgrad.op``), never on IR pattern guessing.  A target's schedule package
exposes ``RULES`` in priority order; the first non-None result wins, and the
package ends with a fallback that accepts anything.
"""
from __future__ import annotations

import hashlib
import importlib
import inspect

from ..lowering import tvm_api


class ScheduleRule:
    """Base class: subclasses set ``op`` (or None for any op) and implement ``schedule``."""

    op: str | None = None

    def apply(self, func, target):
        if self.op is not None and tvm_api.op_name(func) != self.op:
            return None
        sch = tvm_api.schedule(func)
        self.schedule(sch, target)
        return sch

    def schedule(self, sch, target) -> None:  # pragma: no cover - abstract
        raise NotImplementedError


def block_names(sch) -> list[str]:
    """Names of the root's child blocks, in program order."""
    root = sch.get_sblock("root")
    return [sch.get(b).name_hint for b in sch.get_child_blocks(root)]


def rules(package: str) -> list[ScheduleRule]:
    return list(importlib.import_module(package).RULES)


def apply(package: str, func, target):
    """Schedule ``func`` with the first rule of ``package`` that accepts it."""
    for rule in rules(package):
        sch = rule.apply(func, target)
        if sch is not None:
            return sch, type(rule).__name__
    raise ValueError(f"no schedule rule in {package} accepts op {tvm_api.op_name(func)!r}")


def source_hash(package: str) -> str:
    """sha256 over the source of every rule module in ``package`` and the package's own files
    (helpers the rules import included)."""
    from pathlib import Path

    h = hashlib.sha256()
    for rule in rules(package):
        h.update(inspect.getsource(inspect.getmodule(type(rule))).encode())
    root = Path(importlib.import_module(package).__file__).parent
    for path in sorted(root.glob("*.py")):
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()
