"""The CUDA target without a GPU: the ops it serves, nvcc-built artifacts, their
checks, and the hand CUDA schedules' loop nests run on the host (thread loops
left serial).

What needs a GPU (numerics on the device, speed) is benchmarks/gpu_check.py.
"""
import functools
import hashlib
import json
import os
import re
import shutil
import struct
import subprocess
import sys

import numpy as np
import pytest

import build_cache

from fusedgrad import api, runtime, schedules, targets, te_defs
from fusedgrad.lowering import build, cuda, naming, tvm_api, tvm_workarounds
from fusedgrad.schedules import tir_api

NVCC = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc (CUDA toolkit) is not installed on this machine")

# every op the CUDA target serves has a hand schedule: the cell and LayerNorm backward (every dtype),
# and the full LSTM's float32 kernels
MULTI_DTYPE = ("lstm_cell_backward", "layer_norm_backward")
LSTM_KERNELS = ("matmul_packed", "pack_b", "pack_bt", "lstm_cell_forward", "lstm_step_backward", "column_sum")
TENSOR_CORE = ("matmul",)  # float16 / bfloat16 inputs, and float32 ones as TF32 (tests/test_cuda_matmul.py)
# the persistent layer kernels of the recurrence (float32, float16, bfloat16; tests/test_cuda_lstm_layer.py)
LSTM_LAYER = ("lstm_layer_forward", "lstm_layer_backward")
HAND = MULTI_DTYPE + LSTM_KERNELS + TENSOR_CORE + LSTM_LAYER
TOL = {"float32": 2e-5, "float16": 2e-2, "bfloat16": 8e-2}


# ----------------------------------------------------------------------------- host emulation

def _emulated_library(op_name, dtype):
    funcs, _ = build.schedule_variants(op_name, "cuda", dtype, emulate_on_host=True)
    rules = {rule for _, _, rule in funcs.values()}
    assert rules != {"Generic"}, f"{op_name} has no hand CUDA schedule to emulate"
    exe = tvm_api.compile_module({s: f for s, (f, _, _) in funcs.items()},
                                 tvm_api.target(targets.get("llvm").tvm_target()))
    op = te_defs.get(op_name)
    # host memory, host code: the API looks it up as the host (llvm) artifact of the op
    entry = {"op": op_name, "target": "llvm", "dtype": dtype,
             "kernels": [{"symbol": s, "variant": v, "args": build.arg_specs(op, v, dtype)}
                         for s, (_, v, _) in funcs.items()]}
    lib = runtime.Library()
    lib[(op_name, "llvm", dtype)] = runtime.Artifact(entry, exe.mod, None)
    return lib


@functools.lru_cache(maxsize=None)
def emulated_library(op_name, dtype):
    """``_emulated_library`` of the package's rules as they are, built once a process (tests/test_vector_access.py
    shares it); a test that changes a rule builds its own with ``_emulated_library``."""
    return _emulated_library(op_name, dtype)


@pytest.fixture(scope="module")
def emulated():
    return emulated_library


def _call(lib, op_name, arrays, variant):
    return api.run(op_name, arrays, {}, variant, library=lib)


@pytest.mark.parametrize("op_name", MULTI_DTYPE)
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("shape", ["N=1 H=1", "odd", "rows not a block multiple"])
def test_hand_schedule_loop_nest_matches_reference(emulated, op_name, dtype, shape):
    dims = {
        "lstm_cell_backward": {"N=1 H=1": {"N": 1, "H": 1}, "odd": {"N": 13, "H": 37},
                               "rows not a block multiple": {"N": 37, "H": 130}},
        "layer_norm_backward": {"N=1 H=1": {"M": 1, "D": 1}, "odd": {"M": 13, "D": 37},
                                "rows not a block multiple": {"M": 133, "D": 50}},
    }[op_name][shape]
    _check_against_reference(emulated(op_name, dtype), op_name, dims, dtype)


