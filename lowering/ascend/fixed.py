"""The Ascend target's fixed C/C++ sources and templates (targets/ascend/), as the packages use them.

A file may open with a ``/* ... */`` comment saying what it is; that comment is not copied.
Templates (``*.in``) have ``@NAME@`` fields, all of which must be filled (lowering.templates, the
renderer every target's fixed sources go through).
"""
from __future__ import annotations

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
