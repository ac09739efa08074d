"""Full-LSTM benchmark: fusedgrad forward + backward against torch.nn.LSTM, same run.

For each (T, B, I, H, L, D): the median time of fusedgrad's ``lstm_forward``
(train=True) and of forward + ``lstm_backward``, and the same for
``torch.nn.LSTM`` with autograd (oneDNN on the CPU), interleaved.  The GEMM
work of one forward + backward (the x·W_ihᵀ, per-step h·W_hhᵀ and dgates·W_hh,
dW and dx products) over each total time gives an effective GFLOP/s, set
against torch's own sgemm rate (``torch.mm`` at the size of the input GEMM)
measured in the same run.  A second table times a whole training step
(forward + backward + SGD step) of ``fusedgrad.torch.LSTM`` against
``torch.nn.LSTM`` with the same weights.  Each competitor runs in its own
process (``worker``; one child times fusedgrad's sides in turn, another
torch's), in alternating rounds, medians over the rounds.  Timing is never
asserted on.
"""
from __future__ import annotations

import os

from .. import timing
from .worker import Competitor, alternate, busy_beside, describe_machine

# the sides each competitor's child times in turn
PARTS = {"fusedgrad": ("ours_fwd", "ours_both"), "torch": ("torch_fwd", "torch_both", "sgemm")}
SIDES = PARTS["fusedgrad"] + PARTS["torch"]

CONFIGS = ((200, 1, 256, 256, 1, 1), (50, 32, 256, 256, 1, 1), (50, 32, 256, 256, 2, 2), (100, 64, 512, 512, 1, 1))
HEADER = ("| T,B,I,H,L,D | dtype | fusedgrad fwd ms | fwd+bwd ms | torch fwd ms | fwd+bwd ms | "
          "fwd+bwd vs torch | GEMM GFLOP/s (fusedgrad, torch) | torch sgemm GFLOP/s |")


def gemm_flops(T, B, I, H, L, D) -> tuple[int, int]:
    """Multiply-add flops of the GEMMs of one forward and one backward."""
    fwd = bwd = 0
    for layer in range(L):
        n_in = I if layer == 0 else D * H
        fwd += D * 2 * T * B * 4 * H * (n_in + H)  # x·W_ihᵀ, h·W_hhᵀ
        bwd += D * 2 * T * B * 4 * H * (H + n_in + H + n_in)  # dgates·W_hh, dW_ih, dW_hh, dx
    return fwd, bwd


def make_sides(config, dtype: str, competitor: str) -> dict:
    """A child's callables: the SIDES of ``competitor`` (a PARTS key) for LSTM ``config`` (T, B, I,
    H, L, D) in ``dtype``, sharing one model and one set of inputs."""
    import torch

    import fusedgrad

    T, B, I, H, L, D = config
    torch.manual_seed(0)
    tdt = getattr(torch, dtype)
    lstm = torch.nn.LSTM(I, H, L, bidirectional=D == 2).to(tdt)
    params = [p.detach() for p in lstm._flat_weights]
    x = torch.randn(T, B, I, dtype=tdt)
    h0, c0 = (torch.randn(L * D, B, H, dtype=tdt) for _ in range(2))
    gy = torch.randn(T, B, D * H, dtype=tdt)
    ghy, gcy = (torch.randn(L * D, B, H, dtype=tdt) for _ in range(2))
    xr, h0r, c0r = (t.clone().requires_grad_() for t in (x, h0, c0))

    def ours_fwd():
        return fusedgrad.lstm_forward(x, [h0, c0], params, True, L, 0.0, True, D == 2)

    def ours_both():
        out = ours_fwd()
        return fusedgrad.lstm_backward(gy, ghy, gcy, x, [h0, c0], params, *out[3:], True, L, 0.0, True, D == 2)

    def torch_fwd():
        return lstm(xr, (h0r, c0r))

    def torch_both():
        y, (hy, cy) = torch_fwd()
        torch.autograd.backward([y, hy, cy], [gy, ghy, gcy])
        lstm.zero_grad(set_to_none=True)
        xr.grad = h0r.grad = c0r.grad = None

    sides = {"ours_fwd": ours_fwd, "ours_both": ours_both, "torch_fwd": torch_fwd, "torch_both": torch_both}
    if "sgemm" in PARTS[competitor]:
        a = torch.randn(T * B, I, dtype=torch.float32)
        w = torch.randn(I, 4 * H, dtype=torch.float32)
        sides["sgemm"] = lambda: torch.mm(a, w)
    return {side: sides[side] for side in PARTS[competitor]}


