"""The tensor-core GEMM on CUDA: float16 / bfloat16 inputs through WMMA, float32 as TF32 through PTX mma.

C = A·B (+ bias) (+ addend), float32, with M, N, K symbolic.  The iteration domain is padded to whole block
tiles (``pad_einsum``: loads past M or K read zero, stores past M or N are
skipped), so every tile is whole fragments (16 x 16 x 16; 16 x 16 x 8 for TF32):

- a block computes a BM x BN tile of C with WY x WX warps; each warp holds
  MF x NF accumulator fragments (float32) in registers;
- per K chunk of KF fragments, the block stages A [BM, KC] and B [KC, BN] in
  shared memory (every thread loads elements, consecutive threads consecutive
  addresses: coalesced; rows padded against bank conflicts; float32 elements
  rounded to TF32 on the way, as the definition says), then each warp
  loads its A and B fragments from there and issues MF x NF ``mma_sync``;
- after the last chunk each warp stores its fragments to shared memory, and
  its 32 threads write them to C, adding the bias and addend there.

The sum over K runs chunk after chunk in increasing k, each fragment product
in the tensor core's own fixed order: no split-K, no atomics, the same bits on
every run.  float16 uses TVM's registered WMMA intrinsics; bfloat16 ones (sm_80
and newer) are registered by ``tir_api.wmma_intrinsics`` from TVM's WMMA
intrinsic builders (TVM registers them for float16 and int8 only).  TVM's WMMA
code generator has no float32 fragments, so TF32 (sm_80 and newer) runs PTX
``mma.sync.m16n8k8.tf32`` through ``schedules/cuda/mma_tf32.py``'s intrinsics, the
fragments in ``warp`` memory laid out as PTX defines them (``transform_layout``).

On the host (``emulate_on_host``) the fragments are local buffers and nothing
is tensorized: the same tiles, padding and loop nest run as scalar code.
"""
from __future__ import annotations

from .. import ScheduleRule
from .. import tir_api
from ...targets.cuda import compute_capability
from ._util import bind, on_gpu

WY, WX = 2, 2  # warps per block along M, N
MF, NF = 2, 2  # 16 x 16 accumulator fragments per warp along M, N
KF = 2  # fragments per shared-memory K chunk (16 deep each; 8 for TF32)
WARP = 32
WMMA = (16, 16, 16)  # the fragments of the WMMA intrinsics (tir_api.wmma_intrinsics): m16n16k16
SM80_ONLY = ("bfloat16", "float32")  # bfloat16 WMMA and TF32 mma came with sm_80


