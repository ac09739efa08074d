"""CUDA artifacts on a real GPU: numerics against PyTorch CUDA and speed, one Markdown table.

Two halves, because the GPU machine has no network and no TVM compiler:

  here (any machine with nvcc):
      python benchmarks/gpu_check.py stage .gpu
  builds every op x dtype the CUDA target serves (the LSTM-cell and LayerNorm
  backward) into .gpu/artifacts (fatbins for
  sm_80 and sm_90), and puts next to them what the GPU machine lacks: TVM's
  runtime (the apache-tvm package without its 250 MB compiler library, which
  TVM then runs without) and the apache-tvm-ffi wheel for that machine's
  Python.  The project itself travels as source.

  on the GPU machine (python3 with torch CUDA, numpy, networkx):
      bash .gpu/run.sh OUT_DIR
  installs those into a private folder (no network) and runs
      python3 benchmarks/gpu_check.py check --artifacts .gpu/artifacts --out OUT_DIR/PHASE ...
  in phases (layer kernels, full LSTM, other kernels, schedule sweep; a memcheck phase on request),
  each its own process under a time limit from FG_<PHASE>_S (seconds; 0 skips the phase), so a
  persistent kernel that hangs costs one phase.

The check loads the artifacts with ``fusedgrad.runtime.load`` (TVM's CUDA
runtime, fatbins, nothing compiled at load), then for every op x dtype x
variant compares the kernels with the float64 reference and with PyTorch's
own CUDA kernels (``torch._thnn_fused_lstm_cell_backward``,
``aten.native_layer_norm_backward``), checks that two runs give the same bits, and times each
kernel against its torch counterpart and the device copy bandwidth, in the
same run (CUDA events, medians).  Then the full LSTM on CUDA tensors
(``fusedgrad.torch.LSTM``, every buffer on the device): numerics against
float64 ``torch.nn.LSTM`` autograd on the GPU (layers, directions,
batch_first, PackedSequence, float32/float16/bfloat16), the same bits twice,
and forward + backward time against ``torch.nn.LSTM`` (cuDNN) at
LSTM_TIMED.  It writes gpu_check.md and gpu_check.json.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# timing shapes: large enough that one launch is far past launch overhead
TIMED = {
    "lstm_cell_backward": ({"N": 1024, "H": 1024}, {"N": 8192, "H": 1024}),
    "layer_norm_backward": ({"M": 4096, "D": 1024}, {"M": 8192, "D": 4096}),
    # the full LSTM's kernels: the sizes the earlier H200 run timed (docs/gpu-check-h200.md), and an
    # LSTM step's GEMM (B=64, H=1024: h·W_hhᵀ)
    "lstm_cell_forward": ({"N": 8192, "H": 1024},),
    "lstm_step_backward": ({"N": 8192, "H": 1024},),
    "matmul_packed": ({"M": 4096, "Nb": 128, "K": 1024}, {"M": 64, "Nb": 128, "K": 1024}),
    "column_sum": ({"K": 16384, "N": 4096},),
    "pack_b": ({"K": 4096, "Nb": 128},),
    "pack_bt": ({"K": 4096, "Nb": 128},),
    # the persistent layer kernels (one launch per layer and direction): a batch, and one sequence
    # over many steps (where the per-step launches cost most); the tensor_cores entry beside the
    # CUDA-core one where B >= 16 (_entries): the full LSTM's (50, 32, 256, 256) and (100, 64, 512, 512)
    "lstm_layer_forward": ({"T": 50, "B": 32, "H": 256}, {"T": 200, "B": 1, "H": 256}, {"T": 100, "B": 64, "H": 512}),
    "lstm_layer_backward": ({"T": 50, "B": 32, "H": 256}, {"T": 200, "B": 1, "H": 256},
                            {"T": 100, "B": 64, "H": 512}),
    # the tensor-core GEMM: square, an LSTM step's shape (B=64, 4H=4096, H=1024), and the full LSTM's
    # input GEMMs x·W_ihᵀ (M = T*B, N = 4H, K = I) at (50, 32, 256, 256), (100, 64, 512, 512) and
    # (100, 64, 1024, 1024)
    "matmul": ({"M": 4096, "N": 4096, "K": 4096}, {"M": 64, "N": 4096, "K": 1024}, {"M": 1600, "N": 1024, "K": 256},
               {"M": 6400, "N": 2048, "K": 512}, {"M": 6400, "N": 4096, "K": 1024}),
}
TOL = {"float32": 2e-5, "float16": 2e-2, "bfloat16": 8e-2}
# the layer kernels' tensor_cores entries in float32: TF32 operands, whose rounding of a float32 state and
# of the reference's float64 one can fall on either side of a TF32 boundary (one product a TF32 unit,
# 2^-10 of it, apart; tests/test_cuda_lstm_layer.py's TC_TOL at its few steps), more over the timed shapes'
TC_TOL = 1e-4
# ops whose CUDA kernels load and store whole vectors where the shapes, strides and addresses allow
# (tir_api.choose) and single elements elsewhere, with the same summation order
VECTOR_OPS = ("lstm_cell_backward", "layer_norm_backward")
# full LSTM timings (T, B, I, H, layers, directions): docs/BENCHMARKS.md's three, a larger one, and
# one sequence over 200 steps (the CUDA layer recurrence's persistent kernels against cuDNN there)
LSTM_TIMED = ((50, 32, 256, 256, 1, 1), (200, 1, 256, 256, 1, 1), (50, 32, 256, 256, 2, 2),
              (100, 64, 512, 512, 1, 1), (100, 64, 1024, 1024, 1, 1))
# full LSTM numerics: (layers, bidirectional, batch_first, lengths or None, T, B, I, H)
LSTM_CASES = ((1, False, False, None, 7, 5, 12, 16), (2, True, True, None, 6, 33, 20, 40),
              (2, True, False, (6, 4, 4, 1), 6, 4, 9, 37))
# float64 torch vs ours, relative to max|ref| + 1: 7-40 times what the GPU's path gives on a CPU (torch
# arrays, every kernel the CUDA schedule's loop nest, 16-bit GEMMs on the emulated tensor-core matmul):
# 1.5e-7..4.7e-7, 4.8e-4..6.5e-4, 4.1e-3..4.2e-3 over LSTM_CASES
LSTM_TOL = {"float32": 2e-5, "float16": 5e-3, "bfloat16": 4e-2}


# ----------------------------------------------------------------------------- stage (here)

def stage(dest: Path, archs: str) -> int:
    dest = dest.resolve()
    arts = dest / "artifacts"
    if arts.exists():
        shutil.rmtree(arts)
    env = dict(os.environ, FUSEDGRAD_CUDA_ARCH=archs)
    subprocess.run([sys.executable, "-m", "fusedgrad.cli", "generate", "--target", "cuda", "--out", str(arts)],
                   check=True, env=env)
    import tvm

    pkg = Path(tvm.__file__).parent
    with tarfile.open(dest / "tvm_runtime.tgz", "w:gz") as tar:
        tar.add(pkg, arcname="tvm", filter=lambda ti: None if (
            ti.name.endswith("libtvm_compiler.so") or "__pycache__" in ti.name) else ti)
    for old in dest.glob("apache_tvm_ffi-*.whl"):
        old.unlink()
    import tvm_ffi

    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                    "--python-version", "3.12", "--implementation", "cp",
                    "--platform", "manylinux_2_28_x86_64", "--platform", "manylinux_2_24_x86_64",
                    "--platform", "manylinux_2_17_x86_64", "-d", str(dest),
                    f"apache-tvm-ffi=={tvm_ffi.__version__}"], check=True)
    _stage_sweep(dest / "sweep", archs)
    (dest / "run.sh").write_text(RUN_SH)
    size = sum(p.stat().st_size for p in dest.rglob("*") if p.is_file())
    print(f"staged {dest} ({size / 2**20:.1f} MiB): artifacts, tvm_runtime.tgz, tvm-ffi wheel, run.sh")
    tracked = _tracked_bytes()
    if size + tracked > CARRY_BYTES:
        print(f"stage: {dest} ({size / 2**20:.1f} MiB) and the repository's tracked files ({tracked / 2**20:.1f} MiB) "
              f"are more than the {CARRY_BYTES / 2**20:.0f} MiB the GPU machine takes: stage less (SWEEP, "
              f"SWEEP_DTYPES)", file=sys.stderr)
        return 1
    return 0


def _tracked_bytes() -> int:
    """Bytes of the repository's tracked files (what travels beside the staged folder); 0 outside git."""
    try:
        names = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return 0
    return sum((ROOT / n).stat().st_size for n in names.decode().split("\0") if n and (ROOT / n).is_file())


