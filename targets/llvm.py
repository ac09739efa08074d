"""The CPU through LLVM: this machine's, detected (FUSEDGRAD_MCPU and FUSEDGRAD_MTRIPLE name another:
`fusedgrad generate --cpu/--triple`), and the facts a schedule may know about it."""
from __future__ import annotations

import dataclasses
import functools
import os
from typing import Mapping

from .registry import TargetInfo, register


MCPU_ENV = "FUSEDGRAD_MCPU"  # build for this LLVM CPU instead of this machine's ("" : the triple's baseline)
MTRIPLE_ENV = "FUSEDGRAD_MTRIPLE"  # build for this triple instead of this machine's (a cross build)


def host_cpu() -> str:
    """The LLVM name of the CPU the llvm target builds for: FUSEDGRAD_MCPU when set (e.g. "" to build
    for a generic x86-64, "haswell" for AVX2 machines), else this machine's (e.g. "sapphirerapids"),
    or "" if LLVM does not know it."""
    env = os.environ.get(MCPU_ENV)
    if env is not None:
        return env
    return system_cpu()


@functools.lru_cache(maxsize=None)
def system_cpu() -> str:
    """LLVM's name of this machine's CPU, or "" if LLVM does not know it."""
    from tvm.target import codegen

    cpu = codegen.llvm_get_system_cpu()
    triple = host_triple()
    if not cpu or cpu == "generic" or (triple and not codegen.llvm_is_valid_cpu(cpu, triple)):
        return ""
    return cpu


def host_triple() -> str | None:
    """This machine's triple, where fusedgrad names one (x86_64 and aarch64 Linux)."""
    import platform

    return {"x86_64": "x86_64-linux-gnu", "AMD64": "x86_64-linux-gnu",
            "aarch64": "aarch64-linux-gnu", "arm64": "aarch64-linux-gnu"}.get(platform.machine())


def build_triple() -> str | None:
    """The triple the llvm target builds for: FUSEDGRAD_MTRIPLE when set, else this machine's."""
    return os.environ.get(MTRIPLE_ENV) or host_triple()


def check_build_for(cpu: str | None, triple: str | None) -> "CpuFacts":
    """Validate a CPU and triple to build for (ValueError naming a bad one; a cross triple needs its
    C compiler to link), and return their facts."""
    facts = cpu_facts(cpu if cpu is not None else (host_cpu() or "generic"), triple or build_triple())
    linker({"kind": "llvm", "mtriple": facts.triple})
    return facts


CROSS_EXTRA = "pip install 'fusedgrad[cross]'"  # the ziglang wheel: zig's C compiler links for any triple


def linker(spec: Mapping) -> tuple[str, ...] | None:
    """The command (program and leading arguments) that links libraries for the llvm target ``spec``:
    None (TVM's default, this machine's) for this machine's architecture, else the Debian cross
    compiler named by the triple (``("aarch64-linux-gnu-gcc",)``) when it is on PATH, else zig's C
    compiler for the triple from the ziglang wheel (``zig_cc``); ValueError naming the triple, the
    Debian package and the pip extra when there is neither."""
    import shutil

    triple, host = spec.get("mtriple"), host_triple()
    if not triple or (host and triple.split("-")[0] == host.split("-")[0]):
        return None
    cc = f"{triple}-gcc"
    if shutil.which(cc) is not None:
        return (cc,)
    zig = zig_cc(triple)
    if zig is None:
        raise ValueError(f"--triple {triple}: no cross compiler to link its libraries: no {cc} on PATH "
                         f"(Debian: apt-get install gcc-{triple}) and no zig ({CROSS_EXTRA})")
    return zig


def zig_cc(triple: str) -> tuple[str, ...] | None:
    """zig's C compiler for ``triple`` as a command, from the ziglang wheel (the ``cross`` extra), or
    None when that is not installed."""
    import importlib.util
    import sys

    if importlib.util.find_spec("ziglang") is None:
        return None
    return (sys.executable, "-m", "ziglang", "cc", "-target", triple)


