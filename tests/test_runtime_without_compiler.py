"""What runs on a machine whose TVM has its runtime but not its compiler library (the GPU machine
``benchmarks/gpu_check.py`` stages for: TVM's package without libtvm_compiler.so).  There, TVM's
target constructor and TIR builder are missing; loading artifacts, the operators' definitions
(shapes, samples, references) and the full LSTM's launch checks must not reach for them.  Each
test takes them away in a fresh process and runs what the GPU machine runs."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

# run first in each child: TVM's TIR builder and target constructor made unreachable, as without
# libtvm_compiler.so (importing the builder fails there; Target has no constructor function)
_NO_COMPILER = textwrap.dedent("""
    import sys
    import tvm  # the full package imports the builder itself; the runtime-only one does not
    import tvm.target
    import tvm.script.ir_builder as _ib
    for name in ("tvm.tirx.script", "tvm.tirx.script.builder", "tvm.tirx.script.parser"):
        sys.modules[name] = None  # an import of any of them now raises ImportError
    _ib.__dict__.pop("tirx", None)  # the dialect is then looked up (and imported) again on first use

    class _NoTarget:
        def __init__(self, *a, **k):
            raise AttributeError("module 'tvm.target._ffi_api' has no attribute 'Target'")

    tvm.target.Target = _NoTarget
""")


def _run(body: str) -> str:
    proc = subprocess.run([sys.executable, "-c", _NO_COMPILER + textwrap.dedent(body)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_the_stand_in_takes_the_builder_away():
    """The child's stand-in is real: without it the TIR builder imports, with it that import fails."""
    out = _run("""
        try:
            from tvm.script.ir_builder import tirx  # noqa: F401
        except ImportError:
            print("no builder")
    """)
    assert out.strip() == "no builder"


def test_every_operator_definition_loads_samples_and_references_without_the_builder():
    out = _run("""
        import numpy as np
        from fusedgrad import te_defs
        rng = np.random.default_rng(0)
        for name in te_defs.names():
            op = te_defs.get(name)
            dims = op.shapes["odd, not a vector multiple"]
            sample = op.sample(dims, rng)
            ref = op.reference(**sample, **op.variants[0])
            assert ref and all(np.all(np.isfinite(v)) for v in ref.values() if v is not None), name
            print(name)
    """)
    from fusedgrad import te_defs

    assert sorted(out.split()) == sorted(te_defs.names())
    assert {"lstm_layer_forward", "lstm_layer_backward"} <= set(out.split())


def test_host_and_device_kinds_are_told_apart_without_a_target():
    out = _run("""
        from fusedgrad.lowering import tvm_api
        print(tvm_api.runs_on_host("llvm"), tvm_api.runs_on_host("c"), tvm_api.runs_on_host("cuda"))
        try:
            tvm_api.runs_on_host("bogus")
        except ValueError as e:
            print(e)
    """)
    first, second = out.strip().splitlines()
    assert first == "True True False"
    assert second.startswith("kind: expected a host kind ('llvm', 'c') or a device of [") and "got 'bogus'" in second


def test_the_full_lstms_launch_check_needs_no_schedule():
    """The co-residency check before a layer kernel's launch reads the manifest alone (importing a
    CUDA schedule there needs the builder)."""
    pytest.importorskip("torch")
    out = _run("""
        import torch
        from fusedgrad.lstm import buffers

        class Props:
            major, minor, multi_processor_count = 9, 0, 132

        torch.cuda.get_device_properties = lambda device: Props
        entry = {"kernels": [{"symbol": "fg_x", "grid_units": 8}],
                 "device_kernels": [{"name": "fg_x_kernel", "threads": 128,
                                     "arch": {"sm_90": {"registers": 90, "shared_bytes": 49152}}}]}
        print(buffers._co_resident(lambda *a: "ran", entry, "fg_x")(None, torch.empty(1024, 256)))
        print("schedules imported:", any(m.startswith("fusedgrad.schedules.cuda") for m in sys.modules))
    """)
    assert out.strip().splitlines() == ["ran", "schedules imported: False"]


def test_device_int32_vectors_are_made_once_and_kept():
    """TorchArrays.int32 (batch sizes on the device): the same tensor for the same values, so a call
    captured in a CUDA graph copies nothing from the host; a bounded number kept."""
    torch = pytest.importorskip("torch")
    from fusedgrad.lstm import buffers

    arrays = buffers.TorchArrays(torch.device("cpu"))
    a = arrays.int32([3, 2, 2, 1])
    assert a.dtype == torch.int32 and a.tolist() == [3, 2, 2, 1]
    assert arrays.int32(np.array([3, 2, 2, 1])) is a
    assert arrays.int32([3, 2, 1]) is not a
    for n in range(buffers.INT32_KEPT + 1):  # more distinct vectors than are kept: the oldest goes
        arrays.int32([n + 1000])
    assert len(buffers._INT32) <= buffers.INT32_KEPT
    assert arrays.int32([3, 2, 2, 1]) is not a and arrays.int32([3, 2, 2, 1]).tolist() == [3, 2, 2, 1]
