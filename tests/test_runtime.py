"""fusedgrad.runtime: loading built artifacts, manifest checks, the disk cache; target checks."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import build_cache
from conftest import LN_ARGS, LSTM_ARGS, assert_close, ln_inputs, ln_reference, lstm_inputs, lstm_reference, to_np
from fusedgrad import cache_files, runtime, targets, te_defs
from fusedgrad.lowering import build as build_mod
from fusedgrad.lowering import naming

OPS = ("layer_norm_backward", "lstm_cell_backward")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """One directory holding the float32 artifacts of both ops, built with lowering.build.build (an
    unchanged build reused: build_cache.artifact)."""
    out = tmp_path_factory.mktemp("artifacts")
    entries = {op: build_cache.artifact(op, "llvm", "float32", out) for op in OPS}
    return out, entries


@pytest.fixture
def art_dir(built, tmp_path):
    """A private copy of the built directory, free to tamper with."""
    dst = tmp_path / "art"
    shutil.copytree(built[0], dst)
    return dst


def host_library(op: str, dtype: str = "float32") -> str:
    """The file name of the host build's library: its ISA class is part of it."""
    from fusedgrad.targets import llvm

    return naming.artifact_stem(op, "llvm", dtype, llvm.isa_class_of(targets.get("llvm").tvm_target())) + ".so"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def edit_manifest(path: Path, fn) -> None:
    m = json.loads((path / build_mod.MANIFEST).read_text())
    fn(m)
    (path / build_mod.MANIFEST).write_text(json.dumps(m))


# --------------------------------------------------------------------------- build + load


def test_build_writes_manifest_and_libraries(built):
    out, entries = built
    manifest = json.loads((out / build_mod.MANIFEST).read_text())
    assert manifest["format"] == build_mod.FORMAT
    keys = sorted((a["op"], a["target"], a["dtype"]) for a in manifest["artifacts"])
    assert keys == [(op, "llvm", "float32") for op in OPS]
    for a in manifest["artifacts"]:
        lib = out / a["library"]
        assert lib.is_file()
        assert a["sha256"] == sha256(lib)
        assert a["cache_key"] == build_mod.cache_key(a["op"], "llvm", "float32")
        assert a["isa_class"] == targets.llvm.cpu_facts().isa_class  # built for this machine's CPU
        assert a["library"] == host_library(a["op"])
        variants = te_defs.get(a["op"]).variants
        assert len(a["kernels"]) == len(variants)
        assert sorted(k["symbol"] for k in a["kernels"]) == sorted(
            naming.entry_symbol(a["op"], "float32", v) for v in variants)
    # nothing left behind but the manifest and the libraries
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [build_mod.MANIFEST] + [a["library"] for a in manifest["artifacts"]])


def test_load_and_call_layer_norm_kernel(built):
    lib = runtime.load(built[0])
    assert set(lib) == {(op, "llvm", "float32") for op in OPS}
    kernel = lib.kernel("layer_norm_backward", "float32", {})
    inp = ln_inputs((9,), 20, seed=1)
    args = [to_np(inp[k], "float32") for k in LN_ARGS]
    dx, dgamma, dbeta = np.empty((9, 20), np.float32), np.empty(20, np.float32), np.empty(20, np.float32)
    kernel(*args, 1e-5, dx, dgamma, dbeta)
    ref = ln_reference(inp, "float32")
    assert_close(dx, ref["dx"], 1e-5, 1e-5, name="dx")
    assert_close(dgamma, ref["dgamma"], 1e-5, 1e-5, name="dgamma")
    assert_close(dbeta, ref["dbeta"], 1e-5, 1e-5, name="dbeta")


