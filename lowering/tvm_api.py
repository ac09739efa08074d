"""The thin layer over TVM's API (it churns between releases: tir -> tirx, s_tir, dict targets).

Compiling, exporting and loading modules, device sources, runtimes and streams, and host tensors
go through these helpers; building, tagging and scheduling PrimFuncs through schedules/tir_api.py.
Schedule rules call the methods of the ``s_tir.Schedule`` they are given; they do not import TVM.

Modules that import TVM themselves, because TVM's objects are what they
work on (tests/test_imports.py keeps this list true):

- te_defs/*.py: an op is defined in TVM's tensor expressions (``tvm.te``).
- lowering/intrinsics.py: target lowering rules are TIR expressions
  registered with TVM (``register_intrin_lowering``).
- schedules/cuda/mma_tf32.py, schedules/cuda/mma_16bit.py: the TF32 and bfloat16 tensor intrinsics
  are TIR functions written in TVMScript and registered with TVM (``TensorIntrin.register``).
- lowering/tuning.py: drives TVM's meta-schedule (database, builder, runner,
  ``tune_tir``) and times candidates on TVM tensors.
- lowering/c_emitter.py, lowering/c_guards.py, lowering/c_spmd.py: print and
  analyse scheduled TIR node by node for the DSP's C.
- lowering/ascend/vector.py: lowers scheduled TIR to AscendC vector code.
- targets/llvm.py: asks TVM's LLVM which CPU this is.
- schedules/llvm/lstm_layer.py: builds the LSTM layer's loop nest (one thread team across the time
  steps) with TVM's IR builder around the definition's expressions: no ``s_tir.Schedule`` primitive
  turns a plain loop nest into a team with a barrier per step.
- schedules/dsp/lstm_layer.py: the same for the DSP (the time loop every core walks, parallel
  loops of hidden-unit chunks inside it), for the same reason.
- schedules/cuda/lstm_layer.py: the same for CUDA (one persistent kernel per layer and direction,
  a grid barrier between steps), for the same reason.
- schedules/cuda/lstm_mma.py: the recurrent sums of its ``tensor_cores`` entries (mma.sync on
  fragments in registers), in the same IR builder loop nest.
- lowering/tuning_kernels.py: fixes a kernel at the tuned shape and builds and times the
  candidates meta-schedule measures.
- schedules/tir_api.py: what schedule rules need of TVM's API (PrimFuncs tagged with their op and
  layouts, ``s_tir.Schedule``, ``choose``, the generic GPU rules, TVMScript parsing for the tensor
  intrinsics), below both the rules and this module, so that schedules never import lowering.
- schedules/tir_rewrite.py: rewrites TIR as IR for these helpers (variables and buffers
  replaced, stores and scopes found, ``tir_api.choose``'s schedules joined).
"""

from __future__ import annotations

import contextlib
import functools
from typing import Mapping, Sequence

import tvm

from ..schedules import tir_api, tir_rewrite

def tvm_version() -> str:
    return tvm.__version__


def tvm_ffi_version() -> str:
    import tvm_ffi

    return getattr(tvm_ffi, "__version__", "unknown")


def target(spec: Mapping):
    return tvm.target.Target(dict(spec))


def compile_module(funcs: Mapping[str, object], tgt):
    """Compile named PrimFuncs into one executable module."""
    mod = tvm.IRModule({name: f for name, f in funcs.items()})
    settings, pipeline = _lowering(funcs.values(), tgt)
    with settings:
        return tvm.compile(mod, target=tgt, tir_pipeline=pipeline)


WARP_BUFFERS = 4  # the most warp-scope buffers one kernel has (the TF32 GEMM: A, B and C fragments)