# what the GPU machine takes of the working tree and its carried folders (.gpu among them), together
CARRY_BYTES = 64 * 2**20
# the sweep's dtypes where not float32 and float16: the layer kernels' knobs are timed in float32 (each
# layer build holds every entry point, three a variant: float16 too took the staging past CARRY_BYTES)
SWEEP_DTYPES = {"lstm_layer_forward": ("float32",), "lstm_layer_backward": ("float32",)}
# schedule parameters tried side by side on the GPU (the shipped values are the modules' own)
SWEEP: dict = {
    # (op, schedule module): [{CONSTANT: value, ...}, ...]; the sweep that picked the shipped
    # LayerNorm values was [{"SPLIT": k, "COLUMN_ROWS": c} for k in (4, 8, 16) for c in (32, 64)];
    # ROW_BLOCK 0 is the per-row schedule alone (the one measured before the row-block schedule);
    # fewer rows per block: more blocks in flight (M=4096 at 16 rows is 256 blocks of 128 threads,
    # about 2 per SM of an H200), more partial traffic (1/3 more at 4 rows in float32)
    ("layer_norm_backward", "fusedgrad.schedules.cuda.layer_norm_backward"): [
        {"ROW_BLOCK": 0}, {"ROW_BLOCK": 4}, {"ROW_BLOCK": 8}, {"ROW_BLOCK": 32}, {"SPLIT": 16}],
    # the LSTM's GEMM: taller register tiles, shallower chunks, wider blocks (shipped: 16x16 threads,
    # 4x4 outputs each, KC 32)
    ("matmul_packed", "fusedgrad.schedules.cuda.lstm_kernels"): [
        {"MI": 8}, {"KC": 16}, {"TX": 32, "TY": 8}],
    # the tensor-core GEMM around what the arch facts derive (128 x 128 tiles, KC 32, as many cp.async
    # stages as the opt-in shared memory holds, the warps from the register file): fewer stages,
    # smaller and wider tiles, fewer warps
    ("matmul", "fusedgrad.schedules.cuda.matmul"): [
        {"STAGES": 2}, {"STAGES": 3}, {"BM": 64, "BN": 64}, {"BM": 64, "BN": 256}, {"WARPS": 4}],
    # the persistent layer kernels around what ships (4 units a block, derived from the warp; 4 warps;
    # 32 loads a group): the 2026-12-04 H200 timings that chose it are docs/gpu-check-h200-2026-12-04.md
    ("lstm_layer_forward", "fusedgrad.schedules.cuda.lstm_layer"): [
        {"UNITS": 8}, {"CHUNK": 1}, {"CHUNK": 16}, {"WARPS": 8}, {"WARPS": 2}],
    ("lstm_layer_backward", "fusedgrad.schedules.cuda.lstm_layer"): [
        {"UNITS": 8}, {"CHUNK": 1}, {"CHUNK": 16}, {"WARPS": 8}, {"WARPS": 2}],
}


@contextlib.contextmanager
def swept_knobs(module: str, params: dict):
    """The schedule rules of ``module`` built with ``params`` ({knob: value}): a knob that is a module
    constant is set there (restored after); one the rules derive from the target (no constant, such
    as the layer kernels' UNITS) is answered by ``params`` instead of the derivation."""
    import importlib

    from fusedgrad import schedules

    mod = importlib.import_module(module)
    saved = {k: getattr(mod, k) for k in params if hasattr(mod, k)}
    derived = {k: int(v) for k, v in params.items() if k not in saved}
    knob = schedules.ScheduleRule.knob

    def swept(self, name, target=None):
        if name in derived and type(self).__module__ == module:
            return derived[name]
        return knob(self, name, target)
    try:
        for k in saved:
            setattr(mod, k, params[k])
        schedules.ScheduleRule.knob = swept
        yield
    finally:
        schedules.ScheduleRule.knob = knob
        for k, v in saved.items():
            setattr(mod, k, v)


