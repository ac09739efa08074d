"""fusedgrad's float32 GEMM kernel (matmul_packed) against torch, at the full LSTM's shapes.

    python benchmarks/gemm_bench.py [--threads N] [--rounds N] [--repeat R] [--only SUBSTRING]

For each case: fusedgrad through the public API (``fusedgrad.api.run``,
per-call overhead and output allocation included; B given as the column
panels the LSTM packs once per call, its main or few_rows entry as the LSTM
picks them) and torch (``torch.mm``, ``torch.addmm`` where the variant adds
a bias or an addend, on B [K, N] row-major; ``torch.sum`` for column_sum),
each in its own process (``fusedgrad.bench.worker``: one child per side and
round times every case in turn) with the same threads, in alternating rounds
(medians over them; fusedgrad's result is checked against the float64
reference in its process first).  Prints GFLOP/s (GB/s for
column_sum) and fusedgrad's rate as a fraction of torch's, and which CPU it
ran on and built for.  Another ISA class on this
machine: ``FUSEDGRAD_MCPU=haswell ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2
MKL_ENABLE_INSTRUCTIONS=AVX2`` (both sides restricted to AVX2).
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np


def _mm(bias=False, addend=False, few_rows=False):
    return {"has_bias": bias, "has_addend": addend, "few_rows": few_rows}


CASES = [
    # op, variant, dims (N = 32·Nb)
    ("matmul_packed", _mm(addend=True), {"M": 32, "Nb": 32, "K": 256}),  # step fwd B=32 H=256: h·W_hhᵀ + xw_t
    ("matmul_packed", _mm(), {"M": 32, "Nb": 8, "K": 1024}),  # step bwd: dgates·W_hh
    ("matmul_packed", _mm(bias=True), {"M": 1600, "Nb": 32, "K": 256}),  # x·W_ihᵀ + b, T·B = 1600
    ("matmul_packed", _mm(), {"M": 1600, "Nb": 8, "K": 1024}),  # dx
    ("matmul_packed", _mm(), {"M": 1024, "Nb": 8, "K": 1600}),  # dW_ih = dgatesᵀ·x
    ("matmul_packed", _mm(), {"M": 64, "Nb": 64, "K": 512}),  # step fwd B=64 H=512
    ("matmul_packed", _mm(addend=True, few_rows=True), {"M": 13, "Nb": 32, "K": 256}),  # an odd batch's last rows
    ("column_sum", {}, {"K": 1600, "N": 1024}),
]


def torch_fn(op, variant, t):
    import torch

    if op == "column_sum":
        return lambda: torch.sum(t["a"], 0)
    a, b = t["a"], t["b"]
    add = None
    if variant.get("has_bias") and variant.get("has_addend"):
        return lambda: torch.addmm(t["bias"], a, b).add_(t["addend"])
    if variant.get("has_bias"):
        add = t["bias"]
    elif variant.get("has_addend"):
        add = t["addend"]
    if add is not None:
        return lambda: torch.addmm(add, a, b)
    return lambda: torch.mm(a, b)


def make(case: int, competitor: str):
    """A child's callable: ``competitor`` ("fusedgrad" or "torch") on CASES[case]; fusedgrad's output
    is checked against the op's float64 reference first (an AssertionError names the case)."""
    from fusedgrad import te_defs
    from fusedgrad.te_defs.matmul_packed import unpack

    op_name, variant, dims = CASES[case]
    op = te_defs.get(op_name)
    smp = op.sample(dims, np.random.default_rng(0))
    arrays = {s.name: np.ascontiguousarray(smp[s.name], dtype=np.float32)
              for s in op.inputs if op.present(s, variant)}
    if competitor == "torch":
        import torch

        t = {k: torch.from_numpy(v) for k, v in arrays.items()}
        if "bp" in t:
            t["b"] = torch.from_numpy(np.ascontiguousarray(unpack(arrays["bp"])))
        return torch_fn(op_name, variant, t)
    from fusedgrad import api

    fg = lambda: api.run(op_name, arrays, {}, variant)  # noqa: E731
    got = np.asarray(fg()[op.outputs[0].name], dtype=np.float64)
    ref = op.reference(**{k: v.astype(np.float64) for k, v in arrays.items()}, **variant)[op.outputs[0].name]
    assert np.allclose(got, ref, rtol=1e-4, atol=1e-3 * max(1.0, float(np.abs(ref).max()))), \
        f"{op_name} {variant} {dims}: fusedgrad differs from the float64 reference"
    return fg