@pytest.mark.parametrize("has_bias", [True, False])
def test_load_and_call_lstm_kernel(built, has_bias):
    lib = runtime.load(built[0])
    variant = {"has_grad_hy": True, "has_grad_cy": True, "has_bias": has_bias}
    kernel = lib.kernel("lstm_cell_backward", "float32", variant)
    assert kernel.variant == variant
    N, H = 5, 19
    inp = lstm_inputs(N, H, seed=2)
    args = [to_np(inp[k], "float32") for k in LSTM_ARGS]
    args[-1] = args[-1].reshape(N, 4, H)
    gg, gcx = np.empty((N, 4, H), np.float32), np.empty((N, H), np.float32)
    outs = [gg, gcx] + ([np.empty((4, H), np.float32)] if has_bias else [])
    kernel(*args, *outs)
    ref = lstm_reference(inp, "float32", has_bias)
    assert_close(gg.reshape(N, 4 * H), ref["grad_gates"], 1e-5, 1e-5, name="grad_gates")
    assert_close(gcx, ref["grad_cx"], 1e-5, 1e-5, name="grad_cx")
    if has_bias:
        assert_close(outs[2].reshape(4 * H), ref["grad_bias"], 1e-5, 1e-5, scale=N * 1.0, name="grad_bias")


def test_kernel_wrong_argument_count(built):
    kernel = runtime.load(built[0]).kernel("layer_norm_backward", "float32", {})
    with pytest.raises(TypeError, match="expected 9 arguments, got 2"):
        kernel(np.zeros((1, 1), np.float32), np.zeros((1, 1), np.float32))


def test_library_missing_key(built):
    lib = runtime.load(built[0])
    with pytest.raises(KeyError, match="float16"):
        lib.kernel("layer_norm_backward", "float16", {})


def test_a_missing_variant_lists_the_variants(built):
    """lstm_cell_backward has one kernel per variant: asking without one says which there are."""
    lib = runtime.load(built[0])
    with pytest.raises(KeyError, match=r"no kernel for variant \{\}; its variants: .*'has_bias': True") as e:
        lib.kernel("lstm_cell_backward", "float32")
    assert str(e.value).count("has_grad_hy") == 8  # 8 variants listed
    with pytest.raises(KeyError, match=r"this library has \('layer_norm_backward', 'llvm', 'float32'\)"):
        lib.kernel("layer_norm_backward", "float16", {})


def test_load_other_target_only(built):
    assert len(runtime.load(built[0], targets=("cuda",))) == 0


# --------------------------------------------------------------------------- tampering


def test_tampered_library(art_dir):
    lib = art_dir / host_library("layer_norm_backward")
    with open(lib, "ab") as f:
        f.write(b"\0")
    with pytest.raises(runtime.ArtifactError, match="sha256"):
        runtime.load(art_dir)


@pytest.mark.parametrize("field", ["tvm", "tvm_ffi"])
def test_manifest_version_mismatch(art_dir, field):
    def bump(m):
        m["artifacts"][0][field] = "0.0.1-other"

    edit_manifest(art_dir, bump)
    with pytest.raises(runtime.ArtifactError, match=rf"{field} 0\.0\.1-other"):
        runtime.load(art_dir)


def test_manifest_format_mismatch(art_dir):
    edit_manifest(art_dir, lambda m: m.update(format=build_mod.FORMAT + 1))
    with pytest.raises(runtime.ArtifactError, match="format"):
        runtime.load(art_dir)


def test_missing_manifest(art_dir):
    (art_dir / build_mod.MANIFEST).unlink()
    with pytest.raises(runtime.ArtifactError, match="manifest"):
        runtime.load(art_dir)


def test_missing_library(art_dir):
    m = json.loads((art_dir / build_mod.MANIFEST).read_text())
    (art_dir / m["artifacts"][1]["library"]).unlink()
    with pytest.raises(runtime.ArtifactError, match="missing"):
        runtime.load(art_dir)


def test_missing_entry_symbol(art_dir):
    def rename(m):
        m["artifacts"][0]["kernels"][0]["symbol"] = "fg_no_such_symbol"

    edit_manifest(art_dir, rename)
    with pytest.raises(runtime.ArtifactError, match="fg_no_such_symbol"):
        runtime.load(art_dir)


