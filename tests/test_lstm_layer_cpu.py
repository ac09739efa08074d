"""How the CPU rule lays out the LSTM layer kernels (schedules/llvm/lstm_layer.py): what makes them
fast, checked on the built code (their results: tests/test_lstm_layer.py)."""
from __future__ import annotations

import re

import pytest
from tvm import tirx
from tvm.sym import Analyzer

from fusedgrad import targets
from fusedgrad.lowering import intrinsics, tvm_api
from fusedgrad.schedules.llvm import lstm_layer, machine

FWD = {"train": True, "reverse": False}
BWD = {"reverse": False}


@pytest.fixture(scope="module")
def target():
    info = targets.get("llvm")
    intrinsics.install("llvm", dict(info.intrinsics))
    return tvm_api.target(info.tvm_target())


def _stmts(stmt) -> list:
    """Every statement under ``stmt`` (itself included), parents first."""
    out, todo = [], [stmt]
    while todo:
        node = todo.pop()
        if node is None:
            continue
        out.append(node)
        for field in ("body", "then_case", "else_case"):
            if hasattr(node, field):
                todo.append(getattr(node, field))
        if isinstance(node, tirx.SeqStmt):
            todo.extend(node.seq)
    return out


def _loops(stmt, name=None) -> list:
    return [s for s in _stmts(stmt) if isinstance(s, tirx.For) and (name is None or s.loop_var.name == name)]


def _stores(stmt, buffer: str) -> list:
    return [s for s in _stmts(stmt) if isinstance(s, tirx.BufferStore) and s.buffer.name == buffer]


@pytest.mark.parametrize("rule, variant", [(lstm_layer.LstmLayerForward, FWD), (lstm_layer.LstmLayerBackward, BWD)],
                         ids=["forward", "backward"])
def test_no_workspace_is_allocated_per_step(rule, variant, target):
    """Tiles and scratch are stack buffers: TVMBackendAllocWorkspace is called before the thread team
    starts (the W_hh panel), never inside its body (once per chunk and step)."""
    exe = tvm_api.compile_module({"k": rule().build(variant, target).with_attr("global_symbol", "k")}, target)
    mod = exe.mod
    ll = (mod.imports[0] if mod.imports else mod).inspect_source("ll")
    functions = re.split(r"^define ", ll, flags=re.M)[1:]
    calls = {re.search(r"@([\w.$]+)\(", f).group(1): f.count("@__TVMBackendAllocWorkspace") for f in functions}
    assert sum(calls.values()) >= 1, calls  # the panel's
    assert not any(n for name, n in calls.items() if "parallel_lambda" in name), calls


def test_backward_dh_tile_takes_one_gate_block(target):
    """dh's register tile holds ROWS rows x one gate block's units (the blocks' sums are independent
    until added in order), so its rows are not divided by the gate count: at least 4 rows where
    the register file holds them, no gate loop inside the reduction over j."""
    rule = lstm_layer.LstmLayerBackward()
    rows = rule.knob("ROWS", target)
    assert rows == machine.register_tile_rows(target, rule.units(target)) and rows >= 4
    func = rule.build(BWD, target)
    tiles = [[int(f.extent) for f in _loops(j.body, "rr")] for j in _loops(func.body, "j")
             if _stores(j.body, "acc") and not _loops(j.body, "k")]
    assert tiles and all(extents == [rows] for extents in tiles), tiles


def test_backward_writes_dgates_t_in_vectors_along_b(target):
    """dgates_t [4, H, T, B] runs along b: it is stored in vectors of rows (from a tile the cell
    gradient fills), not one value at a time from the cell's vectors of units."""
    func = lstm_layer.LstmLayerBackward().build(BWD, target)
    lanes = machine.lanes(target)
    along_b = [s for f in _loops(func.body) if f.kind == tirx.ForKind.VECTORIZED and int(f.extent) == lanes
               for s in _stores(f.body, "dgates_t") if f.loop_var.name in str(s.indices[-1])]
    assert along_b


@pytest.mark.parametrize("nch", [1, 3, 4, 8, 9, 16, 17, 32])
def test_every_other_sweep_reverses_the_chunks_and_keeps_each_threads_own(nch):
    """A backwards sweep visits every chunk once, whole blocks of SWEEP in the opposite order (the
    last step's last panels first), and deals each chunk to the thread that has it in a forward
    sweep for any team size dividing SWEEP."""
    ana = Analyzer()
    order = [int(ana.simplify(lstm_layer._sweep(tirx.const(ch, "int32"), nch, tirx.const(True)))) for ch in range(nch)]
    same = [int(ana.simplify(lstm_layer._sweep(tirx.const(ch, "int32"), nch, tirx.const(False)))) for ch in range(nch)]
    assert same == list(range(nch))
    assert sorted(order) == list(range(nch))
    whole = nch - nch % lstm_layer.SWEEP
    blocks = [order[i] // lstm_layer.SWEEP for i in range(0, whole, lstm_layer.SWEEP)]
    assert blocks == sorted(blocks, reverse=True) and (whole == 0 or order[0] >= whole - lstm_layer.SWEEP)
    for n in (d for d in range(1, lstm_layer.SWEEP + 1) if lstm_layer.SWEEP % d == 0):
        assert all(order[ch] % n == ch % n for ch in range(nch)), n
