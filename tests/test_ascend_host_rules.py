"""The aclnn host code's generator (lowering/ascend/host_checks.py) and the rules it reads: every
op's aclnn parameters name each input and output of its te_defs definition exactly once and bind
every variant flag; a rule that does not is refused; both ops' host code comes from the one
template; its kernel tables name the kernels the kernel pattern makes, with the variant keys the
first phase computes; another signature over a definition is only another rule."""
import dataclasses
import shutil
from pathlib import Path

import pytest

import build_cache

from fusedgrad import targets, te_defs
from fusedgrad.lowering.ascend import fixed, gates, host, host_checks, op_package, patterns
from fusedgrad.schedules.ascend import PACKAGES
from fusedgrad.schedules.ascend.records import Flag, Out, OutputMask, Tensor, Unused

OPS = [p.op for p in PACKAGES]
TWIN = Path(__file__).with_name("ascend_twin")


@pytest.mark.parametrize("op", OPS)
def test_the_aclnn_parameters_name_each_tensor_of_the_definition_once(op):
    rule, opdef = op_package(op), te_defs.get(op)
    host_checks.validate(rule)
    named = [p.te for p in rule.aclnn if isinstance(p, (Tensor, Out))]
    assert sorted(named) == sorted(s.name for s in opdef.inputs + opdef.outputs)
    slots = host_checks.slots(rule)
    assert [s.param.te for s in slots] == named  # the kernels' tensors in the API's order
    assert {s.gm for s in slots} == set(rule.gm.values())


def _broken(rule, aclnn):
    return dataclasses.replace(rule, aclnn=tuple(aclnn))


@pytest.mark.parametrize("change, said", [
    (lambda ps: [p for p in ps if p.name != "gradCxOut"], "outputs name"),  # an output left out
    (lambda ps: ps + [Tensor("cx2", "cx")], "inputs name"),  # an input named twice
    (lambda ps: [p for p in ps if not isinstance(p, Flag)], "variant flags"),  # has_bias bound by nothing
    (lambda ps: [Tensor(p.name, p.te) if p.name == "gradHyOptional" else p for p in ps], "must be optional"),
    (lambda ps: [p for p in ps if p.name != "storage"] + [Tensor("storage", "storage")], "follow the inputs"),
])
def test_a_rule_that_does_not_cover_its_definition_is_refused(change, said):
    rule = op_package("lstm_cell_backward")
    broken = _broken(rule, change(list(rule.aclnn)))
    with pytest.raises(ValueError, match=said):
        host_checks.validate(broken)
    with pytest.raises(ValueError):
        host.host_source(broken)


def test_every_op_goes_through_the_one_template():
    assert not list(targets.runtime_source_dir(targets.get("ascend")).glob("*_host.cpp.in"))
    for op in OPS:
        src = host.host_source(op_package(op)).splitlines()
        fixed_lines = [line for line in fixed.text("host.cpp.in").splitlines() if "@" not in line]
        assert [line for line in fixed_lines if line not in src] == []


@pytest.mark.parametrize("op", OPS)
def test_the_kernel_tables_name_the_kernels_the_pattern_makes(op):
    rule = op_package(op)
    pattern = patterns.pattern(rule.kernel)
    table = host_checks.entries(rule)
    bits = host_checks.variant_bits(rule, host_checks.slots(rule))
    for dtype in targets.get("ascend").dtypes_for(op):
        parts = [part for _, part, _ in table[dtype]]
        assert sorted(parts) == sorted(pattern.entries(rule, dtype))
        keys = [key for key, _, _ in table[dtype]]
        assert len(set(keys)) == len(keys) and all(0 <= k < 1 << len(bits) for k in keys)


def test_the_lstm_variant_key_is_the_kernels():
    rule = op_package("lstm_cell_backward")
    by_part = {part: key for key, part, _ in host_checks.entries(rule)["float32"]}
    opdef = te_defs.get("lstm_cell_backward")
    assert by_part == {v.tag: opdef.variant_key(dict(v.flags)) for v in gates.variants(rule)}
    names = [n for n, _ in host_checks.variant_bits(rule, host_checks.slots(rule))]
    assert names == list(te_defs.get("lstm_cell_backward").variants[0])


@pytest.mark.skipif(shutil.which("g++") is None, reason="no C++ compiler (g++) on this machine")
def test_another_signature_over_a_definition_is_a_rule_not_a_template(ascend_tree, tmp_path):
    # the LayerNorm backward without outputMask and biasOptional, its weight required: the same
    # generator writes host code that compiles with every warning an error, and checks the weight
    # (its header and source in tmp_path, the rest of the package the session's generated one)
    rule = op_package("layer_norm_backward")
    aclnn = [Tensor("weight", "gamma") if p.name == "weightOptional" else p for p in rule.aclnn
             if not isinstance(p, (OutputMask, Unused))]
    other = dataclasses.replace(rule, aclnn=tuple(aclnn), cann="LayerNormBackwardAll")
    root, own = ascend_tree / "layer_norm_backward", tmp_path / "op_host"
    src = host.host_source(other)
    assert "!weight ||" in src and "outputMask" not in src and "want[" not in src
    (own / "aclnnop").mkdir(parents=True)
    (own / "aclnnop" / "aclnn_layer_norm_backward_all.h").write_text(host.aclnn_header(other))
    (own / "other.cpp").write_text(src)
    proc = build_cache.run(["g++", "-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror", "-fsyntax-only",
                            f"-I{TWIN}", f"-I{TWIN / 'aclnn'}", f"-I{root / 'op_kernel'}", f"-I{own}",
                            f"-I{root / 'op_host'}", str(own / "other.cpp")], outputs=[])
    assert proc.returncode == 0, proc.stderr[-4000:]
