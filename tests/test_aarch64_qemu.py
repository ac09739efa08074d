"""aarch64 CPU libraries (`fusedgrad generate --triple aarch64-linux-gnu --cpu neoverse-n1`) checked for
numerics under qemu-aarch64 on this machine, which cannot load them.

tests/aarch64_harness.c, cross-compiled, dlopens the library, fills the context slots TVM's runtime
would (a serial parallel launch, malloc workspaces, an error setter) and calls one manifest kernel
with DLTensors read from files.  :func:`run_kernel` lays the arguments out as the manifest says and as
``fusedgrad.api.run`` passes them (inputs may have a row stride wider than the row: ``pad``), runs the
harness under ``qemu-aarch64 -L /usr/aarch64-linux-gnu`` and reads the outputs back; the tests compare
them with the float64 reference within the host tests' tolerances (their own check functions).

.ci/run installs gcc-aarch64-linux-gnu and qemu-user and sets FUSEDGRAD_CROSS_REQUIRED=1: then a
missing tool is a failure; elsewhere these tests skip and name the package.
"""
from __future__ import annotations

import functools
import math
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import build_cache
from conftest import assert_close, bits, reduction_scale
from fusedgrad import te_defs
from fusedgrad.api import _np_view
from fusedgrad.lowering import build as build_mod
from fusedgrad.targets import llvm
from test_layer_norm_backward import check_against as ln_check
from test_matmul import packed_check

TRIPLE, CPU = "aarch64-linux-gnu", "neoverse-n1"
CC, QEMU = f"{TRIPLE}-gcc", "qemu-aarch64"
SYSROOT = Path("/usr") / TRIPLE  # Debian's multiarch root of the cross toolchain (the target's libc)
HARNESS = Path(__file__).with_name("aarch64_harness.c")
DTYPE = "float32"
DLPACK = {"float32": (2, 32), "float16": (2, 16), "bfloat16": (4, 16)}  # (DLDataTypeCode, bits)
NP = {"float32": np.float32}
OPS = ("column_sum", "layer_norm_backward", "matmul_packed")


@functools.lru_cache(maxsize=None)
def missing() -> str | None:
    """Why the aarch64 kernels cannot be run here (a tool or the target's libc is missing), or None."""
    tools = [t for t in (CC, QEMU) if shutil.which(t) is None]
    if tools:
        return (f"{', '.join(tools)} not installed (Debian: apt-get install gcc-{TRIPLE} qemu-user; "
                ".ci/run installs them)")
    if not (SYSROOT / "lib" / "ld-linux-aarch64.so.1").exists():
        return f"{SYSROOT}/lib/ld-linux-aarch64.so.1 missing (Debian: apt-get install libc6-arm64-cross)"
    return None


@pytest.fixture(scope="module")
def harness(tmp_path_factory) -> Path:
    why = missing()
    if why:
        if os.environ.get("FUSEDGRAD_CROSS_REQUIRED"):
            pytest.fail(why)
        pytest.skip(why)
    import tvm_ffi

    include = Path(tvm_ffi.__file__).parent / "include"  # tvm/ffi/c_api.h and dlpack/dlpack.h
    tvm_include = Path(__import__("tvm").__file__).parent / "include"  # tvm/runtime/c_backend_api.h
    exe = tmp_path_factory.mktemp("qemu") / "aarch64_harness"
    cmd = [CC, "-std=gnu11", "-O2", "-Wall", "-Wextra", "-Werror", f"-I{include}", f"-I{tvm_include}",
           "-rdynamic", "-o", str(exe), str(HARNESS), "-ldl"]
    proc = build_cache.run(cmd, outputs=[exe], inputs=[include, tvm_include])  # an unchanged build: a copy
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stderr}"
    return exe


@pytest.fixture(scope="module")
def folder(harness, tmp_path_factory) -> dict:
    """OPS in float32 built for neoverse-n1 into one folder, as `fusedgrad generate --triple` does:
    {op: manifest entry}, with "folder" the folder."""
    out = tmp_path_factory.mktemp("aarch64")
    entries = {"folder": out}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(llvm.MCPU_ENV, CPU)
        mp.setenv(llvm.MTRIPLE_ENV, TRIPLE)
        build_mod.cache_key.cache_clear()  # the key holds the TVM target, which the variables change
        try:
            for op in OPS:
                entries[op] = build_cache.artifact(op, "llvm", DTYPE, out)  # an unchanged build: a copy
        finally:
            build_mod.cache_key.cache_clear()
    return entries


