"""The generated operator packages built by their own CMakeLists.txt, as a CANN user builds them:
against a stand-in CANN root whose include/ is the CPU twin (tests/ascend_twin) and whose
ascendc.cmake is the twin's (tests/ascend_twin/cmake: the kernels compiled against the AscendC twin,
with the aclrtlaunch_<kernel> functions and headers made from the kernels' own signatures, as CANN's
build makes them).  The host library then compiles against those headers, so a launch declaration
that does not match its kernel fails here.  The documented-API apps link the built libraries and
print the right numbers.
"""
import contextlib
import fcntl
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import ascend_lstm
import build_cache
from conftest import toolchain_missing
import test_lstm as TL
from test_ascend_aclnn import _check as cell_check, _run as cell_run, _sample as cell_sample
from test_ascend_layer_norm_aclnn import _check as ln_check, _run as ln_run, _sample as ln_sample

CXX, CMAKE = shutil.which("g++"), shutil.which("cmake")
HERE = Path(__file__).parent
TWIN = HERE / "ascend_twin"
OPS = {"lstm_cell_backward": "lstm_cell_backward_app.cpp", "layer_norm_backward": "layer_norm_backward_app.cpp",
       "lstm": "lstm_app.cpp"}


def need(*tools: str) -> None:
    """Skip (under FUSEDGRAD_CROSS_REQUIRED: fail) unless each of ``tools`` (g++, cmake) is on PATH."""
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        toolchain_missing(f"needs {' and '.join(missing)} (Debian packages {', '.join(missing)}; .ci/run installs them)")


def _cann_root(tmp: Path) -> Path:
    """A directory laid out as a CANN install: include/ and the AscendC cmake module, the twin's."""
    root = tmp / "cann"
    (root / "compiler" / "tikcpp" / "ascendc_kernel_cmake").mkdir(parents=True)
    (root / "lib64").mkdir()
    (root / "include").symlink_to(TWIN.resolve())
    (root / "compiler" / "tikcpp" / "ascendc_kernel_cmake" / "ascendc.cmake").symlink_to(
        (TWIN / "cmake" / "ascendc.cmake").resolve())
    return root


# The packages' source copies, stand-in CANN root and cmake build trees, at one path per user: a build
# tree names its source, CANN and build folders by absolute path (CMakeCache.txt, the Makefiles,
# cmake_install.cmake, the libraries' RPATH), so the tree build_cache copies back is the one cmake makes
# only at the paths it was made at.  Held (flock on WORK.lock) from the module's first build to its end.
WORK = Path(os.path.realpath(tempfile.gettempdir())) / f"fusedgrad-ascend-pkg-{os.getuid()}"


