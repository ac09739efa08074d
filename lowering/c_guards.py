"""Loop reshaping around bounds checks, for lowering.c_emitter (analysis only: prints nothing).

The scheduled loop nests carry bounds checks (``if (row < M)``, ``select(d < D, ...)``) inside
their innermost loops: with them, gcc neither hoists nor vectorises.  The printer reshapes
loops around them without changing any arithmetic (the same statements run on the same
indices in the same order):
  hoist:  ``for v: if (c) S`` with c independent of v  ->  ``if (c) for v: S``;
  bound:  ``for v < n: if (v + r < E) S``  ->  ``for v < min(n, E - r): S``;
  split:  a tile loop ``for o`` whose checks ``c*o + (inner) < E`` hold for every o < E / c
          is printed twice: the full tiles without the checks, then the last tile with them;
  unswitch: ``for v: {A; if (c) B; C}`` with c independent of the loop (a reduction's
          ``if (k == 0) acc = 0``)  ->  ``if (c) for v: {A; B; C} else for v: {A; C}``.
This module finds the checks (``guard``, ``loop_bound``, ``tile_split``) and walks the loop-level
TIR (``stmts``, ``exprs``, ``walk_expr``) for them and for the DMA windows (lowering.c_spmd).
"""
from __future__ import annotations

import tvm_ffi
from tvm import sym, tirx

UNSWITCH_DEPTH = 2  # at most 2**2 copies of a loop


def stmts(s):
    """``s`` and every statement inside it, parents before children, in program order."""
    yield s
    kind = type(s).__name__
    if kind == "SeqStmt":
        for x in s.seq:
            yield from stmts(x)
    elif kind == "IfThenElse":
        yield from stmts(s.then_case)
        if s.else_case is not None:
            yield from stmts(s.else_case)
    elif kind in ("For", "AttrStmt", "LetStmt"):
        yield from stmts(s.body)


def exprs(s) -> list:
    """The expressions a statement itself evaluates (not those of the statements inside it)."""
    kind = type(s).__name__
    if kind == "IfThenElse":
        return [s.condition]
    if kind == "BufferStore":
        return list(s.indices) + [s.value]
    if kind in ("Bind", "LetStmt", "Evaluate"):
        return [s.value]
    return []


def if_conditions(s) -> list:
    """The (stripped) conditions of the if statements in ``s``."""
    return [strip(x.condition) for x in stmts(s) if type(x).__name__ == "IfThenElse"]


def strip(cond):
    if type(cond).__name__ == "Call" and str(getattr(cond.op, "name", "")).endswith(".likely"):
        return cond.args[0]
    return cond


def conjuncts(cond) -> list:
    cond = strip(cond)
    if type(cond).__name__ == "And":
        return conjuncts(cond.a) + conjuncts(cond.b)
    return [cond]


_EXPR_FIELDS = ("a", "b", "value", "condition", "true_value", "false_value")


def walk_expr(e, visit) -> None:
    visit(e)
    for f in _EXPR_FIELDS:
        child = getattr(e, f, None) if type(e).__name__ not in ("IntImm", "FloatImm", "StringImm", "Var") else None
        if child is not None and not isinstance(child, (int, float, str)):
            walk_expr(child, visit)
    for child in list(getattr(e, "args", None) or []) + list(getattr(e, "indices", None) or []):
        if not isinstance(child, (int, float, str)) and hasattr(child, "same_as"):
            walk_expr(child, visit)


def pure_index(e) -> bool:
    """An integer expression of variables and constants only (no loads, no calls)."""
    ok = [True]

    def visit(x):
        if type(x).__name__ in ("BufferLoad", "TensorLoad", "Call", "Let"):
            ok[0] = False
    walk_expr(e, visit)
    return ok[0]


def uses(e, var) -> bool:
    found = [False]

    def visit(x):
        if isinstance(x, tirx.Var) and x.same_as(var):
            found[0] = True
    walk_expr(e, visit)
    return found[0]


def member(c, conds) -> bool:
    return any(tvm_ffi.structural_equal(c, k) for k in conds)


