"""How the CPU rule lays out the LSTM layer kernels (schedules/llvm/lstm_layer.py): what makes them
fast, checked on the built code (their results: tests/test_lstm_layer.py)."""
from __future__ import annotations

import math
import re

import pytest
from tvm import tirx
from tvm.sym import Analyzer

from fusedgrad import targets
from fusedgrad.lowering import intrinsics, tvm_api
from fusedgrad.schedules import tir_api
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


# CPU classes whose built code is read here whatever this machine is (compiling needs no such CPU):
# AVX2 (x86-64-v3, znver3) and AVX-512 (x86-64-v4, emeraldrapids: 32 registers of 16 lanes)
IR_CPUS = ("x86-64-v3", "znver3", "x86-64-v4", "emeraldrapids")


def _cpu_target(cpu: str):
    info = targets.get("llvm")
    intrinsics.install("llvm", dict(info.intrinsics))
    return tvm_api.target({**info.tvm_target(), "mcpu": cpu, "mtriple": "x86_64-linux-gnu"})


def _workspace_calls(rule, variant, target) -> dict:
    """{LLVM function: TVMBackendAllocWorkspace calls in it} of the rule's kernel built for ``target`` (as
    the rule hands it to lowering: built whole)."""
    func = rule.build(variant, target).with_attr("global_symbol", "k").with_attr(tir_api.WHOLE_ATTR, True)
    exe = tvm_api.compile_module({"k": func}, target)
    mod = exe.mod
    ll = (mod.imports[0] if mod.imports else mod).inspect_source("ll")
    functions = re.split(r"^define ", ll, flags=re.M)[1:]
    return {re.search(r"@([\w.$]+)\(", f).group(1): f.count("@__TVMBackendAllocWorkspace") for f in functions}


@pytest.mark.parametrize("knobs, cpu", [("derived", cpu) for cpu in IR_CPUS] + [("largest", "x86-64-v4")])
@pytest.mark.parametrize("rule, variant", [(lstm_layer.LstmLayerForward, FWD), (lstm_layer.LstmLayerBackward, BWD)],
                         ids=["forward", "backward"])
def test_no_workspace_is_allocated_per_step(rule, variant, knobs, cpu):
    """Tiles and scratch are stack buffers: TVMBackendAllocWorkspace is called before the thread team
    starts (the W_hh panel), never inside its body (once per chunk and step), on every CPU class, with
    the derived knobs and with the largest tile the tuner may choose (more than TVM keeps on the
    stack in one buffer: 8 rows x 4 gates x 64 units on AVX-512)."""
    rule = rule() if knobs == "derived" else rule().tuned({k: max(v) for k, v in rule.KNOBS.items()})
    calls = _workspace_calls(rule, variant, _cpu_target(cpu))
    assert sum(calls.values()) >= 1, calls  # the panel's
    assert not any(n for name, n in calls.items() if "parallel_lambda" in name), calls


