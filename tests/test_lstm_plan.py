"""The full LSTM's launch plan: a DAG per configuration, walked in a fixed order; `fusedgrad graph`."""
from __future__ import annotations

import networkx as nx
import pytest

from fusedgrad import cli, lstm


def _cfg(T=3, L=2, D=2, recurrence="step"):
    return lstm.Config(T=T, B=4, I=5, H=6, L=L, D=D, has_biases=True, varlen=False, recurrence=recurrence)


@pytest.mark.parametrize("L,D", [(1, 1), (2, 2), (3, 1)])
def test_layer_plans_launch_one_kernel_per_layer_and_direction(L, D):
    """The CPU's plan: whatever T, one recurrence launch per layer and direction each way, between the
    layer's input GEMM and its output (forward), its gradient and its weight gradients (backward)."""
    for T in (1, 50):
        cfg = _cfg(T=T, L=L, D=D, recurrence="layer")
        g, gb = lstm.plan(cfg), lstm.plan(cfg, backward=True)
        assert sorted(n for n, a in g.nodes(data=True) if a["kind"] == "layer") == sorted(
            ("layer", l, d) for l in range(L) for d in range(D))
        assert sorted(n for n, a in gb.nodes(data=True) if a["kind"] == "blayer") == sorted(
            ("blayer", l, d) for l in range(L) for d in range(D))
        assert not any(a["kind"] in ("step", "bstep") for _, a in [*g.nodes(data=True), *gb.nodes(data=True)])
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


def test_an_unknown_recurrence_is_refused():
    with pytest.raises(ValueError, match=r"recurrence: expected one of \('layer', 'step'\), got 'scan'"):
        lstm.plan(_cfg(recurrence="scan"))


@pytest.mark.parametrize("L,D", [(1, 1), (2, 2), (3, 1)])
def test_forward_plan_has_every_step_once_in_dependency_order(L, D):
    cfg = _cfg(T=4, L=L, D=D)
    g = lstm.plan(cfg)
    assert nx.is_directed_acyclic_graph(g)
    steps = [n for n, a in g.nodes(data=True) if a["kind"] == "step"]
    assert sorted(steps) == sorted(("step", l, d, t) for l in range(L) for d in range(D) for t in range(4))
    walk = lstm.order(cfg)
    pos = {n: i for i, n in enumerate(walk)}
    assert all(pos[u] < pos[v] for u, v in g.edges)
    for l in range(L):
        fwd = [n for n in walk if n[:3] == ("step", l, 0)]
        assert [n[3] for n in fwd] == [0, 1, 2, 3]
        if D == 2:  # the reverse direction runs from the last step down
            assert [n[3] for n in walk if n[:3] == ("step", l, 1)] == [3, 2, 1, 0]
        if l:  # a layer starts after the layer below has produced its whole output
            assert all(pos[("output", l - 1)] < pos[n] for n in walk if n[:2] == ("step", l))


def test_directions_of_a_layer_are_independent():
    g = lstm.plan(_cfg(T=3, L=2, D=2))
    for l in range(2):
        assert not nx.has_path(g, ("step", l, 0, 2), ("step", l, 1, 0))
        assert not nx.has_path(g, ("step", l, 1, 0), ("step", l, 0, 2))
    # so they share a generation: both directions' first steps can run at once
    gens = [set(gen) for gen in nx.topological_generations(g)]
    assert any({("step", 0, 0, 0), ("step", 0, 1, 2)} <= gen for gen in gens)


def test_backward_plan_runs_layers_top_down_and_steps_in_reverse():
    cfg = _cfg(T=3, L=2, D=2)
    g = lstm.plan(cfg, backward=True)
    walk = lstm.order(cfg, backward=True)
    pos = {n: i for i, n in enumerate(walk)}
    assert all(pos[u] < pos[v] for u, v in g.edges)
    assert [n[3] for n in walk if n[:3] == ("bstep", 1, 0)] == [2, 1, 0]
    assert [n[3] for n in walk if n[:3] == ("bstep", 1, 1)] == [0, 1, 2]
    # layer 0 needs the input gradient of layer 1, which needs both directions of layer 1
    assert nx.has_path(g, ("bstep", 1, 1, 2), ("dx", 1))
    assert all(pos[("dx", 1)] < pos[n] for n in walk if n[:2] == ("bstep", 0))
    kinds = {a["kind"] for _, a in g.nodes(data=True)}
    assert kinds == {"grad_output", "bstep", "dw", "dx"}


