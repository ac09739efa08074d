"""The DSP library's C sources: one folder per chip, from the DSP schedules and the fixed sources.

Per chip (``targets/dsp`` facts: FT78NE fp32; MT7004 fp32 and fp16) a folder with:

    layernormgrad.h        the vendor entry points fp_/hp_layernormgrad_s/_p (status codes: layernormgrad_status.h)
    layernormgrad.c        the kernels (the DSP schedule's loop nest printed by lowering.c_emitter, spmd form)
                           and their entry points
    lstmcellgrad.h / .c    the same for the fused LSTM-cell backward (fp_/hp_lstmcellgrad_s/_p; all 8
                           variants: NULL dhy / dc, has_bias)
    the fixed sources      copied from targets/dsp/: the porting interface (fg_dsp_port.h) and its host
                           implementation (fg_dsp_port_host.c), the kernels' helpers (fg_dsp_kernel.h), the
                           entry points' helpers (fg_dsp_entry.h, <op>_entry.h), the status codes
                           (<op>_status.h) and, with fp16, the half type (fg_half.h)

``_s`` splits every parallel loop of the kernel over the cores of core_mask
(with a barrier after each); the partial sums are per fixed row block, not per
core, so dg/db have the same bits for every core mask.  ``_p`` runs the same
kernel on the calling core.  Bad sizes, NULL pointers, an empty or too large
core mask write nothing; the reason is read with fg_<op>_status().
"""
from __future__ import annotations

from pathlib import Path

from .. import targets, te_defs
from ..targets.dsp import DTYPE_PREFIXES
from . import build, c_dialect, c_emitter, dsp_entry, naming, templates

INFO = targets.get("dsp")
CHIPS = {chip: tuple(facts["dtypes"]) for chip, facts in INFO.facts["chips"].items()}
PREFIX = dict(DTYPE_PREFIXES)
CTYPE = {d: c_dialect.C99.types[d] for d in INFO.dtypes}  # the library's element types
# fixed sources every chip's folder gets, and those only a chip with float16 gets
FIXED = ("fg_dsp_port.h", "fg_dsp_port_host.c", "fg_dsp_kernel.h", "fg_dsp_entry.h", "layernormgrad_status.h",
         "layernormgrad_entry.h", "lstmcellgrad_status.h", "lstmcellgrad_entry.h")
FIXED_HALF = ("fg_half.h",)


def fixed_source(name: str) -> str:
    """The text of one of the library's fixed sources (targets/dsp/)."""
    return (targets.runtime_source_dir(INFO) / name).read_text()


LN_SIZES = "int param_num, int param_size"
# the entry points' field of each of the definition's tensors whose name the vendor's differs
LN_FIELDS = {"dgamma": "dg", "dbeta": "db"}
LN_ARGS = ("{t} *x, {t} *dy, {t} *var, {t} *mean, {t} *gamma, int param_num, int param_size, "
           "int block_num, int block_size, {t} *dx, {t} *dg, {t} *db")


def _kernel_arguments(op_name: str, params, fields: dict, scalars: dict | None = None) -> str:
    """The kernel's arguments in its own order (``params``: its TIR parameters) as C over the entry
    point's ``a``: a tensor or size of the definition is its field (``fields``: where the vendor's
    name differs), a stride of a kernel view the product of the view's later dimensions (the
    public arrays are contiguous), a scalar its C expression in ``scalars``."""
    op = te_defs.get(op_name)
    tensors = {spec.name: spec for spec in op.inputs + op.outputs}
    sizes = {te_defs.parse_dim(d)[1] for spec in tensors.values() for d in spec.shape}

    def dim(sym: str) -> str:
        factor, base = te_defs.parse_dim(sym)
        if base.isdigit():
            return str(factor * int(base))
        field = f"a->{fields.get(base, base)}"
        return field if factor == 1 else f"{factor} * {field}"

    def argument(tir: str) -> str:
        if scalars and tir in scalars:
            return scalars[tir]
        if tir in tensors or tir in sizes:
            return f"a->{fields.get(tir, tir)}"
        name, _, axis = tir.rpartition("_s")
        if name in tensors and axis.isdigit():
            return " * ".join(dim(d) for d in tensors[name].kshape[int(axis) + 1:])
        raise ValueError(f"DSP entry points of {op_name}: no source for the kernel argument {tir!r}")

    return ", ".join(argument(tir) for _, tir in params)