def kernel_of(entry: dict, variant: dict | None = None) -> dict:
    """The manifest kernel of ``entry`` for ``variant`` (schedule flags left out are False)."""
    op = te_defs.get(entry["op"])
    want = op.full_variant(variant or {})
    return next(k for k in entry["kernels"] if k["variant"] == want)


def run_kernel(harness: Path, folder: dict, op: str, tensors: dict, scalars: dict | None = None,
               variant: dict | None = None, tmp: Path = None, pad: int = 0, tasks: int = 1) -> dict:
    """Call ``op``'s aarch64 kernel for ``variant`` under qemu on ``tensors`` (numpy, public layout,
    the entry's dtype) and ``scalars`` (missing ones: the manifest's default); returns its outputs
    by name in the public layout.  Inputs of rank >= 2 are passed as views of arrays ``pad`` elements
    wider than their rows (NaN there: a kernel reading past a row would show it), outputs compact.
    ``tasks``: how many tasks the harness runs a parallel loop in (one after another).
    RuntimeError with the harness's output when it fails."""
    entry = folder[op]
    kernel = kernel_of(entry, variant)
    dims: dict = {}
    for a in kernel["args"]:
        if a["role"] == "input":
            te_defs.bind_dims(dims, tuple(a["shape"]), tensors[a["name"]].shape, a["name"])
    lines, outputs = [], {}
    for a in kernel["args"]:
        name, role = a["name"], a["role"]
        if role == "scalar":
            lines.append(f"float {float((scalars or {}).get(name, a['default']))!r}")
            continue
        dtype = np.dtype(NP[a["dtype"]])
        shape = [te_defs.dim_size(dims, d) for d in a["shape"]]
        kshape = [te_defs.dim_size(dims, d) for d in a["kernel_shape"]]
        path = tmp / f"{name}.bin"
        if role == "input":
            value = np.asarray(tensors[name], dtype=dtype)
            assert list(value.shape) == shape, f"{name}: shape {value.shape}, expected {shape}"
            wide = pad if value.ndim >= 2 else 0
            base = np.full(shape[:-1] + [shape[-1] + wide] if shape else [], np.nan, dtype)
            view = base[..., :shape[-1]] if shape else base
            view[...] = value
            if kshape != shape:
                view = _np_view(view, kshape)
            strides = [s // dtype.itemsize for s in view.strides]
            extent = 1 + sum((n - 1) * s for n, s in zip(kshape, strides)) if all(kshape) else 0
            base.reshape(-1)[:extent].tofile(path)
        else:
            strides = [math.prod(kshape[i + 1:]) for i in range(len(kshape))]
            outputs[name] = (path, dtype, shape)
        code, nbits = DLPACK[a["dtype"]]
        lines.append(f"tensor {code} {nbits} {len(kshape)} {' '.join(map(str, kshape + strides))} "
                     f"{'in' if role == 'input' else 'out'} {path}")
    (tmp / "args.txt").write_text("\n".join(lines) + "\n")
    library = folder["folder"] / entry["library"]
    cmd = [QEMU, "-L", str(SYSROOT), str(harness), str(library), kernel["symbol"], str(tmp / "args.txt"),
           str(tasks)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout}{proc.stderr}")
    return {name: np.fromfile(path, dtype, count=math.prod(shape)).reshape(shape)
            for name, (path, dtype, shape) in outputs.items()}


def _sample(op: str, dims: dict, seed: int = 0) -> dict:
    """The op's sample inputs for ``dims``, rounded to float32."""
    return {k: v.astype(np.float32) for k, v in te_defs.get(op).sample(dims, np.random.default_rng(seed)).items()}


def _f64(arrays: dict) -> dict:
    return {k: v.astype(np.float64) for k, v in arrays.items()}


def column_sum_check(out: dict, ins: dict) -> None:
    a = ins["a"].astype(np.float64)
    assert_close(out["s"], te_defs.get("column_sum").reference(a)["s"], 1e-5, 1e-5, scale=reduction_scale(a),
                 name="s")


def ln_check_outputs(out: dict, ins: dict, eps: float = 1e-5) -> None:
    ref = te_defs.get("layer_norm_backward").reference(**_f64(ins), eps=eps)
    ln_check((out["dx"], out["dgamma"], out["dbeta"]), ref, {**_f64(ins), "eps": eps}, (DTYPE, 1e-5, 1e-5))


@pytest.mark.parametrize("K,N", [(1, 1), (37, 13), (65, 300)], ids=["K=1 N=1", "odd 37x13", "65x300"])
@pytest.mark.parametrize("pad", [0, 3], ids=["compact", "row stride +3"])
def test_column_sum(harness, folder, tmp_path, K, N, pad):
    ins = _sample("column_sum", {"K": K, "N": N})
    column_sum_check(run_kernel(harness, folder, "column_sum", ins, tmp=tmp_path, pad=pad), ins)


@pytest.mark.parametrize("M,D", [(1, 1), (3, 7), (13, 37), (33, 100)],
                         ids=["M=1 D=1", "D=7", "prime M=13 D=37", "M=33 D=100"])
@pytest.mark.parametrize("pad", [0, 5], ids=["compact", "row stride +5"])
def test_layer_norm_backward(harness, folder, tmp_path, M, D, pad):
    ins = _sample("layer_norm_backward", {"M": M, "D": D})
    out = run_kernel(harness, folder, "layer_norm_backward", ins, {"eps": 1e-5}, tmp=tmp_path, pad=pad)
    ln_check_outputs(out, ins)


@pytest.mark.parametrize("few_rows", [False, True], ids=["main", "few_rows"])
@pytest.mark.parametrize("has_bias,has_addend", [(False, False), (True, True)], ids=["plain", "bias+addend"])
def test_matmul_packed(harness, folder, tmp_path, few_rows, has_bias, has_addend):
    variant = {"has_bias": has_bias, "has_addend": has_addend}
    ins = _sample("matmul_packed", {"M": 13, "Nb": 2, "K": 19})
    ins = {k: v for k, v in ins.items() if k in ("a", "bp") or variant.get(f"has_{k}")}
    out = run_kernel(harness, folder, "matmul_packed", ins, variant=dict(variant, few_rows=few_rows),
                     tmp=tmp_path, pad=2)
    packed_check(f"aarch64 {'few_rows' if few_rows else 'main'}", ins, variant, out["c"])


@pytest.mark.parametrize("op,dims", [("column_sum", {"K": 300, "N": 70}),
                                     ("layer_norm_backward", {"M": 37, "D": 53})])
def test_same_bits_for_any_task_count(harness, folder, tmp_path, op, dims):
    """A parallel loop split over 1, 2 or 3 tasks gives the same bits (the kernels' sums run in a
    fixed order whatever the thread count)."""
    ins = _sample(op, dims)
    runs = []
    for tasks in (1, 2, 3):
        (tmp_path / str(tasks)).mkdir()
        runs.append(run_kernel(harness, folder, op, ins, tmp=tmp_path / str(tasks), tasks=tasks))
    for other in runs[1:]:
        for name in runs[0]:
            np.testing.assert_array_equal(bits(other[name]), bits(runs[0][name]), err_msg=name)


def test_a_wrong_input_or_scalar_fails_the_check(harness, folder, tmp_path):
    """The check can fail: one input element changed, or a wrong eps, and the comparison with the
    reference of the true inputs is out of tolerance."""
    ins = _sample("column_sum", {"K": 37, "N": 13})
    bad = dict(ins, a=ins["a"].copy())
    bad["a"][5, 7] += 0.5
    with pytest.raises(AssertionError, match="out of tolerance"):
        column_sum_check(run_kernel(harness, folder, "column_sum", bad, tmp=tmp_path), ins)
    ins = _sample("layer_norm_backward", {"M": 13, "D": 37})
    out = run_kernel(harness, folder, "layer_norm_backward", ins, {"eps": 0.5}, tmp=tmp_path)
    with pytest.raises(AssertionError, match="out of tolerance"):
        ln_check_outputs(out, ins, eps=1e-5)


def test_a_kernel_error_is_reported(harness, folder, tmp_path):
    """A shape the kernel rejects comes back as its own error message, through the harness's error
    setter, and no output is read."""
    ins = _sample("column_sum", {"K": 37, "N": 13})
    kernel = kernel_of(folder["column_sum"])
    wrong = dict(folder, column_sum=dict(folder["column_sum"], kernels=[
        dict(kernel, args=[a if a["role"] != "output" else dict(a, shape=["K"], kernel_shape=["K"])
                           for a in kernel["args"]])]))
    with pytest.raises(RuntimeError, match=r"Mismatched s.shape\[0\]"):
        run_kernel(harness, wrong, "column_sum", ins, tmp=tmp_path)