def test_emulated_schedule_propagates_nan(emulated):
    op = te_defs.get("lstm_cell_backward")
    sample = op.sample({"N": 20, "H": 33}, np.random.default_rng(2))
    arrays = {k: v.astype(np.float32) for k, v in sample.items()}
    arrays["cx"][17, 5] = np.nan
    variant = op.variants[0]
    got = _call(emulated("lstm_cell_backward", "float32"), "lstm_cell_backward", arrays, variant)
    H = 33
    assert np.isnan(got["grad_gates"][17, H + 5])  # d_f uses cx
    assert np.isnan(got["grad_bias"][H + 5])  # and the bias sums it (row 17 is in the second row block)
    assert not np.isnan(got["grad_gates"][16]).any() and not np.isnan(got["grad_cx"]).any()


from fusedgrad.schedules.cuda import layer_norm_backward as ln_rule  # noqa: E402


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("strided", [False, True])
def test_layer_norm_row_block_loop_nest_matches_reference(emulated, dtype, strided):
    """Whole row blocks and a D within the shared-memory bound: the row-block schedule (one pass).
    Rows shorter than one walk of the block's threads too (D < LANES x SPLIT: threads with nothing to
    add must still hold a zero partial)."""
    rb = ln_rule.ROW_BLOCK
    for dims in ({"M": 3 * rb, "D": 300}, {"M": rb, "D": 1}, {"M": 2 * rb, "D": 100}):
        _check_against_reference(emulated("layer_norm_backward", dtype), "layer_norm_backward", dims, dtype,
                                 strided=strided)


def test_layer_norm_row_block_bound_comes_from_the_archs_opt_in_shared_memory(monkeypatch):
    host = tvm_api.target(targets.get("llvm").tvm_target())
    limit = targets.cuda.optin_shared_bytes()
    d = ln_rule.max_row_block_d(host)
    monkeypatch.setenv(targets.cuda.CUDA_ARCH_ENV, "sm_90")
    assert ln_rule.max_row_block_d(host) > d  # 227 KB on sm_90 alone
    walk = ln_rule.LANES * ln_rule.SPLIT
    # two float32 partial rows, each aligned to 64 bytes, and the two row sums' reduction buffers
    used = 2 * (4 * d + 64) + 2 * 4 * walk
    assert d % walk == 0 and used <= limit < used + 2 * 4 * walk, (d, limit)


def test_layer_norm_schedule_is_chosen_per_call_by_the_shape(monkeypatch):
    """The host test that picks the schedule: M a whole number of row blocks and D within the bound.
    Where it holds, the row-block schedule's dgamma (16-row partials) differs in its last bits from
    the per-row schedule's (32-row partials); both are checked against float64 either side of the
    bounds.  (Bits are not compared where both run the per-row schedule: the two builds may contract
    a*b+c into fma differently, docs/TVM_FINDINGS.md.)"""
    rb = ln_rule.ROW_BLOCK
    widest = ln_rule.max_row_block_d(tvm_api.target(targets.get("llvm").tvm_target()))
    funcs, _ = build.schedule_variants("layer_norm_backward", "cuda", "float32")
    text = tir_api.script(next(iter(funcs.values()))[0])
    assert f"M % {rb} == 0 and D <= {widest}" in text, "the branch condition is not the rule's"
    both = emulated_library("layer_norm_backward", "float32")
    monkeypatch.setattr(ln_rule, "ROW_BLOCK", 0)  # the per-row schedule alone
    per_row = _emulated_library("layer_norm_backward", "float32")
    monkeypatch.undo()
    op = te_defs.get("layer_norm_backward")
    for dims, blocked in (({"M": 3 * rb, "D": 300}, True), ({"M": 3 * rb - 1, "D": 300}, False),
                          ({"M": 2 * rb, "D": widest}, True), ({"M": 2 * rb, "D": widest + 1}, False)):
        _check_against_reference(both, "layer_norm_backward", dims)
        if blocked:
            arrays = {k: v.astype("float32") for k, v in op.sample(dims, np.random.default_rng(7)).items()}
            a, b = (_call(lib, "layer_norm_backward", arrays, {})["dgamma"] for lib in (both, per_row))
            assert not np.array_equal(a, b), dims


