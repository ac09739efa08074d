"""The full LSTM's driver over torch tensors (``buffers.TorchArrays``): what runs for torch
CUDA tensors, run here on torch CPU tensors with the llvm kernels.

Torch CUDA tensors keep every buffer on their device (no copy to the host); the driver is the same
code with torch tensors where the host path has numpy arrays.  CI has no GPU, so these tests force
the torch arrays onto CPU tensors (``inputs.arrays_for`` patched) and require the same bits as
the host path for every case of test_lstm.py: each slice, index, copy and kernel call of the torch
path is then the host path's.  Then the GPU's own choices run here too: the cuda target's kernels as
their CUDA schedules' loop nests compiled for the host, each GEMM one launch, a 16-bit call's GEMMs
on the tensor-core matmul, against float64 torch.nn.LSTM.  What only a GPU shows (the kernels in
parallel, tensor cores, torch's stream, speed) is run by benchmarks/gpu_check.py.
"""
from __future__ import annotations

import numpy as np
import pytest

from conftest import bits

torch = pytest.importorskip("torch")

import test_lstm as TL  # noqa: E402  (the cases and their inputs)
from fusedgrad.lstm import buffers, inputs  # noqa: E402


@pytest.fixture
def torch_arrays(monkeypatch):
    """Every torch call runs through TorchArrays on the CPU; records that it did."""
    made = []

    def arrays_for(kind, device, dtype):
        if kind != "torch":
            return buffers.HOST
        made.append(buffers.TorchArrays(device))
        return made[-1]

    monkeypatch.setattr(inputs, "arrays_for", arrays_for)
    return made


def _as_torch(cfg):
    c = TL.Cfg.__new__(TL.Cfg)
    c.__dict__.update(cfg.__dict__)
    c.kind = "torch"
    return c


def _run_both(cfg, dtype, torch_arrays, monkeypatch, train=True):
    cfg = _as_torch(cfg)
    data = TL.make_data(cfg)
    if dtype != "float32":
        data = TL.rounded_data(data, dtype)
    a = TL.api_inputs(cfg, data, dtype)
    results = []
    for patched in (True, False):
        if not patched:
            monkeypatch.undo()
        fwd = TL.run_forward(cfg, a, train=train)
        bwd = TL.run_backward(cfg, a, fwd) if train else None
        results.append((fwd, bwd))
    assert torch_arrays, "the torch arrays were not used"
    return results


def _same_bits(x, y, what):
    assert isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor), what
    assert x.dtype == y.dtype and tuple(x.shape) == tuple(y.shape), what
    np.testing.assert_array_equal(bits(x), bits(y), err_msg=what)


def _flat(fwd, bwd):
    out = list(fwd)
    if bwd is not None:
        out += [bwd[0], *bwd[1], *bwd[2]]
    return out


@pytest.mark.parametrize("cfg", TL.CASES)
def test_torch_arrays_give_the_host_paths_bits(cfg, torch_arrays, monkeypatch):
    (f1, b1), (f2, b2) = _run_both(cfg, "float32", torch_arrays, monkeypatch)
    for n, (x, y) in enumerate(zip(_flat(f1, b1), _flat(f2, b2))):
        _same_bits(x, y, f"result {n}")


@pytest.mark.parametrize("cfg", TL.LOW_CASES)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_torch_arrays_reduced_precision(cfg, dtype, torch_arrays, monkeypatch):
    (f1, b1), (f2, b2) = _run_both(cfg, dtype, torch_arrays, monkeypatch)
    for n, (x, y) in enumerate(zip(_flat(f1, b1), _flat(f2, b2))):
        _same_bits(x, y, f"result {n}")


@pytest.mark.parametrize("cfg", [TL.CASES[0], TL.CASES[10]])
def test_torch_arrays_inference(cfg, torch_arrays, monkeypatch):
    (f1, _), (f2, _) = _run_both(cfg, "float32", torch_arrays, monkeypatch, train=False)
    for n, (x, y) in enumerate(zip(f1, f2)):
        _same_bits(x, y, f"result {n}")


LAYER_KERNELS = {"pack_bt", "pack_b", "matmul_packed", "lstm_layer_forward", "lstm_layer_backward", "column_sum"}


