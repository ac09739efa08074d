"""Target registry: one frozen record per target, registered once.

A record says how to reach a target -- the TVM target, the schedule rules,
how the artifact is packaged, which ops and dtypes it serves, which
intrinsics are lowered differently, the machine facts its schedules read,
and where its fixed runtime sources lie -- and nothing about any op.  An
(op, target, dtype) combination that is not supported raises a ValueError
naming the triple.

Each target is one module of this package (``llvm``, ``cuda``, ``dsp``,
``ascend``) that builds its record and registers it; a target with fixed
C/C++ sources (a porting layer, host helpers, build templates) keeps them as
real files in its own folder (``targets/<name>/``), named by
``TargetInfo.runtime_sources``.
"""
from __future__ import annotations

import dataclasses
import functools
import os
from pathlib import Path
from typing import Callable, Mapping

__all__ = ["TargetInfo", "register", "get", "names", "runtime_source_dir", "host_cpu", "cuda_archs", "CUDA_ARCH_ENV"]


@dataclasses.dataclass(frozen=True)
class TargetInfo:
    """One code-generation target.

    name            registry key ("llvm", "cuda", "dsp", "ascend")
    tvm_target      callable returning the TVM target dict the schedules are applied
                    for (may probe the host)
    schedules       package holding the schedule rules for this target
    artifact        the packager (lowering.packagers) that turns the scheduled
                    kernels into what the target ships: "shared_library",
                    "cuda_fatbin", "dsp_c", "ascend_package"
    dtypes          dtypes the target supports
    ops             ops the target serves (None: every registered op)
    intrinsics      TVM intrinsic name -> lowering rule name in lowering.intrinsics
    runnable_here   whether kernels for this target can run in this process
    archs           callable returning the device architectures an artifact carries
                    machine code for (None: the host only)
    facts           what the schedules and packager need to know about the machine
                    (memory sizes, cores, chips...), read by name, never assumed
    runtime_sources folder under targets/ holding the target's fixed C/C++ sources
                    (None: it has none)
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
    facts: Mapping = dataclasses.field(default_factory=dict)
    runtime_sources: str | None = None

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


def runtime_source_dir(info: TargetInfo) -> Path:
    """The folder of ``info``'s fixed C/C++ sources (ValueError when the target has none)."""
    if info.runtime_sources is None:
        raise ValueError(f"target {info.name!r} has no runtime sources")
    return Path(__file__).resolve().parent / info.runtime_sources


from . import llvm as _llvm  # noqa: E402  (each target module registers its record)
from . import cuda as _cuda  # noqa: E402
from . import dsp as _dsp  # noqa: E402
from . import ascend as _ascend  # noqa: E402
from .cuda import CUDA_ARCH_ENV, CUDA_DEFAULT_ARCHS, cuda_archs  # noqa: E402
from .llvm import LLVM_DETERMINISM_OPTIONS, host_cpu  # noqa: E402
