"""CUDA packaging: nvcc-compiled fatbins inside TVM's exported library.

TVM generates the CUDA C++ of a module's kernels but (in the wheel) never
compiles it: its device module only holds the source.  Here the source goes
through nvcc once per artifact, for every architecture listed -- a cubin per
``sm_XX`` plus the PTX of the newest, so a later GPU can JIT it -- and the
resulting fatbin replaces the source in the serialized device module before
it is linked into the library.  TVM's CUDA runtime then loads the fatbin with
``cuModuleLoadData``; nothing is compiled when an artifact is loaded.

How the fatbin replaces the source in TVM's serialized import blob depends on
that blob's byte layout: lowering/tvm_workarounds.py does it.

ptxas's resource report (-Xptxas -v) is parsed per kernel and architecture and
checked against the architecture's limits, so an artifact that could not
launch is never written.
"""
from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from pathlib import Path

from ..targets.cuda import REGISTERS_PER_BLOCK, REGISTERS_PER_THREAD as MAX_REGISTERS_PER_THREAD

NVCC_ENV = "FUSEDGRAD_NVCC"

# per-architecture limits checked at build time (CUDA C Programming Guide, compute capabilities table)
MAX_THREADS_PER_BLOCK = 1024
MAX_STATIC_SHARED_BYTES = 48 * 1024


class ToolchainError(RuntimeError):
    """nvcc is missing or rejected the generated source."""


