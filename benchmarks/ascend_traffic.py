"""GM traffic of the generated Ascend operators, counted on the AscendC twin, against the compulsory
traffic (every input read once, every output written once).

    python benchmarks/ascend_traffic.py [--op layer_norm_backward|lstm_cell_backward] [--dtype float32|float16|bfloat16]

No NPU here, so no time: the kernels are bandwidth-bound (a few vector instructions per element), so
bytes moved between GM and UB over the compulsory bytes is the cost the generator controls, the
ratio a device run would show against peak memory bandwidth.  The operators run end to end through
their aclnn API (tests/ascend_app's two-phase call, dense tensors, all outputs wanted) on the twin
(tests/ascend_twin, which counts DataCopy/DataCopyPad/GetValue bytes); the extra traffic is the
fp32 partial sums of the deterministic reductions and second reads.
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
sys.path.insert(0, str(TESTS))

from ascend_shim import launch_shim  # noqa: E402

from fusedgrad.lowering import ascend  # noqa: E402

CASES = {
    "layer_norm_backward": [(64, 1024), (4096, 1024), (1024, 4096), (256, 12288)],
    "lstm_cell_backward": [(64, 1024), (1024, 1024), (16, 4096)],
}
ACL = {"float32": "ACL_FLOAT", "float16": "ACL_FLOAT16", "bfloat16": "ACL_BF16"}
ELEM = {"float32": 4, "float16": 2, "bfloat16": 2}

DRIVER = Path(__file__).with_name("ascend_traffic_driver.cpp")  # the two-phase call, built per op and dtype


def build(op: str, dtype: str, tmp: Path, tree: Path | None = None, run=None) -> Path:
    """The traffic driver of ``op`` in ``dtype``, built in ``tmp`` against ``op``'s package under ``tree``
    (a folder ascend.write made, only read; None: the package written into ``tmp``).  ``run(cmd,
    exe)`` runs the g++ command that writes ``exe`` and returns its CompletedProcess (the tests
    cache it; default: subprocess.run)."""
    if tree is None:
        ascend.write_op(tmp, op)
    root = Path(tree or tmp) / op
    host = next((root / "op_host").glob("aclnn_*.cpp"))
    (tmp / "shim.cpp").write_text(launch_shim(root / "op_kernel", root / "op_host", op))
    flags = [f"-DFG_DTYPE={ACL[dtype]}"] + (["-DFG_LN"] if op == "layer_norm_backward" else [])
    exe = tmp / f"traffic_{op}_{dtype}"
    cmd = ["g++", "-std=c++17", "-O2", f"-I{TESTS / 'ascend_twin'}", f"-I{TESTS / 'ascend_twin' / 'aclnn'}", f"-I{root / 'op_kernel'}",
           f"-I{root / 'op_host'}", *flags, "-o", str(exe), str(DRIVER), str(host), str(tmp / "shim.cpp")]
    proc = run(cmd, exe) if run else subprocess.run(cmd)
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr or ''}")
    return exe


def compulsory(op: str, a: int, b: int, e: int) -> int:
    """Every input read once and every output written once, in bytes."""
    if op == "layer_norm_backward":  # x, dy, mean, rstd, gamma in; dx, dgamma, dbeta out
        return e * (3 * a * b + 2 * a + 3 * b)
    return e * (4 * a * b + 4 * a * b + 4 * a * b + a * b + 4 * b)  # dhy dc cx cy, storage; dgates, dcx, db


def measure(exe: Path, op: str, dtype: str, a: int, b: int) -> tuple[int, int, int]:
    out = subprocess.run([str(exe), str(a), str(b)], capture_output=True, text=True, check=True).stdout.split()
    return int(out[0]), int(out[1]), compulsory(op, a, b, ELEM[dtype])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--op", choices=list(CASES), action="append")
    ap.add_argument("--dtype", choices=list(ACL), action="append")
    ap.add_argument("--shape", help="A,B: rows and row length (M,D or N,H) instead of the standard cases")
    args = ap.parse_args(argv)
    if shutil.which("g++") is None:
        print("needs g++ (the twin is C++)", file=sys.stderr)
        return 2
    print(f"{'op':<22}{'dtype':<10}{'shape':<14}{'read MB':>10}{'written MB':>12}{'ratio':>8}")
    with tempfile.TemporaryDirectory() as d:
        for op in args.op or list(CASES):
            for dtype in args.dtype or ["float32", "float16"]:
                exe = build(op, dtype, Path(d))
                shapes = [tuple(int(v) for v in args.shape.split(","))] if args.shape else CASES[op]
                for a, b in shapes:
                    r, wr, need = measure(exe, op, dtype, a, b)
                    print(f"{op:<22}{dtype:<10}{f'{a}x{b}':<14}{r / 1e6:>10.2f}{wr / 1e6:>12.2f}{(r + wr) / need:>8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
