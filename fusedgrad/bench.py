"""Benchmarks: each kernel against its competitors, in the same run, as ratios.

For every (op, shape, dtype) case: fusedgrad through the public API, torch
(eager formulas for the LSTM cell, ``aten.native_layer_norm_backward`` for
LayerNorm) and numpy (the op's reference formulas evaluated in the input
dtype), plus the machine's copy bandwidth (numpy copy of a 64 MiB array).
Reports medians, effective GB/s (the op's minimum traffic / time), % of copy
bandwidth, and speed-up ratios.  Timing is never asserted on.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys

import numpy as np

from . import api, te_defs
from .tensors import NP_DTYPES
from .timing import copy_bandwidth, median_time, median_times, torch_or_none

CASES = {
    "lstm_cell_backward": ({"N": 64, "H": 1024}, {"N": 1024, "H": 1024}),
    "layer_norm_backward": ({"M": 4096, "D": 1024}, {"M": 8192, "D": 4096}),
    # the full LSTM's kernels (float32 only), at its benchmark's per-step and whole-sequence sizes
    "lstm_cell_forward": ({"N": 32, "H": 256}, {"N": 1024, "H": 1024}),
    "lstm_step_backward": ({"N": 32, "H": 256}, {"N": 1024, "H": 1024}),
    "column_sum": ({"K": 1600, "N": 1024},),
    "matmul_packed": ({"M": 32, "Nb": 32, "K": 256}, {"M": 1600, "Nb": 32, "K": 256}),
    "pack_b": ({"K": 1600, "Nb": 8},),
    "pack_bt": ({"K": 256, "Nb": 32},),
}
DTYPES = ("float32", "float16")


def _torch_cell(t):
    torch = sys.modules["torch"]
    H = t["cx"].shape[1]
    i, f, g, o = (t["storage"][:, k * H:(k + 1) * H] for k in range(4))
    tc = torch.tanh(t["cy"])
    gc = t["grad_hy"] * o * (1 - tc * tc) + t["grad_cy"]
    gates = torch.cat([gc * g * i * (1 - i), gc * t["cx"] * f * (1 - f), gc * i * (1 - g * g),
                       t["grad_hy"] * tc * o * (1 - o)], dim=1)
    return gates, gc * f, gates.sum(0)


def _torch_ln(t):
    torch = sys.modules["torch"]
    D = t["x"].shape[1]
    rstd = torch.rsqrt(t["var"] + 1e-5)
    return torch.ops.aten.native_layer_norm_backward(
        t["dy"], t["x"], [D], t["mean"][:, None], rstd[:, None], t["gamma"], t["gamma"], [True, True, True])


def _torch_cell_forward(t):
    torch = sys.modules["torch"]
    i, f, g, o = t["gates"].chunk(4, 1)
    i, f, g, o = torch.sigmoid(i), torch.sigmoid(f), torch.tanh(g), torch.sigmoid(o)
    cy = f * t["cx"] + i * g
    tc = torch.tanh(cy)
    return o * tc, cy, i, f, g, o, tc


def _torch_step_backward(t):
    torch = sys.modules["torch"]
    i, f, g, o, tc = (t[k] for k in ("i", "f", "g", "o", "tanhc"))
    dh = t["dh"] + t["dy"]
    dc = t["dc"] + dh * o * (1 - tc * tc)
    gates = torch.cat([dc * g * i * (1 - i), dc * t["cx"] * f * (1 - f), dc * i * (1 - g * g),
                       dh * tc * o * (1 - o)], dim=1)
    return gates, dc * f, gates.T.contiguous()


def _torch_packed(t):
    """torch has no panel layout: unpack B (a copy) and run torch.mm."""
    bp = t["bp"]
    return sys.modules["torch"].mm(t["a"], bp.permute(1, 0, 2).reshape(bp.shape[1], -1))


# competitors by op: torch eager (on torch tensors), numpy reference formulas (in the input dtype)
TORCH = {
    "lstm_cell_backward": _torch_cell,
    "layer_norm_backward": _torch_ln,
    "lstm_cell_forward": _torch_cell_forward,
    "lstm_step_backward": _torch_step_backward,
    "column_sum": lambda t: t["a"].sum(0),
    "matmul_packed": _torch_packed,
    "pack_b": lambda t: t["b"].reshape(t["b"].shape[0], -1, 32).permute(1, 0, 2).contiguous(),
    "pack_bt": lambda t: t["w"].T.reshape(t["w"].shape[1], -1, 32).permute(1, 0, 2).contiguous(),
}


def _fusedgrad_call(op_name: str, tensors: dict):
    op = te_defs.get(op_name)
    variant = op.variants[0]
    return lambda: api.run(op_name, tensors, {}, variant)


def run(ops=None, dtypes=DTYPES, out=print) -> list[dict]:
    torch = torch_or_none()
    rng = np.random.default_rng(0)
    bw = copy_bandwidth()
    out(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
        f"numpy copy bandwidth {bw:.1f} GB/s; torch {getattr(torch, '__version__', 'not installed')}")
    out("")
    out(HEADER)
    out("|" + "|".join("-" * len(c) for c in HEADER.split("|")[1:-1]) + "|")
    rows = []
    for op_name in ops or CASES:
        op = te_defs.get(op_name)
        for dims in CASES[op_name]:
            sample = op.sample(dims, rng)
            for dtype in (d for d in dtypes if d in op.dtypes):
                arrays = {k: v.astype(NP_DTYPES[dtype]) for k, v in sample.items()}
                nbytes = op.nbytes(dims, np.dtype(NP_DTYPES[dtype]).itemsize)
                row = {"op": op_name, "shape": ",".join(f"{k}={v}" for k, v in dims.items()), "dtype": dtype}
                if torch is not None:
                    tensors = {k: torch.from_numpy(v) for k, v in arrays.items()}
                    row["fusedgrad_s"], row["torch_s"] = median_times(
                        [_fusedgrad_call(op_name, tensors), lambda: TORCH[op_name](tensors)])
                else:
                    row["fusedgrad_s"] = median_time(_fusedgrad_call(op_name, arrays))
                row["numpy_s"] = median_time(lambda: op.reference(**arrays), repeat=3)
                row["GB/s"] = nbytes / row["fusedgrad_s"] / 1e9
                row["%copy"] = 100 * row["GB/s"] / bw
                rows.append(row)
                out(format_row(row))
    return rows


HEADER = f"| {'op':20} | {'shape':15} | {'dtype':8} | {'fusedgrad ms':>12} | {'GB/s':>6} | {'% copy':>6} | {'torch ms':>9} | {'vs torch':>8} | {'numpy ms':>9} | {'vs numpy':>8} |"


def format_row(r: dict) -> str:
    torch_ms = f"{r['torch_s'] * 1e3:9.3f}" if "torch_s" in r else f"{'-':>9}"
    vs_torch = f"{r['torch_s'] / r['fusedgrad_s']:7.2f}x" if "torch_s" in r else f"{'-':>8}"
    return (f"| {r['op']:20} | {r['shape']:15} | {r['dtype']:8} | {r['fusedgrad_s'] * 1e3:12.3f} | "
            f"{r['GB/s']:6.1f} | {r['%copy']:6.0f} | {torch_ms} | {vs_torch} | "
            f"{r['numpy_s'] * 1e3:9.3f} | {r['numpy_s'] / r['fusedgrad_s']:7.2f}x |")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="fusedgrad bench", description=__doc__.splitlines()[0])
    p.add_argument("--op", action="append", choices=sorted(CASES), help="benchmark only this op (repeatable)")
    p.add_argument("--dtype", action="append", choices=["float32", "float16", "bfloat16"],
                   help="benchmark only this dtype (repeatable; default float32 and float16)")
    p.add_argument("--lstm", action="store_true", help="only the full-LSTM forward+backward benchmark")
    p.add_argument("--lstm-config", action="append", metavar="T,B,I,H,L,D",
                   help="full-LSTM configuration (repeatable; default: the three of the docs)")
    p.add_argument("--lstm-min-time", type=float, default=1.0, metavar="SECONDS",
                   help="full LSTM: seconds of calls per competitor and configuration (default 1.0)")
    args = p.parse_args(argv)
    from . import bench_lstm

    say = lambda line: print(line, flush=True)  # noqa: E731
    if not args.lstm:
        run(args.op, tuple(args.dtype or DTYPES), out=say)
        say("")
    if args.lstm or not args.op:
        configs = tuple(bench_lstm.parse_config(c) for c in args.lstm_config or ()) or bench_lstm.CONFIGS
        bench_lstm.run(configs, tuple(args.dtype or ("float32",)), out=say, min_time=args.lstm_min_time)
        say("")
        bench_lstm.run_training(configs, tuple(args.dtype or ("float32",)), out=say, min_time=args.lstm_min_time)
    return 0
