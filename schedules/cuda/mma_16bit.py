"""16-bit tensor-core intrinsics for the CUDA GEMM: ``ldmatrix`` from shared memory and PTX
``mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32``, float32 accumulators.

The loads and the product are written here as TVM writes its float16 ones
(``tvm.s_tir.tensor_intrin.cuda``: ``get_ldmatrix_intrin``, ``get_mma_intrin``), for float16 and
bfloat16: TVM's builders assert float16 or have no bfloat16 abbreviation, and its float16 intrinsics
declare every buffer 64-byte aligned, which a tile copied straight from A or B (a static shape of whole
tiles, tuning's, has no padding block between) does not declare: ours ask an element's alignment, the
only difference (tests/test_cuda_matmul.py checks that made with TVM's alignment for float16 they are
TVM's, structurally).  Fill and store touch the float32 accumulators only and are TVM's.

One intrinsic product is C[16, 16] += A[16, 16] · B[16, 16]: two m16n8k16 instructions, one per
8-column half of C.  Fragments live in TVM's ``warp`` scope ([32 lanes, 8 registers]); where each
element lives is PTX's m16n8k16 layout (PTX ISA, "Matrix Fragments for mma.m16n8k16" with
floating-point types), which :func:`index` states: A[i, j] -> lane 4 (i mod 8) + (j mod 8) / 2,
register 4 (j / 8) + 2 (i / 8) + j mod 2, B [K, N] and C likewise.  ``ldmatrix`` loads four 8 x 8
matrices, each lane giving one 16-byte row address (lanes 0-15 rows 0-15 of the left 8 columns,
16-31 of the right ones); B [K, N] row-major is loaded ``.trans``.
"""
from __future__ import annotations

import functools

from tvm.script import tirx as T

from .. import tir_api

WARP = 32
M = N = K = 16
REGS = M * K // WARP  # 8 elements a lane for A, B and C
_PTX = {"float16": "fp16", "bfloat16": "bf16"}
TVM_ALIGN = 64  # the alignment TVM's float16 intrinsics declare of every buffer


def index(i, j):
    """(row, column) of a 16 x 16 fragment -> (lane, register) (TVM's shared_16x16_to_ldmatrix_32x8_layout)."""
    return 4 * (i % 8) + (j % 8) // 2, 4 * (j // 8) + (i // 8) * 2 + j % 2


