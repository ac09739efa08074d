"""The DSP library's C, compiled for this host, against the LLVM kernels on the same shapes, same run.

    python benchmarks/dsp_bench.py [--op OP] [--dtype DT] [--shape M=4096,D=1024] [--cflags "-O3 -march=native"]
                                   [--sources generated/dsp]

The committed sources of the ops asked for (generated/dsp/mt7004: it has both dtypes) are built with
the host compiler and the pthreads port; ``_s`` runs on every core of this
machine (core_mask = all of them) and is compared with the LLVM kernel, which
runs on TVM's thread pool over the same cores.  ``_p`` (one core) is listed for
reference.  Times are interleaved medians (fusedgrad.bench.median_times); the
ratio is C time / LLVM time (the issue's reach: at most 1.5).  Every C result
is checked against the LLVM kernel's before it is timed: a mismatch exits 1.
The LSTM layer ops (fp_lstm, fp_lstmgrad: all T steps in one call) run in time order, the forward
with the saved values of training (VARIANT), in float32 only: the LLVM layer kernels they are
checked and timed against are float32 only (hp_lstm, hp_lstmgrad have none to compare with).
"""
from __future__ import annotations

import argparse
import ctypes
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from fusedgrad import api, bench, targets, te_defs
from fusedgrad.lowering import tuning
from fusedgrad.tensors import NP_DTYPES

ROOT = Path(__file__).resolve().parents[1]
CASES = {
    "layer_norm_backward": ({"M": 4096, "D": 1024}, {"M": 8192, "D": 4096}),
    "lstm_cell_backward": ({"N": 64, "H": 1024}, {"N": 1024, "H": 1024}),
    "lstm_layer_forward": ({"T": 50, "B": 32, "H": 256}, {"T": 200, "B": 1, "H": 256}),
    "lstm_layer_backward": ({"T": 50, "B": 32, "H": 256}, {"T": 200, "B": 1, "H": 256}),
}
# the C source (and entry point stem) of each op
STEMS = {"layer_norm_backward": "layernormgrad", "lstm_cell_backward": "lstmcellgrad",
         "lstm_layer_forward": "lstm", "lstm_layer_backward": "lstmgrad"}
# the variant timed, where not the op's first (every gradient present, with bias)
VARIANT = {"lstm_layer_forward": {"train": True, "reverse": False}, "lstm_layer_backward": {"reverse": False}}
LAYER_SAVED = ("c", "i", "f", "g", "o", "tanhc")
PREFIX = {"float32": "fp", "float16": "hp"}
TOL = {"float32": 1e-4, "float16": 2e-2}
# TVM's pool workers spin for 50-100 ms after a call (measured here): a C call sooner than that
# shares the cores with them and runs up to 2x slower
SETTLE_S = 0.15


def build(cc: str, cflags: list[str], src: Path, out: Path,
          stems=("layernormgrad", "lstmcellgrad")) -> ctypes.CDLL:
    """A shared library of the sources ``stems`` (e.g. "lstm" for lstm.c) and the host port."""
    cmd = [cc, "-std=c99", *cflags, "-shared", "-fPIC", f"-I{src}", "-o", str(out),
           *(str(src / f"{stem}.c") for stem in stems), str(src / "fg_dsp_port_host.c"), "-lm", "-lpthread"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)}\n{proc.stderr}")
    return ctypes.CDLL(str(out))


def _ptr(a):
    return ctypes.c_void_p(a.ctypes.data) if a is not None else None


