"""Vector accesses on CUDA, chosen per call on the host: the branch's tests (shapes, strides and
buffer addresses) and the cell backward's vector schedule, whose loop nests run here (thread loops
serial, the vector loops as the host's vectors) against float64 and against its scalar schedule.

What needs a GPU (the accesses' speed, the same bits on the device) is benchmarks/gpu_check.py.
"""
import re

import numpy as np
import pytest
import tvm

from fusedgrad import targets, te_defs
from fusedgrad.lowering import build, tvm_api
from fusedgrad.schedules import tir_api
from fusedgrad.schedules.cuda import _util

from test_cuda_target import TOL, _call, emulated_library

LANES = _util.compute_lanes(tvm_api.target(targets.get("cuda").tvm_target()))

_SUM = """
@T.prim_func(s_tir=True)
def probe(a: T.handle, b: T.handle):
    n, s0 = T.int32(), T.int32()
    A = T.match_buffer(a, (n, 2), "float32", strides=(s0, 1), align=4)
    B = T.match_buffer(b, (1,), "float32", align=4)
    for i, j in T.grid(n, 2):
        with T.sblock("sum"):
            vi, vj = T.axis.remap("RR", [i, j])
            with T.init():
                B[0] = T.float32(0.0)
            B[0] = B[0] + A[vi, vj]
"""
_ORDER_SENSITIVE = np.array([[1e8, 1.0], [-1e8, 1.0]], np.float32)  # rows first: 1; columns first: 2


def _probe(**conditions):
    """Which branch runs: the sum of A in row order (then, 1 on _ORDER_SENSITIVE) or column order (2)."""
    func = tvm.script.from_source(_SUM)
    rows, columns = tir_api.schedule(func), tir_api.schedule(func)
    columns.reorder(*reversed(columns.get_loops(columns.get_sblock("sum"))))
    joined = tir_api.choose([(rows.mod["main"], conditions), (columns.mod["main"], None)])
    exe = tvm_api.compile_module({"probe": joined}, tvm_api.target(targets.get("llvm").tvm_target()))
    out = np.zeros(1, np.float32)

    def taken(a):
        exe.mod["probe"](a, out)
        assert out[0] in (1.0, 2.0), out
        return out[0] == 1.0
    return taken


def _order_sensitive(rows, cols=2):
    """_ORDER_SENSITIVE in the first two rows and columns of a zero [rows, cols] array."""
    a = np.zeros((rows, cols), np.float32)
    a[:2, :2] = _ORDER_SENSITIVE
    return a


def _at(a, offset_bytes, alignment=64):
    """A copy of ``a`` whose first element lies ``offset_bytes`` past a multiple of ``alignment``."""
    raw = np.zeros(a.nbytes + 2 * alignment, np.uint8)
    start = (-raw.ctypes.data) % alignment + offset_bytes
    out = raw[start:start + a.nbytes].view(a.dtype).reshape(a.shape)
    out[...] = a
    return out


def test_branch_tests_each_buffers_address_on_the_host():
    taken = _probe(aligned={"A": 16})
    for offset in range(0, 64, 4):
        a = _at(_order_sensitive(3), offset)
        assert a.ctypes.data % 16 == offset % 16
        assert taken(a) == (offset % 16 == 0), offset


def test_branch_tests_strides_and_sizes_on_the_host():
    taken = _probe(multiple_of={"s0": 4, "n": 2}, at_most={"n": 6})
    wide = _order_sensitive(8, 12)
    assert taken(wide[:4, :2])  # stride 12, n 4
    assert not taken(wide[:3, :2])  # n odd
    assert not taken(wide[:8, :2])  # n over 6
    assert not taken(_order_sensitive(4, 10)[:, :2])  # stride 10


def test_branch_refuses_unknown_names():
    then = tvm.script.from_source(_SUM)
    with pytest.raises(ValueError, match=r"no dimension or stride named \['H'\]"):
        tir_api.choose([(then, {"multiple_of": {"H": 4}}), (then, None)])
    with pytest.raises(ValueError, match=r"no buffer named \['C'\]"):
        tir_api.choose([(then, {"aligned": {"C": 16}}), (then, None)])


