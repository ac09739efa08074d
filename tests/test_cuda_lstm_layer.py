"""The CUDA persistent LSTM layer kernels (schedules/cuda/lstm_layer.py) without a GPU: their loop
nest run on the host (block and thread loops serial, the grid barrier a phase boundary) against the
float64 references, the same bits for two grid sizes, the nvcc build for sm_80 and sm_90 with the
ptxas limits, and the co-residency check that refuses a grid the device cannot hold at once.

What needs a GPU (the kernels on the device, their speed against cuDNN) is benchmarks/gpu_check.py.
"""
from __future__ import annotations

import math
import os
import shutil

import ml_dtypes
import numpy as np
import pytest

import build_cache

from fusedgrad import api, runtime, schedules, targets, te_defs
from fusedgrad.lowering import build, cuda, intrinsics, naming, tvm_api
from fusedgrad.schedules import tir_api
from fusedgrad.schedules.cuda import lstm_layer, lstm_mma
from fusedgrad.te_defs import _lstm_layer as L

NVCC = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc (CUDA toolkit) is not installed on this machine")

OPS = ("lstm_layer_forward", "lstm_layer_backward")
SHAPES = [
    pytest.param({"T": 1, "B": 1, "H": 1}, id="T=1 B=1 H=1"),
    pytest.param({"T": 7, "B": 5, "H": 37}, id="odd, H not a block multiple"),
    pytest.param({"T": 5, "B": 19, "H": 16}, id="B past the row slots, H whole blocks"),
    pytest.param({"T": 2, "B": 3, "H": 800}, id="W_hh slice on chip past 48 KiB"),
]
TOL = 2e-6
DEFINITION = "definition"  # _library's rule for the definition's plain loop nest
TC = L.TENSOR_CORES


def _flag(variant):
    """The target flag a CUDA entry's variant sets (they exclude each other), None for none."""
    return next((k for k in L.TARGET_FLAGS if variant.get(k)), None)


def _library(op_name, rule=None, dtype="float32", flags=(None, L.W_HH_GLOBAL), keep=lambda v: True):
    """The op's CUDA rule (or ``rule``; DEFINITION: the definition's plain loop nest) applied for the
    host CPU and compiled there, as an llvm artifact of ``dtype``, with the CPU's intrinsic lowerings
    (its tanh) installed first, as every CPU build has them: the process-wide registration would
    otherwise depend on whether a CPU library was built before.  Only the entries whose target flag
    is in ``flags`` (None: the entry without one) and whose variant ``keep`` takes: a build costs."""
    op = te_defs.get(op_name)
    intrinsics.install("llvm", dict(targets.get("llvm").intrinsics))
    wanted = [v for v in op.variants_for("cuda") if _flag(v) in flags and keep(v)]
    if rule is None:
        funcs, _ = build.schedule_variants(op_name, "cuda", dtype, emulate_on_host=True)
        funcs = {s: f for s, f in funcs.items() if f[1] in wanted}
    else:  # what schedule_variants does, with ``rule`` (its knobs) instead of the package's
        host = tvm_api.target(targets.get("llvm").tvm_target())
        funcs = {}
        for variant in wanted if rule is not DEFINITION else op.variants:
            compute_flags, schedule_flags = op.split_variant(variant)
            symbol = naming.entry_symbol(op_name, dtype, variant)
            strided = [t.name for t in op.inputs if op.present(t, variant)]
            strided += [t.name for t in op.outputs if t.strided and op.present(t, variant)]
            func = tir_api.prim_func(op.compute(dtype, **compute_flags), symbol, op_name, strided=strided,
                                     schedule_flags=schedule_flags)
            if rule is not DEFINITION:
                func = rule.apply(func, host).mod["main"].with_attr("global_symbol", symbol)
            funcs[symbol] = (func, dict(variant), type(rule).__name__ if rule is not DEFINITION else DEFINITION)
    rules = {r for _, _, r in funcs.values()}
    assert rules == {DEFINITION} if rule is DEFINITION else {
        "LstmLayerForward" if op_name == OPS[0] else "LstmLayerBackward"}, rules
    exe = tvm_api.compile_module({s: f for s, (f, _, _) in funcs.items()},
                                 tvm_api.target(targets.get("llvm").tvm_target()))
    entry = {"op": op_name, "target": "llvm", "dtype": dtype,
             "kernels": [{"symbol": s, "variant": v, "args": build.arg_specs(op, v, dtype)}
                         for s, (_, v, _) in funcs.items()]}
    lib = runtime.Library()
    lib[(op_name, "llvm", dtype)] = runtime.Artifact(entry, exe.mod, None)
    return lib


@pytest.fixture(scope="module")
def emulated():
    cache = {}

    def get(op_name):
        if op_name not in cache:
            cache[op_name] = _library(op_name)
        return cache[op_name]
    return get


def _inputs(op, dims, seed):
    s = op.sample(dims, np.random.default_rng(seed))
    specs = {t.name: t for t in op.inputs}
    return {k: v.astype(specs[k].dtype or np.float32) for k, v in s.items()}


@pytest.mark.parametrize("dims", SHAPES)
@pytest.mark.parametrize("op_name", OPS)
def test_loop_nest_matches_the_float64_reference(emulated, op_name, dims):
    """Every variant (train, reverse), variable lengths: the persistent kernel's loop nest on the host
    against te_defs' float64 recurrence, and the same numbers the CPU rule gives."""
    op = te_defs.get(op_name)
    a = _inputs(op, dims, seed=dims["H"])
    exact = {k: v.astype(np.float64) for k, v in a.items()}
    assert len(set(a["batch_sizes"].tolist())) > 1 or dims["T"] == 1 or dims["B"] == 1
    for variant in op.variants:
        got = api.run(op_name, a, {}, variant, library=emulated(op_name))
        ref = op.reference(**exact, **variant)
        cpu = api.run(op_name, a, {}, variant)
        for name, value in got.items():
            if value is None:
                continue
            r = ref[name].reshape(np.shape(value))
            err = np.abs(np.asarray(value, np.float64) - r).max() / (np.abs(r).max() + 1.0)
            assert err <= TOL, f"{op_name} {variant} {name}: relative error {err:.2e} > {TOL:.0e}"
            c = np.asarray(cpu[name], np.float64)
            err = np.abs(np.asarray(value, np.float64) - c).max() / (np.abs(c).max() + 1.0)
            assert err <= TOL, f"{op_name} {variant} {name}: {err:.2e} from the CPU rule's"


