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
        """The C expression of the kernel argument ``tir``: a tensor, a size, an int flag, or a stride
        of a kernel view of a public, contiguous array (the product of the view's later dimensions)."""
        if tir in tensors:
            return f"a->{tir}"
        if tir in self.sizes:
            return f"a->{tir}"
        if tir in self.int_flags:  # a flag the kernel reads at run time: its bit of the variant key
            shift = len(self.flags) - 1 - self.flags.index(tir)
            return f"((a->variant >> {shift}) & 1)"
        name, _, k = tir.rpartition("_s")
        spec = tensors.get(name)
        if spec is None or not k.isdigit():
            raise ValueError(f"DSP entry points of {self.name}: no source for the kernel argument {tir!r}")
        later = spec.kshape[int(k) + 1:]
        return " * ".join(f"({self.dim(d)})" for d in later) or "1"


def status_header(e: EntryOp) -> str:
    codes = [f"    {e.err}_{code} = {n},{' ' * max(1, 16 - len(code))}/* {why} */"
             for n, (code, why) in enumerate(STATUS)]
    codes[-1] = codes[-1].replace(",", " ", 1)
    return templates.render("dsp", "status.h.in", STEM=e.stem, GUARD=f"{e.stem.upper()}_STATUS_H", ERR=e.err,
                            CODES="\n".join(codes))


def status_word(e: EntryOp) -> str:
    return templates.render("dsp", "entry.h.in", STEM=e.stem, GUARD=f"{e.stem.upper()}_ENTRY_H",
                            WORD=e.status_word, ERR=e.err)


def header(e: EntryOp, doc: str, dtypes, ctypes: dict) -> str:
    return header_text(e.name, doc, dtypes, {d: e.decl(ctypes[d]) for d in dtypes}, e.size_decl())


def header_text(op: str, doc: str, dtypes, decls: dict, sizes: str) -> str:
    """The public header of ``op``: ``doc``, its status codes, the entry points of each dtype with the
    parameters ``decls[dtype]`` and the workspace query's ``sizes`` (targets/dsp/header.h.in)."""
    stem = naming.dsp_file(op)
    return templates.render(
        "dsp", "header.h.in", DOC=doc, GUARD=f"{stem.upper()}_H", STEM=stem,
        HALF='\n#include "fg_half.h"\n' if "float16" in dtypes else "",
        DECLS="\n".join(templates.render("dsp", "entry_decls.h.in", ENTRY=naming.dsp_entry(op, d), DECL=decls[d],
                                         SIZES=sizes) for d in dtypes))


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
    given = {f: f"({e.groups[f][0].name} != NULL)" if e.groups[f] else f"({f} != 0)" for f in e.flags}
    sep = ",\n" + " " * len("        const size_t bytes[] = {")
    return (templates.render(
        "dsp", "entry_points.c.in", TAG=tag, FIELDS="\n".join(fields), CASES="\n".join(cases),
        WORKSPACE=workspace_function(tag, {n: n for n in e.sizes}, sizes), SIZE_CHECKS=_size_checks(e, t),
        PARAMS=params, NULLS=_nulls(e), SET_SIZES="\n".join(f"    a->{n} = {e.cname(n)};" for n in e.sizes),
        PTRS=", ".join(s.name for s in e.tensors), INPUTS=str(len(e.op.inputs)), OUTPUTS=str(len(e.op.outputs)),
        BYTES=sep.join(f"sizeof({e.ctype(s, t)}) * {e.elements(s)}" for s in e.tensors),
        VALUE_CHECKS=_value_checks(e), SET_FIELDS="\n".join(f"    a->{s.name} = {s.name};" for s in e.tensors),
        VARIANT=e.op.variant_key_c(given), ENTRY=entry, SIZE_DECL=e.size_decl(), ERR=e.err,
        VARIANTS=str(2 ** len(e.flags)))
            + wrappers(entry, e.decl(t), e.args(), tag, e.status_word, e.err))


def _size_checks(e: EntryOp, t: str) -> str:
    """Every size at least 1, every array within int32 indices (its leading dimensions as rows, its
    last as columns: fg_sizes_ok) and size_t bytes.  All in long long, and each product of leading
    dimensions is checked (as rows x cols of one byte) before it is taken: no step can overflow."""
    checks = [" && ".join(f"a->{n} >= 1" for n in e.sizes)]
    for spec in e.tensors:
        dims = [e.dim(d, cast="long long") for d in spec.shape]
        rows = dims[0] if len(dims) > 1 else "1"
        for d in dims[1:-1]:
            checks.append(f"fg_sizes_ok({rows}, {d}, 1)")
            rows = f"{rows} * {d}"
        checks.append(f"fg_sizes_ok({rows}, {dims[-1]}, sizeof({e.ctype(spec, t)}))")
    return "\n        && ".join(dict.fromkeys(checks))  # arrays of one shape: one check


def _nulls(e: EntryOp) -> str:
    """A required pointer NULL, or a variant's group of tensors given in part."""
    conds = [" || ".join(f"!{s.name}" for s in e.tensors if s.when is None)]
    for group in e.groups.values():
        if group:
            given = " + ".join(f"({s.name} != NULL)" for s in group)
            conds.append(f"({given}) % {len(group)} != 0")
    return "\n        || ".join(conds)


def _value_checks(e: EntryOp) -> str:
    """The integer inputs within their bounds (TensorSpec.bounded_by, non_increasing: fg_values_ok)."""
    checks = []
    for s in e.op.inputs:
        if s.bounded_by or s.non_increasing:
            lo, hi = ("0", e.dim(s.bounded_by)) if s.bounded_by else ("INT32_MIN", "INT32_MAX")
            checks.append(f"fg_values_ok({s.name}, {e.dim(s.shape[0])}, {lo}, {hi}, {int(s.non_increasing)})")
    return " && ".join(checks) or "1"
