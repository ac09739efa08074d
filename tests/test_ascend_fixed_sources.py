"""The Ascend target's fixed C/C++ sources (targets/ascend/) compiled on their own, as they are,
against the CANN twin (tests/ascend_twin) with every warning an error; the packages carry them
verbatim; a template with a field left unfilled is refused."""
import shutil
import subprocess
from pathlib import Path

import pytest

import build_cache

from fusedgrad import targets
from fusedgrad.lowering.ascend import fixed

CXX = shutil.which("g++")
TWIN = Path(__file__).with_name("ascend_twin")
FIXED = targets.runtime_source_dir(targets.get("ascend"))
# CANN's include path: <CANN>/include and <CANN>/include/aclnn (where opdev/ is installed)
FLAGS = ["-std=c++17", "-Wall", "-Wextra", "-Werror", "-fsyntax-only", f"-I{TWIN}", f"-I{TWIN / 'aclnn'}",
         f"-I{FIXED}"]
needs_cxx = pytest.mark.skipif(CXX is None, reason="no C++ compiler (g++) on this machine")


def _compile(tmp_path: Path, text: str, flags=FLAGS) -> subprocess.CompletedProcess:
    src = tmp_path / "unit.cpp"
    src.write_text(text)
    return build_cache.run([CXX, *flags, str(src)], outputs=[])  # flags: -fsyntax-only, nothing written


@needs_cxx
def test_the_host_helpers_compile_on_their_own(tmp_path):
    # what the host code's start (host_preamble.cpp.in) gives them
    unit = "\n".join(["#include <stdint.h>", "#include <string.h>", "#include <mutex>", "#include <vector>",
                      '#include "acl/acl.h"',
                      '#include "aclnn/aclnn_base.h"', '#include "opdev/op_errno.h"', '#include "copy_params.h"',
                      "#define FG_ASCEND_VECTOR_CORES 40u", "#define FG_TILING_BYTES 128u",
                      "#define FG_COPY_PARAMS_BYTES 192u", '#include "host_common.cpp"', ""])
    proc = _compile(tmp_path, unit)
    assert proc.returncode == 0, proc.stderr[-4000:]


@needs_cxx
@pytest.mark.parametrize("op", ["lstm_cell_backward", "layer_norm_backward", "matmul"])
def test_the_tiling_headers_compile_on_their_own(tmp_path, op):
    proc = _compile(tmp_path, f'#include "{op}_tiling.h"\n#include "copy_params.h"\n')
    assert proc.returncode == 0, proc.stderr[-4000:]


@needs_cxx
def test_a_broken_fixed_source_fails_to_compile(tmp_path):
    # the check above can fail: the same helpers without what they need do not compile
    proc = _compile(tmp_path, '#include <stdint.h>\n#include "host_common.cpp"\n')
    assert proc.returncode != 0


@needs_cxx
@pytest.mark.parametrize("unit, flags, error", [
    # the status codes are CANN's opdev/op_errno.h, not aclnn/aclnn_base.h
    ('#include "aclnn/aclnn_base.h"\nint f() { return ACLNN_SUCCESS; }\n', FLAGS, "ACLNN_SUCCESS"),
    # opdev/ is found through include/aclnn only
    ('#include "opdev/op_errno.h"\n', [f for f in FLAGS if f != f"-I{TWIN / 'aclnn'}"], "opdev/op_errno.h"),
    ('#include "opdev/common_types.h"\n', [f for f in FLAGS if f != f"-I{TWIN / 'aclnn'}"], "opdev/common_types.h"),
    # aclOpExecutor is CANN's type: an operator may not define its own
    ('#include "aclnn/aclnn_base.h"\nstruct aclOpExecutor { int plan; };\n', FLAGS, "aclOpExecutor"),
])
def test_the_twin_holds_host_code_to_cann_header_layout(tmp_path, unit, flags, error):
    proc = _compile(tmp_path, unit, flags)
    assert proc.returncode != 0 and error in proc.stderr, proc.stderr[-2000:]


def test_the_packages_carry_the_fixed_sources_verbatim(ascend_tree):
    for op in ("lstm_cell_backward", "layer_norm_backward"):
        host = next((ascend_tree / op / "op_host").glob("aclnn_*.cpp")).read_text()
        assert fixed.text("host_common.cpp") in host
        tiling = (ascend_tree / op / "op_kernel" / f"fg_{op}_tiling.h").read_text()
        assert fixed.text(f"{op}_tiling.h").rsplit("#endif", 1)[0] in tiling
        assert fixed.text("copy_params.h") in tiling
        # the files' own opening comments stay behind
        assert "lowering.ascend copies" not in host + tiling


def test_a_template_field_left_unfilled_is_refused():
    with pytest.raises(ValueError, match="NAME"):
        fixed.render("copy_kernel.cpp.in", T="float")
