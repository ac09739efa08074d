"""CI's toolchain guard: .ci/toolchains installs the Debian packages of the tools the tests use and
fails when one is still missing; .ci/run then sets FUSEDGRAD_CROSS_REQUIRED, under which a test that
finds a tool missing fails instead of skipping."""
from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / ".ci" / "toolchains"
BASH = shutil.which("bash")


def tools() -> dict[str, str]:
    """The script's own table: {command: Debian package}."""
    text = SCRIPT.read_text()
    table = text[text.index("TOOLS=("):text.index("\n)\n")]
    return dict(re.findall(r'"([^":]+):([^"]+)"', table))


def stub(folder: Path, name: str, body: str = "exit 0") -> None:
    path = folder / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def run_with(tmp_path: Path, present: set[str]) -> tuple[subprocess.CompletedProcess, list[str]]:
    """Run .ci/toolchains with PATH holding only stand-ins: the tools in ``present``, an apt-get that
    notes its arguments and installs nothing, env; returns the result and apt-get's calls."""
    bin_dir, log = tmp_path / "bin", tmp_path / "apt.txt"
    bin_dir.mkdir()
    for name in present:
        stub(bin_dir, name)
    stub(bin_dir, "apt-get", f'echo "$@" >> \'{log}\'')
    (bin_dir / "env").symlink_to(shutil.which("env"))
    proc = subprocess.run([BASH, str(SCRIPT)], capture_output=True, text=True,
                          env={"PATH": str(bin_dir), "HOME": str(tmp_path)})
    return proc, (log.read_text().splitlines() if log.exists() else [])


def test_the_table_names_every_toolchain_the_tests_need():
    table = tools()
    for tool in ("gcc", "g++", "clang", "cmake", "arm-none-eabi-gcc", "riscv64-linux-gnu-gcc",
                 "aarch64-linux-gnu-gcc", "arm-linux-gnueabihf-gcc", "qemu-aarch64", "qemu-riscv64", "qemu-arm"):
        assert tool in table, tool
    assert table["clang"] == "clang" and table["cmake"] == "cmake"


def test_a_tool_still_missing_after_the_install_fails_the_run(tmp_path):
    """clang is missing and apt-get does not bring it: the script asks apt-get for its package, then
    exits 1 naming the tool and the package."""
    table = tools()
    proc, calls = run_with(tmp_path, set(table) - {"clang", "cmake"})
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert "missing toolchains: clang cmake (Debian packages: clang cmake)" in proc.stderr, proc.stderr
    if os.geteuid() == 0:  # root installs (else sudo -n, which this PATH lacks)
        assert calls[-1].split()[-2:] == ["clang", "cmake"] and "install" in calls[-1].split(), calls


def test_every_tool_present_installs_nothing(tmp_path):
    proc, calls = run_with(tmp_path, set(tools()))
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert calls == [] and proc.stderr == ""


def test_ci_run_sets_the_variable_after_the_guard():
    """.ci/run runs the guard unconditionally, then exports FUSEDGRAD_CROSS_REQUIRED, before pytest."""
    lines = [ln.strip() for ln in (ROOT / ".ci" / "run").read_text().splitlines()]
    guard, export = lines.index("bash .ci/toolchains"), lines.index("export FUSEDGRAD_CROSS_REQUIRED=1")
    assert guard < export < next(i for i, ln in enumerate(lines) if ln.startswith("pytest"))


DSP_HALF = "tests/test_dsp.py::test_the_half_conversions_follow_what_the_target_has"
NO_CANN = "tests/test_ascend_package_build.py::test_a_machine_without_cann_is_told_so"
ACLNN_NAMES = "tests/test_ascend_package_build.py::test_aclnn_file_names_follow_canns"


@pytest.mark.parametrize("required", ["", "1"])
def test_a_missing_toolchain_skips_or_fails_as_the_variable_says(tmp_path, required):
    """With arm-none-eabi-gcc and cmake off PATH, their tests (tests/test_dsp.py's half conversions
    for arm-none-eabi-gcc, the Ascend package build's cmake check) skip naming the package, or under
    FUSEDGRAD_CROSS_REQUIRED fail; the aclnn naming test beside them needs neither and passes."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "gcc").symlink_to(shutil.which("gcc") or "/bin/false")  # test_dsp.py needs a host gcc
    env = {**os.environ, "PATH": str(bin_dir), "FUSEDGRAD_CROSS_REQUIRED": required}
    # -n 0: three tests need no xdist workers (each would import the suite's modules again)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", "-rA", "-p", "no:cacheprovider",
                           DSP_HALF, NO_CANN, ACLNN_NAMES, "-k", "arm-none-eabi-gcc or cann"],
                          cwd=ROOT, capture_output=True, text=True, env=env)
    out = proc.stdout
    assert f"PASSED {ACLNN_NAMES}" in out, out[-3000:]
    for node, why in ((DSP_HALF, "arm-none-eabi-gcc not installed (Debian: apt-get install gcc-arm-none-eabi"),
                      (NO_CANN, "needs cmake (Debian packages cmake")):
        file = node.split("::")[0]
        if required:
            assert f"FAILED {node}" in out and f"Failed: {why}" in out, out[-3000:]
        else:
            assert re.search(rf"SKIPPED \[1\] {re.escape(file)}:\d+: {re.escape(why)}", out), out[-3000:]
    assert ("2 failed, 1 passed" if required else "1 passed, 2 skipped") in out, out[-3000:]
