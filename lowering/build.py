"""build(op, target, dtype) -> an artifact: shared library + manifest entry.

An artifact holds every variant of one op for one target and dtype in one
library.  Its manifest entry records what a loader needs to check and call it:
op, target, dtype, entry symbols with their argument specs, the TVM versions,
the hashes of definition, schedule and lowering sources, the hash of the
scheduled TIR, and the sha256 of the library file.
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
from . import cuda, intrinsics, naming, tuning, tvm_api

MANIFEST = "manifest.json"
FORMAT = 1


def fusedgrad_version() -> str:
    from .. import __version__

    return __version__


def _sources_hash(*modules) -> str:
    h = hashlib.sha256()
    for mod in modules:
        h.update(inspect.getsource(mod).encode())
    return h.hexdigest()


def definition_hash(op_name: str) -> str:
    """Hash of the op's module and of every module its compute and reference come from
    (an op may reuse another's, e.g. matmul_packed_rows, matmul_tn)."""
    op = te_defs.get(op_name)
    modules = {importlib.import_module(f"{te_defs.__name__}.{op_name}")}
    modules |= {inspect.getmodule(fn) for fn in (op.compute, op.reference, op.sample)}
    return _sources_hash(te_defs, *sorted(modules, key=lambda m: m.__name__))


def lowering_hash() -> str:
    from . import build as this

    return _sources_hash(this, cuda, intrinsics, naming, tvm_api)


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
    knobs = tuning.knobs_for(op_name, target_name, dtype)
    if knobs:
        parts["tuned_knobs"] = knobs
    if info.artifact == "cuda_fatbin":
        parts["nvcc"] = cuda.nvcc_version()
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:24]


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _arg_specs(op, variant, dtype) -> list[dict]:
    specs = []
    for role, group in (("input", op.inputs), ("output", op.outputs)):
        for t in group:
            if op.present(t, variant):
                specs.append({"name": t.name, "role": role, "dtype": dtype,
                              "shape": list(t.shape), "kernel_shape": list(t.kshape)})
    for s in op.scalars:
        specs.append({"name": s.name, "role": "scalar", "dtype": "float32", "default": s.default})
    # kernel argument order: inputs, scalars, outputs (as the definitions return them)
    order = {"input": 0, "scalar": 1, "output": 2}
    return sorted(specs, key=lambda a: order[a["role"]])


def schedule_variants(op_name: str, target_name: str, dtype: str, emulate_on_host: bool = False,
                      use_tuning: bool = True):
    """Scheduled PrimFuncs of every variant: {symbol: (func, variant, rule name)}.

    ``emulate_on_host``: schedule with the target's rules but for the host CPU
    (a device rule then keeps its loop nest and leaves thread loops serial), so
    tests on a machine without the device run the device schedules' loop nests.
    ``use_tuning``: apply this machine class's tuning record when it won
    (lowering.tuning); False gives the hand schedules whatever the machine.
    """
    op = te_defs.get(op_name)
    info = targets.get(target_name)
    info.check(op_name, dtype)
    tgt = tvm_api.target(targets.get("llvm").tvm_target() if emulate_on_host else info.tvm_target())
    knobs = tuning.knobs_for(op_name, target_name, dtype) if use_tuning and not emulate_on_host else None
    out = {}
    for variant in op.variants:
        args = op.compute(dtype, **variant)
        symbol = naming.entry_symbol(op_name, dtype, variant)
        inputs = [t.name for t in op.inputs if op.present(t, variant)]
        inputs += [t.name for t in op.outputs if t.strided and op.present(t, variant)]
        func = tvm_api.prim_func(args, symbol, op_name, strided=inputs)
        sch, rule = schedules.apply(info.schedules, func, tgt, knobs=knobs)
        out[symbol] = (sch.mod["main"].with_attr("global_symbol", symbol), dict(variant), rule)
    return out, tgt


# artifact kinds lowering can package (TargetInfo.artifact); C-source emitters join here
PACKAGERS = ("shared_library", "cuda_fatbin")


