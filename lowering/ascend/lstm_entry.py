"""The full LSTM's aclnn entry points (aclnnLSTM, aclnnLstmBackward) from a record of their parameters:
what the first phase refuses (a null, a flag or list length out of range) and how it binds each tensor
to the rows its pass reads or writes (a binder of targets/ascend/lstm_host.cpp: ``bind`` a tensor of a
shape of lstm.SHAPES, ``states_in`` the initial states or zeros, ``list_rows`` a list of L*D tensors,
``param_rows`` the parameters).  The generated code is the public header's declarations, the struct of
bound tensors each pass takes, and both phases' functions (targets/ascend/lstm_entry.cpp.in), which call
the hand-written pass (``forward``, ``backward``) once every argument is checked and bound.

The checks run in the order CANN's hosts use: the nulls always refused, the output mask, the nulls
refused when a flag or the mask wants the tensor, the flags and list lengths, then the sizes
(lstm_host.cpp's ``sizes_of``) and the bindings in the parameters' order.
"""
from __future__ import annotations

import dataclasses
import re
import textwrap

from .. import naming
from . import fixed
from .host import WIDTH, filled

TEMPLATE = "lstm_entry.cpp.in"
# a binding's access: fp32 rows read, rows as a GEMM reads them, fp32 rows written; rows as the persistent
# kernels' cells read or write them (the call's dtype where every layer runs on them, else fp32)
MODES = ("READ", "READ_GEMM", "WRITE", "READ_CELL", "WRITE_CELL")
LISTS = ("list_rows", "param_rows")     # the binders that fill a std::vector<Blk>, one block per tensor


@dataclasses.dataclass(frozen=True)
class Bind:
    """A tensor bound to the pass argument ``field``: ``binder(p, s, tensor, mode, &a.field, shape...)``."""

    field: str
    binder: str
    tensor: str
    mode: str = "READ"
    shape: str = ""   # the shape (FG_LSTM_*) and width arguments of ``bind``
    when: str = ""    # the C condition of binding it (empty: always)


@dataclasses.dataclass(frozen=True)
class Param:
    """A parameter of the first phase: its C declaration; ``null`` the C condition under which a null is
    refused (empty: always, None: never); ``invalid`` a C condition refused as an invalid argument; the
    tensors it binds."""

    decl: str
    null: str | None = None
    invalid: str = ""
    binds: tuple[Bind, ...] = ()

    @property
    def name(self) -> str:
        return re.findall(r"\w+", self.decl)[-1]


@dataclasses.dataclass(frozen=True)
class Entry:
    """An entry point: CANN's name (aclnn<cann>), its pass and the pass's flag argument, its batch sizes
    parameter, the outputs its output mask chooses (in the mask's order; empty: no mask), its parameters."""

    cann: str
    run: str
    flag: str
    batch_sizes: str
    params: tuple[Param, ...]
    mask: str = ""
    masked: tuple[str, ...] = ()

    @property
    def struct(self) -> str:
        return f"FgLstm{self.run.capitalize()}Args"

    @property
    def decls(self) -> list[str]:
        return [p.decl for p in self.params + RESULTS]

    @property
    def binds(self) -> list[Bind]:
        return [b for p in self.params for b in p.binds]


RESULTS = (Param("uint64_t *workspaceSize", ""), Param("aclOpExecutor **executor", ""))  # every first phase's last


def _states(field: str, tensor: str, mode: str = "READ", when: str = "") -> Bind:
    return Bind(field, "bind", tensor, mode, "FG_LSTM_STATES", when)


def _list(decl: str, field: str, mode: str, need: str | None = "", when: str = "") -> Param:
    return Param(decl, need, binds=(Bind(field, "list_rows", re.findall(r"\w+", decl)[-1], mode, when=when),))


