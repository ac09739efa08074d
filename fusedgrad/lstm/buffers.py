"""The LSTM's float32 buffers, kernels and GEMM operands, on the host or a torch device.

:class:`HostArrays` (numpy arrays, the llvm kernels) and :class:`TorchArrays`
(torch tensors on one device, that device's target's kernels, launched on
torch's current stream) are the two places a call's buffers can live: the
drivers in :mod:`fusedgrad.lstm` only use what both share (slicing, views,
assignment, ``+=``) and the few methods below, so one driver serves both.
:func:`kernel` loads a generated entry point once per process; :class:`Workspace`
lends the scratch buffers of one call (on the host from a pool shared by calls);
:class:`Operand` holds the B of a GEMM as ``matmul_packed``'s column panels, and
:func:`gemm` runs c = a·B (+ bias) (+ addend) through ``matmul_packed``'s main
and few_rows entries -- or, for a 16-bit call on a GPU or a float32 one in TF32
(``gemm_dtype_for``), holds B dense in that dtype and runs the tensor-core ``matmul``.
"""
from __future__ import annotations

import contextlib
import functools
import threading

import numpy as np

from .. import runtime, te_defs
from ..tensors import TORCH_DEVICES, alloc, torch_module
from ..te_defs._lstm_layer import TENSOR_CORE_MIN_BATCH, TENSOR_CORES, W_HH_GLOBAL
from ..te_defs.matmul_packed import PANEL, ROW_BLOCK  # noqa: F401  (ROW_BLOCK: part of this module's API)

F32 = np.float32


PERSISTENT = ("lstm_layer_forward", "lstm_layer_backward")  # CUDA kernels whose blocks must all be resident


@functools.lru_cache(maxsize=None)
def kernel(op: str, target: str = "llvm", dtype: str = "float32", tensor_cores: bool = False, **variant: bool):
    """The bare ``dtype`` entry point of ``op``'s ``variant`` for ``target``, loaded once per process;
    on CUDA a persistent layer kernel launches its entry point with W_hh's slice on chip where that
    grid fits the device, else its ``w_hh_global`` one (``_co_resident``); with ``tensor_cores`` (the
    call's GEMMs run on the tensor cores) first its ``tensor_cores`` one, where the batch fills its tiles."""
    art = runtime.artifact(op, dtype, target)
    if target == "cuda" and op in PERSISTENT:
        return _co_resident(art.entry, [art.kernel(variant), art.kernel({**variant, W_HH_GLOBAL: True})],
                            art.kernel({**variant, TENSOR_CORES: True}) if tensor_cores else None)
    return art.kernel(variant).func


def _co_resident(entry, kernels, tensor_core_kernel=None):
    """A launch of the first of ``kernels`` (runtime kernels of one persistent layer kernel, the preferred
    first) whose grid (a block per ``grid_units`` hidden units as the manifest records, H from w_hh, the
    second argument), each block with the launch's dynamic shared memory at that H (``dynamic_shared``),
    the tensors' GPU holds at once (``lowering.cuda.persistent_choice``); CoResidencyError where none
    does (a grid barrier would wait forever).  ``tensor_core_kernel`` (the ``tensor_cores`` entry) comes
    first where the batch (the first argument's second dimension) is at least TENSOR_CORE_MIN_BATCH.  The
    choice is kept per H, batch and device kind.  Nothing here needs TVM's compiler: the GPU machine has
    none."""
    import torch

    from ..lowering import cuda

    funcs = {k.symbol: k.func for k in kernels + ([tensor_core_kernel] if tensor_core_kernel else [])}
    for symbol in funcs:
        cuda.launch_record(entry, symbol)  # an artifact that predates the records: refused at load
    chosen: dict = {}

    def call(*args):
        H = int(args[1].shape[1])
        props = torch.cuda.get_device_properties(args[1].device)
        tiles = tensor_core_kernel is not None and int(args[0].shape[1]) >= TENSOR_CORE_MIN_BATCH
        key = (H, tiles, props.major, props.minor, props.multi_processor_count)
        if key not in chosen:
            symbols = ([tensor_core_kernel.symbol] if tiles else []) + [k.symbol for k in kernels]
            chosen[key] = cuda.persistent_choice(entry, symbols, H, key[2:4], key[4])
        return funcs[chosen[key]](*args)
    return call


