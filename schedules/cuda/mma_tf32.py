"""TF32 tensor-core intrinsics for the CUDA GEMM: PTX ``mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32``.

TVM's WMMA code generator accepts only 16-bit and integer fragments for
matrix_a/b (docs/TVM_FINDINGS.md), so float32 inputs go through PTX ``mma``
(``T.ptx_legacy.mma``, which knows ``tf32``) on fragments in TVM's ``warp``
memory scope: a [32, n] buffer whose first axis is the lane, lowered to n
registers per thread.

One intrinsic product is C[16, 16] += A[16, 8] · B[8, 16]: two m16n8k8
instructions, one per 8-column half of C.  Where each element lives
(thread, register) is PTX's fragment layout for m16n8k8 .tf32 (PTX ISA,
"Matrix Fragments for mma.m16n8k8", .tf32 rows), with g = lane / 4 (the
group) and t = lane % 4 (the thread in the group):

    A (16 x 8, row):  a0 (g, t)  a1 (g+8, t)  a2 (g, t+4)  a3 (g+8, t+4)
    B (8 x 8, col):   b0 (t, g)  b1 (t+4, g)                 per 8-column half
    C (16 x 8):       c0 (g, 2t) c1 (g, 2t+1) c2 (g+8, 2t) c3 (g+8, 2t+1)  per half

The index maps below say the same as (row, column) -> (lane, register);
tests/test_cuda_matmul.py checks them against that table written out
element by element, and that the two are inverse to the loads and stores.

The product's description rounds its A and B operands to TF32 as the GEMM's definition does
(``te_defs.matmul.tf32_expr``, PTX's cvt.rna; the GEMM's schedule inlines the definition's rounding
into the product, so its shared tiles are plain copies of A and B, for cp.async).  The instruction
itself ignores the low 13 mantissa bits (it would truncate), so the loads into the fragments round:
load_a and load_b are described as copies but store the rounded value, which the product's rounding
then leaves as it is (rounding a TF32 value changes nothing).  Nothing else reads the fragments.
"""
from __future__ import annotations

import functools

from tvm.s_tir import TensorIntrin
from tvm.script import tirx as T

from ...te_defs.matmul import tf32_expr

WARP = 32
M, N, K = 16, 16, 8  # one intrinsic product: two m16n8k8 instructions side by side
A_REGS, B_REGS, C_REGS = M * K // WARP, K * N // WARP, M * N // WARP  # 4, 4, 8 per thread
HALF = 8  # columns of C per instruction