def test_register_rows_stay_below_the_stack_limit():
    """A register row at or past TVM's stack limit is refused when the kernel is built, not turned
    into a workspace call per step."""
    with pytest.raises(ValueError, match="stack limit"):
        lstm_layer._Registers("acc", (2,), lstm_layer.STACK_ALLOCA_BYTES // 4)


def test_backward_dh_tile_takes_one_gate_block(target):
    """dh's register tile holds ROWS rows x one gate block's units (the blocks' sums are independent
    until added in order), so its rows are not divided by the gate count: at least 4 rows where
    the register file holds them, no gate loop inside the reduction over j."""
    rule = lstm_layer.LstmLayerBackward()
    rows = rule.knob("ROWS", target)
    assert rows == machine.register_tile_rows(target, rule.units(target)) and rows >= 4
    func = rule.build(BWD, target)
    # the tile's rows are stack buffers acc_0, acc_1, ... (lstm_layer._Registers), each stored in the loop
    tiles = [sorted({s.buffer.name for s in _stmts(j.body)
                     if isinstance(s, tirx.BufferStore) and re.fullmatch(r"acc_\d+", s.buffer.name)})
             for j in _loops(func.body, "j") if not _loops(j.body, "k")]
    tiles = [t for t in tiles if t]
    assert tiles and all(len(t) == rows for t in tiles), tiles


def test_backward_writes_dgates_t_in_vectors_along_b(target):
    """dgates_t [4, H, T, B] runs along b: it is stored in vectors of rows (from a tile the cell
    gradient fills), not one value at a time from the cell's vectors of units."""
    func = lstm_layer.LstmLayerBackward().build(BWD, target)
    lanes = machine.lanes(target)
    along_b = [s for f in _loops(func.body) if f.kind == tirx.ForKind.VECTORIZED and int(f.extent) == lanes
               for s in _stores(f.body, "dgates_t") if f.loop_var.name in str(s.indices[-1])]
    assert along_b


def test_backward_reads_dgates_t_back_from_dgates(target):
    """dgates_t's vectors along b are read back from dgates (in L1 after the rows' cell gradients),
    not from a stack tile the cell's vectors of units fill one value at a time: no store in the
    kernel goes to any buffer but its own outputs (dgates, dgates_t, dh0, dc0), the W_hh panel and
    the register tiles."""
    func = lstm_layer.LstmLayerBackward().build(BWD, target)
    lanes = machine.lanes(target)
    along_b = [s for f in _loops(func.body) if f.kind == tirx.ForKind.VECTORIZED and int(f.extent) == lanes
               for s in _stores(f.body, "dgates_t") if f.loop_var.name in str(s.indices[-1])]
    assert along_b and all(str(s.value).startswith("dgates[") for s in along_b), [str(s.value) for s in along_b]
    written = {s.buffer.name for s in _stmts(func.body) if isinstance(s, tirx.BufferStore)}
    tiles = {name for name in written if re.fullmatch(r"acc1?_\d+", name)}  # the register tiles' rows
    assert tiles and written - tiles <= {"dgates", "dgates_t", "dh0", "dc0", "w_panel"}, written


def _order(nch: int, block, backwards: bool = True) -> list:
    """The chunk each iteration of a phase takes, sweeping backwards or not, in blocks of ``block``."""
    ana = Analyzer()
    flag = tirx.const(backwards)
    return [int(ana.simplify(lstm_layer._sweep(tirx.const(ch, "int32"), nch, flag, block))) for ch in range(nch)]


def _teams_moved(order: list, teams) -> list:
    """The team sizes n (chunk ch runs on thread ch mod n) in which some chunk changes thread."""
    return [n for n in teams if any(order[ch] % n != ch % n for ch in range(len(order)))]


def _cores_target(target, cores):
    spec = {k: v for k, v in target.export().items() if k != "num-cores"}
    return tvm_api.target(spec if cores is None else {**spec, "num-cores": cores})


@pytest.mark.parametrize("cores", [1, 2, 3, 4, 5, 6, 8])
def test_every_other_sweep_reverses_the_chunks_and_keeps_each_threads_own(cores, target):
    """For a target of ``cores`` cores the rule reverses whole blocks of chunks (the last step's last
    panels first), visiting every chunk once and dealing each to the thread that has it in a forward
    sweep for every team size up to the cores; no smaller block does (each breaks some team size)."""
    block = lstm_layer.LstmLayerForward().sweep(_cores_target(target, cores))
    assert block == lstm_layer.LstmLayerBackward().sweep(_cores_target(target, cores))
    teams = range(1, cores + 1)
    for nch in sorted({1, 3, block, block + 1, 2 * block, 2 * block + 1, 3 * block + block // 2}):
        order = _order(nch, block)
        assert _order(nch, block, backwards=False) == list(range(nch))
        assert sorted(order) == list(range(nch))
        whole = nch - nch % block
        blocks = [order[i] // block for i in range(0, whole, block)]
        assert blocks == sorted(blocks, reverse=True) and (whole == 0 or order[0] >= whole - block)
        if whole >= 2 * block:
            assert order != list(range(nch))  # two blocks or more: the sweep does reverse
        assert not _teams_moved(order, teams), (nch, block)
    # every smaller block (two of them: the first moves by one block); past 60, the largest divisors
    smaller = range(1, block) if block <= 60 else [block // p for p in (2, 3, 5, 7) if block % p == 0]
    for other in smaller:
        assert _teams_moved(_order(2 * other, other), teams), other


@pytest.mark.parametrize("cores", [3, 5, None, 64])
def test_the_kernels_sweep_in_the_targets_blocks(cores, target):
    """The built kernels reverse blocks of lcm(1 .. cores) chunks (forward: one phase a step,
    backward: both); without a core count (any team size), or where that block would outgrow any
    int32 chunk count, they take their chunks as they come."""
    tgt = _cores_target(target, cores)
    block = math.lcm(*range(1, cores + 1)) if cores is not None else None
    block = block if block is not None and 2 * block < 2**31 else None
    for rule, variant, phases in ((lstm_layer.LstmLayerForward, FWD, 1), (lstm_layer.LstmLayerBackward, BWD, 2)):
        script = tir_api.script(rule().build(variant, tgt))
        if block is None:
            assert "chunk" not in script
        else:
            assert script.count(f"- {block} - {block} * (ch // {block}) + ch % {block}") == phases, script


@pytest.mark.parametrize("cores, error", [(0, ValueError), (-3, ValueError), (2.0, TypeError), (True, TypeError)])
def test_sweep_block_rejects_a_bad_core_count(cores, error):
    with pytest.raises(error, match="num-cores"):
        lstm_layer.sweep_block(cores)


@pytest.mark.parametrize("rows, forward, backward", [(1, 4, 4), (2, 1, 2), (8, 1, 2)])
def test_the_chunk_is_the_smallest_whose_tile_is_not_load_bound(rows, forward, backward, target, monkeypatch):
    """UNITS_VECTORS follows the register file: the smallest chunk whose tile (rows x the gate
    blocks' vectors) makes at least one FMA a load; where the registers hold one row only, no chunk
    does and the one with the most FMAs a load is taken."""
    monkeypatch.setattr(lstm_layer.machine, "register_tile_rows", lambda tgt, columns: rows)
    assert lstm_layer.LstmLayerForward().knob("UNITS_VECTORS", target) == forward
    assert lstm_layer.LstmLayerBackward().knob("UNITS_VECTORS", target) == backward


_CLASS_RUN = """
import sys, numpy as np, torch, fusedgrad
torch.manual_seed(3)
T, B, I, H = 6, 11, 9, 37  # H not a multiple of any vector width; B past every register tile
m = torch.nn.LSTM(I, H, 1, bidirectional=True)
x = torch.randn(T, B, I)
hx = [torch.randn(2, B, H), torch.randn(2, B, H)]
params = [p.detach() for p in m._flat_weights]
out, hy, cy, i, j, f, o, h, c, tanhc = fusedgrad.lstm_forward(x, hx, params, True, 1, 0.0, True, True)
g = torch.randn(T, B, 2 * H)
dx, (dh0, dc0), dparams = fusedgrad.lstm_backward(g, None, None, x, hx, params, i, j, f, o, h, c, tanhc,
                                                  True, 1, 0.0, True, True)
np.savez(sys.argv[1], out=out.numpy(), dx=dx.numpy(), dh0=dh0.numpy(), dc0=dc0.numpy(),
         **{f"dp{n}": p.numpy() for n, p in enumerate(dparams)})
"""


@pytest.mark.parametrize("cpu", IR_CPUS)
def test_layer_kernels_run_for_every_cpu_class_this_machine_runs(cpu, tmp_path):
    """The full LSTM's forward and backward, its layer kernels built for ``cpu`` (FUSEDGRAD_MCPU, in
    a process of its own), against torch's autograd: every CPU class this machine can run runs for
    real (on an AVX-512 machine the AVX2 classes too), whatever class it builds for by default."""
    import os
    import subprocess
    import sys

    import numpy as np
    import torch

    from fusedgrad.targets import llvm

    why = llvm.cannot_run({"kind": "llvm", "mcpu": cpu, "mtriple": "x86_64-linux-gnu"})
    if why or (llvm.host_triple() or "").split("-")[0] != "x86_64":
        pytest.skip(f"this machine cannot run code built for {cpu}: {why or 'not an x86-64 machine'}")
    dst = tmp_path / "out.npz"
    proc = subprocess.run([sys.executable, "-c", _CLASS_RUN, str(dst)], capture_output=True, text=True,
                          timeout=900, env=dict(os.environ, **{llvm.MCPU_ENV: cpu}))
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = dict(np.load(dst))
    torch.manual_seed(3)
    T, B, I, H = 6, 11, 9, 37
    m = torch.nn.LSTM(I, H, 1, bidirectional=True).double()
    x = torch.randn(T, B, I).double().requires_grad_()
    hx = [torch.randn(2, B, H).double().requires_grad_(), torch.randn(2, B, H).double().requires_grad_()]
    out, _ = m(x, tuple(hx))
    g = torch.randn(T, B, 2 * H).double()
    out.backward(g)
    want = {"out": out, "dx": x.grad, "dh0": hx[0].grad, "dc0": hx[1].grad,
            **{f"dp{n}": p.grad for n, p in enumerate(m._flat_weights)}}
    assert got.keys() == want.keys()
    for name, value in want.items():
        np.testing.assert_allclose(got[name], value.detach().numpy(), rtol=2e-4, atol=2e-5, err_msg=name)
