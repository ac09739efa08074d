"""The DSP library's entry points of an op, written from its definition's argument specs.

For an op whose kernels take only tensors and sizes (``te_defs`` TensorSpecs, no scalars) the
vendor's entry points follow from the definition alone:

    fp_<stem>_s(<inputs>, <sizes>, <flags>, <outputs>, int core_mask)    and _p, _s_r, _p_r, _s_w, _p_w,
    fp_<stem>_workspace(<sizes>, size_t *bytes)

- the tensors in the definition's order, inputs first, each a pointer to the public (contiguous)
  layout; the sizes are the shape symbols the tensors use, in the order they first appear;
- a variant flag that decides which tensors exist (``TensorSpec.when``) is chosen by the caller
  passing them all or passing them all NULL; any other flag is an int argument;
- checks before anything is written, each with its status code: NULL pointers, sizes (every size
  at least 1, every array's indices in int32 and its bytes in size_t), the core mask, outputs
  sharing memory with any other array, integer inputs outside their bounds
  (``TensorSpec.bounded_by``, ``non_increasing``), the caller's workspace;
- the kernel's own arguments (strides of the kernel's views included) taken from those.

The status codes and the status word are generated too (``<stem>_status.h``, ``<stem>_entry.h``).
"""
from __future__ import annotations

from .. import te_defs
from . import naming, templates

# the status codes every op's entry points share, in this order, and their meaning
STATUS = (("OK", "ran"),
          ("ERR_NULL", "a pointer the call needs is NULL, or a group of optional outputs is only partly given"),
          ("ERR_SIZE", "a size is below 1, or so large that an array's indices leave int32 or its bytes size_t"),
          ("ERR_CORES", "core_mask names no core, or a core this part does not have"),
          ("ERR_NOMEM", "no shared memory for the workspace (_s, _p)"),
          ("ERR_OVERLAP", "an output shares memory with an input or another output"),
          ("ERR_WORKSPACE", "the caller's workspace (_w entry points) is NULL or smaller than the call needs"),
          ("ERR_VALUES", "an integer input holds a value outside its bounds, or grows where it may not"))

SIZE_NAMES = {"H": "hidden"}  # a shape symbol's name in the vendor's argument lists, where it differs


class EntryOp:
    """What the entry points of ``op`` are made of, derived from its OpDef."""

    def __init__(self, op_name: str):
        self.op = te_defs.get(op_name)
        self.name = op_name
        self.short, self.stem = naming.dsp_short(op_name), naming.dsp_file(op_name)
        self.err = f"FG_{self.short.upper()}"
        self.status_word = f"fg_{self.short}_last_status"  # fg_<stem>_status() returns it
        self.tensors = list(self.op.inputs) + list(self.op.outputs)
        sizes = []
        for spec in self.tensors:
            for dim in spec.shape:
                base = te_defs.parse_dim(dim)[1]
                if not base.isdigit() and base not in sizes:
                    sizes.append(base)
        self.sizes = sizes
        flags = list(self.op.variants[0])
        self.groups = {f: [s for s in self.tensors if s.when == f] for f in flags}
        self.int_flags = [f for f in flags if not self.groups[f]]
        self.flags = flags

    # -- C text pieces
    def cname(self, size: str) -> str:
        return SIZE_NAMES.get(size, size)

    def ctype(self, spec, t: str) -> str:
        return {"int32": "int32_t"}.get(spec.dtype, t) if spec.dtype else t

    def decl(self, t: str) -> str:
        ins = [f"{self.ctype(s, t)} *{s.name}" for s in self.op.inputs]
        outs = [f"{self.ctype(s, t)} *{s.name}" for s in self.op.outputs]
        return ", ".join(ins + [f"int {self.cname(n)}" for n in self.sizes] + [f"int {f}" for f in self.int_flags]
                         + outs)

    def args(self) -> str:
        return ", ".join([s.name for s in self.op.inputs] + [self.cname(n) for n in self.sizes] + self.int_flags
                         + [s.name for s in self.op.outputs])

    def size_decl(self) -> str:
        return ", ".join(f"int {self.cname(n)}" for n in self.sizes)

    def dim(self, sym: str, field: str = "a->", cast: str = "") -> str:
        """The C expression of the dimension ``sym``; with ``cast`` (a C type) the size is widened
        to it before any multiplication."""
        k, base = te_defs.parse_dim(sym)
        if base.isdigit():
            return str(k * int(base))
        size = f"({cast}){field}{base}" if cast else f"{field}{base}"
        return size if k == 1 else f"{k} * {size}"

    def elements(self, spec, field: str = "a->") -> str:
        """The element count of ``spec``'s public array, in size_t."""
        return " * ".join(self.dim(d, field, "size_t") for d in spec.shape)

    def kernel_arg(self, tir: str, tensors: dict) -> str:
        """The C expression of the kernel argument ``tir``: a tensor, a size, or a stride of a
        kernel view of a public, contiguous array (the product of the view's later dimensions)."""
        if tir in tensors:
            return f"a->{tir}"
        if tir in self.sizes:
            return f"a->{tir}"
        name, _, k = tir.rpartition("_s")
        spec = tensors.get(name)
        if spec is None or not k.isdigit():
            raise ValueError(f"DSP entry points of {self.name}: no source for the kernel argument {tir!r}")
        later = spec.kshape[int(k) + 1:]
        return " * ".join(f"({self.dim(d)})" for d in later) or "1"


