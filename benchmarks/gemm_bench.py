"""fusedgrad's float32 GEMM kernels against torch, at the full LSTM's shapes.

    python benchmarks/gemm_bench.py [--threads N] [--repeat R] [--only SUBSTRING]

For each case: fusedgrad through the public API (``fusedgrad.api.run``,
per-call overhead and output allocation included) and torch (``torch.mm``,
``torch.addmm`` where the variant adds a bias or an addend, ``torch.sum`` for
column_sum), timed in interleaved rounds (medians; the machine is shared and
noisy).  Prints GFLOP/s (GB/s for column_sum) and fusedgrad's rate as a
fraction of torch's.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np


CASES = [
    # op, variant, dims
    ("matmul", {"has_bias": False, "has_addend": True}, {"M": 32, "K": 256, "N": 1024}),
    ("matmul", {"has_bias": False, "has_addend": False}, {"M": 32, "K": 256, "N": 1024}),
    ("matmul", {"has_bias": False, "has_addend": False}, {"M": 32, "K": 1024, "N": 256}),
    ("matmul", {"has_bias": True, "has_addend": False}, {"M": 1600, "K": 256, "N": 1024}),
    ("matmul", {"has_bias": False, "has_addend": False}, {"M": 1600, "K": 1024, "N": 256}),
    ("matmul", {"has_bias": False, "has_addend": False}, {"M": 64, "K": 512, "N": 2048}),
    ("matmul_tn", {"has_addend": False}, {"M": 1024, "K": 1600, "N": 256}),
    ("matmul_tn", {"has_addend": True}, {"M": 1024, "K": 1600, "N": 256}),
    ("matmul_tn", {"has_addend": False}, {"M": 2048, "K": 6400, "N": 512}),
    ("column_sum", {}, {"K": 1600, "N": 1024}),
]


def torch_fn(op, variant, t):
    import torch

    if op == "column_sum":
        return lambda: torch.sum(t["a"], 0)
    a = t["a"].t() if op == "matmul_tn" else t["a"]
    add = None
    if variant.get("has_bias") and variant.get("has_addend"):
        return lambda: torch.addmm(t["bias"], a, t["b"]).add_(t["addend"])
    if variant.get("has_bias"):
        add = t["bias"]
    elif variant.get("has_addend"):
        add = t["addend"]
    if add is not None:
        return lambda: torch.addmm(add, a, t["b"])
    return lambda: torch.mm(a, t["b"])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="torch threads (TVM: TVM_NUM_THREADS)")
    p.add_argument("--repeat", type=int, default=9, help="interleaved rounds per case")
    p.add_argument("--min-time", type=float, default=0.4, help="seconds per case and competitor")
    p.add_argument("--only", default="", help="run the cases whose label contains this")
    args = p.parse_args(argv)

    import torch

    from fusedgrad import api, te_defs
    from fusedgrad.bench import median_times

    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    print(f"torch {torch.__version__}, {args.threads} threads, TVM_NUM_THREADS={os.environ.get('TVM_NUM_THREADS', 'unset')}")
    head = f"{'op':10} {'variant':22} {'shape':22} {'fusedgrad':>11} {'torch':>11} {'fg/torch':>8}"
    print(head)
    print("-" * len(head))
    for op_name, variant, dims in CASES:
        label = f"{op_name} {variant} {dims}"
        if args.only and args.only not in label:
            continue
        op = te_defs.get(op_name)
        smp = op.sample(dims, rng)
        t = {s.name: torch.from_numpy(np.ascontiguousarray(smp[s.name], dtype=np.float32))
             for s in op.inputs if op.present(s, variant)}
        fg, ref = (lambda: api.run(op_name, t, {}, variant)), torch_fn(op_name, variant, t)
        got = fg()[op.outputs[0].name]
        assert torch.allclose(got, ref(), rtol=1e-4, atol=1e-3 * max(1.0, float(ref().abs().max()))), label
        t_fg, t_torch = median_times([fg, ref], min_time=args.min_time, repeat=args.repeat)
        if op_name == "column_sum":
            work, unit = op.nbytes(dims, 4), "GB/s"
        else:
            work, unit = 2 * dims["M"] * dims["N"] * dims["K"], "GF/s"
        var = ",".join(k.removeprefix("has_") for k, v in variant.items() if v) or "-"
        shape = " ".join(f"{k}={v}" for k, v in dims.items())
        print(f"{op_name:10} {var:22} {shape:22} {work / t_fg / 1e9:6.1f} {unit} {work / t_torch / 1e9:6.1f} {unit} "
              f"{t_torch / t_fg:8.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
