"""Target registry: one frozen record per target, registered once.

A record says how to reach a target -- the TVM target, the schedule rules,
how the artifact is packaged, which dtypes it supports, which intrinsics are
lowered differently -- and nothing about any op.  An (op, target, dtype)
combination that is not supported raises a ValueError naming the triple.
"""
from __future__ import annotations

import dataclasses
import functools
import os
from typing import Callable, Mapping

__all__ = ["TargetInfo", "register", "get", "names", "host_cpu"]


@dataclasses.dataclass(frozen=True)
class TargetInfo:
    """One code-generation target.

    name          registry key ("llvm", later "cuda", "dsp-ft78ne", ...)
    tvm_target    callable returning the TVM target dict (may probe the host)
    schedules     package holding the schedule rules for this target
    artifact      how lowering packages the module ("shared_library")
    dtypes        dtypes the target supports
    ops           ops the target supports (None: every registered op)
    intrinsics    TVM intrinsic name -> lowering rule name in lowering.intrinsics
    runnable_here whether kernels for this target can run in this process
    """

    name: str
    tvm_target: Callable[[], Mapping]
    schedules: str
    artifact: str
    dtypes: tuple[str, ...]
    ops: tuple[str, ...] | None = None
    intrinsics: Mapping[str, str] = dataclasses.field(default_factory=dict)
    runnable_here: bool = True
    description: str = ""

    def dtypes_for(self, op: str) -> tuple[str, ...]:
        """The dtypes both this target and ``op``'s definition support."""
        from fusedgrad.te_defs import get as get_op

        return tuple(d for d in self.dtypes if d in get_op(op).dtypes)

    def check(self, op: str, dtype: str) -> None:
        """Raise ValueError unless (op, self, dtype) is supported."""
        if self.ops is not None and op not in self.ops:
            raise ValueError(
                f"(op, target, dtype) = ({op!r}, {self.name!r}, {dtype!r}) is not supported: "
                f"target {self.name!r} supports ops {list(self.ops)}"
            )
        if dtype not in self.dtypes_for(op):
            raise ValueError(
                f"(op, target, dtype) = ({op!r}, {self.name!r}, {dtype!r}) is not supported: "
                f"target {self.name!r} supports dtypes {list(self.dtypes_for(op))} for op {op!r}"
            )


_REGISTRY: dict[str, TargetInfo] = {}


def register(info: TargetInfo) -> TargetInfo:
    if info.name in _REGISTRY:
        raise ValueError(f"target {info.name!r} is already registered")
    _REGISTRY[info.name] = info
    return info


def get(name: str) -> TargetInfo:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"target: expected one of {sorted(_REGISTRY)}, got {name!r}") from None


def names() -> list[str]:
    return sorted(_REGISTRY)


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
    triple = _triple()
    if not cpu or cpu == "generic" or (triple and not codegen.llvm_is_valid_cpu(cpu, triple)):
        return ""
    return cpu


def _triple() -> str | None:
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
    if _triple():
        target["mtriple"] = _triple()
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
