"""targets.llvm.cpu_facts: what a CPU schedule may know, from LLVM's CPU name and features."""
from __future__ import annotations

import pytest

from fusedgrad.targets import llvm

X86 = "x86_64-linux-gnu"


@pytest.mark.parametrize("cpu, isa, bits, regs", [
    ("haswell", "avx2", 256, 16), ("znver3", "avx2", 256, 16), ("x86-64-v3", "avx2", 256, 16),
    ("skylake-avx512", "avx512", 512, 32), ("sapphirerapids", "avx512", 512, 32), ("x86-64-v4", "avx512", 512, 32),
    ("x86-64", "sse2", 128, 16),
])
def test_x86_classes(cpu, isa, bits, regs):
    f = llvm.cpu_facts(cpu, X86)
    assert (f.cpu, f.triple, f.isa, f.vector_bits, f.vector_registers) == (cpu, X86, isa, bits, regs)
    assert f.lanes("float32") == bits // 32 and f.lanes("float16") == bits // 16
    assert f.cores is None and f.caches == {}  # a named CPU's are not known


@pytest.mark.parametrize("cpu, triple, level", [
    ("x86-64", X86, "x86-64"), ("nehalem", X86, "x86-64-v2"), ("haswell", X86, "x86-64-v3"),
    ("znver3", X86, "x86-64-v3"), ("skylake-avx512", X86, "x86-64-v4"), ("znver4", X86, "x86-64-v4"),
    # AVX-512F without BW/DQ/VL (Knights Landing) is not level 4: its class is AVX2's
    ("knl", X86, "x86-64-v3"), ("neoverse-n1", "aarch64-linux-gnu", "aarch64"),
])
def test_isa_class_is_the_psabi_level(cpu, triple, level):
    f = llvm.cpu_facts(cpu, triple)
    assert f.isa_class == level
    assert level in llvm.ISA_CLASSES[triple.split("-")[0]]


def test_conversions_follow_the_features():
    assert not llvm.cpu_facts("x86-64", X86).f16c and not llvm.cpu_facts("x86-64", X86).fma
    hsw = llvm.cpu_facts("haswell", X86)
    assert hsw.f16c and hsw.fma and not hsw.bf16 and not hsw.fp16_arith
    spr = llvm.cpu_facts("sapphirerapids", X86)
    assert spr.bf16 and spr.fp16_arith


def test_aarch64_neon():
    f = llvm.cpu_facts("neoverse-n1", "aarch64-linux-gnu")
    assert (f.isa, f.vector_bits, f.vector_registers, f.fma, f.lanes()) == ("neon", 128, 32, True, 4)


def test_host_facts_agree_with_the_host_cpu():
    if llvm.host_triple() is None:
        pytest.skip("this machine's triple is not one fusedgrad names (not x86_64)")
    f = llvm.cpu_facts()
    named = llvm.cpu_facts(llvm.system_cpu() or "x86-64", X86)
    assert (f.isa, f.vector_bits, f.vector_registers) == (named.isa, named.vector_bits, named.vector_registers)
    assert f.cores >= 1
    # sysfs gives the caches on Linux, each level larger than the one before
    sizes = [f.caches[k] for k in ("l1d", "l2", "l3") if k in f.caches]
    assert sizes == sorted(sizes) and all(s >= 4096 for s in sizes)


def test_host_caches_read_sysfs(tmp_path):
    for i, (level, kind, size) in enumerate([(1, "Data", "48K"), (1, "Instruction", "32K"), (2, "Unified", "1024K"),
                                             (3, "Unified", "32M")]):
        d = tmp_path / f"index{i}"
        d.mkdir()
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{kind}\n")
        (d / "size").write_text(f"{size}\n")
    assert llvm._host_caches(str(tmp_path)) == {"l1d": 48 << 10, "l2": 1 << 20, "l3": 32 << 20}
    assert llvm._host_caches(str(tmp_path / "none")) == {}


@pytest.mark.parametrize("cpu, triple, names", [
    ("nosuchcpu", X86, "cpu: 'nosuchcpu'"), ("znver3", "aarch64-linux-gnu", "cpu: 'znver3'"),
    ("generic-rv64", "riscv64-linux-gnu", "triple: expected an x86_64-\\* or aarch64-\\* triple, got 'riscv64-linux-gnu'"),
])
def test_bad_cpu_or_triple_is_named(cpu, triple, names):
    with pytest.raises(ValueError, match=names):
        llvm.cpu_facts(cpu, triple)


