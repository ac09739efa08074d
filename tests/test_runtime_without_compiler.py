"""What runs on a machine whose TVM has its runtime but not its compiler library (the GPU machine
``benchmarks/gpu_check.py`` stages for: TVM's package without libtvm_compiler.so).  There, TVM's
target constructor and TIR builder are missing; loading artifacts, the operators' definitions
(shapes, samples, references) and the full LSTM's launch checks must not reach for them.  Each test
runs in a child process on a copy of the installed TVM package without that library, as staged."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

COMPILER = "libtvm_compiler.so"


@pytest.fixture(scope="module")
def runtime_only(tmp_path_factory):
    """A folder holding TVM's package as gpu_check stages it: everything but the compiler library."""
    import tvm

    package = Path(tvm.__file__).parent
    if not any(package.rglob(COMPILER)):
        pytest.skip(f"this TVM install has no {COMPILER} to leave out (a runtime-only build already)")
    site = tmp_path_factory.mktemp("tvm_runtime_only")
    shutil.copytree(package, site / "tvm", ignore=shutil.ignore_patterns(COMPILER, "__pycache__"))
    return site


def _run(site: Path, body: str, env=None) -> str:
    environ = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), *sys.path]), **(env or {}))
    head = f"import tvm\nassert tvm.__file__.startswith({str(site)!r}), tvm.__file__\n"
    proc = subprocess.run([sys.executable, "-c", head + textwrap.dedent(body)], capture_output=True, text=True,
                          timeout=300, env=environ, cwd=site)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_the_copy_has_no_compiler(runtime_only):
    """The child's TVM is really runtime-only: no target constructor, no TIR builder."""
    out = _run(runtime_only, """
        from fusedgrad.lowering import tvm_api
        print(tvm_api.has_compiler())
        try:
            from tvm.script.ir_builder import tirx  # noqa: F401
        except ImportError:
            print("no builder")
    """)
    assert out.split() == ["False", "no", "builder"]


def test_every_operator_definition_loads_samples_and_references_without_the_builder(runtime_only):
    out = _run(runtime_only, """
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


def test_host_and_device_kinds_are_told_apart_without_a_target(runtime_only):
    out = _run(runtime_only, """
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


def test_the_full_lstms_launch_check_needs_no_schedule(runtime_only):
    """The co-residency check before a layer kernel's launch reads the manifest alone (importing a
    CUDA schedule there needs the builder)."""
    pytest.importorskip("torch")
    out = _run(runtime_only, """
        import sys
        import torch
        from fusedgrad.lstm import buffers

        class Props:
            major, minor, multi_processor_count = 9, 0, 132

        torch.cuda.get_device_properties = lambda device: Props
        entry = {"kernels": [{"symbol": "fg_x", "grid_units": 8,
                              "dynamic_shared": {"bytes_per_h": 128, "up_to": 166912, "else": 4}}],
                 "device_kernels": [{"name": "fg_x_kernel", "threads": 128,
                                     "arch": {"sm_90": {"registers": 90, "shared_bytes": 49152}}}]}
        kernel = type("Kernel", (), {"symbol": "fg_x", "func": staticmethod(lambda *a: "ran")})
        print(buffers._co_resident(entry, [kernel])(None, torch.empty(1024, 256)))
        print("schedules imported:", any(m.startswith("fusedgrad.schedules.cuda") for m in sys.modules))
    """)
    assert out.strip().splitlines() == ["ran", "schedules imported: False"]


def test_a_missing_artifact_is_named_not_built(runtime_only, tmp_path):
    """Where no artifact matches this source, a runtime-only TVM says so and what to do; it does not
    start a build that dies inside TVM's missing compiler."""
    out = _run(runtime_only, """
        from fusedgrad import runtime
        try:
            runtime.artifact("column_sum", "float32", "cuda")
        except runtime.ArtifactError as e:
            print(e)
    """, env={"FUSEDGRAD_CACHE": str(tmp_path / "cache")})
    assert "column_sum cuda float32: no artifact built from this source" in out
    assert "this TVM has no compiler library to build one" in out and "FUSEDGRAD_ARTIFACTS" in out
    assert not any((tmp_path / "cache").rglob("*.so"))


def test_the_full_install_has_its_compiler():
    from fusedgrad.lowering import tvm_api

    assert tvm_api.has_compiler()


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