def buffer(shape, zero: bool = False) -> np.ndarray:
    """A new float32 numpy array (``tensors.alloc``: huge pages from 32 MiB up).

    Smaller ones come from malloc, which after the first call recycles the
    memory freed by the previous one (glibc raises its mmap threshold to the
    freed size): the forward at (50, 32, 256, 256) took 16.6 ms against 21
    with fresh huge-page mappings from 1 MiB up, and the same at (100, 64, 512, 512).
    """
    return alloc("numpy", shape, "float32", zero)


class _Arrays:
    """What both kinds of arrays share: the kernels of their ``target``."""

    target = "llvm"

    def kernel(self, op: str, dtype: str = "float32", **variant: bool):
        # a layer kernel's recurrent sums run on the tensor cores where the call's GEMMs do
        tensor_cores = {"tensor_cores": True} if op in PERSISTENT and self.gemm_dtype else {}
        return kernel(op, self.target, dtype, **tensor_cores, **variant)


class HostArrays(_Arrays):
    """float32 numpy arrays in host memory; the llvm kernels."""

    pooled = True  # scratch buffers come from the shared pool
    gemm_dtype = None  # the GEMMs are float32 matmul_packed

    @staticmethod
    def main_rows(m: int) -> int:
        """How many of a GEMM's m rows go through matmul_packed's main entry (whole row blocks; the
        rest through its few_rows entry)."""
        return m - m % ROW_BLOCK

    def new(self, shape, zero: bool = False) -> np.ndarray:
        return buffer(shape, zero)

    @staticmethod
    def int32(values) -> np.ndarray:
        """Integers (e.g. the batch sizes a layer kernel reads) as an int32 array."""
        return np.ascontiguousarray(values, dtype=np.int32)

    def copy(self, a) -> np.ndarray:
        """A fresh C-contiguous copy (``buffer``)."""
        out = buffer(a.shape)
        np.copyto(out, a)
        return out

    def contiguous(self, a) -> np.ndarray:
        return np.ascontiguousarray(a)

    def launching(self):
        """Context of a call's kernel launches."""
        return contextlib.nullcontext()


INT32_KEPT = 256  # distinct int32 vectors (batch sizes of a shape) kept on devices, least recent dropped
_INT32: dict = {}
_INT32_LOCK = threading.Lock()


class TorchArrays(_Arrays):
    """float32 torch tensors on ``device``; the kernels of its target (``tensors.TORCH_DEVICES``),
    launched on torch's current stream, so they are ordered with the caller's torch work.

    ``gemm_dtype`` (float16 / bfloat16, or float32 for TF32): the GEMMs run on the tensor-core
    ``matmul`` with operands in that dtype and float32 sums, as a CUDA call in that dtype does
    (:func:`gemm_dtype_for`); None: float32 ``matmul_packed``.
    """

    pooled = False  # torch's own allocator caches device memory

    def __init__(self, device, gemm_dtype: str | None = None):
        self.device = device
        self.target = TORCH_DEVICES[device.type]
        self.torch = torch_module()
        self.gemm_dtype = gemm_dtype

    def new(self, shape, zero: bool = False):
        make = self.torch.zeros if zero else self.torch.empty
        return make(tuple(int(v) for v in shape), dtype=self.torch.float32, device=self.device)

    def copy(self, a):
        return a.to(self.torch.float32).clone(memory_format=self.torch.contiguous_format)

    def int32(self, values):
        """``values`` as an int32 tensor on the device, made once per distinct values and device and kept
        (read-only: the kernels take it as an input).  A plan's batch sizes are constants of its shape,
        and a host-to-device copy cannot run inside a CUDA graph's capture
        (``torch.cuda.make_graphed_callables``), where a tensor made before it can."""
        key = (tuple(int(v) for v in values), str(self.device))
        with _INT32_LOCK:
            t = _INT32.pop(key, None)
            if t is None:
                t = self.torch.as_tensor(np.asarray(key[0], dtype=np.int32), device=self.device)
            _INT32[key] = t  # most recently used last
            while len(_INT32) > INT32_KEPT:
                _INT32.pop(next(iter(_INT32)))
        return t

    def main_rows(self, m: int) -> int:
        """As ``HostArrays.main_rows`` on the CPU.  A GPU GEMM's tiles guard their own row tails, so
        one launch takes every row: the main entry from one row block up, else few_rows (its
        shorter tile, for the fewer rows it was made for)."""
        if self.target == "llvm":
            return HOST.main_rows(m)
        return m if m >= ROW_BLOCK else 0

    def contiguous(self, a):
        return a.contiguous()

    def rounded(self, a):
        """``a`` as a GEMM operand: in ``gemm_dtype``, unit inner stride (a cast, rounding once)."""
        return a.to(getattr(self.torch, self.gemm_dtype))

    def launching(self):
        if self.device.type == "cpu":
            return contextlib.nullcontext()
        from ..lowering import tvm_api

        return tvm_api.torch_stream(self.device)


