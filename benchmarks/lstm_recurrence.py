"""The full LSTM on the CPU: the layer kernels (one launch per layer and direction) against
torch.nn.LSTM (oneDNN), each competitor in its own process, alternating rounds, medians over the
rounds, with a thread count set for both (``fusedgrad bench --lstm`` times the defaults and a
training step).  Timing is never asserted on.

    python benchmarks/lstm_recurrence.py [--threads N] [--rounds R] [T,B,I,H,L,D ...]

Prints one row per configuration: fwd+bwd (lstm_forward(train=True) + lstm_backward, or
autograd) and inference (train=False / no_grad) for each competitor, and layer / torch.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

COMPETITORS = ("layer", "torch")
CONFIGS = ("200,1,256,256,1,1", "50,32,256,256,1,1", "50,32,256,256,2,2", "100,64,512,512,1,1")


def child(competitor: str, config: str, seconds: float) -> dict:
    """Time ``competitor`` at ``config`` in this process: {"both": ms, "inf": ms} (medians)."""
    import numpy as np
    import torch

    T, B, I, H, L, D = (int(v) for v in config.split(","))
    torch.set_num_threads(int(os.environ.get("TVM_NUM_THREADS", "1")))
    torch.manual_seed(0)
    m = torch.nn.LSTM(I, H, L, bidirectional=D == 2)
    params = [p.detach() for p in m._flat_weights]
    x, gy = torch.randn(T, B, I), torch.randn(T, B, D * H)
    h0, c0 = torch.randn(L * D, B, H), torch.randn(L * D, B, H)

    def median_ms(f) -> float:
        f()
        times, end = [], time.perf_counter() + seconds
        while time.perf_counter() < end or len(times) < 5:
            t0 = time.perf_counter()
            f()
            times.append(time.perf_counter() - t0)
        return 1e3 * statistics.median(times)

    if competitor == "torch":
        xr = x.clone().requires_grad_()

        def both():
            y, _ = m(xr, (h0, c0))
            y.backward(gy)

        def inference():
            with torch.no_grad():
                m(x, (h0, c0))
    else:
        import fusedgrad

        xn, h0n, c0n, gyn = x.numpy(), h0.numpy(), c0.numpy(), gy.numpy()
        pn = [p.numpy() for p in params]

        def both():
            out = fusedgrad.lstm_forward(xn, [h0n, c0n], pn, True, L, 0.0, True, D == 2)
            fusedgrad.lstm_backward(gyn, None, None, xn, [h0n, c0n], pn, *out[3:], True, L, 0.0, True, D == 2)

        def inference():
            fusedgrad.lstm_forward(xn, [h0n, c0n], pn, True, L, 0.0, False, D == 2)
    return {"both": median_ms(both), "inf": median_ms(inference)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("configs", nargs="*", default=CONFIGS, metavar="T,B,I,H,L,D")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=3.0, help="timed calls per side and child, at least")
    p.add_argument("--child", nargs=2, metavar=("COMPETITOR", "CONFIG"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(*args.child, args.seconds)))
        return 0
    env = {**os.environ, **{k: str(args.threads) for k in ("TVM_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}}
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
               platform.processor()) if os.path.exists("/proc/cpuinfo") else platform.processor()
    print(f"{cpu}, {args.threads} thread(s); each competitor in its own process, median of {args.rounds} "
          "alternating rounds")
    print("| T,B,I,H,L,D | " + " | ".join(f"{c} fwd+bwd ms" for c in COMPETITORS) + " | layer/torch | "
          + " | ".join(f"{c} inference ms" for c in COMPETITORS) + " | layer/torch |")
    print("|---" * (2 * len(COMPETITORS) + 3) + "|")
    for config in args.configs:
        got = {c: [] for c in COMPETITORS}
        for r in range(args.rounds):
            for c in COMPETITORS[r % 2:] + COMPETITORS[:r % 2]:  # the order rotated each round
                run = subprocess.run([sys.executable, __file__, "--seconds", str(args.seconds), "--child", c, config],
                                     env=env, capture_output=True, text=True)
                if run.returncode:
                    print(f"{config} {c}: failed: {run.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
                    continue
                got[c].append(json.loads(run.stdout.strip().splitlines()[-1]))
        med = {c: {k: statistics.median(v[k] for v in got[c]) if got[c] else float("nan") for k in ("both", "inf")}
               for c in COMPETITORS}
        cells = [f"{med[c]['both']:.1f}" for c in COMPETITORS] + [f"{med['layer']['both'] / med['torch']['both']:.2f}"]
        cells += [f"{med[c]['inf']:.1f}" for c in COMPETITORS] + [f"{med['layer']['inf'] / med['torch']['inf']:.2f}"]
        print(f"| {config} | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
