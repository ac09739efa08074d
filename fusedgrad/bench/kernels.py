"""Benchmarks: each kernel against its competitors, in the same run, as ratios.

For every (op, shape, dtype) case: fusedgrad through the public API, torch
(eager formulas for the LSTM cell, ``aten.native_layer_norm_backward`` for
LayerNorm) and numpy (the op's reference formulas evaluated in the input
dtype), plus the machine's copy bandwidth (numpy copy of a 64 MiB array).
Each competitor runs in its own process (``worker``: one child per
competitor and round times every case in turn), in rounds that alternate
them, with the same thread count; the tables give the
median over the rounds, effective GB/s (the op's minimum traffic / time) and
GFLOP/s, % of copy bandwidth, and speed-up ratios.  ``--plot FILE.png`` draws
them as a roofline (``plot``).  Timing is never asserted on.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import sys

import numpy as np

from .. import api, te_defs
from ..tensors import NP_DTYPES
from ..timing import median_times  # noqa: F401 -- benchmarks/dsp_bench.py times in one process through it
from .worker import Competitor, alternate, copy_gbs, describe_machine, parts_of, probe

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

# floating-point operations of one call, counted from the op's reference formulas (an add, a
# multiply or a transcendental is one): the roofline's arithmetic intensity is FLOPS / nbytes.
# The packing ops only move data and have none.
FLOPS = {
    "lstm_cell_backward": lambda d: 27 * d["N"] * d["H"],
    "layer_norm_backward": lambda d: 13 * d["M"] * d["D"],
    "lstm_cell_forward": lambda d: 9 * d["N"] * d["H"],
    "lstm_step_backward": lambda d: 23 * d["N"] * d["H"],
    "column_sum": lambda d: d["K"] * d["N"],
    "matmul_packed": lambda d: 2 * d["M"] * 32 * d["Nb"] * d["K"],
    "matmul": lambda d: 2 * d["M"] * d["N"] * d["K"],  # the tensor-core GEMM (CUDA only: gpu_check times it)
    "pack_b": lambda d: 0,
    "pack_bt": lambda d: 0,
    # the persistent layer kernels (CUDA's are timed by gpu_check): every step's h·W_hhᵀ (forward) or
    # dgates·W_hh (backward) over all B rows, plus the cell's formulas, as the cell ops count them
    "lstm_layer_forward": lambda d: d["T"] * d["B"] * (8 * d["H"] * d["H"] + 9 * d["H"]),
    "lstm_layer_backward": lambda d: d["T"] * d["B"] * (8 * d["H"] * d["H"] + 23 * d["H"]),
}


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
    "matmul": lambda t: sys.modules["torch"].mm(t["a"], t["b"]),
    "pack_b": lambda t: t["b"].reshape(t["b"].shape[0], -1, 32).permute(1, 0, 2).contiguous(),
    "pack_bt": lambda t: t["w"].T.reshape(t["w"].shape[1], -1, 32).permute(1, 0, 2).contiguous(),
}


def _fusedgrad_call(op_name: str, tensors: dict):
    op = te_defs.get(op_name)
    variant = op.variants[0]
    return lambda: api.run(op_name, tensors, {}, variant)


def make_call(op: str, dims: dict, dtype: str, competitor: str):
    """A child's callable: ``competitor`` ("fusedgrad", "torch" or "numpy") on the op's sample
    inputs of ``dims`` in ``dtype`` (fusedgrad on numpy arrays, torch on tensors sharing them)."""
    op_def = te_defs.get(op)
    sample = op_def.sample(dims, np.random.default_rng(0))
    arrays = {k: v.astype(NP_DTYPES[dtype]) for k, v in sample.items()}
    if competitor == "fusedgrad":
        return _fusedgrad_call(op, arrays)
    if competitor == "torch":
        import torch

        tensors = {k: torch.from_numpy(v) for k, v in arrays.items()}
        return lambda: TORCH[op](tensors)
    if competitor == "numpy":
        return lambda: op_def.reference(**arrays)
    raise ValueError(f"competitor: expected fusedgrad, torch or numpy, got {competitor!r}")


def part(competitor: str, case) -> str:
    """The name under which ``competitor``'s time of ``case`` (op, dims, dtype) is reported."""
    op, dims, dtype = case
    return f"{competitor}|{op}|{','.join(f'{k}={v}' for k, v in dims.items())}|{dtype}"


def make_calls(cases: list, competitor: str) -> dict:
    """A child's callables: ``competitor`` on every case (op, dims, dtype), keyed by ``part``; a case
    it cannot make (e.g. a dtype torch lacks) is that case's error."""
    by_part = {part(competitor, c): c for c in cases}
    return parts_of(lambda key: make_call(*by_part[key], competitor), by_part)


