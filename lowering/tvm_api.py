"""The thin layer over TVM's API (it churns between releases: tir -> tirx, s_tir, dict targets).

Building PrimFuncs from TE, tagging and scheduling them, compiling, exporting
and loading modules, device sources, runtimes and streams, host tensors, and
TVM's generic GPU rules go through these helpers.  Schedule rules call the methods
of the ``s_tir.Schedule`` they are given; they do not import TVM.

Modules that import TVM themselves, because TVM's objects are what they
work on (tests/test_imports.py keeps this list true):

- te_defs/*.py: an op is defined in TVM's tensor expressions (``tvm.te``).
- lowering/intrinsics.py: target lowering rules are TIR expressions
  registered with TVM (``register_intrin_lowering``).
- lowering/mma_tf32.py: the TF32 tensor intrinsics are TIR functions written
  in TVMScript and registered with TVM (``TensorIntrin.register``).
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
- lowering/tuning_kernels.py: fixes a kernel at the tuned shape and builds and times the
  candidates meta-schedule measures.
- lowering/tir_rewrite.py: rewrites TIR as IR for these helpers (variables and buffers
  replaced, stores and scopes found, :func:`choose`'s schedules joined).
"""
from __future__ import annotations

import contextlib
import functools
from typing import Iterable, Mapping, Sequence

import tvm
from tvm import s_tir, te, tirx

from . import tir_rewrite

OP_ATTR = "fusedgrad.op"
FLAGS_ATTR = "fusedgrad.schedule_flags"


def tvm_version() -> str:
    return tvm.__version__


def tvm_ffi_version() -> str:
    import tvm_ffi

    return getattr(tvm_ffi, "__version__", "unknown")


def prim_func(args, symbol: str, op_name: str, strided: Iterable[str] = (), schedule_flags: Iterable[str] = ()):
    """TE arguments (or a definition already written as a PrimFunc) -> PrimFunc named ``symbol``,
    tagged with the op name and the variant's schedule flags that are set (``OpDef.split_variant``;
    no tag when none is).  A PrimFunc declares its own buffer layouts.

    Buffers named in ``strided`` get free strides with a unit innermost stride,
    so views with any row stride are accepted without a copy.  No buffer is
    assumed aligned beyond its element size (TVM's default of 64 bytes would
    let LLVM emit aligned vector loads that fault on ordinary numpy views).
    """
    if isinstance(args, tirx.PrimFunc):
        func = args.with_attr("global_symbol", symbol).with_attr(OP_ATTR, op_name)
    else:
        func = te.create_prim_func(list(args))
        func = func.with_attr("global_symbol", symbol).with_attr(OP_ATTR, op_name)
        tensors = {t.op.name: t.dtype for t in args if isinstance(t, te.Tensor)}
        func = _with_layout(func, tensors, set(strided))
    flags = sorted(schedule_flags)
    return func.with_attr(FLAGS_ATTR, flags) if flags else func


def _with_layout(func, tensors: Mapping[str, str], strided: set[str]):
    """``func`` with each parameter buffer named in ``tensors`` (name -> dtype) redeclared aligned to
    its element size, and those in ``strided`` of rank 2 or more with free strides ``<name>_s<k>``
    and a unit innermost one (create_prim_func declares compact, 64-byte aligned buffers)."""
    found = {p.name for p in func.params if isinstance(p.ty, tirx.BufferType)}
    missing = sorted(set(tensors) - found)
    if missing:
        raise ValueError(f"buffer {missing[0]!r} not found in function parameters")
    replaced = {}
    for param in func.params:
        if param.name not in tensors or not isinstance(param.ty, tirx.BufferType):
            continue
        rank = len(param.shape)
        strides = None
        if param.name in strided and rank >= 2:  # a 1-D view with unit stride is already compact
            strides = [tirx.Var(f"{param.name}_s{k}", "int32") for k in range(rank - 1)] + [1]
        replaced[param] = tirx.decl_buffer(
            param.shape, param.dtype, param.name, strides=strides, elem_offset=param.elem_offset,
            data_alignment=tvm.DataType(tensors[param.name]).bits // 8,
            offset_factor=param.offset_factor, layout=param.layout)
    return tir_rewrite.replace_vars(func, replaced)


