"""Linking the CPU libraries of another architecture (`fusedgrad generate --triple aarch64-linux-gnu`):
with the Debian cross compiler (``aarch64-linux-gnu-gcc``) when it is on PATH, else with zig's C
compiler from the ziglang wheel (``pip install 'fusedgrad[cross]'``, which the ``test`` extra pulls),
and a clear error when there is neither."""
from __future__ import annotations

import stat
import sys
from pathlib import Path

import pytest

from conftest import toolchain_missing
from fusedgrad import cli
from fusedgrad.lowering import build as build_mod
from fusedgrad.targets import llvm

OP, DTYPE = "column_sum", "float32"  # the smallest op: one variant, a few seconds per build
TRIPLE, CPU = "aarch64-linux-gnu", "neoverse-n1"
SPEC = {"kind": "llvm", "mtriple": TRIPLE}
EM_AARCH64, ET_DYN = 183, 3  # ELF e_machine of aarch64, e_type of a shared object


def need_zig() -> None:
    if llvm.zig_cc(TRIPLE) is None:
        toolchain_missing(f"ziglang is not installed ({llvm.CROSS_EXTRA}; the test extra pulls it)")


def only_on_path(monkeypatch, folder: Path) -> None:
    """PATH holds ``folder`` alone: no cross compiler but what the test puts there."""
    folder.mkdir(exist_ok=True)
    monkeypatch.setenv("PATH", str(folder))


def build_aarch64(out: Path) -> Path:
    """OP built for neoverse-n1 into ``out`` as `fusedgrad generate --triple` does; its library."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(llvm.MCPU_ENV, CPU)
        mp.setenv(llvm.MTRIPLE_ENV, TRIPLE)
        build_mod.cache_key.cache_clear()  # the key holds the TVM target, which the variables change
        try:
            entry = build_mod.build(OP, "llvm", DTYPE, out)
        finally:
            build_mod.cache_key.cache_clear()
    assert entry["tvm_target"]["mtriple"] == TRIPLE
    return out / entry["library"]


def elf_kind(path: Path) -> tuple[int, int]:
    """(e_type, e_machine) of the little-endian ELF file ``path``."""
    head = path.read_bytes()[:20]
    assert head[:4] == b"\x7fELF", head
    return int.from_bytes(head[16:18], "little"), int.from_bytes(head[18:20], "little")


def test_zig_links_when_no_cross_compiler_is_on_path(tmp_path, monkeypatch):
    if llvm.host_triple() in (None, TRIPLE):
        pytest.skip(f"needs a host that is not {TRIPLE}")
    need_zig()
    only_on_path(monkeypatch, tmp_path / "bin")
    cmd = llvm.linker(SPEC)
    assert cmd is not None and list(cmd[-4:]) == ["ziglang", "cc", "-target", TRIPLE], cmd
    assert elf_kind(build_aarch64(tmp_path / "out")) == (ET_DYN, EM_AARCH64)


def test_the_system_cross_compiler_is_preferred(tmp_path, monkeypatch):
    """A cross compiler on PATH links, even with zig installed: a stand-in aarch64-linux-gnu-gcc
    that notes its call and links with zig is the one that runs."""
    if llvm.host_triple() in (None, TRIPLE):
        pytest.skip(f"needs a host that is not {TRIPLE}")
    need_zig()
    bin_dir, log = tmp_path / "bin", tmp_path / "calls.txt"
    only_on_path(monkeypatch, bin_dir)
    fake = bin_dir / f"{TRIPLE}-gcc"
    zig = " ".join(f"'{a}'" for a in llvm.zig_cc(TRIPLE))
    fake.write_text(f'#!/bin/sh\necho "$@" >> \'{log}\'\nexec {zig} "$@"\n')
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    assert llvm.linker(SPEC) == (f"{TRIPLE}-gcc",)
    lib = build_aarch64(tmp_path / "out")
    assert elf_kind(lib) == (ET_DYN, EM_AARCH64)
    calls = log.read_text().splitlines()
    assert len(calls) == 1 and "-shared" in calls[0].split(), calls  # it linked the one library


def test_neither_is_a_clear_error(tmp_path, monkeypatch, capsys):
    """No cross compiler and no ziglang: a ValueError naming the triple, the Debian package and the
    pip extra; the CLI says it in one line, exits 2 and writes nothing."""
    if llvm.host_triple() in (None, TRIPLE):
        pytest.skip(f"needs a host that is not {TRIPLE}")
    only_on_path(monkeypatch, tmp_path / "bin")
    monkeypatch.setitem(sys.modules, "ziglang", None)  # as if the wheel were not installed
    assert llvm.zig_cc(TRIPLE) is None
    with pytest.raises(ValueError) as e:
        llvm.linker(SPEC)
    for part in (f"--triple {TRIPLE}", f"no {TRIPLE}-gcc on PATH", f"apt-get install gcc-{TRIPLE}",
                 llvm.CROSS_EXTRA):
        assert part in str(e.value)
    out = tmp_path / "out"
    assert cli.main(["generate", "--triple", TRIPLE, "--cpu", CPU, "--op", OP, "--dtype", DTYPE,
                     "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and llvm.CROSS_EXTRA in err[0], err
    assert not out.exists()