def competitors(cases: list, with_torch: bool) -> list[Competitor]:
    """The competitors of a run: one child each per round, timing every case in turn."""
    names = ("fusedgrad", "torch", "numpy") if with_torch else ("fusedgrad", "numpy")
    return [Competitor(n, "fusedgrad.bench.kernels:make_calls", {"cases": [list(c) for c in cases], "competitor": n},
                       repeat=3 if n == "numpy" else None, parts=tuple(part(n, c) for c in cases)) for n in names]


def measure_copy(rounds: int, threads: int) -> tuple[float | None, str | None]:
    """(GB/s, None) of the copy probe, median of ``rounds`` children, or (None, its error)."""
    res = alternate([probe("copy_probe")], rounds, threads, min_time=0.25, repeat=7)["copy_probe"]
    return (copy_gbs(res.seconds), None) if res.error is None else (None, res.error)


def run(ops=None, dtypes=DTYPES, out=print, rounds: int = 3, threads: int | None = None,
        min_time: float = 0.25, shapes=None) -> list[dict]:
    """Time every case (``shapes``: {op: [dims]} in place of CASES), print the table, return its rows."""
    threads = threads or os.cpu_count() or 1
    with_torch = importlib.util.find_spec("torch") is not None
    bw, bw_error = measure_copy(rounds, threads)
    for line in describe_machine(threads, rounds):
        out(line)
    out("copy bandwidth (numpy copy of 64 MiB, read + write counted): "
        + (f"{bw:.1f} GB/s" if bw else f"failed: {bw_error}")
        + ("" if with_torch else "; torch is not installed (pip install -e '.[test]'): numpy only"))
    out("")
    out(HEADER)
    out("|" + "|".join("-" * len(c) for c in HEADER.split("|")[1:-1]) + "|")
    cases = [(op_name, dict(dims), dtype) for op_name in ops or CASES
             for dims in (shapes or {}).get(op_name) or CASES[op_name]
             for dtype in dtypes if dtype in te_defs.get(op_name).dtypes]
    sides = competitors(cases, with_torch)
    timed = alternate(sides, rounds, threads, min_time, 7)
    rows = []
    for case in cases:
        op_name, dims, dtype = case
        op = te_defs.get(op_name)
        got = {c.name: timed[part(c.name, case)] for c in sides}
        itemsize = np.dtype(NP_DTYPES[dtype]).itemsize
        row = {"op": op_name, "shape": ",".join(f"{k}={v}" for k, v in dims.items()), "dtype": dtype,
               "nbytes": op.nbytes(dims, itemsize), "flops": FLOPS[op_name](dims), "copy_GB/s": bw,
               "errors": {n: r.error for n, r in got.items() if r.error is not None}}
        for name, res in got.items():
            if res.seconds is not None:
                row[f"{name}_s"] = res.seconds
        if "fusedgrad_s" in row:
            row["GB/s"] = row["nbytes"] / row["fusedgrad_s"] / 1e9
            row["GFLOP/s"] = row["flops"] / row["fusedgrad_s"] / 1e9
            if bw:
                row["%copy"] = 100 * row["GB/s"] / bw
        rows.append(row)
        out(format_row(row))
        for name, error in row["errors"].items():
            out(f"|   {name} failed on {op_name} {row['shape']} {dtype}: {error}")
    return rows


HEADER = (f"| {'op':20} | {'shape':15} | {'dtype':8} | {'fusedgrad ms':>12} | {'GB/s':>6} | {'GFLOP/s':>7} | "
          f"{'% copy':>6} | {'torch ms':>9} | {'vs torch':>8} | {'numpy ms':>9} | {'vs numpy':>8} |")


def _ms(r: dict, side: str, width: int) -> str:
    if f"{side}_s" in r:
        return f"{r[f'{side}_s'] * 1e3:{width}.3f}"
    return f"{'failed' if side in r.get('errors', {}) else '-':>{width}}"


def _vs(r: dict, side: str) -> str:
    if f"{side}_s" in r and "fusedgrad_s" in r:
        return f"{r[f'{side}_s'] / r['fusedgrad_s']:7.2f}x"
    return f"{'-':>8}"


def _num(r: dict, key: str, width: int, fmt: str) -> str:
    return f"{r[key]:{width}{fmt}}" if key in r else f"{'-':>{width}}"


def format_row(r: dict) -> str:
    return (f"| {r['op']:20} | {r['shape']:15} | {r['dtype']:8} | {_ms(r, 'fusedgrad', 12)} | "
            f"{_num(r, 'GB/s', 6, '.1f')} | {_num(r, 'GFLOP/s', 7, '.2f')} | {_num(r, '%copy', 6, '.0f')} | "
            f"{_ms(r, 'torch', 9)} | {_vs(r, 'torch')} | {_ms(r, 'numpy', 9)} | {_vs(r, 'numpy')} |")


