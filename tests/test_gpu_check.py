"""benchmarks/gpu_check.py's parts that run without a GPU: the phased script it stages for the GPU
machine, the sections a phase names, and the schedule sweep's knob settings."""
from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import fusedgrad.schedules.cuda as cuda_rules
from fusedgrad.schedules.cuda import lstm_layer
from fusedgrad.schedules.cuda import matmul as cuda_matmul


@pytest.fixture(scope="module")
def gpu_check():
    path = Path(__file__).resolve().parent.parent / "benchmarks" / "gpu_check.py"
    spec = importlib.util.spec_from_file_location("gpu_check", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_the_staged_script_is_bash_and_each_phase_names_known_sections(gpu_check, tmp_path):
    script = tmp_path / "run.sh"
    script.write_text(gpu_check.RUN_SH)
    proc = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    phases = re.findall(r'^phase (\w+) "\$\{FG_(\w+)_S:-(\d+)\}" --sections ([\w,]+)', gpu_check.RUN_SH, re.M)
    assert [p[0] for p in phases] == ["layer", "lstm", "kernels", "sweep"]
    for name, env, _limit, sections in phases:
        assert env == name.upper()
        assert set(sections.split(",")) <= set(gpu_check.SECTIONS), name
    covered = {s for p in phases for s in p[3].split(",")}
    assert covered == set(gpu_check.SECTIONS)  # every section runs in some phase
    assert "timeout -s KILL" in gpu_check.RUN_SH


def test_check_refuses_an_unknown_section_before_touching_a_gpu(gpu_check, tmp_path):
    with pytest.raises(ValueError, match=r"sections: expected some of .* got unknown \['speeed'\]"):
        gpu_check.check(tmp_path, tmp_path / "out", sections=("numerics", "speeed"))
    assert not (tmp_path / "out").exists()


def test_swept_knobs_set_constants_and_answer_derived_knobs_for_their_module_only(gpu_check):
    fwd, bwd = lstm_layer.LstmLayerForward(), lstm_layer.LstmLayerBackward()
    shipped = (fwd.knob("UNITS"), fwd.knob("CHUNK"), lstm_layer.CHUNK)
    gemm = cuda_matmul.Matmul()
    stages = gemm.knob("STAGES")
    with gpu_check.swept_knobs("fusedgrad.schedules.cuda.lstm_layer", {"UNITS": 16, "CHUNK": 4}):
        assert (fwd.knob("UNITS"), bwd.knob("UNITS")) == (16, 16)  # derived from the target otherwise
        assert (fwd.knob("CHUNK"), lstm_layer.CHUNK) == (4, 4)  # a module constant
        assert gemm.knob("STAGES") == stages  # another module's knob: untouched
    assert (fwd.knob("UNITS"), fwd.knob("CHUNK"), lstm_layer.CHUNK) == shipped
    with pytest.raises(RuntimeError):
        with gpu_check.swept_knobs("fusedgrad.schedules.cuda.lstm_layer", {"UNITS": 16}):
            raise RuntimeError("a failed build")
    assert fwd.knob("UNITS") == shipped[0]  # restored after a failure too


def test_every_swept_setting_names_a_knob_of_its_rules(gpu_check):
    import importlib

    from fusedgrad.schedules import ScheduleRule

    for (op_name, module), settings in gpu_check.SWEEP.items():
        mod = importlib.import_module(module)
        rules = [r for r in cuda_rules.RULES if isinstance(r, ScheduleRule) and r.op == op_name
                 and type(r).__module__ == module]
        assert rules, (op_name, module)
        knobs = {k for r in rules for k in type(r).KNOBS} | {k for k in vars(mod) if k.isupper()}
        for params in settings:
            assert set(params) <= knobs, (op_name, params)


def test_every_swept_gemm_tile_fits_the_archs_shared_memory(gpu_check):
    """Each GEMM sweep point is a schedule the build accepts for the dtypes the sweep builds: its tiles'
    shared memory within the opt-in of the archs built (``Matmul.shape``; a point past it stops the
    staging at nvcc's report, after minutes of builds), its accumulators within the registers."""
    from fusedgrad import targets
    from fusedgrad.lowering import tvm_api

    tgt = tvm_api.target(targets.get("cuda").tvm_target())
    module = "fusedgrad.schedules.cuda.matmul"
    for params in gpu_check.SWEEP[("matmul", module)]:
        with gpu_check.swept_knobs(module, params):
            for dtype in ("float32", "float16"):
                cuda_matmul.Matmul().shape(tgt, dtype)
    with pytest.raises(ValueError, match="shared memory"):  # what the check catches: a 128 x 256 tile in TF32
        with gpu_check.swept_knobs(module, {"BN": 256}):
            cuda_matmul.Matmul().shape(tgt, "float32")
