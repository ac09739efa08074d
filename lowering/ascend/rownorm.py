"""The "rownorm" kernel pattern: two passes over each row (the LayerNorm backward's).

The same vector compiler (vector.Lowerer) gives the passes over a row tile from the op's blocks as
schedules/ascend/vector.py schedules them (TIR): pass 1 the lane values of the row's two sums (the
lane blocks' values) and the terms of the group-summed outputs (dgamma's and dbeta's reduction
sources), pass 2 the row output (dx's value), with the per-row scalars (mean, rstd, the sums) as
instruction operands.  The row sums keep the definition's 16 interleaved lanes added in lane order;
dgamma and dbeta are summed per row group in UB, written once per tile, and the groups added in
order by the group-sum kernel.  One kernel per dtype and statistics type.
"""
from __future__ import annotations

from typing import Mapping

from ...schedules.ascend import vector as vector_schedules
from .. import naming
from ..c_dialect import ASCENDC
from .kernels import COPY_DTYPES, copy_source, group_sum_source
from .vector import Lowerer, print_program, producer, update


def programs(rule, dtype: str):
    """Pass 1 (the row sums' lane values, dgamma's and dbeta's terms) and pass 2 (dx) of a row tile,
    from the blocks of te_defs/layer_norm_backward.py scheduled as TIR: [(name, value)] each."""
    sch, _ = vector_schedules.schedule(rule.op, dtype)
    func = sch.mod["main"]
    lanes = []
    for name in ("sum_dyg", "sum_dyg_xhat"):
        # the row sum adds its lanes; each lane adds if_then_else(d < D, value, 0): the value
        lanes.append(producer(sch, update(sch, name)).args[1])
    p1 = Lowerer(func, scalars=rule.scalars)
    outs1 = [("lanes1", p1.value(lanes[0])), ("lanes2", p1.value(lanes[1])),
             ("dgamma", p1.value(producer(sch, update(sch, "dgamma")))),
             ("dbeta", p1.value(producer(sch, update(sch, "dbeta"))))]
    p2 = Lowerer(func, scalars=rule.scalars)
    outs2 = [("dx", p2.value(update(sch, "dx")))]
    return (p1.p, outs1), (p2.p, outs2)


