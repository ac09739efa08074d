"""TargetInfo.op_dtypes: a target may serve an op in fewer dtypes than it and the definition share
(a rule written for float32 only), never in more; a wrong fact is refused when the record is made."""
from __future__ import annotations

import dataclasses

import pytest

from fusedgrad import targets, te_defs

LAYER = ("lstm_layer_forward", "lstm_layer_backward")


def _record(**changes):
    return dataclasses.replace(targets.get("llvm"), name="test-target", **changes)


def test_op_dtypes_narrows_what_the_target_serves():
    assert "float16" in te_defs.get("lstm_cell_backward").dtypes
    info = _record(op_dtypes={"lstm_cell_backward": ("float32",)})
    assert info.dtypes_for("lstm_cell_backward") == ("float32",)
    assert info.serves("lstm_cell_backward", "float32") and not info.serves("lstm_cell_backward", "float16")
    with pytest.raises(ValueError, match=r"supports dtypes \['float32'\] for op 'lstm_cell_backward'"):
        info.check("lstm_cell_backward", "float16")
    # the ops it does not name keep every dtype both support
    assert info.dtypes_for("layer_norm_backward") == targets.get("llvm").dtypes_for("layer_norm_backward")


def test_op_dtypes_cannot_add_a_dtype_the_definition_lacks():
    assert te_defs.get("column_sum").dtypes == ("float32",)
    info = _record(op_dtypes={"column_sum": ("float32", "float16")})
    assert info.dtypes_for("column_sum") == ("float32",)


@pytest.mark.parametrize("op_dtypes, message", [
    ({"lstm_layer_forwrd": ("float32",)}, "op_dtypes: expected an op of .*, got 'lstm_layer_forwrd'"),
    ({"lstm_layer_forward": ("float64",)}, r"op_dtypes\['lstm_layer_forward'\]: expected dtypes of .*float32.*"
                                           r"\(it can only narrow them\), got \['float64'\]"),
    ({"lstm_layer_forward": ("float32", "flaot16")}, r"got \['float32', 'flaot16'\]"),
    ({"lstm_layer_forward": "float32"}, "expected a non-empty tuple of dtypes, got 'float32'"),
    ({"lstm_layer_forward": ()}, r"expected a non-empty tuple of dtypes, got \(\)"),
])
def test_a_wrong_op_dtypes_fact_is_refused(op_dtypes, message):
    with pytest.raises(ValueError, match=f"target 'test-target': .*{message}"):
        _record(op_dtypes=op_dtypes)


def test_an_unknown_op_is_refused_where_the_target_serves_every_op():
    info = _record(ops=None, op_dtypes={"lstm_layer_forwrd": ("float32",)})
    with pytest.raises(ValueError, match=r"op_dtypes: expected registered ops, got \['lstm_layer_forwrd'\]"):
        info.dtypes_for("layer_norm_backward")


def test_the_layer_ops_are_16bit_on_the_dsp_and_cuda_only():
    """The layer definitions serve float16 and bfloat16; the CPU's layer rules are float32 only, so the
    llvm target says so, while the DSP library builds hp_lstm / hp_lstmgrad (float16: its target has no
    bfloat16) and the CUDA rules take either storage dtype (schedules/cuda/lstm_layer.py)."""
    serves = {"llvm": ("float32",), "dsp": ("float32", "float16"), "cuda": ("float32", "float16", "bfloat16")}
    for op in LAYER:
        assert te_defs.get(op).dtypes == ("float32", "float16", "bfloat16")
        for name in targets.names():
            info = targets.get(name)
            if info.ops is None or op in info.ops:
                assert info.dtypes_for(op) == serves.get(name, ("float32",)), name
            else:
                assert name not in serves, name