def test_torch_arrays_keep_every_buffer_a_torch_tensor(torch_arrays, monkeypatch):
    """No numpy array reaches a kernel or comes back: on a GPU each would be a host round trip."""
    seen = []
    real = buffers.kernel

    def spy(op, target="llvm", dtype="float32", **variant):
        f = real(op, target, dtype, **variant)

        def call(*args):
            seen.extend((op, type(a).__module__.split(".")[0]) for a in args)
            return f(*args)
        return call

    monkeypatch.setattr(buffers, "kernel", spy)
    cfg = TL.Cfg(L=2, D=2, T=5, B=4, I=3, H=5, lengths=[5, 4, 2, 1], kind="torch", seed=40)
    a = TL.api_inputs(cfg, TL.make_data(cfg), "float32")
    fwd = TL.run_forward(cfg, a)
    bwd = TL.run_backward(cfg, a, fwd)
    assert torch_arrays and seen
    assert {m for _, m in seen} == {"torch"}, sorted({(op, m) for op, m in seen if m != "torch"})
    assert {op for op, _ in seen} == LAYER_KERNELS
    for r in _flat(fwd, bwd):
        assert isinstance(r, torch.Tensor)


def test_tensors_on_two_devices_are_refused(monkeypatch):
    """One call, one device: a tensor elsewhere is named.  This machine has one torch device, so
    meta stands in for a second (accepted as a device by the patched table, refused by the check)."""
    from fusedgrad import tensors

    monkeypatch.setitem(tensors.TORCH_DEVICES, "meta", "llvm")
    cfg = TL.Cfg(T=3, B=2, I=3, H=4, kind="torch", seed=41)
    a = TL.api_inputs(cfg, TL.make_data(cfg), "float32")
    params = list(a["params"])
    params[1] = params[1].to("meta")
    with pytest.raises(ValueError, match=r"params\[1\]: expected a tensor on cpu \(the device of input\), got meta"):
        TL.run_forward(cfg, {**a, "params": params})