def status_header(e: EntryOp) -> str:
    guard = f"{e.stem.upper()}_STATUS_H"
    codes = [f"    {e.err}_{code} = {n},{' ' * max(1, 16 - len(code))}/* {why} */"
             for n, (code, why) in enumerate(STATUS)]
    codes[-1] = codes[-1].replace(",", " ", 1)
    return "\n".join([
        f"/* fusedgrad DSP library: the status codes of {e.stem}.h -- generated by fusedgrad, do not edit.",
        " *",
        f" * The vendor's entry points return nothing: after a call, fg_{e.stem}_status() says whether it ran",
        f" * ({e.err}_OK) or why it wrote nothing; the _r and _w entry points return the code.",
        " */", f"#ifndef {guard}", f"#define {guard}", "", "enum {", *codes, "};", "#ifdef __cplusplus",
        'extern "C" {', "#endif", f"int fg_{e.stem}_status(void);", "#ifdef __cplusplus", "}", "#endif", "",
        "#endif", ""])


def status_word(e: EntryOp) -> str:
    guard = f"{e.stem.upper()}_ENTRY_H"
    return "\n".join([
        f"/* fusedgrad DSP library: the status word of {e.stem}.c's entry points -- generated by fusedgrad,",
        " * do not edit.  Included once, by the op's .c file (one word per thread in a hosted build). */",
        f"#ifndef {guard}", f"#define {guard}", '#include "fg_dsp_entry.h"', f'#include "{e.stem}_status.h"', "",
        f"static FG_DSP_THREAD_LOCAL int {e.status_word} = {e.err}_OK;", "",
        f"int fg_{e.stem}_status(void) {{ return {e.status_word}; }}", "", "#endif", ""])


def header(e: EntryOp, doc: str, dtypes, ctypes: dict) -> str:
    guard = f"{e.stem.upper()}_H"
    lines = [doc, f"#ifndef {guard}", f"#define {guard}", "", "#include <stddef.h>", "#include <stdint.h>", "",
             f'#include "{e.stem}_status.h"', ""]
    if "float16" in dtypes:
        lines += ['#include "fg_half.h"', ""]
    lines += ["#ifdef __cplusplus", 'extern "C" {', "#endif", ""]
    for dtype in dtypes:
        entry, decl = naming.dsp_entry(e.name, dtype), e.decl(ctypes[dtype])
        lines += [f"void {entry}_s({decl}, int core_mask);", f"void {entry}_p({decl});",
                  f"int {entry}_s_r({decl}, int core_mask);", f"int {entry}_p_r({decl});",
                  f"int {entry}_workspace({e.size_decl()}, size_t *bytes);",
                  f"int {entry}_s_w({decl}, int core_mask, void *workspace, size_t workspace_bytes);",
                  f"int {entry}_p_w({decl}, void *workspace, size_t workspace_bytes);", ""]
    lines += ["#ifdef __cplusplus", "}", "#endif", "#endif", ""]
    return "\n".join(lines)