def _stage_sweep(root: Path, archs: str) -> None:
    import importlib

    from fusedgrad import targets
    from fusedgrad.lowering import build

    os.environ["FUSEDGRAD_CUDA_ARCH"] = archs
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    shipped: list[str] = []
    for (op_name, module), settings in SWEEP.items():
        mod = importlib.import_module(module)
        constants = sorted({k for params in settings for k in params if hasattr(mod, k)})
        shipped.append(op_name + "".join(f"-{k}{getattr(mod, k)}" for k in constants))
        for params in settings:
            name = op_name + "".join(f"-{k}{v}" for k, v in params.items())
            with swept_knobs(module, params):
                for dtype in SWEEP_DTYPES.get(op_name, ("float32", "float16")):
                    if dtype in targets.get("cuda").dtypes_for(op_name):
                        build.build(op_name, "cuda", dtype, root / name)
            for source in (root / name).glob("*.cu"):  # the GPU machine loads the libraries only
                source.unlink()
            print(f"sweep: {name}", flush=True)
    (root / "shipped.json").write_text(json.dumps(shipped))


RUN_SH = (Path(__file__).resolve().parent / "gpu_check_run.sh").read_text()  # what `stage` writes as run.sh


# ----------------------------------------------------------------------------- check (GPU machine)

class Timer:
    """Median device milliseconds per call: CUDA events around back-to-back calls."""

    def __init__(self, torch, calls: int = 20, repeat: int = 9):
        self.torch, self.calls, self.repeat = torch, calls, repeat

    def __call__(self, fn) -> float:
        torch = self.torch
        fn()
        torch.cuda.synchronize()
        samples = []
        for _ in range(self.repeat):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(self.calls):
                fn()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) / self.calls)
        return statistics.median(samples)


def copy_bandwidth(torch, timer) -> float:
    """GB/s of a 2 GiB device-to-device copy, bytes read + written."""
    src = torch.ones(2**29, dtype=torch.float32, device="cuda")
    dst = torch.empty_like(src)
    ms = timer(lambda: dst.copy_(src))
    return 2 * 2**31 / (ms * 1e-3) / 1e9


def _torch_competitor(torch, op_name, t, variant):
    """PyTorch CUDA's own kernel for the op (None where torch has no counterpart for the variant)."""
    if op_name == "lstm_cell_backward":
        return lambda: torch.ops.aten._thnn_fused_lstm_cell_backward_impl(
            t["grad_hy"] if variant["has_grad_hy"] else None, t["grad_cy"] if variant["has_grad_cy"] else None,
            t["cx"], t["cy"], t["storage"], variant["has_bias"])
    if op_name == "layer_norm_backward":
        D = t["x"].shape[1]
        rstd = torch.rsqrt(t["var"].float() + 1e-5)  # torch keeps mean/rstd in float32 for half inputs
        mean = t["mean"].float()
        return lambda: torch.ops.aten.native_layer_norm_backward(
            t["dy"], t["x"], [D], mean[:, None], rstd[:, None], t["gamma"], t["gamma"], [True, True, True])
    from fusedgrad import bench  # torch's eager formula for each of the LSTM's kernels

    fn = bench.TORCH.get(op_name)
    return (lambda: fn(t)) if fn is not None else None


def _rel_err(got, ref, np) -> float:
    got = np.asarray(got, dtype=np.float64).reshape(ref.shape)
    scale = np.abs(ref[np.isfinite(ref)]).max(initial=0.0) + 1.0
    both_nan = np.isnan(got) & np.isnan(ref)
    diff = np.where(both_nan, 0.0, np.abs(got - ref))
    return float(np.nan_to_num(diff, nan=np.inf).max(initial=0.0) / scale)


SECTIONS = ("numerics", "torch_ops", "lstm", "profile", "speed", "vector", "sweep")
# the full LSTM calls whose device time is split by kernel (torch.profiler): where the time goes
PROFILED = ((50, 32, 256, 256, 1, 1), (100, 64, 512, 512, 1, 1))