NEUTRAL = ("AllocBuffer", "DeclBuffer")


def is_zero(e) -> bool:
    return isinstance(e, tirx.IntImm) and int(e) == 0


def guard(s) -> list:
    """Conditions (pure integer conjuncts) under which alone ``s`` has any effect."""
    kind = type(s).__name__
    if kind == "IfThenElse" and s.else_case is None:
        own = [c for c in conjuncts(s.condition) if pure_index(c)]
        return own + [c for c in guard(s.then_case) if not member(c, own)]
    if kind == "For":
        return [c for c in guard(s.body) if not uses(c, s.loop_var)]
    if kind == "AttrStmt":
        return guard(s.body)
    if kind == "SeqStmt":
        items = [x for x in s.seq if type(x).__name__ not in NEUTRAL]
        if not items:
            return []
        common = guard(items[0])
        for x in items[1:]:
            if not common:
                break
            other = guard(x)
            common = [c for c in common if member(c, other)]
        return common
    return []


def loop_bound(loop, cond):
    """``E - r`` when ``cond`` reads ``v + r < E`` for the loop's variable v, else None."""
    if type(cond).__name__ != "LT":
        return None
    coef = sym.detect_linear_equation(cond.b - cond.a, [loop.loop_var])
    if len(coef) != 2 or not isinstance(coef[0], tirx.IntImm) or int(coef[0]) != -1 or uses(coef[1], loop.loop_var):
        return None
    return sym.Analyzer().simplify(coef[1])


def inner_loops(s) -> list:
    """(variable, min, extent) of the loops in ``s`` with constant bounds."""
    return [(x.loop_var, int(x.min), int(x.extent)) for x in stmts(s) if type(x).__name__ == "For"
            and isinstance(x.min, tirx.IntImm) and isinstance(x.extent, tirx.IntImm)]


def defined(s) -> list:
    """Variables bound inside ``s`` (loop variables and lets)."""
    kinds = {"For": "loop_var", "Bind": "var", "LetStmt": "var"}
    return [getattr(x, kinds[type(x).__name__]) for x in stmts(s) if type(x).__name__ in kinds]


def conditions(s) -> list:
    """Every condition conjunct in ``s``: of its ifs, selects and if_then_else calls."""
    out = []

    def visit(x):
        kind = type(x).__name__
        if kind == "Select":
            out.extend(conjuncts(x.condition))
        elif kind == "Call" and str(getattr(x.op, "name", "")).endswith(".if_then_else"):
            out.extend(conjuncts(x.args[0]))
    for x in stmts(s):
        if type(x).__name__ == "IfThenElse":
            out.extend(conjuncts(x.condition))
        for e in exprs(x):
            walk_expr(e, visit)
    return out


def tile_split(loop, known=lambda c: False):
    """(E, c, conditions): every listed condition ``c*o + inner < E`` holds for loop index o < E // c."""
    o = loop.loop_var
    inner = inner_loops(loop.body)
    ivars = [v for v, _, _ in inner]
    local = defined(loop.body)
    key, found = None, []
    for cond in conditions(loop.body):
        if (type(cond).__name__ != "LT" or not pure_index(cond) or not uses(cond, o) or member(cond, found)
                or known(cond)):
            continue
        coef = sym.detect_linear_equation(cond.a - cond.b, [o] + ivars)
        if len(coef) != len(ivars) + 2 or not all(isinstance(k, tirx.IntImm) for k in coef[:-1]):
            continue
        c, rest, base = int(coef[0]), [int(k) for k in coef[1:-1]], coef[-1]
        if c <= 0 or any(k < 0 for k in rest) or any(uses(base, v) for v in [o] + local):
            continue
        if sum(k * (lo + n - 1) for k, (_, lo, n) in zip(rest, inner)) > c - 1 or any(
                k and lo < 0 for k, (_, lo, _) in zip(rest, inner)):
            continue
        bound = sym.Analyzer().simplify(-base)
        if key is None:
            key = (bound, c)
        if key[1] == c and tvm_ffi.structural_equal(key[0], bound):
            found.append(cond)
    return (key[0], key[1], found) if found else None
