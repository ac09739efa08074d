"""The LSTM's launch plan as data (fusedgrad.lstm.launches), the driver that runs it (lstm.run) and
`fusedgrad graph --json`."""
from __future__ import annotations

import json
import re

import networkx as nx
import numpy as np
import pytest

from fusedgrad import cli, lstm, te_defs
from fusedgrad.lstm import launches, run


def _cfg(T=5, B=3, I=7, H=6, L=2, D=2, has_biases=True, varlen=True):
    return lstm.Config(T=T, B=B, I=I, H=H, L=L, D=D, has_biases=has_biases, varlen=varlen)


def _plain(v) -> bool:
    """Only JSON's own types: dict with str keys, list, str, int, bool."""
    if isinstance(v, dict):
        return all(isinstance(k, str) and _plain(x) for k, x in v.items())
    if isinstance(v, list):
        return all(_plain(x) for x in v)
    return isinstance(v, (str, int, bool))


def _paths(plan) -> nx.DiGraph:
    g = nx.DiGraph()
    g.add_nodes_from(range(len(plan["launches"])))
    g.add_edges_from((i, j) for j, x in enumerate(plan["launches"]) for i in x["after"])
    return g


CASES = [(_cfg(), "forward", True, True), (_cfg(), "forward", False, True), (_cfg(), "backward", True, True),
         (_cfg(), "backward", True, False),
         (_cfg(T=1, L=1, D=1, has_biases=False, varlen=False), "backward", True, True),
         (_cfg(L=3, D=1, varlen=False), "forward", True, True)]


@pytest.mark.parametrize("cfg,pass_,train,need_dx", CASES)
def test_plan_data_round_trips_json_and_validates(cfg, pass_, train, need_dx):
    plan = launches.build(cfg, pass_, train, need_dx)
    assert _plain(plan) and plan["schema"] == launches.SCHEMA
    launches.validate(plan)
    text = launches.dumps(plan)
    assert launches.loads(text) == plan and json.loads(text) == plan
    assert launches.build(cfg, pass_, train, need_dx) is not plan  # a new object each call


def test_bidirectional_two_layer_varlen_plan_has_the_expected_launches():
    cfg = _cfg()
    T, B, I, H, L, D = cfg.T, cfg.B, cfg.I, cfg.H, cfg.L, cfg.D
    fwd = launches.build(cfg, "forward")
    bufs = {b["name"]: b for b in fwd["buffers"]}
    for name in ("h", "c", "i", "f", "g", "o", "tanhc"):
        assert bufs[name]["shape"] == [L * D, T, B, H] and bufs[name]["role"] == "saved"
    assert bufs["y"]["shape"] == [T * B, D * H] and bufs["y"]["role"] == "output"
    assert {n for n, b in bufs.items() if b["role"] == "input"} == {"x", "h0", "c0", "batch_sizes"} | {
        f"{w}.{l}.{d}" for w in ("w_ih", "w_hh", "b_ih", "b_hh") for l in range(L) for d in range(D)}
    assert bufs["batch_sizes"]["dtype"] == "int32" and bufs["w_ih.1.0"]["shape"] == [4 * H, D * H]
    names = {op: [t.name for t in (*te_defs.get(op).inputs, *te_defs.get(op).outputs)]
             for op in ("lstm_layer_forward", "lstm_layer_backward")}
    layers = [(n, x) for n, x in enumerate(fwd["launches"]) if x["op"] == "lstm_layer_forward"]
    assert len(layers) == L * D
    g = _paths(fwd)
    for k, (n, x) in enumerate(layers):  # layer by layer, forward direction first
        l, d = divmod(k, D)
        assert x["stage"] == f"layer.{l}.{d}" and x["variant"] == {"train": True, "reverse": d == 1}
        assert [a["param"] for a in x["args"]] == names["lstm_layer_forward"]
        h = next(a for a in x["args"] if a["param"] == "h")
        assert h["buffer"] == "h" and h["view"] == {"offset": k * T * B * H, "shape": [T, B, H],
                                                     "strides": [B * H, H, 1]}
        w = next(a for a in x["args"] if a["param"] == "w_hh")
        assert w["buffer"] == f"w_hh.{l}.{d}" and w["view"]["shape"] == [4, H, H]
        if l:  # a layer reads both directions of the layer below
            assert all(nx.has_path(g, layers[(l - 1) * D + e][0], n) for e in range(D))
    for l in range(L):  # the two directions of a layer may run at once
        a, b = layers[l * D][0], layers[l * D + 1][0]
        assert not nx.has_path(g, a, b) and not nx.has_path(g, b, a)

    bwd = launches.build(cfg, "backward")
    ops = [x["op"] for x in bwd["launches"]]
    assert ops.count("lstm_layer_backward") == L * D and ops.count("column_sum") == L * D
    # varlen: per layer one masked layer input and one masked h_{t+1} for the reverse direction's dW_hh
    assert ops.count("zero_past_batch") == 2 * L and ops.count("gather_last_steps") == L
    g = _paths(bwd)
    blayers = {x["stage"]: n for n, x in enumerate(bwd["launches"]) if x["op"] == "lstm_layer_backward"}
    assert list(blayers) == [f"blayer.{l}.{d}" for l in reversed(range(L)) for d in range(D)]
    for n in blayers.values():
        assert [a["param"] for a in bwd["launches"][n]["args"]] == names["lstm_layer_backward"]
    for d in range(D):
        # a lower layer overwrites dgates.d only after the upper layer's weight gradients have read it
        readers = [n for n, x in enumerate(bwd["launches"]) if x["stage"] == f"dw.1.{d}"
                   and any(a["buffer"] == f"dgates.{d}" and a["io"] == "in" for a in x["args"])]
        assert readers and all(nx.has_path(g, n, blayers[f"blayer.0.{d}"]) for n in readers)
    assert not nx.has_path(g, blayers["blayer.1.0"], blayers["blayer.1.1"])
    outs = {b["name"]: b["shape"] for b in bwd["buffers"] if b["role"] == "output"}
    assert outs["dx"] == [T * B, I] and outs["dw_ih.1.1"] == [4 * H, D * H] and outs["db_hh.0.1"] == [4 * H]
    no_dx = launches.build(cfg, "backward", need_dx=False)
    assert "dx" not in {b["name"] for b in no_dx["buffers"]}
    assert len(no_dx["launches"]) == len(bwd["launches"]) - D  # layer 0's dgates·W_ih GEMMs