def parse_shape(text: str) -> dict:
    """--shape "M=64,D=33" -> {"M": 64, "D": 33} (positive sizes)."""
    try:
        dims = {k.strip(): int(v) for k, v in (part.split("=") for part in text.split(","))}
    except ValueError:
        dims = {}
    if not dims or min(dims.values()) < 1:
        raise ValueError(f"--shape: expected NAME=SIZE,... with positive sizes, got {text!r}")
    return dims


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="fusedgrad bench", description=__doc__.splitlines()[0])
    p.add_argument("--op", action="append", choices=sorted(CASES), help="benchmark only this op (repeatable)")
    p.add_argument("--dtype", action="append", choices=["float32", "float16", "bfloat16"],
                   help="benchmark only this dtype (repeatable; default float32 and float16)")
    p.add_argument("--shape", metavar="NAME=SIZE,...",
                   help="with one --op: benchmark it at this shape only (e.g. M=64,D=33)")
    p.add_argument("--rounds", type=int, default=3,
                   help="alternating rounds, each competitor in its own process per round (default 3)")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                   help="threads of every competitor (TVM, torch, OpenMP, MKL; default: all cores)")
    p.add_argument("--min-time", type=float, default=0.25, metavar="SECONDS",
                   help="per-op tables: seconds of calls per competitor, case and round (default 0.25)")
    p.add_argument("--plot", metavar="FILE.png",
                   help="draw the per-op table as a roofline (needs matplotlib: pip install 'fusedgrad[plot]')")
    p.add_argument("--lstm", action="store_true", help="only the full-LSTM forward+backward benchmark")
    p.add_argument("--lstm-config", action="append", metavar="T,B,I,H,L,D",
                   help="full-LSTM configuration (repeatable; default: the three of the docs)")
    p.add_argument("--lstm-min-time", type=float, default=1.0, metavar="SECONDS",
                   help="full LSTM: seconds of calls per competitor, configuration and round (default 1.0)")
    p.add_argument("--train-threads", metavar="N,N", default="1,all",
                   help="full LSTM: the training-step table's thread counts ('all': every core; default 1,all)")
    p.add_argument("--busy", action="store_true",
                   help="full LSTM: time each training step again beside one `nice -n 19` busy process")
    args = p.parse_args(argv)
    from .. import paths
    from . import lstm, plot

    def refuse(message: str):  # one line on stderr, exit status 2
        p.exit(2, f"{p.prog}: error: {message}\n")

    # every bad option is refused here, before any timing runs
    if args.rounds < 1 or args.threads < 1:
        refuse(f"--rounds and --threads: expected positive counts, got {args.rounds} and {args.threads}")
    shapes = None
    if args.shape is not None:
        if not args.op or len(args.op) != 1:
            refuse(f"--shape: name exactly one --op, got {args.op or 'none'}")
        try:
            shapes = {args.op[0]: [parse_shape(args.shape)]}
        except ValueError as e:
            refuse(str(e))
    if args.plot is not None:
        if args.lstm:
            refuse("--plot draws the per-op table, which --lstm leaves out")
        try:
            paths.check_file("--plot", args.plot)
            plot.require_matplotlib()
        except ValueError as e:
            refuse(str(e))
        except ImportError as e:
            refuse(f"--plot: {e}")
    configs = None
    if args.lstm or not args.op:
        try:
            configs = tuple(lstm.parse_config(c) for c in args.lstm_config or ()) or lstm.CONFIGS
        except ValueError as e:
            refuse(str(e))

    try:
        train_threads = tuple(None if t == "all" else int(t) for t in args.train_threads.split(","))
    except ValueError:
        train_threads = ()
    if not train_threads or any(t is not None and t < 1 for t in train_threads):
        refuse(f"--train-threads: expected positive counts or 'all', comma-separated, got {args.train_threads!r}")

    say = lambda line: print(line, flush=True)  # noqa: E731
    if not args.lstm:
        rows = run(args.op, tuple(args.dtype or DTYPES), out=say, rounds=args.rounds, threads=args.threads,
                   min_time=args.min_time, shapes=shapes)
        say("")
        if args.plot is not None:
            plot.roofline(rows, args.plot, threads=args.threads, rounds=args.rounds, out=say)
            say("")
    if configs is not None:
        lstm_dtypes = tuple(args.dtype or ("float32",))
        lstm.run(configs, lstm_dtypes, out=say, min_time=args.lstm_min_time, rounds=args.rounds,
                       threads=args.threads)
        say("")
        lstm.run_training(configs, lstm_dtypes, out=say, min_time=args.lstm_min_time, rounds=args.rounds,
                          threads=tuple(args.threads if t is None else t for t in train_threads), busy=args.busy)
    return 0