def _case(cfg, dtype, min_time, rounds, threads):
    sides = [Competitor(k, "fusedgrad.bench.lstm:make_sides", {"config": list(cfg), "dtype": dtype, "competitor": k},
                        parts=parts) for k, parts in PARTS.items()]
    got = alternate(sides, rounds, threads, min_time, 7)
    row = {"config": tuple(cfg), "dtype": dtype, "errors": {k: r.error for k, r in got.items() if r.error}}
    row.update({f"{k}_s": r.seconds for k, r in got.items() if r.seconds is not None})
    fwd_flops, bwd_flops = gemm_flops(*cfg)
    T, B, I, H = cfg[:4]
    if "ours_both_s" in row:
        row["ours_gflops"] = (fwd_flops + bwd_flops) / row["ours_both_s"] / 1e9
    if "torch_both_s" in row:
        row["torch_gflops"] = (fwd_flops + bwd_flops) / row["torch_both_s"] / 1e9
    if "sgemm_s" in row:
        row["sgemm_gflops"] = 2 * T * B * I * 4 * H / row["sgemm_s"] / 1e9
    return row


def _cell(r: dict, key: str, fmt: str, scale: float = 1.0, side: str | None = None) -> str:
    """r[key] formatted, else "failed" when ``side`` (default: the key less "_s") failed, else "-"."""
    if key in r:
        return f"{r[key] * scale:{fmt}}"
    return "failed" if (side or key.removesuffix("_s")) in r.get("errors", {}) else "-"


def format_row(r: dict) -> str:
    cfg = ",".join(str(v) for v in r["config"])
    ratio = f"{r['ours_both_s'] / r['torch_both_s']:.2f}x" if {"ours_both_s", "torch_both_s"} <= set(r) else "-"
    return (f"| {cfg} | {r['dtype']} | {_cell(r, 'ours_fwd_s', '.1f', 1e3)} | {_cell(r, 'ours_both_s', '.1f', 1e3)} | "
            f"{_cell(r, 'torch_fwd_s', '.1f', 1e3)} | {_cell(r, 'torch_both_s', '.1f', 1e3)} | {ratio} | "
            f"{_cell(r, 'ours_gflops', '.0f', side='ours_both')}, "
            f"{_cell(r, 'torch_gflops', '.0f', side='torch_both')} | "
            f"{_cell(r, 'sgemm_gflops', '.0f', side='sgemm')} |")


def _failures(r: dict, what: str, out) -> None:
    for side, error in r["errors"].items():
        out(f"|   {side} failed on {what}: {error}")


def run(configs=CONFIGS, dtypes=("float32",), out=print, min_time: float = 1.0, rounds: int = 3,
        threads: int | None = None) -> list[dict]:
    if timing.torch_or_none() is None:
        out("full LSTM: torch is not installed (pip install -e '.[test]'); nothing to compare against")
        return []
    threads = threads or os.cpu_count() or 1
    for line in describe_machine(threads, rounds):
        out(line)
    out(HEADER)
    out("|" + "|".join("-" * len(c) for c in HEADER.split("|")[1:-1]) + "|")
    rows = []
    for cfg in configs:
        for dtype in dtypes:
            row = _case(cfg, dtype, min_time, rounds, threads)
            rows.append(row)
            out(format_row(row))
            _failures(row, f"{','.join(map(str, cfg))} {dtype}", out)
    return rows


TRAIN_HEADER = ("| T,B,I,H,L,D | dtype | threads | beside | fusedgrad.torch.LSTM step ms | torch.nn.LSTM step ms "
                "| vs torch |")


