"""The full LSTM's Ascend package (aclnnLSTM + aclnnLstmBackward, generated/ascend/lstm) on the twin of
CANN: the GM traffic of a forward (train) and a backward against the compulsory traffic, and the share
of the Cube unit's multiply-adds that are the GEMMs' own.

    python benchmarks/ascend_lstm.py [--dtype float32|float16|bfloat16] [--config T,B,I,H,L,D ...]

No NPU here, so no time: the twin counts bytes and multiply-adds, not cycles.  Compulsory traffic, in
the dtype's bytes: the forward reads x, the parameters, h0 and c0 once and writes the output, hy, cy and the 7
saved tensors once; the backward reads x, h0, c0, the parameters, dy, dh, dc and the 7 saved tensors
once and writes dx, dh0, dc0 and the parameters' gradients once.  The Cube's useful multiply-adds are
those of the products asked for; the Cube performs whole fractals (16 x 8 x 16 in fp32, 16 x 16 x 16 in
fp16 / bf16, the GEMMs' operand dtype).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import ascend_lstm  # noqa: E402  (the twin build of the package)

CONFIGS = [(50, 32, 256, 256, 1, 1), (50, 32, 256, 256, 2, 2), (100, 64, 512, 512, 1, 1)]


def compulsory(T, B, I, H, L, D, size=4):
    """(forward, backward) compulsory GM bytes, ``size`` bytes an element."""
    LD = L * D
    params = sum(D * (4 * H * (I if l == 0 else D * H) + 4 * H * H + 8 * H) for l in range(L))
    states = 2 * LD * B * H
    saved = 7 * LD * T * B * H
    fwd = T * B * I + params + states + T * B * D * H + states + saved
    bwd = T * B * I + states + params + T * B * D * H + states + saved + T * B * I + states + params
    return size * fwd, size * bwd


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", action="append", help="T,B,I,H,L,D (repeatable)")
    ap.add_argument("--dtype", default="float32", choices=("float32", "float16", "bfloat16"))
    args = ap.parse_args(argv)
    import ml_dtypes

    np_dtype = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}[args.dtype]
    configs = [tuple(int(v) for v in c.split(",")) for c in args.config] if args.config else CONFIGS
    ascend_lstm.build()
    print(f"Full LSTM on the twin ({args.dtype}), forward with train and backward\n")
    print("| T, B, I, H, L, D | pass | GM bytes | compulsory | ratio | useful Cube MACs | twin s |")
    print("|---|---|---|---|---|---|---|")
    for T, B, I, H, L, D in configs:
        rng = np.random.default_rng(0)
        k = 1 / np.sqrt(H)
        params = []
        for l in range(L):
            for _ in range(D):
                params += [rng.uniform(-k, k, (4 * H, I if l == 0 else D * H)), rng.uniform(-k, k, (4 * H, H)),
                           rng.uniform(-k, k, 4 * H), rng.uniform(-k, k, 4 * H)]
        params = [p.astype(np_dtype) for p in params]
        x = rng.standard_normal((T, B, I)).astype(np_dtype)
        flags = dict(has_biases=True, num_layers=L, dropout=0.0, train=True, bidirectional=D == 2)
        t0 = time.perf_counter()
        fwd = ascend_lstm.lstm_forward(x, [], params, **flags)
        t1 = time.perf_counter()
        dy = rng.standard_normal((T, B, D * H)).astype(np_dtype)
        ascend_lstm.lstm_backward(dy, None, None, x, [], params, *fwd[3:], **flags)
        t2 = time.perf_counter()
        need = compulsory(T, B, I, H, L, D, np.dtype(np_dtype).itemsize)
        for name, c, n, secs in (("forward", ascend_lstm.COUNTERS["fwd"], need[0], t1 - t0),
                                 ("backward", ascend_lstm.COUNTERS["bwd"], need[1], t2 - t1)):
            moved = c["gm_read"] + c["gm_write"]
            print(f"| {T}, {B}, {I}, {H}, {L}, {D} | {name} | {moved / 1e6:.1f} MB | {n / 1e6:.1f} MB | {moved / n:.2f} "
                  f"| {100 * c['cube_macs_useful'] / c['cube_macs_issued']:.1f}% | {secs:.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