def test_lanes_of_an_unknown_dtype():
    with pytest.raises(ValueError, match="dtype: expected one of .* got 'int8'"):
        llvm.cpu_facts("haswell", X86).lanes("int8")


@pytest.mark.parametrize("cpu, triple, lanes, rows", [
    ("skylake-avx512", X86, 16, 8),  # 32 columns = 2 zmm per row: 8 x 2 accumulators + 2 + 1 <= 32
    ("haswell", X86, 8, 2),  # 4 ymm per row: 2 x 4 + 4 + 1 <= 16 (3 rows would spill)
    ("x86-64", X86, 4, 1),  # SSE2: 8 xmm per row, one row
    ("neoverse-n1", "aarch64-linux-gnu", 4, 2),  # NEON: 8 of the 32 q registers per row
])
def test_schedules_size_the_register_tile_from_the_cpu(cpu, triple, lanes, rows):
    from fusedgrad.lowering import tvm_api
    from fusedgrad.schedules.llvm import machine

    target = tvm_api.target({"kind": "llvm", "mtriple": triple, "mcpu": cpu})
    assert machine.lanes(target) == lanes
    assert machine.register_tile_rows(target, 32) == rows


def test_committed_tir_does_not_depend_on_the_machine(monkeypatch):
    # generated/llvm is scheduled for the record's review CPU, whatever CPU builds
    from fusedgrad.lowering import build
    from fusedgrad.schedules import tir_api

    scripts = []
    for cpu in ("haswell", "skylake-avx512"):
        monkeypatch.setenv(llvm.MCPU_ENV, cpu)
        funcs, _ = build.schedule_variants("matmul_packed", "llvm", "float32", use_tuning=False, review=True)
        scripts.append([tir_api.script(f) for f, _, _ in funcs.values()])
        built, _ = build.schedule_variants("matmul_packed", "llvm", "float32", use_tuning=False)
        scripts.append([tir_api.script(f) for f, _, _ in built.values()])
    assert scripts[0] == scripts[2]  # reviewed: the same
    assert scripts[1] != scripts[3]  # built: each CPU's own register tile


@pytest.mark.parametrize("cpu, vector", [("haswell", 8), ("skylake-avx512", 16)])
def test_layer_norm_lanes_follow_the_cpu(cpu, vector):
    # the hand choice of the LayerNorm rule's VECTOR knob is the CPU's float32 lanes; a tuned value wins
    from fusedgrad.lowering import tvm_api
    from fusedgrad.schedules.llvm import LayerNormBackward

    target = tvm_api.target({"kind": "llvm", "mtriple": X86, "mcpu": cpu})
    assert LayerNormBackward().defaults(target)["VECTOR"] == vector
    assert LayerNormBackward({"VECTOR": 4}).knob("VECTOR", target) == 4


@pytest.mark.parametrize("cpu, triple, vector, rows", [
    ("skylake-avx512", X86, (16, 32), (1, 2, 4, 8)),
    ("haswell", X86, (8, 16), (1, 2, 4)),  # 8-row tiles would spill most accumulators on 16 ymm
    ("x86-64", X86, (4, 8), (1, 2)),
    ("neoverse-n1", "aarch64-linux-gnu", (4, 8), (1, 2, 4)),
])
def test_the_tuning_space_follows_the_cpu(cpu, triple, vector, rows):
    # what `fusedgrad tune` searches is narrowed by the machine: one or two vectors per step, register
    # tiles up to twice what the register file holds; the hand choice is always in the space
    from fusedgrad.lowering import tvm_api
    from fusedgrad.schedules.llvm import LayerNormBackward, MatmulPacked

    target = tvm_api.target({"kind": "llvm", "mtriple": triple, "mcpu": cpu})
    ln, mm = LayerNormBackward(), MatmulPacked()
    assert ln.space(target)["VECTOR"] == vector and mm.space(target)["MR"] == rows
    for rule in (ln, mm):
        space = rule.space(target)
        assert set(space) == set(rule.KNOBS)
        assert all(set(space[k]) <= set(rule.KNOBS[k]) for k in space)
        assert all(v in space[k] for k, v in rule.defaults(target).items())