HOST = HostArrays()


def gemm_dtype_for(target: str, dtype: str, tf32: bool = False) -> str | None:
    """The dtype a call's GEMMs run in on the tensor cores (``matmul``), None for float32
    ``matmul_packed``: a 16-bit call on a GPU uses them with operands in the call's dtype (x and the
    weights as given, h and dgates rounded once) and float32 sums; a float32 call only with ``tf32``
    (operands rounded to TF32, float32 sums: what cuDNN's LSTM does under
    ``torch.backends.cudnn.allow_tf32``)."""
    from .. import targets

    if dtype == "float32" and not tf32:
        return None
    return dtype if targets.get(target).serves("matmul", dtype) else None


# Scratch buffers (gate pre-activations, dgates, packed operands...) go back to
# a pool when a call ends and serve the next call of the same sizes: a fresh
# buffer's first touch costs ~0.3-0.9 ms per MB here (page faults, huge pages
# or not), against ~0.1 ms per MB to reuse one.  Outputs are always fresh.
POOL_BYTES = 1 << 30
_POOL: list[np.ndarray] = []
_POOL_LOCK = threading.Lock()


class Workspace:
    """The scratch buffers of one call: on the host taken from the pool and returned by
    :meth:`release`, on a torch device new tensors (torch's allocator pools them)."""

    def __init__(self, arrays=HOST):
        self.arrays = arrays
        self.taken: list[np.ndarray] = []

    def get(self, shape, zero: bool = False):
        shape = tuple(int(v) for v in shape)
        if not self.arrays.pooled:
            return self.arrays.new(shape, zero)
        with _POOL_LOCK:
            i = next((i for i in range(len(_POOL) - 1, -1, -1) if _POOL[i].shape == shape), None)
            a = _POOL.pop(i) if i is not None else None
        if a is None:
            a = buffer(shape, zero)
        elif zero:
            a.fill(0.0)
        self.taken.append(a)
        return a

    def release(self) -> None:
        with _POOL_LOCK:
            _POOL.extend(self.taken)
            total = sum(a.nbytes for a in _POOL)
            while _POOL and total > POOL_BYTES:  # oldest first
                total -= _POOL.pop(0).nbytes
        self.taken = []