def _check_against_reference(lib, op_name, dims, dtype="float32", seed=1, strided=False):
    """Every variant of ``op_name`` at ``dims`` against its float64 reference; ``strided``: the inputs
    as views inside wider rows (passed to the kernel without a copy)."""
    op = te_defs.get(op_name)
    sample = op.sample(dims, np.random.default_rng(seed))
    arrays = {k: v.astype(dtype) for k, v in sample.items()}
    if strided:
        arrays = {k: _wider(v) for k, v in arrays.items()}
    exact = {k: v.astype(np.float64) for k, v in arrays.items()}
    specs = {s.name: s for s in op.inputs}
    for variant in op.variants:
        given = {k: v for k, v in arrays.items() if op.present(specs[k], variant)}
        got = _call(lib, op_name, given, variant)
        ref = op.reference(**{k: (exact[k] if k in given else None) for k in arrays}, **variant)
        for name, value in got.items():
            if value is None:
                continue
            r = ref[name].reshape(value.shape)
            err = np.abs(value.astype(np.float64) - r).max() / (np.abs(r).max() + 1.0)
            assert err <= TOL[dtype], (op_name, dims, variant, name, err)


def _wider(v):
    """``v`` (2-D) as a view inside rows 5 elements wider, NaN around it."""
    if v.ndim != 2:
        return v
    w = np.full((v.shape[0], v.shape[1] + 5), np.nan, v.dtype)
    w[:, 2:2 + v.shape[1]] = v
    return w[:, 2:2 + v.shape[1]]


LSTM_KERNEL_SHAPES = {
    # M rows (1, under one few-rows tile, over one main tile, a partial second one), K (1, under one
    # chunk, a chunk tail, several chunks), N = 32 * Nb (half of a 64-column tile, one and a half)
    "matmul_packed": [{"M": m, "K": k, "Nb": nb} for m in (1, 5, 33, 70) for k in (1, 7, 37, 130) for nb in (1, 3)],
    "pack_b": [{"K": k, "Nb": nb} for k in (1, 37, 130) for nb in (1, 3)],
    "pack_bt": [{"K": k, "Nb": nb} for k in (1, 37, 130) for nb in (1, 3)],
    "lstm_cell_forward": [{"N": 1, "H": 1}, {"N": 13, "H": 37}, {"N": 37, "H": 130}],
    "lstm_step_backward": [{"N": 1, "H": 1}, {"N": 13, "H": 37}, {"N": 37, "H": 130}],
    "column_sum": [{"K": k, "N": n} for k in (1, 37, 300) for n in (1, 33)],
}


@pytest.mark.parametrize("op_name", LSTM_KERNELS)
def test_lstm_kernel_loop_nest_matches_reference(emulated, op_name):
    """The full LSTM's kernels (float32 only), every variant (matmul_packed: bias x addend x
    few_rows) at shapes that leave tails in every tiled axis."""
    lib = emulated(op_name, "float32")
    for dims in LSTM_KERNEL_SHAPES[op_name]:
        _check_against_reference(lib, op_name, dims)


@pytest.mark.parametrize("op_name", LSTM_KERNELS)
def test_lstm_kernel_loop_nest_takes_row_strided_inputs(emulated, op_name):
    """Inputs inside wider rows (the NaN around them must not be read): the shared-memory tiles of
    matmul_packed and pack_bt are copies, whatever the input's row stride."""
    dims = {"matmul_packed": {"M": 33, "K": 37, "Nb": 3}, "pack_b": {"K": 37, "Nb": 3},
            "pack_bt": {"K": 37, "Nb": 3}, "column_sum": {"K": 37, "N": 33}}.get(op_name, {"N": 13, "H": 37})
    _check_against_reference(emulated(op_name, "float32"), op_name, dims, seed=4, strided=True)


