"""Tensors as the public API takes and returns them: dtypes, kinds, allocation.

A leaf module (it imports nothing of fusedgrad) shared by the single-op API
(``api``) and the full LSTM (``lstm``).  ``classify`` says whether a value is
a torch tensor or a numpy array (other DLPack producers are read as numpy,
zero-copy), ``dtype_text`` names its dtype as fusedgrad does ("float32",
"float16", "bfloat16"), ``NP_DTYPES`` maps those names to numpy dtypes
(bfloat16 from ml_dtypes), and ``alloc`` makes a new output array of a kind.
"""
from __future__ import annotations

import functools
import math
import mmap
from typing import Any

import numpy as np

__all__ = ["NP_DTYPES", "TORCH_DEVICES", "HUGE_OUTPUT_BYTES", "torch_module", "classify", "dtype_text", "alloc"]

NP_DTYPES = {"float32": np.dtype("float32"), "float16": np.dtype("float16")}
try:  # numpy has no bfloat16 of its own; ml_dtypes (a TVM dependency) provides it
    import ml_dtypes

    NP_DTYPES["bfloat16"] = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover
    pass

# torch device type -> fusedgrad target whose kernels take such tensors
TORCH_DEVICES = {"cpu": "llvm", "cuda": "cuda"}
INDEX_MAX = 2**31 - 1  # the kernels index in 32 bits: elements an argument or buffer may hold, or a view reach


def torch_module():
    """torch when this process has imported it, else None (fusedgrad never imports torch itself)."""
    import sys

    return sys.modules.get("torch")


def classify(name: str, value: Any):
    """("torch" | "numpy", the value to use): torch tensors detached, numpy as it is (read-only
    arrays too: the kernel's view copies those, after the checks), other DLPack producers read as
    numpy; TypeError/ValueError naming ``name`` otherwise."""
    if value is None:
        raise TypeError(f"{name}: expected a tensor, got None")
    torch = torch_module()
    if torch is not None and isinstance(value, torch.Tensor):
        if value.device.type not in TORCH_DEVICES:
            raise ValueError(f"{name}: expected a tensor on device cpu or cuda, got {value.device}")
        if value.requires_grad:
            value = value.detach()
        return "torch", value
    if isinstance(value, np.ndarray):
        return "numpy", value
    if hasattr(value, "__dlpack__"):
        device = value.__dlpack_device__() if hasattr(value, "__dlpack_device__") else (1, 0)
        if int(device[0]) != 1:
            raise ValueError(f"{name}: expected a CPU tensor (DLPack device type 1), got device {tuple(device)}")
        return "numpy", np.from_dlpack(value)
    raise TypeError(f"{name}: expected a numpy array or a tensor with __dlpack__, got {type(value).__name__}")


@functools.lru_cache(maxsize=None)
def dtype_text(dtype) -> str:
    """A numpy or torch dtype's name without the "torch." prefix ("float32", "bfloat16")."""
    return str(dtype).removeprefix("torch.")


# glibc's largest mmap threshold: smaller blocks are recycled by malloc, larger
# ones are fresh mappings whose 4 KiB first-touch faults cost as much as the
# kernel itself (128 MiB: ~40 ms here)
HUGE_OUTPUT_BYTES = 32 << 20
_HUGE_PAGE = 2 << 20


def alloc(kind: str, shape, dtype: str, zero: bool = False, device=None):
    """A new output array; large host ones on 2 MiB-aligned transparent huge pages
    where the OS allows it (zeroed by the OS, so ``zero`` costs nothing there);
    torch tensors on ``device`` when it is not the CPU."""
    shape = tuple(int(v) for v in shape)
    if device is not None and device.type != "cpu":
        torch = torch_module()
        return (torch.zeros if zero else torch.empty)(shape, dtype=getattr(torch, dtype), device=device)
    itemsize = NP_DTYPES[dtype].itemsize
    nbytes = math.prod(shape) * itemsize
    if nbytes >= HUGE_OUTPUT_BYTES and hasattr(mmap, "MADV_HUGEPAGE"):
        # whole, aligned huge pages: THP only maps those inside the advised range
        span = -(-nbytes // _HUGE_PAGE) * _HUGE_PAGE
        buf = mmap.mmap(-1, span + _HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        start = (-np.frombuffer(buf, dtype=np.uint8).ctypes.data) % _HUGE_PAGE
        try:
            buf.madvise(mmap.MADV_HUGEPAGE, start, span)
        except OSError:  # huge pages unavailable: ordinary pages
            pass
        if kind == "torch":
            torch = torch_module()
            return torch.frombuffer(buf, dtype=getattr(torch, dtype), count=nbytes // itemsize,
                                    offset=start).view(*shape)
        return np.frombuffer(buf, dtype=NP_DTYPES[dtype], count=nbytes // itemsize, offset=start).reshape(shape)
    if kind == "torch":
        torch = torch_module()
        return (torch.zeros if zero else torch.empty)(shape, dtype=getattr(torch, dtype))
    return (np.zeros if zero else np.empty)(shape, dtype=NP_DTYPES[dtype])