def check(artifacts: Path, out: Path, budget_s: float = 480.0, sections=SECTIONS, ops=None,
          skip_ops=()) -> int:
    """Everything on the GPU; the schedule sweep (optional) only while ``budget_s`` seconds since the
    start are not spent, so the session's device time is not lost to it.  ``sections`` (of SECTIONS)
    ``ops`` (op names, None for all) and ``skip_ops`` narrow the check, so that a lease can run it in
    phases, each under its own time limit: a persistent kernel that hangs then costs one phase, not the
    rest."""
    unknown = sorted(set(sections) - set(SECTIONS))
    if unknown:
        raise ValueError(f"sections: expected some of {SECTIONS}, got unknown {unknown}")
    import numpy as np
    import torch

    started = time.perf_counter()

    out.mkdir(parents=True, exist_ok=True)
    lines: list[str] = []
    result: dict = {"numerics": [], "timing": [], "problems": []}

    def say(text=""):
        print(text, flush=True)
        lines.append(text)

    def flush():
        (out / "gpu_check.md").write_text("\n".join(lines) + "\n")
        (out / "gpu_check.json").write_text(json.dumps(result, indent=1))

    if not torch.cuda.is_available():
        say("no CUDA device visible to torch")
        flush()
        return 1
    import tvm_ffi

    from fusedgrad import api, runtime, te_defs
    from fusedgrad.tensors import NP_DTYPES

    name = torch.cuda.get_device_name()
    cap = torch.cuda.get_device_capability()
    say(f"# fusedgrad CUDA check ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})")
    say()
    say(f"GPU: {name} (sm_{cap[0]}{cap[1]}), torch {torch.__version__} (CUDA {torch.version.cuda}), "
        f"TVM runtime {runtime.tvm_api.tvm_version()}, tvm-ffi {runtime.tvm_api.tvm_ffi_version()}")
    result["gpu"], result["torch"] = name, torch.__version__
    t0 = time.perf_counter()
    try:
        lib = runtime.load(artifacts, targets=("cuda",))
    except Exception as e:  # the loader's message says what is missing
        say(f"loading the artifacts failed: {type(e).__name__}: {e}")
        result["problems"].append(str(e))
        flush()
        return 1
    say(f"loaded {len(lib)} CUDA artifacts from {artifacts} in {time.perf_counter() - t0:.2f} s (no compilation)")
    timer = Timer(torch)
    bw = copy_bandwidth(torch, timer)
    result["copy_GBps"] = bw
    say(f"device copy bandwidth: {bw:.0f} GB/s (2 GiB device-to-device, read + write)")
    say(f"torch.backends.cuda.matmul.allow_tf32 = {torch.backends.cuda.matmul.allow_tf32} (torch.mm's "
        f"float32 precision; the tensor-core GEMM rows compare like precisions: float16/bfloat16 in, float32 "
        f"sums; the float32 `matmul` row is TF32 and is timed against torch.mm with allow_tf32 set)")
    say()
    flush()

    rng = np.random.default_rng(0)
    if "numerics" in sections:
        say("## Numerics (every variant; max error relative to max|ref|+1)")
        say()
        say("| op | dtype | shape | variants | vs float64 | vs torch CUDA | same bits twice | status |")
        say("|---|---|---|---|---|---|---|---|")
    bad = 0
    with tvm_ffi.use_torch_stream():
        for (op_name, _target, dtype), art in sorted(lib.items()):
            if "numerics" not in sections or (ops is not None and op_name not in ops) or op_name in skip_ops:
                continue
            op = te_defs.get(op_name)
            for label in ("odd, not a vector multiple", list(op.shapes)[-1]):
                dims = op.shapes[label]
                sample = op.sample(dims, rng)
                kinds = {s.name: s.dtype or dtype for s in op.inputs}  # a spec may fix its dtype
                # float inputs in the call's dtype, exact in float64; integer ones (batch sizes) as given
                arrays = {k: v.astype(NP_DTYPES.get(kinds[k], kinds[k])) for k, v in sample.items()}
                exact = {k: v if np.issubdtype(v.dtype, np.integer) else v.astype(np.float64)
                         for k, v in arrays.items()}
                tensors = {k: torch.from_numpy(v.view(np.uint16)).view(torch.bfloat16).cuda()
                           if kinds[k] == "bfloat16" else torch.from_numpy(v).cuda() for k, v in arrays.items()}
                err_ref = err_torch = 0.0
                same = True
                specs = {s.name: s for s in op.inputs}
                # every entry the CUDA library has: the layer ops' w_hh_global and tensor_cores ones too
                # (the reference takes the tensor_cores operands as those entries state)
                variants = op.variants_for("cuda")
                tol = max(TOL[dtype], TC_TOL) if any(v.get("tensor_cores") for v in variants) else TOL[dtype]
                for variant in variants:
                    given = {k: (v if op.present(specs[k], variant) else None) for k, v in tensors.items()}
                    try:
                        got = api.run(op_name, given, {}, variant, library=lib)
                        again = api.run(op_name, given, {}, variant, library=lib)
                    except Exception as e:
                        result["problems"].append(f"{op_name} {dtype} {variant}: {e}")
                        err_ref = float("inf")
                        break
                    ref = op.reference(**{k: (exact[k] if given[k] is not None else None) for k in given},
                                       **variant)
                    # against torch's own kernels for the API's ops; the LSTM's internal kernels have only
                    # torch's eager formulas (bench.TORCH), for timing, which skip bias and addend
                    theirs = (_torch_competitor(torch, op_name, {k: v for k, v in given.items()}, variant)
                              if op_name in ("lstm_cell_backward", "layer_norm_backward") else None)
                    try:
                        theirs = theirs() if theirs is not None else None
                    except Exception:  # a variant torch's kernel does not take (e.g. no gradient at all)
                        theirs = None
                    for k, (name_, value) in enumerate(got.items()):
                        if value is None:
                            continue
                        same &= bool(torch.equal(value, again[name_]))
                        err_ref = max(err_ref, _rel_err(value.float().cpu().numpy(), ref[name_], np))
                        if theirs is not None and k < len(theirs) and theirs[k] is not None:
                            err_torch = max(err_torch, _rel_err(
                                value.float().cpu().numpy(),
                                theirs[k].double().cpu().numpy().reshape(value.shape), np))
                ok = err_ref <= tol and same
                bad += not ok
                row = {"op": op_name, "dtype": dtype, "shape": dims, "variants": len(variants),
                       "err_ref": err_ref, "err_torch": err_torch, "same_bits": same, "ok": ok}
                result["numerics"].append(row)
                shape = ",".join(f"{k}={v}" for k, v in dims.items())
                vs_torch = f"{err_torch:.1e}"
                say(f"| {op_name} | {dtype} | {shape} | {len(variants)} | {err_ref:.1e} | {vs_torch} | "
                    f"{'yes' if same else 'NO'} | {'ok' if ok else 'FAIL'} |")
                flush()
        say()
        if "torch_ops" in sections:
            _torch_ops(torch, np, artifacts, say, result)
            flush()
            say()
        if "lstm" in sections:
            bad += _lstm_check(torch, artifacts, say, result, flush)
            flush()
            say()
        if "profile" in sections:
            os.environ["FUSEDGRAD_ARTIFACTS"] = str(artifacts)
            _lstm_profile(torch, say, result)
            flush()
            say()
        if "speed" in sections:
            say("## Speed (median device time per call, CUDA events; ratio = torch time / ours)")
            say()
            say("| op | dtype | shape | fusedgrad ms | GB/s | % copy bw | TFLOP/s | torch ms | vs torch |")
            say("|---|---|---|---|---|---|---|---|---|")
        for (op_name, _target, dtype), art in sorted(lib.items()):
            if "speed" not in sections or (ops is not None and op_name not in ops) or op_name in skip_ops:
                continue
            op = te_defs.get(op_name)
            variant = op.variants[0]
            for dims in TIMED.get(op_name, ()):
                tensors = _timing_tensors(torch, np, op, op.sample(dims, rng), dtype)
                for flags in _entries(op, dims):  # the tensor_cores entry: a row of its own
                    try:
                        ours = timer(lambda: api.run(op_name, tensors, {}, {**variant, **flags}, library=lib))
                        call = _kernel_call(op, art, tensors, {**variant, **flags}, torch)
                        ours = min(ours, timer(call))
                    except Exception as e:
                        result["problems"].append(f"timing {op_name} {dtype}: {e}")
                        continue
                    comp = _torch_competitor(torch, op_name, tensors, variant)
                    saved_tf32 = torch.backends.cuda.matmul.allow_tf32
                    torch.backends.cuda.matmul.allow_tf32 = saved_tf32 or (op_name, dtype) == ("matmul", "float32")
                    try:
                        theirs = timer(comp) if comp is not None else None  # None: torch has no such kernel
                    except Exception as e:
                        result["problems"].append(f"torch {op_name} {dtype}: {e}")
                        theirs = None
                    finally:
                        torch.backends.cuda.matmul.allow_tf32 = saved_tf32
                    item = torch.finfo(getattr(torch, dtype)).bits // 8
                    gbps = op.nbytes(dims, item) / (ours * 1e-3) / 1e9
                    from fusedgrad import bench

                    flops = bench.FLOPS[op_name](dims)
                    tflops = flops / (ours * 1e-3) / 1e12
                    label = " ".join([op_name, *flags])
                    row = {"op": label, "dtype": dtype, "shape": dims, "ours_ms": ours, "torch_ms": theirs,
                           "GBps": gbps, "copy_frac": gbps / bw, "TFLOPs": tflops}
                    result["timing"].append(row)
                    shape = ",".join(f"{k}={v}" for k, v in dims.items())
                    say(f"| {label} | {dtype} | {shape} | {ours:.4f} | {gbps:.0f} | {100 * gbps / bw:.0f}% | "
                        + (f"{tflops:.1f} | " if flops else "- | ")
                        + (f"{theirs:.4f} | {theirs / ours:.2f}x |" if theirs else "- | - |"))
                    flush()
        say()
        if "vector" in sections:
            bad += _vector_check(torch, np, lib, timer, bw, rng, say, result, flush)
    sweep = artifacts.parent / "sweep"
    spent = time.perf_counter() - started
    say()
    say(f"({spent:.0f} s into the check)")
    if "sweep" not in sections:
        pass
    elif spent > budget_s:
        say(f"schedule sweep skipped: {spent:.0f} s spent of the {budget_s:.0f} s budget (--budget-s)")
    elif sweep.is_dir() and any(p.is_dir() for p in sweep.iterdir()):
        say()
        say("## Schedule parameters side by side (median ms; the shipped setting is marked *)")
        say()
        say("| setting | dtype | shape | ms | GB/s | % copy bw |")
        say("|---|---|---|---|---|---|")
        shipped = set(json.loads((sweep / "shipped.json").read_text()))
        with tvm_ffi.use_torch_stream():
            for d in sorted(p for p in sweep.iterdir() if p.is_dir()):
                try:
                    slib = runtime.load(d, targets=("cuda",))
                except Exception as e:
                    result["problems"].append(f"sweep {d.name}: {e}")
                    continue
                for (op_name, _t, dtype), art in sorted(slib.items()):
                    op = te_defs.get(op_name)
                    variant = op.variants[0]
                    for dims in TIMED[op_name]:
                        tensors = _timing_tensors(torch, np, op, op.sample(dims, rng), dtype)
                        try:
                            ms = timer(_kernel_call(op, art, tensors, variant, torch))
                        except Exception as e:
                            result["problems"].append(f"sweep {d.name} {dtype}: {e}")
                            continue
                        item = torch.finfo(getattr(torch, dtype)).bits // 8
                        gbps = op.nbytes(dims, item) / (ms * 1e-3) / 1e9
                        shape = ",".join(f"{k}={v}" for k, v in dims.items())
                        result.setdefault("sweep", []).append(
                            {"setting": d.name, "dtype": dtype, "shape": dims, "ms": ms, "GBps": gbps})
                        say(f"| {d.name}{' *' if d.name in shipped else ''} | {dtype} | {shape} | {ms:.4f} | "
                            f"{gbps:.0f} | {100 * gbps / bw:.0f}% |")
                        flush()
    if result["problems"]:
        say()
        say("Problems:")
        for p in result["problems"]:
            say(f"- {p}")
    flush()
    return 1 if bad or result["problems"] else 0


