"""DSP library (generated/dsp) built with clang, the compiler of the Hexagon, Xtensa and TI Arm toolchains.

- natively: tests/test_dsp.py's reference, sanitizer (ASan/UBSan), workspace, size-limit and
  contraction checks, imported from there and run with clang in place of gcc, on the same strictly
  built (-std=c99 -Wall -Wextra -Werror -pedantic) library of a fresh generation (an x86 clang
  before 15 has no _Float16: there the fp16 entry points run fg_half.h's 16-bit struct);
- as freestanding objects (-c -ffreestanding, the same strict flags) for Hexagon, a Cortex-M
  (armv7m-none-eabi) and 32-bit RISC-V (riscv32-unknown-elf).

.ci/run installs Debian's clang and sets FUSEDGRAD_CROSS_REQUIRED=1: then a missing clang is a
failure.  Elsewhere a missing clang skips these tests and names the package.
"""
import shutil

import pytest

import build_cache
import test_dsp
from conftest import toolchain_missing
from fusedgrad.lowering import dsp
# the fixtures and checks of the gcc build; the fixtures are set up again in this module, after
# ``clang`` has put clang in place of gcc
from test_dsp import cell_libs, libs  # noqa: F401
from test_dsp import (  # noqa: F401
    test_a_caller_owned_workspace_of_the_queried_size_serves_every_call,
    test_cell_entry_points_match_reference_and_each_other, test_cell_sanitizers_find_nothing,
    test_entry_points_match_reference_and_each_other, test_sanitizers_find_nothing,
    test_sizes_past_the_32_bit_index_range_are_refused,
    test_the_bits_do_not_depend_on_the_compilers_contraction_default)


@pytest.fixture(scope="module", autouse=True)
def clang():
    """clang's path; tests/test_dsp.py's compiler is clang while this module's tests run."""
    cc = shutil.which("clang")
    if cc is None:
        toolchain_missing("clang not installed (Debian: apt-get install clang; .ci/run installs it)")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(test_dsp, "CC", cc)
        yield cc


# target triple: its ELF e_machine (each a 32-bit little-endian ELF)
FREESTANDING = {"hexagon": 164, "armv7m-none-eabi": 40, "riscv32-unknown-elf": 243}
# a bare target has no C library headers: beyond the compiler's own freestanding ones the kernels
# include <math.h> alone, for sqrtf; any other libm call is an implicit declaration, an error here
MATH_H = "#ifndef MATH_H\n#define MATH_H\nfloat sqrtf(float x);\n#endif\n"


@pytest.mark.parametrize("triple", sorted(FREESTANDING))
@pytest.mark.parametrize("chip", sorted(dsp.CHIPS))
@pytest.mark.parametrize("source", ["layernormgrad.c", "lstmcellgrad.c"])
def test_freestanding_objects_for_dsp_and_microcontroller_targets(
        clang, dsp_tree, tmp_path, triple, chip, source):
    """Each kernel source compiles strictly, warnings as errors, into an object for ``triple``
    (before, clang rejected every file: ``if ((i == 0))`` is a -Wparentheses-equality warning)."""
    (tmp_path / "math.h").write_text(MATH_H)
    obj = tmp_path / "k.o"
    cmd = [clang, f"--target={triple}", *test_dsp.STRICT, "-ffreestanding", "-nostdlibinc",
           f"-isystem{tmp_path}", f"-I{dsp_tree / chip}", "-c", "-o", str(obj), str(dsp_tree / chip / source)]
    proc = build_cache.run(cmd, outputs=[obj])
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stderr[-3000:]}"
    head = obj.read_bytes()[:20]
    assert head[:4] == b"\x7fELF" and head[4] == 1 and head[5] == 1, head  # ELF, 32-bit, little-endian
    assert int.from_bytes(head[18:20], "little") == FREESTANDING[triple], (triple, head)