@functools.lru_cache(maxsize=None)
def _warp_pipeline() -> str:
    """The name of TVM's pipeline with LowerWarpMemory run WARP_BUFFERS times, registered on first
    use (only a compiling process needs it): one run lowers only the first warp buffer of a
    statement sequence (it rewrites the rest of the sequence for that buffer alone and stops), so a
    kernel with A, B and C fragments kept two of them as 32-thread arrays."""
    pipelines = tvm.tirx.compilation_pipeline

    def make():
        pipeline, host, _ = pipelines.get_tir_pipeline("s_tir")

        def device():
            passes = [tvm.tirx.transform.LowerWarpMemory() for _ in range(WARP_BUFFERS)]
            return tvm.ir.transform.Sequential(passes + [tvm.tirx.transform.StmtSimplify(),
                                                         tvm.tirx.transform.LowerIntrin()])

        return pipeline, host, device

    pipelines.register_tir_pipeline("fusedgrad_warp", make)
    return "fusedgrad_warp"


def _lowering(funcs, tgt):
    """(the pass settings, the pipeline name) lowering ``funcs`` for ``tgt`` needs; no settings and
    TVM's default pipeline where nothing calls for others (the caller's context stays in force)."""
    funcs = list(funcs)
    if any(tir_rewrite.calls_extern(f, tir_api.ALIGNED) for f in funcs):
        _install_aligned_test()
    scopes = set() if tgt.kind.name != "cuda" else {
        scope for f in funcs for scope in tir_rewrite.buffer_scopes(f)} & {"shared.dyn", "warp"}
    whole = all(f.attrs is not None and f.attrs.get(tir_api.WHOLE_ATTR) for f in funcs)
    if not scopes and not whole:
        return contextlib.nullcontext(), "default"
    cur = tvm.transform.PassContext.current()
    disabled, config = list(cur.disabled_pass), dict(cur.config)
    if whole:
        # loop nests built whole (every buffer allocated at the size it is used): nothing for
        # CompactBufferAllocation to shrink, which spent 2-6 s of a CPU layer kernel's 7-13 s build
        # relaxing each of its accesses; a kernel's run-time shared size stays as written (the
        # launch's dynamic bytes the host computes), not the union of its accesses
        disabled.append("s_tir.CompactBufferAllocation")
    if scopes:
        # TVM's TIR common-subexpression pass misplaces a definition in a kernel whose shared memory is
        # sized at run time ("variable cse_v.. has been used before definition"), and hides a warp
        # buffer's index from LowerWarpMemory ("require positive constant coefficient on warp index");
        # nvcc does its own CSE.  Only there: other kernels' registers depend on TVM's CSE
        # (matmul_packed spills without it).  ``tirx.use_async_copy``: the copies of a software
        # pipeline's async stages (the tensor-core GEMM's tiles, in shared.dyn) become cp.async; nothing
        # else is marked async
        config["tirx.disable_cse_tir"] = True
        config["tirx.use_async_copy"] = "shared.dyn" in scopes
    settings = tvm.transform.PassContext(opt_level=cur.opt_level, required_pass=list(cur.required_pass),
                                         instruments=list(cur.instruments), disabled_pass=disabled, config=config)
    return settings, _warp_pipeline() if "warp" in scopes else "default"


@functools.lru_cache(maxsize=None)
def _install_aligned_test() -> None:
    """Lower :data:`ALIGNED` on the host (LLVM) to ``address % bytes == 0``, once per compiling
    process.  It stays an opaque call until then: TVM's storage-legalisation passes, which run after
    the arguments are unpacked, fail on a pointer reinterpreted as an integer."""
    def lower(call):
        if call.args[0].value != tir_api.ALIGNED:
            return call
        pointer, size = call.args[1], call.args[2]
        address = tvm.tirx.call_intrin("int64", "tirx.reinterpret", pointer)
        return tvm.tirx.floormod(address, size.astype("int64")) == tvm.tirx.const(0, "int64")

    tvm.tirx.register_intrin_lowering("tirx.call_pure_extern", "llvm", f=lower, level=99)


def export_library(exe, path: str, cc: Sequence[str] | None = None) -> None:
    """``exe`` as a shared library at ``path``, linked by the command ``cc``: a C compiler, alone
    (``["aarch64-linux-gnu-gcc"]``) or with leading arguments (zig's ``[python, "-m", "ziglang", "cc",
    "-target", triple]``); None: TVM's default compiler."""
    if cc is None:
        exe.export_library(path)
    elif len(cc) == 1:
        exe.export_library(path, cc=cc[0])
    else:
        exe.export_library(path, fcompile=functools.partial(_link_shared, list(cc)))