@contextlib.contextmanager
def _work_folder():
    """WORK, empty, held by this process until the block ends, then removed."""
    with open(f"{WORK}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        shutil.rmtree(WORK, ignore_errors=True)
        WORK.mkdir()
        try:
            yield WORK
        finally:
            shutil.rmtree(WORK, ignore_errors=True)


@pytest.fixture(scope="module")
def packages(ascend_tree, tmp_path_factory):
    need("g++", "cmake")
    tmp = tmp_path_factory.mktemp("ascend_pkg")
    with _work_folder() as work:
        cann = _cann_root(work)
        apps = {}
        for op, app in OPS.items():
            src, build = work / f"src_{op}", work / f"build_{op}"
            shutil.copytree(ascend_tree / op, src)
            # configure and build as one cached build: the build tree is its output; the twin (CANN's
            # include/, a link the command's CANN root holds) and the compiler cmake finds are its inputs
            script = " && ".join(shlex.join(cmd) for cmd in (
                [CMAKE, "-S", str(src), "-B", str(build), f"-DASCEND_CANN_PACKAGE_PATH={cann}",
                 "-DCMAKE_CXX_FLAGS=-Wall -Wextra -Werror -O1"],
                [CMAKE, "--build", str(build), "-j", "2"]))
            proc = build_cache.run(["bash", "-c", script], outputs=[build], timeout=1200,
                                   inputs=[TWIN, os.path.realpath(shutil.which("c++") or CXX)])
            assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
            exe = tmp / f"app_{op}"
            proc = build_cache.run([CXX, "-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror", f"-I{TWIN}",
                                    f"-I{ascend_tree / op / 'op_host'}", "-o", str(exe),
                                    str(HERE / "ascend_app" / app), f"-L{build}", f"-lfg_{op}",
                                    f"-Wl,-rpath,{build}"], outputs=[exe])
            assert proc.returncode == 0, proc.stderr[-4000:]
            apps[op] = (exe, tmp, build)
        yield apps


def test_the_built_libraries_export_the_aclnn_api(packages):
    for op, symbols in (("lstm_cell_backward", ["aclnnThnnFusedLstmCellBackwardGetWorkspaceSize",
                                                 "aclnnThnnFusedLstmCellBackward"]),
                        ("layer_norm_backward", ["aclnnLayerNormBackwardGetWorkspaceSize", "aclnnLayerNormBackward"]),
                        ("lstm", ["aclnnLSTMGetWorkspaceSize", "aclnnLSTM", "aclnnLstmBackwardGetWorkspaceSize",
                                  "aclnnLstmBackward"])):
        _, _, build = packages[op]
        out = subprocess.run(["nm", "-D", "--defined-only", str(build / f"libfg_{op}.so")], capture_output=True,
                             text=True).stdout
        exported = {line.split()[-1] for line in out.splitlines() if " T " in line}
        assert set(symbols) <= exported, sorted(exported)[:20]
        # the twin's ascendc_library made a launch header for every kernel, from the kernel's signature
        made = {p.name for p in build.glob("*_launch/aclrtlaunch_*.h")}
        assert len(made) >= 6, made


def test_the_apps_linked_to_the_built_packages_print_the_right_numbers(packages):
    exe, tmp, _ = packages["lstm_cell_backward"]
    for p, pad in (("fp32", 0), ("bf16", -1)):
        s = cell_sample(9, 21, p)
        cell_check(cell_run((exe, tmp), p, 9, 21, pad, 1, 1, 1, s), s, p, 9, 21, 1, 1, 1)
    exe, tmp, _ = packages["layer_norm_backward"]
    for p, stats, layout in (("fp32", "same", "dense"), ("fp16", "fp32", "strided")):
        s = ln_sample((2, 3, 40), 1, p, stats, seed=3)
        ln_check(ln_run((exe, tmp, None), p, stats, (2, 3, 40), 1, 1, "111", layout, s), s, p, 1, "111")
    # the full LSTM, forward and backward, against torch.nn.LSTM
    exe, _, _ = packages["lstm"]
    cfg = TL.CASES[1].values[0]
    data = TL.make_data(cfg)
    ref, gates = TL.references(cfg, data)
    a = TL.api_inputs(cfg, data, "float32")
    fwd = ascend_lstm.lstm_forward(a["input"], a["hx"], a["params"], **TL.flags(cfg), exe=exe)
    TL.check_forward(cfg, fwd, ref, gates, "float32")
    bwd = ascend_lstm.lstm_backward(a["grad_y"], a["grad_hy"], a["grad_cy"], a["input"], a["hx"], a["params"],
                                    *fwd[3:], **TL.flags(cfg), exe=exe)
    TL.check_backward(cfg, bwd, ref, a, "float32")


@pytest.mark.parametrize("op, api", [("lstm_cell_backward", "aclnnThnnFusedLstmCellBackward"),
                                     ("layer_norm_backward", "aclnnLayerNormBackward"), ("lstm", "aclnnLSTM"),
                                     ("lstm", "aclnnLstmBackward")])
def test_the_package_installs_as_a_cann_custom_operator(packages, tmp_path, op, api):
    """cmake --install lays the package out as CANN's custom operators are
    (vendors/fusedgrad_<op>/op_api/lib/libcust_opapi.so, op_api/include/), a library that finds its
    kernels beside it; looked up as torch_npu's op-plugin does (dlopen that library, dlsym the aclnn
    name) it gives fusedgrad's functions, ahead of CANN's built-in libopapi."""
    _, _, build = packages[op]
    proc = subprocess.run([CMAKE, "--install", str(build), "--prefix", str(tmp_path)], capture_output=True, text=True)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    lib = tmp_path / "vendors" / f"fusedgrad_{op}" / "op_api" / "lib"
    assert (tmp_path / "vendors" / f"fusedgrad_{op}" / "op_api" / "include" / f"{_snake(api)}.h").is_file()
    cust = lib / "libcust_opapi.so"
    assert cust.is_symlink() and cust.resolve() == (lib / f"libfg_{op}.so").resolve()
    dynamic = subprocess.run(["readelf", "-d", str(cust.resolve())], capture_output=True, text=True).stdout
    assert "[$ORIGIN]" in dynamic and str(build) not in dynamic, dynamic
    probe = (f"import ctypes; lib = ctypes.CDLL({str(cust)!r}); "
             f"print(all(hasattr(lib, n) for n in ({api + 'GetWorkspaceSize'!r}, {api!r})))")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip() == "True", proc.stdout + proc.stderr


def _snake(api):
    """aclnnLayerNormBackward -> aclnn_layer_norm_backward (the header's name; aclnnLSTM -> aclnn_lstm)."""
    return "aclnn" + re.sub(r"([A-Z]+)(?![a-z])|([A-Z])", lambda m: "_" + (m.group(1) or m.group(2)).lower(),
                            api[len("aclnn"):])


def test_a_machine_without_cann_is_told_so(ascend_tree, tmp_path):
    need("cmake")
    proc = subprocess.run([CMAKE, "-S", str(ascend_tree / "layer_norm_backward"), "-B", str(tmp_path / "b"),
                           f"-DASCEND_CANN_PACKAGE_PATH={tmp_path / 'no_cann'}"], capture_output=True, text=True)
    said = " ".join(proc.stderr.split())  # cmake wraps its messages
    assert proc.returncode != 0 and "no ascendc.cmake under ASCEND_CANN_PACKAGE_PATH" in said, said


def test_aclnn_file_names_follow_canns():
    """CANN's header names: one word per capitalised word, an acronym one word (aclnn_lstm.h)."""
    from fusedgrad.lowering import naming

    assert [naming.aclnn_stem(c) for c in ("LSTM", "LstmBackward", "ThnnFusedLstmCellBackward", "LayerNormBackward")] == [
        "aclnn_lstm", "aclnn_lstm_backward", "aclnn_thnn_fused_lstm_cell_backward", "aclnn_layer_norm_backward"]