def _schedules(op: str, dtype: str) -> list:
    """(variant, kernel symbol, C source, parameters, workspace) of every variant of ``op``, from the
    DSP schedule rules (hand schedules: the DSP target is never tuned).  Variants whose kernels print
    the same (a flag the kernel reads at run time) share one, named by the flags they have in common:
    the first carries its source, the others none."""
    funcs, _ = build.schedule_variants(op, "dsp", dtype, use_tuning=False)
    emitted = [(variant, *c_emitter.emit(func, KERNEL, spmd=True)) for _, (func, variant, _) in sorted(funcs.items())]
    sharing = {}
    for variant, src, _, _ in emitted:
        sharing.setdefault(src, []).append(variant)
    out, named = [], set()
    for variant, src, params, workspace in emitted:
        group = sharing[src]
        name = naming.dsp_kernel_symbol(op, dtype, {k: v for k, v in variant.items()
                                                    if all(g[k] == v for g in group)})
        out.append((variant, name, "" if name in named else src.replace(KERNEL, name), params, workspace))
        named.add(name)
    return out


KERNEL = "fg_kernel_symbol_"  # a kernel's name while it is printed, before its variants are compared


def _entry_points(dtype: str, name: str, params, workspace) -> str:
    """The LayerNorm backward's entry points of ``dtype`` around its kernel ``name``
    (targets/dsp/layernormgrad_entry_points.c.in, then wrappers.c.in)."""
    t = CTYPE[dtype]
    call = _kernel_arguments("layer_norm_backward", params, LN_FIELDS, {"eps": "FG_LNG_EPS"})
    decl = LN_ARGS.format(t=t)
    args = "x, dy, var, mean, gamma, param_num, param_size, block_num, block_size, dx, dg, db"
    entry = naming.dsp_entry("layer_norm_backward", dtype)
    workspace_function = _workspace_function(name, {"M": "M", "D": "D"}, [(None, workspace)])
    return (templates.render("dsp", "layernormgrad_entry_points.c.in", NAME=name, T=t, CALL=call, ENTRY=entry,
                             WORKSPACE=workspace_function)
            + _wrappers(entry, decl, args, name, "fg_status", "FG_LNG"))


def _workspace_function(tag: str, dims: dict, variants) -> str:
    """``tag``_workspace: the bytes a call on ncores cores needs (its shared buffers, each core's own,
    the slack that aligns the base), in unsigned long long so that it cannot wrap where size_t has
    32 bits.  ``dims``: the kernels' size names -> the args field; ``variants``: (key, workspace)
    per kernel variant, chosen by the call's ``variant`` (key None: the only one)."""
    def bytes_of(ws) -> str:
        shared, per_core = ws
        return (f"{c_emitter.scratch_bytes(shared, wide=True)} + (unsigned long long)ncores * "
                f"({c_emitter.scratch_bytes(per_core, wide=True)}) + FG_WS_SLACK")
    lines = [f"static unsigned long long {tag}_workspace(const struct {tag}_args *a, int ncores) {{",
             "    const int32_t " + ", ".join(f"{n} = a->{f}" for n, f in dims.items()) + ";",
             "    " + " ".join(f"(void){n};" for n in dims) + " (void)ncores;"]
    if len(variants) == 1 and variants[0][0] is None:
        lines.append(f"    return {bytes_of(variants[0][1])};")
    else:
        lines += ["    switch (a->variant) {", *(f"    case {key}: return {bytes_of(ws)};" for key, ws in variants),
                  "    default: return 0;", "    }"]
    return "\n".join(lines + ["}"])


def _wrappers(entry: str, decl: str, args: str, tag: str, status: str, err: str) -> str:
    """The vendor's _s (cores of core_mask) and _p (calling core) entry points around ``tag``'s
    ``_start`` (validate) and ``_core`` (the kernel on one core): the _w forms run in the caller's
    workspace and return the call's status, the _r forms take theirs from fg_dsp_alloc and return the
    status, the vendor's void forms leave it in the status word (targets/dsp/wrappers.c.in)."""
    return templates.render("dsp", "wrappers.c.in", ENTRY=entry, DECL=decl, ARGS=args, TAG=tag, STATUS=status,
                            ERR=err)