def test_entry_of_unknown_target(art_dir):
    # the target's record says which runtime an artifact needs: one no record names is refused, by file
    def retarget(m):
        m["artifacts"][0]["target"] = "bogus"

    edit_manifest(art_dir, retarget)
    lib = json.loads((art_dir / build_mod.MANIFEST).read_text())["artifacts"][0]["library"]
    with pytest.raises(runtime.ArtifactError, match=rf"{lib}.*target: expected one of .*'bogus'"):
        runtime.load(art_dir, targets=("llvm", "bogus"))


# CPUs with extensions some machines lack (AVX-512, AVX512-FP16/AMX, SME): the first this one lacks
_BEYOND = (("x86_64-linux-gnu", "skylake-avx512"), ("x86_64-linux-gnu", "sapphirerapids"),
           ("x86_64-linux-gnu", "diamondrapids"))


def _cpu_this_machine_lacks():
    from fusedgrad.targets import llvm

    for triple, cpu in _BEYOND:
        if llvm.host_triple() == triple and llvm.cannot_run({"kind": "llvm", "mtriple": triple, "mcpu": cpu}):
            return triple, cpu
    pytest.skip(f"this machine runs code for every CPU of {_BEYOND}")


def test_artifact_for_a_cpu_this_machine_lacks_is_refused(art_dir):
    # an artifact built elsewhere (FUSEDGRAD_MCPU, or another machine's cache) is refused by name
    # before it is loaded, instead of dying on an illegal instruction in a kernel
    triple, cpu = _cpu_this_machine_lacks()

    def elsewhere(m):
        m["artifacts"][0]["tvm_target"].update(mtriple=triple, mcpu=cpu)

    edit_manifest(art_dir, elsewhere)
    lib = json.loads((art_dir / build_mod.MANIFEST).read_text())["artifacts"][0]["library"]
    with pytest.raises(runtime.ArtifactError, match=rf"{lib}: built for CPU '{cpu}', whose instructions \[.+\] "
                                                    r"this CPU \('[\w-]+'\) lacks"):
        runtime.load(art_dir)


def test_artifact_for_another_architecture_is_refused(art_dir):
    from fusedgrad.targets import llvm

    if llvm.host_triple() is None:
        pytest.skip("this machine's triple is not one fusedgrad names")

    def aarch64(m):
        m["artifacts"][1]["tvm_target"].update(mtriple="aarch64-linux-gnu", mcpu="neoverse-n1")

    edit_manifest(art_dir, aarch64)
    with pytest.raises(runtime.ArtifactError, match=r"built for aarch64-linux-gnu, this machine is x86_64"):
        runtime.load(art_dir)


def test_artifact_for_an_older_cpu_loads(art_dir):
    # the same kernels claimed for a baseline x86-64 (SSE2 only): every x86-64 CPU runs them
    from fusedgrad.targets import llvm

    if llvm.host_triple() != "x86_64-linux-gnu":
        pytest.skip("an x86-64 check")

    def baseline(m):
        for a in m["artifacts"]:
            a["tvm_target"].update(mcpu="x86-64")

    edit_manifest(art_dir, baseline)
    assert len(runtime.load(art_dir)) == len(json.loads((art_dir / build_mod.MANIFEST).read_text())["artifacts"])


def test_host_targets_need_no_device_runtime():
    from fusedgrad.lowering import tvm_api

    assert tvm_api.runs_on_host(targets.get("llvm").tvm_target()["kind"])
    assert not tvm_api.runs_on_host(targets.get("cuda").tvm_target()["kind"])


# --------------------------------------------------------------------------- disk cache across processes

_CACHE_SCRIPT = textwrap.dedent(
    """
    import sys, numpy as np
    if sys.argv[3] == "forbid-build":
        import fusedgrad.lowering.build as b
        def no_build(*a, **k):
            raise SystemExit("rebuilt although the cache holds the artifact")
        b.build = no_build
    import fusedgrad
    d = np.load(sys.argv[1])
    out = fusedgrad.layer_norm_backward(d["x"], d["dy"], d["mean"], d["var"], d["gamma"])
    np.save(sys.argv[2], out[0])
    """
)


