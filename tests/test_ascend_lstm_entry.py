"""The full LSTM's aclnn entry points come from their record (lowering/ascend/lstm_entry.py): a record
that contradicts itself is refused, and every parameter's null check, flag check and binding is in the
generated first phase, in the record's order (tests/test_ascend_lstm.py runs the misuses on the twin)."""
from __future__ import annotations

import dataclasses
import re

import pytest

from fusedgrad.lowering.ascend import lstm_entry as E


def _with(entry, **changes):
    return dataclasses.replace(entry, **changes)


@pytest.mark.parametrize("change,message", [
    (lambda e: _with(e, params=e.params + (E.Param("aclTensor *more", "", binds=(E.Bind("x", "bind", "more", shape="FG_LSTM_STATES"),)),)),
     "bound twice"),
    (lambda e: _with(e, params=e.params + (E.Param("aclTensor *more", "", binds=(E.Bind("z", "gather", "more"),)),)),
     "not one of lstm_host.cpp's"),
    (lambda e: _with(e, params=e.params + (E.Param("aclTensor *more", "", binds=(E.Bind("z", "bind", "more"),)),)),
     "needs one"),
    (lambda e: _with(e, params=e.params + (E.Param("aclTensor *more", "", binds=(E.Bind("z", "bind", "more", "WRITE_GEMM", "FG_LSTM_STATES"),)),)),
     "not one of lstm_host.cpp's"),
    (lambda e: _with(e, mask="mask", masked=("dxOut",)), "not a parameter"),
    (lambda e: _with(e, batch_sizes="lengths"), "must be parameters"),
])
def test_a_record_that_contradicts_itself_is_refused(change, message):
    with pytest.raises(ValueError, match=message):
        E.functions(change(E.BACKWARD))


@pytest.mark.parametrize("entry", E.ENTRIES, ids=lambda e: e.cann)
def test_the_first_phase_checks_and_binds_what_the_record_says(entry):
    text = E.functions(entry)
    head, body = text.split("    Sizes s;", 1)
    refused = {}
    for cond, err in re.findall(r"if \((.*?)\) return ACLNN_ERR_PARAM_(\w+);", head, re.S):
        for name in re.findall(r"!(\w+)", cond) if err == "NULLPTR" else [cond]:
            refused[name] = (err, cond)
    for p in entry.params:
        if p.null is not None:
            err, cond = refused[p.name]
            assert err == "NULLPTR" and (not p.null or cond.startswith(p.null + " && ")), (p.name, cond)
        else:
            assert p.name not in refused or refused[p.name][0] != "NULLPTR", p.name
        if p.invalid:
            assert refused[p.invalid][0] == "INVALID"
    binds = re.findall(rf"st = (\w+)\(\*p, s, (.*?), ({'|'.join(E.MODES)}), &a\.(\w+)", body)
    want = [(b.binder, b.tensor, b.mode, b.field) for p in entry.params for b in p.binds]
    assert binds == want
    assert f"st = {entry.run}(*p, s, {entry.flag}, a);" in body
