"""Facts of an op's definition (te_defs OpDef) that every target reads, rather than its own copy.

- ``partial_rows``: the row block of the op's column sums, part of its summation order.  The
  CPU and DSP schedules (and CUDA's column_sum) split their sums by the definition's, so changing
  it there changes every schedule (and they keep the same order).
- ``short``: the op's short name in the C libraries' symbols (lowering.naming derives them).
- ``variant_key``: a variant's number in the C libraries' switches, from the op's flag order.
"""
import re

import pytest

from fusedgrad import schedules, targets, te_defs
from fusedgrad.lowering import naming, tvm_api
from fusedgrad.schedules import tir_api

# op -> (a variant with the column sum, the row symbol, the partial buffers the rfactor makes)
SUMS = {
    "lstm_cell_backward": ({"has_grad_hy": True, "has_grad_cy": True, "has_bias": True}, "N", {"grad_bias_acc_rf"}),
    "layer_norm_backward": ({}, "M", {"dgamma_acc_rf", "dbeta_acc_rf"}),
    "column_sum": ({}, "K", {"s_rf"}),
}


def _partial_blocks(op_name: str, target_name: str, knobs: dict | None = None) -> dict[str, int]:
    """{partial buffer: its rows per block} in the hand schedule of ``op_name`` on ``target_name``
    (``knobs``: tuned as a tuning record would)."""
    op = te_defs.get(op_name)
    variant, rows, _ = SUMS[op_name]
    func = tir_api.prim_func(op.compute("float32", **variant), "f", op_name, strided=[])
    info = targets.get(target_name)
    sch, _ = schedules.apply(info.schedules, func, tvm_api.target(info.tvm_target()), knobs=knobs)
    text = sch.mod["main"].script()
    found = re.findall(rf"(\w+_rf) = T\.sblock_alloc_buffer\(\(\({rows} \+ (\d+)\) // (\d+)", text)
    assert all(int(plus) + 1 == int(block) for _, plus, block in found), found
    return {name: int(block) for name, _, block in found}


@pytest.mark.parametrize("op_name,target_name", [(op, t) for op in sorted(SUMS) for t in ("llvm", "dsp")
                                                 if op != "column_sum" or t == "llvm"]
                         + [("column_sum", "cuda")])
def test_schedules_split_sums_by_the_definitions_row_block(op_name, target_name, monkeypatch):
    op = te_defs.get(op_name)
    buffers = SUMS[op_name][2]
    assert _partial_blocks(op_name, target_name) == {b: op.partial_rows for b in buffers}
    changed = 16 if op.partial_rows != 16 else 8
    monkeypatch.setitem(vars(op), "partial_rows", changed)
    assert _partial_blocks(op_name, target_name) == {b: changed for b in buffers}


@pytest.mark.parametrize("op_name", sorted(SUMS))
def test_no_tuning_knob_changes_a_sums_row_block(op_name):
    """The row block is part of the summation order, so it is no knob: a tuning record, whatever it
    holds, leaves the CPU schedule's partials on the definition's blocks."""
    info = targets.get("llvm")
    rule = schedules.rule_for(info.schedules, op_name)
    want = {b: te_defs.get(op_name).partial_rows for b in SUMS[op_name][2]}
    for name, values in rule.space(tvm_api.target(info.tvm_target())).items():
        for value in (values[0], values[-1]):
            assert _partial_blocks(op_name, "llvm", {name: value}) == want, (name, value)


def test_the_dsp_library_names_symbols_by_the_definitions_short_name(monkeypatch):
    op = te_defs.get("lstm_cell_backward")
    assert naming.dsp_kernel_symbol(op.name, "float32", {}) == f"fg_{op.short}_float32"
    monkeypatch.setitem(vars(op), "short", "cellgrad")
    assert naming.dsp_kernel_symbol(op.name, "float32", {"has_bias": True}) == "fg_cellgrad_float32__bias"


def test_a_variants_key_is_its_flags_as_bits_in_the_definitions_order():
    op = te_defs.get("lstm_cell_backward")
    assert op.flags == ("has_grad_hy", "has_grad_cy", "has_bias")
    keys = {op.variant_key(v) for v in op.variants}
    assert keys == set(range(2 ** len(op.flags)))
    assert op.variant_key(op.variant(has_bias=True, has_grad_cy=False, has_grad_hy=True)) == 0b101
    with pytest.raises(ValueError, match="expected the variant flags"):
        op.variant(has_bias=True)


@pytest.mark.parametrize("op_name", ["lstm_cell_backward", "lstm_layer_forward", "matmul", "layer_norm_backward"])
def test_the_c_expression_of_a_variants_key_computes_the_key(op_name):
    """variant_key_c with each flag's C value 0 or 1 (and a further low bit) is, as C evaluates it (| and
    << mean in Python what they mean in C on small ints), variant_key (times two, plus that bit)."""
    op = te_defs.get(op_name)
    for v in op.variants:
        assert eval(op.variant_key_c({f: str(int(v[f])) for f in op.flags})) == op.variant_key(v)
        assert eval(op.variant_key_c({f: f"({int(v[f])})" for f in op.flags}, extra=["1"])) == 2 * op.variant_key(v) + 1
    with pytest.raises(ValueError, match="expected a C value for each of the variant flags"):
        op.variant_key_c({"not_a_flag": "1"})
