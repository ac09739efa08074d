"""Time one LSTM layer kernel of this CPU's build with fixed schedule knobs (the kernel alone, on
numpy arrays, equal lengths; median of 11 calls), to see what ``fusedgrad tune`` would search.

    TVM_NUM_THREADS=1 python benchmarks/lstm_layer_knobs.py fwd|bwd UNITS_VECTORS ROWS T B H
"""
from __future__ import annotations

import sys
import time

import numpy as np

from fusedgrad import targets
from fusedgrad.lowering import intrinsics, tvm_api
from fusedgrad.schedules.llvm import lstm_layer


def main(argv) -> int:
    which, uv, rows = argv[0], int(argv[1]), int(argv[2])
    T, B, H = (int(v) for v in argv[3:6])
    info = targets.get("llvm")
    intrinsics.install("llvm", dict(info.intrinsics))
    tgt = tvm_api.target(info.tvm_target())
    rule = (lstm_layer.LstmLayerForward if which == "fwd" else lstm_layer.LstmLayerBackward)(
        {"UNITS_VECTORS": uv, "ROWS": rows})
    variant = {"train": True, "reverse": False} if which == "fwd" else {"reverse": False}
    exe = tvm_api.compile_module({"k": rule.build(variant, tgt).with_attr("global_symbol", "k")}, tgt)
    rng = np.random.default_rng(0)

    def r(*shape):
        return (rng.standard_normal(shape) * 0.1).astype(np.float32)

    zeros = lambda *shape: np.zeros(shape, np.float32)  # noqa: E731
    bs = np.full(T, B, np.int32)
    if which == "fwd":
        args = [r(T, B, 4, H), r(4, H, H), r(B, H), r(B, H), bs, *(zeros(T, B, H) for _ in range(7)),
                zeros(B, H), zeros(B, H)]
    else:
        args = [r(T, B, H), r(4, H, H), r(T, B, H), r(B, H), *(r(T, B, H) for _ in range(5)), r(B, H), r(B, H), bs,
                zeros(T, B, 4, H), zeros(4, H, T, B), zeros(B, H), zeros(B, H)]
    times = []
    for _ in range(11):
        t0 = time.perf_counter()
        exe["k"](*args)
        times.append(time.perf_counter() - t0)
    print(f"{which} UNITS_VECTORS={uv} ROWS={rows} T,B,H={T},{B},{H}: median {np.median(times) * 1e3:.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