def _torch_ops(torch, np, artifacts: Path, say, result) -> None:
    """fusedgrad.torch on CUDA tensors (artifacts from $FUSEDGRAD_ARTIFACTS) against torch's own."""
    os.environ["FUSEDGRAD_ARTIFACTS"] = str(artifacts)
    import fusedgrad.torch as fgt

    say("## fusedgrad.torch on CUDA tensors (max abs difference to torch)")
    say()
    say("| call | dtype | max abs diff | status |")
    say("|---|---|---|---|")
    g = torch.Generator(device="cuda").manual_seed(0)
    for dtype, tol in ((torch.float32, 1e-5), (torch.float16, 2e-2)):
        N, H = 300, 257
        gates = torch.randn(N, 4 * H, device="cuda", generator=g)
        i, f, gg, o = gates.chunk(4, 1)
        storage = torch.cat([i.sigmoid(), f.sigmoid(), gg.tanh(), o.sigmoid()], 1).to(dtype)
        cx = torch.randn(N, H, device="cuda", generator=g).to(dtype)
        cy = (storage[:, H:2 * H] * cx + storage[:, :H] * storage[:, 2 * H:3 * H]).to(dtype)
        ghy, gcy = (torch.randn(N, H, device="cuda", generator=g).to(dtype) for _ in range(2))
        try:
            ours = fgt.thnn_fused_lstm_cell_backward(ghy, gcy, cx, cy, storage, True)
            theirs = torch.ops.aten._thnn_fused_lstm_cell_backward_impl(ghy, gcy, cx, cy, storage, True)
            diff = max(float((a.float() - b.float()).abs().max()) for a, b in zip(ours, theirs))
        except Exception as e:
            diff = float("inf")
            result["problems"].append(f"fusedgrad.torch cell on CUDA: {e}")
        say(f"| thnn_fused_lstm_cell_backward | {str(dtype)[6:]} | {diff:.1e} | {'ok' if diff <= tol * 10 else 'FAIL'} |")
        result.setdefault("torch_ops", []).append({"call": "cell", "dtype": str(dtype), "diff": diff})
        x = torch.randn(64, 33, 1000, device="cuda", generator=g).to(dtype).requires_grad_()
        w = (1 + 0.1 * torch.randn(1000, device="cuda", generator=g)).to(dtype).requires_grad_()
        b = torch.randn(1000, device="cuda", generator=g).to(dtype).requires_grad_()
        dy = torch.randn(64, 33, 1000, device="cuda", generator=g).to(dtype)
        try:
            ours = torch.autograd.grad(fgt.layer_norm(x, (1000,), w, b), (x, w, b), dy)
            theirs = torch.autograd.grad(torch.nn.functional.layer_norm(x, (1000,), w, b), (x, w, b), dy)
            diff = max(float((a.float() - c.float()).abs().max() / (c.float().abs().max() + 1))
                       for a, c in zip(ours, theirs))
        except Exception as e:
            diff = float("inf")
            result["problems"].append(f"fusedgrad.torch layer_norm on CUDA: {e}")
        say(f"| layer_norm autograd (dx, dw, db; relative) | {str(dtype)[6:]} | {diff:.1e} | "
            f"{'ok' if diff <= tol else 'FAIL'} |")
        result.setdefault("torch_ops", []).append({"call": "layer_norm", "dtype": str(dtype), "diff": diff})


