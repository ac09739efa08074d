"""The Cube GEMM (lowering/ascend/cube.py) on the AscendC twin: its GM traffic against the compulsory
traffic (A and B read once, C written once), and the share of the Cube unit's multiply-adds that are
the product's (Mmad pads m and n to 16 and k to a 32-byte fractal row), at the full LSTM's GEMM shapes.

    python benchmarks/ascend_gemm.py [--dtype float16] [--shape M,N,K ...]

No NPU here, so no time: the twin counts bytes and multiply-adds, not cycles.  Shapes (T=100, B=64,
I=H=1024, 4H=4096): the step GEMM h W_hh^T [B, 4H, H], the input GEMM x W_ih^T [T*B, 4H, I], the
backward's dh = dgates W_hh [B, H, 4H] and dW_ih = dgates^T x [4H, I, T*B].
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import test_ascend_cube as cube_tests  # noqa: E402  (the test's driver and build)

SHAPES = [(64, 4096, 1024), (6400, 4096, 1024), (64, 1024, 4096), (4096, 1024, 6400), (1, 4096, 1024)]
ELEM = {"float32": 4, "float16": 2, "bfloat16": 2}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", default="float16", choices=sorted(ELEM))
    ap.add_argument("--shape", action="append", help="M,N,K (repeatable)")
    args = ap.parse_args(argv)
    shapes = [tuple(int(v) for v in s.split(",")) for s in args.shape] if args.shape else SHAPES
    with tempfile.TemporaryDirectory() as tmp:
        exe = cube_tests._build(Path(tmp), args.dtype, "float32")
        print(f"Cube GEMM on the twin, {args.dtype} in, float32 out; tiles {cube_tests.cube.tiles(args.dtype)}\n")
        print("| M | N | K | cores | GM bytes | compulsory | ratio | useful MACs |")
        print("|---|---|---|---|---|---|---|---|")
        for m, n, k in shapes:
            e = ELEM[args.dtype]
            (Path(tmp) / "in").write_bytes(np.zeros(m * k + n * k, np.float16 if e == 2 else np.float32).tobytes())
            (Path(tmp) / "out").write_bytes(np.zeros(m * n, np.float32).tobytes())
            proc = subprocess.run([str(exe), str(m), str(n), str(k), str(k), str(k), str(n), "24", f"{tmp}/in",
                                   f"{tmp}/out"], capture_output=True, text=True)
            if proc.returncode != 0:
                print(proc.stderr, file=sys.stderr)
                return 1
            cores, _, read, written, _, issued = (int(v) for v in proc.stdout.split())
            need = (m * k + n * k) * e + m * n * 4
            print(f"| {m} | {n} | {k} | {cores} | {read + written} | {need} | {(read + written) / need:.2f} | "
                  f"{m * n * k / issued:.1%} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
