"""Full-LSTM benchmark: fusedgrad forward + backward against torch.nn.LSTM, same run.

For each (T, B, I, H, L, D): the median time of fusedgrad's ``lstm_forward``
(train=True) and of forward + ``lstm_backward``, and the same for
``torch.nn.LSTM`` with autograd (oneDNN on the CPU), interleaved.  The GEMM
work of one forward + backward (the x·W_ihᵀ, per-step h·W_hhᵀ and dgates·W_hh,
dW and dx products) over each total time gives an effective GFLOP/s, set
against torch's own sgemm rate (``torch.mm`` at the size of the input GEMM)
measured in the same run.  A second table times a whole training step
(forward + backward + SGD step) of ``fusedgrad.torch.LSTM`` against
``torch.nn.LSTM`` with the same weights.  Timing is never asserted on.
"""
from __future__ import annotations

from . import timing

CONFIGS = ((50, 32, 256, 256, 1, 1), (50, 32, 256, 256, 2, 2), (100, 64, 512, 512, 1, 1))
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


def _case(torch, T, B, I, H, L, D, dtype, min_time):
    import fusedgrad

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

    a = torch.randn(T * B, I, dtype=torch.float32)
    w = torch.randn(I, 4 * H, dtype=torch.float32)
    t_f, t_b, tt_f, tt_b, t_mm = timing.median_times(
        [ours_fwd, ours_both, torch_fwd, torch_both, lambda: torch.mm(a, w)], min_time=min_time, repeat=7)
    fwd_flops, bwd_flops = gemm_flops(T, B, I, H, L, D)
    return {"config": (T, B, I, H, L, D), "dtype": dtype, "ours_fwd_s": t_f, "ours_s": t_b,
            "torch_fwd_s": tt_f, "torch_s": tt_b, "ours_gflops": (fwd_flops + bwd_flops) / t_b / 1e9,
            "torch_gflops": (fwd_flops + bwd_flops) / tt_b / 1e9, "sgemm_gflops": 2 * T * B * I * 4 * H / t_mm / 1e9}


def format_row(r: dict) -> str:
    cfg = ",".join(str(v) for v in r["config"])
    return (f"| {cfg} | {r['dtype']} | {r['ours_fwd_s'] * 1e3:.1f} | {r['ours_s'] * 1e3:.1f} | "
            f"{r['torch_fwd_s'] * 1e3:.1f} | {r['torch_s'] * 1e3:.1f} | {r['ours_s'] / r['torch_s']:.2f}x | "
            f"{r['ours_gflops']:.0f}, {r['torch_gflops']:.0f} | {r['sgemm_gflops']:.0f} |")


def run(configs=CONFIGS, dtypes=("float32",), out=print, min_time: float = 1.0) -> list[dict]:
    torch = timing.torch_or_none()
    if torch is None:
        out("full LSTM: torch is not installed (pip install -e '.[test]'); nothing to compare against")
        return []
    out(HEADER)
    out("|" + "|".join("-" * len(c) for c in HEADER.split("|")[1:-1]) + "|")
    rows = []
    for cfg in configs:
        for dtype in dtypes:
            row = _case(torch, *cfg, dtype, min_time)
            rows.append(row)
            out(format_row(row))
    return rows


TRAIN_HEADER = ("| T,B,I,H,L,D | dtype | fusedgrad.torch.LSTM step ms | torch.nn.LSTM step ms | vs torch |")


def _train_case(torch, T, B, I, H, L, D, dtype, min_time):
    from .torch.lstm import LSTM

    torch.manual_seed(0)
    tdt = getattr(torch, dtype)
    ref = torch.nn.LSTM(I, H, L, bidirectional=D == 2).to(tdt)
    ours = LSTM(I, H, L, bidirectional=D == 2).to(tdt)
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(T, B, I, dtype=tdt)
    r = torch.randn(T, B, D * H, dtype=tdt)

    def step(model, opt):
        def run():
            opt.zero_grad(set_to_none=True)
            y, _ = model(x)
            (y * r).sum().backward()
            opt.step()
        return run

    fns = [step(m, torch.optim.SGD(m.parameters(), lr=1e-4)) for m in (ours, ref)]
    t_ours, t_ref = timing.median_times(fns, min_time=min_time, repeat=7)
    return {"config": (T, B, I, H, L, D), "dtype": dtype, "ours_s": t_ours, "torch_s": t_ref}


def run_training(configs=CONFIGS, dtypes=("float32",), out=print, min_time: float = 1.0) -> list[dict]:
    """Training step (forward + backward + SGD step) of fusedgrad.torch.LSTM against torch.nn.LSTM."""
    torch = timing.torch_or_none()
    if torch is None:
        out("LSTM training step: torch is not installed; nothing to compare against")
        return []
    out(TRAIN_HEADER)
    out("|" + "|".join("-" * len(c) for c in TRAIN_HEADER.split("|")[1:-1]) + "|")
    rows = []
    for cfg in configs:
        for dtype in dtypes:
            row = _train_case(torch, *cfg, dtype, min_time)
            rows.append(row)
            cfg_text = ",".join(str(v) for v in row["config"])
            out(f"| {cfg_text} | {dtype} | {row['ours_s'] * 1e3:.1f} | {row['torch_s'] * 1e3:.1f} | "
                f"{row['ours_s'] / row['torch_s']:.2f}x |")
    return rows


def parse_config(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError:
        values = ()
    if len(values) != 6 or min(values) < 1 or values[5] not in (1, 2):
        raise ValueError(f"--lstm-config: expected T,B,I,H,L,D (positive, D 1 or 2), got {text!r}")
    return values
