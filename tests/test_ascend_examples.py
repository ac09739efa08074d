"""The calling examples of the Ascend packages (examples/ascend/*.cpp) built unchanged against the
packages as their CMakeLists.txt builds and installs them on the twin (test_ascend_package_build's
``packages``), with the command line docs/ascend.md gives (the twin's include/ for CANN's), and run.
Each calls its aclnn API on random values, checks every output against its own float64 reference and
prints the largest error of each; told to perturb its reference (``--perturb-reference``) it must
report an error past the tolerance and fail.
"""
import math
import re
import subprocess
from pathlib import Path

import pytest

from test_ascend_package_build import CMAKE, CXX, TWIN, packages  # noqa: F401 (packages: the fixture)

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "ascend"
GATES = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
# example -> (package, the outputs it reports, in order)
OUTPUTS = {
    "lstm_forward": ("lstm", ["output", "hy", "cy", "i", "j", "f", "o", "h", "c", "tanhc"]),
    "lstm_backward": ("lstm", ["dx", "dh0", "dc0"] + [f"d{w}_l{layer}{d}" for layer in range(2)
                                                      for d in ("", "_reverse") for w in GATES]),
    "lstm_cell_backward": ("lstm_cell_backward", ["grad_gates", "grad_cx", "grad_bias"]),
}
LINE = re.compile(r"^(\S+) +max \|error\| (\S+) +tolerance (\S+)$", re.M)


@pytest.fixture(scope="module")
def example(packages, tmp_path_factory):  # noqa: F811 (the fixture imported above)
    """example(name) -> its executable: the package installed (cmake --install) once, the example
    compiled and linked against the installed include/ and lib/ once."""
    tmp = tmp_path_factory.mktemp("ascend_examples")
    built = {}

    def build(name: str) -> Path:
        if name in built:
            return built[name]
        op = OUTPUTS[name][0]
        prefix = tmp / f"install_{op}"
        if not prefix.exists():
            proc = subprocess.run([CMAKE, "--install", str(packages[op][2]), "--prefix", str(prefix)],
                                  capture_output=True, text=True)
            assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
        exe = tmp / name  # not from the build cache: its key would not see the installed headers and library
        proc = subprocess.run([CXX, "-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror", str(EXAMPLES / f"{name}.cpp"),
                               f"-I{TWIN}", f"-I{prefix / 'include'}", f"-L{prefix / 'lib'}", f"-lfg_{op}",
                               f"-Wl,-rpath,{prefix / 'lib'}", "-o", str(exe)], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr[-4000:]
        built[name] = exe
        return exe

    return build


def _errors(exe: Path, *args: str) -> tuple[int, dict, str]:
    """Run an example: (exit status, {output: (largest error, tolerance)}, what it printed)."""
    proc = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=600)
    printed = proc.stdout + proc.stderr
    return proc.returncode, {n: (float(e), float(t)) for n, e, t in LINE.findall(proc.stdout)}, printed


@pytest.mark.parametrize("name", sorted(OUTPUTS))
def test_example_matches_its_float64_reference(example, name):
    rc, errors, printed = _errors(example(name))
    assert rc == 0, printed[-4000:]
    assert list(errors) == OUTPUTS[name][1], printed[-4000:]
    for output, (err, tol) in errors.items():
        assert math.isfinite(err) and 0 < tol and err <= tol, (output, err, tol)


@pytest.mark.parametrize("name", sorted(OUTPUTS))
def test_example_fails_on_a_perturbed_reference(example, name):
    rc, errors, printed = _errors(example(name), "--perturb-reference")
    assert rc == 1, printed[-4000:]
    assert list(errors) == OUTPUTS[name][1], printed[-4000:]
    assert any(err > tol for err, tol in errors.values()), printed[-4000:]
