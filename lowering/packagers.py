"""Packagers: what `fusedgrad generate` makes of a target's scheduled kernels.

Every target names its packager in ``TargetInfo.artifact``; the CLI and
lowering.sources go through this table and never through a target's name.
A packager does two things:

``sources(info, root, banner)``
    write the target's committed, reviewable sources under ``root``
    (``generated/<target>/``) and return their paths relative to ``root``,
    sorted.  ``banner(comment)`` gives the "generated -- do not edit" header
    in that comment style.
``generate(info, jobs, out, progress)``
    write what the target ships for ``jobs`` [(op, dtype), ...] into ``out``
    and record one manifest entry per job; returns the entries.
``symbols(info, op, dtype)``
    the public symbols that (op, dtype) has in what the packager writes (the
    kernels' entry points, a DSP's vendor entry points, an aclnn API), all
    from lowering.naming: what a caller links against, and what
    tests/test_recipes.py looks for in every (op, target) pair's output.

Library targets (LLVM, CUDA) review their scheduled TIR or CUDA source and
ship one library per (op, dtype) through lowering.build.  Source targets (the
DSP C library, the Ascend packages) review and ship the same tree of sources,
written whole: a DSP chip's library or an Ascend op's package holds every
dtype it serves, so ``generate`` for them takes every op and dtype the target
serves and refuses a subset.
"""
from __future__ import annotations

import dataclasses
import os
import tempfile
from pathlib import Path
from typing import Callable

from .. import schedules, te_defs
from . import build, manifest, naming, tvm_api


def _ops(info) -> list[str]:
    return [o for o in te_defs.names() if info.ops is None or o in info.ops]


@dataclasses.dataclass(frozen=True)
class LibraryPackager:
    """A library per (op, dtype) (lowering.build); reviewed as ``review`` ("tir" or "cuda")."""

    review: str

    def sources(self, info, root: Path, banner: Callable[[str], str]) -> list[str]:
        written = []
        for op_name in _ops(info):
            for dtype in info.dtypes_for(op_name):
                # the hand schedules: tuning records are per machine class, the sources are not
                funcs, tgt = build.schedule_variants(op_name, info.name, dtype, use_tuning=False)
                stem = naming.artifact_stem(op_name, info.name, dtype)
                if self.review == "cuda":
                    rel = f"{stem}.cu"
                    exe = tvm_api.compile_module({s: f for s, (f, _, _) in funcs.items()}, tgt)
                    rules = "".join(f"// {s}: variant {v}, schedule rule {r}\n"
                                    for s, (_, v, r) in sorted(funcs.items()))
                    body = [banner("//"), rules, tvm_api.device_source(exe, "cuda")]
                else:
                    rel = f"{stem}.tir.py"
                    body = [banner("#")]
                    for symbol in sorted(funcs):
                        func, variant, rule = funcs[symbol]
                        body.append(f"\n# {symbol}: variant {variant}, schedule rule {rule}\n")
                        body.append(tvm_api.script(func))
                        body.append("\n")
                root.mkdir(parents=True, exist_ok=True)
                (root / rel).write_text("".join(body))
                written.append(rel)
        return sorted(written)

    def generate(self, info, jobs, out: Path, progress=lambda i, n, text: None) -> list[dict]:
        entries = []
        for i, (op_name, dtype) in enumerate(jobs, 1):
            progress(i, len(jobs), f"building {op_name} {info.name} {dtype}")
            entries.append(build.build(op_name, info.name, dtype, out))
        return entries

    def symbols(self, info, op_name: str, dtype: str) -> list[str]:
        op = te_defs.get(op_name)
        return [naming.entry_symbol(op_name, dtype, v) for v in op.variants]


def _dsp_symbols(info, op_name: str, dtype: str) -> list[str]:
    return [naming.dsp_entry(op_name, dtype) + suffix for suffix in ("_s", "_p")]


def _aclnn_symbols(info, op_name: str, dtype: str) -> list[str]:
    rule = schedules.rule_for(info.schedules, op_name)
    return [f"aclnn{rule.cann}GetWorkspaceSize", f"aclnn{rule.cann}", naming.ascend_kernel(rule.short, dtype)]


@dataclasses.dataclass(frozen=True)
class SourcePackager:
    """A tree of C/C++ sources written by ``writer`` (``module:function``, called as
    ``function(root, banner=...)``), reviewed and shipped alike."""

    writer: str
    public: Callable[[object, str, str], list[str]]
    comment: str = "//"

    def _write(self, root: Path, banner: str) -> list[str]:
        import importlib

        module, function = self.writer.split(":")
        return sorted(getattr(importlib.import_module(module), function)(root, banner=banner))

    def sources(self, info, root: Path, banner: Callable[[str], str]) -> list[str]:
        return self._write(root, banner(self.comment))

    def generate(self, info, jobs, out: Path, progress=lambda i, n, text: None) -> list[dict]:
        whole = sorted((o, d) for o in _ops(info) for d in info.dtypes_for(o))
        if sorted(jobs) != whole:
            raise ValueError(f"--op/--dtype: target {info.name!r} is packaged whole (every op and dtype it "
                             f"serves: {whole}), got {sorted(jobs)}")
        from . import sources

        progress(1, 1, f"writing the {info.name} sources")
        out.mkdir(parents=True, exist_ok=True)
        # written into a temporary folder and moved into place: a failure leaves nothing half-written
        with tempfile.TemporaryDirectory(dir=out) as tmp:
            files = self._write(Path(tmp), sources.banner(info.name, self.comment))
            for rel in files:
                (out / rel).parent.mkdir(parents=True, exist_ok=True)
            for rel in files:
                os.replace(Path(tmp) / rel, out / rel)
        digests = {rel: manifest.file_sha256(out / rel) for rel in files}
        entries = []
        for op_name, dtype in jobs:
            entry = {"op": op_name, "target": info.name, "dtype": dtype, "files": digests,
                     "fusedgrad": build.fusedgrad_version(), "tvm": tvm_api.tvm_version(),
                     "definition_hash": build.definition_hash(op_name)}
            manifest.update_manifest(out, entry)
            entries.append(entry)
        return entries

    def symbols(self, info, op_name: str, dtype: str) -> list[str]:
        return self.public(info, op_name, dtype)


PACKAGERS = {
    "shared_library": LibraryPackager(review="tir"),
    "cuda_fatbin": LibraryPackager(review="cuda"),
    "dsp_c": SourcePackager(writer="fusedgrad.lowering.dsp:write", public=_dsp_symbols),
    "ascend_package": SourcePackager(writer="fusedgrad.lowering.ascend:write", public=_aclnn_symbols),
}


def get(info):
    """The packager of target ``info`` (ValueError naming the target and the known kinds)."""
    try:
        return PACKAGERS[info.artifact]
    except KeyError:
        raise ValueError(f"target {info.name!r}: artifact kind {info.artifact!r} has no packager "
                         f"(known: {sorted(PACKAGERS)})") from None
