"""The launch plan for every size at once (fusedgrad.lstm.symbolic) and its C tables
(op_host/fg_lstm_plan.h of the Ascend package): evaluated for a configuration, both are what
launches.build gives for it."""
from __future__ import annotations

import itertools
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import toolchain_missing
from fusedgrad import lstm
from fusedgrad.lowering.ascend import lstm as ascend_lstm
from fusedgrad.lstm import launches, symbolic
from fusedgrad.lstm.symbolic import Expr, Layer

HERE = Path(__file__).parent
SIZES = ((5, 3, 7, 6), (1, 1, 2, 3), (4, 2, 9, 5), (0, 2, 3, 4))
PASSES = (("forward", True, True), ("forward", False, True), ("backward", True, True), ("backward", True, False))


def _configs():
    for (T, B, I, H), L, D, hb, vl in itertools.product(SIZES, (1, 2, 3, 5), (1, 2), (False, True), (False, True)):
        for pass_, train, need_dx in PASSES:
            yield lstm.Config(T=T, B=B, I=I, H=H, L=L, D=D, has_biases=hb, varlen=vl), pass_, train, need_dx


def _built(cfg, pass_, train, need_dx) -> dict:
    """launches.build's plan less what the symbolic plan leaves out (stages, launches' stage and after)."""
    plan = launches.build(cfg, pass_, train, need_dx)
    return {"buffers": {b["name"]: b for b in plan["buffers"]},
            "launches": [{k: x[k] for k in ("op", "variant", "args")} for x in plan["launches"]]}


def test_symbolic_plan_evaluates_to_the_built_plan():
    """At every size with steps.  Without (T*B == 0) the Python host's plan is its own case (two state
    copies), while the compiled host evaluates the general plan, whose launches are then all empty."""
    n = 0
    for cfg, pass_, train, need_dx in _configs():
        if cfg.T * cfg.B:
            assert symbolic.instance(cfg, pass_, train, need_dx) == _built(cfg, pass_, train, need_dx), (cfg, pass_)
            n += 1
    assert n == (len(SIZES) - 1) * 4 * 2 * 2 * 2 * len(PASSES)


def test_templates_hold_the_sizes_as_expressions():
    tmpl = symbolic.template("forward", 2, True, False)
    between = tmpl["between"]["body"]
    gemm = next(x for x in between if x["op"] == "gemm")
    a = gemm["args"][0]
    T, B, H = (Expr.var(v) for v in "TBH")
    assert a["buffer"] == "y.{l-1}" and a["view"]["shape"] == [T * B, 2 * H]  # the layer below's output
    layer = next(x for x in between if x["op"] == "lstm_layer_forward")
    h = next(x for x in layer["args"] if x["param"] == "h")
    assert h["view"]["offset"] == 2 * Expr.var("l") * T * B * H  # (l·D + d)·T·B·H, d = 0
    assert [x["op"] for x in tmpl["first"]["head"]] == ["add", "add"]  # b_ih + b_hh, both directions
    assert [b["name"] for b in tmpl["last"]["buffers"] if "{l" in b["name"]][:2] == ["w_ih.{l}.0", "w_hh.{l}.0"]


def test_expressions_refuse_what_a_plan_cannot_mean():
    T, l = Expr.var("T"), Layer("between")
    with pytest.raises(TypeError, match="no truth value"):
        bool(T - 1)
    with pytest.raises(TypeError, match="compared with 2"):
        l == 2  # noqa: B015 (the comparison is what is tested)
    with pytest.raises(TypeError, match="l \\+ n"):
        f"y.{T}"
    assert f"y.{l - 1}.{l}.{l + 2}" == "y.{l-1}.{l}.{l+2}"
    assert symbolic.name_at("dy.{l-1}.part", 3) == "dy.2.part"
    assert (l == 0, l == Expr.var("L") - 1, bool(l)) == (False, False, True)
    assert (Layer("only") == 0, Layer("only") == Expr.var("L") - 1, Layer("last") == 0) == (True, True, False)
    assert ((T + 2) * (T - 2)).evaluate({"T": 5}) == 21 and repr(2 * T * Expr.var("B") - 1) == "2*T*B + -1"
    with pytest.raises(ValueError, match="D: expected 1 or 2"):
        symbolic.template("forward", 3, True, False)


def _harness(tmp_path: Path) -> Path:
    cxx = shutil.which("g++")
    if cxx is None:
        toolchain_missing("needs g++ (Debian package g++; .ci/run installs it)")
    (tmp_path / "fg_lstm_plan.h").write_text(ascend_lstm.files()["op_host/fg_lstm_plan.h"])
    exe = tmp_path / "harness"
    subprocess.run([cxx, "-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror", f"-I{tmp_path}", "-o", str(exe),
                    str(HERE / "lstm_plan_harness.cpp")], check=True, capture_output=True, text=True)
    return exe