def test_gpu_checks_lstm_rows_pass_here_through_the_torch_arrays(torch_arrays):
    """benchmarks/gpu_check.py's full-LSTM numerics (fusedgrad.torch.LSTM against float64
    torch.nn.LSTM autograd, PackedSequence included) run here on the path CUDA tensors take,
    so the one GPU run does not find a mistake in the check itself."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "gpu_check.py"
    spec = importlib.util.spec_from_file_location("gpu_check", path)
    gpu_check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_check)
    lines, result = [], {"problems": []}
    bad = gpu_check.lstm_numerics(torch, "cpu", lambda text="": lines.append(text), result)
    assert torch_arrays, "the torch arrays were not used"
    assert not result["problems"], result["problems"]
    rows = result["lstm_numerics"]
    # float32, float32 with cuDNN's TF32 flag (float16's bounds), float16, bfloat16 per case
    assert len(rows) == 4 * len(gpu_check.LSTM_CASES) and bad == 0, rows
    bounds = {"float32 TF32": "float16"}
    assert all(r["same_bits"] and r["err"] <= gpu_check.LSTM_TOL[bounds.get(r["dtype"], r["dtype"])] for r in rows)
    assert any("FAIL" not in line and "| ok |" in line for line in lines)


SYNCS = ("item", "tolist", "cpu", "numpy", "__array__", "__bool__", "__int__", "__index__", "__float__")


def test_a_torch_array_call_never_touches_the_host_while_it_runs(torch_arrays, monkeypatch):
    """What CUDA-graph capture needs: between argument checks and results, no tensor value is read on
    the host (item, tolist, bool, int...) and no host data becomes a tensor (as_tensor, tensor,
    from_numpy).  Each of those raises here while the plan runs."""
    from fusedgrad import lstm

    def forbidden(name):
        def raise_(*args, **kwargs):
            raise AssertionError(f"{name} called while the LSTM plan runs")
        return raise_

    real_run = lstm.run.run
    runs = []

    def guarded(plan, bound, ws, host):
        with pytest.MonkeyPatch.context() as mp:
            for name in SYNCS:
                mp.setattr(torch.Tensor, name, forbidden(f"Tensor.{name}"))
            for name in ("as_tensor", "tensor", "from_numpy"):
                mp.setattr(torch, name, forbidden(f"torch.{name}"))
            arrays = real_run(plan, bound, ws, host)
        runs.append(plan.pass_ == "backward")
        return arrays

    monkeypatch.setattr(lstm.run, "run", guarded)
    for cfg in (TL.Cfg(L=2, D=2, T=5, B=4, I=3, H=5, lengths=[5, 4, 2, 1], kind="torch", seed=42),
                TL.Cfg(L=2, D=2, T=4, B=3, I=6, H=33, bf=True, kind="torch", seed=43)):
        a = TL.api_inputs(cfg, TL.make_data(cfg), "float32")
        fwd = TL.run_forward(cfg, a)
        TL.run_backward(cfg, a, fwd)
    assert runs == [False, True, False, True] and torch_arrays


@pytest.mark.parametrize("m, host, gpu", [(45, [("main", 32), ("few_rows", 13)], [("main", 45)]),
                                          (13, [("few_rows", 13)], [("few_rows", 13)]),
                                          (64, [("main", 64)], [("main", 64)])])
def test_a_gpu_gemm_is_one_launch_whatever_its_rows(monkeypatch, m, host, gpu):
    """The CPU splits a GEMM's rows into whole 32-row blocks (main entry) and the rest (few_rows); a
    GPU kernel guards its own row tail, so it takes them all in one launch (few_rows below one block).
    The kernels are recorded, not run (torch.device("cuda") is only a name here)."""
    launches = []

    def record(op, target="llvm", dtype="float32", **variant):
        return lambda *args: launches.append((target, "few_rows" if variant["few_rows"] else "main",
                                              args[-1].shape[0]))

    monkeypatch.setattr(buffers, "kernel", record)
    K, N = 7, 64
    for arrays, want, target in ((buffers.HOST, host, "llvm"),
                                 (buffers.TorchArrays(torch.device("cuda")), gpu, "cuda")):
        launches.clear()
        b = buffers.Operand(K, N, torch.zeros((N // 32, K, 32)), arrays)
        buffers.gemm(torch.zeros((m, K)), b, torch.zeros((m, N)))
        assert launches == [(target, entry, rows) for entry, rows in want]


def test_a_cuda_call_launches_on_its_own_devices_torch_stream(monkeypatch):
    """Tensors on cuda:1 while cuda:0 is current: the kernels must go on cuda:1's current stream, so
    that device is made current for the launches (recorded here: this machine has no GPU)."""
    import contextlib

    import tvm_ffi

    seen = []
    monkeypatch.setattr(tvm_ffi, "use_torch_stream", lambda ctx=None: seen.append(ctx) or contextlib.nullcontext())
    with buffers.TorchArrays(torch.device("cuda", 1)).launching():
        pass
    assert len(seen) == 1 and isinstance(seen[0], torch.cuda.device) and seen[0].idx == 1
    with buffers.TorchArrays(torch.device("cpu")).launching():  # host kernels: no stream
        pass
    assert len(seen) == 1


@pytest.fixture(scope="module")
def cuda_loop_nests():
    """The CUDA schedules of the LSTM's kernels (and the tensor-core GEMM), their loop nests compiled for
    the host (thread loops serial, nothing tensorized): what a GPU would run, minus the parallelism."""
    import test_cuda_target as CT

    return CT.emulated_library


def _on_cuda_loop_nests(cfg, dtype, cuda_loop_nests, monkeypatch, tf32=False):
    """Run test_lstm's checks for ``cfg`` in ``dtype`` with the driver as it runs on a GPU: torch
    arrays, the cuda target's kernel choice (each GEMM one launch; a 16-bit call's GEMMs, and with
    ``tf32`` a float32 call's, on the tensor-core matmul) and every kernel the CUDA schedule's loop
    nest run on the host.  TF32 keeps float16's 10-bit mantissa: float16's bounds.  Returns the
    (op, dtype, few_rows) launched."""
    from fusedgrad.lstm import buffers as LB

    made = []

    def arrays_for(kind, device, call_dtype):
        if kind != "torch":
            return LB.HOST
        arrays = LB.TorchArrays(torch.device("cpu"), LB.gemm_dtype_for("cuda", call_dtype, tf32=tf32))
        arrays.target = "cuda"  # the GPU's kernels and kernel choice (main_rows), on host memory
        made.append(arrays)
        return arrays

    real = LB.kernel
    launched = set()

    def kernel(op, target="llvm", dtype="float32", tensor_cores=False, **variant):
        if target != "cuda":
            return real(op, target, dtype, tensor_cores, **variant)
        launched.add((op, dtype, variant.get("few_rows", False)))
        lib = cuda_loop_nests(op, dtype)
        plain = lib.kernel(op, dtype, variant, "llvm").func
        if not tensor_cores:
            return plain
        # a layer kernel's tensor_cores entry where buffers._co_resident takes it (the batch: the first
        # argument's second dimension)
        tiles = lib.kernel(op, dtype, {**variant, "tensor_cores": True}, "llvm").func

        def call(*args):
            if args[0].shape[1] < LB.TENSOR_CORE_MIN_BATCH:
                return plain(*args)
            launched.add((op, dtype, "tensor_cores"))
            return tiles(*args)
        return call

    monkeypatch.setattr(inputs, "arrays_for", arrays_for)
    monkeypatch.setattr(LB, "kernel", kernel)
    cfg = _as_torch(cfg)
    data = TL.make_data(cfg)
    if dtype != "float32":
        data = TL.rounded_data(data, dtype)
    ref, gates = TL.references(cfg, data)
    a = TL.api_inputs(cfg, data, dtype)
    fwd = TL.run_forward(cfg, a)
    bounds = "float16" if tf32 else dtype
    TL.check_forward(cfg, fwd, ref, gates, dtype, bounds=bounds)
    TL.check_backward(cfg, TL.run_backward(cfg, a, fwd), ref, a, dtype, bounds=bounds)
    assert made
    return launched


@pytest.mark.parametrize("cfg", [TL.CASES[k] for k in (1, 6, 10, 15, 16)])
def test_the_lstm_on_its_cuda_kernels_loop_nests_matches_torch(cfg, cuda_loop_nests, monkeypatch):
    """float32: test_lstm.py's bounds against float64 torch.nn.LSTM autograd, every kernel the CUDA
    schedule's loop nest (their index math, tiles and tails, in the whole LSTM)."""
    launched = _on_cuda_loop_nests(cfg, "float32", cuda_loop_nests, monkeypatch)
    assert {op for op, _, _ in launched} == LAYER_KERNELS  # the layer recurrence's persistent kernels
    if cfg.T * cfg.B >= 32:  # the whole-sequence GEMMs (no per-step ones) on the main entry
        assert ("matmul_packed", "float32", False) in launched