def test_plan_is_built_once_per_configuration():
    assert lstm.plan(_cfg()) is lstm.plan(_cfg())
    assert lstm.plan(_cfg()) is not lstm.plan(_cfg(T=5))


def test_kept_plans_stay_within_their_byte_budget(monkeypatch):
    """A loop over many sequence lengths keeps at most PLAN_CACHE_BYTES of plans and walks, measured by
    tracemalloc (not as the cache counts them): the least recently used are dropped, the newest kept."""
    import gc
    import tracemalloc

    from fusedgrad.lstm import dag

    budget = 4 << 20
    monkeypatch.setattr(dag, "PLAN_CACHE_BYTES", budget, raising=False)
    lstm.order(_cfg(T=1))  # whatever networkx sets up on first use is not a plan
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for T in range(200, 230):  # 4T + 7 nodes each way: ~0.75 MB a plan, 45 MB for all of them
            for backward in (False, True):
                lstm.order(_cfg(T=T), backward)
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held <= budget, f"the kept plans hold {held} bytes, more than the {budget} bytes allowed"
    newest = _cfg(T=229)
    assert lstm.plan(newest, True) is lstm.plan(newest, True)


def test_a_plan_larger_than_the_budget_is_built_each_time_and_walked_whole(monkeypatch):
    from fusedgrad.lstm import dag

    monkeypatch.setattr(dag, "PLAN_CACHE_BYTES", 1000, raising=False)
    cfg = _cfg(T=3, L=1, D=1)
    assert lstm.plan(cfg) is not lstm.plan(cfg)
    seen = []

    class Handlers:
        def __getattr__(self, kind):
            return lambda *args: seen.append((kind.rstrip("_"), *args))

    lstm.run_plan(cfg, Handlers())
    assert seen == [("input",), ("xw", 0, 0), ("step", 0, 0, 0), ("step", 0, 0, 1), ("step", 0, 0, 2), ("output", 0)]


def test_dot_names_every_node_and_edge():
    g = lstm.plan(_cfg(T=2, L=1, D=2))
    dot = lstm.to_dot(g)
    assert dot.startswith("digraph") and dot.rstrip().endswith("}")
    assert dot.count("->") == g.number_of_edges()
    assert dot.count("step t=") == 4
    assert "layer 0 reverse" in dot and "matmul_packed + lstm_cell_forward" in dot and "pack_bt" in dot


def test_graph_command_writes_both_plans(tmp_path, capsys):
    out = tmp_path / "sub" / "plan.dot"
    assert cli.main(["graph", "--steps", "3", "--layers", "2", "--bidirectional", "--out", str(out)]) == 0
    fwd, bwd = tmp_path / "sub" / "plan-forward.dot", tmp_path / "sub" / "plan-backward.dot"
    assert fwd.read_text() == lstm.to_dot(lstm.plan(lstm.Config(3, 32, 256, 256, 2, 2, True, False)))
    assert "blayer\\nlstm_layer_backward" in bwd.read_text() and "bstep" not in bwd.read_text()
    assert cli.main(["graph", "--steps", "3", "--recurrence", "step", "--out", str(out)]) == 0
    assert "bstep t=2" in bwd.read_text()
    text = capsys.readouterr().out
    assert "up to 2 nodes at once" in text


@pytest.mark.parametrize("argv,word", [(["--steps", "0"], "--steps"), (["--out", "x.png"], "--out")])
def test_graph_command_rejects_bad_arguments(tmp_path, capsys, argv, word):
    args = ["graph", "--out", str(tmp_path / "p.dot")] + argv
    assert cli.main(args) == 2
    assert word in capsys.readouterr().err
    assert not list(tmp_path.glob("*-forward.dot"))
