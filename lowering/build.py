"""build(op, target, dtype) -> an artifact: a library + its manifest entry.

An artifact holds every variant of one op for one target and dtype in one
library, written by the target's exporter (lowering.exporters).  Its manifest
entry (lowering.manifest) records what a loader needs to check and call it:
op, target, dtype, entry symbols with their argument specs, the TVM versions,
the hashes of definition, schedule and lowering sources, the hash of the
scheduled TIR, and the sha256 of the library file.  ``schedule_variants`` is
the one place an op's definition meets a target's schedule rules; every
packager (lowering.packagers) starts from it.
"""
from __future__ import annotations

import functools
import hashlib
import importlib
import inspect
import json
import os
import tempfile
from pathlib import Path

from .. import schedules, targets, te_defs
from ..schedules import tir_api
from . import cuda, exporters, intrinsics, manifest, naming, tuning_records, tvm_api
from .manifest import FORMAT, MANIFEST, file_sha256, read_manifest, update_manifest  # noqa: F401


def fusedgrad_version() -> str:
    from ..version import __version__

    return __version__


def _sources_hash(*modules) -> str:
    h = hashlib.sha256()
    for mod in modules:
        h.update(inspect.getsource(mod).encode())
    return h.hexdigest()


def definition_hash(op_name: str) -> str:
    """Hash of the op's module and of every module its compute, reference and sample come from
    (an op may reuse another's)."""
    op = te_defs.get(op_name)
    modules = {importlib.import_module(f"{te_defs.__name__}.{op_name}")}
    modules |= {inspect.getmodule(fn) for fn in (op.compute, op.reference, op.sample)}
    return _sources_hash(te_defs, *sorted(modules, key=lambda m: m.__name__))


def lowering_hash() -> str:
    from . import build as this

    sources = _sources_hash(this, cuda, exporters, intrinsics, manifest, naming, tvm_api)
    return hashlib.sha256((sources + cuda.GRID_SYNC).encode()).hexdigest()  # and the barrier's source file


@functools.lru_cache(maxsize=None)
def cache_key(op_name: str, target_name: str, dtype: str) -> str:
    """What decides the bytes of an artifact; equal keys mean interchangeable artifacts."""
    info = targets.get(target_name)
    parts = {
        "op": op_name,
        "target": target_name,
        "tvm_target": info.tvm_target(),
        "dtype": dtype,
        "definition": definition_hash(op_name),
        "schedule": schedules.source_hash(info.schedules),
        "lowering": lowering_hash(),
        "tvm": tvm_api.tvm_version(),
        "tvm_ffi": tvm_api.tvm_ffi_version(),
    }
    if info.archs is not None:
        parts["archs"] = list(info.archs())
    if info.facts:  # what the rules size their blocks from
        parts["facts"] = info.facts
    knobs = tuning_records.knobs_for(op_name, target_name, dtype)
    if knobs:
        parts["tuned_knobs"] = knobs
    if info.artifact == "cuda_fatbin":
        parts["nvcc"] = cuda.nvcc_version()
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:24]


def arg_specs(op, variant, dtype) -> list[dict]:
    """The manifest's argument list of one kernel variant, in kernel order: inputs, scalars, outputs."""
    specs = []
    for role, group in (("input", op.inputs), ("output", op.outputs)):
        for t in group:
            if op.present(t, variant):
                specs.append({"name": t.name, "role": role, "dtype": t.dtype or dtype,
                              "shape": list(t.shape), "kernel_shape": list(t.kshape)})
    for s in op.scalars:
        specs.append({"name": s.name, "role": "scalar", "dtype": "float32", "default": s.default})
    # kernel argument order: inputs, scalars, outputs (as the definitions return them)
    order = {"input": 0, "scalar": 1, "output": 2}
    return sorted(specs, key=lambda a: order[a["role"]])


def schedule_variants(op_name: str, target_name: str, dtype: str, emulate_on_host: bool = False,
                      use_tuning: bool = True, review: bool = False):
    """Scheduled PrimFuncs of every variant the target builds (``OpDef.variants_for``):
    {symbol: (func, variant, rule name)}.

    ``emulate_on_host``: schedule with the target's rules but for the host CPU
    (a device rule then keeps its loop nest and leaves thread loops serial), so
    tests on a machine without the device run the device schedules' loop nests.
    ``use_tuning``: apply this machine class's tuning record when it won
    (lowering.tuning_records); False gives the hand schedules whatever the machine.
    ``review``: schedule for the machine the target's committed sources are written for (its facts'
    ``review`` part of the TVM target), so they are the same on every machine.
    """
    op = te_defs.get(op_name)
    info = targets.get(target_name)
    info.check(op_name, dtype)
    spec = targets.get("llvm").tvm_target() if emulate_on_host else info.tvm_target()
    if review:
        spec = {**spec, **info.facts.get("review", {})}
    tgt = tvm_api.target(spec)
    knobs = tuning_records.knobs_for(op_name, target_name, dtype) if use_tuning and not emulate_on_host else None
    out = {}
    for variant in op.variants_for(target_name):
        compute_flags, schedule_flags = op.split_variant(variant)
        args = op.compute(dtype, **compute_flags)
        symbol = naming.entry_symbol(op_name, dtype, variant)
        inputs = [t.name for t in op.inputs if op.present(t, variant)]
        inputs += [t.name for t in op.outputs if t.strided and op.present(t, variant)]
        func = tir_api.prim_func(args, symbol, op_name, strided=inputs, schedule_flags=schedule_flags)
        sch, rule = schedules.apply(info.schedules, func, tgt, knobs=knobs)
        out[symbol] = (sch.mod["main"].with_attr("global_symbol", symbol), dict(variant), rule)
    return out, tgt


