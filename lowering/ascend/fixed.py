"""The Ascend target's fixed C/C++ sources and templates (targets/ascend/), as the packages use them.

A file may open with a ``/* ... */`` comment saying what it is; that comment is not copied.
Templates (``*.in``) have ``@NAME@`` fields, all of which must be filled (lowering.templates, the
renderer every target's fixed sources go through).
"""
from __future__ import annotations

import functools

from ... import targets
from .. import templates

FIELD = templates.FIELD


def text(name: str) -> str:
    """The file ``name`` of targets/ascend/, less its opening ``/* ... */`` comment (lowering.templates)."""
    return templates.text("ascend", name)


def render(name: str, **fields: str) -> str:
    """The template ``name`` with every ``@FIELD@`` replaced by ``fields[FIELD]`` (lowering.templates)."""
    return templates.render("ascend", name, **fields)


def facts() -> dict:
    """The Ascend target's machine facts (targets/ascend)."""
    return dict(targets.get("ascend").facts)


@functools.lru_cache(maxsize=None)
def _sections(name: str) -> dict[str, str]:
    sections: dict[str, list[str]] = {}
    for line in text(name).splitlines():
        if line.startswith("//@ "):
            sections[line[4:]] = []
        else:
            next(reversed(sections.values())).append(line)
    return {k: "\n".join(lines) for k, lines in sections.items()}


def section(name: str, part: str, **fields: str) -> str:
    """The section ``part`` of the template ``name`` (sections each open with a line ``//@ <part>`` and run
    to the next), every ``@FIELD@`` replaced by ``fields[FIELD]``."""
    body = _sections(name)[part]
    missing = sorted(set(m[1:-1] for m in FIELD.findall(body)) - set(fields))
    if missing:
        raise ValueError(f"{name} {part}: no value for the fields {missing}")
    return FIELD.sub(lambda m: fields[m.group(0)[1:-1]], body)
