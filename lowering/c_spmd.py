"""The spmd form of a printed kernel, for lowering.c_emitter: cores and DMA windows.

In spmd mode every core of a group runs the kernel function (fg_core of fg_ncores): each top-level
parallel loop is split over the cores with a barrier after it, other top-level statements run on
core 0, and top-level buffers live in the shared workspace fg_ws.  The windows of the inputs a
parallel iteration reads (TVM's bound analysis) are copied into the core's local memory by DMA
when the port has the room (``windows``, ``staged_loop``), double-buffered when they move with
the loop; otherwise the loop reads shared memory in place.  Same arithmetic either way.
"""
from __future__ import annotations

import contextlib
import functools

from tvm import sym, tirx

from . import templates
from .c_guards import defined, exprs, is_zero, pure_index, stmts, uses, walk_expr


class SpmdPrinter:
    """Mixed into lowering.c_emitter.Emitter: the spmd body and its DMA staging."""

    def spmd_body(self, body) -> None:
        self.fill("spmd_body.c.in", {"BODY": lambda: self.spmd_stmts(body, top=True)})

    def spmd_stmts(self, body, top: bool) -> None:
        """The statements of ``body`` as every core runs them: a parallel loop split over the cores,
        then a barrier; a serial loop holding parallel loops (a recurrence's time loop) run by every
        core, its body likewise; a bound value computed by every core; anything else on core 0, then
        a barrier.  Buffers allocated at the top live in the shared workspace."""
        stmts = list(body.seq) if type(body).__name__ == "SeqStmt" else [body]
        for st in stmts:
            kind = type(st).__name__
            if kind == "For" and int(st.kind) == 0 and _holds_parallel(st.body):
                self.line(f"for (int32_t {self.var(st.loop_var)} = {self.expr(st.min)}; {self.var(st.loop_var)} < "
                          f"{self.expr(st.min + st.extent)}; ++{self.var(st.loop_var)}) {{")
                self.indent += 1
                self.spmd_stmts(st.body, top=False)
                self.indent -= 1
                self.line("}")
            elif kind == "Bind" and not top:  # TVM may have substituted its uses: (void) keeps -Werror quiet
                self.stmt(st)
                self.line(f"(void){self.var(st.var)};")
            elif kind == "AllocBuffer" and not top:
                raise ValueError(f"C emitter (spmd): buffer {st.buffer.name} is allocated inside a loop that "
                                 "every core runs: allocate it at the top or inside a parallel loop")
            elif kind == "AllocBuffer":
                b = st.buffer
                ctype = self.ctype(b.dtype)
                name = self.var(self.storage(b))
                self.line(f"{ctype} *{name} = ({ctype} *)(void *)(fg_ws + fg_off);")
                self.line(f"fg_off += FG_WS_ALIGN(sizeof({ctype}) * {self.count(b)});")
                self.workspace.append((ctype, self.dims(b)))
            elif kind == "DeclBuffer":
                self.stmt(st)
            elif kind == "For" and int(st.kind) == 1:
                self.fill("spmd_parallel.c.in", {"LOOP": lambda: self.core_range(st)}, EXTENT=self.expr(st.extent))
            else:
                self.fill("spmd_core0.c.in", {"BODY": functools.partial(self.scope, st)})

    def core_range(self, loop) -> None:
        """The loop over this core's iterations fg_lo .. fg_hi of ``loop``, its windows staged if any."""
        v, lo = self.var(loop.loop_var), self.expr(loop.min)
        start = "fg_lo" if lo == "0" else f"{lo} + fg_lo"
        end = "fg_hi" if lo == "0" else f"{lo} + fg_hi"
        windows = self.windows(loop)
        if windows:
            self.staged_loop(loop, v, start, end, windows)
        else:
            self.line(f"for (int32_t {v} = {start}; {v} < {end}; ++{v}) {{")
            self.scope(loop.body)
            self.line("}")

    def fill(self, name: str, holes: dict, **fields: str) -> None:
        """Print the template ``name`` (targets/dsp/) at the current indent, its fields filled with
        ``fields``; a line that is only a hole ``@NAME@`` runs ``holes[NAME]()`` at that line's indent
        instead (what the printer writes there: a loop body, the windows' copies)."""
        text = templates.render("dsp", name, **fields, **{k: f"@{k}@" for k in holes})
        base = self.indent
        for raw in text.rstrip("\n").split("\n"):
            code = raw.lstrip(" ")
            self.indent = base + (len(raw) - len(code)) // 4
            if code[1:-1] in holes and code == f"@{code[1:-1]}@":
                holes[code[1:-1]]()
            else:
                self.line(code)
        self.indent = base

    # -- DMA staging (spmd): inputs read in a parallel loop are copied into the core's local memory
    def windows(self, loop) -> list:
        """(C name, C type, first index as a function of the loop variable, width, span, whether the first
        index is known to be in the array) of every pointer argument that the loop only reads, within
        a window of constant width per iteration."""
        o = loop.loop_var
        dom, reads, writes = {}, {}, set()

        def visit_expr(e):
            kind = type(e).__name__
            if kind == "BufferLoad":
                reads.setdefault(self.var(self.storage(e.buffer)), []).append(list(e.indices))
            elif kind == "TensorLoad":
                reads.setdefault(self.var(e.source), []).append(list(e.indices))

        for st in stmts(loop.body):
            kind = type(st).__name__
            if kind == "For":
                ext = st.extent
                if type(ext).__name__ == "RShift" and isinstance(ext.b, tirx.IntImm):
                    ext = tirx.floordiv(ext.a, 1 << int(ext.b))  # NarrowDataType's shifts: bounded as divisions
                dom[st.loop_var] = sym.IntervalSet(st.min, st.min + ext - 1)
            elif kind == "BufferStore":
                writes.add(self.var(self.storage(st.buffer)))
            for e in exprs(st):
                walk_expr(e, visit_expr)
        local = [o] + defined(loop.body)
        out = []
        for name in sorted(reads):
            if name not in self.param_bufs or name in writes or any(len(ix) != 1 for ix in reads[name]):
                continue
            ctype, span, dims = self.param_bufs[name]
            ana = sym.Analyzer()
            with contextlib.ExitStack() as stack:
                for d in dims:  # shapes and strides are never negative
                    if isinstance(d, tirx.Var):
                        stack.enter_context(ana.constraint_scope(d >= 0))
                stack.enter_context(ana.constraint_scope(o >= loop.min))
                pairs = []
                for (ix,) in reads[name]:
                    r = ana.int_set(ix, dom)
                    pairs.append((ana.simplify(r.min_value), ana.simplify(r.max_value)))
                # the window of all reads: a lowest first and a highest last index among them
                first = next((f for f, _ in pairs if all(ana.can_prove(f <= g) for g, _ in pairs)), None)
                last = next((h for _, h in pairs if all(ana.can_prove(h >= g) for _, g in pairs)), None)
                if first is None or last is None:
                    continue
                # both move with the loop index alike: the width is the difference of the constants
                lf, ll = sym.detect_linear_equation(first, [o]), sym.detect_linear_equation(last, [o])
                if len(lf) != 2 or len(ll) != 2 or not is_zero(ana.simplify(ll[0] - lf[0])):
                    continue
                width = ana.simplify(ll[1] - lf[1] + 1)
                # a window whose first index the analysis cannot keep in the array (a guarded read
                # through a clamped index, say) is copied from the array's start on
                inside = ana.can_prove(first >= 0)
            if any(uses(first, x) for x in local[1:]) or any(uses(width, x) for x in local) or not (
                    pure_index(first) and pure_index(width)) or "inf" in str(first) + str(width):
                continue
            out.append((name, ctype, first, width, span, inside))
        return out

    def staged_loop(self, loop, v: str, start: str, end: str, windows) -> None:
        """The loop twice: with its inputs' windows copied into local memory by DMA (when the port
        has the room), and reading shared memory directly (otherwise).  Windows that move with the
        loop are double-buffered: the next iteration's copies run while this one computes
        (targets/dsp/spmd_staged.c.in, spmd_step.c.in)."""
        fixed = [w for w in windows if not uses(w[2], loop.loop_var)]  # the same window every iteration
        moving = [w for w in windows if uses(w[2], loop.loop_var)]
        sizes = " + ".join(f"{2 if w in moving else 1}u * FG_WS_ALIGN(sizeof({w[1]}) * (size_t)({self.expr(w[3])}))"
                           for w in windows)
        bufs = [("fg_l", w) for w in fixed] + [(f"fg_l{k}", w) for w in moving for k in (0, 1)]

        def buffers():
            for prefix, (name, ct, _, width, _, _) in bufs:
                self.line(f"{ct} *{prefix}_{name} = ({ct} *)(void *)(fg_local + fg_lo_off);")
                self.line(f"fg_lo_off += FG_WS_ALIGN(sizeof({ct}) * (size_t)({self.expr(width)}));")

        def copies(it: str, dst):
            """The copies of the moving windows of iteration ``it`` into ``dst(name)``."""
            self.line(f"const int32_t fg_it = {it};")
            with self.renamed(loop.loop_var, "fg_it"):
                for name, ct, first, width, span, inside in moving:
                    self.dma_get(dst(name), name, ct, first, width, span, f"fg_nb_{name}", inside)

        def first_copies():
            for name, ct, first, width, span, inside in fixed:
                self.dma_get(f"fg_l_{name}", name, ct, first, width, span, f"fg_b_{name}", inside)
                self.staged[name] = (f"fg_l_{name}", f"fg_b_{name}")
            if moving:  # the first iteration's windows
                self.line("{")
                self.indent += 1
                copies(start, lambda name: f"fg_l0_{name}")
                self.indent -= 1
                self.line("}")

        def current():
            for name, ct, first, _, _, _ in moving:
                self.line(f"{ct} *fg_l_{name} = fg_cur ? fg_l1_{name} : fg_l0_{name};")
                self.line(f"const int32_t fg_b_{name} = {self.expr(first)};")
                self.staged[name] = (f"fg_l_{name}", f"fg_b_{name}")

        def step():
            if moving:
                self.fill("spmd_step.c.in", {"CURRENT": current,
                                              "NEXT": lambda: copies(f"{v} + 1", lambda n: f"(fg_cur ? fg_l0_{n} : fg_l1_{n})")},
                          V=v, START=start, END=end)

        def staged_body():
            self.scope(loop.body)
            for name, *_ in windows:
                del self.staged[name]

        self.fill("spmd_staged.c.in", {"BUFFERS": buffers, "COPIES": first_copies, "STEP": step,
                                       "BODY": staged_body, "BODY_IN_PLACE": lambda: self.scope(loop.body)},
                  BYTES=sizes, V=v, START=start, END=end)

    def dma_get(self, dst: str, name: str, ct: str, first, width, span, b: str, inside: bool = True) -> None:
        """Start the copy of a window (clamped to the array) into dst; ``b`` names its first index.
        Unless ``inside``, the window may start before the array: only its part from index 0 is copied
        (the loop reads no element outside the array) (targets/dsp/spmd_dma_get.c.in)."""
        c, skip = f"fg_c{b[4:]}", f"fg_s{b[4:]}"
        fields = dict(B=b, FIRST=self.expr(first), C=c, SPAN=self.expr(span), WIDTH=self.expr(width), T=ct)
        if inside:
            fields.update(COUNT=c, DST=dst, SRC=f"{name} + {b}", SIZE=c)
        else:
            fields.update(COUNT=f"{c} - {skip}", DST=f"{dst} + {skip}", SRC=f"{name} + {b} + {skip}",
                          SIZE=f"({c} - {skip})")
        self.fill("spmd_dma_get.c.in",
                  {"SKIP": (lambda: None) if inside else lambda: self.line(f"const int32_t {skip} = {b} < 0 ? -{b} : 0;")},
                  **fields)

    @contextlib.contextmanager
    def renamed(self, var, name: str):
        """Print ``var`` as ``name`` for a while."""
        key = next((k for k in self.names if k.same_as(var)), var)
        old = self.names.get(key)
        self.names[key] = name
        try:
            yield
        finally:
            if old is None:
                del self.names[key]
            else:
                self.names[key] = old


def _holds_parallel(body) -> bool:
    """Whether ``body`` has a parallel loop among its statements (not inside another loop)."""
    items = list(body.seq) if type(body).__name__ == "SeqStmt" else [body]
    return any(type(x).__name__ == "For" and (int(x.kind) == 1 or _holds_parallel(x.body)) for x in items)