# ---------------------------------------------------------------------------- LSTM-cell backward

CELL_SIZES = "int n, int hidden"

CELL_ARGS = ("{t} *dhy, {t} *dc, {t} *cx, {t} *cy, {t} *storage, int n, int hidden, int has_bias, "
             "{t} *dgates, {t} *dc_prev, {t} *db")
# the entry points' field of each of the definition's tensors and sizes whose name the vendor's differs
CELL_FIELDS = {"grad_hy": "dhy", "grad_cy": "dc", "grad_gates": "dgates", "grad_cx": "dc_prev", "grad_bias": "db",
               "N": "n", "H": "h"}


def _cell_entry_points(dtype: str, kernels) -> str:
    t = CTYPE[dtype]
    tag = naming.dsp_kernel_symbol("lstm_cell_backward", dtype, {})  # the entry points' helpers
    decl = CELL_ARGS.format(t=t)
    args = "dhy, dc, cx, cy, storage, n, hidden, has_bias, dgates, dc_prev, db"
    entry = naming.dsp_entry("lstm_cell_backward", dtype)
    cases, sizes = [], []
    for variant, name, _, params, workspace in kernels:
        key = te_defs.get("lstm_cell_backward").variant_key(variant)
        call = _kernel_arguments("lstm_cell_backward", params, CELL_FIELDS)
        cases.append(f"    case {key}: {name}({call}, rank, ncores, sync, a->ws); break;")
        sizes.append((key, workspace))
    op = te_defs.get("lstm_cell_backward")
    variant = op.variant_key_c({"has_grad_hy": "(dhy != NULL)", "has_grad_cy": "(dc != NULL)",
                                "has_bias": "(has_bias != 0)"})
    return (templates.render("dsp", "lstmcellgrad_entry_points.c.in", TAG=tag, T=t, CASES="\n".join(cases),
                             ENTRY=entry, WORKSPACE=_workspace_function(tag, {"N": "n", "H": "h"}, sizes),
                             VARIANT=variant, VARIANTS=str(len(op.variants)))
            + _wrappers(entry, decl, args, tag, "fg_lcg_status", "FG_LCG"))


# a*b+c is never fused into one rounding, whatever the compiler's default (GNU C modes and many
# vendor compilers fuse): the same bits everywhere.  GCC ignores the standard pragma: its ISO modes
# (-std=c99) do not fuse, its GNU modes take its own pragma (only there, as it also resets other
# optimisation choices of the file).
NO_CONTRACTION = ("#if defined(__GNUC__) && !defined(__clang__)", "#if !defined(__STRICT_ANSI__)",
                  '#pragma GCC optimize("fp-contract=off")', "#endif", "#else", "#pragma STDC FP_CONTRACT OFF",
                  "#endif")


# the helpers of fg_dsp_kernel.h (fg_dsp_entry.h: fg_values_ok) a file may call, and the macro that has the header
# define each
HELPERS = {"fg_floordiv(": "FG_USE_FLOORDIV", "fg_floormod(": "FG_USE_FLOORMOD", "fg_tanhf(": "FG_USE_TANHF",
           "FG_DSP_ALLOC(": "FG_USE_HEAP", "fg_values_ok(": "FG_USE_VALUES_OK"}


def _source(chip: str, what: str, stem: str, parts) -> str:
    """A chip's .c file of one op: its includes, the helpers its kernels call (only those), then ``parts``."""
    body = "\n".join(parts)
    used = [f"#define {macro}" for call, macro in HELPERS.items() if call in body]
    return "\n".join([f"/* fusedgrad DSP library for {chip.upper()}: {what} -- generated by fusedgrad, do not edit. */",
                      *NO_CONTRACTION, "",
                      f'#include "{stem}.h"', '#include "fg_dsp_port.h"', "", *used,
                      *(f'#include "{h}"' for h in c_dialect.C99.prologue), f'#include "{stem}_entry.h"', "",
                      body])


# ---------------------------------------------------------------------------- the LSTM layer

