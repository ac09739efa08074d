"""What the DSP rules read about the chips (targets/dsp facts), and the rules' shared constants.

The rows of a partial sum are not a machine size: each definition fixes its own
(te_defs ``OpDef.partial_rows``, read through schedules.row_blocks).

One kernel per (op, dtype) serves every chip that ships the dtype, so each size is taken for
the least capable of those chips.
"""
from __future__ import annotations

from ...targets import get

ALIGN = 64  # bytes each staging buffer is rounded up to (FG_WS_ALIGN in targets/dsp/fg_dsp_entry.h)
ACC_BYTES = 4  # the kernels accumulate in float32 whatever the storage dtype
ITEMSIZE = {"float32": 4, "float16": 2}


def _chips(dtype: str) -> list:
    return [facts for facts in get("dsp").facts["chips"].values() if dtype in facts["dtypes"]]


def local_bytes(dtype: str) -> int:
    """A core's local memory for DMA staging, on the smallest chip shipping ``dtype``."""
    return min(facts["local_bytes"] for facts in _chips(dtype))


def accumulator_lanes(dtype: str) -> int:
    """float32 lanes of one vector register, on the narrowest chip shipping ``dtype``."""
    return min(facts["vector_bytes"] for facts in _chips(dtype)) // ACC_BYTES


def io_dtype(sch) -> str:
    """The storage dtype of a scheduled op (its first tensor argument's)."""
    for p in sch.mod["main"].params:
        if getattr(p, "shape", None) is not None and len(p.shape):
            return str(p.dtype)
    raise ValueError("DSP rule: the function has no tensor argument")


def rows_that_fit(dtype: str, row_elements: int, fixed_elements: int, buffers: int) -> int:
    """Rows per block whose DMA windows fit a core's local memory double-buffered: ``row_elements``
    staged per row (``buffers`` windows that move with the block), ``fixed_elements`` staged once."""
    item = ITEMSIZE[dtype]
    room = local_bytes(dtype) - fixed_elements * item - ALIGN * (2 * buffers + 1)
    return max(1, room // (2 * row_elements * item))


def partial_blocks(dtype: str, rows: int, row_elements: int, fixed_elements: int, buffers: int) -> int:
    """Partial-sum blocks of ``rows`` rows (the definition's row block of its column sums, part of
    its summation order: the same as the host's LLVM kernels, so the library has their bits) per
    parallel block: as many as fit, at least one."""
    return max(1, rows_that_fit(dtype, row_elements, fixed_elements, buffers) // rows)