def c_call(lib, op_name: str, dtype: str, arrays: dict, mask: int | None):
    """A closure running the C entry point on ``arrays``, and the outputs it writes (by LLVM name)."""
    p = PREFIX[dtype]
    np_dtype = arrays[next(iter(arrays))].dtype
    I = ctypes.c_int
    if op_name == "layer_norm_backward":
        M, D = arrays["x"].shape
        outs = {"dx": np.empty((M, D), np_dtype), "dgamma": np.empty(D, np_dtype), "dbeta": np.empty(D, np_dtype)}
        args = [_ptr(arrays[k]) for k in ("x", "dy", "var", "mean", "gamma")] + [I(D), I(M), I(M), I(D)]
        args += [_ptr(outs[k]) for k in ("dx", "dgamma", "dbeta")]
        name, status = f"{p}_layernormgrad", lib.fg_layernormgrad_status
    elif op_name in ("lstm_layer_forward", "lstm_layer_backward"):
        args, outs, name, status = _layer_args(lib, op_name, arrays)
    else:
        N, H = arrays["cx"].shape
        outs = {"grad_gates": np.empty((N, 4 * H), np_dtype), "grad_cx": np.empty((N, H), np_dtype),
                "grad_bias": np.empty(4 * H, np_dtype)}
        args = [_ptr(arrays[k]) for k in ("grad_hy", "grad_cy", "cx", "cy", "storage")] + [I(N), I(H), I(1)]
        args += [_ptr(outs[k]) for k in ("grad_gates", "grad_cx", "grad_bias")]
        name, status = f"{p}_lstmcellgrad", lib.fg_lstmcellgrad_status
    fn = getattr(lib, f"{name}_s" if mask is not None else f"{name}_p")
    if mask is not None:
        args.append(I(mask))

    def call():
        fn(*args)
        if status() != 0:
            raise SystemExit(f"{fn.__name__} reported status {status()}")
    return call, outs


def _layer_args(lib, op_name: str, arrays: dict):
    """fp_lstm / fp_lstmgrad's arguments up to the core mask, outputs filled with NaN (so that an element
    the C leaves unwritten fails the check), the entry point's stem and status function."""
    bs = arrays["batch_sizes"]
    T, (B, H) = bs.shape[0], arrays["c0"].shape
    I, nan = ctypes.c_int, np.float32(np.nan)
    sizes = [I(T), I(B), I(H), I(int(VARIANT[op_name]["reverse"]))]
    if op_name == "lstm_layer_forward":
        outs = {k: np.full((T, B, H), nan) for k in ("h", *LAYER_SAVED)}
        outs.update(hy=np.full((B, H), nan), cy=np.full((B, H), nan))
        args = [_ptr(arrays[k]) for k in ("xw", "w_hh", "h0", "c0", "batch_sizes")] + sizes
        args += [_ptr(outs[k]) for k in ("h", *LAYER_SAVED, "hy", "cy")]
        return args, outs, "fp_lstm", lib.fg_lstm_status
    outs = {"dgates": np.full((T, B, 4 * H), nan), "dgates_t": np.full((4 * H, T, B), nan),
            "dh0": np.full((B, H), nan), "dc0": np.full((B, H), nan)}
    ins = ("dy", "w_hh", "c", "c0", "i", "f", "g", "o", "tanhc", "grad_hy", "grad_cy", "batch_sizes")
    args = [_ptr(arrays[k]) for k in ins] + sizes + [_ptr(outs[k]) for k in ("dgates", "dgates_t", "dh0", "dc0")]
    return args, outs, "fp_lstmgrad", lib.fg_lstmgrad_status


