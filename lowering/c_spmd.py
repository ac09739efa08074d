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

from tvm import sym, tirx

from .c_guards import defined, exprs, is_zero, pure_index, stmts, uses, walk_expr


class SpmdPrinter:
    """Mixed into lowering.c_emitter.Emitter: the spmd body and its DMA staging."""

    def spmd_body(self, body) -> None:
        self.line("size_t fg_off = 0;")
        self.spmd_stmts(body, top=True)
        self.line("(void)fg_off;")

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
                v = self.var(st.loop_var)
                ext = self.expr(st.extent)
                lo = self.expr(st.min)
                self.line("{")
                self.indent += 1
                self.line(f"const int32_t fg_n = {ext};")
                self.line("const int32_t fg_lo = (int32_t)(((int64_t)fg_n * fg_core) / fg_ncores);")
                self.line("const int32_t fg_hi = (int32_t)(((int64_t)fg_n * (fg_core + 1)) / fg_ncores);")
                start = "fg_lo" if lo == "0" else f"{lo} + fg_lo"
                end = "fg_hi" if lo == "0" else f"{lo} + fg_hi"
                windows = self.windows(st)
                if windows:
                    self.staged_loop(st, v, start, end, windows)
                else:
                    self.line(f"for (int32_t {v} = {start}; {v} < {end}; ++{v}) {{")
                    self.scope(st.body)
                    self.line("}")
                self.indent -= 1
                self.line("}")
                self.line("fg_dsp_barrier(fg_sync);")
            else:
                self.line("if (fg_core == 0) {")
                self.scope(st)
                self.line("}")
                self.line("fg_dsp_barrier(fg_sync);")

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
        loop are double-buffered: the next iteration's copies run while this one computes."""
        fixed = [w for w in windows if not uses(w[2], loop.loop_var)]  # the same window every iteration
        moving = [w for w in windows if uses(w[2], loop.loop_var)]
        sizes = " + ".join(f"{2 if w in moving else 1}u * FG_WS_ALIGN(sizeof({w[1]}) * (size_t)({self.expr(w[3])}))"
                           for w in windows)
        self.line(f"const size_t fg_lb = {sizes};")
        self.line("char *fg_local = (fg_sync != NULL && fg_hi > fg_lo && fg_lb <= fg_dsp_local_bytes())")
        self.line("    ? (char *)fg_dsp_local_alloc(fg_lb) : NULL;")
        self.line("if (fg_local != NULL) {")
        self.indent += 1
        self.line("size_t fg_lo_off = 0;")
        bufs = [("fg_l", w) for w in fixed] + [(f"fg_l{k}", w) for w in moving for k in (0, 1)]
        for prefix, (name, ct, _, width, _, _) in bufs:
            self.line(f"{ct} *{prefix}_{name} = ({ct} *)(void *)(fg_local + fg_lo_off);")
            self.line(f"fg_lo_off += FG_WS_ALIGN(sizeof({ct}) * (size_t)({self.expr(width)}));")
        for name, ct, first, width, span, inside in fixed:
            self.dma_get(f"fg_l_{name}", name, ct, first, width, span, f"fg_b_{name}", inside)
            self.staged[name] = (f"fg_l_{name}", f"fg_b_{name}")
        if moving:  # the first iteration's windows
            self.line("{")
            self.indent += 1
            self.line(f"const int32_t fg_it = {start};")
            with self.renamed(loop.loop_var, "fg_it"):
                for name, ct, first, width, span, inside in moving:
                    self.dma_get(f"fg_l0_{name}", name, ct, first, width, span, f"fg_nb_{name}", inside)
            self.indent -= 1
            self.line("}")
        self.line("fg_dsp_dma_wait();")
        self.line(f"for (int32_t {v} = {start}; {v} < {end}; ++{v}) {{")
        self.indent += 1
        if moving:
            self.line(f"const int32_t fg_cur = ({v} - ({start})) & 1;")
            for name, ct, first, width, span, _ in moving:
                self.line(f"{ct} *fg_l_{name} = fg_cur ? fg_l1_{name} : fg_l0_{name};")
                self.line(f"const int32_t fg_b_{name} = {self.expr(first)};")
                self.staged[name] = (f"fg_l_{name}", f"fg_b_{name}")
            self.line("fg_dsp_dma_wait(); /* this iteration's windows are in */")
            self.line(f"if ({v} + 1 < {end}) {{ /* the next one's copy runs while this one computes */")
            self.indent += 1
            self.line(f"const int32_t fg_it = {v} + 1;")
            with self.renamed(loop.loop_var, "fg_it"):
                for name, ct, first, width, span, inside in moving:
                    self.dma_get(f"(fg_cur ? fg_l0_{name} : fg_l1_{name})", name, ct, first, width, span,
                                 f"fg_nb_{name}", inside)
            self.indent -= 1
            self.line("}")
        self.indent -= 1
        self.scope(loop.body)
        for name, *_ in windows:
            del self.staged[name]
        self.line("}")
        self.line("fg_dsp_local_free(fg_local);")
        self.indent -= 1
        self.line("} else {")
        self.indent += 1
        self.line(f"for (int32_t {v} = {start}; {v} < {end}; ++{v}) {{")
        self.scope(loop.body)
        self.line("}")
        self.indent -= 1
        self.line("}")

    def dma_get(self, dst: str, name: str, ct: str, first, width, span, b: str, inside: bool = True) -> None:
        """Start the copy of a window (clamped to the array) into dst; ``b`` names its first index.
        Unless ``inside``, the window may start before the array: only its part from index 0 is copied
        (the loop reads no element outside the array)."""
        self.line(f"const int32_t {b} = {self.expr(first)};")
        c = f"fg_c{b[4:]}"
        self.line(f"const int32_t {c} = ({self.expr(span)}) - {b} < ({self.expr(width)}) "
                  f"? ({self.expr(span)}) - {b} : ({self.expr(width)});")
        if inside:
            self.line(f"if ({c} > 0) {{")
            self.line(f"    fg_dsp_dma_get({dst}, {name} + {b}, sizeof({ct}) * (size_t){c});")
        else:
            skip = f"fg_s{b[4:]}"
            self.line(f"const int32_t {skip} = {b} < 0 ? -{b} : 0;")
            self.line(f"if ({c} - {skip} > 0) {{")
            self.line(f"    fg_dsp_dma_get({dst} + {skip}, {name} + {b} + {skip}, sizeof({ct}) * (size_t)({c} - {skip}));")
        self.line("}")

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