def build(op_name: str, target_name: str, dtype: str, out_dir: str | os.PathLike) -> dict:
    """Compile one artifact into ``out_dir`` and record it in ``out_dir/manifest.json``.

    A CPU library records the ISA class it was built for (``isa_class``, from the CPU and triple of
    its TVM target; None for other targets) and carries it in its file name, so building an op for
    another class adds an entry and a library beside the first; the same class again replaces it.

    The library is written under a temporary name and renamed into place, and
    the manifest is rewritten atomically, so a failed build leaves nothing
    half-written.  Returns the manifest entry.
    """
    info = targets.get(target_name)
    info.check(op_name, dtype)
    export = exporters.EXPORTERS.get(info.artifact)
    if export is None:
        raise ValueError(f"target {target_name!r}: artifact kind {info.artifact!r} is not a library "
                         f"(libraries: {sorted(exporters.EXPORTERS)}); lowering.packagers writes it")
    intrinsics.install(info.tvm_target()["kind"], dict(info.intrinsics))
    funcs, tgt = schedule_variants(op_name, target_name, dtype)
    op = te_defs.get(op_name)
    exe = tvm_api.compile_module({s: f for s, (f, _, _) in funcs.items()}, tgt)

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    # a CPU library's ISA class names its file and keys its entry: one folder holds one per class
    isa_class = info.isa_class(info.tvm_target()) if info.isa_class else None
    lib_name = f"{naming.artifact_stem(op_name, target_name, dtype, isa_class)}.so"
    with tempfile.TemporaryDirectory(dir=out) as tmp:
        tmp_lib = Path(tmp) / lib_name
        extra = export(exe, info, tmp_lib, Path(tmp), {s: f for s, (f, _, _) in funcs.items()}, tgt)
        digest = file_sha256(tmp_lib)
        if "source" in extra:
            os.replace(Path(tmp) / extra["source"], out / extra["source"])
        os.replace(tmp_lib, out / lib_name)
    tir = hashlib.sha256("".join(tir_api.script(f) for f, _, _ in funcs.values()).encode()).hexdigest()
    entry = {
        "op": op_name,
        "target": target_name,
        "tvm_target": info.tvm_target(),
        "isa_class": isa_class,
        "dtype": dtype,
        "library": lib_name,
        "sha256": digest,
        "fusedgrad": fusedgrad_version(),
        "tvm": tvm_api.tvm_version(),
        "tvm_ffi": tvm_api.tvm_ffi_version(),
        "cache_key": cache_key(op_name, target_name, dtype),
        "definition_hash": definition_hash(op_name),
        "schedule_hash": schedules.source_hash(info.schedules),
        "tir_sha256": tir,
        "tuning_records": _tuning_entry(op_name, target_name, dtype),
        "kernels": [
            {"symbol": s, "variant": v, "rule": rule, "args": arg_specs(op, v, dtype), **_launch_facts(f)}
            for s, (f, v, rule) in funcs.items()
        ],
        **extra,
    }
    update_manifest(out, entry)
    return entry


def _launch_facts(func) -> dict:
    """What a loader needs of a kernel's launch that the library cannot tell it: a persistent kernel's
    hidden units per block (``fusedgrad.grid_units``) and how its launch's dynamic shared memory
    follows H (``fusedgrad.dynamic_shared``, ``lowering.cuda.dynamic_shared_bytes``), both set by its
    rule, from which the loader finds its grid and checks that the device holds it at once."""
    attrs = func.attrs if func.attrs is not None else {}
    units, dynamic = attrs.get("fusedgrad.grid_units"), attrs.get("fusedgrad.dynamic_shared")
    return {**({} if units is None else {"grid_units": int(units)}),
            **({} if dynamic is None else {"dynamic_shared": {str(k): int(v) for k, v in dynamic.items()}})}


def _tuning_entry(op_name: str, target_name: str, dtype: str) -> dict | None:
    """What the manifest says about tuning: None (hand schedule, no record), or the record taken
    (``<class>/<file>``), the class looked for and whether it was that one, and whether it was used."""
    found = tuning_records.find(op_name, target_name, dtype)
    if found is None:
        return None
    rec = found.record
    return {"record": f"{found.key}/{found.path.name}", "for": found.want, "exact": found.exact,
            "used": rec["use"], "knobs": rec["knobs"] if rec["use"] else None, "shape": rec["shape"],
            "tuned_ms": rec["tuned_ms"], "hand_ms": rec["hand_ms"]}