@pytest.mark.parametrize("few_rows", [False, True])
def test_emulated_matmul_propagates_nan_to_its_row_only(emulated, few_rows):
    op = te_defs.get("matmul_packed")
    M, K, Nb = 70, 37, 3
    arrays = {k: v.astype(np.float32) for k, v in op.sample({"M": M, "K": K, "Nb": Nb},
                                                               np.random.default_rng(5)).items()}
    r = 66  # in the last, partial row tile of either entry
    arrays["a"][r, 36] = np.nan  # in the last, partial K chunk
    lib = emulated("matmul_packed", "float32")
    for has_bias in (False, True):
        variant = {"has_bias": has_bias, "has_addend": False, "few_rows": few_rows}
        got = _call(lib, "matmul_packed", {k: v for k, v in arrays.items() if k != "addend" and
                                           (has_bias or k != "bias")}, variant)["c"]
        assert np.isnan(got[r]).all(), variant
        assert not np.isnan(np.delete(got, r, axis=0)).any(), variant


def test_step_backward_writes_dgates_t_along_its_rows():
    """On the GPU, dgates_t (the transposed view) is written from a shared tile with consecutive threads
    at consecutive n: the store's index ends in threadIdx.x modulo the tile's rows (unit stride), after
    one barrier; the tile is [rows, 4 gates, columns + 1] floats (a padded row: no bank conflicts)."""
    from fusedgrad.schedules.cuda import lstm_kernels as LK

    tgt = tvm_api.target(targets.get("cuda").tvm_target())
    funcs, _ = build.schedule_variants("lstm_step_backward", "cuda", "float32")
    source = tvm_api.device_source(tvm_api.compile_module({s: f for s, (f, _, _) in funcs.items()}, tgt), "cuda")
    stores = re.findall(r"dgates_t_ptr\[(.*)\] = ", source)
    assert stores and all(st.endswith(f"(((int)threadIdx.x) & {LK.STEP_ROWS - 1}))") for st in stores), stores
    assert f"float dgates_shared_ptr[{LK.STEP_ROWS * 4 * (LK.STEP_COLS + 1)}]" in source
    assert source.count("__syncthreads()") == 1


def test_emulated_step_backward_writes_dgates_t_into_a_wider_view(emulated):
    """dgates_t goes into columns of a caller's [4H, T·B] buffer (any row stride): exactly those."""
    op = te_defs.get("lstm_step_backward")
    N, H = 13, 37
    ins = {k: v.astype(np.float32) for k, v in op.sample({"N": N, "H": H}, np.random.default_rng(6)).items()}
    kernel = emulated("lstm_step_backward", "float32").kernel("lstm_step_backward", "float32", {}, "llvm")
    dgates = np.empty((N, 4 * H), np.float32)
    dcx = np.empty((N, H), np.float32)
    wide = np.full((4 * H, 3 * N + 1), np.nan, np.float32)  # three steps' columns (+1: an odd row stride)
    view = wide.reshape(4, H, 3 * N + 1)[:, :, N:2 * N]
    kernel(*(ins[n] for n in ("dh", "dy", "dc", "cx", "i", "f", "g", "o", "tanhc")), dgates.reshape(N, 4, H), dcx, view)
    ref = op.reference(**{k: v.astype(np.float64) for k, v in ins.items()})
    np.testing.assert_array_equal(wide[:, N:2 * N], dgates.T)
    np.testing.assert_allclose(dgates, ref["dgates"], rtol=0, atol=TOL["float32"] * (np.abs(ref["dgates"]).max() + 1))
    assert np.isnan(wide[:, :N]).all() and np.isnan(wide[:, 2 * N:]).all()


# ----------------------------------------------------------------------------- packaging

def test_cuda_target_serves_the_ops_the_cuda_api_runs():
    """The CUDA API runs the LSTM-cell and LayerNorm backward (every dtype) and the full LSTM's
    float32 kernels; each has a hand rule.  The LSTM's kernels exist in float32 only, its persistent
    layer kernels also in float16 and bfloat16 (their definitions' storage dtypes)."""
    info = targets.get("cuda")
    assert set(info.ops) == set(HAND)
    assert {rule.op for rule in schedules.rules(info.schedules) if rule.op} == set(HAND)
    for op_name in LSTM_KERNELS:
        assert info.dtypes_for(op_name) == ("float32",)
    for op_name in LSTM_LAYER:
        assert info.dtypes_for(op_name) == ("float32", "float16", "bfloat16")
    assert set(info.dtypes_for("matmul")) == {"float16", "bfloat16", "float32"}  # float32: TF32
    assert "matmul" not in targets.get("llvm").ops  # the CPU's GEMM is matmul_packed
    with pytest.raises(ValueError, match=r"\('matmul_packed', 'cuda', 'float16'\) is not supported"):
        build.schedule_variants("matmul_packed", "cuda", "float16")


