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

__all__ = ["TargetInfo", "register", "get", "names", "host_cpu", "cuda_archs", "CUDA_ARCH_ENV"]


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
    archs         callable returning the device architectures an artifact carries
                  machine code for (None: the host only)
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
    archs: Callable[[], tuple[str, ...]] | None = None

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


# ---- CUDA -------------------------------------------------------------------
# Artifacts carry machine code (cubin) for every architecture listed, plus the
# PTX of the newest one so later GPUs can JIT it; nothing is compiled at load.
CUDA_ARCH_ENV = "FUSEDGRAD_CUDA_ARCH"
CUDA_DEFAULT_ARCHS = ("sm_80", "sm_90")


def cuda_archs() -> tuple[str, ...]:
    """The CUDA architectures to build for: $FUSEDGRAD_CUDA_ARCH ("sm_80,sm_90") or the default."""
    text = os.environ.get(CUDA_ARCH_ENV, "")
    if not text.strip():
        return CUDA_DEFAULT_ARCHS
    archs = tuple(a.strip() for a in text.split(",") if a.strip())
    bad = [a for a in archs if not (a.startswith("sm_") and a[3:].rstrip("a").isdigit() and int(a[3:].rstrip("a")) >= 70)]
    if bad or not archs:
        raise ValueError(f"{CUDA_ARCH_ENV} / --arch: expected comma-separated CUDA architectures sm_70 or newer "
                         f"(e.g. sm_80,sm_90), got {text!r}")
    return tuple(sorted(set(archs), key=lambda a: (int(a[3:].rstrip("a")), a)))


def _cuda() -> dict:
    # The source is generated once, for the oldest architecture listed, and
    # compiled for each; the host side is generic x86-64 so an artifact built
    # here runs on any x86-64 GPU machine.
    host = {"kind": "llvm", "mtriple": "x86_64-linux-gnu"} if _triple() else {"kind": "llvm"}
    return {"kind": "cuda", "arch": cuda_archs()[0], "max_num_threads": 1024, "thread_warp_size": 32,
            "max_shared_memory_per_block": 49152, "host": host}


register(
    TargetInfo(
        name="cuda",
        tvm_target=_cuda,
        schedules="fusedgrad.schedules.cuda",
        artifact="cuda_fatbin",
        dtypes=("float32", "float16", "bfloat16"),
        runnable_here=False,
        archs=cuda_archs,
        description="NVIDIA GPUs: CUDA source compiled by nvcc to a fatbin (cubin per --arch + PTX), "
                    "loaded by TVM's CUDA runtime",
    )
)
