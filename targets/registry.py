"""The target registry: the TargetInfo record and the table of registered targets (see the
package docstring)."""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Callable, Mapping, Sequence


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
    cannot_run      (TVM target dict an artifact was built for) -> why this machine cannot
                    run it, or None (checked by runtime.load before loading; None: no check)
    linker          (TVM target dict) -> the command (a C compiler and any leading arguments)
                    that links its host libraries (None, or no linker: TVM's default, this machine's)
    isa_class       (TVM target dict) -> the ISA class its libraries are built for (e.g.
                    "x86-64-v3"), which names the library and keys its manifest entry, so one
                    folder holds a library per class (no hook: targets without classes)
    op_dtypes       op -> the only dtypes the target serves it in, where its rule for the op
                    covers fewer than the target and the definition share (e.g. a float32-only
                    rule of an op defined in float32 and float16); it can only narrow: each op
                    one the target serves, each dtype one of ``dtypes`` (ValueError otherwise)
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
    cannot_run: Callable[[Mapping], str | None] | None = None
    linker: Callable[[Mapping], Sequence[str] | None] | None = None
    isa_class: Callable[[Mapping], str | None] | None = None
    op_dtypes: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        for op, dtypes in self.op_dtypes.items():
            if self.ops is not None and op not in self.ops:
                raise ValueError(f"target {self.name!r}: op_dtypes: expected an op of {list(self.ops)}, got {op!r}")
            if isinstance(dtypes, str) or not dtypes:
                raise ValueError(f"target {self.name!r}: op_dtypes[{op!r}]: expected a non-empty tuple of dtypes, "
                                 f"got {dtypes!r}")
            extra = [d for d in dtypes if d not in self.dtypes]
            if extra:
                raise ValueError(f"target {self.name!r}: op_dtypes[{op!r}]: expected dtypes of {list(self.dtypes)} "
                                 f"(it can only narrow them), got {list(dtypes)}")

    def dtypes_for(self, op: str) -> tuple[str, ...]:
        """The dtypes both this target and ``op``'s definition support, narrowed by ``op_dtypes``."""
        from fusedgrad.te_defs import get as get_op
        from fusedgrad.te_defs import names

        if self.ops is None:  # every registered op: checked here, once the definitions are loaded
            unknown = sorted(set(self.op_dtypes) - set(names()))
            if unknown:
                raise ValueError(f"target {self.name!r}: op_dtypes: expected registered ops, got {unknown}")
        allowed = self.op_dtypes.get(op, self.dtypes)
        return tuple(d for d in self.dtypes if d in get_op(op).dtypes and d in allowed)

    def served_ops(self) -> list[str]:
        """The registered ops this target serves, in registry order."""
        from fusedgrad.te_defs import names

        return [o for o in names() if self.ops is None or o in self.ops]

    def serves(self, op: str, dtype: str) -> bool:
        """Whether (op, self, dtype) is supported (``check`` says why not)."""
        return (self.ops is None or op in self.ops) and dtype in self.dtypes_for(op)

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


def unregister(name: str) -> TargetInfo:
    """Remove target ``name`` (a test's temporary record); returns it."""
    return _REGISTRY.pop(name)


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
