"""The per-op benchmark: each competitor in its own process (fusedgrad.bench.worker), a failed side named in the
table, and the --plot roofline (a PNG with ours and torch's points; a clear error without matplotlib)."""
from __future__ import annotations

import math
import os
import statistics
import subprocess
import sys

import pytest

from conftest import has_torch, requires_torch
from fusedgrad.bench import kernels, plot, worker
from fusedgrad.bench.worker import Competitor

BROKEN = Competitor("broken", "no_such_module_for_bench:make")


def _copy(name="copy", mib=1):
    return Competitor(name, f"{worker.__file__}:copy_probe", {"mib": mib})


def test_the_benchmark_package_imports_none_of_its_modules():
    """A child timing torch's side imports fusedgrad.bench.lstm (or worker) only: the package's
    __init__ must not pull in the per-op benchmark, and with it TVM's runtime and thread pool."""
    code = ("import sys, fusedgrad.bench, fusedgrad.bench.lstm, fusedgrad.bench.worker; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('tvm', 'tvm_ffi') "
            "or m in ('fusedgrad.api', 'fusedgrad.runtime', 'fusedgrad.bench.kernels')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_child_times_one_competitor_and_answers_json(tmp_path):
    # the child makes the callable with the job's arguments, in its own process, and calls it at least
    # once per batch (plus its warm-up); what it answers is one positive number of seconds
    factory = tmp_path / "counted.py"
    factory.write_text("import os\n"
                       "def make(log, tag):\n"
                       "    return lambda: open(log, 'a').write(f'{tag} {os.getpid()}\\n')\n")
    log = tmp_path / "calls.log"
    got = worker.run_child({"factory": f"{factory}:make", "args": {"log": str(log), "tag": "copy"},
                                  "threads": 1, "min_time": 0.01, "repeat": 3})
    assert set(got) == {"seconds"}
    assert isinstance(got["seconds"], float) and math.isfinite(got["seconds"]) and got["seconds"] > 0
    calls = log.read_text().split()
    tags, pids = calls[0::2], set(calls[1::2])
    assert len(tags) >= 3 + 2 and set(tags) == {"copy"}
    assert len(pids) == 1 and pids != {str(os.getpid())}


def test_child_gets_the_thread_count_in_its_environment():
    env = worker.child_env(3)
    assert all(env[k] == "3" for k in worker.THREAD_ENV)


def test_failing_child_is_reported_by_name_and_not_rerun():
    got = worker.alternate([_copy(), BROKEN], rounds=2, threads=1, min_time=0.01, repeat=2)
    assert got["copy"].error is None and len(got["copy"].samples) == 2 and got["copy"].seconds > 0
    assert got["broken"].seconds is None and got["broken"].samples == []
    assert "ModuleNotFoundError" in got["broken"].error and "no_such_module_for_bench" in got["broken"].error


def test_one_child_times_each_part_of_a_competitor(tmp_path):
    # several callables of one runtime, timed in turn by one child and reported under their own names;
    # a factory that does not give exactly those parts is an error for every part
    factory = tmp_path / "parts.py"
    log = tmp_path / "calls.log"
    factory.write_text("import os\n"
                       f"LOG = {str(log)!r}\n"
                       "def call(tag):\n"
                       "    return lambda: open(LOG, 'a').write(f'{tag} {os.getpid()}\\n')\n"
                       "def make(extra=False):\n"
                       "    parts = {'small': call('small'), 'large': call('large')}\n"
                       "    return {**parts, 'other': lambda: None} if extra else parts\n"
                       "def make_some():\n"
                       "    return {'ok': lambda: None, 'broken': ValueError('no such case')}\n")
    good = Competitor("numpy", f"{factory}:make", parts=("small", "large"))
    bad = Competitor("bad", f"{factory}:make", {"extra": True}, parts=("p", "q"))
    some = Competitor("some", f"{factory}:make_some", parts=("ok", "broken"))
    got = worker.alternate([good, bad, some], rounds=2, threads=1, min_time=0.01, repeat=3)
    assert set(got) == {"small", "large", "p", "q", "ok", "broken"}
    assert got["ok"].error is None and len(got["ok"].samples) == 2
    assert got["broken"].error == "ValueError: no such case" and got["broken"].seconds is None
    # parts_of: what a factory fails to make becomes that part's exception
    made = worker.parts_of(lambda k: (lambda: None) if k == "ok" else int(k), ["ok", "x"])
    assert callable(made["ok"]) and isinstance(made["x"], ValueError)
    assert len(got["small"].samples) == len(got["large"].samples) == 2
    for name in ("small", "large"):  # each part's time is the median of its rounds
        assert got[name].seconds == statistics.median(got[name].samples) and got[name].seconds > 0
    # the order of the work: one child per round, which times its parts in turn, each part's calls together
    calls = [line.split() for line in log.read_text().splitlines()]
    runs = [(tag, pid) for k, (tag, pid) in enumerate(calls) if k == 0 or calls[k - 1] != [tag, pid]]
    assert [tag for tag, _ in runs] == ["small", "large", "small", "large"]
    assert runs[0][1] == runs[1][1] != runs[2][1] == runs[3][1]
    assert got["p"].error == got["q"].error and "expected a dict of the parts ['p', 'q']" in got["p"].error


def test_crashed_child_says_how_it_ended(monkeypatch):
    monkeypatch.setattr(worker.sys, "executable", "false")  # exits 1, prints nothing
    assert worker.run_child({"factory": "x:y"})["error"].startswith("child exit status 1, no result")


def test_failed_side_is_named_in_the_table(monkeypatch, capsys, tmp_path):
    # the fusedgrad side is a stand-in (a numpy copy per case): what is checked is how a failed torch side reads
    factory = tmp_path / "stand_in.py"
    factory.write_text("import numpy as np\n"
                       "def make(parts):\n"
                       "    a = np.ones(2**20, np.float32)\n"  # 4 MiB: well above the table's 0.001 ms
                       "    return {p: (lambda: a.copy()) for p in parts}\n")

    def stand_ins(cases, with_torch):
        ours, theirs = (tuple(kernels.part(n, c) for c in cases) for n in ("fusedgrad", "torch"))
        return [Competitor("fusedgrad", f"{factory}:make", {"parts": list(ours)}, parts=ours),
                Competitor("torch", BROKEN.factory, parts=theirs)]

    monkeypatch.setattr(kernels, "competitors", stand_ins)
    rows = kernels.run(["layer_norm_backward"], ("float32",), rounds=1, threads=1, min_time=0.01,
                     shapes={"layer_norm_backward": [{"M": 4, "D": 8}]})
    out = capsys.readouterr().out
    assert "each competitor in its own process, median of 1 alternating rounds" in out
    assert "CPU: " in out and "LLVM CPU" in out
    row = next(line for line in out.splitlines() if line.startswith("| layer_norm_backward "))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert float(cells[3]) > 0 and cells[7] == "failed" and cells[8] == "-"
    assert "torch failed on layer_norm_backward M=4,D=8 float32: ModuleNotFoundError" in out
    assert rows[0]["errors"].keys() == {"torch"}


@pytest.mark.parametrize("argv", [["--shape", "M=4,D=8"], ["--op", "layer_norm_backward", "--shape", "M=0,D=8"],
                                  ["--rounds", "0"]])
def test_bad_options_are_refused_before_timing(argv, monkeypatch, capsys):
    monkeypatch.setattr(kernels, "run", lambda *a, **k: pytest.fail("timed despite a bad option"))
    with pytest.raises(SystemExit):
        kernels.main(argv)
    message = capsys.readouterr().err.split("error:")[-1]  # the usage above it names every option
    assert argv[-2] in message


def test_plot_without_matplotlib_names_the_option_before_timing(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    monkeypatch.setattr(kernels, "run", lambda *a, **k: pytest.fail("timed before refusing --plot"))
    with pytest.raises(SystemExit):
        kernels.main(["--op", "column_sum", "--plot", str(tmp_path / "r.png")])
    err = capsys.readouterr().err.split("error:")[-1]
    assert "--plot" in err and "pip install" in err and "matplotlib" in err
    assert not (tmp_path / "r.png").exists()


@requires_torch
def test_plot_writes_a_roofline_png_with_ours_and_torch(monkeypatch, tmp_path, capsys):
    pytest.importorskip("matplotlib", reason="matplotlib is not installed (pip install -e '.[test]')")
    drawn = {}
    draw = plot.draw

    def spy(path, pts, *args):
        drawn["points"] = pts
        return draw(path, pts, *args)

    monkeypatch.setattr(plot, "draw", spy)
    monkeypatch.setattr(plot, "PEAK_N", 256)  # a small peak probe: this checks the picture, not the peak
    png = tmp_path / "roofline.png"
    assert kernels.main(["--op", "layer_norm_backward", "--shape", "M=8,D=16", "--dtype", "float32",
                       "--rounds", "1", "--min-time", "0.02", "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert "failed" not in out, out
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    whos = {p.who for p in drawn["points"]}
    assert whos == {"fusedgrad", "torch"}
    for p in drawn["points"]:
        assert p.op == "layer_norm_backward" and p.gflops > 0
        assert p.intensity == pytest.approx(13 * 8 * 16 / (4 * (3 * 8 * 16 + 2 * 8 + 3 * 16)))
    assert f"roofline: {png}" in out and "roof: best GEMM measured: " in out


def _gemm_rows(ours_gflops: float, torch_gflops: float) -> list[dict]:
    """kernels.run's rows of one GEMM case and one LayerNorm case, timed so that the GEMM reaches the given rates."""
    from fusedgrad import te_defs

    rows = []
    for op, dims, rates in (("matmul_packed", {"M": 1600, "Nb": 32, "K": 256}, (ours_gflops, torch_gflops)),
                            ("layer_norm_backward", {"M": 4096, "D": 1024}, (5.0, 4.0))):
        flops = kernels.FLOPS[op](dims)
        rows.append({"op": op, "shape": ",".join(f"{k}={v}" for k, v in dims.items()), "dtype": "float32",
                     "nbytes": te_defs.get(op).nbytes(dims, 4), "flops": flops, "copy_GB/s": 20.0,
                     "fusedgrad_s": flops / rates[0] / 1e9, "torch_s": flops / rates[1] / 1e9})
    return rows


@pytest.mark.parametrize("ours, theirs, probe_ours, roof, who", [
    (300.0, 150.0, None, 300.0, "fusedgrad matmul_packed M=1600,Nb=32,K=256 float32"),  # our table's GEMM
    (100.0, 150.0, None, 178.8, "torch.mm"),                                              # torch's probe
    (100.0, 150.0, 320.0, 320.0, "fusedgrad matmul_packed"),                              # our probe
])
def test_roof_is_the_best_gemm_measured_and_says_whose(ours, theirs, probe_ours, roof, who, monkeypatch, tmp_path):
    """A vendor BLAS may run below what the machine reaches (MKL's AVX2 code on AMD CPUs): the roof is
    the most GFLOP/s any GEMM reached, ours or torch's, probe or table, and its label names that one."""
    n = plot.PEAK_N
    who = who if who != "torch.mm" or has_torch() else "numpy matmul"  # the probe of the other side

    def measured(competitors, rounds, threads, min_time, repeat):
        # the stand-ins of the probes' children: torch.mm at 178.8 GFLOP/s; ours at probe_ours, or failed
        out = {}
        for c in competitors:
            rate = 178.8 if c.factory.endswith(":matmul_probe") else probe_ours
            out[c.name] = worker.Result(None if rate is None else 2 * n**3 / rate / 1e9, [],
                                              None if rate is not None else "RuntimeError: stand-in")
        return out

    drawn = {}
    monkeypatch.setattr(plot, "alternate", measured)
    monkeypatch.setattr(plot, "draw", lambda path, pts, bw, peak, label, title:
                        drawn.update(peak=peak, label=label))
    said = []
    plot.roofline(_gemm_rows(ours, theirs), str(tmp_path / "r.png"), threads=2, rounds=1, out=said.append)
    assert drawn["peak"] == pytest.approx(roof) and who in drawn["label"], drawn
    assert f"{roof:.1f} GFLOP/s" in said[0] and "178.8 GFLOP/s" in said[0], said


def test_roofline_labels_do_not_overlap(monkeypatch, tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib is not installed (pip install -e '.[test]')")
    from matplotlib import pyplot, text

    figures, close = [], pyplot.close
    monkeypatch.setattr(pyplot, "close", figures.append)  # the figure stays open to be measured
    # points close together, as float32 and float16 of one op are, and a spread of others
    pts = [plot.Point(op, f"M={m},D=1024 {dtype}", who, x * (1.01 if dtype == "float16" else 1.0),
                            y * (1.02 if dtype == "float16" else 1.0))
           for op, m, x, y in (("layer_norm_backward", 4096, 0.6, 8.0), ("layer_norm_backward", 8192, 0.62, 8.3),
                               ("lstm_cell_backward", 64, 0.9, 8.1), ("column_sum", 1600, 0.25, 30.0))
           for dtype in ("float32", "float16") for who in ("fusedgrad", "torch")]
    plot.draw(str(tmp_path / "r.png"), pts, 20.0, 300.0, "best GEMM measured: stand-in", "title")
    try:
        fig = figures[0]
        renderer = fig.canvas.get_renderer()
        labels = [a for a in fig.findobj(text.Annotation)]
        boxes = [text.Text.get_window_extent(a, renderer) for a in labels]
        assert sorted(a.get_text() for a in labels) == sorted(f"{p.op} {p.case}" for p in pts if p.who == "fusedgrad")
        for k, box in enumerate(boxes):
            assert fig.bbox.containsx(box.x0) and fig.bbox.containsx(box.x1) and fig.bbox.containsy(box.y1)
            for j in range(k):
                assert not box.overlaps(boxes[j]), (labels[k].get_text(), labels[j].get_text())
    finally:
        for fig in figures:
            close(fig)