class Operand:
    """The B of a GEMM as the column panels ``matmul_packed`` streams, made once
    and used by every GEMM that shares it (a weight: every time step).

    When N is not a multiple of the panel width, B is zero-padded to the next
    multiple (``n_padded``) and the product is computed that wide: a partial
    panel would run the kernels' guarded tail path, measured at ~2 GFLOP/s
    (N = 16) against ~30-200 for whole panels.

    With the arrays' ``gemm_dtype`` set, B is instead a dense [K, N] matrix in
    that dtype (``dense``, ``panels`` None) for the tensor-core ``matmul``.
    """

    def __init__(self, k: int, n: int, panels, arrays=HOST, dense=None):
        self.k, self.n, self.panels, self.arrays, self.dense = k, n, panels, arrays, dense
        self.n_padded = n if dense is not None else panels.shape[0] * PANEL

    @staticmethod
    def of(b, ws: Workspace) -> "Operand":
        """B given as [K, N]."""
        k, n = b.shape
        if ws.arrays.gemm_dtype:
            return Operand(k, n, None, ws.arrays, ws.arrays.contiguous(ws.arrays.rounded(b)))
        return Operand._packed(b, k, n, "pack_b", ws)

    @staticmethod
    def of_transposed(w, ws: Workspace) -> "Operand":
        """B = wᵀ, w given as [N, K] (an LSTM weight)."""
        n, k = w.shape
        if ws.arrays.gemm_dtype:
            return Operand(k, n, None, ws.arrays, ws.arrays.contiguous(ws.arrays.rounded(w).T))
        return Operand._packed(w, k, n, "pack_bt", ws)

    @staticmethod
    def _packed(src, k: int, n: int, packer: str, ws: Workspace) -> "Operand":
        npad = -(-n // PANEL) * PANEL
        bp = ws.get((npad // PANEL, k, PANEL))
        if k * n == 0:
            bp[...] = 0.0
            return Operand(k, n, bp, ws.arrays)
        if npad != n:  # zero-pad the N axis (the columns of b, the rows of w) to whole panels
            transposed = packer == "pack_bt"
            full = ws.get((npad, k) if transposed else (k, npad), zero=True)
            (full[:n] if transposed else full[:, :n])[...] = src
            src = full
        ws.arrays.kernel(packer)(src, bp)
        return Operand(k, n, bp, ws.arrays)


def gemm(a, b: Operand, c, bias=None, addend=None, ws: "Workspace | None" = None) -> None:
    """c = a·b (+ bias) (+ addend), float32, skipped when there is nothing to sum over."""
    m = a.shape[0]
    if m == 0 or b.n == 0:
        return
    if b.k == 0:
        c[...] = 0.0
        if bias is not None:
            c += bias
        if addend is not None:
            c += addend
        return
    if b.dense is not None:  # the tensor-core GEMM: a rounded once, float32 sums, any N
        flags = {"has_bias": bias is not None, "has_addend": addend is not None}
        args = [b.arrays.rounded(a), b.dense] + [t for t in (bias, addend) if t is not None]
        b.arrays.kernel("matmul", b.arrays.gemm_dtype, **flags)(*args, c)
        return
    if b.n_padded != b.n:  # compute the padded width, then keep the first n columns
        wide = ws.get((m, b.n_padded)) if ws is not None else b.arrays.new((m, b.n_padded))
        wide_bias = None
        if bias is not None:
            wide_bias = b.arrays.new((b.n_padded,), zero=True)
            wide_bias[:b.n] = bias
        _panels(a, b, wide, wide_bias, None)
        c[...] = wide[:, :b.n]
        if addend is not None:
            c += addend
        return
    _panels(a, b, c, bias, addend)


def _panels(a, b: Operand, c, bias, addend) -> None:
    """c = a·B (+ bias) (+ addend) from B's panels: whole row blocks through
    ``matmul_packed``'s main entry, the remaining rows through its few_rows entry (on a GPU one
    launch, ``TorchArrays.main_rows``)."""
    m = a.shape[0]
    main = b.arrays.main_rows(m)
    flags = {"has_bias": bias is not None, "has_addend": addend is not None}
    for few_rows, lo, hi in ((False, 0, main), (True, main, m)):
        if lo == hi:
            continue
        whole = hi - lo == m  # every row in one entry: no slicing (it costs more than a launch)
        rows = slice(lo, hi)
        args = [a if whole else a[rows], b.panels] + ([bias] if bias is not None else [])
        if addend is not None:
            args.append(addend if whole else addend[rows])
        b.arrays.kernel("matmul_packed", **flags, few_rows=few_rows)(*args, c if whole else c[rows])
