"""NVIDIA GPUs through CUDA: TVM's CUDA source compiled by nvcc into a fatbin."""
from __future__ import annotations

import os

from .registry import TargetInfo, register
from .llvm import host_triple

# ---- CUDA -------------------------------------------------------------------
# Artifacts carry machine code (cubin) for every architecture listed, plus the
# PTX of the newest one so later GPUs can JIT it; nothing is compiled at load.
CUDA_ARCH_ENV = "FUSEDGRAD_CUDA_ARCH"
CUDA_DEFAULT_ARCHS = ("sm_80", "sm_90")


def compute_capability(arch: str) -> int | None:
    """80 for "sm_80" (and "sm_90a"); None for anything that is not an sm_NN name."""
    digits = arch[3:].rstrip("a") if arch.startswith("sm_") else ""
    return int(digits) if digits.isdigit() else None


# The most shared memory one block may use with the opt-in (cudaFuncAttributeMaxDynamicSharedMemorySize),
# static plus dynamic, by architecture: CUDA C++ Programming Guide, "Compute Capabilities", table
# "Technical Specifications per Compute Capability", row "Maximum amount of shared memory per thread
# block" (96 KB on 7.0, 64 KB on 7.5, 163 KB on 8.0 and 8.7, 99 KB on 8.6 and 8.9, 227 KB on 9.0).
# Past 48 KiB a kernel's dynamic shared memory needs the opt-in, which TVM's CUDA runtime makes at
# launch (cuFuncSetAttribute) from the size the launch asks for.
OPTIN_SHARED_BYTES = {70: 96 * 1024, 72: 48 * 1024, 75: 64 * 1024, 80: 163 * 1024, 86: 99 * 1024,
                      87: 163 * 1024, 89: 99 * 1024, 90: 227 * 1024, 100: 227 * 1024, 120: 99 * 1024}


# Registers (the same table, every compute capability from 5.0 on): at most 255 a thread, 64 K 32-bit
# registers a block.
REGISTERS_PER_THREAD, REGISTERS_PER_BLOCK = 255, 64 * 1024
# Shared memory is 32 banks of 4 bytes on every one of them ("Shared Memory" of each capability's section).
SHARED_BANKS, BANK_BYTES = 32, 4


def optin_shared_bytes(archs=None) -> int:
    """The shared memory a block may use on every one of ``archs`` (default: those built, ``cuda_archs``)
    with the opt-in: the least of their maxima, since one source serves them all."""
    archs = cuda_archs() if archs is None else tuple(archs)
    unknown = [a for a in archs if compute_capability(a) not in OPTIN_SHARED_BYTES]
    if unknown or not archs:
        raise ValueError(f"archs: expected CUDA architectures among "
                         f"{sorted(f'sm_{c}' for c in OPTIN_SHARED_BYTES)}, got {list(archs)}")
    return min(OPTIN_SHARED_BYTES[compute_capability(a)] for a in archs)


def cuda_archs() -> tuple[str, ...]:
    """The CUDA architectures to build for: $FUSEDGRAD_CUDA_ARCH ("sm_80,sm_90") or the default."""
    text = os.environ.get(CUDA_ARCH_ENV, "")
    if not text.strip():
        return CUDA_DEFAULT_ARCHS
    archs = tuple(a.strip() for a in text.split(",") if a.strip())
    bad = [a for a in archs if (compute_capability(a) or 0) < 70]
    if bad or not archs:
        raise ValueError(f"{CUDA_ARCH_ENV} / --arch: expected comma-separated CUDA architectures sm_70 or newer "
                         f"(e.g. sm_80,sm_90), got {text!r}")
    return tuple(sorted(set(archs), key=lambda a: (compute_capability(a), a)))


def _cuda() -> dict:
    # The source is generated once, for the oldest architecture listed, and
    # compiled for each; the host side is this architecture's baseline (no -mcpu)
    # so an artifact built here runs on any GPU machine of this architecture.
    host = {"kind": "llvm", "mtriple": host_triple()} if host_triple() else {"kind": "llvm"}
    return {"kind": "cuda", "arch": cuda_archs()[0], "max_num_threads": 1024, "thread_warp_size": 32,
            "max_shared_memory_per_block": 49152, "host": host}


register(
    TargetInfo(
        name="cuda",
        tvm_target=_cuda,
        schedules="fusedgrad.schedules.cuda",
        artifact="cuda_fatbin",
        dtypes=("float32", "float16", "bfloat16"),
        # what the CUDA API runs, the full LSTM's float32 kernels (its GEMMs, B packing, step kernels
        # and bias sums, the persistent layer kernels of its recurrence), which the LSTM runs on CUDA tensors,
        # and the tensor-core GEMM
        ops=("layer_norm_backward", "lstm_cell_backward", "matmul_packed", "pack_b", "pack_bt", "lstm_cell_forward",
             "lstm_step_backward", "column_sum", "matmul",
             "lstm_layer_forward", "lstm_layer_backward"),
        runnable_here=False,
        archs=cuda_archs,
        description="NVIDIA GPUs: CUDA source compiled by nvcc to a fatbin (cubin per --arch + PTX), "
                    "loaded by TVM's CUDA runtime",
    )
)
