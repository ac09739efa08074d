"""float32 GEMMs on the CPU: register-blocked tiles, tiles in parallel.

(draft)
"""
from .. import ScheduleRule

VECTOR = 16  # float32 lanes (AVX-512)


def _gemm(sch, MR: int, NR: int) -> None:
    block = sch.get_sblock
    prod = block("prod")
    sch.reindex_cache_write(prod, 0, "local", lambda m, n, k: (m // MR, n // NR, m % MR, n % NR))
    sch.compute_inline(block("prod_local"))
    c = block("c")
    m, n = sch.get_loops(c)
    no, ni = sch.split(n, [None, NR])
    mo, mi = sch.split(m, [None, MR])
    sch.reorder(no, mo, mi, ni)
    sch.compute_at(prod, mo)
    pm, pn, pk = sch.get_loops(prod)[-3:]
    sch.reorder(pk, pm, pn)
    pno, pni = sch.split(pn, [None, VECTOR])
    sch.unroll(pm)
    sch.unroll(pno)
    sch.vectorize(pni)
    cno, cni = sch.split(ni, [None, VECTOR])
    sch.vectorize(cni)
    sch.parallel(no)
    sch.decompose_reduction(prod, pk)
    sch.annotate(mo, "pragma_loop_partition_hint", 1)
    sch.annotate(no, "pragma_loop_partition_hint", 1)


class Matmul(ScheduleRule):
    op = "matmul"

    def schedule(self, sch, target) -> None:
        _gemm(sch, 8, 32)


class MatmulTN(ScheduleRule):
    op = "matmul_tn"

    def schedule(self, sch, target) -> None:
        _gemm(sch, 16, 16)


ROWS = 32  # rows per column_sum partial block (fixed: part of the summation order)
COLUMNS = 256  # columns per task of the final column_sum pass


class ColumnSum(ScheduleRule):
    op = "column_sum"

    def schedule(self, sch, target) -> None:
        s = sch.get_sblock("s")
        n, k = sch.get_loops(s)
        ko, ki = sch.split(k, [None, ROWS])
        rf = sch.rfactor(ko, 0)
        n, ko, ki = sch.get_loops(rf)
        sch.reorder(ko, ki, n)
        no, nv = sch.split(n, [None, VECTOR])
        sch.vectorize(nv)
        sch.parallel(ko)
        sch.annotate(no, "pragma_loop_partition_hint", 1)
        sch.decompose_reduction(rf, ki)
        n, ko = sch.get_loops(s)
        nc, nm, nv = sch.split(n, [None, COLUMNS // VECTOR, VECTOR])
        sch.reorder(nc, ko, nm, nv)
        sch.vectorize(nv)
        sch.parallel(nc)
        sch.annotate(nc, "pragma_loop_partition_hint", 1)
        sch.annotate(nm, "pragma_loop_partition_hint", 1)
        sch.decompose_reduction(s, ko)