def nvcc_path() -> str:
    """$FUSEDGRAD_NVCC, else nvcc on PATH, else /usr/local/cuda/bin/nvcc."""
    explicit = os.environ.get(NVCC_ENV)
    for candidate in (explicit, shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
        if explicit and candidate == explicit:
            raise ToolchainError(f"{NVCC_ENV}: expected an executable nvcc, got {explicit!r}")
    raise ToolchainError("nvcc not found (looked at $FUSEDGRAD_NVCC, PATH, /usr/local/cuda/bin/nvcc): "
                         "the CUDA target compiles its kernels with nvcc; install the CUDA toolkit or set "
                         f"{NVCC_ENV}")


@functools.lru_cache(maxsize=None)
def nvcc_version(nvcc: str | None = None) -> str:
    out = subprocess.run([nvcc or nvcc_path(), "--version"], capture_output=True, text=True, check=True).stdout
    found = re.search(r"release ([\d.]+), (V[\d.]+)", out)
    return found.group(2) if found else out.strip().splitlines()[-1]


def _arch_number(arch: str) -> str:
    return arch.removeprefix("sm_")


def gencode_flags(archs) -> list[str]:
    """A cubin for every arch, and the newest arch's PTX for GPUs newer than all of them."""
    flags = []
    for k, arch in enumerate(archs):
        n = _arch_number(arch)
        code = f"sm_{n}" if k < len(archs) - 1 else f"[sm_{n},compute_{n}]"
        flags += ["-gencode", f"arch=compute_{n},code={code}"]
    return flags


# ---- the grid barrier of the persistent kernels (schedules/cuda/lstm_layer.py calls it; its source
# and how it works: targets/cuda_grid_sync.cuh)
GRID_SYNC_NAME = "fg_grid_sync"
GRID_SYNC_END = "// ---- end of the grid barrier\n"
GRID_SYNC = (Path(__file__).resolve().parent.parent / "targets" / "cuda_grid_sync.cuh").read_text()


def with_grid_sync(source: str) -> str:
    """``source`` with the grid barrier defined in front where a kernel calls it (TVM's CUDA code
    generator prints the call, an extern, but has no way to define a device function)."""
    if f"{GRID_SYNC_NAME}(" not in source or GRID_SYNC_END in source:
        return source
    return GRID_SYNC + source


# ---- co-residency of a persistent kernel's grid
# Per-SM limits (CUDA C++ Programming Guide, "Compute Capabilities", table "Technical Specifications
# per Compute Capability"; shared memory per SM is the largest carve-out; 1 KiB of shared memory is
# reserved by the system for every resident block on compute capability 8.0 and newer, "Shared Memory"
# of each capability's section; registers are allocated per warp in units of 256).
SM_LIMITS = {
    "sm_80": {"threads": 2048, "blocks": 32, "registers": 65536, "shared_bytes": 164 * 1024},
    "sm_86": {"threads": 1536, "blocks": 16, "registers": 65536, "shared_bytes": 100 * 1024},
    "sm_89": {"threads": 1536, "blocks": 24, "registers": 65536, "shared_bytes": 100 * 1024},
    "sm_90": {"threads": 2048, "blocks": 32, "registers": 65536, "shared_bytes": 228 * 1024},
}
RESERVED_SHARED_BYTES = 1024
REGISTER_UNIT = 256  # registers a warp is given in multiples of
WARP = 32


class CoResidencyError(RuntimeError):
    """A persistent kernel's grid does not fit on the device at once (its grid barrier would hang)."""


def co_resident_blocks(arch: str, threads: int, registers: int, shared_bytes: int) -> int:
    """Blocks of a kernel (``threads`` a block, ``registers`` a thread and ``shared_bytes`` of static
    shared memory a block, from ptxas) one SM of ``arch`` holds at once: the least of what its
    threads, blocks, registers and shared memory allow."""
    lim = SM_LIMITS.get(arch)
    if lim is None:
        raise ValueError(f"arch: expected one of {sorted(SM_LIMITS)}, got {arch!r}")
    for name, value in (("threads", threads), ("registers", registers), ("shared_bytes", shared_bytes)):
        if isinstance(value, bool) or not isinstance(value, int) or value < (1 if name == "threads" else 0):
            raise ValueError(f"{name}: expected a {'positive' if name == 'threads' else 'non-negative'} int, "
                             f"got {value!r}")
    warps = -(-threads // WARP)
    per_warp = -(-registers * WARP // REGISTER_UNIT) * REGISTER_UNIT
    by_registers = lim["registers"] // (warps * per_warp) if per_warp else lim["blocks"]
    by_shared = lim["shared_bytes"] // (shared_bytes + RESERVED_SHARED_BYTES)
    return min(lim["threads"] // threads, lim["blocks"], by_registers, by_shared)


def persistent_grid(blocks: int, arch: str, sm_count: int, threads: int, registers: int, shared_bytes: int) -> int:
    """``blocks`` if a grid of that many blocks is resident at once on a device of ``sm_count`` SMs of
    ``arch`` (every block must be, or the grid barrier waits forever on a block never scheduled);
    raises CoResidencyError otherwise."""
    if isinstance(sm_count, bool) or not isinstance(sm_count, int) or sm_count < 1:
        raise ValueError(f"sm_count: expected a positive int, got {sm_count!r}")
    per_sm = co_resident_blocks(arch, threads, registers, shared_bytes)
    if blocks > sm_count * per_sm:
        raise CoResidencyError(
            f"a persistent kernel's grid of {blocks} blocks cannot be resident at once: at most {sm_count * per_sm} "
            f"({sm_count} SMs x {per_sm} blocks of {threads} threads, {registers} registers a thread, "
            f"{shared_bytes} bytes of shared memory on {arch}); a smaller hidden size or more SMs is needed")
    return blocks


def dynamic_shared_bytes(record: dict, H: int) -> int:
    """The dynamic shared memory a launch of a persistent layer kernel asks for at hidden size ``H``,
    from its manifest ``record`` (the rule's ``dynamic_shared``, what TVM's host code computes from H):
    ``bytes_per_h`` x H where that is at most ``up_to`` (W_hh's slice on chip), else ``else``."""
    if isinstance(H, bool) or not isinstance(H, int) or H < 0:
        raise ValueError(f"H: expected a non-negative int, got {H!r}")
    on_chip = record["bytes_per_h"] * H
    return on_chip if on_chip <= record["up_to"] else record["else"]


def check_persistent_launch(entry, symbol: str, blocks: int, capability: tuple[int, int], sm_count: int,
                            dynamic_shared_bytes: int = 0) -> int:
    """The grid of ``blocks`` for the persistent kernel of entry point ``symbol`` of the artifact whose
    manifest ``entry`` it is (its ptxas resources, ``device_kernels``), on a device of compute
    ``capability`` (major, minor) with ``sm_count`` SMs: the resources of the newest architecture built
    that the device runs (the cubin the driver picks), checked by ``persistent_grid``; a block's shared
    memory is ptxas' static bytes plus the launch's ``dynamic_shared_bytes`` (ptxas counts static only)."""
    arch = f"sm_{capability[0]}{capability[1]}"
    kernels = [k for k in entry.get("device_kernels", ()) if k["name"] == f"{symbol}_kernel"]
    if len(kernels) != 1:
        raise ValueError(f"symbol: expected one device kernel {symbol}_kernel in the artifact, got "
                         f"{[k['name'] for k in entry.get('device_kernels', ())]}")
    (k,) = kernels
    runs = sorted((a for a in k["arch"] if (int(_arch_number(a).rstrip("a")) <= int(_arch_number(arch)))),
                  key=lambda a: int(_arch_number(a).rstrip("a")))
    if not runs:
        raise CoResidencyError(f"{symbol}: no cubin for {arch} or older (built for {sorted(k['arch'])})")
    r = k["arch"][runs[-1]]
    limits = arch if arch in SM_LIMITS else runs[-1]
    return persistent_grid(blocks, limits, sm_count, k["threads"], r["registers"],
                           r["shared_bytes"] + dynamic_shared_bytes)


def launch_record(entry, symbol: str) -> dict:
    """The manifest ``entry``'s record of the persistent kernel ``symbol``: its ``grid_units`` (hidden
    units a block) and ``dynamic_shared`` (``dynamic_shared_bytes``); ValueError naming what an
    artifact that predates them lacks (build it again)."""
    (record,) = [k for k in entry["kernels"] if k["symbol"] == symbol]
    missing = [k for k in ("grid_units", "dynamic_shared") if k not in record]
    if missing:
        raise ValueError(f"{symbol}: expected the manifest to record the persistent kernel's {' and '.join(missing)}; "
                         f"the artifact {entry.get('library')} predates it: build it again")
    return record


def persistent_choice(entry, symbols, H: int, capability: tuple[int, int], sm_count: int) -> str:
    """The first of ``symbols`` (entry points of one persistent layer kernel, the preferred first: W_hh's
    slice on chip, then read from global memory) whose grid at hidden size ``H`` (ceil(H / grid_units)
    blocks, each with the launch's dynamic shared memory at that H) ``check_persistent_launch``
    accepts on the device; CoResidencyError naming each one's refusal where none fits."""
    refused = []
    for symbol in symbols:
        record = launch_record(entry, symbol)
        try:
            check_persistent_launch(entry, symbol, -(-H // int(record["grid_units"])), capability, sm_count,
                                    dynamic_shared_bytes(record["dynamic_shared"], H))
            return symbol
        except CoResidencyError as e:
            refused.append(f"{symbol}: {e}")
    raise CoResidencyError(f"no entry point of the kernel fits at H = {H}: " + " -- ".join(refused))


def compile_fatbin(source: str, archs, workdir: str | os.PathLike) -> tuple[bytes, dict]:
    """nvcc ``source`` (with the grid barrier where a kernel calls it) into a fatbin for ``archs``;
    returns (fatbin bytes, resources by kernel and arch)."""
    workdir = Path(workdir)
    cu, out = workdir / "kernels.cu", workdir / "kernels.fatbin"
    cu.write_text(with_grid_sync(source))
    nvcc = nvcc_path()
    cmd = [nvcc, "-fatbin", "-O3", "-std=c++17", "-Xptxas", "-v", "-diag-suppress", "177,550",
           *gencode_flags(archs), "-o", str(out), str(cu)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-20:])
        raise ToolchainError(f"nvcc failed (exit {proc.returncode}) on the generated CUDA source:\n{tail}")
    return out.read_bytes(), parse_ptxas_report(proc.stderr + proc.stdout)


_ENTRY = re.compile(r"Compiling entry function '(\w+)' for '(sm_\w+)'")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")


def parse_ptxas_report(text: str) -> dict:
    """{kernel: {arch: {registers, shared_bytes, stack_bytes, spill_bytes}}} from ptxas -v output."""
    report: dict = {}
    current = None
    for line in text.splitlines():
        m = _ENTRY.search(line)
        if m:
            current = report.setdefault(m.group(1), {}).setdefault(
                m.group(2), {"registers": 0, "shared_bytes": 0, "stack_bytes": 0, "spill_bytes": 0})
            continue
        if current is None:
            continue
        m = _FRAME.search(line)
        if m:
            current["stack_bytes"] = int(m.group(1))
            current["spill_bytes"] = int(m.group(2)) + int(m.group(3))
        m = _USED.search(line)
        if m:
            current["registers"] = int(m.group(1))
            s = _SMEM.search(line)
            current["shared_bytes"] = int(s.group(1)) if s else 0
    return report


# __launch_bounds__(max threads) or (max threads, min blocks a SM): the persistent layer kernels'
# tensor_cores entries give the second (schedules/cuda/lstm_mma.py MIN_BLOCKS)
_LAUNCH = re.compile(r'extern "C" __global__ void __launch_bounds__\((\d+)(?:, \d+)?\) (\w+)\(')


def kernels_in_source(source: str) -> dict[str, int]:
    """{kernel name: launch bound (threads per block)} of every __global__ function defined."""
    return {name: int(bound) for bound, name in _LAUNCH.findall(source)}


def device_kernels(source: str, resources: dict, archs, dynamic: dict | None = None) -> list[dict]:
    """Per-kernel records for the manifest, checked against each architecture's limits; ``dynamic``
    ({kernel: bytes}) the dynamic shared memory a kernel's launches ask for where that is a constant
    (recorded as ``dynamic_shared_bytes``; static plus dynamic checked against the opt-in maximum)."""
    from ..targets.cuda import optin_shared_bytes

    dynamic = dynamic or {}
    bounds = kernels_in_source(source)
    if not bounds:
        raise ToolchainError("the generated CUDA source defines no __global__ kernel with launch bounds")
    records = []
    for name, threads in sorted(bounds.items()):
        per_arch = resources.get(name, {})
        missing = [a for a in archs if a not in per_arch]
        if missing:
            raise ToolchainError(f"kernel {name}: ptxas reported nothing for {missing}")
        for arch in archs:
            r = per_arch[arch]
            problems = []
            if threads > MAX_THREADS_PER_BLOCK:
                problems.append(f"launch bound {threads} > {MAX_THREADS_PER_BLOCK} threads")
            if r["shared_bytes"] > MAX_STATIC_SHARED_BYTES:
                problems.append(f"{r['shared_bytes']} bytes of shared memory > {MAX_STATIC_SHARED_BYTES}")
            optin = optin_shared_bytes([arch])
            if r["shared_bytes"] + dynamic.get(name, 0) > optin:
                problems.append(f"{r['shared_bytes']} static + {dynamic.get(name, 0)} dynamic bytes of shared memory > "
                                f"{optin} (the opt-in maximum)")
            if r["registers"] > MAX_REGISTERS_PER_THREAD or r["registers"] * threads > REGISTERS_PER_BLOCK:
                problems.append(f"{r['registers']} registers x {threads} threads > {REGISTERS_PER_BLOCK}")
            if problems:
                raise ToolchainError(f"kernel {name} on {arch}: " + "; ".join(problems))
        records.append({"name": name, "threads": threads, "arch": {a: dict(per_arch[a]) for a in archs},
                        **({"dynamic_shared_bytes": dynamic[name]} if name in dynamic else {})})
    return records
