"""The Ascend vector compiler's input and its reading of it: the ops' schedules as TIR
(schedules/ascend/vector.py) and the vector Programs lowering/ascend/vector.py makes of their blocks
(the kernels' numerics are tests/test_ascend_kernels.py's and test_ascend_layer_norm.py's)."""
import pytest

from fusedgrad import te_defs
from fusedgrad.schedules import tir_api
from fusedgrad.lowering.ascend import Variant, gates, op_package
from fusedgrad.lowering.ascend.vector import Lowerer, store
from fusedgrad.schedules import block_names
from fusedgrad.schedules.ascend import vector as vector_schedules


def test_the_lstm_cells_stages_are_inlined_into_its_outputs():
    sch, _ = vector_schedules.schedule("lstm_cell_backward", "float16", has_grad_hy=True, has_grad_cy=True,
                                       has_bias=True)
    assert block_names(sch) == ["grad_gates", "grad_cx", "grad_bias_acc", "grad_bias"]


def test_the_layer_norm_keeps_its_per_row_scalars():
    sch, _ = vector_schedules.schedule("layer_norm_backward", "float32")
    assert {"rstd", "sum_dyg", "sum_dyg_xhat", "dx"} <= set(block_names(sch))


def test_each_gate_slice_folds_its_gate_test_and_reads_each_gate_once():
    prog, outs = gates.program(op_package("lstm_cell_backward"), "float32", Variant(True, True, True))
    assert [k for k, _ in outs] == [("grad_gates", g) for g in range(4)] + [("grad_cx", None)]
    assert sorted(k for k in prog.streams if k[0] == "storage") == [("storage", g) for g in range(4)]
    assert len(set(prog.streams)) == len(prog.streams)
    assert len({v for _, v in outs}) == 5  # four different gate gradients and grad_cx
    # grad_o (gate 3) without grad_hy is a constant zero: no instruction, a constant output
    _, outs = gates.program(op_package("lstm_cell_backward"), "float32", Variant(False, True, False))
    assert dict(outs)[("grad_gates", 3)] == ("const", 0.0)


def test_a_stage_left_to_inline_is_refused():
    args = te_defs.get("lstm_cell_backward").compute("float32")
    sch = tir_api.schedule(tir_api.prim_func(args, "k", "lstm_cell_backward"))  # not scheduled: grad_c stays
    with pytest.raises(ValueError, match="grad_c is neither a parameter nor a per-row scalar"):
        Lowerer(sch.mod["main"]).value(store(sch, "grad_cx").value)
