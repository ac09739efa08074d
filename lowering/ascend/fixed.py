"""The Ascend target's fixed C/C++ sources and templates (targets/ascend/), as the packages use them.

A file may open with a ``/* ... */`` comment saying what it is; that comment is not copied.
Templates (``*.in``) have ``@NAME@`` fields, all of which must be filled.
"""
from __future__ import annotations

import functools
import re

from ... import targets

FIELD = re.compile(r"@[A-Z0-9_]+@")


@functools.lru_cache(maxsize=None)
def text(name: str) -> str:
    """The file ``name`` of targets/ascend/, less its opening ``/* ... */`` comment."""
    body = (targets.runtime_source_dir(targets.get("ascend")) / name).read_text()
    if body.startswith("/*"):
        body = body[body.index("*/\n") + 3:]
    return body


def render(name: str, **fields: str) -> str:
    """The template ``name`` with every ``@FIELD@`` replaced by ``fields[FIELD]``."""
    body = text(name)
    missing = sorted(set(m[1:-1] for m in FIELD.findall(body)) - set(fields))
    if missing:
        raise ValueError(f"{name}: no value for the fields {missing}")
    return FIELD.sub(lambda m: fields[m.group(0)[1:-1]], body)


def facts() -> dict:
    """The Ascend target's machine facts (targets/ascend)."""
    return dict(targets.get("ascend").facts)
