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

from .registry import TargetInfo, get, names, register, runtime_source_dir, unregister  # noqa: F401
from . import llvm as _llvm  # noqa: E402,F401  (each target module registers its record)
from . import cuda as _cuda  # noqa: E402,F401
from . import dsp as _dsp  # noqa: E402,F401
from . import ascend as _ascend  # noqa: E402,F401
from .cuda import CUDA_ARCH_ENV, CUDA_DEFAULT_ARCHS, cuda_archs  # noqa: E402,F401
from .llvm import LLVM_DETERMINISM_OPTIONS, host_cpu  # noqa: E402,F401

__all__ = ["TargetInfo", "register", "unregister", "get", "names", "runtime_source_dir", "host_cpu", "cuda_archs", "CUDA_ARCH_ENV"]