def _lstm_pair(torch, fgt, L, bidirectional, batch_first, I, H, dtype, device):
    """(fusedgrad.torch.LSTM, torch.nn.LSTM) on ``device`` with the same weights, in ``dtype``."""
    ref = torch.nn.LSTM(I, H, num_layers=L, bidirectional=bidirectional, batch_first=batch_first)
    ours = fgt.LSTM(I, H, num_layers=L, bidirectional=bidirectional, batch_first=batch_first)
    ours.load_state_dict(ref.state_dict())
    return ours.to(device, dtype), ref.to(device, dtype)


def _run_lstm(torch, module, x, hx, lengths, batch_first, dtype):
    """Output, h_n, c_n and every gradient (input, h0, c0, parameters) of a fixed weighted sum
    (its weights drawn in float32, rounded to ``dtype``: the same for every run of one case)."""
    from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

    x = x.detach().clone().requires_grad_()
    h0, c0 = (t.detach().clone().requires_grad_() for t in hx)
    inp = x if lengths is None else pack_padded_sequence(x, torch.tensor(lengths), batch_first=batch_first)
    out, (hn, cn) = module(inp, (h0, c0))
    if lengths is not None:
        out = pad_packed_sequence(out, batch_first=batch_first)[0]
    g = torch.Generator(device=x.device).manual_seed(7)
    weights = [torch.randn(t.shape, device=x.device, generator=g).to(dtype).to(t.dtype) for t in (out, hn, cn)]
    loss = sum((t * w).sum() for t, w in zip((out, hn, cn), weights))
    grads = torch.autograd.grad(loss, [x, h0, c0, *module.parameters()])
    return [t.detach() for t in (out, hn, cn, *grads)]


def _lstm_check(torch, artifacts: Path, say, result, flush) -> int:
    """The full LSTM on CUDA tensors: numerics, same bits twice, fwd+bwd time against cuDNN."""
    os.environ["FUSEDGRAD_ARTIFACTS"] = str(artifacts)
    bad = lstm_numerics(torch, "cuda", say, result, flush)
    _lstm_timing(torch, say, result, flush)
    return bad


def lstm_numerics(torch, device: str, say, result, flush=lambda: None, cases=LSTM_CASES) -> int:
    """fusedgrad.torch.LSTM on ``device`` against float64 torch.nn.LSTM autograd there; returns the
    number of failing rows.  (The tests run it on the CPU with the CUDA path's torch arrays.)"""
    import fusedgrad.torch as fgt

    bad = 0
    say("## Full LSTM on CUDA tensors (fusedgrad.torch.LSTM against float64 torch.nn.LSTM autograd)")
    say()
    say("| layers, dirs, batch_first, lengths, T, B, I, H | dtype | max rel error (13+ tensors) | "
        "same bits twice | status |")
    say("|---|---|---|---|---|")
    saved_tf32 = torch.backends.cudnn.allow_tf32
    for L, bidir, bf, lengths, T, B, I, H in cases:
        for dtype, tf32 in (("float32", False), ("float32", True), ("float16", False), ("bfloat16", False)):
            # float32 with cuDNN's TF32 flag set: the GEMMs in TF32, float16's 10-bit mantissa and bounds
            torch.backends.cudnn.allow_tf32 = tf32
            label, bounds = ("float32 TF32", "float16") if tf32 else (dtype, dtype)
            tdt = getattr(torch, dtype)
            torch.manual_seed(0)
            ours, ref = _lstm_pair(torch, fgt, L, bidir, bf, I, H, tdt, device)
            ref = ref.double()
            D = 2 if bidir else 1
            x = torch.randn((B, T, I) if bf else (T, B, I), device=device).to(tdt)
            hx = [torch.randn(L * D, B, H, device=device).to(tdt) for _ in range(2)]
            try:
                got = _run_lstm(torch, ours, x, hx, lengths, bf, tdt)
                again = _run_lstm(torch, ours, x, hx, lengths, bf, tdt)
                want = _run_lstm(torch, ref, x.double(), [h.double() for h in hx], lengths, bf, tdt)
                err = max(float((a.double() - w).abs().max() / (w.abs().max() + 1)) for a, w in zip(got, want))
                same = all(torch.equal(a, b) for a, b in zip(got, again))
            except Exception as e:
                result["problems"].append(f"full LSTM {dtype} L={L} bidir={bidir}: {type(e).__name__}: {e}")
                err, same = float("inf"), False
            ok = err <= LSTM_TOL[bounds] and same
            bad += not ok
            result.setdefault("lstm_numerics", []).append(
                {"case": [L, bidir, bf, lengths, T, B, I, H], "dtype": label, "err": err, "same_bits": same})
            say(f"| {L}, {D}, {bf}, {lengths}, {T}, {B}, {I}, {H} | {label} | {err:.1e} | "
                f"{'yes' if same else 'NO'} | {'ok' if ok else 'FAIL'} |")
            flush()
    torch.backends.cudnn.allow_tf32 = saved_tf32
    return bad