ODD = {"T": 7, "B": 5, "H": 37}
# relative error of the 16-bit loop nests against the float64 reference: every stored value (and so the
# state each step starts from) is rounded once, to within half a unit in the last place: 2^-11 relative
# in float16 (11 significant bits), 2^-8 in bfloat16 (8); over the shapes' few steps the errors seen are
# about 4 such roundings (bfloat16 at ODD: 2.1e-3 at most, dgates), so 40 of them in float16, 4 in bfloat16
HALF = [pytest.param("float16", (ODD, {"T": 2, "B": 3, "H": 800}), 2e-2, id="float16"),
        pytest.param("bfloat16", (ODD,), 4 * 2.0 ** -8, id="bfloat16")]


@pytest.mark.parametrize("dtype, shapes, tol", HALF)
@pytest.mark.parametrize("op_name", OPS)
def test_16bit_loop_nest_gives_the_definitions_bits(op_name, dtype, shapes, tol, monkeypatch):
    """float16 and bfloat16 storage (float32 arithmetic, the W_hh slice kept in the storage dtype in
    shared memory): every variant's outputs the same bits as the definition's plain loop nest in that
    dtype (the CPU rule is float32 only), at an odd H (float16 also with the slice on chip at H = 800),
    within the dtype's precision of the float64 reference, and a NaN in the first input (xw, dy) NaN
    where the reference's is."""
    from dataclasses import replace

    from fusedgrad.targets import registry

    monkeypatch.setitem(registry._REGISTRY, "llvm", replace(targets.get("llvm"), op_dtypes={}))  # api.run's check
    op = te_defs.get(op_name)
    np_dtype = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}[dtype]
    nest, definition = _library(op_name, dtype=dtype, flags=(None,)), _library(op_name, DEFINITION, dtype=dtype)
    first = op.inputs[0].name
    for dims, nan in [(d, False) for d in shapes] + [(ODD, True)]:
        s = op.sample(dims, np.random.default_rng(dims["H"]))
        specs = {t.name: t for t in op.inputs}
        a = {k: v.astype(specs[k].dtype or np_dtype) for k, v in s.items()}
        if nan:
            a[first][0, 0, 0] = np.nan
        nans = 0
        for variant in op.variants:
            got = api.run(op_name, a, {}, variant, library=nest)
            want = api.run(op_name, a, {}, variant, library=definition)
            ref = op.reference(**{k: v.astype(np.float64) for k, v in a.items()}, **variant)
            for name, value in got.items():
                if value is None:
                    continue
                assert value.dtype == np_dtype
                assert (value.view(np.uint16) == want[name].view(np.uint16)).all(), (dims, variant, name)
                r = ref[name].reshape(value.shape)
                assert (np.isnan(value.astype(np.float64)) == np.isnan(r)).all(), (dims, variant, name)
                nans += int(np.isnan(r).sum())
                finite = ~np.isnan(r)
                err = np.abs(value.astype(np.float64)[finite] - r[finite]).max() / (np.abs(r[finite]).max() + 1.0)
                assert err <= tol, f"{op_name} {variant} {name}: relative error {err:.2e} in {dtype}"
        assert (nans > 0) == nan, dims


def test_bfloat16_stores_round_to_nearest_even_and_keep_nan():
    """The layer kernels' bfloat16 conversions (te_defs/_tir.py, written on the bits), compiled for the
    host: a float32 stored to bfloat16 as ml_dtypes rounds it (to nearest, ties to even: the ties at
    0x3F808000 and 0x3F818000, a subnormal's, the largest finite float32 to Inf), every NaN a NaN of its
    sign (0x7F800001 and 0x7FFFFFFF, which TVM's own cast makes Inf and -0), and widened back exactly."""
    import tvm
    from tvm.script.ir_builder import IRBuilder

    from fusedgrad.te_defs import _lstm_layer as L
    from fusedgrad.te_defs._tir import T, loop, store

    with IRBuilder() as ib:
        with T.prim_func():
            T.func_name("roundtrip")
            n = tvm.tirx.Var("n", "int32")
            x, y, z = (T.match_buffer(T.arg(k, T.handle()), (n,), d)
                       for k, d in (("x", "float32"), ("y", "bfloat16"), ("z", "float32")))
            with loop("i", n) as i:
                store(y, (i,), x[i])
                store(z, (i,), L.wide(y[i]))
    exe = tvm_api.compile_module({"roundtrip": ib.get().with_attr("global_symbol", "roundtrip")},
                                 tvm_api.target(targets.get("llvm").tvm_target()))
    bits = np.array([0x3F808000, 0x3F818000, 0x3F808001, 0x00018000, 0x80000000, 0x7F7FFFFF, 0xFF800000,
                     0x7F800001, 0x7FFFFFFF, 0xFFFFFFFF, 0x7FC00000], np.uint32)
    bits = np.concatenate([bits, np.random.default_rng(0).integers(0, 2 ** 32, 4096, dtype=np.uint32)])
    x = bits.view(np.float32)
    y, z = (tvm_api.host_tensor(np.zeros(len(x), d)) for d in (ml_dtypes.bfloat16, np.float32))
    exe["roundtrip"](tvm_api.host_tensor(x), y, z)
    got, nan = y.numpy().view(np.uint16), np.isnan(x)
    with np.errstate(invalid="ignore"):
        want = x.astype(ml_dtypes.bfloat16).view(np.uint16)
    assert (got[~nan] == want[~nan]).all()
    assert np.isnan(y.numpy()[nan].astype(np.float32)).all() and ((got[nan] >> 15) == (bits[nan] >> 31)).all()
    assert (z.numpy().view(np.uint32) == got.astype(np.uint32) << 16).all()