# each op's title (its .c file's first line); its header's doc is targets/dsp/<stem>_doc.h.in, and what a
# chip with float16 adds to it about the hp_ entry points <stem>_half_doc.h.in
LAYER_TITLES = {
    "lstm_layer_forward": "one LSTM layer and direction forward over the whole sequence",
    "lstm_layer_backward": "one LSTM layer and direction backward through time over the whole sequence",
}


def _header(op: str, stem: str, args: str, sizes: str, dtypes) -> str:
    """A chip's public header of ``op`` whose parameters ``args`` are written by hand ({t}: the element type)."""
    return dsp_entry.header_text(op, doc(stem), dtypes, {d: args.format(t=CTYPE[d]) for d in dtypes}, sizes)


def doc(stem: str, half: bool = False) -> str:
    """The doc comment that opens the header ``stem``.h (targets/dsp/<stem>_doc.h.in), with what a chip
    with float16 adds before its last line when ``half`` (<stem>_half_doc.h.in)."""
    text = templates.text("dsp", f"{stem}_doc.h.in").rstrip("\n")
    if not half:
        return text
    head, end = text.rsplit("\n", 1)
    return "\n".join([head, " *", templates.text("dsp", f"{stem}_half_doc.h.in").rstrip("\n"), end])


def _layer_files(chip: str, dtypes, kernels: dict) -> dict:
    """{file name: text} of the LSTM layer ops for ``chip``: header, source, status codes, status word."""
    files = {}
    for op_name, title in LAYER_TITLES.items():
        e = dsp_entry.EntryOp(op_name)
        served = [d for d in dtypes if d in INFO.dtypes_for(op_name)]
        parts = []
        for dtype in served:
            parts += [src for _, _, src, _, _ in kernels[op_name][dtype] if src]
            parts.append(dsp_entry.entry_points(e, dtype, CTYPE[dtype],
                                                [(v, n, p, w) for v, n, _, p, w in kernels[op_name][dtype]],
                                                _workspace_function, _wrappers))
        files[f"{e.stem}.h"] = dsp_entry.header(e, doc(e.stem, "float16" in served), served, CTYPE)
        files[f"{e.stem}.c"] = _source(chip, title, e.stem, parts)
        files[f"{e.stem}_status.h"] = dsp_entry.status_header(e)
        files[f"{e.stem}_entry.h"] = dsp_entry.status_word(e)
    return files


def write(root: Path, banner: str = "") -> list[str]:
    """Write one folder per chip under ``root``; returns the paths written, relative to ``root``."""
    written = []
    dtypes_used = sorted({d for ds in CHIPS.values() for d in ds}, key=list(CTYPE).index)
    ln = {dtype: _schedules("layer_norm_backward", dtype) for dtype in dtypes_used}
    cell = {dtype: _schedules("lstm_cell_backward", dtype) for dtype in dtypes_used}
    layer = {op: {d: _schedules(op, d) for d in dtypes_used if d in INFO.dtypes_for(op)} for op in LAYER_TITLES}
    for chip, dtypes in CHIPS.items():
        out = root / chip
        out.mkdir(parents=True, exist_ok=True)
        ln_parts, cell_parts = [], []
        for dtype in dtypes:
            (_, name, src, params, workspace), = ln[dtype]
            ln_parts += [src, _entry_points(dtype, name, params, workspace)]
            cell_parts += [src for _, _, src, _, _ in cell[dtype] if src] + [_cell_entry_points(dtype, cell[dtype])]
        files = {"layernormgrad.h": _header("layer_norm_backward", "layernormgrad", LN_ARGS, LN_SIZES, dtypes),
                 "layernormgrad.c": _source(chip, "LayerNorm backward", "layernormgrad", ln_parts),
                 "lstmcellgrad.h": _header("lstm_cell_backward", "lstmcellgrad", CELL_ARGS, CELL_SIZES, dtypes),
                 "lstmcellgrad.c": _source(chip, "LSTM-cell backward", "lstmcellgrad", cell_parts)}
        files.update(_layer_files(chip, dtypes, layer))
        for fname in FIXED + (FIXED_HALF if "float16" in dtypes else ()):
            files[fname] = fixed_source(fname)
        for fname, text in sorted(files.items()):
            (out / fname).write_text(banner + text)
            written.append(f"{chip}/{fname}")
    return written