def test_cell_backward_vector_schedule_is_chosen_by_h_strides_and_addresses():
    """The branch's condition: H and every input's row (and gate) stride a multiple of the lanes,
    every buffer on a boundary of LANES elements; the vector branch's loops are LANES wide and its
    views' strides are written as whole multiples (what lets TVM emit vector loads)."""
    for dtype, size in (("float32", 4), ("float16", 2)):
        funcs, _ = build.schedule_variants("lstm_cell_backward", "cuda", dtype)
        text = tir_api.script(funcs[next(iter(funcs))][0])
        head = next(line for line in text.splitlines() if re.match(r"\s*for then in", line))
        for cond in [f"H % {LANES} == 0", f"storage.strides[0] % {LANES} == 0",
                     f"storage.strides[1] % {LANES} == 0", f"cx.strides[0] % {LANES} == 0"]:
            assert cond in head, cond
        for name in ("grad_hy", "grad_cy", "cx", "cy", "storage", "grad_gates", "grad_cx"):
            assert f'"{tir_api.ALIGNED}", {name}.data, {LANES * size})' in head, name
        assert "grad_bias.data" not in head  # written one element per thread, by the final sum
        assert f"T.vectorized({LANES})" in text
        assert f"strides=(storage.strides[0] // {LANES} * {LANES}, storage.strides[1] // {LANES} * {LANES}, 1" in text


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_cell_backward_vector_kernel_loads_and_stores_whole_vectors(dtype):
    """Every global access of the vector kernel is one vector (float4 of float32, 4 halves as 8
    bytes), none an element-by-element gather; the scalar kernels stay for every other call."""
    tgt = tvm_api.target(targets.get("cuda").tvm_target())
    funcs, _ = build.schedule_variants("lstm_cell_backward", "cuda", dtype)
    symbol = next(s for s, (_, v, _) in funcs.items() if all(v.values()))
    source = tvm_api.device_source(tvm_api.compile_module({symbol: funcs[symbol][0]}, tgt), "cuda")
    vector = {"float32": "float4", "float16": "half4", "bfloat16": "nv_bfloat164"}[dtype]
    # the vector branch's main kernel: the first defined (the branches' kernels are numbered in order)
    kernel = next(k for k in source.split('extern "C" __global__') if re.match(r"[^;{]*_kernel\(.*\{", k))
    accessed = set(re.findall(rf"\*\({vector}\*\)\((\w+)_v_ptr", kernel))
    assert accessed == {"grad_hy", "grad_cy", "cx", "cy", "storage", "grad_gates", "grad_cx"}, accessed
    assert not re.search(r"make_(float4|uint2|int4)\(\w+_ptr\[", kernel), "an element-by-element gather"


def _inputs(op_name, dims, dtype, offset_elems=0, extra_cols=0, seed=5):
    """The op's sample inputs, each starting ``offset_elems`` elements past a 64-byte boundary and
    (``extra_cols``, 2-D ones) inside rows that many elements wider."""
    op = te_defs.get(op_name)
    out = {}
    for name, v in op.sample(dims, np.random.default_rng(seed)).items():
        v = v.astype(dtype)
        extra = [extra_cols] if v.ndim == 2 else []
        wide = _at(np.zeros((*v.shape[:-1], v.shape[-1] + sum(extra)), dtype), offset_elems * v.itemsize)
        wide[..., :v.shape[-1]] = v
        out[name] = wide[..., :v.shape[-1]]
    return out


LAYOUTS = {"aligned": (0, 0), "aligned, wider rows": (0, 2 * LANES),
           "one element off": (1, 0), "rows not a multiple": (0, LANES + 1)}


def _same_bits_at_every_layout(op_name, dtype, dims, ulps=None):
    """Every variant of ``op_name`` at ``dims`` with its inputs at each of LAYOUTS (the first two: the
    vector kernels; the others: the scalar ones) against float64, and every layout's bits equal;
    ``ulps`` {output: n}: within n units in the last place of the output's largest magnitude instead
    (see the LayerNorm test)."""
    op = te_defs.get(op_name)
    lib = emulated_library(op_name, dtype)
    specs = {s.name: s for s in op.inputs}
    for variant in op.variants:
        results = {}
        for layout, (offset, extra) in LAYOUTS.items():
            arrays = {k: v for k, v in _inputs(op_name, dims, dtype, offset, extra).items()
                      if op.present(specs[k], variant)}
            got = {k: v for k, v in _call(lib, op_name, arrays, variant).items() if v is not None}
            exact = {k: (arrays[k].astype(np.float64) if k in arrays else None) for k in specs}
            ref = op.reference(**exact, **variant)
            for name, value in got.items():
                r = ref[name].reshape(value.shape)
                err = np.abs(value.astype(np.float64) - r).max() / (np.abs(r).max() + 1.0)
                assert err <= TOL[dtype], (layout, variant, name, err)
            results[layout] = got
        for layout in LAYOUTS:
            for name, value in results[layout].items():
                base = results["aligned"][name]
                if (ulps or {}).get(name):
                    gap = np.abs(value.astype(np.float64) - base).max() / np.spacing(np.abs(base).max())
                    assert gap <= ulps[name], (layout, variant, name, gap)
                else:
                    assert np.array_equal(value, base, equal_nan=True), (layout, variant, name)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("dims", [{"N": 1, "H": LANES}, {"N": 37, "H": 64}, {"N": 9, "H": 33 * LANES}])