def test_generic_rule_schedules_an_op_without_a_hand_cuda_rule():
    """The package's last rule (dlight) takes any op, e.g. a GEMM from the llvm-side definition:
    what a new op gets on CUDA before its hand rule.  TVM prints the CUDA source without nvcc."""
    op = te_defs.get("matmul_packed")
    func = tir_api.prim_func(op.compute("float32"), "main", op.name)
    tgt = tvm_api.target(targets.get("cuda").tvm_target())
    generic = schedules.rules(targets.get("cuda").schedules)[-1]
    assert generic.op is None and type(generic).__name__ == "Generic"
    sch = generic.apply(func, tgt)
    source = tvm_api.device_source(tvm_api.compile_module({"main": sch.mod["main"]}, tgt), "cuda")
    assert '__global__ void' in source and "blockIdx.x" in source


def test_cuda_target_is_registered_with_archs(monkeypatch):
    info = targets.get("cuda")
    assert info.artifact == "cuda_fatbin" and not info.runnable_here
    monkeypatch.setenv(targets.CUDA_ARCH_ENV, "sm_90, sm_80")
    assert targets.cuda_archs() == ("sm_80", "sm_90")
    assert info.tvm_target()["arch"] == "sm_80"  # the source is generated for the oldest
    for bad in ("sm_60", "compute_90", "90", "sm_x"):
        monkeypatch.setenv(targets.CUDA_ARCH_ENV, bad)
        with pytest.raises(ValueError, match="expected comma-separated CUDA architectures"):
            targets.cuda_archs()


def test_gencode_flags_carry_ptx_of_the_newest_arch():
    assert cuda.gencode_flags(["sm_80", "sm_90"]) == [
        "-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=[sm_90,compute_90]"]


def test_ptxas_report_parsing():
    text = """ptxas info    : Compiling entry function 'k1' for 'sm_90'
ptxas info    : Function properties for k1
    8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 2048 bytes smem
ptxas info    : Compiling entry function 'k1' for 'sm_80'
ptxas info    : Function properties for k1
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 10 registers, used 0 barriers, 372 bytes cmem[0]
"""
    r = cuda.parse_ptxas_report(text)
    assert r["k1"]["sm_90"] == {"registers": 40, "shared_bytes": 2048, "stack_bytes": 8, "spill_bytes": 8}
    assert r["k1"]["sm_80"]["registers"] == 10 and r["k1"]["sm_80"]["shared_bytes"] == 0


def test_resource_limits_are_enforced():
    src = 'extern "C" __global__ void __launch_bounds__(1024) k(float* a) {}\n'
    ok = {"k": {"sm_80": {"registers": 64, "shared_bytes": 0, "stack_bytes": 0, "spill_bytes": 0}}}
    assert cuda.device_kernels(src, ok, ["sm_80"])[0]["threads"] == 1024
    too_many = {"k": {"sm_80": {"registers": 65, "shared_bytes": 0, "stack_bytes": 0, "spill_bytes": 0}}}
    with pytest.raises(cuda.ToolchainError, match="registers"):
        cuda.device_kernels(src, too_many, ["sm_80"])
    smem = {"k": {"sm_80": {"registers": 8, "shared_bytes": 49153, "stack_bytes": 0, "spill_bytes": 0}}}
    with pytest.raises(cuda.ToolchainError, match="shared memory"):
        cuda.device_kernels(src, smem, ["sm_80"])
    with pytest.raises(cuda.ToolchainError, match="reported nothing for"):
        cuda.device_kernels(src, ok, ["sm_80", "sm_90"])
    # dynamic shared memory: static plus dynamic against each arch's opt-in maximum (163 KB on sm_80,
    # 227 KB on sm_90), recorded in the kernel's record
    both = {"k": {a: {"registers": 8, "shared_bytes": 1024, "stack_bytes": 0, "spill_bytes": 0}
                  for a in ("sm_80", "sm_90")}}
    rec = cuda.device_kernels(src, both, ["sm_90"], dynamic={"k": 227 * 1024 - 1024})
    assert rec[0]["dynamic_shared_bytes"] == 227 * 1024 - 1024
    with pytest.raises(cuda.ToolchainError, match="opt-in maximum") as err:
        cuda.device_kernels(src, both, ["sm_80", "sm_90"], dynamic={"k": 163 * 1024 - 1023})
    assert "on sm_80" in str(err.value)


