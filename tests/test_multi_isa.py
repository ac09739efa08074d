"""One artifact folder, several ISA classes of the CPU libraries: the manifest keeps one entry per
class, and runtime.load runs the best class this CPU supports (never one it cannot run)."""
from __future__ import annotations

import functools
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from conftest import toolchain_missing
from fusedgrad import runtime
from fusedgrad.lowering import build as build_mod
from fusedgrad.lowering import manifest as manifest_mod
from fusedgrad.lowering import naming
from fusedgrad.lowering import tvm_api
from fusedgrad.targets import llvm

OP, DTYPE = "column_sum", "float32"  # the smallest op: one variant, a few seconds per build
KEY = (OP, "llvm", DTYPE)
X86 = "x86_64-linux-gnu"
# (LLVM CPU, triple) -> the ISA class the library is built for
CPUS = {("haswell", X86): "x86-64-v3", ("skylake-avx512", X86): "x86-64-v4",
        ("neoverse-n1", "aarch64-linux-gnu"): "aarch64"}


def build_for(out: Path, cpu: str, triple: str) -> dict:
    """Build OP for ``cpu``/``triple`` into ``out`` as `fusedgrad generate --cpu` does (through the llvm
    record's environment variables), leaving the environment and the cache keys as they were."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(llvm.MCPU_ENV, cpu)
        mp.setenv(llvm.MTRIPLE_ENV, triple)
        build_mod.cache_key.cache_clear()  # the key holds the TVM target, which the variables change
        try:
            return build_mod.build(OP, "llvm", DTYPE, out)
        finally:
            build_mod.cache_key.cache_clear()


@functools.lru_cache(maxsize=None)
def host_flags() -> frozenset[str]:
    """This machine's CPU flags as the kernel reports them (/proc/cpuinfo, as lscpu shows them)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    line = next((ln for ln in text.splitlines() if ln.startswith("flags")), "")
    return frozenset(line.partition(":")[2].split())


@functools.lru_cache(maxsize=None)
def cross_linker() -> str | None:
    """Why the aarch64 library cannot be built here (neither its cross compiler nor zig), or None."""
    try:
        llvm.linker({"kind": "llvm", "mtriple": "aarch64-linux-gnu"})
    except ValueError as e:
        return str(e)
    return None


def need_x86():
    if llvm.host_triple() != X86:
        pytest.skip(f"an x86-64 host's choice among x86-64 classes; this one is {llvm.host_triple()}")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """One folder with OP built for haswell (x86-64-v3), skylake-avx512 (x86-64-v4) and, where a
    cross linker is installed, neoverse-n1 (aarch64); each class built once for the module."""
    out = tmp_path_factory.mktemp("multi-isa")
    for (cpu, triple) in CPUS:
        if triple != X86 and cross_linker():
            continue  # test_aarch64_entry says why it skips
        build_for(out, cpu, triple)
    return out


@pytest.fixture
def copy(folder, tmp_path):
    dst = tmp_path / "art"
    shutil.copytree(folder, dst)
    return dst


def entries(path: Path) -> list[dict]:
    return json.loads((path / build_mod.MANIFEST).read_text())["artifacts"]


def keep(path: Path, classes: set[str]) -> None:
    """Leave only the entries of ``classes`` in ``path``'s manifest."""
    m = json.loads((path / build_mod.MANIFEST).read_text())
    m["artifacts"] = [a for a in m["artifacts"] if a["isa_class"] in classes]
    (path / build_mod.MANIFEST).write_text(json.dumps(m))


def check_column_sum(art: runtime.Artifact) -> None:
    a = np.random.default_rng(7).standard_normal((37, 29)).astype(np.float32)  # odd: no vector multiple
    s = np.empty(29, np.float32)
    art.kernel({})(a, s)
    np.testing.assert_allclose(s, a.astype(np.float64).sum(axis=0), rtol=1e-5, atol=1e-5)


def loads(monkeypatch) -> list[str]:
    """Record the file of every library TVM loads from now on."""
    seen = []
    real = tvm_api.load_module

    def spy(path):
        seen.append(Path(path).name)
        return real(path)

    monkeypatch.setattr(tvm_api, "load_module", spy)
    return seen


def as_if_cpu(monkeypatch, cpu: str) -> None:
    """Make this process judge libraries as if it ran on LLVM CPU ``cpu``."""
    llvm.system_cpu.cache_clear()
    monkeypatch.setattr(llvm, "system_cpu", lambda: cpu)


# --------------------------------------------------------------------------- the manifest