def make_train_step(config, dtype: str, side: str):
    """A child's callable: one training step of ``side`` ("ours": fusedgrad.torch.LSTM, "torch":
    torch.nn.LSTM, same weights) for LSTM ``config`` in ``dtype``: LSTM -> Linear(D*H, 10) ->
    cross-entropy on every step's output, backward, ``torch.optim.SGD`` step, as a user writes it."""
    import torch

    from ..torch.lstm import LSTM

    T, B, I, H, L, D = config
    torch.manual_seed(0)
    tdt = getattr(torch, dtype)
    ref = torch.nn.LSTM(I, H, L, bidirectional=D == 2).to(tdt)
    lstm = ref
    if side == "ours":
        lstm = LSTM(I, H, L, bidirectional=D == 2).to(tdt)
        lstm.load_state_dict(ref.state_dict())
    head = torch.nn.Linear(D * H, 10).to(tdt)
    x = torch.randn(T, B, I, dtype=tdt)
    target = torch.randint(0, 10, (T * B,))
    opt = torch.optim.SGD([*lstm.parameters(), *head.parameters()], lr=1e-3)

    def run():
        opt.zero_grad(set_to_none=True)
        y, _ = lstm(x)
        loss = torch.nn.functional.cross_entropy(head(y).reshape(T * B, 10).float(), target)
        loss.backward()
        opt.step()

    return run


def run_training(configs=CONFIGS, dtypes=("float32",), out=print, min_time: float = 1.0, rounds: int = 3,
                 threads=(1, None), busy: bool = False) -> list[dict]:
    """Training step (forward + backward + SGD step) of fusedgrad.torch.LSTM against torch.nn.LSTM, at
    each thread count of ``threads`` (None: every core), on a quiet machine and, with ``busy``, again
    beside one lowest-priority busy process (worker.busy_beside)."""
    if timing.torch_or_none() is None:
        out("LSTM training step: torch is not installed; nothing to compare against")
        return []
    counts = list(dict.fromkeys(t or os.cpu_count() or 1 for t in threads))
    for line in describe_machine(counts[-1], rounds):
        out(line)
    out(f"training step at {', '.join(map(str, counts))} thread(s)"
        + ("; 'busy': beside one `nice -n 19` process spinning on a core, started before and stopped after "
           "the row's rounds" if busy else ""))
    out(TRAIN_HEADER)
    out("|" + "|".join("-" * len(c) for c in TRAIN_HEADER.split("|")[1:-1]) + "|")
    rows = []
    for cfg in configs:
        for dtype in dtypes:
            for n in counts:
                for beside in ("quiet", "busy") if busy else ("quiet",):
                    sides = [Competitor(k, "fusedgrad.bench.lstm:make_train_step",
                                        {"config": list(cfg), "dtype": dtype, "side": k}) for k in ("ours", "torch")]
                    with busy_beside(beside == "busy"):
                        got = alternate(sides, rounds, n, min_time, 7)
                    row = {"config": tuple(cfg), "dtype": dtype, "threads": n, "beside": beside,
                           "errors": {k: r.error for k, r in got.items() if r.error}}
                    row.update({f"{k}_s": r.seconds for k, r in got.items() if r.seconds is not None})
                    rows.append(row)
                    cfg_text = ",".join(str(v) for v in row["config"])
                    ratio = f"{row['ours_s'] / row['torch_s']:.2f}x" if {"ours_s", "torch_s"} <= set(row) else "-"
                    out(f"| {cfg_text} | {dtype} | {n} | {beside} | {_cell(row, 'ours_s', '.1f', 1e3)} | "
                        f"{_cell(row, 'torch_s', '.1f', 1e3)} | {ratio} |")
                    _failures(row, f"{cfg_text} {dtype} {n} threads {beside}", out)
    return rows


def parse_config(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError:
        values = ()
    if len(values) != 6 or min(values) < 1 or values[5] not in (1, 2):
        raise ValueError(f"--lstm-config: expected T,B,I,H,L,D (positive, D 1 or 2), got {text!r}")
    return values
