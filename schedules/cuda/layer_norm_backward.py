"""LayerNorm backward on CUDA: rstd, a row kernel for dx, column partials for dgamma/dbeta.

rstd: one small kernel, one thread per row; the other kernels read it.

Row kernel (dx): one block per row, LANES x SPLIT threads.  The definition's
lane partial l (elements d = c*LANES + l) is split over SPLIT threads (rfactor:
thread (l, k) takes c = k, k + SPLIT, ...), so a warp reads 32 consecutive
elements and a row has 128 threads at work; both row sums are accumulated in
one walk over the row, in registers.  Each lane's SPLIT partials meet in a
shared-memory tree, the LANES lane sums in a warp-shuffle tree: fixed orders,
so the same bits every run (not the host's bits: the host adds in lane order).
Then the row's dx is written with the same thread-to-element map.

dgamma/dbeta (the approach of Apex's and PyTorch's GammaBetaBackward): a
thread owns a column and sums COLUMN_ROWS rows of dy*xhat and dy into one
partial per row block (rfactor), in registers; the final kernel sums each
column's partials with FINAL_THREADS threads and a fixed tree.  No atomics.
COLUMN_ROWS and SPLIT are part of the summation order.

Parameters were picked on an H200 (benchmarks/gpu_check.py's side-by-side
table, docs/BENCHMARKS.md): SPLIT 8 / COLUMN_ROWS 32 was fastest at
M=4096 D=1024 and within 13% of the best at M=8192 D=4096.
"""
from .. import ScheduleRule
from ._util import bind
from ...te_defs.layer_norm_backward import LANES

SPLIT = 8  # threads per lane in the dx kernel: one block of LANES x SPLIT threads per row
COLUMN_ROWS = 32  # rows per dgamma/dbeta partial
COLUMNS = 128  # columns per block in the partial kernel
FINAL_COLUMNS = 32
FINAL_THREADS = 16


class LayerNormBackward(ScheduleRule):
    op = "layer_norm_backward"

    def schedule(self, sch, target) -> None:
        block = sch.get_sblock
        # rstd once per row, its own small kernel: the other kernels read it
        (m,) = sch.get_loops(block("rstd"))
        mo, mi = sch.split(m, [None, 256])
        bind(sch, mo, "blockIdx.x", target)
        bind(sch, mi, "threadIdx.x", target)
        # ---- dx: one block per row, LANES x SPLIT threads; thread (l, k) walks
        # elements d = (c*SPLIT + k)*LANES + l, so a warp reads 32 consecutive ones
        lanes_blocks = ("sum_dyg_lanes", "sum_dyg_xhat_lanes")
        rfs = []
        for lanes in lanes_blocks:  # lane l's partial, split over SPLIT threads
            _, _, c = sch.get_loops(block(lanes))
            rfs.append(sch.rfactor(sch.split(c, [None, SPLIT])[1], 2))
        m, d = sch.get_loops(block("dx"))
        dc, dl = sch.split(d, [None, LANES])
        dco, dci = sch.split(dc, [None, SPLIT])
        sch.reorder(m, dci, dl, dco)
        bind(sch, m, "blockIdx.x", target)
        bind(sch, dci, "threadIdx.y", target)
        bind(sch, dl, "threadIdx.x", target)
        # consumers first, each producer inserted before them
        for name in ("sum_dyg", "sum_dyg_xhat") + lanes_blocks:
            sch.compute_at(block(name), m, index=0)
            sch.set_scope(block(name), 0, "local")
        for rf in rfs:
            sch.compute_at(rf, m, index=0)  # loops come out as (k, l, c): rfactor's iter var order
            sch.set_scope(rf, 0, "local")
            k, l, _ = sch.get_loops(rf)[-3:]
            assert int(sch.get(k).extent) == SPLIT and int(sch.get(l).extent) == LANES
        # both row sums in one walk over the row
        rk, rl, _ = (sch.merge(a, b) for a, b in zip(*(sch.get_loops(rf)[-3:] for rf in rfs)))
        bind(sch, rk, "threadIdx.y", target)
        bind(sch, rl, "threadIdx.x", target)
        # lane partial l: a tree over its SPLIT threads; the row's LANES partials:
        # a shuffle tree over threadIdx.x
        for lanes in lanes_blocks:
            lk, ll = sch.get_loops(block(lanes))[-2:]  # (k, l): rfactor's iter var order
            assert int(sch.get(lk).extent) == SPLIT and int(sch.get(ll).extent) == LANES
            sch.reorder(ll, lk)  # a cross-thread reduction's loop must be the innermost
            bind(sch, ll, "threadIdx.x", target)
            bind(sch, lk, "threadIdx.y", target)
        for total in ("sum_dyg", "sum_dyg_xhat"):
            bind(sch, sch.get_loops(block(total))[-1], "threadIdx.x", target)
        # ---- dgamma, dbeta: column partials over COLUMN_ROWS-row blocks
        for acc in ("dgamma_acc", "dbeta_acc"):
            col, r = sch.get_loops(block(acc))
            ro, ri = sch.split(r, [None, COLUMN_ROWS])
            rf = sch.rfactor(ro, 0)
            rd, rro, rri = sch.get_loops(rf)
            rdo, rdi = sch.split(rd, [None, COLUMNS])
            sch.reorder(rro, rdo, rdi, rri)
        rfs = [block("dgamma_acc_rf"), block("dbeta_acc_rf")]
        ro, do, di, ri = (sch.merge(a, b) for a, b in zip(*(sch.get_loops(rf) for rf in rfs)))
        for rf in rfs:
            sch.reverse_compute_at(sch.cache_write(rf, 0, "local"), di)
        # two grid axes, not one fused: a fused symbolic index is not affine and
        # the reduction could not be decomposed (gridDim.y allows 65535 row blocks)
        bind(sch, ro, "blockIdx.y", target)
        bind(sch, do, "blockIdx.x", target)
        bind(sch, di, "threadIdx.x", target)
        # ---- final: FINAL_THREADS partial sums per column, then a fixed tree
        for acc, out in (("dgamma_acc", "dgamma"), ("dbeta_acc", "dbeta")):
            col, ro = sch.get_loops(block(acc))
            co, ci = sch.split(col, [None, FINAL_COLUMNS])
            roo, roi = sch.split(ro, [None, FINAL_THREADS])
            sch.reorder(co, ci, roi, roo)
            sch.reverse_compute_at(block(out), ci)
            sch.set_scope(block(acc), 0, "local")
        co = sch.merge(sch.get_loops(block("dgamma_acc"))[0], sch.get_loops(block("dbeta_acc"))[0])
        bind(sch, co, "blockIdx.x", target)
        for acc in ("dgamma_acc", "dbeta_acc"):
            _, ci, roi, _ = sch.get_loops(block(acc))
            bind(sch, ci, "threadIdx.x", target)
            bind(sch, roi, "threadIdx.y", target)
        # reduction inits outside the loops they reduce over (after binding: binding needs whole blocks)
        for lanes in ("sum_dyg_lanes", "sum_dyg_xhat_lanes"):
            rf = block(f"{lanes}_rf")
            sch.decompose_reduction(rf, sch.get_loops(rf)[-1])
        # (the column partials' inits stay in their row loop as `if row == 0`:
        # decompose_reduction refuses those merged blocks, and registers make the test free)
