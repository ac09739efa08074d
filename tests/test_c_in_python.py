"""C, C++ and CUDA live in files (targets/, benchmarks/, tests/), not in Python strings.

What Python may still hold: single printed expressions and statements of the printers (a string
with one line of C: ``f"  if (!{name}) return {err};"``).  A string literal with two or more lines
of C is a block of C written in Python, and there is none; the single statements are counted, and
the count may only fall (raise SINGLE_STATEMENTS deliberately, with the printer that needs it).
"""
from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SINGLE_STATEMENTS = 270
"""Python strings (outside tests/) holding exactly one line of C, measured at the last change."""

# a line of C: a preprocessor directive or a comment line, or a line ending a statement or a block
C_LINE = re.compile(r"^\s*(#\s*(include|define|if|ifdef|ifndef|endif|else|pragma)\b|//)|[;{}]\s*(//.*)?$")


def _strings(tree: ast.AST):
    """(node, text) of every string literal but docstrings; an f-string as one text."""
    skip: set[int] = set()
    for n in ast.walk(tree):
        body = getattr(n, "body", None)
        if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body \
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            skip.add(id(body[0].value))
        if isinstance(n, ast.JoinedStr):
            skip.update(id(v) for v in n.values)
            skip.update(id(v.format_spec) for v in n.values if isinstance(v, ast.FormattedValue) and v.format_spec)
    for n in ast.walk(tree):
        if id(n) in skip:
            continue
        if isinstance(n, ast.JoinedStr):
            yield n, "".join(v.value if isinstance(v, ast.Constant) else "X" for v in n.values)
        elif isinstance(n, ast.Constant) and isinstance(n.value, str):
            yield n, n.value


def c_in_strings(root: Path = ROOT) -> tuple[list[str], int]:
    """(the string literals with two or more lines of C, as "file:line: n lines"; how many hold one)."""
    files = subprocess.run(["git", "-C", str(root), "ls-files", "*.py"], capture_output=True, text=True,
                           check=True).stdout.split()
    blocks, singles = [], 0
    for name in files:
        if name.startswith("tests/"):
            continue
        for node, text in _strings(ast.parse((root / name).read_text())):
            lines = [line for line in text.splitlines() if C_LINE.search(line)]
            if len(lines) >= 2:
                blocks.append(f"{name}:{node.lineno}: {len(lines)} lines")
            singles += len(lines) == 1
    return blocks, singles


def test_no_block_of_c_is_written_in_a_python_string():
    blocks, singles = c_in_strings()
    assert not blocks, "C written in Python strings (move it to a file):\n" + "\n".join(blocks)
    assert singles <= SINGLE_STATEMENTS, f"{singles} single C statements in Python strings, the budget is " \
                                         f"{SINGLE_STATEMENTS}: print C from a file or lower the count"


@pytest.mark.parametrize("text,block", [
    ('X = """int f(void) {\n  return 1;\n}\n"""\n', True),
    ('X = ("#include <a.h>\\n"\n     "static int y;\\n")\n', True),
    ('X = f"  if (!{p}) return {e};"\n', False),
    ('"""A docstring.\n\n    int f(void) {\n    return 1;\n    }\n"""\n', False),
])
def test_the_count_sees_c_blocks_and_spares_single_statements_and_docstrings(tmp_path, text, block):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "m.py").write_text(text)
    subprocess.run(["git", "-C", str(tmp_path), "add", "m.py"], check=True)
    blocks, singles = c_in_strings(tmp_path)
    assert (len(blocks), singles) == ((1, 0) if block else (0, 1 if "if (" in text else 0)), (blocks, singles)
