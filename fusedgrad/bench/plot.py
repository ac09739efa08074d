"""``fusedgrad bench --plot FILE.png``: the per-op table as a roofline, ours beside torch's.

x is each case's arithmetic intensity (``kernels.FLOPS`` over the op's minimum traffic
``nbytes``, FLOP per byte), y the GFLOP/s each competitor achieved, both log scale.  The roofs are
the copy bandwidth the table measured (a line y = GB/s * x) and the best GEMM measured: of a
float32 ``torch.mm`` of PEAK_N (numpy's when torch is missing), fusedgrad's ``matmul_packed`` of
the same size (each in its own process with the table's threads) and the table's GEMM cases, ours
or torch's, whichever reached the most GFLOP/s (a vendor BLAS may run below its machine's peak,
e.g. MKL's AVX2 code on AMD CPUs, so neither side's GEMM alone is the roof).  Ops that only move
data (pack_b, pack_bt: no FLOPs) are left out of the picture.  Each fusedgrad point is labelled in
a column beside the plot, the labels kept apart and joined to their points by a thin line.
matplotlib (the ``plot`` extra) draws it with the non-interactive Agg backend.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import math
from pathlib import Path

from .worker import PEAK_N, Competitor, alternate, cpu_model, probe

SIDES = {"fusedgrad": "o", "torch": "x"}  # marker per competitor
GEMMS = ("matmul_packed", "matmul")  # ops that are GEMMs: their points are candidates for the roof
LABEL_PT = 6.0  # label font size (points), made smaller when the labels would not fit one above another


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


def measure_gemms(rounds: int, threads: int) -> dict[str, float | str]:
    """The GEMM probes, median of ``rounds`` children each: {name: GFLOP/s, or the error that kept
    it from being measured}. torch.mm (numpy's matmul when torch is missing) and fusedgrad's
    matmul_packed, both float32 and [PEAK_N, PEAK_N] x [PEAK_N, PEAK_N]."""
    n = PEAK_N
    lib = "torch.mm" if importlib.util.find_spec("torch") is not None else "numpy matmul"
    ours = Competitor(f"fusedgrad matmul_packed {n}^3 float32", "fusedgrad.bench.kernels:make_call",
                      {"op": "matmul_packed", "dims": {"M": n, "Nb": n // 32, "K": n}, "dtype": "float32",
                       "competitor": "fusedgrad"})
    theirs = dataclasses.replace(probe("matmul_probe", n=n), name=f"{lib} {n}^3 float32")
    got = alternate([theirs, ours], rounds, threads, min_time=0.5, repeat=5)
    return {name: (2 * n**3 / res.seconds / 1e9 if res.error is None else res.error) for name, res in got.items()}


def best_gemm(pts, probes: dict) -> tuple[float | None, str]:
    """(GFLOP/s, the legend's label) of the roof: the most any GEMM reached, of the ``probes``
    (``measure_gemms``) and the GEMM ``pts`` of the table, ours or torch's; (None, why) when none was
    measured."""
    found = {name: v for name, v in probes.items() if isinstance(v, float)}
    for p in pts:
        if p.op in GEMMS:
            name = f"{p.who} {p.op} {p.case}"
            found[name] = max(p.gflops, found.get(name, 0.0))
    if not found:
        return None, "GEMM roof: none measured (" + "; ".join(f"{k}: {v}" for k, v in probes.items()) + ")"
    best = max(found, key=found.get)
    return found[best], f"best GEMM measured: {best}"


def roofline(rows, path: str, threads: int, rounds: int, out=print) -> None:
    """Measure the GEMM probes and draw ``rows`` (with the table's copy bandwidth) into ``path``, the
    roof at the best GEMM measured."""
    probes = measure_gemms(rounds, threads)
    bandwidth = next((r["copy_GB/s"] for r in rows if r.get("copy_GB/s")), None)
    title = f"{cpu_model()}, {threads} threads; each competitor in its own process, median of {rounds} rounds"
    pts = points(rows)
    peak, peak_label = best_gemm(pts, probes)
    draw(path, pts, bandwidth, peak, peak_label, title)
    said = "; ".join(f"{k} {v:.1f} GFLOP/s" if isinstance(v, float) else f"{k} failed: {v}"
                     for k, v in probes.items())
    out(f"roofline: {path} ({len(pts)} points; GEMM probes: {said}; roof: {peak_label}"
        + (f" = {peak:.1f} GFLOP/s" if peak else "") + ")")


def spread(ys: list[float], gap: float) -> list[float]:
    """Label heights for wanted heights ``ys`` (ascending, axes fraction): each as near its own as
    can be while every two are at least ``gap`` apart and all lie in [0, 1] (when len(ys) * gap <= 1)."""
    out: list[float] = []
    for y in ys:  # upwards: push each above the one below
        out.append(max(y, out[-1] + gap) if out else max(y, 0.0))
    for k in range(len(out) - 1, -1, -1):  # downwards: pull the top ones back under 1
        out[k] = min(out[k], out[k + 1] - gap if k + 1 < len(out) else 1.0)
    return out


def draw(path: str, pts, bandwidth: float | None, peak: float | None, peak_label: str, title: str) -> None:
    """Write the roofline PNG: ``pts`` (Points), the copy-bandwidth line and the peak roof; each
    fusedgrad point labelled in a column right of the plot, no two labels overlapping."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig = plt.figure(figsize=(13, 7))
    box = (0.07, 0.1, 0.62, 0.83)  # left, bottom, width, height: the labels' column is right of it
    ax = fig.add_axes(box)
    ops = sorted({p.op for p in pts})
    colors = {op: plt.cm.tab10(i % 10) for i, op in enumerate(ops)}
    xs = [p.intensity for p in pts] or [1.0]
    lo, hi = min(xs) / 4, max(xs) * 4
    if bandwidth and peak:
        hi = max(hi, 4 * peak / bandwidth)  # show the ridge point
    ys = [p.gflops for p in pts] + ([peak] if peak else []) + ([bandwidth * lo] if bandwidth else [])
    ylo, yhi = min(ys or [1.0]) / 3, max(ys or [1.0]) * 3
    if bandwidth:
        ax.plot([lo, hi], [bandwidth * lo, bandwidth * hi], "k--", lw=1,
                label=f"measured copy bandwidth {bandwidth:.1f} GB/s (numpy copy of 64 MiB)")
    if peak:
        ax.plot([lo, hi], [peak, peak], "k:", lw=1.5, label=f"{peak_label}: {peak:.1f} GFLOP/s")
    for p in pts:
        ax.plot(p.intensity, p.gflops, SIDES[p.who], color=colors[p.op], ms=8, mfc="none" if p.who == "torch" else None)
    # each case's two sides joined by a thin line: ours beside torch's
    cases = {}
    for p in pts:
        cases.setdefault((p.op, p.case), []).append(p)
    for (op, _), pair in cases.items():
        if len(pair) == 2:
            ax.plot([q.intensity for q in pair], [q.gflops for q in pair], "-", color=colors[op], lw=0.5)
    # labels one above another right of the plot, each as high as its point where the others allow
    ours = sorted((p for p in pts if p.who == "fusedgrad"), key=lambda p: (p.gflops, p.intensity))
    height_pt = box[3] * fig.get_figheight() * 72
    size = min(LABEL_PT, height_pt / (1.5 * max(len(ours), 1)))
    at = spread([math.log(p.gflops / ylo) / math.log(yhi / ylo) for p in ours], 1.4 * size / height_pt)
    for p, y in zip(ours, at):
        ax.annotate(f"{p.op} {p.case}", (p.intensity, p.gflops), xytext=(1.02, y), textcoords="axes fraction",
                    fontsize=size, color=colors[p.op], va="center", annotation_clip=False,
                    arrowprops={"arrowstyle": "-", "lw": 0.3, "color": colors[p.op], "alpha": 0.6})
    for who, marker in SIDES.items():
        ax.plot([], [], marker, color="gray", mfc="none" if who == "torch" else None, label=who)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(ylo, yhi)
    ax.set_xlabel("arithmetic intensity (FLOP per byte of the op's minimum traffic)")
    ax.set_ylabel("achieved GFLOP/s")
    ax.set_title(title, fontsize=9)
    ax.grid(True, which="both", lw=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.text(0.01, 0.01, "pack_b, pack_bt move data only (no FLOPs): see the table's GB/s", fontsize=7)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
