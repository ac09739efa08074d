"""Library exporters: how a compiled TVM module becomes a target's loadable file.

One function per library kind (``TargetInfo.artifact``): it writes the
library at ``lib`` (a temporary name; lowering.build renames it into place)
and returns what the manifest entry records beyond the common fields.
Targets that ship sources instead of a library (the DSP C, the Ascend
packages) have no exporter; lowering.packagers writes them.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

from . import cuda, tvm_api, tvm_workarounds


def shared_library(exe, info, lib: Path, workdir: Path, funcs, tgt) -> dict:
    """A shared library (.so) holding every variant's entry symbol, linked by the target's linker
    for the triple it was built for (a cross compiler for another architecture)."""
    tvm_api.export_library(exe, str(lib), cc=info.linker(info.tvm_target()) if info.linker else None)
    return {}


def cuda_fatbin(exe, info, lib: Path, workdir: Path, funcs, tgt) -> dict:
    """The host library with nvcc's fatbin (a cubin per architecture + the newest PTX) where
    TVM's blob had the CUDA source; the source is kept beside it."""
    bad, dynamic = tvm_api.host_side(funcs, tgt)
    if bad:
        raise ValueError(f"{info.name}: the host code of {sorted(bad)} writes buffers {bad} "
                         "(device memory from the CPU); the schedule must put every store in a kernel")
    source = tvm_api.device_source(exe, "cuda")
    archs = list(info.archs())
    fatbin, resources = cuda.compile_fatbin(source, archs, workdir)
    # the dynamic shared memory each kernel's launches ask for where it is a constant (the tensor-core
    # GEMM's pipeline stages): checked with ptxas' static bytes against every arch's opt-in maximum and
    # recorded; one sized by the call's shape (LayerNorm backward's partials) is the launch's to check
    dynamic = {k: v for k, v in dynamic.items() if isinstance(v, int)}
    kernels = cuda.device_kernels(source, resources, archs, dynamic=dynamic)

    def write_imports(module, tmp):
        c_source = tvm_api.pack_imports_c(module)
        blob = tvm_workarounds.replace_device_code(tvm_workarounds.c_blob(c_source), source, fatbin)
        path = Path(tmp) / "devc.c"
        path.write_text(tvm_workarounds.with_c_blob(c_source, blob))
        return str(path)

    tvm_api.export_library_with_imports(exe, str(lib), write_imports)
    cu = lib.with_suffix(".cu")
    cu.write_text(cuda.with_grid_sync(source))  # what nvcc compiled
    return {"archs": archs, "nvcc": cuda.nvcc_version(), "fatbin_sha256": hashlib.sha256(fatbin).hexdigest(),
            "fatbin_bytes": len(fatbin), "source": cu.name, "device_kernels": kernels}


EXPORTERS = {"shared_library": shared_library, "cuda_fatbin": cuda_fatbin}