def test_cell_backward_vector_loop_nest_matches_reference_and_the_scalar_bits(dtype, dims):
    """Whole vectors (H a multiple of the lanes) at aligned addresses, compact and inside wider rows
    (stride a multiple of the lanes): the vector branch; the same data one element off its boundary,
    or in rows of a stride that is not a multiple: the scalar branch.  All against float64, and the
    vector branch's bits equal to the scalar branch's (each column summed over the same rows in the
    same order)."""
    _same_bits_at_every_layout("lstm_cell_backward", dtype, dims)


from fusedgrad.schedules.cuda import layer_norm_backward as ln_rule  # noqa: E402


def test_layer_norm_vector_walk_is_chosen_by_d_strides_and_addresses():
    """The row-block schedule's vector walk: M whole row blocks and D within the shared-memory bound
    (as the scalar row-block schedule), D and x's and dy's row strides multiples of the lanes, and x,
    dy, gamma and dx on vector boundaries (mean and var are read one element per row)."""
    funcs, _ = build.schedule_variants("layer_norm_backward", "cuda", "float16")
    text = tir_api.script(funcs[next(iter(funcs))][0])
    head = next(line for line in text.splitlines() if re.match(r"\s*for then in", line))
    for cond in [f"M % {ln_rule.ROW_BLOCK} == 0", f"D % {LANES} == 0", f"x.strides[0] % {LANES} == 0",
                 f"dy.strides[0] % {LANES} == 0"] + [f'"{tir_api.ALIGNED}", {b}.data, {LANES * 2})'
                                                     for b in ("x", "dy", "gamma", "dx")]:
        assert cond in head, cond
    assert "mean.data" not in head and "var.data" not in head
    # the scalar row-block schedule where the row blocks fit but a vector condition fails
    assert re.search(rf"for then_1 in range\(T.Select\(M % {ln_rule.ROW_BLOCK} == 0 and D <= \d+ and \(0 < M", text)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_layer_norm_vector_walk_loads_and_stores_whole_vectors(dtype):
    tgt = tvm_api.target(targets.get("cuda").tvm_target())
    funcs, _ = build.schedule_variants("layer_norm_backward", "cuda", dtype)
    source = tvm_api.device_source(tvm_api.compile_module({s: f for s, (f, _, _) in funcs.items()}, tgt), "cuda")
    kernel = next(k for k in source.split('extern "C" __global__') if re.match(r"[^;{]*_kernel\(.*\{", k))
    vector = {"float32": "float4", "float16": "half4"}[dtype]
    accessed = set(re.findall(rf"\*\({vector}\*\)\((\w+)_ptr", kernel))
    assert accessed == {"x_v", "dy_v", "gamma", "dx_v"}, accessed
    assert re.search(r"\*\(float4\*\)\(\(\(float\*\)buf_dyn_shmem_ptr\)", kernel), "partials not in vectors"


ULPS = 2


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("dims", [{"M": 16, "D": LANES}, {"M": 48, "D": 300}, {"M": 32, "D": 1024}])
def test_layer_norm_vector_walk_matches_reference_and_the_scalar_bits(dtype, dims):
    """Row-block shapes with D a multiple of the lanes at each layout: the vector walk where the
    strides and addresses allow, the scalar walk elsewhere; the same bits (the walk's accesses change,
    not the row sums' walk nor any column's order).  Except dx here, within ULPS units in the last
    place of its largest magnitude: the host's LLVM fuses a multiply and an add into one fma in the
    vector loop but not in the scalar one (or the reverse), which can also flip a float16 rounding; on
    the GPU each lane is the same scalar expression, and
    gpu_check compares the bits there."""
    _same_bits_at_every_layout("layer_norm_backward", dtype, dims, ulps={"dx": ULPS})