def op_name(func) -> str | None:
    value = func.attrs.get(OP_ATTR) if func.attrs is not None else None
    return str(value) if value is not None else None


def schedule_flags(func) -> tuple[str, ...]:
    """The schedule flags ``func`` was tagged with by :func:`prim_func`."""
    value = func.attrs.get(FLAGS_ATTR) if func.attrs is not None else None
    return tuple(str(v) for v in value) if value is not None else ()


def buffer_layouts(func) -> dict[str, tuple[int, tuple[str, ...]]]:
    """{parameter buffer: (bits per element, the names of its variable strides)} of ``func``."""
    return {p.name: (tvm.DataType(p.dtype).bits,
                     tuple(s.name for s in p.strides if not isinstance(s, tvm.tirx.IntImm)))
            for p in func.params if hasattr(p, "strides")}


def schedule(func):
    return s_tir.Schedule(func)


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
    if any(tir_rewrite.calls_extern(f, ALIGNED) for f in funcs):
        _install_aligned_test()
    scopes = set() if tgt.kind.name != "cuda" else {
        scope for f in funcs for scope in tir_rewrite.buffer_scopes(f)} & {"shared.dyn", "warp"}
    if not scopes:
        return contextlib.nullcontext(), "default"
    # TVM's TIR common-subexpression pass misplaces a definition in a kernel whose shared memory is
    # sized at run time ("variable cse_v.. has been used before definition"), and hides a warp
    # buffer's index from LowerWarpMemory ("require positive constant coefficient on warp index");
    # nvcc does its own CSE.  Only there: other kernels' registers depend on TVM's CSE
    # (matmul_packed spills without it)
    settings = tvm.transform.PassContext(config={"tirx.disable_cse_tir": True})
    return settings, _warp_pipeline() if "warp" in scopes else "default"


ALIGNED = "fusedgrad_aligned"  # the host test that a buffer's address is a multiple of a byte count


def choose(alternatives):
    """One PrimFunc from schedules of the same PrimFunc, ``[(func, conditions), ..., (last, None)]``:
    the first ``func`` whose conditions hold runs, the last where none does.  Conditions (a dict,
    each part optional): ``multiple_of`` {dimension or stride: k}, each a multiple of k;
    ``at_most`` {dimension: k}, each at most k; ``aligned`` {buffer: bytes}, each buffer's address a
    multiple of that many bytes.  The tests run on the host, from the arguments, at every call;
    each schedule keeps its own kernels and intermediate buffers."""
    first = alternatives[0][0]
    # the shape and stride variables (M, D, x_s0): free in the body or the buffers, bound by the arguments
    sizes = {v.name: v for v in tvm.tirx.analysis.undefined_vars(first.body, list(first.params))}
    buffers = {p.name: p for p in first.params if hasattr(p, "strides")}
    sizes.update({e.name: e for b in buffers.values() for e in b.strides if not isinstance(e, tvm.tirx.IntImm)})
    tests = []
    for _, conditions in alternatives[:-1]:
        multiple_of, at_most, aligned = (conditions.get(k, {}) for k in ("multiple_of", "at_most", "aligned"))
        unknown = sorted((set(multiple_of) | set(at_most)) - set(sizes))
        if unknown:
            raise ValueError(f"branch: no dimension or stride named {unknown} (known: {sorted(sizes)})")
        unknown = sorted(set(aligned) - set(buffers))
        if unknown:
            raise ValueError(f"branch: no buffer named {unknown} (buffers: {sorted(buffers)})")
        conds = [tvm.tirx.floormod(sizes[n], k) == 0 for n, k in multiple_of.items()]
        conds += [sizes[n] <= k for n, k in at_most.items()]
        conds += [tvm.tirx.call_pure_extern("bool", ALIGNED, buffers[n].data, k) for n, k in aligned.items()]
        tests.append(tvm.tirx.all(*conds))
    # each schedule as a host loop that runs once or not at all: TVM places no barrier under an `if`,
    # even a host one around whole kernels
    names = ["then"] + [f"then_{i}" for i in range(1, len(tests))] + ["otherwise"]
    return tir_rewrite.joined(alternatives, tests, names, buffers)