def _run_cached(tmp_path, cache, mode, tag):
    env = dict(os.environ, FUSEDGRAD_CACHE=str(cache))
    dst = tmp_path / f"dx_{tag}.npy"
    proc = subprocess.run([sys.executable, "-c", _CACHE_SCRIPT, str(tmp_path / "in.npz"), str(dst), mode],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return np.load(dst)


def _snapshot(cache: Path):
    return {str(p.relative_to(cache)): (p.stat().st_mtime_ns, p.stat().st_ino) for p in sorted(cache.rglob("*"))}


def _only_slot(cache: Path) -> Path:
    """The cache's single slot (named by the cache key the child computed); no temporary directories left."""
    entries = sorted(p for p in cache.iterdir() if p.name != cache_files.LOCKS)
    assert len(entries) == 1 and not entries[0].name.startswith("."), [p.name for p in entries]
    return entries[0]


def test_second_process_reuses_disk_cache(tmp_path):
    cache = tmp_path / "cache"
    inp = ln_inputs((8,), 24, seed=3)
    np.savez(tmp_path / "in.npz", **{k: to_np(inp[k], "float32") for k in LN_ARGS})
    ref = ln_reference(inp, "float32")

    dx1 = _run_cached(tmp_path, cache, "build", "first")
    assert_close(dx1, ref["dx"], 1e-5, 1e-5, name="dx")
    slot = _only_slot(cache)
    lib_name = host_library("layer_norm_backward")
    assert sorted(p.name for p in slot.iterdir()) == sorted([build_mod.MANIFEST, lib_name])
    entry = json.loads((slot / build_mod.MANIFEST).read_text())["artifacts"][0]
    assert (entry["op"], entry["target"], entry["dtype"]) == ("layer_norm_backward", "llvm", "float32")
    assert entry["cache_key"] == slot.name
    assert entry["sha256"] == sha256(slot / lib_name)
    before = _snapshot(cache)

    dx2 = _run_cached(tmp_path, cache, "forbid-build", "second")
    np.testing.assert_array_equal(dx1, dx2)
    assert _snapshot(cache) == before  # nothing rewritten: same files, same mtimes, same inodes


def test_corrupt_cache_entry_is_rebuilt(tmp_path):
    cache = tmp_path / "cache"
    inp = ln_inputs((8,), 24, seed=4)
    np.savez(tmp_path / "in.npz", **{k: to_np(inp[k], "float32") for k in LN_ARGS})
    dx1 = _run_cached(tmp_path, cache, "build", "first")
    slot = _only_slot(cache)
    lib = slot / host_library("layer_norm_backward")
    with open(lib, "ab") as f:
        f.write(b"\0")
    dx2 = _run_cached(tmp_path, cache, "build", "rebuilt")
    np.testing.assert_array_equal(dx1, dx2)
    entry = json.loads((slot / build_mod.MANIFEST).read_text())["artifacts"][0]
    assert entry["sha256"] == sha256(lib)
    # and the repaired slot is reused without a build
    _run_cached(tmp_path, cache, "forbid-build", "third")


# --------------------------------------------------------------------------- targets and keys


@pytest.mark.parametrize("dtype", ["float64", "int8", "float8"])
@pytest.mark.parametrize("op", OPS)
def test_unsupported_dtype_for_target(op, dtype):
    info = targets.get("llvm")
    with pytest.raises(ValueError, match=rf"'{op}'.*'llvm'.*'{dtype}'"):
        info.check(op, dtype)
    with pytest.raises(ValueError, match=rf"'{op}'.*'llvm'.*'{dtype}'"):
        build_mod.build(op, "llvm", dtype, "/nonexistent/never-written")


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("op", OPS)
def test_supported_combinations_pass_check(op, dtype):
    assert targets.get("llvm").check(op, dtype) is None


def test_unknown_target_and_op():
    with pytest.raises(ValueError, match="target"):
        targets.get("no-such-target")
    with pytest.raises(ValueError, match="op"):
        te_defs.get("no_such_op")


def test_cache_keys_distinguish_op_and_dtype():
    keys = {build_mod.cache_key(op, "llvm", dt) for op in OPS for dt in ("float32", "float16", "bfloat16")}
    assert len(keys) == 6


def test_schedule_hash_covers_the_rule_contract(tmp_path, monkeypatch):
    """The cache key's schedule hash reads schedules/__init__.py (ScheduleRule, apply) besides the
    target's rules: a change there must not reuse kernels built before it."""
    from fusedgrad import schedules

    before = schedules.source_hash("fusedgrad.schedules.llvm")
    edited = tmp_path / "__init__.py"
    edited.write_text(Path(schedules.__file__).read_text() + "\n# a change to the contract\n")
    monkeypatch.setattr(schedules, "__file__", str(edited))
    assert schedules.source_hash("fusedgrad.schedules.llvm") != before


def test_build_rejects_unknown_artifact_kind(tmp_path):
    import dataclasses

    from fusedgrad import targets

    fake = dataclasses.replace(targets.get("llvm"), name="fake-dsp", artifact="c_sources")
    targets.register(fake)
    try:
        with pytest.raises(ValueError, match="c_sources"):
            build_mod.build("layer_norm_backward", "fake-dsp", "float32", tmp_path)
        assert not (tmp_path / build_mod.MANIFEST).exists()
    finally:
        targets.unregister("fake-dsp")


def test_prebuilt_artifacts_from_env(built, tmp_path, monkeypatch):
    """$FUSEDGRAD_ARTIFACTS: an entry built from this source is used as is; a stale one is not."""
    monkeypatch.setenv(runtime.ARTIFACTS_ENV, str(built[0]))
    art = runtime.artifact("layer_norm_backward", "float32")
    assert art.path == Path(built[0])
    stale = tmp_path / "stale"
    shutil.copytree(built[0], stale)
    manifest = json.loads((stale / "manifest.json").read_text())
    for entry in manifest["artifacts"]:
        entry["schedule_hash"] = "0" * 64
    (stale / "manifest.json").write_text(json.dumps(manifest))
    monkeypatch.setenv(runtime.ARTIFACTS_ENV, str(stale))
    assert runtime.artifact("layer_norm_backward", "float32").path != stale
    monkeypatch.setenv(runtime.ARTIFACTS_ENV, str(tmp_path / "nothing"))
    with pytest.raises(runtime.ArtifactError, match="FUSEDGRAD_ARTIFACTS: expected artifact directories"):
        runtime.artifact("layer_norm_backward", "float32")


# --------------------------------------------------------------------------- damaged artifacts


def _write_manifest(path: Path, text: str) -> None:
    (path / build_mod.MANIFEST).write_text(text)


def _first(m):
    return m["artifacts"][0]


@pytest.mark.parametrize("damage, message", [
    (lambda d: _write_manifest(d, ""), "not a readable manifest"),
    (lambda d: _write_manifest(d, (d / build_mod.MANIFEST).read_text()[:40]), "not a readable manifest"),
    (lambda d: _write_manifest(d, "[]"), "expected a JSON object, got list"),
    (lambda d: _write_manifest(d, json.dumps({"format": build_mod.FORMAT})), "expected a list under 'artifacts'"),
    (lambda d: _write_manifest(d, json.dumps({"format": build_mod.FORMAT, "artifacts": [{}]})),
     r"artifacts\[0\]\.op: missing"),
    (lambda d: edit_manifest(d, lambda m: _first(m).pop("sha256")), r"artifacts\[0\]\.sha256: missing"),
    (lambda d: edit_manifest(d, lambda m: _first(m).update(kernels=[{"name": 1}])),
     r"artifacts\[0\]\.kernels\[0\]\.symbol: missing"),
    (lambda d: edit_manifest(d, lambda m: _first(m).update(kernels=[])),
     r"artifacts\[0\]\.kernels: expected at least 1"),
    (lambda d: edit_manifest(d, lambda m: _first(m)["kernels"][0].update(variant="abc")),
     r"artifacts\[0\]\.kernels\[0\]\.variant: expected an object, got str 'abc'"),
    (lambda d: edit_manifest(d, lambda m: _first(m)["kernels"][0].pop("args")),
     r"artifacts\[0\]\.kernels\[0\]\.args: missing"),
    (lambda d: edit_manifest(d, lambda m: _first(m).update(tvm_target="garbage")),
     r"artifacts\[0\]\.tvm_target: expected an object, got str 'garbage'"),
    (lambda d: edit_manifest(d, lambda m: _first(m).update(library="../elsewhere.so")), "not a file name in the folder"),
    (lambda d: edit_manifest(d, lambda m: _first(m).update(library="/tmp/x.so")), "not a file name in the folder"),
], ids=["empty", "truncated", "a list", "no artifacts", "empty entry", "no sha256", "no symbol", "no kernels",
        "variant not an object", "no args", "tvm_target not an object", "dot-dot", "absolute"])
def test_a_damaged_manifest_is_an_artifact_error_naming_it(art_dir, damage, message):
    damage(art_dir)
    with pytest.raises(runtime.ArtifactError, match=message) as e:
        runtime.load(art_dir)
    assert str(art_dir / build_mod.MANIFEST) in str(e.value)


def _reseal(art_dir: Path, lib: Path) -> None:
    """Make the manifest's sha256 match the (damaged) library again."""
    digest = sha256(lib)
    edit_manifest(art_dir, lambda m: [e.update(sha256=digest) for e in m["artifacts"] if e["library"] == lib.name])


def test_a_library_the_loader_refuses_is_an_artifact_error(art_dir):
    lib = art_dir / host_library("layer_norm_backward")
    lib.write_bytes(b"not a shared library at all\n" * 10)
    _reseal(art_dir, lib)
    with pytest.raises(runtime.ArtifactError, match=rf"{lib.name}: cannot be loaded"):
        runtime.load(art_dir)


def test_a_library_that_is_a_folder_is_refused(art_dir):
    lib = art_dir / host_library("layer_norm_backward")
    lib.unlink()
    lib.mkdir()
    with pytest.raises(runtime.ArtifactError, match=rf"library {lib} is not a file"):
        runtime.load(art_dir)


def test_a_library_that_is_a_symlink_is_refused(art_dir):
    lib = art_dir / host_library("layer_norm_backward")
    real = art_dir.parent / "real.so"
    lib.rename(real)
    lib.symlink_to(real)
    with pytest.raises(runtime.ArtifactError, match="symbolic link"):
        runtime.load(art_dir)


def test_a_truncated_library_with_a_matching_sha_is_refused_not_loaded(art_dir):
    """Loading a cut-short ELF file faults (SIGBUS) on its missing pages; the loader refuses it before
    (in a child process, so that a fault would not take the test run down)."""
    lib = art_dir / host_library("layer_norm_backward")
    data = lib.read_bytes()
    lib.write_bytes(data[:len(data) // 2])
    _reseal(art_dir, lib)
    probe = ("import sys; from fusedgrad import runtime\n"
             "try:\n    runtime.load(sys.argv[1])\nexcept runtime.ArtifactError as e:\n    print('refused:', e)\n")
    proc = subprocess.run([sys.executable, "-c", probe, str(art_dir)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "refused:" in proc.stdout and "truncated" in proc.stdout, (proc.returncode,
                                                                                             proc.stdout, proc.stderr[-2000:])


def test_a_damaged_cache_entry_is_rebuilt_and_abandoned_builds_are_removed(tmp_path):
    cache = tmp_path / "cache"
    inp = ln_inputs((8,), 24, seed=5)
    np.savez(tmp_path / "in.npz", **{k: to_np(inp[k], "float32") for k in LN_ARGS})
    dx1 = _run_cached(tmp_path, cache, "build", "first")
    slot = _only_slot(cache)
    (slot / build_mod.MANIFEST).write_text("")  # an empty manifest, as a crash mid-write would leave
    stale = cache / f".{slot.name}-killed"  # a killed build's folder, two hours old
    stale.mkdir()
    os.utime(stale, (stale.stat().st_atime - 7200, stale.stat().st_mtime - 7200))
    fresh = cache / f".{slot.name}-running"  # another process's build in progress
    fresh.mkdir()
    dx2 = _run_cached(tmp_path, cache, "build", "rebuilt")
    np.testing.assert_array_equal(dx1, dx2)
    assert not stale.exists() and fresh.exists()
    fresh.rmdir()
    _run_cached(tmp_path, cache, "forbid-build", "reused")


# --------------------------------------------------------------------------- what generate built, in the cache


def test_install_puts_a_built_artifact_into_its_cache_slot(built, tmp_path, monkeypatch):
    """runtime.install (what `fusedgrad generate` does per artifact): the slot of the entry's cache key
    gets its library and a manifest of that entry alone; a slot that loads is left as it is, a
    damaged one is written again."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("FUSEDGRAD_CACHE", str(cache))
    out, entries = built
    entry = entries["layer_norm_backward"]
    assert runtime.install(entry, out)
    slot = cache / entry["cache_key"]
    assert sorted(p.name for p in cache.iterdir()) == [slot.name]  # no temporary folder left
    assert sorted(p.name for p in slot.iterdir()) == sorted([build_mod.MANIFEST, entry["library"]])
    assert sha256(slot / entry["library"]) == entry["sha256"]
    assert json.loads((slot / build_mod.MANIFEST).read_text())["artifacts"] == [entry]
    assert set(runtime.load(slot)) == {("layer_norm_backward", "llvm", "float32")}
    before = _snapshot(cache)
    assert not runtime.install(entry, out)
    assert _snapshot(cache) == before  # nothing rewritten
    (slot / build_mod.MANIFEST).write_text("")
    assert runtime.install(entry, out)
    assert set(runtime.load(slot)) == {("layer_norm_backward", "llvm", "float32")}


def test_install_refuses_a_library_its_entry_does_not_describe(art_dir, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("FUSEDGRAD_CACHE", str(cache))
    entry = next(e for e in json.loads((art_dir / build_mod.MANIFEST).read_text())["artifacts"]
                 if e["op"] == "layer_norm_backward")
    with open(art_dir / entry["library"], "ab") as f:
        f.write(b"\0")
    with pytest.raises(runtime.ArtifactError, match="not put into the cache"):
        runtime.install(entry, art_dir)
    assert list(cache.iterdir()) == []


def test_a_build_on_first_use_is_logged_and_a_cache_hit_is_not(tmp_path, monkeypatch, caplog):
    """A library does not print: a build is an INFO record of the "fusedgrad" logger (shown when the
    application configures logging); loading from the cache makes none."""
    import logging
    import re

    monkeypatch.setenv("FUSEDGRAD_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(runtime.ARTIFACTS_ENV, raising=False)
    monkeypatch.setattr(runtime, "_LOADED", {})  # nothing loaded in this process yet
    caplog.set_level(logging.INFO, logger="fusedgrad")

    def said():
        return [r.getMessage() for r in caplog.records if r.name == "fusedgrad" and r.levelno >= logging.INFO]

    art = runtime.artifact("layer_norm_backward", "float32")
    msgs = said()
    assert len(msgs) == 2, msgs
    assert msgs[0].startswith(f"building layer_norm_backward llvm float32 into {art.path} (first use")
    assert re.fullmatch(r"built layer_norm_backward llvm float32 in \d+\.\d s", msgs[1]), msgs
    caplog.clear()
    monkeypatch.setattr(runtime, "_LOADED", {})  # as a second process would: from the disk cache
    assert runtime.artifact("layer_norm_backward", "float32").path == art.path
    assert said() == []