def run(ops, dtypes, shapes, cc, cflags, chip="mt7004", out=print, min_time=0.25,
        sources: Path = ROOT / "generated" / "dsp") -> list[dict]:
    cores = os.cpu_count() or 1
    mask = (1 << min(cores, 8)) - 1  # the host port has 8 cores
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        lib = build(cc, cflags, sources / chip, Path(tmp) / "libdsp.so",
                    list(dict.fromkeys(STEMS[op_name] for op_name in ops)))
        out(f"C: {cc} {' '.join(cflags)} ({sources / chip}); _s on core_mask {mask:#x}; "
            f"LLVM kernels on TVM's pool; {cores} cores")
        out("")
        out(HEADER)
        out("|" + "|".join("-" * len(c) for c in HEADER.split("|")[1:-1]) + "|")
        rng = np.random.default_rng(0)
        for op_name in ops:
            op = te_defs.get(op_name)
            for dims in shapes.get(op_name) or CASES[op_name]:
                sample = op.sample(dims, rng)
                for dtype in (d for d in dtypes if d in compared(op_name)):
                    fixed = {t.name: t.dtype for t in op.inputs if t.dtype}  # batch_sizes stays int32
                    arrays = {k: np.ascontiguousarray(v.astype(fixed.get(k) or NP_DTYPES[dtype]))
                              for k, v in sample.items()}
                    variant = VARIANT.get(op_name, op.variants[0])
                    ref = api.run(op_name, arrays, {}, variant)
                    c_s, outs_s = c_call(lib, op_name, dtype, arrays, mask)
                    c_p, outs_p = c_call(lib, op_name, dtype, arrays, None)
                    for call, outs in ((c_s, outs_s), (c_p, outs_p)):
                        call()
                        for k, v in outs.items():
                            r = ref[k].astype(np.float64)
                            err = np.abs(v.astype(np.float64) - r).max() / (np.abs(r).max() + 1)
                            if not err <= TOL[dtype]:
                                raise SystemExit(f"{op_name} {dtype} {dims}: C {k} differs from LLVM by {err:.3g}")
                    llvm_s, s_s, p_s = bench.median_times(
                        [lambda: api.run(op_name, arrays, {}, variant), c_s, c_p], min_time=min_time, settle=SETTLE_S)
                    row = {"op": op_name, "shape": ",".join(f"{k}={v}" for k, v in dims.items()), "dtype": dtype,
                           "llvm_s": llvm_s, "c_s": s_s, "c_p": p_s, "ratio": s_s / llvm_s}
                    rows.append(row)
                    out(format_row(row))
    return rows


def compared(op_name: str) -> tuple[str, ...]:
    """The dtypes of ``op_name`` both the DSP library and the LLVM kernels it is compared with serve."""
    return tuple(d for d in targets.get("dsp").dtypes_for(op_name) if d in targets.get("llvm").dtypes_for(op_name))


HEADER = (f"| {'op':20} | {'shape':15} | {'dtype':8} | {'LLVM ms':>9} | {'C _s ms':>9} | {'_s / LLVM':>9} | "
          f"{'C _p ms':>9} |")


def format_row(r: dict) -> str:
    return (f"| {r['op']:20} | {r['shape']:15} | {r['dtype']:8} | {r['llvm_s'] * 1e3:9.3f} | "
            f"{r['c_s'] * 1e3:9.3f} | {r['ratio']:8.2f}x | {r['c_p'] * 1e3:9.3f} |")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--op", action="append", choices=sorted(CASES), help="only this op (repeatable)")
    p.add_argument("--dtype", action="append", choices=sorted(PREFIX), help="only this dtype (repeatable)")
    p.add_argument("--shape", action="append", default=[],
                   help="a shape for every --op instead of the defaults, e.g. M=4096,D=1024 (repeatable)")
    p.add_argument("--cc", default=os.environ.get("CC") or shutil.which("gcc") or "cc", help="host C compiler")
    p.add_argument("--cflags", default="-O3 -march=native", help="optimisation flags (default: %(default)s)")
    p.add_argument("--min-time", type=float, default=0.25, help="seconds per measurement (default: %(default)s)")
    p.add_argument("--sources", type=Path, default=ROOT / "generated" / "dsp",
                   help="the library's folder, one folder per chip (default: the committed generated/dsp)")
    a = p.parse_args(argv)
    dtypes = a.dtype or list(PREFIX)
    ops = a.op or [o for o in CASES if set(dtypes) & set(compared(o))]
    for op_name in a.op or ():
        lacking = [d for d in a.dtype or () if d not in compared(op_name)]
        if lacking:
            p.error(f"--dtype: {op_name} is {', '.join(compared(op_name))} only, got {', '.join(lacking)}")
    try:
        shapes = {op_name: [tuning.parse_shape(s, op_name) for s in a.shape] for op_name in ops} if a.shape else {}
    except ValueError as e:
        p.error(f"{e} (for {', '.join(ops)})")
    run(ops, dtypes, shapes, a.cc, a.cflags.split(), min_time=a.min_time, sources=a.sources)
    return 0


if __name__ == "__main__":
    sys.exit(main())