def _ldmatrix(dtype: str, trans: bool, scope: str, align: int):
    @T.prim_func(s_tir=True)
    def desc(w: T.handle, s: T.handle) -> None:
        shared = T.match_buffer(s, (M, K), dtype, align=align, offset_factor=K, scope=scope)
        warp = T.match_buffer(w, (WARP, REGS), dtype, align=align, offset_factor=K, scope="warp")
        with T.sblock("root"):
            T.reads(shared[0:M, 0:K])
            T.writes(warp[0:WARP, 0:REGS])
            for ax0, ax1 in T.grid(M, K):
                with T.sblock("shared_warp"):
                    v0, v1 = T.axis.remap("SS", [ax0, ax1])
                    T.reads(shared[v0, v1])
                    lane, reg = T.meta_var(index(v0, v1))
                    T.writes(warp[lane, reg])
                    warp[lane, reg] = shared[v0, v1]

    @T.prim_func(s_tir=True)
    def impl(w: T.handle, s: T.handle) -> None:
        s0, s1 = T.int32(), T.int32()
        shared = T.match_buffer(s, (M, K), dtype, align=align, offset_factor=K, scope=scope, strides=[s0, s1])
        warp = T.match_buffer(w, (WARP, REGS), dtype, align=align, offset_factor=K, scope="warp")
        with T.sblock("root"):
            T.reads(shared[0:M, 0:K])
            T.writes(warp[0:WARP, 0:REGS])
            for tx in T.thread_binding(0, WARP, "threadIdx.x"):
                T.evaluate(T.ptx_legacy.ldmatrix(trans, 4, ".b16", warp.data, warp.elem_offset + REGS * tx,
                                                 shared.access_ptr("r"), s0 * (tx % 16) + 8 * (tx // 16),
                                                 dtype=dtype))

    return desc, impl


def _mma(dtype: str, align: int):
    ptx = _PTX[dtype]

    @T.prim_func(s_tir=True)
    def desc(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (WARP, REGS), dtype, align=align, offset_factor=K, scope="warp")
        B = T.match_buffer(b, (WARP, REGS), dtype, align=align, offset_factor=N, scope="warp")
        C = T.match_buffer(c, (WARP, REGS), "float32", align=align, offset_factor=N, scope="warp")
        with T.sblock("root"):
            T.reads(C[0:WARP, 0:REGS], A[0:WARP, 0:REGS], B[0:WARP, 0:REGS])
            T.writes(C[0:WARP, 0:REGS])
            for i, j, k in T.grid(M, N, K):
                with T.sblock("C"):
                    vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                    lc, rc = T.meta_var(index(vi, vj))
                    la, ra = T.meta_var(index(vi, vk))
                    lb, rb = T.meta_var(index(vk, vj))
                    T.reads(C[lc, rc], A[la, ra], B[lb, rb])
                    T.writes(C[lc, rc])
                    C[lc, rc] += T.Cast("float32", A[la, ra]) * T.Cast("float32", B[lb, rb])

    @T.prim_func(s_tir=True)
    def impl(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (WARP, REGS), dtype, align=align, offset_factor=K, scope="warp")
        B = T.match_buffer(b, (WARP, REGS), dtype, align=align, offset_factor=N, scope="warp")
        C = T.match_buffer(c, (WARP, REGS), "float32", align=align, offset_factor=N, scope="warp")
        with T.sblock("root"):
            T.reads(C[0:WARP, 0:REGS], A[0:WARP, 0:REGS], B[0:WARP, 0:REGS])
            T.writes(C[0:WARP, 0:REGS])
            for tx in T.thread_binding(0, WARP, "threadIdx.x"):
                T.evaluate(T.ptx_legacy.mma("m16n8k16", "row", "col", ptx, ptx, "fp32",
                                            A.data, A.elem_offset + tx * REGS, B.data, B.elem_offset + tx * REGS,
                                            C.data, C.elem_offset + tx * REGS, False, dtype="float32"))
                T.evaluate(T.ptx_legacy.mma("m16n8k16", "row", "col", ptx, ptx, "fp32",
                                            A.data, A.elem_offset + tx * REGS,
                                            B.data, B.elem_offset + tx * REGS + REGS // 2,
                                            C.data, C.elem_offset + tx * REGS + REGS // 2, False, dtype="float32"))

    return desc, impl


def made(dtype: str, align: int = TVM_ALIGN) -> dict:
    """The (desc, impl) pairs this module writes for ``dtype``, its buffers declared ``align``-byte
    aligned: load_a, load_b, compute."""
    return {"load_a": _ldmatrix(dtype, False, "shared.dyn", align),
            "load_b": _ldmatrix(dtype, True, "shared.dyn", align), "compute": _mma(dtype, align)}


@functools.lru_cache(maxsize=None)
def intrinsics(dtype: str) -> dict:
    """Names of the intrinsics for ``dtype`` (float16, bfloat16) tiles in ``shared.dyn``: load_a, load_b,
    compute (ours, registered once, asking the alignment of an element only: a tile copied straight
    from A or B, where a static shape of whole tiles needs no padding block, declares no more; the
    dynamic shared memory is aligned for ldmatrix whatever the declaration), fill and store (TVM's);
    under "index" each fragment's (row, column) -> (lane, register) map."""
    if dtype not in _PTX:
        raise ValueError(f"dtype: expected float16 or bfloat16 for the 16-bit mma, got {dtype}")
    with tir_api.tvmscript_stack_without_source():  # TVM's intrinsics module parses 496 functions
        from tvm.s_tir import TensorIntrin
        from tvm.s_tir.tensor_intrin import cuda

        group = cuda.get_mma_intrin_group("shared.dyn", "shared.dyn", "float16", "float32", False, False)
        names = {"fill": group["init"], "store": group["store"]}
        for key, (desc, impl) in made(dtype, int(_PTX[dtype][-2:]) // 8).items():
            names[key] = f"fusedgrad_mma_{key}_16x16_{_PTX[dtype]}"
            TensorIntrin.register(names[key], desc, impl, override=True)
    return {**names, "index": {"load_a": index, "load_b": index, "store": index}}