_FLAGS = (Param("bool hasBias"), Param("int64_t numLayers"), Param("double dropout", invalid="dropout != 0.0"))
_LAYOUT = (Param("bool bidirectional"), Param("bool batchFirst"))
_INPUT = Param("const aclTensor *input", "", binds=(Bind("x", "bind", "input", "READ_GEMM", "s.layout, s.I"),))
_PARAMS = Param("const aclTensorList *params", "", binds=(Bind("w", "param_rows", "params"),))

FORWARD = Entry("LSTM", "forward", "train", "batchSizes", (
    _INPUT, _PARAMS,
    Param("const aclTensorList *hx", invalid="hx && hx->Size() != 2", binds=(
        Bind("h0", "states_in", "hx ? (*hx)[0] : nullptr"),
        Bind("h0g", "states_in", "hx ? (*hx)[0] : nullptr", "READ_GEMM", when="s.dtype != ACL_FLOAT"),
        Bind("c0", "states_in", "hx ? (*hx)[1] : nullptr"))),
    Param("const aclTensor *batchSizes"), *_FLAGS, Param("bool train"), *_LAYOUT,
    Param("aclTensor *output", "", binds=(
        Bind("y", "bind", "output", "WRITE_CELL", "batchFirst && !s.varlen() ? FG_LSTM_SEQ_BF : FG_LSTM_SEQ, s.D * s.H"),)),
    Param("aclTensor *hy", "", binds=(_states("hy", "hy", "WRITE_CELL"),)),  # y and hy: copies of h
    Param("aclTensor *cy", "", binds=(_states("cy", "cy", "WRITE"),)),
    *(_list(f"aclTensorList *{n}", f, "WRITE" if f == "c" else "WRITE_CELL", "train", "train")  # c's recurrence: fp32
      for n, f in (("iOut", "i"), ("jOut", "g"), ("fOut", "f"), ("oOut", "o"), ("hOut", "h"), ("cOut", "c"),
                   ("tanhCOut", "tanhc")))))

BACKWARD = Entry("LstmBackward", "backward", "want", "batchSizesOptional", (
    _INPUT,
    Param("const aclTensorList *hx", "", "hx->Size() != 2",
          (_states("h0", "(*hx)[0]", "READ_GEMM"), _states("c0", "(*hx)[1]", "READ_CELL"))),
    _PARAMS,
    Param("const aclTensor *dy", "", binds=(Bind("dy", "bind", "dy", "READ_CELL", "s.layout, s.D * s.H"),)),
    Param("const aclTensor *dh", "", binds=(_states("dh", "dh"),)),
    Param("const aclTensor *dc", "", binds=(_states("dc", "dc"),)),
    *(_list(f"const aclTensorList *{n}", n, "READ_GEMM" if n == "h" else "READ_CELL") for n in "igfohc"),
    _list("const aclTensorList *tanhc", "tanhc", "READ_CELL"),
    Param("const aclTensor *batchSizesOptional"), *_FLAGS, Param("bool train", invalid="!train"), *_LAYOUT,
    Param("const aclBoolArray *outputMask"),
    Param("aclTensor *dxOut", "want[0]", binds=(Bind("dx", "bind", "dxOut", "WRITE", "s.layout, s.I", "want[0]"),)),
    Param("aclTensor *dhPrevOut", "want[1]", binds=(_states("dh0", "dhPrevOut", "WRITE", "want[1]"),)),
    Param("aclTensor *dcPrevOut", "want[2]", binds=(_states("dc0", "dcPrevOut", "WRITE", "want[2]"),)),
    Param("aclTensorList *dparamsOut", "want[3]",
          binds=(Bind("dw", "param_rows", "dparamsOut", "WRITE", when="want[3]"),))),
    mask="outputMask", masked=("dxOut", "dhPrevOut", "dcPrevOut", "dparamsOut"))

ENTRIES = (FORWARD, BACKWARD)


