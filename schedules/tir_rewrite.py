"""Rewrites of TIR as IR (TVM 0.27 has no ``tirx.stmt_functor``: ``tvm_ffi.structural_walk`` and
``structural_map`` visit and rebuild any node), for schedules/tir_api.py and lowering/tvm_api.py: variables and buffers
replaced, the buffers a function stores to and the scopes it uses, and the schedules of
``tir_api.choose`` joined into one function."""
from __future__ import annotations

from typing import Mapping

import tvm
import tvm_ffi
from tvm import s_tir, tirx
from tvm.sym.analyzer import Analyzer


def replace_vars(node, replaced: Mapping):
    """``node`` with every occurrence of a key of ``replaced`` (a variable or buffer) replaced by its value."""
    def swap(var):
        return next((new for old, new in replaced.items() if var.same_as(old)), var)

    return tvm_ffi.structural_map(node, (tvm.ir.expr.Var, swap), order="pre") if replaced else node


def joined(alternatives, tests, names, buffers):
    """One PrimFunc running each schedule of ``tir_api.choose`` under its host loop ``names[i]``,
    taken once where its test holds (``tests``: one per schedule but the last), or not at all.
    Names are those TVMScript would print (a later schedule's intermediate buffer ``x`` is ``x_1``)."""
    first = alternatives[0][0]
    loops, allocs, taken_names = [], [], set()
    for i, ((func, conditions), name) in enumerate(zip(alternatives, names)):
        if i:  # the schedules come from one PrimFunc and share its definitions: each gets its own
            func = renewed(func, first)
        taken = tvm.tirx.all(*tests[i:i + 1], *(tvm.tirx.Not(t) for t in tests[:i]))
        root = func.body.block
        renamed = {}
        for buf in root.alloc_buffers:
            unique = unique_name(buf.name, taken_names)
            taken_names.add(unique)
            renamed[buf] = buf if unique == buf.name else buffer_like(buf, unique)
        body = replace_vars(root.body, renamed)
        allocs += list(renamed.values())
        if conditions and conditions.get("multiple_of"):
            body = with_whole_multiple_views(body, buffers, conditions["multiple_of"])
        # simplified as TVMScript's IR builder does a loop's extent (``not (a and b)`` -> ``not a or not b``)
        extent = Analyzer().simplify(tvm.tirx.Select(taken, 1, 0))
        loops.append(tvm.tirx.For(tvm.tirx.Var(name, "int32"), 0, extent, tvm.tirx.ForKind.SERIAL, body))
    root = s_tir.SBlock([], [], [], "root", tvm.tirx.SeqStmt(loops), alloc_buffers=allocs)
    return first.with_body(s_tir.SBlockRealize([], True, root))


def unique_name(name: str, taken: set[str]) -> str:
    """``name``, or the first of ``name_1``, ``name_2``, ... not in ``taken`` (TVMScript's printer's rule)."""
    if name not in taken:
        return name
    k = 1
    while f"{name}_{k}" in taken:
        k += 1
    return f"{name}_{k}"


def buffer_like(buf, name: str, strides=None, data=None):
    """A buffer declared like ``buf`` under ``name`` (with ``strides`` and ``data`` where given)."""
    return tirx.decl_buffer(buf.shape, buf.dtype, name, data=data, strides=strides if strides is not None
                            else buf.strides, elem_offset=buf.elem_offset, scope=buf.scope(),
                            data_alignment=buf.data_alignment, offset_factor=buf.offset_factor, layout=buf.layout)


def renewed(func, like):
    """``func`` (a schedule of the same PrimFunc as ``like``) with its own definitions, its parameters,
    sizes and strides ``like``'s."""
    fresh = s_tir.renew_defs(func)
    same = {}
    for new, old in zip(fresh.params, like.params):
        same[new] = old
        if isinstance(new.ty, tirx.BufferType):
            for a, b in zip([*new.shape, *new.strides], [*old.shape, *old.strides]):
                if isinstance(a, tvm.ir.expr.Var) and not a.same_as(b):
                    same[a] = b
    return replace_vars(fresh, same)


def with_whole_multiple_views(body, buffers, multiple_of: Mapping[str, int]):
    """``body`` (one schedule of ``tir_api.choose``) addressing each buffer whose strides involve a
    size of ``multiple_of`` through a view with those strides written as whole multiples
    (``H // 4 * 4``): equal to the arguments' strides where the branch is taken, and visibly
    multiples of 4 to TVM's CUDA code generator, which emits a vector load only where it can prove
    the first element's index a multiple of the lanes (and to every analysis before it)."""
    def whole(expr):
        name = getattr(expr, "name", None)
        return expr // multiple_of[name] * multiple_of[name] if name in multiple_of else expr

    views = {}
    for name, buf in buffers.items():
        if len(buf.strides):  # the buffer's own strides
            strides = [whole(s) for s in buf.strides]
        else:  # compact: each stride the product of the dimensions after it
            strides, inner = [1], None
            for d in reversed([whole(d) for d in buf.shape[1:]]):
                inner = d * inner if inner is not None else d
                strides.insert(0, inner)
        if any(getattr(x, "name", None) in multiple_of for x in (buf.strides if len(buf.strides) else buf.shape[1:])):
            views[buf] = tirx.decl_buffer(buf.shape, buf.dtype, f"{name}_v", data=buf.data, strides=strides,
                                          layout=None)
    body = replace_vars(body, views)
    decls = [tirx.DeclBuffer(view, data=buf.data) for buf, view in views.items()]
    return tvm.tirx.SeqStmt(decls + (list(body.seq) if isinstance(body, tvm.tirx.SeqStmt) else [body]))


def stored_buffers(func) -> list[str]:
    """The names of the buffers ``func`` stores to."""
    names: set[str] = set()
    tvm_ffi.structural_walk(func, (tirx.BufferStore, lambda store: names.add(store.buffer.name)))
    return sorted(names)


def buffer_scopes(func) -> set[str]:
    """The storage scopes of the buffers ``func`` declares or uses ("global", "shared.dyn", "warp", ...)."""
    scopes: set[str] = set()

    def note(var) -> None:
        if isinstance(var.ty, tirx.BufferType):
            scopes.add(var.scope())

    tvm_ffi.structural_walk(func, (tvm.ir.expr.Var, note))
    return scopes


def calls_extern(func, name: str) -> bool:
    """Whether ``func`` calls the extern function ``name`` (``call_extern`` / ``call_pure_extern``)."""
    found = []

    def note(call) -> None:
        if (getattr(call.op, "name", None) in ("tirx.call_extern", "tirx.call_pure_extern") and call.args
                and isinstance(call.args[0], tvm.ir.expr.StringImm) and call.args[0].value == name):
            found.append(call)

    tvm_ffi.structural_walk(func, (tvm.ir.expr.Call, note))
    return bool(found)