@pytest.mark.parametrize("op_name", OPS)
def test_same_bits_for_two_grid_sizes(emulated, op_name, monkeypatch):
    """The derived shape (UNITS 4: 10 blocks at H = 37, 32 row slots; loads 32 at a time: one chunk
    and a tail of 5) against UNITS 8 with one warp (5 blocks, 4 row slots) and loads one at a time,
    and against 5 at a time (7 chunks and a tail of 2): every output the same bits, so no sum depends
    on the grid or on how its loads are grouped.  The UNITS 8 nest is built for sm_72 alone (48 KiB of
    shared memory a block: its slice, 8 units x 4 gates x H floats, on chip to H = 384), so at H = 400
    its sums read W_hh from global memory where the derived shape's read the slice on chip."""
    op = te_defs.get(op_name)
    rule = lstm_layer.LstmLayerForward if op_name == OPS[0] else lstm_layer.LstmLayerBackward
    assert (rule().knob("UNITS", None), rule().knob("CHUNK", None)) == (4, 32)
    monkeypatch.setenv(targets.CUDA_ARCH_ENV, "sm_72")
    small = rule({"UNITS": 8, "WARPS": 1, "CHUNK": 1})
    assert small.shared_capacity(None) == 384 * 8 * 4
    others = [_library(op_name, small, flags=(None,))]
    monkeypatch.delenv(targets.CUDA_ARCH_ENV)
    others.append(_library(op_name, rule({"CHUNK": 5}), flags=(None,)))
    assert rule().shared_capacity(None) >= 400 * 4 * 4
    for dims in ({"T": 6, "B": 11, "H": 37}, {"T": 3, "B": 4, "H": 400}):
        a = _inputs(op, dims, seed=5)
        for variant in op.variants:
            one = api.run(op_name, a, {}, variant, library=emulated(op_name))
            for other in others:
                two = api.run(op_name, a, {}, variant, library=other)
                for name, value in one.items():
                    if value is not None:
                        same = np.asarray(value).view(np.uint32) == np.asarray(two[name]).view(np.uint32)
                        assert same.all(), (dims, name)


@pytest.mark.parametrize("op_name", OPS)
def test_the_w_hh_global_entry_gives_the_on_chip_entrys_bits(emulated, op_name):
    """The CUDA-only entry point ``w_hh_global`` (no slice, no shared memory at any H: its sums read W_hh
    from global memory) gives every variant the same bits as the entry with the slice on
    chip, at an H where the slice fits (one load chunk and a tail); the CPU and DSP build no such entry."""
    op = te_defs.get(op_name)
    assert op.variants_for("cuda") == op.variants + tuple({**v, "w_hh_global": True} for v in op.variants) + tuple(
        {**v, TC: True} for v in op.variants)  # one flag an entry: no entry sets both
    assert op.variants_for("llvm") == op.variants_for("dsp") == op.variants
    rule = lstm_layer.LstmLayerForward() if op_name == OPS[0] else lstm_layer.LstmLayerBackward()
    record = rule.dynamic_shared(None, "float32", w_hh_global=True)
    assert [cuda.dynamic_shared_bytes(record, H) for H in (0, 1, 37, 2608, 6000)] == [0] * 5
    assert cuda.dynamic_shared_bytes(rule.dynamic_shared(None, "float32"), 37) == 64 * 37  # on chip there
    a = _inputs(op, {"T": 6, "B": 11, "H": 37}, seed=7)
    for variant in op.variants:
        on_chip = api.run(op_name, a, {}, variant, library=emulated(op_name))
        off_chip = api.run(op_name, a, {}, {**variant, "w_hh_global": True}, library=emulated(op_name))
        for name, value in on_chip.items():
            if value is not None:
                assert (np.asarray(value).view(np.uint32) == np.asarray(off_chip[name]).view(np.uint32)).all(), (
                    variant, name)


@pytest.fixture(scope="module")
def tensor_core_nests():
    """The ``tensor_cores`` entries' loop nests on the host (their tiles' sums in the model the
    definitions state), built once per op."""
    cache = {}

    def get(op_name):
        if op_name not in cache:
            cache[op_name] = _library(op_name, flags=(TC,))
        return cache[op_name]
    return get


# Against te_defs' float64 recurrence with the operands TF32-rounded (reference(tensor_cores=True)):
# the sums are float32 (about 1e-7 relative here), but where a float32 state value and the reference's
# float64 one lie on either side of a TF32 rounding boundary they round to neighbours and one product
# moves by a TF32 unit (2^-10 of it): up to 1.4e-5 measured at these shapes.  The CUDA-core entry's
# unrounded float32 sums are 1.1e-4 to 1.7e-4 from that reference at the same shapes.
TC_TOL = 3e-5
NAN_LOW = np.array([0x7F800001], np.uint32).view(np.float32)[0]  # a NaN whose payload TF32 drops


