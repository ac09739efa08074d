"""The targets' fixed C/C++ sources and templates (``targets/<target>/``), read and filled in one way.

A file may open with a ``/* ... */`` comment saying what it is (for a template: what fills it);
that comment is not copied.  Templates (``*.in``) have ``@NAME@`` fields, all of which must be
filled.  lowering.dsp and lowering.ascend write their fixed scaffolding through these; only the
kernels themselves come from the printers.
"""
from __future__ import annotations

import functools
import re

from .. import targets

FIELD = re.compile(r"@[A-Z0-9_]+@")


@functools.lru_cache(maxsize=None)
def text(target: str, name: str) -> str:
    """The file ``name`` of the target's source folder (targets/<target>/), less its opening
    ``/* ... */`` comment."""
    body = (targets.runtime_source_dir(targets.get(target)) / name).read_text()
    if body.startswith("/*"):
        body = body[body.index("*/\n") + 3:]
    return body


def render(target: str, name: str, **fields: str) -> str:
    """The template ``name`` of targets/<target>/ with every ``@FIELD@`` replaced by ``fields[FIELD]``."""
    body = text(target, name)
    missing = sorted(set(m[1:-1] for m in FIELD.findall(body)) - set(fields))
    if missing:
        raise ValueError(f"{name}: no value for the fields {missing}")
    return FIELD.sub(lambda m: fields[m.group(0)[1:-1]], body)