def _lstm_timing(torch, say, result, flush) -> None:
    import fusedgrad.torch as fgt

    class _OutputOnly(torch.nn.Module):  # make_graphed_callables takes flat tensor outputs
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, x):
            return self.m(x)[0]

    say()
    say("## Full LSTM forward + backward time (median ms, CUDA events; ratio = cuDNN time / ours)")
    say()
    say(f"torch.backends.cudnn.allow_tf32 = {torch.backends.cudnn.allow_tf32} (cuDNN's float32 GEMMs may "
        "use TF32, and fusedgrad's follow the same flag)")
    say()
    say("'graphed': the same module through torch.cuda.make_graphed_callables (forward and backward each "
        "one CUDA graph: no per-step launch cost)")
    say()
    say("'fp32': both with torch.backends.cudnn.allow_tf32 = False (float32 rows only): full float32 GEMMs, "
        "fusedgrad's on matmul_packed")
    say()
    say("| T, B, I, H, layers, dirs | dtype | fusedgrad ms | graphed ms | torch.nn.LSTM (cuDNN) ms | vs cuDNN | "
        "graphed vs cuDNN | fusedgrad fp32 ms | cuDNN fp32 ms | fp32 vs cuDNN |")
    say("|---|---|---|---|---|---|---|---|---|---|")
    timer = Timer(torch, calls=3, repeat=5)
    for T, B, I, H, L, D in LSTM_TIMED:
        for dtype in ("float32", "float16"):
            tdt = getattr(torch, dtype)
            ours, ref = _lstm_pair(torch, fgt, L, D == 2, False, I, H, tdt, "cuda")
            x = torch.randn(T, B, I, device="cuda").to(tdt).requires_grad_()
            dy = torch.randn(T, B, D * H, device="cuda").to(tdt)

            def step(m):
                return lambda: torch.autograd.backward(_first(m(x)), dy)
            try:
                ms = timer(step(ours))
            except Exception as e:
                result["problems"].append(f"full LSTM timing {dtype} {(T, B, I, H, L, D)}: {type(e).__name__}: {e}")
                continue
            theirs = timer(step(ref))
            strict = ours_strict = None
            if dtype == "float32":
                saved_tf32 = torch.backends.cudnn.allow_tf32
                torch.backends.cudnn.allow_tf32 = False
                try:
                    strict = timer(step(ref))
                    ours_strict = timer(step(ours))
                except Exception as e:
                    result["problems"].append(f"full LSTM timing float32 without TF32 {(T, B, I, H, L, D)}: "
                                              f"{type(e).__name__}: {e}")
                finally:
                    torch.backends.cudnn.allow_tf32 = saved_tf32
            graphed = None
            try:
                graphed = timer(step(torch.cuda.make_graphed_callables(_OutputOnly(ours), (x,))))
            except Exception as e:
                result["problems"].append(f"full LSTM as a CUDA graph {dtype} {(T, B, I, H, L, D)}: "
                                          f"{type(e).__name__}: {e}")
            result.setdefault("lstm_timing", []).append(
                {"config": [T, B, I, H, L, D], "dtype": dtype, "ours_ms": ms, "graphed_ms": graphed,
                 "cudnn_ms": theirs, "cudnn_no_tf32_ms": strict, "ours_no_tf32_ms": ours_strict})
            g_ms, g_vs = (f"{graphed:.2f}", f"{theirs / graphed:.2f}x") if graphed else ("-", "-")
            fp32 = (f"{ours_strict:.2f} | {strict:.2f} | {strict / ours_strict:.2f}x" if strict and ours_strict
                    else "- | - | -")
            say(f"| {T}, {B}, {I}, {H}, {L}, {D} | {dtype} | {ms:.2f} | {g_ms} | {theirs:.2f} | "
                f"{theirs / ms:.2f}x | {g_vs} | {fp32} |")
            flush()


def _lstm_profile(torch, say, result) -> None:
    """One float32 forward + backward of fusedgrad.torch.LSTM at each of PROFILED under torch.profiler:
    device time by kernel (the layer kernels, the GEMMs, the rest) and the call's wall time, whose
    difference from the kernels' sum is launch and host time."""
    import fusedgrad.torch as fgt
    from torch.profiler import ProfilerActivity, profile

    say("## Where the full LSTM's time goes (torch.profiler, one float32 forward + backward after warm-up)")
    say()
    for T, B, I, H, L, D in PROFILED:
        ours, _ = _lstm_pair(torch, fgt, L, D == 2, False, I, H, torch.float32, "cuda")
        x = torch.randn(T, B, I, device="cuda").requires_grad_()
        dy = torch.randn(T, B, D * H, device="cuda")

        def step():
            torch.autograd.backward(_first(ours(x)), dy)
        for _ in range(3):
            step()
        torch.cuda.synchronize()
        try:
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                t0 = time.perf_counter()
                step()
                torch.cuda.synchronize()
                wall = (time.perf_counter() - t0) * 1e3
        except Exception as e:
            result["problems"].append(f"profile {(T, B, I, H, L, D)}: {type(e).__name__}: {e}")
            continue
        rows = []
        for ev in prof.key_averages():
            dev = getattr(ev, "device_time_total", None) or getattr(ev, "cuda_time_total", 0)
            if dev > 0 and ev.count:
                rows.append((dev / 1e3, ev.count, ev.key))
        rows.sort(reverse=True)
        kernels = [r for r in rows if not r[2].startswith("Memcpy") and not r[2].startswith("Memset")] or rows
        total = sum(r[0] for r in kernels)
        result.setdefault("lstm_profile", []).append(
            {"config": [T, B, I, H, L, D], "wall_ms": wall, "kernels": [list(r) for r in rows[:20]]})
        say(f"({T}, {B}, {I}, {H}, {L}, {D}) float32: {wall:.2f} ms wall, {total:.2f} ms in kernels")
        say()
        say("| kernel | calls | device ms | share |")
        say("|---|---|---|---|")
        for ms, n, key in rows[:14]:
            say(f"| {key[:70]} | {n} | {ms:.3f} | {100 * ms / max(total, 1e-9):.0f}% |")
        say()


