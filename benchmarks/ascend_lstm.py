"""The full LSTM's Ascend package (aclnnLSTM + aclnnLstmBackward, generated/ascend/lstm) on the twin of
CANN: the GM traffic of a forward (train) and a backward against the compulsory traffic, and the share
of the Cube unit's multiply-adds that are the GEMMs' own.

    python benchmarks/ascend_lstm.py [--dtype float32|float16|bfloat16] [--config T,B,I,H,L,D ...]
                                     [--packed] [--per-step]
    python benchmarks/ascend_lstm.py --model [--config T,B,I,H,L,D ...]

``--packed``: variable lengths T, T-1, ..., one a sequence (at least 1), given as batchSizes (the input
[T*B, I], zeros past each sequence's end).  ``--per-step``: the twin reports one vector core, so no
layer fits the persistent kernels and every layer takes the per-step plan (the same bits).

``--model`` runs nothing: it prints the float32 forward's GM bytes as the plans' formulas give them, the
per-step plan's (what the twin measures, byte for byte) and the persistent design's (one mixed kernel per
layer and direction, W_hh held in L1; docs/BENCHMARKS.md, "the persistent design").

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


def _cd(a, b):
    return -(-a // b)


def gemm_bytes(m, n, k, bias, size=4, cores=None):
    """(read, written) GM bytes of one Cube GEMM C[m, n] = A[m, k] . B[n, k]^T (+ bias) on ``cores`` cube
    cores (default the target's): A's rows once per copy the kernel makes of them (a core walks its
    consecutive units of one or two row tiles by a column of tiles, row by row, and keeps a row of units' A
    in L1 while it fits; a one-row tile as 16 copies: lowering/ascend/cube.py's a_loads), B and the fp32
    bias once per row of units, C written once (tests/test_ascend_cube.py checks it)."""
    from fusedgrad.lowering.ascend import cube

    dtype = {4: "float32", 2: "float16"}[size]
    cores = cube.FACTS["cube_cores"] if cores is None else cores
    rows = _cd(_cd(m, cube.tiles(dtype)[0]), cube.group(m, n, k, dtype, cores))  # rows of units
    loads = cube.a_loads(m, n, k, dtype, cores)
    return size * (sum(loads) * k + n * k * rows) + (4 * n * rows if bias else 0), 4 * m * n


def persistent_split(H):
    """(blocks, units, stream) of the persistent forward at hidden size H (lowering/ascend/persistent.py's
    host_split: stream, the slice read from GM at every step), or None."""
    from fusedgrad.lowering.ascend import persistent

    return persistent.host_split(H)


def forward_bytes(T, B, I, H, L, D, blocks=None, stream=False):
    """GM bytes (read + written) of the float32 forward with train, hx = [] and biases, per the plan's
    launches: the zero h0 and c0; per layer and direction the bias b_ih + b_hh (the add kernel: two rows
    of 4H read, one written), the sequence GEMM x . W_ih^T + that bias, then either (blocks None) the per-step plan (per step the GEMM h . W_hh^T and
    the step kernel: gates, xw, c_{t-1} in, 7 tensors out) or the persistent kernel on ``blocks`` blocks
    (W_hh once, or with ``stream`` once per step and row tile of B; per step every cube core reads h_{t-1}
    (B x H), the gates go to the GM workspace and back, xw and c_{t-1} in, 7 tensors out), then the final
    states' copies and the layer output's copies."""
    from fusedgrad.lowering.ascend import cube

    s = 4
    moved = 2 * L * D * B * H * s
    for l in range(L):
        width = I if l == 0 else D * H
        for _ in range(D):
            moved += 3 * 4 * H * s
            moved += sum(gemm_bytes(T * B, 4 * H, width, True))
            if blocks is None:
                moved += T * (sum(gemm_bytes(B, 4 * H, H, False)) + s * (2 * B * 4 * H + B * H + 7 * B * H))
            else:
                moved += s * 4 * H * H * (T * _cd(B, cube.tiles("float32")[0]) if stream else 1)
                moved += T * s * (blocks * B * H + 3 * B * 4 * H + B * H + 7 * B * H)
            moved += 4 * B * H * s
        if l == L - 1 or D > 1:
            moved += 2 * D * T * B * H * s
    return moved


def model(configs) -> None:
    print("float32 forward with train, GM bytes from the plans' formulas (no run)\n")
    print("| T, B, I, H, L, D | compulsory | per-step plan | ratio | blocks x units | persistent | ratio |")
    print("|---|---|---|---|---|---|---|")
    for c in configs:
        need = compulsory(*c)[0]
        step = forward_bytes(*c)
        split = persistent_split(c[3])
        pers = forward_bytes(*c, blocks=split[0], stream=split[2]) if split else 0
        pers = f"{split[0]} x {split[1]}{' streamed' if split[2] else ''} | {pers / 1e6:.1f} MB | {pers / need:.2f}" \
            if split else "does not fit | | "
        print(f"| {', '.join(map(str, c))} | {need / 1e6:.1f} MB | {step / 1e6:.1f} MB | {step / need:.2f} | {pers} |")


def _fused_split(H, width):
    """(blocks, units) of a persistent forward whose cube cores also hold W_ih's slice (x . W_ih^T in the
    kernel: both slices of whole K chunks and two A tiles each in L1, the most units L0B and L0C take), or
    None."""
    from fusedgrad.lowering.ascend import cube, fixed, persistent

    bm, _, bk = cube.tiles("float32")
    facts = fixed.facts()
    room = facts["l1_kib"] * 1024 - 2 * persistent.A_TILES * bm * bk * 4
    l0 = min(facts["l0b_kib"] * 1024 // (16 * bk), facts["l0c_kib"] * 1024 // (16 * bm)) // 16 * 16  # 4 gates' tiles
    most = min(room // (16 * (_cd(width, bk) + _cd(H, bk)) * bk), l0) // 16 * 16
    if most < 16:
        return None
    units = 16 * _cd(_cd(H, _cd(H, most)), 16)
    blocks = _cd(H, units)
    return (blocks, units) if blocks <= persistent.blocks_at_most() else None


def bounds(configs) -> None:
    """What keeps the float32 forward (train) over the compulsory bytes, per the formulas: the parts of
    the persistent design's traffic that are not compulsory, and two designs it does not take."""
    from fusedgrad.lowering.ascend import cube, fixed

    s, cores, l0c = 4, cube.FACTS["cube_cores"], fixed.facts()["l0c_kib"] * 1024
    print("float32 forward with train, GM bytes from the formulas (no run); MB\n")
    print("| T, B, I, H, L, D | compulsory | persistent | gates' round trip | xw's round trip | h re-read by blocks "
          "| sequence GEMMs read (least on a grid of the cores) | x . W_ih^T in the kernel | dW_hh's accumulator a block |")
    print("|---|---|---|---|---|---|---|---|---|")
    for T, B, I, H, L, D in configs:
        need, split = compulsory(T, B, I, H, L, D)[0], persistent_split(H)
        if not split:
            print(f"| {T}, {B}, {I}, {H}, {L}, {D} | does not fit |")
            continue
        blocks, units, stream = split
        now = forward_bytes(T, B, I, H, L, D, blocks=blocks, stream=stream)
        gates = xw = L * D * 2 * T * B * 4 * H * s
        reread = L * D * (blocks - 1) * T * B * H * s
        seq = least = 0
        fused = 2 * L * D * B * H * s  # the zero h0 and c0, as forward_bytes
        for l in range(L):
            width = I if l == 0 else D * H
            m, n, k = T * B, 4 * H, width
            seq += D * gemm_bytes(m, n, k, True)[0]
            tm, tn = _cd(m, cube.tiles("float32")[0]), _cd(n, cube.tiles("float32")[1])
            least += D * min(s * k * (m * gn + n * gm) for gm in range(1, cores + 1) for gn in range(1, cores + 1)
                             if min(cores, tm * tn) <= gm * gn <= cores)
            got = _fused_split(H, width)
            fused = None if fused is None or got is None else \
                fused + D * (3 * 4 * H * s + s * 4 * H * (width + H) + 4 * B * H * s
                             + T * s * (got[0] * B * (width + H) + 2 * B * 4 * H + got[0] * 4 * H + 8 * B * H))
            if fused is not None and (l == L - 1 or D > 1):
                fused += 2 * D * T * B * H * s
        fused = f"{fused / 1e6:.1f} ({fused / need:.2f}x)" if fused else "does not fit"
        acc = 4 * H * units * 4
        print(f"| {T}, {B}, {I}, {H}, {L}, {D} | {need / 1e6:.1f} | {now / 1e6:.1f} ({now / need:.2f}x) | {gates / 1e6:.1f} "
              f"| {xw / 1e6:.1f} | {reread / 1e6:.1f} | {seq / 1e6:.1f} ({least / 1e6:.1f}) | {fused} "
              f"| {acc // 1024} KiB (L0C {l0c // 1024} KiB) |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", action="append", help="T,B,I,H,L,D (repeatable)")
    ap.add_argument("--dtype", default="float32", choices=("float32", "float16", "bfloat16"))
    ap.add_argument("--packed", action="store_true", help="variable lengths T, T-1, ... through batchSizes")
    ap.add_argument("--per-step", action="store_true", help="one vector core: the per-step plan for every layer")
    ap.add_argument("--model", action="store_true",
                    help="print the plans' formulas' float32 forward bytes, run nothing")
    ap.add_argument("--bounds", action="store_true",
                    help="print what keeps the float32 forward over the compulsory bytes, run nothing")
    args = ap.parse_args(argv)
    configs = [tuple(int(v) for v in c.split(",")) for c in args.config] if args.config else CONFIGS
    if args.model or args.bounds:
        (model if args.model else bounds)(configs)
        return 0
    import ml_dtypes

    np_dtype = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}[args.dtype]
    ascend_lstm.build()
    extra = {"cores": 1} if args.per_step else {}
    print(f"Full LSTM on the twin ({args.dtype}{', packed' if args.packed else ''}"
          f"{', per-step plan' if args.per_step else ''}), forward with train and backward\n")
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
        x = rng.standard_normal((T, B, I))
        dy = rng.standard_normal((T, B, D * H))
        flags = dict(has_biases=True, num_layers=L, dropout=0.0, train=True, bidirectional=D == 2, **extra)
        if args.packed:
            lengths = np.maximum(T - np.arange(B), 1)
            live = np.arange(T)[:, None, None] < lengths[None, :, None]
            x, dy = (x * live).reshape(T * B, I), (dy * live).reshape(T * B, D * H)
            flags["batch_sizes"] = [int((lengths > t).sum()) for t in range(T)]
        x, dy = x.astype(np_dtype), dy.astype(np_dtype)
        t0 = time.perf_counter()
        fwd = ascend_lstm.lstm_forward(x, [], params, **flags)
        t1 = time.perf_counter()
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
