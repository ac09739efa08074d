"""What the CPU rules read about the CPU they schedule for: targets.llvm.cpu_facts of the TVM
target's CPU and triple (its ISA class, vector width, register count) and the target's core count,
never a literal lane, register or thread count."""
from __future__ import annotations

import functools

from ...targets import get, llvm


def facts(target=None) -> llvm.CpuFacts:
    """The facts of the CPU ``target`` (a TVM llvm Target; None: the llvm record's, the CPU builds
    run for) builds for."""
    if target is None:
        spec = get("llvm").tvm_target()
        cpu, triple = spec.get("mcpu", ""), spec.get("mtriple", "")
    else:
        attrs = target.attrs
        cpu = str(attrs["mcpu"]) if "mcpu" in attrs else ""
        triple = str(attrs["mtriple"]) if "mtriple" in attrs else ""
    return _facts(cpu, triple or llvm.host_triple() or "")


@functools.lru_cache(maxsize=None)
def _facts(cpu: str, triple: str) -> llvm.CpuFacts:
    return llvm.cpu_facts(cpu or "generic", triple)


def lanes(target=None, dtype: str = "float32") -> int:
    """Elements of ``dtype`` in one vector register of the target's CPU."""
    return facts(target).lanes(dtype)


def register_tile_rows(target, columns: int) -> int:
    """Rows of an outer-product register tile ``columns`` float32 wide: accumulators (rows x the
    columns' vectors) + one row of B's vectors + one broadcast of A must fit the register file.  A
    power of two (at least one), so that it divides the rules' power-of-two row blocks."""
    f = facts(target)
    vectors = max(1, columns // f.lanes("float32"))
    fit = max(1, (f.vector_registers - vectors - 1) // vectors)
    return 1 << (fit.bit_length() - 1)


def cores(target=None) -> int | None:
    """The target's ``num-cores`` (the threads a team of the built code may have, at most), or None
    where the target does not say (None: the llvm record's target)."""
    if target is None:
        value = get("llvm").tvm_target().get("num-cores")
    else:
        value = target.attrs["num-cores"] if "num-cores" in target.attrs else None
    return None if value is None else int(value)