def _link_shared(cc: list[str], output: str, objects: list[str], options: Sequence[str] | None = None) -> None:
    """TVM's ``fcompile`` for a linker command with leading arguments (TVM's own takes one program)."""
    import subprocess

    cmd = [*cc, "-shared", "-fPIC", "-o", output, *(options or []), *objects]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"linking {output} failed:\n{' '.join(cmd)}\n{proc.stdout}{proc.stderr}")


def load_module(path: str):
    return tvm.runtime.load_module(path)


def cpu_device():
    return tvm.cpu()


def time_function(module, name: str, args, number: int = 10, repeat: int = 5) -> list[float]:
    """Per-call seconds of ``module[name](*args)``, one entry per repeat."""
    timer = module.time_evaluator(name, tvm.cpu(), number=number, repeat=repeat)
    return list(timer(*args).results)


def host_tensor(array):
    """A TVM tensor in host memory holding a copy of numpy ``array`` (for what DLPack cannot
    carry, e.g. ml_dtypes' bfloat16)."""
    return tvm.runtime.tensor(array)


def torch_stream(device):
    """Context manager: device kernels called inside run on torch's current stream of ``device`` (a
    torch CUDA device).  That device is made current first: torch's current stream is the current
    device's, which need not be the tensors' (cuda:1 tensors while cuda:0 is current)."""
    import torch
    import tvm_ffi

    return tvm_ffi.use_torch_stream(torch.cuda.device(device))


def device_source(exe, kind: str = "cuda") -> str:
    """The device source of a compiled module's one import of ``kind`` (e.g. the CUDA C++)."""
    found = [m for m in exe.mod.imports if m.kind == kind]
    if len(found) != 1:
        raise ValueError(f"expected one {kind!r} device module, found {[m.kind for m in exe.mod.imports]}")
    return found[0].inspect_source()


def pack_imports_c(module) -> str:
    """C source holding ``module``'s serialized imports (the blob export_library embeds)."""
    from tvm.runtime import _ffi_api

    return _ffi_api.ModulePackImportsToC(module, False, "")


def export_library_with_imports(exe, path: str, write_imports) -> None:
    """export_library, with ``write_imports(module, workspace_dir) -> file`` packing the imports."""
    exe.export_library(path, fpack_imports=lambda mod, _system, _prefix, workdir: write_imports(mod, workdir))


def runs_on_host(kind: str) -> bool:
    """Whether code for TVM target kind ``kind`` runs on the host CPU (no device runtime needed).  Asked
    of the runtime's device table, not of ``tvm.target.Target``: a runtime without TVM's compiler
    library (the GPU machine's) has no target constructor."""
    import tvm

    if kind in HOST_KINDS:
        return True
    table = tvm.runtime.Device._DEVICE_NAME_TO_TYPE
    if kind not in table:
        raise ValueError(f"kind: expected a host kind {HOST_KINDS} or a device of {sorted(table)}, got {kind!r}")
    return table[kind] == table["cpu"]


HOST_KINDS = ("llvm", "c")  # TVM target kinds whose code the host CPU runs


def has_compiler() -> bool:
    """Whether this TVM can build kernels: its compiler library (libtvm_compiler.so) is loaded, whose
    functions include the target constructor.  A runtime-only install (the GPU machine's) loads and
    runs artifacts, nothing more."""
    import tvm  # noqa: F401  (loads TVM's libraries, the compiler's where there is one)
    import tvm_ffi

    return tvm_ffi.get_global_func("target.Target", allow_missing=True) is not None


def runtime_enabled(kind: str) -> bool:
    import tvm_ffi

    return tvm_ffi.get_global_func(f"ffi.Module.load_from_bytes.{kind}", allow_missing=True) is not None


def _cudart_candidates() -> list[str]:
    """Where libcudart.so.13 may be: pip's nvidia-cuda-runtime package, CUDA_HOME, /usr/local/cuda."""
    import glob
    import os
    import sys

    found = []
    for base in sys.path:
        found += sorted(glob.glob(os.path.join(base, "nvidia", "*", "lib", "libcudart.so.13*")))
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home:
            found += sorted(glob.glob(os.path.join(home, "lib*", "libcudart.so.13*")))
    return found