@pytest.mark.parametrize("op_name", OPS)
def test_tensor_core_loop_nest_matches_the_rounded_reference(tensor_core_nests, op_name):
    """The ``tensor_cores`` entries (every variant) at B = 19 (a padded row tile), H = 37 (not a k group
    multiple) and at B = 16, H = 20; a NaN whose payload lies only in the bits TF32 drops (a rounding
    that did not keep NaN would make it infinity) in h0 (forward: that row's outputs, no other) or in
    W_hh (backward: that column of dh0) propagates."""
    op = te_defs.get(op_name)
    lib = tensor_core_nests(op_name)
    for dims in ({"T": 5, "B": 19, "H": 37}, {"T": 3, "B": 16, "H": 20}):
        a = _inputs(op, dims, seed=3)
        exact = {k: v.astype(np.float64) for k, v in a.items()}
        for variant in op.variants:
            got = api.run(op_name, a, {}, {**variant, TC: True}, library=lib)
            ref = op.reference(**exact, **variant, tensor_cores=True)
            for name, value in got.items():
                if value is not None:
                    r = ref[name].reshape(np.shape(value))
                    err = np.abs(np.asarray(value, np.float64) - r).max() / (np.abs(r).max() + 1.0)
                    assert err <= TC_TOL, f"{op_name} {dims} {variant} {name}: relative error {err:.2e}"
    a = _inputs(op, {"T": 3, "B": 16, "H": 20}, seed=4)
    variant = {**op.variants[0], TC: True}
    if op_name == OPS[0]:
        a["h0"][2, 5] = NAN_LOW
        hy = api.run(op_name, a, {}, variant, library=lib)["hy"]
        assert np.isnan(hy[2]).all() and np.isfinite(np.delete(hy, 2, axis=0)).all()
    else:
        a["w_hh"][1 * 20 + 3, 7] = NAN_LOW  # gate f, unit 3, column 7
        dh0 = api.run(op_name, a, {}, variant, library=lib)["dh0"]
        assert np.isnan(dh0[:, 7]).all()


@pytest.mark.parametrize("dtype, tol", [(p.values[0], p.values[2]) for p in HALF])
@pytest.mark.parametrize("op_name", OPS)
def test_16bit_tensor_core_loop_nest_matches_the_reference(op_name, dtype, tol, monkeypatch):
    """float16 and bfloat16 storage on the tensor cores (m16n8k16: the stored values are the operands,
    exact; bfloat16's moved as bits, which TVM's legalization leaves alone): one variant at B = 19 (a
    padded row tile) and H = 37 (not a k group multiple) within the dtype's precision of the float64
    reference, as the CUDA-core 16-bit entries are."""
    from dataclasses import replace

    from fusedgrad.targets import registry

    monkeypatch.setitem(registry._REGISTRY, "llvm", replace(targets.get("llvm"), op_dtypes={}))  # api.run's check
    op = te_defs.get(op_name)
    variant = {**op.variants[0], TC: True}
    lib = _library(op_name, dtype=dtype, flags=(TC,), keep=lambda v: v == variant)
    np_dtype = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}[dtype]
    s = op.sample({"T": 3, "B": 19, "H": 37}, np.random.default_rng(8))
    specs = {t.name: t for t in op.inputs}
    a = {k: v.astype(specs[k].dtype or np_dtype) for k, v in s.items()}
    got = api.run(op_name, a, {}, variant, library=lib)
    ref = op.reference(**{k: v.astype(np.float64) for k, v in a.items()}, **op.variants[0], tensor_cores=True)
    for name, value in got.items():
        if value is not None:
            assert value.dtype == np_dtype
            r = ref[name].reshape(value.shape)
            err = np.abs(value.astype(np.float64) - r).max() / (np.abs(r).max() + 1.0)
            assert err <= tol, f"{op_name} {dtype} {name}: relative error {err:.2e}"


@pytest.mark.parametrize("op_name", OPS)
def test_tensor_core_sums_the_same_bits_for_two_grid_sizes(tensor_core_nests, op_name, monkeypatch):
    """The derived shape (UNITS 4, four warps: forward 2 row tiles x 2 column tiles a pass, backward
    4 gates x 1 column tile) against UNITS 8 with one warp taking every tile of a pass (forward 4
    column tiles, backward 4 gates x 1), built for sm_72 alone, whose slice at H = 400 is past its
    48 KiB (less the tile): its sums read W_hh from global memory where the derived shape's read the
    slice.  The same bits: a sum is one warp's, whatever the grid."""
    op = te_defs.get(op_name)
    rule = lstm_layer.LstmLayerForward if op_name == OPS[0] else lstm_layer.LstmLayerBackward
    assert rule().shared_capacity(None, tensor_cores=True) >= 400 * 4 * 4
    variant = {**op.variants[0], TC: True}
    monkeypatch.setenv(targets.CUDA_ARCH_ENV, "sm_72")
    small = rule({"UNITS": 8, "WARPS": 1})
    assert small.shared_capacity(None, tensor_cores=True) < 400 * 8 * 4
    other = _library(op_name, small, flags=(TC,), keep=lambda v: v == variant)
    monkeypatch.delenv(targets.CUDA_ARCH_ENV)
    for dims in ({"T": 4, "B": 19, "H": 37}, {"T": 2, "B": 17, "H": 400}):
        a = _inputs(op, dims, seed=6)
        one = api.run(op_name, a, {}, variant, library=tensor_core_nests(op_name))
        two = api.run(op_name, a, {}, variant, library=other)
        for name, value in one.items():
            if value is not None:
                assert (np.asarray(value).view(np.uint32) == np.asarray(two[name]).view(np.uint32)).all(), (
                    dims, name)


