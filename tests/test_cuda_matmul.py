"""The tensor-core GEMM on CUDA without a GPU: its loop nest run on the host against the float64
reference (two knob settings), the generated source's ldmatrix / mma.sync / cp.async pipeline, the
swizzle's bank groups read from that source, the knobs derived from the machine, the fragment
layouts, and the sm_80 / sm_90 builds with their dynamic shared memory recorded.

Speed needs a GPU: benchmarks/gpu_check.py.
"""
import itertools
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

import build_cache

from fusedgrad import runtime, schedules, targets, te_defs
from fusedgrad.lowering import build, cuda, naming, tvm_api
from fusedgrad.schedules import tir_api
from fusedgrad.schedules.cuda import matmul, mma_16bit, mma_tf32
from fusedgrad.te_defs.matmul import tf32

NVCC = shutil.which("nvcc") or (Path("/usr/local/cuda/bin/nvcc") if Path("/usr/local/cuda/bin/nvcc").exists() else None)
GENERATED = Path(__file__).resolve().parent.parent / "generated" / "cuda"
MATMUL_TOL = 1e-5  # float32 sums of exact products: only the order of the sum differs from float64
SMALL = {"BM": 64, "BN": 64, "KC": 32, "STAGES": 2, "WARPS": 2}  # the second knob setting the host runs


def _rule(knobs=None):
    return schedules.rule_for(targets.get("cuda").schedules, "matmul").tuned(knobs or {})


def _emulated(dtype, knobs=None):
    """Every variant scheduled by the CUDA rule (with ``knobs``) for the host CPU: thread loops serial,
    nothing tensorized or pipelined, the same tiles and padding."""
    op = te_defs.get("matmul")
    tgt = tvm_api.target(targets.get("llvm").tvm_target())
    funcs, kernels = {}, []
    for variant in op.variants:
        symbol = naming.entry_symbol("matmul", dtype, variant)
        inputs = [t.name for t in op.inputs if op.present(t, variant)]
        func = tir_api.prim_func(op.compute(dtype, **variant), symbol, "matmul", strided=inputs)
        funcs[symbol] = _rule(knobs).apply(func, tgt).mod["main"].with_attr("global_symbol", symbol)
        kernels.append({"symbol": symbol, "variant": variant, "args": build.arg_specs(op, variant, dtype)})
    exe = tvm_api.compile_module(funcs, tgt)
    lib = runtime.Library()
    lib[("matmul", "llvm", dtype)] = runtime.Artifact({"op": "matmul", "target": "llvm", "dtype": dtype,
                                                        "kernels": kernels}, exe.mod, None)
    return lib


def _run(lib, dtype, a, b, bias=None, addend=None):
    """C = a·b (+ bias) (+ addend) through the emulated kernel, called directly (no target on this
    machine serves the op: the API refuses it on the host)."""
    torch = pytest.importorskip("torch")
    c = torch.full((a.shape[0], b.shape[1]), float("nan"), dtype=torch.float32)
    variant = {"has_bias": bias is not None, "has_addend": addend is not None}
    lib.kernel("matmul", dtype, variant, "llvm")(a, b, *(t for t in (bias, addend) if t is not None), c)
    return c


