"""The recipes of docs/architecture.md stay true: every target has the same shape, and every (op, target) pair
the registry declares has its own rule and packager and builds (or emits) what it promises.

"Add a target" is one record (targets/<name>.py or targets/<name>/), one rules package
(schedules/<name>/) and one packager (lowering/packagers.py); "add an op" is a te_def plus one
rule per target that serves it.  These tests walk the registry, so a target or op added without
its rule, packager or runtime sources fails here, not on a user's machine.
"""
from __future__ import annotations

import importlib
from pathlib import Path

import numpy as np
import pytest

from fusedgrad import schedules, targets, te_defs
from fusedgrad.lowering import build, packagers, sources

ROOT = Path(__file__).resolve().parents[1]
TARGETS = targets.names()
PAIRS = [(op, t) for t in TARGETS for op in te_defs.names()
         if targets.get(t).ops is None or op in targets.get(t).ops]


def test_registry_holds_every_target():
    assert set(TARGETS) == {"llvm", "cuda", "dsp", "ascend"}
    assert all(targets.get(t).ops for t in ("dsp", "ascend", "cuda"))


@pytest.mark.parametrize("name", TARGETS)
def test_target_has_record_rules_packager(name):
    info = targets.get(name)
    here = Path(targets.__file__).parent
    assert (here / f"{name}.py").exists() or (here / name / "__init__.py").exists(), \
        f"target {name}: its record lives in targets/{name}.py or targets/{name}/"
    assert info.schedules == f"fusedgrad.schedules.{name}"
    rules = importlib.import_module(info.schedules).RULES
    assert isinstance(rules, tuple) and rules, f"{info.schedules}.RULES is empty"
    assert all(isinstance(r, schedules.ScheduleRule) for r in rules), f"{info.schedules}.RULES: not all ScheduleRules"
    assert packagers.get(info) is packagers.PACKAGERS[info.artifact]
    assert info.dtypes and set(info.dtypes) <= {"float32", "float16", "bfloat16"}


@pytest.mark.parametrize("name", [t for t in TARGETS if targets.get(t).runtime_sources])
def test_runtime_sources_are_real_files(name):
    folder = targets.runtime_source_dir(targets.get(name))
    files = [p for p in folder.iterdir() if p.is_file() and p.suffix != ".py" and p.name != "__pycache__"]
    assert files, f"{folder} holds no fixed sources"
    # each is named in the package data, so a non-editable install carries it
    pyproject = (ROOT / "pyproject.toml").read_text()
    for f in files:
        assert f"*{f.suffix}" in pyproject, f"{f.name}: suffix {f.suffix} not in pyproject package-data"


def test_ascend_records_name_registered_kernel_patterns():
    # an op's package record (and a full-LSTM step's kernels) names its kernel pattern, a registered
    # lowering.ascend.patterns.KernelPattern; something lacking a pattern's function is refused
    from fusedgrad.lowering.ascend import patterns
    from fusedgrad.schedules import ascend

    for record in ascend.PACKAGES + ascend.STEP_KERNELS:
        assert isinstance(record, ascend.KernelSet)
        assert isinstance(patterns.pattern(record.kernel), patterns.KernelPattern), record.op
    assert {p.op for p in ascend.PACKAGES} == set(targets.get("ascend").ops)
    with pytest.raises(TypeError, match="sizes_header"):
        patterns.register("no_sizes", type("NoSizes", (), {"kernel_file": print, "entries": print})())


def test_unknown_packager_is_refused():
    import dataclasses

    fake = dataclasses.replace(targets.get("llvm"), name="fake", artifact="zip_of_sources")
    with pytest.raises(ValueError, match="fake.*zip_of_sources"):
        packagers.get(fake)


@pytest.mark.parametrize("op, target", PAIRS, ids=[f"{o}-{t}" for o, t in PAIRS])
def test_pair_has_its_own_rule(op, target):
    rule = schedules.rule_for(targets.get(target).schedules, op)
    assert rule is not None, f"no rule in {targets.get(target).schedules} has op = {op!r}"


@pytest.fixture(scope="module")
def emitted(tmp_path_factory):
    """Every source target's package, written once: {target: text of all its files}."""
    out = {}
    for name in TARGETS:
        info = targets.get(name)
        if isinstance(packagers.get(info), packagers.SourcePackager):
            root = tmp_path_factory.mktemp(name)
            files = packagers.get(info).sources(info, root, lambda c: sources.banner(name, c))
            out[name] = "\n".join((root / f).read_text() for f in files)
    return out


@pytest.mark.parametrize("op, target", PAIRS, ids=[f"{o}-{t}" for o, t in PAIRS])
def test_pair_builds_or_emits(op, target, emitted):
    info = targets.get(target)
    packager = packagers.get(info)
    for dtype in info.dtypes_for(op):
        symbols = packager.symbols(info, op, dtype)
        assert symbols
        if isinstance(packager, packagers.SourcePackager):
            missing = [s for s in symbols if s not in emitted[target]]
            assert not missing, f"{target} package lacks {missing} for ({op}, {dtype})"
            continue
        funcs, _ = build.schedule_variants(op, target, dtype, use_tuning=False)
        assert sorted(funcs) == sorted(symbols)
        own = type(schedules.rule_for(info.schedules, op)).__name__
        assert {rule for _, _, rule in funcs.values()} == {own}, f"{op} on {target} fell to another rule"
    if target == "llvm":  # builds and checks: the library (from the session's kernel cache) against float64
        from fusedgrad.api import run

        opdef = te_defs.get(op)
        dims = opdef.shapes["odd, not a vector multiple"]
        sample = opdef.sample(dims, np.random.default_rng(1))
        specs = {t.name: t for t in opdef.inputs}
        for variant in opdef.variants:
            given = {k: (v if opdef.present(specs[k], variant) else None) for k, v in sample.items()}
            got = run(op, {k: None if v is None else v.astype(specs[k].dtype or np.float32) for k, v in given.items()},
                      {}, variant)
            _close(got, opdef.reference(**given, **variant))


def _close(got, ref):
    for name, value in got.items():
        if value is not None:
            np.testing.assert_allclose(np.asarray(value, np.float64), ref[name].reshape(np.shape(value)),
                                       rtol=1e-4, atol=1e-4 * (np.abs(ref[name]).max() + 1), err_msg=name)