def test_one_entry_and_library_per_class(folder):
    need_x86()
    got = entries(folder)
    want = [c for (_, triple), c in CPUS.items() if triple == X86 or not cross_linker()]
    assert sorted(a["isa_class"] for a in got) == sorted(want)
    for a in got:
        assert (a["op"], a["target"], a["dtype"]) == KEY
        cpu, triple = a["tvm_target"]["mcpu"], a["tvm_target"]["mtriple"]
        assert CPUS[(cpu, triple)] == a["isa_class"]
        assert a["library"] == naming.artifact_stem(OP, "llvm", DTYPE, a["isa_class"]) + ".so"
        assert a["sha256"] == build_mod.file_sha256(folder / a["library"])
    assert sorted(p.name for p in folder.iterdir()) == sorted([build_mod.MANIFEST] + [a["library"] for a in got])
    assert got == sorted(got, key=manifest_mod.entry_key)  # deterministic order


def test_same_class_again_replaces_only_its_entry(tmp_path):
    def entry(cls, sha):
        return {"op": OP, "target": "llvm", "dtype": DTYPE, "isa_class": cls, "sha256": sha}

    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    for e in (entry("x86-64-v4", "1"), entry("x86-64-v3", "2"), entry("x86-64-v4", "3")):
        manifest_mod.update_manifest(a, e)
    for e in (entry("x86-64-v3", "2"), entry("x86-64-v4", "3")):
        manifest_mod.update_manifest(b, e)
    assert [(x["isa_class"], x["sha256"]) for x in entries(a)] == [("x86-64-v3", "2"), ("x86-64-v4", "3")]
    assert (a / build_mod.MANIFEST).read_bytes() == (b / build_mod.MANIFEST).read_bytes()


def test_aarch64_entry(folder):
    if cross_linker():
        toolchain_missing(cross_linker())
    a = next(a for a in entries(folder) if a["isa_class"] == "aarch64")
    assert (folder / a["library"]).read_bytes()[18:20] == (183).to_bytes(2, "little")  # ELF e_machine aarch64


# --------------------------------------------------------------------------- the loader's choice


def test_load_picks_avx512_here(folder, monkeypatch):
    need_x86()
    if "avx512f" not in host_flags():
        pytest.skip("this CPU has no avx512f (lscpu): the x86-64-v4 library cannot be the pick here")
    why = llvm.cannot_run({"kind": "llvm", "mtriple": X86, "mcpu": "skylake-avx512"})
    if why:
        pytest.skip(f"this AVX-512 CPU lacks part of skylake-avx512's set: {why}")
    seen = loads(monkeypatch)
    art = runtime.load(folder)[KEY]
    assert art.isa_class == art.entry["isa_class"] == "x86-64-v4"
    assert seen == [art.entry["library"]]  # the others are not even loaded
    check_column_sum(art)


def pretend_avx2(monkeypatch):
    """This process sees a haswell (AVX2) CPU; skips where this CPU cannot run haswell code."""
    need_x86()
    if llvm.cannot_run({"kind": "llvm", "mtriple": X86, "mcpu": "haswell"}):
        pytest.skip("this CPU cannot run haswell code, so it cannot pretend to be one")
    as_if_cpu(monkeypatch, "haswell")


def test_load_on_an_avx2_cpu_picks_v3(folder, monkeypatch):
    pretend_avx2(monkeypatch)
    seen = loads(monkeypatch)
    art = runtime.load(folder)[KEY]
    assert art.isa_class == "x86-64-v3"
    assert seen == [art.entry["library"]]  # never the AVX-512 library this "CPU" cannot run
    check_column_sum(art)


def test_prebuilt_folder_goes_through_the_same_choice(folder, monkeypatch):
    pretend_avx2(monkeypatch)
    monkeypatch.setattr(runtime, "_PREBUILT", {})
    monkeypatch.setenv(runtime.ARTIFACTS_ENV, str(folder))
    art = runtime.artifact(OP, DTYPE)
    assert art.path == folder and art.isa_class == "x86-64-v3"
    check_column_sum(art)


def test_no_class_runs_here_names_every_file(copy, monkeypatch):
    need_x86()
    as_if_cpu(monkeypatch, "nehalem")  # x86-64-v2: none of the three runs on it
    seen = loads(monkeypatch)
    with pytest.raises(runtime.ArtifactError, match="no library this machine can run") as e:
        runtime.load(copy)
    for a in entries(copy):
        assert f"{copy / a['library']}: built for " in str(e.value)
    assert seen == []


def test_only_another_architecture_is_refused(copy):
    if llvm.host_triple() is None or llvm.host_triple().startswith("aarch64"):
        pytest.skip("needs a host that is not aarch64")
    if cross_linker():
        toolchain_missing(cross_linker())
    keep(copy, {"aarch64"})
    lib = entries(copy)[0]["library"]
    with pytest.raises(runtime.ArtifactError, match=rf"{lib}: built for aarch64-linux-gnu, this machine is x86_64"):
        runtime.load(copy)