def validate(entry: Entry) -> None:
    """ValueError naming the entry point where its record is inconsistent: a field bound twice, a mode or
    binder lstm_host.cpp does not have, an output mask whose outputs are not its parameters'."""
    where = f"aclnn{entry.cann}"
    names = [p.name for p in entry.params]
    fields = [b.field for b in entry.binds]
    if len(set(fields)) != len(fields):
        raise ValueError(f"{where}: a field bound twice in {fields}")
    for b in entry.binds:
        if b.mode not in MODES or b.binder not in ("bind", "states_in") + LISTS:
            raise ValueError(f"{where}: {b.field} bound by {b.binder}({b.mode}), not one of lstm_host.cpp's")
        if (b.binder == "bind") != bool(b.shape):
            raise ValueError(f"{where}: {b.field}: only bind takes a shape, and it needs one")
    if bool(entry.mask) != bool(entry.masked) or (entry.mask and entry.mask not in names):
        raise ValueError(f"{where}: the output mask {entry.mask!r} is not a parameter")
    if not set(entry.masked) <= set(names) or entry.batch_sizes not in names:
        raise ValueError(f"{where}: {entry.masked} and {entry.batch_sizes!r} must be parameters")


def _part(name: str, **fields: str) -> str:
    return fixed.section(TEMPLATE, name, **fields)


def struct(entry: Entry) -> str:
    """The struct of the entry point's bound tensors (its pass's argument)."""
    validate(entry)
    return _part("struct", API=f"aclnn{entry.cann}", STRUCT=entry.struct,
                 BLKS=", ".join(b.field for b in entry.binds if b.binder not in LISTS),
                 LISTS=", ".join(b.field for b in entry.binds if b.binder in LISTS))


def _wrapped(text: str, indent: int) -> str:
    """A long condition over lines of WIDTH, continuation lines indented by ``indent``."""
    return textwrap.fill(text, WIDTH - 40, subsequent_indent=" " * indent, break_long_words=False,
                         break_on_hyphens=False)


def _nulls(params, conds) -> list[str]:
    out = []
    for cond in conds:
        names = " || ".join(f"!{p.name}" for p in params if p.null == cond)
        cond = names if not cond else f"{cond} && " + (f"({names})" if "||" in names else names)
        out.append(_part("refuse", COND=_wrapped(cond, 8), ERR="NULLPTR"))
    return out


def functions(entry: Entry) -> str:
    """Both phases of the entry point."""
    validate(entry)
    api = f"aclnn{entry.cann}"
    out = [filled(f"aclnnStatus {api}GetWorkspaceSize", entry.decls)]
    required = entry.params + RESULTS
    out += _nulls(required, [""])
    if entry.mask:
        out.append(_part("mask", N=str(len(entry.masked)), MASK=entry.mask, TRUES=", ".join(["true"] * len(entry.masked)),
                         OUTPUTS=", ".join(entry.masked)))
    out += _nulls(required, list(dict.fromkeys(p.null for p in entry.params if p.null)))
    out += [_part("refuse", COND=p.invalid, ERR="INVALID") for p in entry.params if p.invalid]
    out.append(_part("sizes", BATCH_SIZES=entry.batch_sizes, STRUCT=entry.struct))
    for b in entry.binds:
        out.append(_part("bind", WHEN=f" && {b.when}" if b.when else "", BINDER=b.binder, TENSOR=b.tensor,
                         MODE=b.mode, FIELD=b.field, SHAPE=f", {b.shape}" if b.shape else ""))
    out.append(_part("tail", API=api, PASS=entry.run, FLAG=entry.flag))
    return "\n".join(out)


def step_pitches(short: str, args: tuple[str, ...]) -> str:
    """fg_<short>_pitches: a step kernel's tiling's row pitches (s_<argument>) from its GM arguments, in the
    kernel's order (the workspace and tiling left out)."""
    tensors = [a for a in args if a not in ("workspace", "tiling")]
    return _part("pitches", FN=f"fg_{short}_pitches", TILING=naming.ascend_tiling(short),
                 SETS="\n    ".join(_part("pitch", ARG=a, I=str(k)) for k, a in enumerate(tensors)))