@functools.lru_cache(maxsize=None)
def _install_aligned_test() -> None:
    """Lower :data:`ALIGNED` on the host (LLVM) to ``address % bytes == 0``, once per compiling
    process.  It stays an opaque call until then: TVM's storage-legalisation passes, which run after
    the arguments are unpacked, fail on a pointer reinterpreted as an integer."""
    def lower(call):
        if call.args[0].value != ALIGNED:
            return call
        pointer, size = call.args[1], call.args[2]
        address = tvm.tirx.call_intrin("int64", "tirx.reinterpret", pointer)
        return tvm.tirx.floormod(address, size.astype("int64")) == tvm.tirx.const(0, "int64")

    tvm.tirx.register_intrin_lowering("tirx.call_pure_extern", "llvm", f=lower, level=99)


def script(func) -> str:
    return func.script()


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


def gpu_generic_rules() -> list:
    """TVM's dlight GPU rules in the order to try them: matmul, GEMV, reductions, then anything."""
    from tvm.s_tir import dlight as dl

    return [dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(), dl.gpu.GeneralReduction(), dl.gpu.Fallback()]


_WMMA_SHORT = {"float16": "f16", "bfloat16": "bf16"}


@functools.lru_cache(maxsize=None)
def wmma_intrinsics(dtype: str) -> dict[str, str]:
    """Names of the WMMA m16n16k16 tensor intrinsics for ``dtype`` (float16 / bfloat16) inputs in
    shared memory and float32 accumulators: load_a, load_b (row-major), compute, fill, store (to
    shared).  TVM registers them for float16 (and int8) only; the bfloat16 ones are registered here,
    once, from TVM's own WMMA intrinsic builders."""
    from tvm.s_tir import TensorIntrin
    from tvm.s_tir.tensor_intrin import cuda as wmma

    if dtype not in _WMMA_SHORT:
        raise ValueError(f"dtype: expected float16 or bfloat16 for WMMA, got {dtype}")
    short = _WMMA_SHORT[dtype]
    names = {"load_a": f"wmma_load_16x16x16_{short}_a_shared", "load_b": f"wmma_load_16x16x16_{short}_b_shared",
             "compute": f"wmma_sync_16x16x16_{short}{short}f32", "fill": wmma.WMMA_FILL_16x16x16_F32_INTRIN,
             "store": wmma.WMMA_STORE_16x16x16_F32_SHARED_INTRIN}
    if dtype == "bfloat16":
        made = {"load_a": wmma.get_wmma_load_intrin(16, 16, 16, dtype, "shared", False, False),
                "load_b": wmma.get_wmma_load_intrin(16, 16, 16, dtype, "shared", True, False),
                "compute": wmma.get_wmma_sync_intrin(16, 16, 16, dtype, "float32", False)}
        for key, (desc, impl) in made.items():
            names[key] = "fusedgrad_" + names[key]
            TensorIntrin.register(names[key], desc, impl, override=True)
    return names


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
    """Whether code for TVM target kind ``kind`` runs on the host CPU (no device runtime needed)."""
    import tvm

    return tvm.target.Target({"kind": kind}).get_target_device_type() == tvm.runtime.Device._DEVICE_NAME_TO_TYPE["cpu"]


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


def host_buffer_stores(funcs: Mapping[str, object], tgt) -> dict[str, list[str]]:
    """{symbol: buffers the host side writes} after TVM's lowering splits host and device.

    For a device target every data write belongs in a kernel; a host-side store
    (e.g. the padding fill TVM adds for a padded layout) would write device
    memory from the CPU.
    """
    from tvm.tirx.build import split_host_device_mods

    settings, name = _lowering(funcs.values(), tgt)
    pipeline, finalize_host, _ = (tvm.tirx.get_default_tir_pipeline(tgt) if name == "default"
                                  else tvm.tirx.compilation_pipeline.get_tir_pipeline(name))
    mod = tvm.tirx.transform.BindTarget(tgt.with_host(tgt.host))(tvm.IRModule(dict(funcs)))
    with settings:
        host, _ = split_host_device_mods(pipeline(mod))  # one lowering for every variant
    found = {}
    for gv, func in finalize_host()(host).functions.items():
        stores = tir_rewrite.stored_buffers(func)
        if stores:
            found[gv.name_hint] = sorted(set(stores))
    return found