def test_the_tensor_core_fragments_are_ptxs_layouts():
    """lstm_mma's (lane, register) -> element maps: TF32 A, B and C those of the GEMM's mma_tf32
    (tests/test_cuda_matmul.py checks them against PTX's table), float16 A the inverse of mma_16bit's
    index (TVM's ldmatrix layout, PTX's m16n8k16 A); each covers its tile once."""
    from fusedgrad.schedules.cuda import mma_16bit, mma_tf32

    lanes = range(32)
    for dtype in ("float32", "float16"):
        regs_a, regs_b, regs_c = lstm_mma.registers(None, dtype)
        k = lstm_mma.K[dtype]
        for element, regs, count in ((lambda l, r: lstm_mma.a_element(dtype, l, r), regs_a, 16 * k),
                                     (lambda l, r: lstm_mma.b_element(dtype, l, r), regs_b, k * 8),
                                     (lstm_mma.c_element, regs_c, 16 * 8)):
            assert len({element(l, r) for l in lanes for r in range(regs)}) == count == 32 * regs
    for lane in lanes:
        for r in range(4):
            assert lstm_mma.a_element("float32", lane, r) == mma_tf32.a_element(lane, r)
            assert lstm_mma.c_element(lane, r) == mma_tf32.c_element(lane, r)
        for r in range(2):
            assert lstm_mma.b_element("float32", lane, r) == mma_tf32.b_element(lane, r)
        for r in range(8):
            assert mma_16bit.index(*lstm_mma.a_element("float16", lane, r)) == (lane, r)


