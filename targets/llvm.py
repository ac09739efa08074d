"""The host CPU through LLVM: ISA detected from the machine (FUSEDGRAD_MCPU overrides)."""
from __future__ import annotations

import functools
import os

from .registry import TargetInfo, register


@functools.lru_cache(maxsize=None)
def host_cpu() -> str:
    """The LLVM name of this machine's CPU (e.g. "sapphirerapids"), or "" if unknown.

    FUSEDGRAD_MCPU overrides the probe (e.g. to build for a generic x86-64).
    """
    env = os.environ.get("FUSEDGRAD_MCPU")
    if env is not None:
        return env
    from tvm.target import codegen

    cpu = codegen.llvm_get_system_cpu()
    triple = host_triple()
    if not cpu or cpu == "generic" or (triple and not codegen.llvm_is_valid_cpu(cpu, triple)):
        return ""
    return cpu


def host_triple() -> str | None:
    import platform

    return "x86_64-linux-gnu" if platform.machine() in ("x86_64", "AMD64") else None


# TVM compiles with LLVM's FP-op fusion set to "fast", so mul+add pairs are
# contracted wherever the backend finds them.  When LLVM versions a loop on
# runtime alias checks, its vector and scalar versions contract differently
# and the result bits depend on where the buffers happen to lie.  Forbid that
# versioning; schedules vectorise their hot loops explicitly instead.
LLVM_DETERMINISM_OPTIONS = ("-vectorize-memory-check-threshold:uint=0",)


def _llvm_host() -> dict:
    target = {"kind": "llvm", "num-cores": os.cpu_count() or 1, "cl-opt": list(LLVM_DETERMINISM_OPTIONS)}
    if host_triple():
        target["mtriple"] = host_triple()
    cpu = host_cpu()
    if cpu:
        target["mcpu"] = cpu
    return target


register(
    TargetInfo(
        name="llvm",
        tvm_target=_llvm_host,
        schedules="fusedgrad.schedules.llvm",
        artifact="shared_library",
        dtypes=("float32", "float16", "bfloat16"),
        intrinsics={"tirx.tanh": "rational_tanh"},
        description="host CPU through LLVM (ISA detected; FUSEDGRAD_MCPU overrides)",
    )
)