def a_index(i, j):
    """A[i, j] (16 x 8) -> (lane, register)."""
    return (i % 8) * 4 + j % 4, (j // 4) * 2 + i // 8


def b_index(k, n):
    """B[k, n] (8 x 16) -> (lane, register): registers 0, 1 for columns 0-7, 2, 3 for 8-15."""
    return (n % 8) * 4 + k % 4, (n // HALF) * 2 + k // 4


def c_index(i, j):
    """C[i, j] (16 x 16) -> (lane, register): registers 0-3 for columns 0-7, 4-7 for 8-15."""
    return (i % 8) * 4 + (j % 8) // 2, (j // HALF) * 4 + (i // 8) * 2 + j % 2


def a_element(lane, reg):
    """The inverse of :func:`a_index`: (row, column) of A held in ``reg`` of ``lane``."""
    return lane // 4 + (reg % 2) * 8, lane % 4 + (reg // 2) * 4


def b_element(lane, reg):
    return lane % 4 + (reg % 2) * 4, lane // 4 + (reg // 2) * HALF


def c_element(lane, reg):
    return lane // 4 + ((reg % 4) // 2) * 8, (reg // 4) * HALF + (lane % 4) * 2 + reg % 2


def _move(rows: int, cols: int, regs: int, index, element, tile_scope: str, into_warp: bool):
    """Copy between a [rows, cols] tile in ``tile_scope`` and its fragment (``index``: element ->
    (lane, register); ``element``: the inverse), into the fragment or out of it."""

    @T.prim_func(s_tir=True)
    def desc(t: T.handle, w: T.handle) -> None:
        tile = T.match_buffer(t, (rows, cols), "float32", align=4, offset_factor=1, scope=tile_scope)
        frag = T.match_buffer(w, (WARP, regs), "float32", align=4, offset_factor=regs, scope="warp")
        with T.sblock("root"):
            T.reads(tile[0:rows, 0:cols] if into_warp else frag[0:WARP, 0:regs])
            T.writes(frag[0:WARP, 0:regs] if into_warp else tile[0:rows, 0:cols])
            for i, j in T.grid(rows, cols):
                with T.sblock("move"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    lane, reg = T.meta_var(index(vi, vj))
                    if into_warp:
                        frag[lane, reg] = tile[vi, vj]
                    else:
                        tile[vi, vj] = frag[lane, reg]

    @T.prim_func(s_tir=True)
    def impl(t: T.handle, w: T.handle) -> None:
        s0, s1 = T.int32(), T.int32()
        tile = T.match_buffer(t, (rows, cols), "float32", align=4, offset_factor=1, scope=tile_scope,
                              strides=[s0, s1])
        frag = T.match_buffer(w, (WARP, regs), "float32", align=4, offset_factor=regs, scope="warp")
        with T.sblock("root"):
            T.reads(tile[0:rows, 0:cols] if into_warp else frag[0:WARP, 0:regs])
            T.writes(frag[0:WARP, 0:regs] if into_warp else tile[0:rows, 0:cols])
            for lane in T.thread_binding(0, WARP, "threadIdx.x"):
                for reg in T.unroll(regs):
                    r, c = T.meta_var(element(lane, reg))
                    if into_warp:
                        frag[lane, reg] = tf32_expr(tile[r, c])
                    else:
                        tile[r, c] = frag[lane, reg]

    return desc, impl


def _mma():
    @T.prim_func(s_tir=True)
    def desc(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (WARP, A_REGS), "float32", align=4, offset_factor=A_REGS, scope="warp")
        B = T.match_buffer(b, (WARP, B_REGS), "float32", align=4, offset_factor=B_REGS, scope="warp")
        C = T.match_buffer(c, (WARP, C_REGS), "float32", align=4, offset_factor=C_REGS, scope="warp")
        with T.sblock("root"):
            T.reads(C[0:WARP, 0:C_REGS], A[0:WARP, 0:A_REGS], B[0:WARP, 0:B_REGS])
            T.writes(C[0:WARP, 0:C_REGS])
            for i, j, k in T.grid(M, N, K):
                with T.sblock("C"):
                    vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                    lc, rc = T.meta_var(c_index(vi, vj))
                    la, ra = T.meta_var(a_index(vi, vk))
                    lb, rb = T.meta_var(b_index(vk, vj))
                    C[lc, rc] = C[lc, rc] + tf32_expr(A[la, ra]) * tf32_expr(B[lb, rb])

    @T.prim_func(s_tir=True)
    def impl(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (WARP, A_REGS), "float32", align=4, offset_factor=A_REGS, scope="warp")
        B = T.match_buffer(b, (WARP, B_REGS), "float32", align=4, offset_factor=B_REGS, scope="warp")
        C = T.match_buffer(c, (WARP, C_REGS), "float32", align=4, offset_factor=C_REGS, scope="warp")
        with T.sblock("root"):
            T.reads(C[0:WARP, 0:C_REGS], A[0:WARP, 0:A_REGS], B[0:WARP, 0:B_REGS])
            T.writes(C[0:WARP, 0:C_REGS])
            for lane in T.thread_binding(0, WARP, "threadIdx.x"):
                for half in T.unroll(N // HALF):
                    T.evaluate(T.ptx_legacy.mma(
                        "m16n8k8", "row", "col", "tf32", "tf32", "fp32",
                        A.data, A.elem_offset + lane * A_REGS,
                        B.data, B.elem_offset + lane * B_REGS + half * (B_REGS // 2),
                        C.data, C.elem_offset + lane * C_REGS + half * (C_REGS // 2),
                        False, dtype="float32"))

    return desc, impl


def _fill():
    @T.prim_func(s_tir=True)
    def desc(c: T.handle) -> None:
        C = T.match_buffer(c, (WARP, C_REGS), "float32", align=4, offset_factor=C_REGS, scope="warp")
        with T.sblock("root"):
            T.reads()
            T.writes(C[0:WARP, 0:C_REGS])
            for i, j in T.grid(M, N):
                with T.sblock("fill"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    lane, reg = T.meta_var(c_index(vi, vj))
                    C[lane, reg] = T.float32(0)

    @T.prim_func(s_tir=True)
    def impl(c: T.handle) -> None:
        C = T.match_buffer(c, (WARP, C_REGS), "float32", align=4, offset_factor=C_REGS, scope="warp")
        with T.sblock("root"):
            T.reads()
            T.writes(C[0:WARP, 0:C_REGS])
            for lane in T.thread_binding(0, WARP, "threadIdx.x"):
                for reg in T.unroll(C_REGS):
                    C[lane, reg] = T.float32(0)

    return desc, impl


@functools.lru_cache(maxsize=None)
def intrinsics() -> dict[str, str]:
    """Register the TF32 intrinsics once; their names: load_a, load_b (from shared memory), compute,
    fill, store (to shared memory)."""
    made = {"load_a": _move(M, K, A_REGS, a_index, a_element, "shared.dyn", into_warp=True),
            "load_b": _move(K, N, B_REGS, b_index, b_element, "shared.dyn", into_warp=True),
            "compute": _mma(), "fill": _fill(),
            "store": _move(M, N, C_REGS, c_index, c_element, "shared.dyn", into_warp=False)}
    names = {}
    for key, (desc, impl) in made.items():
        names[key] = f"fusedgrad_mma_m16n16k8_tf32_{key}"
        TensorIntrin.register(names[key], desc, impl, override=True)
    return names