def test_optin_shared_memory_is_the_least_of_the_archs_built():
    assert targets.cuda.optin_shared_bytes(["sm_90"]) == 227 * 1024
    assert targets.cuda.optin_shared_bytes(["sm_80", "sm_90"]) == 163 * 1024
    assert targets.cuda.optin_shared_bytes(["sm_86", "sm_80"]) == 99 * 1024
    with pytest.raises(ValueError, match=r"archs: expected CUDA architectures .* got \['sm_61'\]"):
        targets.cuda.optin_shared_bytes(["sm_61"])


def test_blob_rewrite_keeps_function_map_and_fixes_lengths():
    def s(b):
        return struct.pack("<Q", len(b)) + b
    fmap = b"\x01" + b"FMAP-BYTES"
    source = "extern \"C\" __global__ void k() {}"
    payload = s(b"cuda") + fmap + s(source.encode())
    body = b"HEAD" + s(b"_lib") + s(b"cuda") + struct.pack("<Q", len(payload)) + payload + b"TAIL"
    blob = struct.pack("<Q", len(body)) + body
    new = tvm_workarounds.replace_device_code(blob, source, b"FATBIN\x00DATA")
    (total,) = struct.unpack_from("<Q", new)
    assert total == len(new) - 8 and new.endswith(b"TAIL")
    (payload2,) = tvm_workarounds.device_payloads(new)
    assert payload2 == s(b"fatbin") + fmap + s(b"FATBIN\x00DATA")
    with pytest.raises(ValueError, match="expected one CUDA module"):
        tvm_workarounds.replace_device_code(blob, "other source", b"x")


@pytest.fixture(scope="module")
def cuda_artifacts(tmp_path_factory):
    if NVCC is None:
        pytest.skip("nvcc (CUDA toolkit) is not installed on this machine")
    out = tmp_path_factory.mktemp("cuda")
    # every op once (nvcc takes a while per artifact; a build of the same cache key is reused)
    for op_name in MULTI_DTYPE + LSTM_KERNELS + LSTM_LAYER:
        build_cache.artifact(op_name, "cuda", "float32", out)
    build_cache.artifact("lstm_cell_backward", "cuda", "float16", out)
    for dtype in ("float16", "bfloat16"):
        build_cache.artifact("matmul", "cuda", dtype, out)
    return out


@needs_nvcc
def test_artifacts_carry_fatbins_for_every_arch(cuda_artifacts):
    manifest = json.loads((cuda_artifacts / "manifest.json").read_text())
    assert len(manifest["artifacts"]) == len(HAND) + 2
    for art in manifest["artifacts"]:
        lib = cuda_artifacts / art["library"]
        assert build.file_sha256(lib) == art["sha256"]
        assert art["archs"] == ["sm_80", "sm_90"] and art["nvcc"].startswith("V")
        # the library's embedded CUDA module is the fatbin, not the source
        (payload,) = tvm_workarounds.device_payloads(lib.read_bytes())
        assert payload.startswith(struct.pack("<Q", 6) + b"fatbin")
        fat = payload[-art["fatbin_bytes"]:]
        assert hashlib.sha256(fat).hexdigest() == art["fatbin_sha256"]
        assert b"extern \"C\" __global__" not in payload
        # every kernel of the source is in the report, within limits, for both archs
        source = (cuda_artifacts / art["source"]).read_text()
        names = set(cuda.kernels_in_source(source))
        assert names == {k["name"] for k in art["device_kernels"]}
        for k in art["device_kernels"]:
            assert k["threads"] <= 1024
            for arch in ("sm_80", "sm_90"):
                r = k["arch"][arch]
                assert 0 < r["registers"] <= 255 and r["shared_bytes"] <= 48 * 1024
                assert r["spill_bytes"] == 0, (k["name"], arch, r)
        # every entry symbol's host wrapper launches kernels named in the fatbin's source
        for k in art["kernels"]:
            assert any(n.startswith(k["symbol"] + "_kernel") for n in names), k["symbol"]


