"""``fusedgrad bench --plot FILE.png``: the per-op table as a roofline, ours beside torch's.

x is each case's arithmetic intensity (``bench.FLOPS`` over the op's minimum traffic
``nbytes``, FLOP per byte), y the GFLOP/s each competitor achieved, both log scale.  The roofs are
the copy bandwidth the table measured (a line y = GB/s * x) and a measured matmul peak (a float32
``torch.mm`` of PEAK_N, numpy's when torch is missing, in its own process with the table's
threads).  Ops that only move data (pack_b, pack_bt: no FLOPs) are left out of the picture.
matplotlib (the ``plot`` extra) draws it with the non-interactive Agg backend.
"""
from __future__ import annotations

import dataclasses
import importlib.util

from .bench_worker import PEAK_N, alternate, cpu_model, probe

SIDES = {"fusedgrad": "o", "torch": "x"}  # marker per competitor


def require_matplotlib() -> None:
    """ImportError naming the pip command when matplotlib is not installed (checked before timing)."""
    try:
        import matplotlib  # noqa: F401 -- only whether it imports
    except ImportError:
        raise ImportError("needs matplotlib, which is not installed: pip install 'fusedgrad[plot]' "
                          "(or pip install matplotlib)") from None


@dataclasses.dataclass(frozen=True)
class Point:
    """One competitor on one case: ``who`` ("fusedgrad" or "torch"), FLOP/byte and GFLOP/s."""

    op: str
    case: str
    who: str
    intensity: float
    gflops: float


def points(rows) -> list[Point]:
    """The roofline's points of ``bench.run``'s rows: every timed side of every case with FLOPs."""
    out = []
    for r in rows:
        if not r.get("flops"):
            continue
        for who in SIDES:
            if f"{who}_s" in r:
                out.append(Point(r["op"], f"{r['shape']} {r['dtype']}", who, r["flops"] / r["nbytes"],
                                 r["flops"] / r[f"{who}_s"] / 1e9))
    return out


def measure_peak(rounds: int, threads: int) -> tuple[float | None, str]:
    """(GFLOP/s or None, the legend's label) of the matmul peak probe, median of ``rounds`` children."""
    lib = "torch.mm" if importlib.util.find_spec("torch") is not None else "numpy matmul"
    res = alternate([probe("matmul_probe", n=PEAK_N)], rounds, threads, min_time=0.5, repeat=5)["matmul_probe"]
    label = f"measured matmul peak ({lib} {PEAK_N}^3 float32, {threads} threads)"
    if res.error is not None:
        return None, f"{label}: failed, {res.error}"
    return 2 * PEAK_N**3 / res.seconds / 1e9, label


def roofline(rows, path: str, threads: int, rounds: int, out=print) -> None:
    """Measure the matmul peak and draw ``rows`` (with the table's copy bandwidth) into ``path``."""
    peak, peak_label = measure_peak(rounds, threads)
    bandwidth = next((r["copy_GB/s"] for r in rows if r.get("copy_GB/s")), None)
    title = f"{cpu_model()}, {threads} threads; each competitor in its own process, median of {rounds} rounds"
    pts = points(rows)
    draw(path, pts, bandwidth, peak, peak_label, title)
    out(f"roofline: {path} ({len(pts)} points; {peak_label}"
        + (f" = {peak:.1f} GFLOP/s" if peak else "") + ")")


def draw(path: str, pts, bandwidth: float | None, peak: float | None, peak_label: str, title: str) -> None:
    """Write the roofline PNG: ``pts`` (Points), the copy-bandwidth line and the peak roof."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 7))
    ops = sorted({p.op for p in pts})
    colors = {op: plt.cm.tab10(i % 10) for i, op in enumerate(ops)}
    xs = [p.intensity for p in pts] or [1.0]
    lo, hi = min(xs) / 4, max(xs) * 4
    if bandwidth and peak:
        hi = max(hi, 4 * peak / bandwidth)  # show the ridge point
    if bandwidth:
        ax.plot([lo, hi], [bandwidth * lo, bandwidth * hi], "k--", lw=1,
                label=f"measured copy bandwidth {bandwidth:.1f} GB/s (numpy copy of 64 MiB)")
    if peak:
        ax.plot([lo, hi], [peak, peak], "k:", lw=1.5, label=f"{peak_label}: {peak:.1f} GFLOP/s")
    for p in pts:
        ax.plot(p.intensity, p.gflops, SIDES[p.who], color=colors[p.op], ms=8, mfc="none" if p.who == "torch" else None)
        if p.who == "fusedgrad":
            ax.annotate(f"{p.op} {p.case}", (p.intensity, p.gflops), textcoords="offset points", xytext=(6, 3),
                        fontsize=6, color=colors[p.op])
    # each case's two sides joined by a thin line: ours beside torch's
    cases = {}
    for p in pts:
        cases.setdefault((p.op, p.case), []).append(p)
    for (op, _), pair in cases.items():
        if len(pair) == 2:
            ax.plot([q.intensity for q in pair], [q.gflops for q in pair], "-", color=colors[op], lw=0.5)
    for who, marker in SIDES.items():
        ax.plot([], [], marker, color="gray", mfc="none" if who == "torch" else None, label=who)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_xlabel("arithmetic intensity (FLOP per byte of the op's minimum traffic)")
    ax.set_ylabel("achieved GFLOP/s")
    ax.set_title(title, fontsize=9)
    ax.grid(True, which="both", lw=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.text(0.01, 0.01, "pack_b, pack_bt move data only (no FLOPs): see the table's GB/s", fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
