"""The full LSTM's launch plan: made once per configuration, drawn as a DAG of its stages; `fusedgrad graph`."""
from __future__ import annotations

import networkx as nx
import pytest

from fusedgrad import cli, lstm


def _cfg(T=3, L=2, D=2, B=4):
    return lstm.Config(T=T, B=B, I=5, H=6, L=L, D=D, has_biases=True, varlen=False)


@pytest.mark.parametrize("L,D", [(1, 1), (2, 2), (3, 1)])
def test_layer_plans_launch_one_kernel_per_layer_and_direction(L, D):
    """Whatever T, one recurrence launch per layer and direction each way, between the
    layer's input GEMM and its output (forward), its gradient and its weight gradients (backward)."""
    for T in (1, 50):
        cfg = _cfg(T=T, L=L, D=D)
        g, gb = lstm.graph(cfg), lstm.graph(cfg, backward=True)
        assert sorted(n for n, a in g.nodes(data=True) if a["kind"] == "layer") == sorted(
            ("layer", l, d) for l in range(L) for d in range(D))
        assert sorted(n for n, a in gb.nodes(data=True) if a["kind"] == "blayer") == sorted(
            ("blayer", l, d) for l in range(L) for d in range(D))
        assert g.number_of_nodes() == 1 + L * (2 * D + 1) and gb.number_of_nodes() == 1 + L * (2 * D + 1)
        for l in range(L):
            for d in range(D):
                assert list(g.predecessors(("layer", l, d))) == [("xw", l, d)]
                assert list(g.successors(("layer", l, d))) == [("output", l)]
                assert g.nodes[("layer", l, d)]["kernels"] == ("lstm_layer_forward",)
                assert set(gb.successors(("blayer", l, d))) == {("dw", l, d), ("dx", l)}
        if D == 2:  # the two directions of a layer may run at once
            assert not nx.has_path(g, ("layer", 0, 0), ("layer", 0, 1))
            assert not nx.has_path(gb, ("blayer", 0, 0), ("blayer", 0, 1))


def test_plan_is_made_once_per_configuration():
    """The plan a call runs is an object kept per configuration, not rebuilt (or re-parsed) per call."""
    assert lstm.plan(_cfg()) is lstm.plan(_cfg())
    assert lstm.plan(_cfg(), "backward") is lstm.plan(_cfg(), "backward")
    assert lstm.plan(_cfg()) is not lstm.plan(_cfg(T=5))
    p = lstm.plan(_cfg())
    assert isinstance(p.launches, tuple) and all(isinstance(x.args, tuple) for x in p.launches)


@pytest.mark.parametrize("T,B", [(0, 4), (3, 0)])
def test_a_sequence_without_steps_is_a_plan_of_its_own(T, B):
    """T*B == 0: the forward hands the initial state through, the backward the final state's gradient;
    no kernel runs and the weights' gradients are buffers that start (and stay) zero."""
    cfg = _cfg(T=T, B=B)
    fwd, bwd = lstm.plan(cfg), lstm.plan(cfg, "backward")
    assert [(x.op, x.args[0].buffer, x.args[1].buffer) for x in fwd.launches] == [
        ("copy", "h0", "hy"), ("copy", "c0", "cy")]
    assert [(x.op, x.args[0].buffer, x.args[1].buffer) for x in bwd.launches] == [
        ("copy", "grad_hy", "dh0"), ("copy", "grad_cy", "dc0")]
    grads = [b for b in bwd.buffers if b.name.startswith(("dw_", "db_"))]
    assert len(grads) == cfg.L * cfg.D * 4 and all(b.zero and b.role == "output" for b in grads)
    lstm.launches.validate(fwd.data())
    lstm.launches.validate(bwd.data())


def test_dot_names_every_node_and_edge():
    g = lstm.graph(_cfg(T=2, L=1, D=2))
    dot = lstm.to_dot(g)
    assert dot.startswith("digraph") and dot.rstrip().endswith("}")
    assert dot.count("->") == g.number_of_edges()
    assert "layer 0 reverse" in dot and "gemm\\nlstm_layer_forward" not in dot
    assert "xw\\ngemm" in dot and "layer\\nlstm_layer_forward" in dot


def test_graph_command_writes_both_plans(tmp_path, capsys):
    out = tmp_path / "sub" / "plan.dot"
    assert cli.main(["graph", "--steps", "3", "--layers", "2", "--bidirectional", "--out", str(out)]) == 0
    fwd, bwd = tmp_path / "sub" / "plan-forward.dot", tmp_path / "sub" / "plan-backward.dot"
    assert fwd.read_text() == lstm.to_dot(lstm.graph(lstm.Config(3, 32, 256, 256, 2, 2, True, False)))
    assert "blayer\\nlstm_layer_backward" in bwd.read_text()
    text = capsys.readouterr().out
    n = len(lstm.plan(lstm.Config(3, 32, 256, 256, 2, 2, True, False)).launches)
    assert f"plan-forward.dot: 11 nodes, 12 edges, {n} launches" in text


@pytest.mark.parametrize("argv,word", [(["--steps", "0"], "--steps"), (["--out", "x.png"], "--out")])
def test_graph_command_rejects_bad_arguments(tmp_path, capsys, argv, word):
    args = ["graph", "--out", str(tmp_path / "p.dot")] + argv
    assert cli.main(args) == 2
    assert word in capsys.readouterr().err
    assert not list(tmp_path.glob("*-forward.dot"))