def _damaged():
    """(field named, damage) pairs on a forward plan of _cfg()."""
    def launch_of(plan, op):
        return next(n for n, x in enumerate(plan["launches"]) if x["op"] == op)

    def at(op, then):
        return lambda p: then(p, launch_of(p, op))

    return [
        ("schema", lambda p: p.update(schema=launches.SCHEMA + 1)),
        ("config.T", lambda p: p["config"].update(T=-1)),
        ("buffers[0].role", lambda p: p["buffers"][0].pop("role")),
        ("buffers[1].dtype", lambda p: p["buffers"][1].update(dtype="float64")),
        ("stages[1].after", lambda p: p["stages"][1].update(after=["nowhere"])),
        ("launches[0].after", lambda p: p["launches"][0].update(after=[0])),
        ("op", at("add", lambda p, n: p["launches"][n].update(op="scan"))),
        ("variant", at("lstm_layer_forward", lambda p, n: p["launches"][n].update(variant={"train": "yes"}))),
        ("args", at("lstm_layer_forward", lambda p, n: p["launches"][n]["args"].pop())),
        ("args[0].param", at("lstm_layer_forward", lambda p, n: p["launches"][n]["args"].reverse())),
        ("args[0].buffer", at("gemm", lambda p, n: p["launches"][n]["args"][0].update(buffer="nothing"))),
        ("args[4].buffer", at("lstm_layer_forward", lambda p, n: p["launches"][n]["args"][4].update(buffer="x"))),
        ("args[2].buffer", at("add", lambda p, n: p["launches"][n]["args"][2].update(buffer="b_ih.0.0"))),
        ("args[0].view", at("add", lambda p, n: p["launches"][n]["args"][0]["view"].update(offset=10 ** 6))),
        ("args[1].view.strides", at("gemm", lambda p, n: p["launches"][n]["args"][1]["view"].update(strides=[1]))),
        ("args[1].view.shape", at("lstm_layer_forward",
                                  lambda p, n: p["launches"][n]["args"][1]["view"].update(shape=[4, 6, 5]))),
    ]


@pytest.mark.parametrize("field,damage", _damaged(), ids=[f for f, _ in _damaged()])
def test_validator_refuses_a_damaged_plan_naming_the_field(field, damage):
    plan = launches.build(_cfg(), "forward")
    damage(plan)
    with pytest.raises(ValueError, match=r"plan: (launches\[\d+\]\.)?" + re.escape(field) + r": (\w+: )?expected"):
        launches.validate(plan)
    with pytest.raises(ValueError, match=re.escape(field)):
        launches.loads(json.dumps(plan))