@pytest.mark.parametrize("knobs", [None, SMALL], ids=["derived", "64x64-stages2"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_loop_nest_matches_reference(dtype, knobs):
    """The schedule without its tensor intrinsics: the same padded tiles, on the host.  Tails in M, N
    and K against whole fragments and block tiles, every variant (float32 bias, addend), and inputs
    inside wider rows (their NaN neighbours must not be read; the second schedule's element copies).
    float32 is TF32: the reference is the product of the TF32-rounded inputs."""
    torch = pytest.importorskip("torch")
    op = te_defs.get("matmul")
    lib = _emulated(dtype, knobs)
    cases = [(1, 1, 1), (130, 70, 45), (65, 129, 40)] if knobs is None else [(13, 37, 19), (70, 136, 48)]
    for k, (M, N, K) in enumerate(cases):
        s = op.sample({"M": M, "N": N, "K": K}, np.random.default_rng(k))
        a, b = (torch.from_numpy(s[x]).to(getattr(torch, dtype)) for x in ("a", "b"))
        bias, addend = (torch.from_numpy(s[x]).float() for x in ("bias", "addend"))
        if k % 2:  # row-strided views
            a = torch.cat([a, torch.full((M, 3), float("nan"), dtype=a.dtype)], 1)[:, :K]
            b = torch.cat([torch.full((K, 5), float("nan"), dtype=b.dtype), b], 1)[:, 5:]
            addend = torch.cat([addend, torch.full((M, 2), float("nan"))], 1)[:, :N]
        ref = torch.from_numpy(tf32(a.float().numpy())).double() @ torch.from_numpy(tf32(b.float().numpy())).double()
        for variant in op.variants:
            extra = {"bias": bias if variant["has_bias"] else None, "addend": addend if variant["has_addend"] else None}
            got = _run(lib, dtype, a, b, **extra).double()
            want = ref + (bias.double() if variant["has_bias"] else 0) + (addend.double() if variant["has_addend"] else 0)
            err = float((got - want).abs().max() / (want.abs().max() + 1))
            assert err <= MATMUL_TOL, (dtype, (M, N, K), variant, err)


def test_keeps_nan_in_its_row_and_column():
    torch = pytest.importorskip("torch")
    a = torch.randn(70, 45, generator=torch.Generator().manual_seed(0)).half()
    b = torch.randn(45, 70, generator=torch.Generator().manual_seed(1)).half()
    a[66, 44] = float("nan")  # in the last, partial M tile and K chunk
    b[3, 5] = float("inf")
    c = _run(_emulated("float16", SMALL), "float16", a, b)
    assert c[66].isnan().all()
    assert c[:, 5].abs().isinf().sum() + c[:, 5].isnan().sum() == 70
    rest = torch.cat([c[:66], c[67:]])
    assert torch.isfinite(torch.cat([rest[:, :5], rest[:, 6:]], 1)).all()


# ----------------------------------------------------------------------------- the generated source

def _kernels(dtype):
    """{kernel name: body} of the committed source (tests/test_cli.py checks it is current)."""
    text = (GENERATED / f"matmul.cuda.{dtype}.cu").read_text()
    parts = re.split(r'extern "C" __global__ void __launch_bounds__\(\d+\) (\w+)\([^)]*\) \{', text)
    return dict(zip(parts[1::2], parts[2::2]))


@pytest.mark.parametrize("dtype, ptx", [("float16", "f16"), ("bfloat16", "bf16"), ("float32", "tf32")])
def test_source_is_an_mma_pipeline(dtype, ptx):
    """Each variant has two kernels: the cp.async one (16-byte copies: K, N, strides and addresses
    allow them) and the element-copy one; the copies cp.async with one commit group a K chunk, waiting
    until at most STAGES - 1 are in flight (the chunk to compute has landed).  16-bit: ldmatrix (B
    .trans) feeding m16n8k16 mma.sync; TF32: m16n8k8, its fragments loaded from shared memory and
    rounded to TF32 on the way (cvt.rna's bit operations: the copies stay copies).  No atomics; the
    tiles in dynamic shared memory."""
    kernels = _kernels(dtype)
    assert len(kernels) == 2 * len(te_defs.get("matmul").variants)
    stages = _rule().knob("STAGES")
    shape = "m16n8k8" if ptx == "tf32" else "m16n8k16"
    for name, body in kernels.items():
        fast = not name.endswith("_1")
        assert f"mma.sync.aligned.{shape}.row.col.f32.{ptx}.{ptx}.f32" in body, name
        assert "extern __shared__" in body and "atomic" not in body
        if ptx == "tf32":
            assert "ldmatrix" not in body and "4294959104" in body  # TF32's mask of the kept bits
        else:
            assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in body
            assert "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in body
        if fast:
            assert re.search(r"ptx_cp_async_\w*cg_16", body), name
            assert body.count("cp_async_commit_group") >= stages - 1
            assert f"cp_async_wait_group_async_wait_group_{stages - 1}()" in body
        else:
            assert "cp_async" not in body, name


def _c_expr(expr, names):
    """A C index expression of the source evaluated in Python with ``names`` (thread indices as tx, ty)."""
    expr = (expr.replace("((int)threadIdx.x)", "tx").replace("((int)threadIdx.y)", "ty")
            .replace("((int)blockIdx.x)", "bx").replace("((int)blockIdx.y)", "by").replace(" / ", " // "))

    class Loops(dict):
        def __missing__(self, key):
            return 0  # every loop at its first iteration

    return eval(expr, {}, Loops(names))


def _groups(offsets, item):
    """The 16-byte bank group (of the 8 in 128 bytes) each element offset falls in."""
    return [(o * item // 16) % 8 for o in offsets]


@pytest.mark.parametrize("dtype, ctype", [("float16", "half"), ("bfloat16", "nv_bfloat16")])
def test_swizzle_spreads_each_phase_over_the_bank_groups(dtype, ctype):
    """The addresses the source computes, per thread: the 8 row addresses of each ldmatrix phase
    (lanes 8p .. 8p + 7) and the 16-byte cp.async stores of 8 consecutive threads fall in 8 distinct
    16-byte bank groups, for every warp; with the XOR taken out of the same expressions they do not."""
    body = _kernels(dtype)[f"fg_matmul_{dtype}__none_kernel"]
    loads = re.findall(rf"__cvta_generic_to_shared\(\(&\(\(\({ctype}\*\)buf_dyn_shmem_ptr\)\[(.*?)\]\)\) \+ 0\)", body)
    stores = re.findall(r"ptx_cp_async_\w+\(buf_dyn_shmem_ptr, (.*?), [ab]_v_ptr,", body)
    assert loads and stores
    warps = _rule().knob("WARPS")
    for swizzled in (True, False):
        spread = []
        for expr, lanes_a_phase in [(e, 8) for e in loads] + [(e, 8) for e in stores]:
            expr = expr if swizzled else expr.replace("^", "+ 0 *")
            for ty in range(warps):
                offsets = [_c_expr(expr, {"tx": tx, "ty": ty}) for tx in range(32)]
                assert all(o * 2 % 16 == 0 for o in offsets)  # whole 16-byte rows and chunks
                for p in range(0, 32, lanes_a_phase):
                    spread.append(len(set(_groups(offsets[p:p + lanes_a_phase], 2))) == 8)
        assert all(spread) if swizzled else not all(spread)


# ----------------------------------------------------------------------------- knobs

def test_knobs_derive_from_the_machine_and_are_tuned():
    """STAGES: as many as the opt-in shared memory holds (fewer where it is smaller, never past it);
    WARPS: enough that the accumulators take at most half a thread's registers; every knob in the
    space `fusedgrad tune` searches, the derived ones among its candidates."""
    tgt = tvm_api.target(targets.get("cuda").tvm_target())
    rule = _rule()
    space = rule.space(tgt)
    assert set(space) == {"BM", "BN", "KC", "STAGES", "WARPS"}
    defaults = rule.defaults(tgt)
    assert all(defaults[k] in space[k] for k in space) and defaults["BM"] >= 128 and defaults["BN"] >= 128
    assert all(len(space[k]) > 1 for k in ("BM", "BN", "STAGES", "WARPS"))
    assert all(set(space[k]) <= set(rule.KNOBS[k]) for k in space)
    for point in itertools.product(*space.values()):  # every point tuning may sample is a schedule
        rule.tuned(dict(zip(space, point))).shape(tgt, "float32")
    assert 256 in rule.KNOBS["BM"] and 256 not in space["BM"]  # 256 x 256 tiles: too many registers
    tiles = [defaults[k] for k in ("BM", "BN", "KC")]
    seen = []
    for budget in (48 * 1024, 99 * 1024, 163 * 1024, 227 * 1024):
        small = type(rule)()
        small.budget = lambda target, budget=budget: budget
        stages = small.knob("STAGES", tgt)
        assert matmul._shared_bytes(*tiles, stages, "float32", tgt) <= budget or stages == min(rule.KNOBS["STAGES"])
        seen.append(stages)
    assert seen == sorted(seen) and seen[0] < seen[-1]
    assert seen[2] == rule.knob("STAGES", tgt)  # sm_80 + sm_90 built: sm_80's 163 KB
    assert rule.knob("WARPS", tgt) * 32 * targets.cuda.REGISTERS_PER_THREAD // 2 >= defaults["BM"] * defaults["BN"]
    assert _rule({"BM": 64, "BN": 64}).knob("WARPS", tgt) < rule.knob("WARPS", tgt)
    with pytest.raises(ValueError, match="accumulators take 256 registers a thread with 8 warps"):
        _rule({"BM": 256, "BN": 256}).shape(tgt, "float16")
    with pytest.raises(ValueError, match=r"5 stages of 256x64 \+ 64x128 float16 tiles take 294912 bytes"):
        _rule({"BM": 256, "BN": 128, "KC": 64, "STAGES": 5}).shape(tgt, "float16")
    with pytest.raises(ValueError, match="expected BM a multiple of 32"):
        _rule({"BM": 48}).shape(tgt, "float16")
    with pytest.raises(ValueError, match="KC of 32, got .*KC=16"):  # 32-byte rows: no swizzle
        _rule({"KC": 16}).shape(tgt, "bfloat16")
    assert 16 not in space["KC"] and _rule({"KC": 16}).shape(tgt, "float32")


def test_tuning_samples_every_knob_into_the_pipelined_schedule():
    """`fusedgrad tune`'s design space for the GEMM: each knob sampled (meta-schedule's
    sample_categorical, in name order) and the rule applied with them: at a tuned shape whose K and N
    are 16-byte multiples, the cp.async pipeline."""
    from fusedgrad.lowering import tuning, tuning_kernels

    tgt = tvm_api.target(targets.get("cuda").tvm_target())
    dims = {"M": 256, "N": 256, "K": 256}
    func, _ = tuning_kernels.specialised("matmul", "float16", dims)
    sch = tuning._space(_rule(), tgt, "matmul", "float16", dims)(tir_api.schedule(func))
    sampled = [i for i in sch.trace.insts if i.kind.name == "SampleCategorical"]
    assert len(sampled) == len(matmul.Matmul.KNOBS)
    source = tvm_api.device_source(tvm_api.compile_module({"main": sch.mod["main"]}, tgt), "cuda")
    assert "cp_async" in source and "ldmatrix" in source and "mma.sync.aligned.m16n8k16" in source


def test_an_arch_before_sm_80_is_refused_for_bfloat16_and_tf32():
    op = te_defs.get("matmul")
    old = tvm_api.target({**targets.get("cuda").tvm_target(), "arch": "sm_75"})
    for dtype in ("bfloat16", "float32"):
        func = tir_api.prim_func(op.compute(dtype), "main", op.name)
        with pytest.raises(ValueError, match=f"{dtype} tensor-core GEMM needs sm_80 or newer.*got sm_75"):
            schedules.apply(targets.get("cuda").schedules, func, old)


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_host_launch_passes_the_dynamic_shared_bytes(dtype):
    """TVM's host code passes each kernel's constant shared.dyn size as its launch's last argument:
    what the build records, at least the STAGES A and B tiles, at most the rule's bound
    (``_shared_bytes``: TF32's exactly, A's ring then B's with C inside), within the opt-in maximum."""
    funcs, tgt = build.schedule_variants("matmul", "cuda", dtype)
    _, dynamic = tvm_api.host_side({s: f for s, (f, _, _) in funcs.items()}, tgt)
    assert len(dynamic) == 2 * len(funcs)
    k = _rule().defaults(tgt)
    bound = matmul._shared_bytes(k["BM"], k["BN"], k["KC"], k["STAGES"], dtype, tgt)
    item = 4 if dtype == "float32" else 2
    assert min(dynamic.values()) >= k["STAGES"] * (k["BM"] + k["BN"]) * k["KC"] * item
    assert max(dynamic.values()) <= bound <= targets.cuda.optin_shared_bytes()
    if dtype == "float32":
        assert set(dynamic.values()) == {bound}


# ----------------------------------------------------------------------------- fragment layouts

def test_16bit_intrinsics_are_tvms_float16_ones():
    """The ldmatrix and mma intrinsics are written as TVM writes its float16 ones: made for float16 with
    TVM's alignment they are TVM's registered intrinsics, structurally (so the PTX fragment layouts are
    TVM's, which its mma tests check on GPUs); the registered ones differ from those in the alignment
    they ask and, for bfloat16, the element type."""
    import tvm_ffi
    from tvm.s_tir import TensorIntrin

    from tvm.s_tir.tensor_intrin import cuda as tvm_cuda  # loaded by intrinsics() below already

    mma_16bit.intrinsics("float16")
    group = tvm_cuda.get_mma_intrin_group("shared.dyn", "shared.dyn", "float16", "float32", False, False)
    for key, (desc, impl) in mma_16bit.made("float16").items():
        theirs = TensorIntrin.get(group[key])
        for mine, tvms in ((desc, theirs.desc), (impl, theirs.impl)):
            mine = mine.with_attr("global_symbol", tvms.attrs["global_symbol"])  # the Python function's name
            assert tvm_ffi.structural_equal(mine, tvms), (key, tvm_ffi.get_first_structural_mismatch(mine, tvms))
    names = {dtype: mma_16bit.intrinsics(dtype) for dtype in ("float16", "bfloat16")}
    assert names["float16"]["fill"] == names["bfloat16"]["fill"] == group["init"]
    assert names["float16"]["compute"] != names["bfloat16"]["compute"]
    for lane in range(32):  # PTX m16n8k16: a0,a1 (g, 2t..2t+1), a2,a3 (g+8, ..), a4..a7 the same 8 columns on
        g, t = lane // 4, lane % 4
        for reg in range(8):
            i = g + 8 * ((reg // 2) % 2)
            j = 2 * t + reg % 2 + 8 * (reg // 4)
            assert mma_16bit.index(i, j) == (lane, reg)


def test_tf32_rounding_is_ptx_cvt_rna():
    """Round to nearest, ties away from zero, on float32's bits; NaN stays NaN, overflow goes to
    infinity; every float16 and bfloat16 value is left as it is."""
    one_ulp = 2.0 ** -10  # TF32 keeps 10 mantissa bits
    x = np.array([1 + one_ulp / 2, -(1 + one_ulp / 2), 1 + 3 * one_ulp / 2, 1 + one_ulp / 2 - 2 ** -20,
                  np.inf, -np.inf, np.nan, np.finfo(np.float32).max, 0.0, -0.0], np.float32)
    want = [1 + one_ulp, -(1 + one_ulp), 1 + 2 * one_ulp, 1.0, np.inf, -np.inf, np.nan, np.inf, 0.0, -0.0]
    got = tf32(x)
    np.testing.assert_array_equal(got, np.array(want, np.float32))
    assert np.signbit(got[-1]) and (got.view(np.uint32) & 0x1FFF == 0).all()
    halves = np.arange(0, 1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)
    brains = (np.arange(0, 1 << 16, dtype=np.uint32) << 16).view(np.float32)
    for v in (halves, brains):
        same = np.isnan(v) | (tf32(v) == v)
        assert same.all()


# PTX ISA, "Matrix Fragments for mma.m16n8k8" (.tf32): (row, column) of each register, with
# groupID = lane / 4 and threadID_in_group = lane % 4; C per 8-column half, B per 8-column half
PTX_A = {0: lambda g, t: (g, t), 1: lambda g, t: (g + 8, t), 2: lambda g, t: (g, t + 4), 3: lambda g, t: (g + 8, t + 4)}
PTX_B = {0: lambda g, t: (t, g), 1: lambda g, t: (t + 4, g)}
PTX_C = {0: lambda g, t: (g, 2 * t), 1: lambda g, t: (g, 2 * t + 1), 2: lambda g, t: (g + 8, 2 * t),
         3: lambda g, t: (g + 8, 2 * t + 1)}


def test_tf32_fragment_maps_are_ptxs_layout():
    """The intrinsics' (row, column) <-> (lane, register) maps are PTX's m16n8k8 .tf32 fragment
    layout, and each load/store map is the inverse of its index map; then one warp's product
    computed register by register as the instruction defines it equals A·B."""
    for lane in range(32):
        g, t = lane // 4, lane % 4
        for reg, where in PTX_A.items():
            assert mma_tf32.a_element(lane, reg) == where(g, t)
            assert mma_tf32.a_index(*where(g, t)) == (lane, reg)
        for half in range(2):
            for reg, where in PTX_B.items():
                k, n = where(g, t)
                assert mma_tf32.b_element(lane, half * 2 + reg) == (k, n + 8 * half)
                assert mma_tf32.b_index(k, n + 8 * half) == (lane, half * 2 + reg)
            for reg, where in PTX_C.items():
                i, j = where(g, t)
                assert mma_tf32.c_element(lane, half * 4 + reg) == (i, j + 8 * half)
                assert mma_tf32.c_index(i, j + 8 * half) == (lane, half * 4 + reg)
    rng = np.random.default_rng(0)
    A, B = rng.standard_normal((16, 8)), rng.standard_normal((8, 16))
    fa = np.zeros((32, 4)); fb = np.zeros((32, 4)); fc = np.zeros((32, 8))
    for i in range(16):
        for j in range(8):
            fa[mma_tf32.a_index(i, j)] = A[i, j]
    for k in range(8):
        for n in range(16):
            fb[mma_tf32.b_index(k, n)] = B[k, n]
    for half in range(2):  # mma.m16n8k8: D[i, j] = sum_k A[i, k] B[k, j], each operand from its owner
        owner_a = {PTX_A[r](l // 4, l % 4): fa[l, r] for l in range(32) for r in PTX_A}
        owner_b = {PTX_B[r](l // 4, l % 4): fb[l, half * 2 + r] for l in range(32) for r in PTX_B}
        for lane in range(32):
            for reg in PTX_C:
                i, j = PTX_C[reg](lane // 4, lane % 4)
                fc[lane, half * 4 + reg] = sum(owner_a[(i, k)] * owner_b[(k, j)] for k in range(8))
    C = np.zeros((16, 16))
    for lane in range(32):
        for reg in range(8):
            C[mma_tf32.c_element(lane, reg)] = fc[lane, reg]
    np.testing.assert_allclose(C, A @ B, rtol=1e-12, atol=1e-12)


# ----------------------------------------------------------------------------- nvcc builds

@pytest.mark.skipif(NVCC is None, reason="nvcc (CUDA toolkit) is not installed on this machine")
@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_sm80_sm90_builds_record_the_dynamic_shared_bytes(dtype, tmp_path):
    """nvcc builds every kernel for sm_80 and sm_90 within ptxas' limits (no spills) and the manifest
    records each kernel's dynamic shared bytes, static plus dynamic within each arch's opt-in maximum."""
    entry = build_cache.artifact("matmul", "cuda", dtype, tmp_path)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["artifacts"][0]["fatbin_sha256"] == entry["fatbin_sha256"]
    kernels = entry["device_kernels"]
    assert len(kernels) == 2 * len(te_defs.get("matmul").variants)
    for k in kernels:
        assert k["dynamic_shared_bytes"] > 48 * 1024, k["name"]  # past the default: the launch's opt-in
        for arch in ("sm_80", "sm_90"):
            r = k["arch"][arch]
            assert r["spill_bytes"] == 0 and r["registers"] * k["threads"] <= cuda.REGISTERS_PER_BLOCK
            assert r["shared_bytes"] + k["dynamic_shared_bytes"] <= targets.cuda.optin_shared_bytes([arch])
