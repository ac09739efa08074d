"""The LSTM layer recurrence ops (``lstm_layer_forward`` / ``lstm_layer_backward``): the TIR
definitions and the CPU's one-team kernels against the float64 references, every variant, equal and
variable lengths; the same bits for 1-4 threads."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from fusedgrad import api, te_defs
from fusedgrad.lowering import build, tvm_api

OPS = ("lstm_layer_forward", "lstm_layer_backward")
SHAPES = [
    pytest.param({"T": 1, "B": 1, "H": 1}, id="T=1 B=1 H=1"),
    pytest.param({"T": 7, "B": 5, "H": 37}, id="odd, H not a chunk multiple"),
    pytest.param({"T": 4, "B": 9, "H": 32}, id="B past a register tile, H whole chunks"),
    pytest.param({"T": 6, "B": 3, "H": 20}, id="equal lengths"),
    pytest.param({"T": 5, "B": 9, "H": 130}, id="chunks past two sweep blocks, H not a chunk multiple"),
]


def _inputs(op, dims, seed, equal=False):
    s = op.sample(dims, np.random.default_rng(seed))
    if equal:
        s["batch_sizes"] = np.full(dims["T"], dims["B"], np.int32)
    specs = {t.name: t for t in op.inputs}
    return {k: v.astype(specs[k].dtype or np.float32) for k, v in s.items()}


def _check(op, got, ref, tol=2e-6):
    for name, value in got.items():
        if value is None:
            continue
        r = ref[name].reshape(np.shape(value))
        err = np.abs(np.asarray(value, np.float64) - r).max() / (np.abs(r).max() + 1.0)
        assert err <= tol, f"{op.name} {name}: relative error {err:.2e} > {tol:.0e}"


@pytest.mark.parametrize("dims", SHAPES)
@pytest.mark.parametrize("op_name", OPS)
def test_kernel_matches_the_float64_reference(op_name, dims):
    op = te_defs.get(op_name)
    equal = "20" in str(dims["H"])
    a = _inputs(op, dims, seed=dims["H"], equal=equal)
    exact = {k: v.astype(np.float64) for k, v in a.items()}
    for variant in op.variants:
        got = api.run(op_name, a, {}, variant)
        _check(op, got, op.reference(**exact, **variant))
        if "h" in got and dims["B"] > 1 and not equal:  # padded positions are exactly zero
            bs = a["batch_sizes"]
            pad = np.arange(dims["B"])[None, :] >= bs[:, None]
            assert pad.any() and (np.asarray(got["h"])[pad] == 0).all()


# float16: half storage, float32 math, the state read back from the half outputs.  The error is
# measured as the other half ops' tests do (err / (max|ref| + 1) against the float64 reference on the
# same half inputs): at most 2.4e-4 over T=7 B=5 H=37 and T=50 B=4 H=64, two seeds, every variant
# and output; 2e-3 leaves 8x of that
DEF_TOL = {"float32": 2e-6, "float16": 2e-3}


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("op_name", OPS)
def test_definition_matches_the_float64_reference(op_name, dtype):
    """The plain loop nest (te_defs) itself, compiled as written: the statement of the math the
    schedules are checked against, in each dtype it is defined for."""
    op = te_defs.get(op_name)
    assert dtype in op.dtypes
    dims = {"T": 7, "B": 5, "H": 37}
    a = {k: v if v.dtype == np.int32 else v.astype(dtype) for k, v in _inputs(op, dims, seed=3).items()}
    exact = {k: v.astype(np.float64) for k, v in a.items()}
    spec = build.targets.get("llvm").tvm_target()
    build.intrinsics.install("llvm", {"tirx.tanh": "rational_tanh"})
    for variant in op.variants:
        func = op.compute(dtype, **variant).with_attr("global_symbol", "definition")
        exe = tvm_api.compile_module({"definition": func}, tvm_api.target(spec))
        shapes = {t.name: [build.te_defs.dim_size(dims, d) for d in t.kshape] for t in op.outputs}
        outs = {t.name: np.full(shapes[t.name], np.nan, dtype) for t in op.outputs if op.present(t, variant)}
        args = [a[t.name].reshape([build.te_defs.dim_size(dims, d) for d in t.kshape]) for t in op.inputs]
        exe["definition"](*args, *outs.values())
        _check(op, outs, op.reference(**exact, **variant), DEF_TOL[dtype])


_BITS = r"""
import hashlib, json, sys
import numpy as np
try:  # where torch is in the process the team is torch's: its thread count past the cores comes from here
    import torch
    torch.set_num_threads(int(sys.argv[2]))
except ImportError:
    pass
from fusedgrad import api, te_defs
out = {}
for op in map(te_defs.get, sys.argv[1].split(",")):
    specs = {t.name: t for t in op.inputs}
    for dims in ({"T": 9, "B": 6, "H": 40}, {"T": 5, "B": 9, "H": 130}):
        s = op.sample(dims, np.random.default_rng(5))
        a = {k: v.astype(specs[k].dtype or np.float32) for k, v in s.items()}
        for variant in op.variants:
            got = api.run(op.name, a, {}, variant)
            out[json.dumps([op.name, dims, variant], sort_keys=True)] = {
                k: hashlib.sha256(np.ascontiguousarray(v).tobytes()).hexdigest() for k, v in got.items() if v is not None}
from fusedgrad import team
out["team"] = len(team.last_team())  # the team the last parallel kernel ran on
print(json.dumps(out, sort_keys=True))
"""


def test_same_bits_for_any_thread_count():
    """A chunk of hidden units is computed the same way whichever thread runs it, and every sum runs
    in the definition's order: 1, 2 and 3 threads (one, an even and an odd team, past this machine's
    cores where it has two) give both layer ops the same bits (each count its own process, so each
    sizes its own thread pool)."""
    digests = {}
    for threads in (1, 2, 3):
        env = {**os.environ, "OMP_NUM_THREADS": str(threads), "TVM_NUM_THREADS": str(threads)}
        run = subprocess.run([sys.executable, "-c", _BITS, ",".join(OPS), str(threads)], env=env, capture_output=True,
                             text=True, timeout=600)
        assert run.returncode == 0, run.stderr[-2000:]
        digests[threads] = json.loads(run.stdout.strip().splitlines()[-1])
        assert digests[threads].pop("team") == threads, run.stderr[-2000:]  # the thread count reached the team
    assert digests[1] and all(d == digests[1] for d in digests.values()), digests