@needs_nvcc
def test_hand_schedules_are_used(cuda_artifacts):
    manifest = json.loads((cuda_artifacts / "manifest.json").read_text())
    rules = {a["op"]: {k["rule"] for k in a["kernels"]} for a in manifest["artifacts"]}
    assert rules == {"lstm_cell_backward": {"LstmCellBackward"}, "layer_norm_backward": {"LayerNormBackward"},
                     "matmul_packed": {"MatmulPacked"}, "pack_b": {"PackB"}, "pack_bt": {"PackBT"},
                     "lstm_cell_forward": {"LstmCellForward"}, "lstm_step_backward": {"LstmStepBackward"},
                     "column_sum": {"ColumnSum"}, "matmul": {"Matmul"},
                     "lstm_layer_forward": {"LstmLayerForward"}, "lstm_layer_backward": {"LstmLayerBackward"}}
    # the full LSTM's kernels: one fused kernel per entry, column_sum two (partials + fixed-order sum)
    for art in manifest["artifacts"]:
        if art["op"] not in LSTM_KERNELS:
            continue
        names = [d["name"] for d in art["device_kernels"]]
        for k in art["kernels"]:
            mine = [n for n in names if n.rsplit("_kernel", 1)[0] == k["symbol"]]
            assert len(mine) == (2 if art["op"] == "column_sum" else 1), (k["symbol"], names)
        if art["op"] in ("matmul_packed", "pack_bt"):  # tiles staged in shared memory
            assert all(d["arch"][a]["shared_bytes"] > 0 for d in art["device_kernels"] for a in art["archs"])
    cell = next(a for a in manifest["artifacts"] if a["op"] == "lstm_cell_backward" and a["dtype"] == "float32")
    # fused: in each of its two schedules (vector and scalar accesses), one kernel for the variant
    # without grad_bias, two (pass + fixed-order sum) with it
    per_symbol = {k["symbol"]: [n for n in (d["name"] for d in cell["device_kernels"])
                                if n.rsplit("_kernel", 1)[0] == k["symbol"]] for k in cell["kernels"]}
    for symbol, kernels in per_symbol.items():
        assert len(kernels) == 2 * (2 if "bias" in symbol.split("__")[1] else 1), (symbol, kernels)