@pytest.mark.parametrize("cfg", TL.LOW_CASES)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_a_16_bit_lstm_on_a_gpu_runs_its_gemms_on_the_tensor_core_matmul(cfg, dtype, cuda_loop_nests, monkeypatch):
    """A float16 / bfloat16 call on a GPU: every GEMM on the tensor-core matmul in the call's dtype
    (x and the weights as given, h and dgates rounded once, float32 sums), the pointwise kernels in
    float32; test_lstm.py's reduced-precision bounds against float64 torch.nn.LSTM autograd."""
    launched = _on_cuda_loop_nests(cfg, dtype, cuda_loop_nests, monkeypatch)
    assert {op for op, _, _ in launched} == {"matmul", "lstm_layer_forward", "lstm_layer_backward", "column_sum"}
    assert {d for op, d, _ in launched if op == "matmul"} == {dtype}


@pytest.mark.parametrize("cfg", TL.LOW_CASES)
def test_a_float32_lstm_on_a_gpu_runs_tf32_gemms_where_cudnn_would(cfg, cuda_loop_nests, monkeypatch):
    """With TF32 allowed, a float32 call's GEMMs run on the tensor-core matmul in TF32 (operands
    rounded to TF32, float32 sums), within float16's bounds against float64 torch.nn.LSTM autograd;
    without, on matmul_packed (the test above)."""
    launched = _on_cuda_loop_nests(cfg, "float32", cuda_loop_nests, monkeypatch, tf32=True)
    assert {op for op, _, _ in launched} == {"matmul", "lstm_layer_forward", "lstm_layer_backward", "column_sum"}
    assert {d for op, d, _ in launched if op == "matmul"} == {"float32"}


def test_a_tf32_lstm_of_16_rows_takes_the_layer_kernels_tensor_core_entry(cuda_loop_nests, monkeypatch):
    """B >= 16 with TF32 allowed: the layer kernels' tensor_cores entry (their recurrent sums as the
    tensor cores' model computes them) in the whole LSTM, within float16's bounds."""
    cfg = TL.Cfg(L=1, D=2, T=4, B=17, I=6, H=9, kind="torch", seed=31)
    launched = _on_cuda_loop_nests(cfg, "float32", cuda_loop_nests, monkeypatch, tf32=True)
    assert {op for op, _, entry in launched if entry == "tensor_cores"} == {"lstm_layer_forward",
                                                                             "lstm_layer_backward"}


def test_tf32_follows_torchs_cudnn_flag(monkeypatch):
    """A CUDA call's float32 GEMMs are TF32 exactly when torch.backends.cudnn.allow_tf32 is set, as
    torch.nn.LSTM's are on cuDNN; a 16-bit call's are in its dtype either way; the host never."""
    from fusedgrad.lstm import buffers as LB

    assert LB.gemm_dtype_for("cuda", "float32") is None
    assert LB.gemm_dtype_for("cuda", "float32", tf32=True) == "float32"
    assert LB.gemm_dtype_for("cuda", "float16", tf32=False) == "float16"
    assert LB.gemm_dtype_for("llvm", "float32", tf32=True) is None
    for allowed in (True, False):
        monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", allowed)
        arrays = inputs.arrays_for("torch", torch.device("cuda"), "float32")
        assert arrays.gemm_dtype == ("float32" if allowed else None)
        assert inputs.arrays_for("torch", torch.device("cuda"), "bfloat16").gemm_dtype == "bfloat16"