@dataclasses.dataclass(frozen=True)
class CpuFacts:
    """What a CPU schedule may know about the CPU it generates for, derived from LLVM's CPU name and
    feature set (``cpu_facts``).

    cpu, triple        the LLVM CPU name and target triple the facts are for
    isa                the vector extension the schedules use: "avx512", "avx2", "sse2", "neon"
                       (aarch64 Advanced SIMD), "scalar"
    isa_class          the psABI level the CPU meets, which keys tuning records and ranks the
                       libraries of one artifact folder: "x86-64-v4", "x86-64-v3", "x86-64-v2",
                       "x86-64", "aarch64" (``ISA_CLASSES``)
    vector_bits        the width of the vector registers the schedules use (AVX-512: 512, AVX2: 256,
                       SSE2 and NEON: 128; SVE counts as NEON, its length is not in the name)
    vector_registers   how many there are (zmm0-31, ymm0-15, xmm0-15, v0-31)
    fma                fused multiply-add
    f16c, bf16         hardware fp16 <-> fp32 and bf16 conversions (x86: F16C, AVX512_BF16; aarch64:
                       the base ISA, BF16)
    fp16_arith         arithmetic in fp16 (AVX512_FP16, aarch64 FP16)
    cores              the cores to use (the host's count; a named CPU's is not known: None)
    caches             {"l1d", "l2", "l3"} in bytes, read from the host (Linux sysfs); empty for a
                       named CPU, whose caches LLVM does not describe
    """

    cpu: str
    triple: str
    isa: str
    isa_class: str
    vector_bits: int
    vector_registers: int
    fma: bool
    f16c: bool
    bf16: bool
    fp16_arith: bool
    cores: int | None
    caches: Mapping[str, int]

    def lanes(self, dtype: str = "float32") -> int:
        """Elements of ``dtype`` in one vector register (at least one)."""
        bits = {"float32": 32, "float16": 16, "bfloat16": 16, "float64": 64, "int32": 32}
        if dtype not in bits:
            raise ValueError(f"dtype: expected one of {sorted(bits)}, got {dtype!r}")
        return max(1, self.vector_bits // bits[dtype])


# x86 features -> (vector extension, vector bits, vector registers), the widest first
_X86_VECTORS = (("avx512f", "avx512", 512, 32), ("avx2", "avx2", 256, 16), ("sse2", "sse2", 128, 16))

# The x86-64 psABI micro-architecture levels (each includes the ones below it), by LLVM's feature
# names, highest first; a CPU's class is the highest level whose features it has all of.
_X86_LEVELS = (
    ("x86-64-v4", {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}),
    ("x86-64-v3", {"avx", "avx2", "bmi", "bmi2", "f16c", "fma", "lzcnt", "movbe"}),
    ("x86-64-v2", {"cx16", "popcnt", "sahf", "sse3", "sse4.1", "sse4.2", "ssse3"}),
)
# every ISA class per architecture, best first: the order a loader prefers libraries in and a
# tuning-record lookup falls back along
ISA_CLASSES = {"x86_64": ("x86-64-v4", "x86-64-v3", "x86-64-v2", "x86-64"), "aarch64": ("aarch64",)}


def _x86_level(features: set[str]) -> str:
    for i, (name, _) in enumerate(_X86_LEVELS):
        if set().union(*(extra for _, extra in _X86_LEVELS[i:])) <= features:
            return name
    return "x86-64"


def cpu_facts(cpu: str | None = None, triple: str | None = None) -> CpuFacts:
    """The facts of LLVM CPU ``cpu`` for ``triple`` (None: this machine's, as the llvm target builds
    for it; caches and cores are then read from the host).  An unknown CPU or a triple this LLVM
    lacks is a ValueError naming it."""
    import tvm
    from tvm.target import codegen

    host = cpu is None and triple is None
    if cpu is None:
        cpu = system_cpu()
    if triple is None:
        triple = host_triple() or ""
    if not triple:
        raise ValueError("triple: the host's is not known to fusedgrad; name one (e.g. 'x86_64-linux-gnu')")
    arch = triple.split("-")[0]
    if arch not in ("x86_64", "aarch64"):
        raise ValueError(f"triple: expected an x86_64-* or aarch64-* triple, got {triple!r}")
    named = cpu not in ("", "generic")
    if named and not codegen.llvm_is_valid_cpu(cpu, triple):
        raise ValueError(f"cpu: {cpu!r} is not a CPU LLVM knows for {triple!r}")
    spec = {"kind": "llvm", "mtriple": triple}
    if named:
        spec["mcpu"] = cpu
    features = set(codegen.llvm_get_cpu_features(tvm.target.Target(spec)))
    if arch == "x86_64":
        isa, bits, regs = next(((c, b, r) for f, c, b, r in _X86_VECTORS if f in features), ("scalar", 0, 16))
        f16c, bf16, fp16 = "f16c" in features, "avx512bf16" in features, "avx512fp16" in features
        level = _x86_level(features)
    else:  # aarch64: Advanced SIMD is part of the base ISA, 32 128-bit registers
        isa, bits, regs = ("neon", 128, 32) if "neon" in features else ("scalar", 0, 32)
        f16c, bf16, fp16 = True, "bf16" in features, "fullfp16" in features
        level = "aarch64"
    return CpuFacts(cpu=cpu or "generic", triple=triple, isa=isa, isa_class=level, vector_bits=bits,
                    vector_registers=regs,
                    fma="fma" in features or arch == "aarch64", f16c=f16c, bf16=bf16, fp16_arith=fp16,
                    cores=(os.cpu_count() or 1) if host else None, caches=_host_caches() if host else {})


def _host_caches(root: str = "/sys/devices/system/cpu/cpu0/cache") -> dict[str, int]:
    """This machine's L1 data, L2 and L3 sizes in bytes, from Linux sysfs ({} where it has none)."""
    from pathlib import Path

    out = {}
    for index in sorted(Path(root).glob("index*")):
        try:
            level = int((index / "level").read_text())
            kind = (index / "type").read_text().strip()
            size = (index / "size").read_text().strip()
        except (OSError, ValueError):
            continue
        if kind == "Instruction" or not size:
            continue
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(size[-1], 1)
        name = "l1d" if level == 1 else f"l{level}"
        out[name] = int(size.rstrip("KMG")) * scale
    return out


# LLVM's per-CPU feature sets mix instruction-set extensions with tuning flags (fast-*, slow-*,
# prefer-256-bit, false-deps-*...); code built for a CPU may use the extensions, which the CPU that
# runs it must have.  These are the extensions' names (x86 and aarch64) as LLVM spells them.
_ISA_PREFIXES = ("sse", "ssse", "avx", "fma", "f16c", "bmi", "lzcnt", "popcnt", "movbe", "amx",
                 "neon", "fp-armv8", "fullfp16", "bf16", "sve", "dotprod", "i8mm")


@functools.lru_cache(maxsize=None)
def isa_features(cpu: str, triple: str) -> frozenset[str]:
    """The instruction-set extensions of LLVM CPU ``cpu`` ("" or "generic": the triple's baseline)."""
    import tvm
    from tvm.target import codegen

    spec = {"kind": "llvm", "mtriple": triple}
    if cpu and cpu != "generic":
        spec["mcpu"] = cpu
    return frozenset(f for f in codegen.llvm_get_cpu_features(tvm.target.Target(spec)) if f.startswith(_ISA_PREFIXES))


def cannot_run(spec: Mapping) -> str | None:
    """Why this machine cannot run code built for the llvm target ``spec`` (a TVM target dict, as a
    manifest records it), or None when it can: another architecture, or extensions this CPU lacks
    (LLVM's name for this CPU, not FUSEDGRAD_MCPU, is what runs it)."""
    host = host_triple()
    triple = spec.get("mtriple") or host
    if host is None or triple is None:
        return None  # a host fusedgrad names no triple for: nothing to compare against
    if triple.split("-")[0] != host.split("-")[0]:
        return f"built for {triple}, this machine is {host}"
    cpu = spec.get("mcpu") or ""
    here = system_cpu()
    missing = sorted(isa_features(cpu, triple) - isa_features(here, host))
    if missing:
        return f"built for CPU {cpu!r}, whose instructions {missing} this CPU ({here!r}) lacks"
    return None


def isa_class_of(spec: Mapping) -> str | None:
    """The ISA class (``CpuFacts.isa_class``) of code built for the TVM target dict ``spec``, as a
    manifest records it: None for a target other than llvm, or a triple fusedgrad cannot name."""
    triple = spec.get("mtriple") or host_triple()
    if spec.get("kind") != "llvm" or not triple:
        return None
    return cpu_facts(spec.get("mcpu") or "generic", triple).isa_class


# TVM compiles with LLVM's FP-op fusion set to "fast", so mul+add pairs are
# contracted wherever the backend finds them.  When LLVM versions a loop on
# runtime alias checks, its vector and scalar versions contract differently
# and the result bits depend on where the buffers happen to lie.  Forbid that
# versioning; schedules vectorise their hot loops explicitly instead.
LLVM_DETERMINISM_OPTIONS = ("-vectorize-memory-check-threshold:uint=0",)


def _llvm_host() -> dict:
    target = {"kind": "llvm", "num-cores": os.cpu_count() or 1, "cl-opt": list(LLVM_DETERMINISM_OPTIONS)}
    if build_triple():
        target["mtriple"] = build_triple()
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
        # every op but the tensor-core GEMM (``matmul``): the CPU's GEMM is matmul_packed
        ops=("layer_norm_backward", "lstm_cell_backward", "lstm_cell_forward", "lstm_layer_backward",
             "lstm_layer_forward", "lstm_step_backward", "matmul_packed", "pack_b", "pack_bt", "column_sum"),
        # the layer rules (schedules/llvm/lstm_layer.py) are float32 only; their definitions are not
        op_dtypes={"lstm_layer_forward": ("float32",), "lstm_layer_backward": ("float32",)},
        intrinsics={"tirx.tanh": "rational_tanh"},
        description="host CPU through LLVM (ISA detected; FUSEDGRAD_MCPU overrides)",
        cannot_run=cannot_run,
        linker=linker,
        isa_class=isa_class_of,
        # the CPU the committed TensorIR (generated/llvm) is scheduled for, whatever machine writes it:
        # the AVX-512 class (the rules size their tiles from the CPU, so the TIR depends on it), with
        # 2 cores (the committed tuning records' class; the layer rule sizes its sweep blocks from it)
        facts={"review": {"mcpu": "x86-64-v4", "mtriple": "x86_64-linux-gnu", "num-cores": 2}},
    )
)
