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
tests/test_cuda_target.py checks them against that table written out
element by element, and that the two are inverse to the loads and stores.

The inputs must already be TF32 values (the GEMM's definition rounds them
where the shared tiles are loaded): the instruction ignores the low 13
mantissa bits, so an unrounded float32 would be truncated instead.
"""
from __future__ import annotations

import functools

from tvm.s_tir import TensorIntrin
from tvm.script import tirx as T

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


def _load(rows: int, cols: int, regs: int, index, element, src_scope: str):
    @T.prim_func(s_tir=True)
    def desc(a: T.handle, w: T.handle) -> None:
        src = T.match_buffer(a, (rows, cols), "float32", align=4, offset_factor=1, scope=src_scope)
        dst = T.match_buffer(w, (WARP, regs), "float32", align=4, offset_factor=regs, scope="warp")
        with T.sblock("root"):
            T.reads(src[0:rows, 0:cols])
            T.writes(dst[0:WARP, 0:regs])
            for i, j in T.grid(rows, cols):
                with T.sblock("load"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    lane, reg = T.meta_var(index(vi, vj))
                    dst[lane, reg] = src[vi, vj]

    @T.prim_func(s_tir=True)
    def impl(a: T.handle, w: T.handle) -> None:
        s0, s1 = T.int32(), T.int32()
        src = T.match_buffer(a, (rows, cols), "float32", align=4, offset_factor=1, scope=src_scope,
                             strides=[s0, s1])
        dst = T.match_buffer(w, (WARP, regs), "float32", align=4, offset_factor=regs, scope="warp")
        with T.sblock("root"):
            T.reads(src[0:rows, 0:cols])
            T.writes(dst[0:WARP, 0:regs])
            for lane in T.thread_binding(0, WARP, "threadIdx.x"):
                for reg in T.unroll(regs):
                    r, c = T.meta_var(element(lane, reg))
                    dst[lane, reg] = src[r, c]

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
                    C[lc, rc] = C[lc, rc] + A[la, ra] * B[lb, rb]

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


def _store(dst_scope: str):
    @T.prim_func(s_tir=True)
    def desc(w: T.handle, c: T.handle) -> None:
        src = T.match_buffer(w, (WARP, C_REGS), "float32", align=4, offset_factor=C_REGS, scope="warp")
        dst = T.match_buffer(c, (M, N), "float32", align=4, offset_factor=1, scope=dst_scope)
        with T.sblock("root"):
            T.reads(src[0:WARP, 0:C_REGS])
            T.writes(dst[0:M, 0:N])
            for i, j in T.grid(M, N):
                with T.sblock("store"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    lane, reg = T.meta_var(c_index(vi, vj))
                    dst[vi, vj] = src[lane, reg]

    @T.prim_func(s_tir=True)
    def impl(w: T.handle, c: T.handle) -> None:
        s0, s1 = T.int32(), T.int32()
        src = T.match_buffer(w, (WARP, C_REGS), "float32", align=4, offset_factor=C_REGS, scope="warp")
        dst = T.match_buffer(c, (M, N), "float32", align=4, offset_factor=1, scope=dst_scope, strides=[s0, s1])
        with T.sblock("root"):
            T.reads(src[0:WARP, 0:C_REGS])
            T.writes(dst[0:M, 0:N])
            for lane in T.thread_binding(0, WARP, "threadIdx.x"):
                for reg in T.unroll(C_REGS):
                    r, c = T.meta_var(c_element(lane, reg))
                    dst[r, c] = src[lane, reg]

    return desc, impl


@functools.lru_cache(maxsize=None)
def intrinsics() -> dict[str, str]:
    """Register the TF32 intrinsics once; their names: load_a, load_b (from shared memory), compute,
    fill, store (to shared memory)."""
    made = {"load_a": _load(M, K, A_REGS, a_index, a_element, "shared"),
            "load_b": _load(K, N, B_REGS, b_index, b_element, "shared"),
            "compute": _mma(), "fill": _fill(), "store": _store("shared")}
    names = {}
    for key, (desc, impl) in made.items():
        names[key] = f"fusedgrad_mma_m16n16k8_tf32_{key}"
        TensorIntrin.register(names[key], desc, impl, override=True)
    return names