def load_device_runtime(kind: str) -> None:
    """Make TVM's runtime for ``kind`` ("cuda") available, or raise OSError saying what is missing.

    The wheel ships the CUDA runtime as a separate library (lib/libtvm_runtime_cuda.so)
    that needs libcudart.so.13 and the driver's libcuda.so.1; TVM loads it at import
    only when its compiler library is present, and only if those load.
    """
    import ctypes
    from pathlib import Path

    if runtime_enabled(kind):
        return
    if kind != "cuda":
        raise OSError(f"no TVM runtime for device kind {kind!r} in this process")
    from tvm.base import _LOADED_LIBS

    lib = Path(_LOADED_LIBS["tvm_runtime"]._name).resolve().parent / "libtvm_runtime_cuda.so"
    if not lib.exists():
        raise OSError(f"TVM's CUDA runtime {lib} is not installed (apache-tvm wheel without CUDA support?)")
    errors = []
    for attempt in [None] + _cudart_candidates():
        try:
            if attempt is not None:
                ctypes.CDLL(attempt, mode=ctypes.RTLD_GLOBAL)
            ctypes.CDLL(str(lib), mode=ctypes.RTLD_LOCAL)
            break
        except OSError as e:
            errors.append(str(e))
    else:
        detail = "; ".join(dict.fromkeys(errors))
        raise OSError(
            f"TVM's CUDA runtime ({lib.name}) could not be loaded: {detail}. It needs libcudart.so.13 "
            "(pip install nvidia-cuda-runtime, or a CUDA 13 toolkit's lib64 on LD_LIBRARY_PATH) and the "
            "NVIDIA driver's libcuda.so.1 (a GPU machine with the driver installed)")
    if not runtime_enabled(kind):
        raise OSError(f"{lib.name} loaded but registered no loader for {kind!r} modules")


DYNAMIC_SHARED = "tirx.use_dyn_shared_memory"  # the launch parameter TVM passes a kernel's shared.dyn bytes in


def host_side(funcs: Mapping[str, object], tgt) -> tuple[dict[str, list[str]], dict[str, object]]:
    """What the host code of ``funcs`` does besides launching, from one lowering of every variant
    (TVM's split of host and device): (stores, dynamic).

    ``stores``: {symbol: buffers the host side writes}.  For a device target every data write belongs
    in a kernel; a host-side store (e.g. the padding fill TVM adds for a padded layout) would write
    device memory from the CPU.

    ``dynamic``: {kernel: the dynamic shared memory its launches ask for} of every kernel launched with
    some: the launch's last argument (TVM's CUDA runtime sets the kernel's opt-in from it past 48 KiB),
    an int where it is a constant, else the expression.
    """
    import tvm_ffi
    from tvm.tirx.build import split_host_device_mods

    settings, name = _lowering(funcs.values(), tgt)
    pipeline, finalize_host, _ = (tvm.tirx.get_default_tir_pipeline(tgt) if name == "default"
                                  else tvm.tirx.compilation_pipeline.get_tir_pipeline(name))
    mod = tvm.tirx.transform.BindTarget(tgt.with_host(tgt.host))(tvm.IRModule(dict(funcs)))
    with settings:
        host, _ = split_host_device_mods(pipeline(mod))
    dynamic = {}

    def launch(call):  # before the host passes, which make launches packed calls
        attrs = getattr(call, "attrs", None)
        if call.op.name == "tirx.call_ffi_kernel" and DYNAMIC_SHARED in list(getattr(attrs, "launch_params", ())):
            size = call.args[-1]
            dynamic[str(call.args[0].value)] = int(size.value) if isinstance(size, tvm.tirx.IntImm) else size

    for func in host.functions.values():
        tvm_ffi.structural_walk(func, (tvm.ir.expr.Call, launch))
    stores = {}
    for gv, func in finalize_host()(host).functions.items():
        written = tir_rewrite.stored_buffers(func)
        if written:
            stores[gv.name_hint] = sorted(set(written))
    return stores, dynamic
