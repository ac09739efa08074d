"""The full-LSTM benchmark section: configuration parsing, GEMM flop count, one tiny run through the CLI."""
from __future__ import annotations

import pytest

from conftest import assert_ratio_matches_times, requires_torch
from fusedgrad.bench import kernels, lstm


@pytest.mark.parametrize("text", ["50,32,256,256,1", "50,32,256,256,1,3", "0,32,256,256,1,1", "a,b,c,d,e,f"])
def test_bad_config_is_rejected_naming_the_option(text):
    with pytest.raises(ValueError, match="lstm-config"):
        lstm.parse_config(text)


def test_gemm_flops_counts_every_product():
    T, B, I, H = 3, 2, 5, 7
    fwd, bwd = lstm.gemm_flops(T, B, I, H, 1, 1)
    assert fwd == 2 * T * B * 4 * H * (I + H)
    assert bwd == 2 * T * B * 4 * H * (2 * H + 2 * I)
    # a second layer of a bidirectional LSTM reads 2H inputs, per direction
    fwd2, _ = lstm.gemm_flops(T, B, I, H, 2, 2)
    assert fwd2 == 2 * 2 * T * B * 4 * H * (I + H) + 2 * 2 * T * B * 4 * H * (2 * H + H)


@requires_torch
def test_tiny_run_reports_both_sides_and_the_ratio(capsys):
    assert kernels.main(["--lstm", "--lstm-config", "3,2,8,8,1,2", "--lstm-min-time", "0.05", "--rounds", "1",
                         "--train-threads", "1", "--busy"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("| 3,2,8,8,1,2 "))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == "float32"
    ours, theirs, ratio = float(cells[3]), float(cells[5]), float(cells[6].rstrip("x"))
    assert ours > 0 and theirs > 0
    assert_ratio_matches_times(ratio, ours, theirs, time_step=0.1)  # ms to 1 decimal
    # the training-step table: fusedgrad.torch.LSTM against torch.nn.LSTM, on 1 thread, quiet and busy
    steps = [line for line in out.splitlines() if line.startswith("| 3,2,8,8,1,2 ")][1:]
    assert len(steps) == 2
    for step, beside in zip(steps, ("quiet", "busy")):
        cells = [c.strip() for c in step.strip("|").split("|")]
        assert cells[1:4] == ["float32", "1", beside]
        ours, theirs, ratio = float(cells[4]), float(cells[5]), float(cells[6].rstrip("x"))
        assert ours > 0 and theirs > 0
        assert_ratio_matches_times(ratio, ours, theirs, time_step=0.1)  # ms to 1 decimal


@pytest.mark.parametrize("text", ["0", "1,x", "", "2,-1"])
def test_bad_train_threads_are_refused(text, capsys):
    with pytest.raises(SystemExit) as e:
        kernels.main(["--lstm", "--train-threads", text])
    assert e.value.code == 2
    assert "--train-threads" in capsys.readouterr().err


def test_busy_process_runs_at_the_lowest_priority_while_the_block_runs():
    import os
    from pathlib import Path

    from fusedgrad.bench import worker

    def children():
        out = {}
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == os.getpid():  # fields[1]: the parent's pid; fields[16]: nice
                out[int(stat.parent.name)] = int(fields[16])
        return out

    before = children()
    with worker.busy_beside(True):
        inside = {pid: nice for pid, nice in children().items() if pid not in before}
    assert list(inside.values()) == [19]
    assert not set(inside) & set(children())  # stopped (and reaped) after the block