class Matmul(ScheduleRule):
    """BM x BN block tiles of WY x WX warps, MF x NF accumulator fragments per warp, KC-deep shared chunks."""

    op = "matmul"

    def schedule(self, sch, target) -> None:
        from . import mma_tf32  # TVMScript intrinsics: TVM's compiler, only when scheduling

        gpu = on_gpu(target)
        dtype = str(sch.get(sch.get_sblock("acc")).reads[0].source.dtype)  # a's (a_tf32's: float32)
        tf32 = dtype == "float32"
        FM, FN, FK = (mma_tf32.M, mma_tf32.N, mma_tf32.K) if tf32 else WMMA
        BM, BN, KC = WY * MF * FM, WX * NF * FN, KF * FK
        arch = str(target.attrs.get("arch", "")) if gpu else ""
        if dtype in SM80_ONLY and arch and compute_capability(arch) < 80:
            raise ValueError(f"--arch / FUSEDGRAD_CUDA_ARCH: the {dtype} tensor-core GEMM needs sm_80 or newer "
                             f"({'TF32 mma' if tf32 else dtype + ' WMMA'}), got {arch}")
        rounded = ("a_tf32", "b_tf32") if tf32 else ()  # the definition's TF32 rounding stages
        acc = sch.get_sblock("acc")
        # whole tiles: padded reads of A and B (zero past M, K, N), the unpadded write of C
        sch.pad_einsum(acc, [BM, BN, KC])
        m, n, k = sch.get_loops(acc)
        m, mi = sch.split(m, [None, FM])
        n, ni = sch.split(n, [None, FN])
        k, ki = sch.split(k, [None, FK])
        sch.reorder(m, n, k, mi, ni, ki)
        fragment = sch.blockize(mi)  # one fragment product: what mma_sync does
        mo, mw, mf = sch.split(m, [None, WY, MF])
        no, nw, nf = sch.split(n, [None, WX, NF])
        ko, kf = sch.split(k, [None, KF])
        sch.reorder(mo, no, mw, nw, ko, kf, mf, nf)
        bind(sch, mo, "blockIdx.y", target)
        bind(sch, no, "blockIdx.x", target)
        warp = sch.fuse(mw, nw)
        bind(sch, warp, "threadIdx.y", target)
        # per K chunk: A and B tiles in shared memory, loaded by all the block's threads
        for idx in (0, 1):
            tile = sch.cache_read(fragment, idx, "shared")
            sch.compute_at(tile, ko)
            _, ty, tx = sch.split(sch.fuse(*sch.get_loops(tile)[-2:]), [None, WY * WX, WARP])
            bind(sch, ty, "threadIdx.y", target)
            bind(sch, tx, "threadIdx.x", target)
            sch.storage_align(tile, 0, axis=-2, factor=16, offset=8)  # rows 16 bytes apart in banks
        for name in [f"{x}_pad" for x in rounded or ("a", "b")] + list(rounded):  # rounded where tiles load
            sch.compute_inline(sch.get_sblock(name))
        # each warp's fragments: loaded from the shared tiles, accumulated in registers
        scopes = ("warp",) * 3 if tf32 else ("wmma.matrix_a", "wmma.matrix_b", "wmma.accumulator")
        frag_a = sch.cache_read(fragment, 0, scopes[0] if gpu else "local")
        frag_b = sch.cache_read(fragment, 1, scopes[1] if gpu else "local")
        sch.compute_at(frag_a, kf)
        sch.compute_at(frag_b, kf)
        out_tile = sch.cache_write(fragment, 0, "shared")
        frag_c = sch.cache_write(fragment, 0, scopes[2] if gpu else "local")
        sch.reverse_compute_at(frag_c, warp)
        sch.reverse_compute_at(out_tile, warp)
        # C: the warp's 32 threads write its tile (+ bias, + addend), skipping rows/columns past M, N
        sch.reverse_compute_inline(sch.get_sblock("acc_pad"))
        sch.reverse_compute_inline(sch.get_sblock("c"))
        _, lane = sch.split(sch.fuse(*sch.get_loops(out_tile)[-2:]), [None, WARP])
        bind(sch, lane, "threadIdx.x", target)
        init = sch.decompose_reduction(fragment, ko)
        if not gpu:
            return
        names = mma_tf32.intrinsics() if tf32 else tir_api.wmma_intrinsics(dtype)
        fragments = ((frag_a, "load_a", (FM, FK), "write", "a_index"), (frag_b, "load_b", (FK, FN), "write", "b_index"),
                     (frag_c, "store", (FM, FN), "read", "c_index"))
        for blk, name, (fr, fc), side, where in fragments:
            if tf32:  # the fragment as PTX lays it out: [tile row, tile column, lane, register]
                sch.transform_layout(blk, (side, 0), _fragment_layout(fr, fc, getattr(mma_tf32, where)))
            rows, cols = sch.get_loops(blk)[-2:]
            ro, ri = sch.split(rows, [None, fr])
            co, ci = sch.split(cols, [None, fc])
            sch.reorder(ro, co, ri, ci)
            sch.tensorize(ri, names[name])
        sch.tensorize(sch.get_loops(sch.get_child_blocks(init)[0])[-2], names["fill"])
        sch.tensorize(sch.get_loops(sch.get_sblock("acc"))[-3], names["compute"])


def _fragment_layout(rows: int, cols: int, where):
    """(i, j) of a fragment buffer -> (tile row, tile column, lane, register) by ``where`` within a tile."""
    return lambda i, j: (i // rows, j // cols, *where(i % rows, j % cols))