@needs_nvcc
@pytest.mark.parametrize("op_name", LSTM_LAYER)
def test_the_persistent_layer_launch_keeps_w_hh_on_chip_where_that_grid_fits(cuda_artifacts, op_name, monkeypatch):
    """The full LSTM's layer kernel (fusedgrad/lstm/buffers.py's ``kernel``) with the built artifact's
    manifest (grid_units, dynamic_shared, ptxas' registers; each entry point standing in by its name),
    torch's device properties a 108-SM sm_80's and a 132-SM sm_90's: it launches the entry with W_hh's
    slice on chip where that grid is resident (16·H² bytes of shared memory over it: to H = 864 / 1200),
    else the w_hh_global entry (no shared memory, 64 / 56 registers: to H = 3456 / 4752), where the
    on-chip grid alone is refused; refused naming both where neither grid fits (docs/cuda.md quotes
    these bounds)."""
    from types import SimpleNamespace

    torch = pytest.importorskip("torch")
    from fusedgrad.lstm import buffers

    manifest = json.loads((cuda_artifacts / "manifest.json").read_text())
    (entry,) = [a for a in manifest["artifacts"] if a["op"] == op_name]
    names = {k["symbol"]: (lambda *a, symbol=k["symbol"]: symbol) for k in entry["kernels"]}
    monkeypatch.setattr(runtime, "artifact", lambda *key: runtime.Artifact(entry, names, None))
    variant = next(k["variant"] for k in entry["kernels"] if "w_hh_global" not in k["variant"])
    on, off = (naming.entry_symbol(op_name, "float32", v) for v in (variant, {**variant, "w_hh_global": True}))
    picks = {(8, 108): {864: on, 865: off, 1024: off, 2000: off, 3456: off, 3457: None},
             (9, 132): {1024: on, 1200: on, 1201: off, 1280: off, 2000: off, 4752: off, 4753: None}}
    for (major, sms), cases in picks.items():
        props = SimpleNamespace(major=major, minor=0, multi_processor_count=sms)
        monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: props)
        launch = buffers.kernel.__wrapped__(op_name, "cuda", "float32", **variant)  # not the process's cache
        for H, want in cases.items():
            if want is None:  # neither grid fits
                with pytest.raises(cuda.CoResidencyError, match=f"H = {H}: {on}: .*cannot be resident.* -- {off}: "):
                    launch(None, torch.empty(0, H))
                continue
            assert launch(None, torch.empty(0, H)) == want, (major, sms, H)
            if want == off:  # the on-chip grid alone is refused there
                with pytest.raises(cuda.CoResidencyError, match=f"{on}: .*cannot be resident"):
                    cuda.persistent_choice(entry, [on], H, (major, 0), sms)


@needs_nvcc
def test_loading_without_a_driver_says_what_is_missing(cuda_artifacts):
    if tvm_api.runtime_enabled("cuda"):
        pytest.skip("this machine has TVM's CUDA runtime loaded")
    # in a fresh process: the loader must not have been tried before
    code = ("import fusedgrad.runtime as r, sys\n"
            f"try:\n    r.load({str(cuda_artifacts)!r}, targets=('cuda',))\n"
            "except r.ArtifactError as e:\n    print(e); sys.exit(3)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if proc.returncode == 0:
        pytest.skip("this machine can load CUDA artifacts (a GPU machine)")
    assert proc.returncode == 3, proc.stderr
    assert "cannot load a cuda artifact" in proc.stdout and "libcuda.so.1" in proc.stdout


@needs_nvcc
def test_nvcc_errors_are_reported(tmp_path):
    with pytest.raises(cuda.ToolchainError, match="nvcc failed"):
        cuda.compile_fatbin("this is not CUDA", ["sm_80"], tmp_path)


def test_missing_nvcc_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv(cuda.NVCC_ENV, str(tmp_path / "no-nvcc"))
    with pytest.raises(cuda.ToolchainError, match="FUSEDGRAD_NVCC"):
        cuda.nvcc_path()


def test_api_rejects_a_target_that_does_not_match_the_tensors():
    x = np.zeros((2, 3), np.float32)
    with pytest.raises(ValueError, match="target: expected 'llvm' for tensors on the host, got 'cuda'"):
        api.run("layer_norm_backward", {"x": x, "dy": x, "mean": x[:, 0].copy(), "var": x[:, 0].copy(),
                                         "gamma": x[0].copy()}, {}, {}, target="cuda")


def test_no_committed_cuda_kernel_uses_atomics():
    """Every sum in a fixed order: no kernel of generated/cuda (every op the target serves, every dtype)
    adds through atomics, whose order would change from run to run.  The one definition allowed
    atomics is the persistent kernels' grid barrier (lowering.cuda.GRID_SYNC: a counter and a
    generation, never a sum), so it is taken out before looking."""
    from pathlib import Path

    sources = sorted((Path(__file__).resolve().parent.parent / "generated" / "cuda").glob("*.cu"))
    assert {p.name.split(".")[0] for p in sources} == set(HAND)
    for p in sources:
        text = p.read_text().replace(cuda.GRID_SYNC, "")
        assert "__global__" in text and "atomic" not in text.lower(), p.name