def test_the_block_shape_comes_from_the_cuda_target():
    """UNITS = warp / 8 (half a warp's lanes over the 4 gates), four warps a block."""
    spec = targets.get("cuda").tvm_target()
    rule = lstm_layer.LstmLayerForward()
    warp = spec["thread_warp_size"]
    assert rule.shape(None) == (warp // 8, 4 * warp, 4 * warp // (warp // 8))


@pytest.mark.parametrize("archs, limit", [("sm_80,sm_90", 2608), ("sm_90", 3632), ("sm_75", 1024), ("sm_72", 768)])
def test_the_slice_stays_on_chip_to_the_opt_in_of_the_archs_built(monkeypatch, archs, limit):
    """The W_hh slice (4 gates x 4 units x H float32: 64 H bytes) is the launch's dynamic shared memory
    up to the opt-in shared memory a block has on every architecture built (163 KB with sm_80 and
    sm_90: H = 2608; 227 KB on sm_90 alone; 64 KB on sm_75), one float past it; in float16 and bfloat16 twice as far."""
    monkeypatch.setenv(targets.CUDA_ARCH_ENV, archs)
    optin = targets.cuda.optin_shared_bytes()
    for dtype, size in (("float32", 4), ("float16", 2), ("bfloat16", 2)):
        record = lstm_layer.LstmLayerBackward().dynamic_shared(None, dtype)
        assert record == {"bytes_per_h": 16 * size, "up_to": optin // size * size, "else": size}
        last = limit * 4 // size
        assert cuda.dynamic_shared_bytes(record, last) == 16 * size * last <= optin
        assert cuda.dynamic_shared_bytes(record, last + 1) == size
    with pytest.raises(ValueError, match="H: expected a non-negative int, got -1"):
        cuda.dynamic_shared_bytes(record, -1)


# ----------------------------------------------------------------------------- co-residency

def test_grid_that_fits_is_accepted_and_its_bound_comes_from_occupancy():
    # 128 threads, 40 registers, 48 KiB of static shared memory: sm_80 holds three a SM by shared
    # memory (164 KiB, 1 KiB reserved a block), sm_90 four (228 KiB)
    assert cuda.co_resident_blocks("sm_80", threads=128, registers=40, shared_bytes=48 * 1024) == 3
    assert cuda.co_resident_blocks("sm_90", threads=128, registers=40, shared_bytes=48 * 1024) == 4
    # registers bound it: 255 registers x 256 threads (rounded to 256 a warp) take 64 K of the 64 K
    assert cuda.co_resident_blocks("sm_90", threads=256, registers=255, shared_bytes=0) == 1
    assert cuda.persistent_grid(32, "sm_80", sm_count=108, threads=128, registers=40, shared_bytes=48 * 1024) == 32
    assert cuda.persistent_grid(324, "sm_80", sm_count=108, threads=128, registers=40, shared_bytes=48 * 1024) == 324


def test_grid_that_cannot_be_co_resident_is_refused():
    with pytest.raises(cuda.CoResidencyError, match=r"325 blocks .* at most 324 \(108 SMs x 3"):
        cuda.persistent_grid(325, "sm_80", sm_count=108, threads=128, registers=40, shared_bytes=48 * 1024)
    with pytest.raises(cuda.CoResidencyError, match="at most 0"):
        cuda.persistent_grid(1, "sm_80", sm_count=108, threads=128, registers=40, shared_bytes=200 * 1024)
    with pytest.raises(ValueError, match="sm_count: expected a positive int, got 0"):
        cuda.persistent_grid(1, "sm_80", sm_count=0, threads=128, registers=40, shared_bytes=0)
    with pytest.raises(ValueError, match="arch: expected one of"):
        cuda.co_resident_blocks("sm_61", threads=128, registers=40, shared_bytes=0)


# ----------------------------------------------------------------------------- nvcc

def _launches(funcs, tgt):
    """(the executable, the host's kernel launches): each launch call TVM's SplitHostDevice writes,
    its last argument the launch's dynamic shared memory in bytes (``tirx.use_dyn_shared_memory``)."""
    import tvm
    import tvm_ffi

    calls = []

    @tvm.instrument.pass_instrument
    class Launches:
        def run_after_pass(self, mod, info):
            if info.name == "tirx.SplitHostDevice":
                tvm_ffi.structural_walk(mod, (tvm.ir.expr.Call, lambda c: calls.append(c) if getattr(
                    c.op, "name", None) == "tirx.call_ffi_kernel" else None))

    with tvm.transform.PassContext(instruments=[Launches()]):
        exe = tvm_api.compile_module({s: f for s, (f, _, _) in funcs.items()}, tgt)
    return exe, calls


def _at(expr, **sizes) -> int:
    """``expr`` (a host expression over the kernel's sizes) evaluated at ``sizes``."""
    import tvm
    from tvm.sym.analyzer import Analyzer

    from fusedgrad.schedules import tir_rewrite

    names = {v.name: v for v in tvm.tirx.analysis.undefined_vars(expr, [])}
    value = Analyzer().simplify(tir_rewrite.replace_vars(expr, {names[k]: tvm.tirx.IntImm("int32", v)
                                                                for k, v in sizes.items() if k in names}))
    return int(value)


@needs_nvcc
@pytest.mark.parametrize("dtype", ("float32", "float16", "bfloat16"))
@pytest.mark.parametrize("op_name", OPS)
def test_nvcc_builds_for_sm80_and_sm90_within_the_ptxas_limits(op_name, dtype, tmp_path):
    """The artifact's source (what nvcc compiled: the grid barrier in front), a cubin for sm_80 and sm_90
    each, checked against the limits (registers, spills, shared memory); each kernel calls the barrier
    and keeps its W_hh slice in dynamic shared memory, no static shared memory (ptxas counts none) but
    the ``tensor_cores`` entries' tile, whose sums are mma.sync (the others' none), and the host's
    launch asks for the dynamic bytes the manifest's record gives at every H, what co-residency counts
    (the float16 and bfloat16 slices on chip to twice the float32 one's H; bfloat16's holds its bits).
    The artifact comes through the suite's build cache (test_cuda_target's artifacts are the same
    builds)."""
    funcs, tgt = build.schedule_variants(op_name, "cuda", dtype)
    _, launches = _launches(funcs, tgt)
    entry = build_cache.artifact(op_name, "cuda", dtype, tmp_path)
    assert entry["archs"] == ["sm_80", "sm_90"]
    source = (tmp_path / entry["source"]).read_text()
    assert set(cuda.kernels_in_source(source)) == {f"{s}_kernel" for s in funcs}
    assert source.count(cuda.GRID_SYNC_NAME + "(") >= len(funcs) + 1  # its definition and a call a kernel
    ctype = {"float32": "float", "float16": "half", "bfloat16": "ushort"}[dtype]
    flag = {s: _flag(v) for s, (_, v, _) in funcs.items()}
    assert sorted(map(str, flag.values())) == sorted(map(str, [None, L.W_HH_GLOBAL, TC] * (len(funcs) // 3)))
    assert source.count(f"extern __shared__ __align__(64) {ctype} w_shared_ptr[];") == 2 * len(funcs) // 3
    assert "atomic" not in source.split(cuda.GRID_SYNC_END)[1]  # only the barrier's counter is atomic
    shape = lstm_mma.PTX[dtype][0]
    for s in funcs:  # a kernel's definition: from its name (after the declaration) to the next kernel
        body = source.split(f" {s}_kernel(")[2].split('extern "C"')[0]
        assert (f"mma.sync.aligned.{shape}.row.col.f32" in body) == (flag[s] == TC), s
    rule = lstm_layer.LstmLayerForward() if op_name == OPS[0] else lstm_layer.LstmLayerBackward()
    tile_bytes = 4 * math.prod(lstm_mma.tile_shape(rule, tgt)[2])
    kernels = entry["device_kernels"]
    assert {k["name"] for k in kernels} == {f"{s}_kernel" for s in funcs}
    for k in kernels:
        static = tile_bytes if flag[k["name"].removesuffix("_kernel")] == TC else 0
        for arch in ("sm_80", "sm_90"):
            r = k["arch"][arch]
            assert r["spill_bytes"] == 0 and r["shared_bytes"] == static, (k["name"], arch, r)
            assert cuda.co_resident_blocks(arch, k["threads"], r["registers"], r["shared_bytes"]) >= 1
    assert len(launches) == len(funcs)
    for symbol, (f, _, _) in funcs.items():  # the manifest's record: the slice in ``dtype``'s bytes
        assert build._launch_facts(f)["dynamic_shared"] == rule.dynamic_shared(
            tgt, dtype, flag[symbol] == L.W_HH_GLOBAL, flag[symbol] == TC)
    for call in launches:
        symbol = call.args[0].value.removesuffix("_kernel")
        record = rule.dynamic_shared(tgt, dtype, flag[symbol] == L.W_HH_GLOBAL, flag[symbol] == TC)
        static = tile_bytes if flag[symbol] == TC else 0
        size, last = record["else"], record["up_to"] // max(record["bytes_per_h"], 1)
        if flag[symbol] != L.W_HH_GLOBAL:
            assert list(call.attrs.launch_params)[-1] == "tirx.use_dyn_shared_memory"
            for H in (1, 37, 800, last, last + 1, 6000):
                assert _at(call.args[-1], H=H) == cuda.dynamic_shared_bytes(record, H), H
            assert cuda.dynamic_shared_bytes(record, last) == last * 16 * size
            assert cuda.dynamic_shared_bytes(record, last + 1) == size
            assert record["up_to"] + static <= targets.cuda.optin_shared_bytes()
        else:  # no dynamic shared memory: what the w_hh_global record gives at every H
            assert "tirx.use_dyn_shared_memory" not in list(call.attrs.launch_params)
            assert cuda.dynamic_shared_bytes(record, 6000) == 0
    plain = rule.dynamic_shared(tgt, dtype)
    assert plain["up_to"] // plain["bytes_per_h"] == 2608 * 4 // plain["else"]  # 163 KB with sm_80 and sm_90


def test_launch_check_takes_the_kernels_ptxas_resources_for_the_device():
    """What the full LSTM checks before a layer kernel's launch on a GPU (fusedgrad/lstm/buffers.py):
    the manifest's resources of the cubin the device runs (sm_90's on an sm_90 device, sm_80's on an
    sm_86 one, whose per-SM limits are its own)."""
    entry = {"device_kernels": [{"name": "fg_x_kernel", "threads": 128, "arch": {
        "sm_80": {"registers": 40, "shared_bytes": 48 * 1024}, "sm_90": {"registers": 40, "shared_bytes": 48 * 1024}}}]}
    assert cuda.check_persistent_launch(entry, "fg_x", 528, (9, 0), 132) == 528  # 132 SMs x 4
    with pytest.raises(cuda.CoResidencyError, match="at most 528"):
        cuda.check_persistent_launch(entry, "fg_x", 529, (9, 0), 132)
    with pytest.raises(cuda.CoResidencyError, match=r"at most 168 \(84 SMs x 2 .* sm_86"):  # 100 KiB a SM
        cuda.check_persistent_launch(entry, "fg_x", 169, (8, 6), 84)
    with pytest.raises(cuda.CoResidencyError, match="no cubin for sm_75"):
        cuda.check_persistent_launch(entry, "fg_x", 1, (7, 5), 40)
    with pytest.raises(ValueError, match="symbol: expected one device kernel fg_y_kernel"):
        cuda.check_persistent_launch(entry, "fg_y", 1, (9, 0), 132)


@pytest.mark.parametrize("op_name", OPS)
def test_the_manifest_records_the_units_a_block_owns(op_name):
    """The loader finds a layer kernel's grid (ceil(H / units) blocks) from the manifest's grid_units,
    and a launch's dynamic shared memory from its dynamic_shared, set by the rule from its block shape
    and the archs built: the GPU machine's runtime has no TVM compiler to ask the schedule (the
    ``tensor_cores`` entry's slice on chip to the opt-in less its 2 KiB tile of accumulators: 32 rows x
    16 columns forward, 4 gates x 16 rows x 8 columns backward).  Kernels without a grid barrier record
    neither."""
    funcs, tgt = build.schedule_variants(op_name, "cuda", "float32")
    rule = lstm_layer.LstmLayerForward() if op_name.endswith("forward") else lstm_layer.LstmLayerBackward()
    units = rule.shape(tgt)[0]
    assert units == rule.knob("UNITS", tgt)
    assert [v for _, v, _ in funcs.values()] == list(te_defs.get(op_name).variants_for("cuda"))
    assert 4 * math.prod(lstm_mma.tile_shape(rule, tgt)[2]) == 2048
    for f, v, _ in funcs.values():  # the w_hh_global entry keeps no slice: one value at every H
        assert build._launch_facts(f) == {"grid_units": units, "dynamic_shared": {
            "bytes_per_h": 4 * units * 4, "up_to": targets.cuda.optin_shared_bytes() - 2048 * v.get(TC, 0), "else": 4}
            if not v.get("w_hh_global") else {"bytes_per_h": 0, "up_to": 0, "else": 0}}
    cell, _ = build.schedule_variants("lstm_cell_forward", "cuda", "float32")
    assert all(build._launch_facts(f) == {} for f, _, _ in cell.values())


@pytest.fixture
def on_h200(monkeypatch):
    """(torch, fusedgrad.lstm.buffers) with torch's device properties an H200's: 132 SMs of sm_90."""
    torch = pytest.importorskip("torch")
    from fusedgrad.lstm import buffers

    class H200:
        major, minor, multi_processor_count = 9, 0, 132

    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: H200)
    return torch, buffers


def _kernels(**funcs):
    """Runtime kernels (symbol, func) as ``buffers._co_resident`` takes them, in the order given."""
    from types import SimpleNamespace

    return [SimpleNamespace(symbol=symbol, func=func) for symbol, func in funcs.items()]


def test_the_full_lstms_launch_check_takes_the_grid_from_the_manifest(on_h200):
    """fusedgrad/lstm/buffers.py's check before a layer kernel's launch: ceil(H / grid_units) blocks
    against the device (H from w_hh, the second argument), each with ptxas' static shared memory plus
    the launch's dynamic bytes at that H (the manifest's dynamic_shared); an artifact whose manifest
    predates either record is refused with what to do, not guessed."""
    torch, buffers = on_h200
    global_only = {"bytes_per_h": 32, "up_to": 0, "else": 4}  # the slice never on chip: 4 bytes a block
    entry = {"library": "x.so", "kernels": [{"symbol": "fg_x", "grid_units": 8, "dynamic_shared": global_only}],
             "device_kernels": [{"name": "fg_x_kernel", "threads": 128, "arch": {
                 "sm_90": {"registers": 40, "shared_bytes": 48 * 1024}}}]}
    calls = []
    launch = buffers._co_resident(entry, _kernels(fg_x=lambda *a: calls.append(a) or "ran"))
    w_hh = torch.empty(4 * 4224, 4224)  # 528 blocks of 8 units: 132 SMs x 4, the most that fit
    assert launch("xw", w_hh) == "ran" and len(calls) == 1
    with pytest.raises(cuda.CoResidencyError, match="grid of 529 blocks"):
        launch("xw", torch.empty(4 * 4225, 4225))
    assert len(calls) == 1
    entry["kernels"][0]["grid_units"] = 16  # the same H at 16 units a block: 265 blocks, which fit
    assert buffers._co_resident(entry, _kernels(fg_x=lambda *a: "ran"))("xw", torch.empty(4 * 4225, 4225)) == "ran"
    for key in ("dynamic_shared", "grid_units"):
        older = {**entry, "kernels": [{k: v for k, v in entry["kernels"][0].items() if k != key}]}
        with pytest.raises(ValueError, match=f"record the persistent kernel's {key}; the artifact x.so predates it"):
            buffers._co_resident(older, _kernels(fg_x=lambda *a: None))


def test_the_launch_takes_the_slice_on_chip_where_that_grid_fits_else_global_w_hh(on_h200):
    """The launch check counts the slice a launch asks for and picks the entry point: 4 units a block,
    no static shared memory, the slice 64 H bytes on chip to 163 KB.  On an H200 (132 SMs, 228 KiB a SM,
    1 KiB reserved a block) H = 1024 is 256 blocks of 64 KiB, three a SM: on chip; H = 1280, 320 blocks
    of 80 KiB, two a SM (264 at most): the w_hh_global entry (no shared memory, 12 a SM by registers);
    H = 6400, 1600 blocks: neither (1584 at most), refused naming both."""
    torch, buffers = on_h200
    record = lstm_layer.LstmLayerForward().dynamic_shared(None, "float32")
    off_chip = lstm_layer.LstmLayerForward().dynamic_shared(None, "float32", w_hh_global=True)
    resources = {"threads": 128, "arch": {"sm_90": {"registers": 40, "shared_bytes": 0}}}
    entry = {"library": "x.so", "kernels": [{"symbol": "fg_x", "grid_units": 4, "dynamic_shared": record},
                                            {"symbol": "fg_x_g", "grid_units": 4, "dynamic_shared": off_chip}],
             "device_kernels": [{"name": "fg_x_kernel", **resources}, {"name": "fg_x_g_kernel", **resources}]}
    launch = buffers._co_resident(entry, _kernels(fg_x=lambda *a: "on chip", fg_x_g=lambda *a: "global"))
    assert launch("xw", torch.empty(4 * 1024, 1024)) == "on chip"
    assert launch("xw", torch.empty(4 * 1280, 1280)) == "global"
    assert launch("xw", torch.empty(4 * 6336, 6336)) == "on chip"  # past 163 KB the slice is not on chip
    with pytest.raises(cuda.CoResidencyError, match=r"fg_x: .*320 blocks .* at most 264 \(132 SMs x 2 .* 81920 bytes"):
        cuda.persistent_choice(entry, ["fg_x"], 1280, (9, 0), 132)
    with pytest.raises(cuda.CoResidencyError, match=r"H = 6400: fg_x: .*1600 blocks .* at most 1584.* -- fg_x_g: .*1600"):
        launch("xw", torch.empty(4 * 6400, 6400))

def test_the_full_lstm_takes_the_tensor_core_entry_where_its_gemms_run_there(on_h200, monkeypatch):
    """fusedgrad/lstm/buffers.py, from the manifest (no GPU): a call whose GEMMs run on the tensor cores
    (``gemm_dtype`` set) launches a layer kernel's ``tensor_cores`` entry where B >= 16 and that grid is
    resident on the device, else what any call takes (the slice on chip, else global W_hh).  On an H200
    (132 SMs of 228 KiB, 1 KiB reserved a block; 4 units a block): H = 1024 fits both on-chip grids,
    three blocks a SM; at H = 1184 (296 blocks) the on-chip one still does (75 KiB a block) but with the
    2 KiB tile two a SM (264) do: the slice on chip without the tensor cores; H = 1280 neither: global."""
    from types import SimpleNamespace

    torch, buffers = on_h200
    op_name = OPS[0]
    rule = lstm_layer.LstmLayerForward()
    variant = te_defs.get(op_name).variants[0]
    kinds = {None: {}, L.W_HH_GLOBAL: {"w_hh_global": True}, TC: {"tensor_cores": True}}
    symbols = {k: naming.entry_symbol(op_name, "float32", {**variant, **flags}) for k, flags in kinds.items()}
    entry = {"library": "x.so", "kernels": [], "device_kernels": []}
    for k, symbol in symbols.items():
        entry["kernels"].append({"symbol": symbol, "grid_units": 4, "dynamic_shared": rule.dynamic_shared(
            None, "float32", k == L.W_HH_GLOBAL, k == TC)})
        entry["device_kernels"].append({"name": f"{symbol}_kernel", "threads": 128, "arch": {
            "sm_90": {"registers": 64, "shared_bytes": 2048 if k == TC else 0}}})
    art = SimpleNamespace(entry=entry, kernel=lambda v: SimpleNamespace(
        symbol=naming.entry_symbol(op_name, "float32", v), func=lambda *a: naming.entry_symbol(op_name, "float32", v)))
    monkeypatch.setattr(runtime, "artifact", lambda *key: art)
    fresh = buffers.kernel.__wrapped__  # not the process's cache
    for tensor_cores, B, H, want in ((True, 16, 1024, TC), (True, 15, 1024, None), (False, 32, 1024, None),
                                     (True, 32, 1184, None), (True, 32, 1280, L.W_HH_GLOBAL)):
        launch = fresh(op_name, "cuda", "float32", tensor_cores, **variant)
        assert launch(torch.empty(0, B), torch.empty(0, H)) == symbols[want], (tensor_cores, B, H)
    seen = []
    monkeypatch.setattr(buffers, "kernel", lambda op, target, dtype, **flags: seen.append((op, flags)))
    for gemm_dtype in ("float32", None):
        arrays = buffers.TorchArrays(torch.device("cpu"), gemm_dtype)
        arrays.kernel(op_name, **variant)
        arrays.kernel("matmul_packed", has_bias=False)
    assert seen == [(op_name, {"tensor_cores": True, **variant}), ("matmul_packed", {"has_bias": False}),
                    (op_name, variant), ("matmul_packed", {"has_bias": False})]


def test_the_committed_sources_define_the_grid_barrier_they_call():
    """generated/cuda's .cu files are what a user compiles: one that calls the grid barrier carries its
    definition (TVM prints only the call), as the source nvcc compiled for the artifact does."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "generated" / "cuda"
    calling = [p for p in sorted(root.glob("*.cu")) if f"{cuda.GRID_SYNC_NAME}(" in p.read_text()]
    assert {p.name.split(".")[0] for p in calling} >= {"lstm_layer_forward", "lstm_layer_backward"}
    for p in calling:
        text = p.read_text()
        assert cuda.GRID_SYNC in text, f"{p.name} calls {cuda.GRID_SYNC_NAME} without defining it"
        assert text.index(cuda.GRID_SYNC) < text.index("extern \"C\" __global__"), f"{p.name}: defined after a kernel"
