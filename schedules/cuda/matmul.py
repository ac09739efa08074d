"""The tensor-core GEMM on CUDA: float16 / bfloat16 inputs, float32 sums, through WMMA.

C = A·B (+ bias) (+ addend), float32, with M, N, K symbolic.  The iteration domain is padded to whole block
tiles (``pad_einsum``: loads past M or K read zero, stores past M or N are
skipped), so every tile is whole 16 x 16 x 16 fragments:

- a block computes a BM x BN tile of C with WY x WX warps; each warp holds
  MF x NF accumulator fragments (float32) in registers;
- per K chunk of KF fragments, the block stages A [BM, KC] and B [KC, BN] in
  shared memory (every thread loads elements, consecutive threads consecutive
  addresses: coalesced; rows padded against bank conflicts), then each warp
  loads its A and B fragments from there and issues MF x NF ``mma_sync``;
- after the last chunk each warp stores its fragments to shared memory, and
  its 32 threads write them to C, adding the bias and addend there.

The sum over K runs chunk after chunk in increasing k, each fragment product
in the tensor core's own fixed order: no split-K, no atomics, the same bits on
every run.  float16 uses TVM's registered WMMA intrinsics; bfloat16 (sm_80
and newer) ones are registered by ``tvm_api.wmma_intrinsics`` from TVM's WMMA
intrinsic builders (TVM registers them for float16 and int8 only).

On the host (``emulate_on_host``) the fragments are local buffers and nothing
is tensorized: the same tiles, padding and loop nest run as scalar code.
"""
from __future__ import annotations

from .. import ScheduleRule
from ...lowering import tvm_api
from ...targets.cuda import compute_capability
from ._util import bind, on_gpu

WY, WX = 2, 2  # warps per block along M, N
MF, NF = 2, 2  # 16 x 16 accumulator fragments per warp along M, N
KF = 2  # 16-deep fragments per shared-memory K chunk
FRAG = 16  # the WMMA fragment edge (m16n16k16)
WARP = 32


class Matmul(ScheduleRule):
    """BM x BN block tiles of WY x WX warps, MF x NF WMMA accumulators per warp, KC-deep shared chunks."""

    op = "matmul"

    def schedule(self, sch, target) -> None:
        gpu = on_gpu(target)
        BM, BN, KC = WY * MF * FRAG, WX * NF * FRAG, KF * FRAG
        acc = sch.get_sblock("acc")
        dtype = str(sch.get(acc).reads[0].source.dtype)  # a's
        arch = str(target.attrs.get("arch", "")) if gpu else ""
        if dtype == "bfloat16" and arch and compute_capability(arch) < 80:
            raise ValueError(f"--arch / FUSEDGRAD_CUDA_ARCH: the bfloat16 tensor-core GEMM needs sm_80 or newer "
                             f"(bfloat16 WMMA), got {arch}")
        # whole tiles: padded reads of A and B (zero past M, K, N), the unpadded write of C
        sch.pad_einsum(acc, [BM, BN, KC])
        m, n, k = sch.get_loops(acc)
        m, mi = sch.split(m, [None, FRAG])
        n, ni = sch.split(n, [None, FRAG])
        k, ki = sch.split(k, [None, FRAG])
        sch.reorder(m, n, k, mi, ni, ki)
        fragment = sch.blockize(mi)  # one 16 x 16 x 16 product: what mma_sync does
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
        for name in ("a_pad", "b_pad"):
            sch.compute_inline(sch.get_sblock(name))
        # each warp's fragments: loaded from the shared tiles, accumulated in registers
        frag_a = sch.cache_read(fragment, 0, "wmma.matrix_a" if gpu else "local")
        frag_b = sch.cache_read(fragment, 1, "wmma.matrix_b" if gpu else "local")
        sch.compute_at(frag_a, kf)
        sch.compute_at(frag_b, kf)
        out_tile = sch.cache_write(fragment, 0, "shared")
        frag_c = sch.cache_write(fragment, 0, "wmma.accumulator" if gpu else "local")
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
        names = tvm_api.wmma_intrinsics(dtype)
        for blk, name in ((frag_a, "load_a"), (frag_b, "load_b"), (frag_c, "store")):
            rows, cols = sch.get_loops(blk)[-2:]
            ro, ri = sch.split(rows, [None, FRAG])
            co, ci = sch.split(cols, [None, FRAG])
            sch.reorder(ro, co, ri, ci)
            sch.tensorize(ri, names[name])
        sch.tensorize(sch.get_loops(sch.get_child_blocks(init)[0])[-2], names["fill"])
        sch.tensorize(sch.get_loops(sch.get_sblock("acc"))[-3], names["compute"])