def kernel_source(rule, dtype: str) -> tuple[str, int]:
    """(C++ of the LayerNorm backward kernels for ``dtype``, UB bytes per tile element).

    A core takes whole 8-row groups.  For each group, pass 1 walks the row in UB tiles, and within
    a tile the group's rows in order: gamma's tile is read once for the group, each row adds its
    tile to its own 16 lanes of the row sums, and dgamma's and dbeta's terms are summed over the
    group's rows in UB and written to the workspace once per tile.  Pass 2 does the same walk for
    dx; when a row fits one tile, its dx follows its pass 1 while the row is still in UB (x and dy
    read once).  Each row's lanes still take the tiles in order and each partial sum the rows in
    order, so the bits do not depend on the tile size or the core count."""
    t = ASCENDC.type(dtype)
    ins = ASCENDC.instruction  # a vector instruction, spelled by the dialect
    cls, tiling = naming.ascend_class(rule.short, dtype), naming.ascend_tiling(rule.short)
    slots = naming.ascend_macro(rule.short, dtype, "slots")
    (p1, outs1), (p2, outs2) = programs(rule, dtype)
    L = []
    w = L.append
    w("template <typename S>  // the statistics' type")
    w(f"class {cls} {{")
    w("  public:")
    gm = [ASCENDC.pointer(a) for a in ("x", "dy", "mean", "stat", "gamma", "dx", "workspace", "tiling")]
    w(f"    {ASCENDC.helper} void Init({', '.join(gm[:6])},")
    w(f"                                {gm[6]}, const {tiling} &t) {{")
    w("        t_ = t;")
    w(f"        g_x.SetGlobalBuffer((__gm__ {t} *)x, (uint64_t)(t.m - 1) * t.s_x + t.d);")
    w(f"        g_dy.SetGlobalBuffer((__gm__ {t} *)dy, (uint64_t)(t.m - 1) * t.s_dy + t.d);")
    w(f"        g_dx.SetGlobalBuffer((__gm__ {t} *)dx, (uint64_t)(t.m - 1) * t.s_dx + t.d);")
    w("        g_mean.SetGlobalBuffer((__gm__ S *)mean, (uint64_t)(t.m - 1) * t.s_mean + 1u);")
    w("        g_stat.SetGlobalBuffer((__gm__ S *)stat, (uint64_t)(t.m - 1) * t.s_stat + 1u);")
    w(f"        g_gamma.SetGlobalBuffer((__gm__ {t} *)gamma, t.d);")
    w("        g_ws.SetGlobalBuffer((__gm__ float *)workspace, (uint64_t)t.groups * 2u * t.d);")
    w(f"        pipe_.InitBuffer(in_x, 2, t.tile * sizeof({t}));")
    w(f"        pipe_.InitBuffer(in_dy, 2, t.tile * sizeof({t}));")
    w(f"        pipe_.InitBuffer(out_dx, 2, t.tile * sizeof({t}));")
    w(f"        pipe_.InitBuffer(gam_, t.tile * sizeof({t}));")
    w(f"        pipe_.InitBuffer(tmp_, {slots} * t.tile * sizeof(float));")
    w("        pipe_.InitBuffer(part_, 2u * t.tile * sizeof(float));  // dgamma's and dbeta's group sums")
    w("        pipe_.InitBuffer(small_, FG_LNG_SMALL * sizeof(float));  // the rows' lanes, the rstd scratch")
    w("    }")
    w("")
    w(f"    {ASCENDC.helper} void Process() {{")
    w("        const uint32_t row0 = (uint32_t)GetBlockIdx() * t_.rows_per_core;")
    w("        const uint32_t row1 = row0 + t_.rows_per_core < t_.m ? row0 + t_.rows_per_core : t_.m;")
    w("        LocalTensor<float> small = small_.Get<float>(), sc = small[FG_LNG_GROUP * 32u];")
    w("        float mean_g[FG_LNG_GROUP], rstd_g[FG_LNG_GROUP], s1_g[FG_LNG_GROUP], s2_g[FG_LNG_GROUP];")
    w("        for (uint32_t g0 = row0; g0 < row1; g0 += t_.group) {")
    w("            const uint32_t rows = (g0 + t_.group < row1 ? g0 + t_.group : row1) - g0;")
    w("            for (uint32_t i = 0; i < rows; ++i) {")
    w(f"                mean_g[i] = {ASCENDC.convert('float32', 'g_mean.GetValue((uint64_t)(g0 + i) * t_.s_mean)')};")
    w(f"                const float stat = {ASCENDC.convert('float32', 'g_stat.GetValue((uint64_t)(g0 + i) * t_.s_stat)')};")
    w("                rstd_g[i] = stat;")
    w("                if (!(t_.flags & FG_LNG_RSTD)) {")
    w("                    // rstd = 1 / sqrt(var + eps), on the vector unit (the scalar unit has no sqrt)")
    w("                    " + ins("Dup", "sc", "stat + t_.eps", "16"))
    w("                    " + ins("Sqrt", "sc", "sc", "16"))
    w("                    " + ins("Dup", "sc[16]", ASCENDC.float_literal(1.0), "16"))
    w("                    " + ins("Div", "sc", "sc[16]", "sc", "16"))
    w("                    PipeBarrier<PIPE_ALL>();")
    w("                    rstd_g[i] = sc.GetValue(0);")
    w("                }")
    w("            }")
    w("            " + ins("Dup", "small", ASCENDC.float_literal(0.0), "(int32_t)(rows * 32u)")
      + "  // the lanes of the group's rows")
    w("            const bool one_tile = t_.d <= t_.tile && (t_.flags & FG_LNG_DX);")
    w("            for (uint32_t off = 0; off < t_.d; off += t_.tile) {")
    w("                const uint32_t len = t_.d - off < t_.tile ? t_.d - off : t_.tile;")
    w("                LoadGamma(off, len);")
    w("                for (uint32_t i = 0; i < rows; ++i) {")
    w("                    CopyIn(g0 + i, off, len);")
    w(f"                    LocalTensor<{t}> x_x = in_x.DeQue<{t}>(), x_dy = in_dy.DeQue<{t}>();")
    w("                    Pass1(x_x, x_dy, len, i, mean_g[i], rstd_g[i]);")
    w("                    if (one_tile) {  // the whole row is in UB: dx now, without reading it again")
    w("                        PipeBarrier<PIPE_ALL>();")
    w("                        LaneSums(i, s1_g, s2_g);")
    w("                        Pass2(x_x, x_dy, len, mean_g[i], rstd_g[i], s1_g[i], s2_g[i]);")
    w("                        CopyOut(g0 + i, off, len);")
    w("                    }")
    w("                    in_x.FreeTensor(x_x);")
    w("                    in_dy.FreeTensor(x_dy);")
    w("                }")
    w("                if (t_.flags & FG_LNG_DGB) {  // the group's sums of this tile, written once")
    w("                    LocalTensor<float> part = part_.Get<float>();")
    w("                    DataCopyExtParams q{1, len * (uint32_t)sizeof(float), 0, 0, 0};")
    w("                    PipeBarrier<PIPE_ALL>();")
    w("                    for (uint32_t k = 0; k < 2u; ++k) {")
    w("                        DataCopyPad(g_ws[((uint64_t)(g0 / t_.group) * 2u + k) * t_.d + off], part[k * t_.tile], q);")
    w("                    }")
    w("                    PipeBarrier<PIPE_ALL>();")
    w("                }")
    w("            }")
    w("            if (!(t_.flags & FG_LNG_DX) || one_tile) continue;")
    w("            PipeBarrier<PIPE_ALL>();")
    w("            for (uint32_t i = 0; i < rows; ++i) LaneSums(i, s1_g, s2_g);")
    w("            for (uint32_t off = 0; off < t_.d; off += t_.tile) {")
    w("                const uint32_t len = t_.d - off < t_.tile ? t_.d - off : t_.tile;")
    w("                LoadGamma(off, len);")
    w("                for (uint32_t i = 0; i < rows; ++i) {")
    w("                    CopyIn(g0 + i, off, len);")
    w(f"                    LocalTensor<{t}> x_x = in_x.DeQue<{t}>(), x_dy = in_dy.DeQue<{t}>();")
    w("                    Pass2(x_x, x_dy, len, mean_g[i], rstd_g[i], s1_g[i], s2_g[i]);")
    w("                    in_x.FreeTensor(x_x);")
    w("                    in_dy.FreeTensor(x_dy);")
    w("                    CopyOut(g0 + i, off, len);")
    w("                }")
    w("            }")
    w("        }")
    w("    }")
    w("")
    w("  private:")
    w("    // row i's two row sums: its lanes added in lane order")
    w(f"    {ASCENDC.helper} void LaneSums(uint32_t i, float *s1_g, float *s2_g) {{")
    w("        LocalTensor<float> small = small_.Get<float>();")
    w("        float s1 = 0.0f, s2 = 0.0f;")
    w("        for (uint32_t l = 0; l < 16u; ++l) {")
    w("            s1 += small.GetValue(i * 32u + l);")
    w("            s2 += small.GetValue(i * 32u + 16u + l);")
    w("        }")
    w("        s1_g[i] = s1;")
    w("        s2_g[i] = s2;")
    w("    }")
    w("")
    w("    // gamma's tile, read once for the group's rows (ones without gamma)")
    w(f"    {ASCENDC.helper} void LoadGamma(uint32_t off, uint32_t len) {{")
    w(f"        LocalTensor<{t}> x_gamma = gam_.Get<{t}>();")
    w("        PipeBarrier<PIPE_ALL>();  // the last tile's instructions are done with it")
    w("        if (t_.flags & FG_LNG_GAMMA) {")
    w(f"            DataCopyExtParams p{{1, len * (uint32_t)sizeof({t}), 0, 0, 0}};")
    w(f"            DataCopyPadExtParams<{t}> pad{{false, 0, 0, {t}()}};")
    w("            DataCopyPad(x_gamma, g_gamma[off], p, pad);")
    w("        } else {")
    w("            " + ins("Dup", "x_gamma", ASCENDC.convert(dtype, ASCENDC.float_literal(1.0)), "(int32_t)len"))
    w("        }")
    w("        PipeBarrier<PIPE_ALL>();")
    w("    }")
    w("")
    w(f"    {ASCENDC.helper} void CopyIn(uint32_t r, uint32_t off, uint32_t len) {{")
    w(f"        DataCopyExtParams p{{1, len * (uint32_t)sizeof({t}), 0, 0, 0}};")
    w(f"        DataCopyPadExtParams<{t}> pad{{false, 0, 0, {t}()}};")
    for nme in ("x", "dy"):
        w(f"        LocalTensor<{t}> x_{nme} = in_{nme}.AllocTensor<{t}>();")
        w(f"        DataCopyPad(x_{nme}, g_{nme}[(uint64_t)r * t_.s_{nme} + off], p, pad);")
        w(f"        in_{nme}.EnQue(x_{nme});")
    w("    }")
    w("")
    nslots = 0
    for which, (prog, outs) in (("Pass1", (p1, outs1)), ("Pass2", (p2, outs2))):
        if which == "Pass1":
            w(f"    {ASCENDC.helper} void Pass1(const LocalTensor<{t}> &x_x, const LocalTensor<{t}> &x_dy, uint32_t len, "
              "uint32_t i, float mean_m, float rstd) {")
        else:
            w(f"    {ASCENDC.helper} void Pass2(const LocalTensor<{t}> &x_x, const LocalTensor<{t}> &x_dy, uint32_t len, "
              "float mean_m, float rstd, float s1, float s2) {")
        w("        const int32_t n = (int32_t)len;")
        w("        LocalTensor<float> tmp = tmp_.Get<float>();")
        w("        (void)mean_m; (void)rstd;")
        w(f"        LocalTensor<{t}> x_gamma = gam_.Get<{t}>();")
        used, ref = print_program(w, prog, outs, dtype, lambda k: k[0])
        refs = {name: ref(val) for name, val in outs}
        nslots = max(nslots, used)
        if which == "Pass1":
            w("        // row i's lanes: element j of the row goes to lane j % 16, the tiles added in order")
            w("        LocalTensor<float> lanes = small_.Get<float>()[i * 32u];")
            w("        const uint32_t full = len / 16u;")
            w("        for (uint32_t c = 0; c < full; ++c) {")
            w("            " + ins("Add", "lanes", "lanes", f"{refs['lanes1']}[c * 16u]", "16"))
            w("            " + ins("Add", "lanes[16]", "lanes[16]", f"{refs['lanes2']}[c * 16u]", "16"))
            w("        }")
            w("        PipeBarrier<PIPE_ALL>();")
            w("        for (uint32_t j = full * 16u; j < len; ++j) {")
            w(f"            lanes.SetValue(j % 16u, lanes.GetValue(j % 16u) + {refs['lanes1']}.GetValue(j));")
            w(f"            lanes.SetValue(16u + j % 16u, lanes.GetValue(16u + j % 16u) + {refs['lanes2']}.GetValue(j));")
            w("        }")
            w("        PipeBarrier<PIPE_ALL>();")
            w("        // dgamma's and dbeta's terms added to the group's sums in UB (the first row's start them)")
            w("        if (t_.flags & FG_LNG_DGB) {")
            w("            LocalTensor<float> part = part_.Get<float>();")
            for k, key in enumerate(("dgamma", "dbeta")):
                dst = f"part[{k}u * t_.tile]"
                w("            if (i == 0) {")
                w("                " + ins("Adds", dst, refs[key], ASCENDC.float_literal(0.0), "n"))
                w("            } else {")
                w("                " + ins("Add", dst, dst, refs[key], "n"))
                w("            }")
            w("        }")
        else:
            w(f"        LocalTensor<{t}> o = out_dx.AllocTensor<{t}>();")
            if dtype == "float32":
                w("        " + ins("Muls", "o", refs["dx"], ASCENDC.float_literal(1.0), "n")
                  + "  // exact copy into the output queue")
            else:
                w("        " + ins("Cast", "o", refs["dx"], ASCENDC.round_mode("rint"), "n"))
            w("        out_dx.EnQue(o);")
            w("        (void)s1; (void)s2;")
        w("    }")
        w("")
    w(f"    {ASCENDC.helper} void CopyOut(uint32_t r, uint32_t off, uint32_t len) {{")
    w(f"        DataCopyExtParams p{{1, len * (uint32_t)sizeof({t}), 0, 0, 0}};")
    w(f"        LocalTensor<{t}> o = out_dx.DeQue<{t}>();")
    w("        DataCopyPad(g_dx[(uint64_t)r * t_.s_dx + off], o, p);")
    w("        out_dx.FreeTensor(o);")
    w("    }")
    w("")
    w(f"    {tiling} t_;")
    w("    TPipe pipe_;")
    w("    TQue<TPosition::VECIN, 2> in_x, in_dy;")
    w("    TQue<TPosition::VECOUT, 2> out_dx;")
    w("    TBuf<TPosition::VECCALC> gam_, tmp_, part_, small_;")
    w(f"    GlobalTensor<{t}> g_x, g_dy, g_dx, g_gamma;")
    w("    GlobalTensor<S> g_mean, g_stat;")
    w("    GlobalTensor<float> g_ws;")
    w("};")
    w("")
    for suffix, stat_t in rule.stat_types[dtype]:
        w(f"{ASCENDC.kernel} {naming.ascend_kernel(rule.short, dtype, suffix)}({', '.join(gm[:3])}, "
          f"{', '.join(gm[3:])}) {{")
        w(f"    {tiling} t = *(const __gm__ {tiling} *)tiling;")
        w(f"    {cls}<{stat_t}> op;")
        w("    op.Init(x, dy, mean, stat, gamma, dx, workspace, t);")
        w("    op.Process();")
        w("}")
        w("")
    w(group_sum_source(naming.ascend_kernel(rule.short, dtype, rule.reduce), dtype, tiling, rule.group_sum_length,
                       rule.group_sums))
    if dtype in COPY_DTYPES:
        w(copy_source(naming.ascend_kernel(rule.short, dtype, "copy"), dtype))
    elem = 4 if dtype == "float32" else 2
    # x and dy in, dx out (double-buffered), gamma's tile, fp32 temporaries and the two group sums
    per_elem = 7 * elem + nslots * 4 + 8
    head = [f"#define {slots} {nslots}u"]
    return "\n".join(head + L) + "\n", per_elem




def entries(rule, dtype: str) -> list[str]:
    """The main kernels' symbol parts (after the dtype): one per statistics type."""
    return [suffix for suffix, _ in rule.stat_types[dtype]]


def kernel_file(rule, dtype: str) -> tuple[str, int]:
    """The kernels of ``dtype`` (one per statistics type, the group sum, the copy) and their UB bytes
    per tile element."""
    return kernel_source(rule, dtype)


def sizes_header(rule, sizes: Mapping[str, int]) -> str:
    """fg_<op>_sizes.h: each dtype's UB bytes per tile element, {dtype: bytes}, for the host's tiling."""
    guard = f"FG_{rule.op.upper()}_SIZES_H"
    lines = ["// generated by fusedgrad: UB bytes per tile element of each kernel (for the host's tiling).",
             f"#ifndef {guard}", f"#define {guard}"]
    lines += [f"#define {naming.ascend_macro(rule.short, dtype, 'per_elem')} {per}u" for dtype, per in sizes.items()]
    return "\n".join(lines + ["#endif", ""])
