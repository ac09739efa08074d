"""Any op on CUDA: TVM's dlight GPU rules (matmul, GEMV, reductions, elementwise).

dlight picks a rule by the shape of each block (a matmul gets shared-memory
tiles, a row reduction a cross-thread tree, elementwise work one thread per
element) and handles symbolic extents.  Its reductions are thread-level loops
or fixed shuffle/shared-memory trees, never atomics, so results are the same
bits on every run.  Ops with a hand schedule are matched before this rule.
"""
from .. import ScheduleRule
from .. import tir_api

RULES = tuple(tir_api.gpu_generic_rules())


class Generic(ScheduleRule):
    op = None

    def apply(self, func, target):
        device = target if target.kind.name == "cuda" else target.host
        with device:
            for rule in RULES:
                sch = rule.apply(func, device, False)
                if isinstance(sch, list):
                    sch = sch[0] if sch else None
                if sch is not None:
                    return sch
        raise ValueError(f"no dlight rule schedules op {tir_api.op_name(func)!r} for CUDA")