def _export(exe, info, lib: Path, workdir: Path, funcs, tgt) -> dict:
    """Write the library; returns what the manifest records beyond the common fields."""
    if info.artifact == "shared_library":
        tvm_api.export_library(exe, str(lib))
        return {}
    # cuda_fatbin: nvcc the device source, put the fatbin where TVM's blob had the source
    bad = tvm_api.host_buffer_stores(funcs, tgt)
    if bad:
        raise ValueError(f"{info.name}: the host code of {sorted(bad)} writes buffers {bad} "
                         "(device memory from the CPU); the schedule must put every store in a kernel")
    source = tvm_api.device_source(exe, "cuda")
    archs = list(info.archs())
    fatbin, resources = cuda.compile_fatbin(source, archs, workdir)
    kernels = cuda.device_kernels(source, resources, archs)

    def write_imports(module, tmp):
        c_source = tvm_api.pack_imports_c(module)
        blob = cuda.replace_device_code(cuda.c_blob(c_source), source, fatbin)
        path = Path(tmp) / "devc.c"
        path.write_text(cuda.with_c_blob(c_source, blob))
        return str(path)

    tvm_api.export_library_with_imports(exe, str(lib), write_imports)
    cu = lib.with_suffix(".cu")
    cu.write_text(source)
    return {"archs": archs, "nvcc": cuda.nvcc_version(), "fatbin_sha256": hashlib.sha256(fatbin).hexdigest(),
            "fatbin_bytes": len(fatbin), "source": cu.name, "device_kernels": kernels}


def build(op_name: str, target_name: str, dtype: str, out_dir: str | os.PathLike) -> dict:
    """Compile one artifact into ``out_dir`` and record it in ``out_dir/manifest.json``.

    The library is written under a temporary name and renamed into place, and
    the manifest is rewritten atomically, so a failed build leaves nothing
    half-written.  Returns the manifest entry.
    """
    info = targets.get(target_name)
    info.check(op_name, dtype)
    if info.artifact not in PACKAGERS:
        raise ValueError(f"target {target_name!r}: artifact kind {info.artifact!r} has no packager "
                         f"(known: {sorted(PACKAGERS)})")
    intrinsics.install(info.tvm_target()["kind"], dict(info.intrinsics))
    funcs, tgt = schedule_variants(op_name, target_name, dtype)
    op = te_defs.get(op_name)
    exe = tvm_api.compile_module({s: f for s, (f, _, _) in funcs.items()}, tgt)

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    stem = naming.artifact_stem(op_name, target_name, dtype)
    lib_name = f"{stem}.so"
    with tempfile.TemporaryDirectory(dir=out) as tmp:
        tmp_lib = Path(tmp) / lib_name
        extra = _export(exe, info, tmp_lib, Path(tmp), {s: f for s, (f, _, _) in funcs.items()}, tgt)
        digest = file_sha256(tmp_lib)
        if "source" in extra:
            os.replace(Path(tmp) / extra["source"], out / extra["source"])
        os.replace(tmp_lib, out / lib_name)
    tir = hashlib.sha256("".join(tvm_api.script(f) for f, _, _ in funcs.values()).encode()).hexdigest()
    entry = {
        "op": op_name,
        "target": target_name,
        "tvm_target": info.tvm_target(),
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
            {"symbol": s, "variant": v, "rule": rule, "args": _arg_specs(op, v, dtype)}
            for s, (_, v, rule) in funcs.items()
        ],
        **extra,
    }
    update_manifest(out, entry)
    return entry


def _tuning_entry(op_name: str, target_name: str, dtype: str) -> dict | None:
    """What the manifest says about tuning: None (hand schedule, no record), or the record and whether it was used."""
    rec = tuning.read_record(op_name, target_name, dtype)
    if rec is None:
        return None
    return {"record": str(tuning.record_path(op_name, target_name, dtype).relative_to(tuning.tuning_root())),
            "used": rec["use"], "knobs": rec["knobs"] if rec["use"] else None, "shape": rec["shape"],
            "tuned_ms": rec["tuned_ms"], "hand_ms": rec["hand_ms"]}


def read_manifest(out_dir: str | os.PathLike) -> dict:
    path = Path(out_dir) / MANIFEST
    if not path.exists():
        return {"format": FORMAT, "artifacts": []}
    return json.loads(path.read_text())


def update_manifest(out_dir: Path, entry: dict) -> None:
    manifest = read_manifest(out_dir)
    key = (entry["op"], entry["target"], entry["dtype"])
    arts = [a for a in manifest["artifacts"] if (a["op"], a["target"], a["dtype"]) != key]
    arts.append(entry)
    arts.sort(key=lambda a: (a["op"], a["target"], a["dtype"]))
    manifest = {"format": FORMAT, "artifacts": arts}
    fd, tmp = tempfile.mkstemp(dir=out_dir, suffix=".json.tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, out_dir / MANIFEST)