def entry_points(e: EntryOp, dtype: str, t: str, kernels, workspace_function, wrappers) -> str:
    """The entry points of ``dtype`` around ``kernels`` [(variant, symbol, params, workspace)]
    (targets/dsp/entry_points.c.in, then ``wrappers``)."""
    tensors = {s.name: s for s in e.tensors}
    tag = naming.dsp_kernel_symbol(e.name, dtype, {})
    entry = naming.dsp_entry(e.name, dtype)
    cases, sizes = [], []
    for variant, name, params, workspace in kernels:
        key = e.op.variant_key(variant)
        call = ", ".join(e.kernel_arg(tir, tensors) for _, tir in params)
        cases.append(f"    case {key}: {name}({call}, rank, ncores, sync, a->ws); break;")
        sizes.append((key, workspace))
    fields = [f"    {e.ctype(s, t)} *{s.name};" for s in e.tensors]
    fields += [f"    int32_t {', '.join(e.sizes)};", "    int variant;", "    char *ws;"]
    params = ", ".join(f"{e.ctype(s, t)} *{s.name}" for s in e.op.inputs)
    params += ", " + ", ".join(f"int {e.cname(n)}" for n in e.sizes)
    params += "".join(f", int {f}" for f in e.int_flags)
    params += ", " + ", ".join(f"{e.ctype(s, t)} *{s.name}" for s in e.op.outputs)
    workspace = workspace_function(tag, {n: n for n in e.sizes}, sizes)
    set_sizes = "\n".join(f"    a.{n} = {e.cname(n)};" for n in e.sizes)
    return (templates.render("dsp", "entry_points.c.in", TAG=tag, FIELDS="\n".join(fields), WORKSPACE=workspace,
                             CASES="\n".join(cases), SIZES_OK=_sizes_ok(e, tag, t), PARAMS=params,
                             START=_start_body(e, t, tag), ENTRY=entry, SIZE_DECL=e.size_decl(), ERR=e.err,
                             SET_SIZES=set_sizes, VARIANTS=str(2 ** len(e.flags)))
            + wrappers(entry, e.decl(t), e.args(), tag, e.status_word, e.err))


def _sizes_ok(e: EntryOp, tag: str, t: str) -> str:
    """Every size at least 1, every array within int32 indices (its leading dimensions as rows, its
    last as columns: fg_sizes_ok) and size_t bytes.  All in long long, and each product of leading
    dimensions is checked (as rows x cols of one byte) before it is taken: no step can overflow."""
    lines = [f"static int {tag}_sizes_ok(const struct {tag}_args *a) {{",
             "    return " + " && ".join(f"a->{n} >= 1" for n in e.sizes)]
    for spec in e.tensors:
        dims = [e.dim(d, cast="long long") for d in spec.shape]
        rows = dims[0] if len(dims) > 1 else "1"
        for d in dims[1:-1]:
            lines.append(f"        && fg_sizes_ok({rows}, {d}, 1)")
            rows = f"{rows} * {d}"
        lines.append(f"        && fg_sizes_ok({rows}, {dims[-1]}, sizeof({e.ctype(spec, t)}))")
    lines = list(dict.fromkeys(lines))  # arrays of one shape: one check
    lines[-1] += ";"
    return "\n".join(lines + ["}"])


def _start_body(e: EntryOp, t: str, tag: str) -> str:
    """Checks in the order of the status codes, then the fields; nothing is written on a failure."""
    out = []
    required = [s.name for s in e.tensors if s.when is None]
    out.append(f"    if ({' || '.join(f'!{n}' for n in required)}) {{")
    out.append(f"        return {e.err}_ERR_NULL;")
    out.append("    }")
    for flag, group in e.groups.items():
        if group:
            given = " + ".join(f"({s.name} != NULL)" for s in group)
            out += [f"    if (({given}) % {len(group)} != 0) {{ /* all of {flag}'s tensors, or none */",
                    f"        return {e.err}_ERR_NULL;", "    }"]
    out += [f"    a->{n} = {e.cname(n)};" for n in e.sizes]
    out += [f"    if (!{tag}_sizes_ok(a)) {{", f"        return {e.err}_ERR_SIZE;", "    }"]
    n = len(e.tensors)
    n_in = len(e.op.inputs)
    out += ["    {", f"        const void *ptr[{n}];", f"        size_t bytes[{n}];"]
    for k, s in enumerate(e.tensors):
        out.append(f"        ptr[{k}] = {s.name}; bytes[{k}] = sizeof({e.ctype(s, t)}) * {e.elements(s)};")
    out += [f"        if (fg_overlap(ptr, bytes, {n_in}, {n - n_in})) {{", f"            return {e.err}_ERR_OVERLAP;",
            "        }", "    }"]
    for s in e.op.inputs:
        if s.bounded_by or s.non_increasing:
            length = e.dim(s.shape[0])
            conds = []
            if s.bounded_by:
                conds.append(f"{s.name}[k] < 0 || {s.name}[k] > {e.dim(s.bounded_by)}")
            if s.non_increasing:
                conds.append(f"(k > 0 && {s.name}[k] > {s.name}[k - 1])")
            out += ["    {", "        int32_t k;", f"        for (k = 0; k < {length}; ++k) {{",
                    f"            if ({' || '.join(conds)}) {{", f"                return {e.err}_ERR_VALUES;",
                    "            }", "        }", "    }"]
    out += [f"    a->{s.name} = {s.name};" for s in e.tensors]
    given = {f: f"({e.groups[f][0].name} != NULL)" if e.groups[f] else f"({f} != 0)" for f in e.flags}
    out += [f"    a->variant = {e.op.variant_key_c(given)};", "    a->ws = NULL;", f"    return {e.err}_OK;"]
    return "\n".join(out)
