"""Sizes whose element or byte counts leave int or long long: every DSP entry point (every op, fp_
and hp_, the _s/_p/_r/_w forms and the workspace query) refuses them with ERR_SIZE, under UBSan.

tests/dsp_huge_sizes.c makes the calls with pointers that hold no memory; the checks must reach
their answer in 64-bit arithmetic that cannot overflow (4 * hidden at hidden = 2^29 was signed
overflow in int, 4 * hidden * T at INT32_MAX each overflowed long long).
"""
import shutil
import subprocess
from pathlib import Path

import pytest

import build_cache
from fusedgrad.lowering import dsp

CC = shutil.which("gcc") or shutil.which("cc")
HARNESS = Path(__file__).with_name("dsp_huge_sizes.c")
STEMS = ("layernormgrad", "lstmcellgrad", "lstm", "lstmgrad")


@pytest.mark.skipif(CC is None, reason="no C compiler (gcc) on this machine")
@pytest.mark.parametrize("chip", sorted(dsp.CHIPS))
def test_every_entry_point_refuses_sizes_that_overflow_without_undefined_arithmetic(dsp_tree, tmp_path, chip):
    src = dsp_tree / chip
    half = ["-DFG_TEST_HALF"] if "float16" in dsp.CHIPS[chip] else []
    exe = tmp_path / "huge"
    # -O0: the checks run as written (no folding hides an overflow), and the large kernels build fast
    cmd = [CC, "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-O0", *half, "-fsanitize=undefined",
           "-fno-sanitize-recover=all", f"-I{src}", "-o", str(exe), str(HARNESS),
           *(str(src / f"{stem}.c") for stem in STEMS), str(src / "fg_dsp_port_host.c"), "-lm", "-lpthread"]
    proc = build_cache.run(cmd, outputs=[exe])
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and run.stdout.strip().endswith("bad 0"), (run.stdout[-3000:], run.stderr[-3000:])