def test_build_refuses_what_it_cannot_plan():
    with pytest.raises(ValueError, match=r"pass_: expected one of \('forward', 'backward'\), got 'sideways'"):
        launches.build(_cfg(), "sideways")
    with pytest.raises(TypeError, match="cfg: expected a fusedgrad.lstm.Config, got dict"):
        launches.build({"T": 3})
    with pytest.raises(ValueError, match="plan: expected JSON text"):
        launches.loads("{")


def _call(seed=0, L=2, D=2, lengths=(5, 3, 2)):
    rng = np.random.default_rng(seed)
    T, B, I, H = max(lengths), len(lengths), 7, 6
    lens = np.asarray(lengths)
    bs = [int((lens > t).sum()) for t in range(T)]
    x = rng.standard_normal((T * B, I)).astype(np.float32)
    params = [rng.standard_normal(s).astype(np.float32) * 0.4 for l in range(L) for _ in range(D)
              for s in ((4 * H, I if l == 0 else D * H), (4 * H, H), (4 * H,), (4 * H,))]
    hx = [rng.standard_normal((L * D, B, H)).astype(np.float32) for _ in range(2)]
    grads = [rng.standard_normal(s).astype(np.float32) for s in ((T * B, D * H), (L * D, B, H), (L * D, B, H))]
    fwd = lstm.lstm_forward(x, hx, params, True, L, 0.0, True, D == 2, False, bs)
    dx, dh, dp = lstm.lstm_backward(*grads, x, hx, params, *fwd[3:], True, L, 0.0, True, D == 2, False, bs)
    return [np.asarray(a) for a in (*fwd, dx, *dh, *dp)]


def test_driver_runs_the_plan_loaded_back_from_json_to_the_same_bits(monkeypatch):
    built = _call()
    loaded = []

    def from_json(cfg, pass_, train=True, need_dx=True):
        text = launches.dumps(launches.build(cfg, pass_, train, need_dx))
        loaded.append(pass_)
        return launches.Plan.of(launches.loads(text))

    monkeypatch.setattr(lstm, "plan", from_json)
    again = _call()
    assert loaded == ["forward", "backward"]
    assert len(again) == len(built) and all(a.tobytes() == b.tobytes() for a, b in zip(built, again))


def test_driver_does_what_the_data_says(monkeypatch):
    """The output copy of a 2-layer unidirectional forward redirected to layer 0's h: y is layer 0's h."""
    def redirected(cfg, pass_, train=True, need_dx=True):
        plan = launches.build(cfg, pass_, train, need_dx)
        if pass_ == "backward":
            return launches.Plan.of(plan)
        (copy_,) = [x for x in plan["launches"] if x["op"] == "copy"]
        assert copy_["args"][0]["view"]["offset"] == cfg.T * cfg.B * cfg.H  # layer 1's h
        copy_["args"][0]["view"]["offset"] = 0
        return launches.Plan.of(plan)

    normal = _call(L=2, D=1)
    monkeypatch.setattr(lstm, "plan", redirected)
    out = _call(L=2, D=1, seed=0)
    h = out[7]  # [L*D, T, B, H]
    assert out[0].tobytes() == h[0].reshape(out[0].shape).tobytes()
    assert out[0].tobytes() != normal[0].tobytes() and h.tobytes() == normal[7].tobytes()


def test_run_refuses_a_bound_array_of_another_shape():
    cfg = _cfg(L=1, D=1, varlen=False)
    plan = launches.plan(cfg)
    with pytest.raises(ValueError, match=r"x: expected shape \[15, 7\] \(the plan's buffer\), got \[15, 8\]"):
        run.run(plan, {"x": np.zeros((15, 8), np.float32)}, lstm.Workspace(), {})


def test_graph_command_writes_the_plan_data(tmp_path, capsys):
    out = tmp_path / "plan.dot"
    argv = ["graph", "--steps", "3", "--layers", "2", "--bidirectional", "--varlen", "--json", "--out", str(out)]
    assert cli.main(argv) == 0
    printed = capsys.readouterr().out
    cfg = lstm.Config(3, 32, 256, 256, 2, 2, True, True)
    for pass_ in ("forward", "backward"):
        data = launches.loads((tmp_path / f"plan-{pass_}.json").read_text())
        assert data == launches.build(cfg, pass_)
        dot = (tmp_path / f"plan-{pass_}.dot").read_text()
        assert dot == lstm.to_dot(lstm.graph_of(data))
        assert f"plan-{pass_}.dot: 11 nodes, 12 edges, {len(data['launches'])} launches" in printed
    assert "gather_last_steps" in (tmp_path / "plan-backward.dot").read_text()