def test_c_tables_evaluate_to_the_built_plan(tmp_path):
    exe = _harness(tmp_path)
    cases = list(_configs())
    lines = [" ".join(str(int(v)) for v in (p == "backward", c.D, c.has_biases, c.varlen, tr, nd, c.T, c.B, c.I, c.H, c.L))
             for c, p, tr, nd in cases]
    out = subprocess.run([str(exe)], input="\n".join(lines) + "\n", check=True, capture_output=True, text=True).stdout
    got = out.splitlines()
    assert len(got) == len(cases)
    for line, (cfg, pass_, train, need_dx) in zip(got, cases):  # T*B == 0: the general plan, as Python evaluates it
        want = _built(cfg, pass_, train, need_dx) if cfg.T * cfg.B else symbolic.instance(cfg, pass_, train, need_dx)
        assert json.loads(line) == want, (cfg, pass_, train, need_dx)


def test_c_tables_are_the_generated_package_header():
    path = Path(__file__).parents[1] / "generated" / "ascend" / "lstm" / "op_host" / "fg_lstm_plan.h"
    assert path.read_text().endswith(ascend_lstm.files()["op_host/fg_lstm_plan.h"])  # after the stamp


@pytest.mark.parametrize("key", [k for k in symbolic.variants() if k[0] == "backward"],
                         ids=lambda k: f"D{k[1]} bias{int(k[2])} varlen{int(k[3])} need_dx{int(k[5])}")
def test_dparams_only_marks_what_only_the_parameter_gradients_need(key):
    """In every backward plan of 1 to 3 layers the launches dparams_only marks write a parameter's
    gradient (dw_*, db_*) or a workspace buffer only such launches read; every launch writing a
    parameter's gradient is marked, and none writing dx, dh0 or dc0."""
    tmpl, only = symbolic.template(*key), symbolic.dparams_only(key)
    assert any(only.values()) and not all(only.values())
    for L in (1, 2, 3):
        kinds = symbolic.kinds_of(L)
        steps = [(x, l, only[kinds[l], part, i]) for l in range(L) for part in ("head", "body")
                 for i, x in enumerate(tmpl[kinds[l]][part])]
        readers: dict = {}
        for x, l, marked in steps:
            for a in x["args"]:
                if a["io"] == "in":
                    readers.setdefault(symbolic.name_at(a["buffer"], l), []).append(marked)
        for x, l, marked in steps:
            outs = [symbolic.name_at(a["buffer"], l) for a in x["args"] if a["io"] == "out"]
            grads = [n for n in outs if n.startswith(("dw_", "db_"))]
            assert not grads or marked, (L, x["op"], outs)
            if marked:
                assert not {"dx", "dh0", "dc0"} & set(outs), (L, x["op"], outs)
                assert all(n in grads or all(readers.get(n, [True])) for n in outs), (L, x["op"], outs)


def test_the_host_keeps_dgates_t_as_dgates_and_gathered_rows_k_major():
    """fg_lstm_keep: each direction's dgates_t lives in its dgates (K-major), e_t (gather_last_steps'
    output) K-major in its own storage, everything else as the plan has it; a K-major family read by
    anything but a GEMM's A is refused."""
    from fusedgrad.lowering.ascend import lstm_plan

    t = symbolic.tables()
    keep = dict(zip(t["families"], lstm_plan.keep(t)))
    fam = {f: i for i, f in enumerate(t["families"])}
    for d in (0, 1):
        assert keep[f"dgates_t.{d}"][:2] == (fam[f"dgates.{d}"], 1)
        assert keep[f"dgates.{d}"][:2] == (fam[f"dgates.{d}"], 0)
    assert keep["e_t.{l}.1"][:2] == (fam["e_t.{l}.1"], 1)
    assert [f for f, (store, kmajor, _) in keep.items() if kmajor] == ["dgates_t.0", "dgates_t.1", "e_t.{l}.1"]
    assert keep["w_ih.{l}.0"][2] == 1 and keep["grad_hy"][2] == 0  # x . W_ih^T; the layer op reads grad_hy
    copy = t["ops"].index("copy")
    (src,) = [i for i, p in enumerate(t["params"]) if p == "src"]
    e_t = next(i for i, (f, _, _) in enumerate(t["at"]) if t["families"][f] == "e_t.{l}.1")
    bad = dict(t, args=t["args"] + [(src, e_t, 0, 0)], launches=t["launches"] + [(copy, 0, 0, len(t["args"]), 1, 0)])
    with pytest.raises(ValueError, match=r"e_t.\{l\}.1 is kept K-major but read as \[\('copy', 'src'\)"):
        lstm_plan.keep(bad)


def test_the_parameters_families_are_the_plans_in_params_order():
    """fg_lstm_param_families: [gradient][direction][k] is the family of params' k-th tensor of that
    direction (w_ih, w_hh, b_ih, b_hh) or of its gradient; a plan without one of them is refused."""
    from fusedgrad.lowering.ascend import lstm_plan

    fams = symbolic.tables()["families"]
    rows = lstm_plan.param_families(fams)
    for grad in ("", "d"):
        for d in (0, 1):
            want = ", ".join(lstm_plan.enum_name("FG_PB_", f"{grad}{p}.{{l}}.{d}") for p in ("w_ih", "w_hh", "b_ih", "b_hh"))
            assert "{" + want + "}" in rows
    assert rows.index("FG_PB_W_IH_L_1") < rows.index("FG_PB_DW_IH_L_0")  # the parameters before their gradients
    with pytest.raises(ValueError, match=r"no \['db_hh.\{l\}.1'\]"):
        lstm_plan.param_families([f for f in fams if f != "db_hh.{l}.1"])
