"""The DSP schedule rules size their blocks from the chips' facts (targets/dsp), not from constants.

A parallel block is a whole number of the definition's partial blocks (the summation order) whose
DMA windows fit the smallest local memory of the chips shipping the dtype, double-buffered.
"""
import pytest

from fusedgrad import targets
from fusedgrad.schedules.dsp import layer_norm_backward as ln, lstm_cell_backward as cell, machine
from fusedgrad.schedules.row_blocks import partial_rows

ITEM = {"float32": 4, "float16": 2}
WINDOWS = {
    "layer_norm_backward": {"row_elements": 2 * ln.ROW_WIDTH + 2, "fixed_elements": ln.ROW_WIDTH, "buffers": 4},
    "lstm_cell_backward": cell.WINDOWS,
}


def _bytes(dtype, rows, row_elements, fixed_elements, buffers):
    return (2 * rows * row_elements + fixed_elements) * ITEM[dtype] + machine.ALIGN * (2 * buffers + 1)


@pytest.mark.parametrize("op", sorted(WINDOWS))
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_a_block_is_the_most_partial_blocks_that_fit(op, dtype):
    w = WINDOWS[op]
    rows = partial_rows(op)
    blocks = machine.partial_blocks(dtype, rows, **w)
    local = machine.local_bytes(dtype)
    assert blocks >= 1
    assert blocks == 1 or _bytes(dtype, blocks * rows, **w) <= local
    assert _bytes(dtype, (blocks + 1) * rows, **w) > local
    rows = machine.rows_that_fit(dtype, **w)
    assert _bytes(dtype, rows, **w) <= local < _bytes(dtype, rows + 1, **w)


def test_sizes_follow_the_facts(monkeypatch):
    chips = targets.get("dsp").facts["chips"]
    w = WINDOWS["lstm_cell_backward"]
    rows = partial_rows("lstm_cell_backward")
    before = machine.partial_blocks("float16", rows, **w), machine.accumulator_lanes("float16")
    for name in chips:
        monkeypatch.setitem(chips, name, {**chips[name], "local_bytes": 8 * chips[name]["local_bytes"],
                                          "vector_bytes": 2 * chips[name]["vector_bytes"]})
    after = machine.partial_blocks("float16", rows, **w), machine.accumulator_lanes("float16")
    assert after[0] > before[0] and after[1] == 2 * before[1]


def test_the_smallest_chip_shipping_a_dtype_decides(monkeypatch):
    chips = targets.get("dsp").facts["chips"]
    only_fp32 = [n for n, f in chips.items() if "float16" not in f["dtypes"]]
    assert only_fp32, "a chip without float16 is needed for this check"
    fp16_local = machine.local_bytes("float16")
    for name in only_fp32:
        monkeypatch.setitem(chips, name, {**chips[name], "local_bytes": 1024})
    assert machine.local_bytes("float32") == 1024
    assert machine.local_bytes("float16") == fp16_local