def _vector_check(torch, np, lib, timer, bw, rng, say, result, flush) -> int:
    """The ops with vector accesses at their timed shapes: inputs on 16-byte boundaries (the vector
    kernels) against the same values one element off (the scalar kernels): the same bits, and each
    one's time.  Returns the number of mismatches."""
    from fusedgrad import api, te_defs

    say("## Vector accesses (inputs on 16-byte boundaries against one element off: same bits, each's time)")
    say()
    say("| op | dtype | shape | same bits | vector ms | % copy bw | one element off ms | % copy bw |")
    say("|---|---|---|---|---|---|---|---|")
    bad = 0
    for (op_name, _target, dtype), art in sorted(lib.items()):
        if op_name not in VECTOR_OPS:
            continue
        op = te_defs.get(op_name)
        variant = op.variants[0]
        for dims in TIMED[op_name]:
            aligned = _timing_tensors(torch, np, op, op.sample(dims, rng), dtype)
            off = {k: _one_element_off(torch, v) for k, v in aligned.items()}
            try:
                a, b = (api.run(op_name, t, {}, variant, library=lib) for t in (aligned, off))
                same = all(torch.equal(x, b[k]) for k, x in a.items() if x is not None)
                times = [timer(_kernel_call(op, art, t, variant, torch)) for t in (aligned, off)]
            except Exception as e:
                result["problems"].append(f"vector check {op_name} {dtype}: {e}")
                continue
            bad += not same
            item = torch.finfo(getattr(torch, dtype)).bits // 8
            fracs = [op.nbytes(dims, item) / (ms * 1e-3) / 1e9 / bw for ms in times]
            result.setdefault("vector", []).append({"op": op_name, "dtype": dtype, "shape": dims, "same_bits": same,
                                                    "vector_ms": times[0], "scalar_ms": times[1]})
            shape = ",".join(f"{k}={v}" for k, v in dims.items())
            say(f"| {op_name} | {dtype} | {shape} | {'yes' if same else 'NO'} | {times[0]:.4f} | "
                f"{100 * fracs[0]:.0f}% | {times[1]:.4f} | {100 * fracs[1]:.0f}% |")
            flush()
    return bad


def _one_element_off(torch, t):
    """A copy of ``t`` starting one element past its allocation's start (off every vector boundary)."""
    buf = torch.empty(t.numel() + 1, dtype=t.dtype, device=t.device)
    view = buf[1:].view(t.shape)
    view.copy_(t)
    return view


def _timing_tensors(torch, np, op, sample, dtype):
    """An op's sample inputs on the GPU, each in its dtype (the op's, or the one its spec fixes)."""
    kinds = {s.name: s.dtype or dtype for s in op.inputs}
    return {k: torch.from_numpy(v.astype(np.float32)).cuda().to(getattr(torch, kinds[k])) for k, v in sample.items()}


def _first(out):
    return out[0] if isinstance(out, tuple) else out


def _entries(op, dims) -> tuple[dict, ...]:
    """The entry points timed at ``dims``: the op's, and a layer kernel's ``tensor_cores`` one (its
    recurrent sums on mma.sync) where the full LSTM would launch it (B >= 16)."""
    from fusedgrad.te_defs import _lstm_layer as L

    if L.TENSOR_CORES in op.target_flags and dims.get("B", 0) >= L.TENSOR_CORE_MIN_BATCH:
        return {}, {L.TENSOR_CORES: True}
    return ({},)


def _kernel_call(op, art, tensors, variant, torch):
    """The bare kernel with preallocated outputs: device time without Python's per-call allocation."""
    from fusedgrad.te_defs import bind_dims, dim_size

    dims: dict = {}
    for spec in op.inputs:
        if op.present(spec, variant):
            bind_dims(dims, spec.shape, tuple(tensors[spec.name].shape), spec.name)
    args = [tensors[s.name].view(*[dim_size(dims, d) for d in s.kshape]) for s in op.inputs
            if op.present(s, variant)]
    args += [float(s.default) for s in op.scalars]
    for spec in op.outputs:
        if op.present(spec, variant):
            o = torch.empty([dim_size(dims, d) for d in spec.shape], device="cuda",
                            dtype=getattr(torch, spec.dtype) if spec.dtype else args[0].dtype)
            args.append(o.view(*[dim_size(dims, d) for d in spec.kshape]))
    fn = art.kernel(variant).func
    return lambda: fn(*args)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("stage", help="build the CUDA artifacts and the runtime bundle (here)")
    s.add_argument("dest", type=Path)
    s.add_argument("--arch", default="sm_80,sm_90")
    c = sub.add_parser("check", help="numerics and speed on the GPU (there)")
    c.add_argument("--artifacts", type=Path, required=True)
    c.add_argument("--out", type=Path, required=True)
    c.add_argument("--budget-s", type=float, default=480.0,
                   help="seconds after which the optional schedule sweep is skipped (default 480)")
    c.add_argument("--sections", default=",".join(SECTIONS),
                   help=f"comma-separated parts to run, of {','.join(SECTIONS)} (default all)")
    c.add_argument("--ops", default=None, help="comma-separated op names for numerics and speed (default all)")
    c.add_argument("--skip-ops", default="", help="comma-separated op names left out of numerics and speed")
    args = p.parse_args(argv)
    if args.cmd == "stage":
        return stage(args.dest, args.arch)
    ops = None if args.ops is None else tuple(args.ops.split(","))
    return check(args.artifacts, args.out, args.budget_s, tuple(args.sections.split(",")), ops,
                 tuple(filter(None, args.skip_ops.split(","))))


if __name__ == "__main__":
    sys.exit(main())
