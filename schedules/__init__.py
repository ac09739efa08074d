"""Schedule rules: each says how to schedule one op on one target, or "not mine".

A rule's ``apply(func, target)`` returns a scheduled ``s_tir.Schedule`` or None.
Rules match on the op name fusedgrad puts on the PrimFunc (attribute
``fusedgrad.op``), never on IR pattern guessing; a rule for an op with
schedule flags (``OpDef.schedule_flags``) reads them from the PrimFunc too
(``ScheduleRule.flag``) and schedules each such entry point its own way.  A target's schedule package
exposes ``RULES`` in priority order; the first non-None result wins, and the
package ends with a fallback that accepts anything.
"""
from __future__ import annotations

import hashlib
import importlib

from . import tir_api


class ScheduleRule:
    """Base class: subclasses set ``op`` (or None for any op) and implement ``schedule``.

    A rule with tuning knobs lists them in ``KNOBS`` ({name: candidate values},
    the hand choice is the rule module's constant of the same name); ``schedule``
    (or the class attribute) reads each with ``self.knob(name)``, and ``tuned(values)`` is the same rule with
    some knobs fixed (what ``fusedgrad tune`` searches and a tuning record sets).
    """

    op: str | None = None
    KNOBS: dict = {}

    def __init__(self, knobs: dict | None = None):
        self.knobs = dict(knobs or {})
        unknown = sorted(set(self.knobs) - set(self.KNOBS))
        if unknown:
            raise ValueError(f"{type(self).__name__}: unknown knobs {unknown} (known: {sorted(self.KNOBS)})")

    def knob(self, name: str, target=None) -> int:
        """The knob's tuned value, else the hand choice: derived from ``target`` where the rule
        derives it (``derive``), else the rule module's constant of that name."""
        if name in self.knobs:
            return int(self.knobs[name])
        derived = self.derive(name, target)
        if derived is not None:
            return int(derived)
        if hasattr(type(self), name):  # a class attribute (e.g. a subclass's own block size)
            return int(getattr(type(self), name))
        return int(getattr(importlib.import_module(type(self).__module__), name))

    def derive(self, name: str, target) -> int | None:
        """A knob's hand choice taken from the machine ``target`` (a TVM target; None: the one builds
        run for), or None where the rule module's constant is the hand choice."""
        return None

    def defaults(self, target=None) -> dict:
        return {name: self.knob(name, target) for name in self.KNOBS}

    def space(self, target=None) -> dict:
        """The candidates ``fusedgrad tune`` searches for the machine ``target``: ``KNOBS`` (every
        value a record may hold), narrowed where a rule derives the sensible ones from the machine."""
        return {name: tuple(values) for name, values in self.KNOBS.items()}

    def tuned(self, knobs: dict) -> "ScheduleRule":
        return type(self)({**self.knobs, **knobs})

    def flag(self, sch, name: str) -> bool:
        """Whether the variant being scheduled sets the schedule flag ``name``
        (``OpDef.schedule_flags``; False where the PrimFunc carries none, e.g. in tuning)."""
        return name in tir_api.schedule_flags(sch.mod["main"])

    def apply(self, func, target):
        if self.op is not None and tir_api.op_name(func) != self.op:
            return None
        choices = self.alternatives(func, target)
        scheduled = []
        for schedule, _ in choices:
            sch = tir_api.schedule(func)
            schedule(sch, target)
            scheduled.append(sch)
        if len(scheduled) == 1:
            return scheduled[0]
        # the first schedule whose conditions hold runs; the last where none does
        return tir_api.schedule(tir_api.choose([(sch.mod["main"], conditions)
                                                for sch, (_, conditions) in zip(scheduled, choices)]))

    def alternatives(self, func, target) -> list:
        """The schedules of ``func``, chosen at every call on the host: ``[(schedule, conditions),
        ...]``, each ``schedule(sch, target)`` used where its ``conditions`` hold (``tir_api.choose``:
        ``multiple_of``, ``at_most``, ``aligned``) and no earlier one's do; the last one's
        conditions are None (it takes every other call).  One schedule,
        ``self.schedule``, unless a rule says otherwise."""
        return [(self.schedule, None)]

    def schedule(self, sch, target) -> None:  # pragma: no cover - abstract
        raise NotImplementedError


def block_names(sch) -> list[str]:
    """Names of the root's child blocks, in program order."""
    root = sch.get_sblock("root")
    return [sch.get(b).name_hint for b in sch.get_child_blocks(root)]


def rules(package: str) -> list[ScheduleRule]:
    return list(importlib.import_module(package).RULES)


def rule_for(package: str, op: str) -> ScheduleRule | None:
    """The rule of ``package`` written for ``op`` (None: only a generic rule takes it)."""
    return next((r for r in rules(package) if r.op == op), None)


def apply(package: str, func, target, knobs: dict | None = None):
    """Schedule ``func`` with the first rule of ``package`` that accepts it (``knobs``: for the op's own rule)."""
    for rule in rules(package):
        if knobs and rule.op is not None and rule.op == tir_api.op_name(func):
            rule = rule.tuned(knobs)
        sch = rule.apply(func, target)
        if sch is not None:
            return sch, type(rule).__name__
    raise ValueError(f"no schedule rule in {package} accepts op {tir_api.op_name(func)!r}")


def source_hash(package: str) -> str:
    """sha256 over every source file of the schedule package ``package`` (rules and their
    helpers) and over this package's own modules (the ScheduleRule contract every rule runs
    through, the helpers rules of several targets share), read from disk without importing the
    package (so a runtime-only TVM can check artifacts)."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(f"schedule package {package!r} not found")
    h = hashlib.sha256()
    for shared in sorted(Path(__file__).resolve().parent.glob("*.py")):
        h.update(b"schedules/" + shared.name.encode() + b"\0" + shared.read_bytes())
    for path in sorted(Path(next(iter(spec.submodule_search_locations))).glob("*.py")):
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()