def make_all(cases: list, competitor: str) -> dict:
    """A child's callables: ``competitor`` on each of CASES[cases], keyed "<competitor>|<case>"."""
    from fusedgrad.bench.worker import parts_of

    by_part = {f"{competitor}|{c}": c for c in cases}
    return parts_of(lambda key: make(by_part[key], competitor), by_part)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                   help="threads of both sides (torch.set_num_threads, TVM_NUM_THREADS, OMP/MKL)")
    p.add_argument("--rounds", type=int, default=3, help="alternating rounds, each side in its own process")
    p.add_argument("--repeat", type=int, default=9, help="timed batches per side and round (median)")
    p.add_argument("--min-time", type=float, default=0.4, help="seconds per case, side and round")
    p.add_argument("--only", default="", help="run the cases whose label contains this")
    args = p.parse_args(argv)

    from fusedgrad import te_defs
    from fusedgrad.bench.worker import Competitor, alternate, describe_machine

    for line in describe_machine(args.threads, args.rounds):
        print(line)
    print(f"torch's ISA: ATEN_CPU_CAPABILITY={os.environ.get('ATEN_CPU_CAPABILITY', 'unset')}, "
          f"ONEDNN_MAX_CPU_ISA={os.environ.get('ONEDNN_MAX_CPU_ISA', 'unset')}, "
          f"MKL_ENABLE_INSTRUCTIONS={os.environ.get('MKL_ENABLE_INSTRUCTIONS', 'unset')}")
    head = f"{'op':13} {'variant':22} {'shape':22} {'fusedgrad':>11} {'torch':>11} {'fg/torch':>8}"
    print(head)
    print("-" * len(head))
    factory = f"{Path(__file__).resolve()}:make_all"
    cases = [i for i, (op_name, variant, dims) in enumerate(CASES) if args.only in f"{op_name} {variant} {dims}"]
    sides = [Competitor(n, factory, {"cases": cases, "competitor": n}, parts=tuple(f"{n}|{c}" for c in cases))
             for n in ("fusedgrad", "torch")]
    timed = alternate(sides, args.rounds, args.threads, args.min_time, args.repeat)
    for case in cases:
        op_name, variant, dims = CASES[case]
        got = {n: timed[f"{n}|{case}"] for n in ("fusedgrad", "torch")}
        if op_name == "column_sum":
            work, unit = te_defs.get(op_name).nbytes(dims, 4), "GB/s"
        else:
            work, unit = 2 * dims["M"] * 32 * dims["Nb"] * dims["K"], "GF/s"
        rate = {n: (f"{work / r.seconds / 1e9:6.1f} {unit}" if r.seconds else f"{'failed':>11}")
                for n, r in got.items()}
        t_fg, t_torch = got["fusedgrad"].seconds, got["torch"].seconds
        ratio = f"{t_torch / t_fg:8.2f}" if t_fg and t_torch else f"{'-':>8}"
        var = ",".join(k.removeprefix("has_") for k, v in variant.items() if v) or "-"
        shape = " ".join(f"{k}={v}" for k, v in dims.items())
        print(f"{op_name:13} {var:22} {shape:22} {rate['fusedgrad']} {rate['torch']} {ratio}", flush=True)
        for n, r in got.items():
            if r.error:
                print(f"    {n} failed: {r.error}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
