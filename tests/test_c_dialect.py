"""The C-family dialect table (lowering.c_dialect): both entries complete, and the DSP's C99 printer
(lowering.c_emitter) and the Ascend printers (lowering.ascend) going through the same code for
types and float literals."""
import dataclasses
import math
import re

import pytest

import tvm
from tvm import te

from fusedgrad import targets
from fusedgrad.lowering import c_dialect, c_emitter
from fusedgrad.lowering.ascend import gates, op_package, rownorm
from fusedgrad.lowering.c_dialect import ASCENDC, C99, Dialect

DIALECTS = {"c99": (C99, "dsp"), "ascendc": (ASCENDC, "ascend")}


def _c99_kernel() -> str:
    """A C99 kernel with one float32 constant (0.1, printed as the float32 it stores)."""
    x = te.placeholder((8,), "float32", name="x")
    y = te.compute((8,), lambda i: x[i] * tvm.tirx.const(0.1, "float32"), name="y")
    src, _, _ = c_emitter.emit(te.create_prim_func([x, y]), "k")
    return src


def _ascendc_kernel(dtype: str = "float16") -> str:
    """The LayerNorm backward's AscendC kernels (gamma's default ones: a float literal cast to fp16)."""
    text, _ = rownorm.kernel_file(op_package("layer_norm_backward"), dtype)
    return text


@pytest.mark.parametrize("name", DIALECTS)
def test_entry_sets_every_field_it_does_not_declare_absent(name):
    dialect, target = DIALECTS[name]
    for f in dataclasses.fields(Dialect):
        value = getattr(dialect, f.name)
        if f.name in dialect.absent:
            assert value is None, f"{name}.{f.name} is declared absent but set"
        else:
            assert value is not None, f"{name}.{f.name} is not set"
            if isinstance(value, str):
                assert value, f"{name}.{f.name} is empty"
    # the type map covers every dtype its target builds
    for dtype in targets.get(target).dtypes:
        assert dialect.type(dtype)


def test_absent_is_checked_when_the_table_is_built():
    with pytest.raises(ValueError, match="field restrict must be set"):
        dataclasses.replace(C99, restrict=None)
    with pytest.raises(ValueError, match="field alloc must be None"):
        dataclasses.replace(ASCENDC, alloc="malloc")
    with pytest.raises(ValueError, match="absent names no field"):
        dataclasses.replace(C99, absent=frozenset({"nosuch"}))


@pytest.mark.parametrize("value, c99, ascendc", [
    (1.0, "1.0f", "1.0f"),
    (-2.0, "-2.0f", "-2.0f"),
    (0.1, "0.10000000149011612f", "0.1f"),  # float_exact: the stored float32 / the TE constant's digits
    (1e-5, "9.999999747378752e-06f", "1e-05f"),
    (math.inf, "(1.0f / 0.0f)", "INFINITY"),
    (-math.inf, "-(1.0f / 0.0f)", "-INFINITY"),
    (math.nan, "(0.0f / 0.0f)", "NAN"),
], ids=["one", "negative", "inexact", "exponent", "inf", "-inf", "nan"])
def test_float_literal_spellings(value, c99, ascendc):
    assert C99.float_literal(value) == c99
    assert ASCENDC.float_literal(value) == ascendc


def test_float_literal_of_a_double_has_no_suffix():
    assert C99.float_literal(0.1, "float64") == "0.1"


def test_a_change_to_the_shared_float_printer_shows_in_both_printers(monkeypatch):
    before_c, before_asc = _c99_kernel(), _ascendc_kernel()
    assert "0.10000000149011612f" in before_c and ASCENDC.convert("float16", "1.0f") in before_asc
    assert "FGLIT" not in before_c + before_asc
    shared = c_dialect.Dialect.float_literal
    monkeypatch.setattr(c_dialect.Dialect, "float_literal",
                        lambda self, value, dtype="float32": f"FGLIT({shared(self, value, dtype)})")
    after_c, after_asc = _c99_kernel(), _ascendc_kernel()
    assert "(x[i] * FGLIT(0.10000000149011612f))" in after_c
    assert ASCENDC.convert("float16", "FGLIT(1.0f)") in after_asc


def test_both_printers_spell_pointers_casts_and_qualifiers_from_the_table(monkeypatch):
    c_src, asc_src = _c99_kernel(), _ascendc_kernel()
    assert c_src.startswith(f"{C99.kernel} k({C99.pointer('x', 'float32')}, ")
    assert C99.pointer("x", "float32") == "float *restrict x"
    assert f"{ASCENDC.kernel} fg_" in asc_src and ASCENDC.pointer("x") == "GM_ADDR x"
    assert f"    {ASCENDC.helper} void Process() {{" in asc_src
    monkeypatch.setattr(c_dialect.Dialect, "convert", lambda self, dtype, value: f"CAST<{dtype}>({value})")
    assert "CAST<float32>(g_mean.GetValue(" in _ascendc_kernel()


def test_ascend_vector_code_is_spelled_by_the_table(monkeypatch):
    """Instructions, rounding modes and scalar operands' casts of the AscendC vector code all come
    from the dialect: none is printed by hand."""
    assert ASCENDC.instruction("Dup", "a", "1.0f", "n") == "Duplicate(a, 1.0f, n);"
    assert ASCENDC.round_mode("rint") == "RoundMode::CAST_RINT"
    with pytest.raises(ValueError, match="ascendc: no vector instruction 'Tanh'"):
        ASCENDC.instruction("Tanh", "a", "b", "n")
    with pytest.raises(ValueError, match="c99: no vector instruction 'Add'"):
        C99.instruction("Add", "a", "b", "c", "n")
    shared = Dialect.instruction
    monkeypatch.setattr(Dialect, "instruction", lambda self, op, *xs: "VEC." + shared(self, op, *xs))
    monkeypatch.setattr(Dialect, "round_mode", lambda self, mode: f"RM<{mode}>")
    monkeypatch.setattr(Dialect, "convert", lambda self, dtype, value: f"CAST<{dtype}>({value})")
    lng = _ascendc_kernel("float16")
    lcg, _ = gates.kernel_file(op_package("lstm_cell_backward"), "float16")
    names = "|".join(sorted(set(ASCENDC.vector.values())))
    for text, first, last in ((lng, "void Pass1(", "void CopyOut("), (lcg, "void Compute(", "void CopyOut(")):
        code = text[text.index(first):text.index(last)]
        bare = re.findall(rf"^\s*(?:{names})\(.*$", code, re.M)
        assert not bare, f"instructions printed without the table: {bare}"
    assert "VEC.Exp(" in lcg and "VEC.Duplicate(" in lcg
    assert "VEC.Cast(o, tmp[" in lcg and "RM<rint>" in lcg and "RM<none>" in lcg
    # the scalar operands go through the shared C printer, and so through the dialect's casts
    assert "VEC.Adds(tmp[1u * t_.tile], tmp[0u * t_.tile], -(s1 * (1.0f / CAST<float32>(t_.d))), n);" in lng


@pytest.mark.parametrize("dtype", ["int8", "float64"])
def test_ascend_type_lookup_refuses_an_unknown_dtype(dtype):
    with pytest.raises(ValueError, match=rf"ascendc: dtype {dtype} is not supported"):
        ASCENDC.type(dtype)
    with pytest.raises(ValueError, match=rf"dtype {dtype} is not supported"):
        _ascendc_kernel(dtype)
