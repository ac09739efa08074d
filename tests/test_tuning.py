"""fusedgrad tune: meta-schedule over the hand schedules' knobs, records, builds using them, RPC."""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

import build_cache
from fusedgrad import cli, runtime, te_defs
from fusedgrad.lowering import build, tuning, tuning_records, tvm_api
from fusedgrad.targets import llvm

SHAPE = {"M": 64, "D": 96}


@pytest.fixture
def root(tmp_path, monkeypatch):
    monkeypatch.setenv(tuning_records.TUNING_ENV, str(tmp_path / "tuning"))
    build.cache_key.cache_clear()
    yield tmp_path / "tuning"
    build.cache_key.cache_clear()


def _write(root, op, dtype, key=None, **fields):
    """A summary record of (op, dtype) in ``root``: this machine class's, or the class folder ``key``."""
    path = tuning_records.record_path(op, "llvm", dtype, root)
    if key is not None:
        path = root / key / path.name
    path.parent.mkdir(parents=True, exist_ok=True)
    rec = {"format": tuning_records.FORMAT, "op": op, "target": "llvm", "dtype": dtype, "target_key": path.parent.name,
           "shape": dict(SHAPE), "knobs": {"COLUMNS": 64, "VECTOR": 8}, "tuned_ms": 1.0,
           "hand_ms": 2.0, "use": True, "trials": 4, "tvm": tvm_api.tvm_version()}
    rec.update(fields)
    path.write_text(json.dumps(rec))
    return path


def _check_kernel(out_dir, op_name="layer_norm_backward"):
    op = te_defs.get(op_name)
    lib = runtime.load(out_dir)
    sample = op.sample({"M": 37, "D": 53}, np.random.default_rng(3))
    arrays = {k: v.astype(np.float32) for k, v in sample.items()}
    from fusedgrad import api

    got = api.run(op_name, arrays, {}, {}, library=lib)
    ref = op.reference(**{k: v.astype(np.float64) for k, v in arrays.items()})
    for name, value in got.items():
        assert np.abs(value - ref[name]).max() / (np.abs(ref[name]).max() + 1) < 1e-5, name


def test_tune_writes_record_and_database(root):
    lines = []
    rec = tuning.tune("layer_norm_backward", "llvm", "float32", SHAPE, trials=4, per_round=2, out=lines.append)
    rounds = [line for line in lines if " records, " in line]  # one per round, between the stage lines
    assert len(rounds) == 2 and rounds[0].startswith("[2/4 trials") and rounds[1].startswith("[4/4 trials")
    assert lines[0].startswith("[0/4 trials") and "loading meta-schedule" in lines[0]
    path = tuning_records.record_path("layer_norm_backward", "llvm", "float32")
    assert json.loads(path.read_text()) == json.loads(json.dumps(rec))
    assert rec["shape"] == SHAPE and set(rec["knobs"]) == {"COLUMNS", "VECTOR"}
    assert rec["use"] == (rec["tuned_ms"] < tuning.MARGIN * rec["hand_ms"] and rec["knobs"] != rec["hand_knobs"])
    db = path.parent / path.stem
    records = [json.loads(line) for line in (db / "database_tuning_record.json").read_text().splitlines()]
    assert 1 <= len(records) <= 4
    assert (db / "database_workload.json").exists()
    # nothing left behind but the record and its database
    assert sorted(p.name for p in path.parent.iterdir()) == sorted([path.name, db.name])


def test_build_applies_a_record_only_when_it_won(root, tmp_path):
    path = _write(root, "layer_norm_backward", "float32", use=True)
    entry = build.build("layer_norm_backward", "llvm", "float32", tmp_path / "tuned")
    assert entry["tuning_records"]["used"] and entry["tuning_records"]["knobs"] == {"COLUMNS": 64, "VECTOR": 8}
    _check_kernel(tmp_path / "tuned")
    tuned_key, tuned_tir = build.cache_key("layer_norm_backward", "llvm", "float32"), entry["tir_sha256"]
    # the same record, slower than the hand schedule: never used
    build.cache_key.cache_clear()
    _write(root, "layer_norm_backward", "float32", use=False, tuned_ms=3.0)
    entry = build.build("layer_norm_backward", "llvm", "float32", tmp_path / "hand")
    key = tuning_records.target_key("llvm")
    assert entry["tuning_records"] == {"record": str(path.relative_to(root)), "for": key, "exact": True,
                                       "used": False, "knobs": None, "shape": SHAPE, "tuned_ms": 3.0,
                                       "hand_ms": 2.0}
    assert entry["tir_sha256"] != tuned_tir
    assert build.cache_key("layer_norm_backward", "llvm", "float32") != tuned_key
    # no record at all
    path.unlink()
    build.cache_key.cache_clear()
    assert build.build("layer_norm_backward", "llvm", "float32", tmp_path / "none")["tuning_records"] is None


@pytest.mark.parametrize("text, match", [
    ("{not json", "corrupt tuning record"),
    (json.dumps({"format": tuning_records.FORMAT}), "field 'op'"),
    (json.dumps({"format": 1}), "format 1, expected"),
    ("[]", "expected a JSON object"),
])
def test_corrupt_record_is_a_clear_error(root, tmp_path, text, match):
    path = _write(root, "layer_norm_backward", "float32")
    path.write_text(text)
    with pytest.raises(ValueError, match=match) as e:
        build.build("layer_norm_backward", "llvm", "float32", tmp_path / "out")
    assert str(path) in str(e.value)
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_record_from_another_tvm_is_named(root, tmp_path):
    path = _write(root, "layer_norm_backward", "float32", tvm="0.19.0")
    with pytest.raises(ValueError, match="a tuning record from TVM 0.19.0, this is TVM") as e:
        build.build("layer_norm_backward", "llvm", "float32", tmp_path / "out")
    assert str(path) in str(e.value)


def test_record_in_another_class_folder_is_refused(root):
    path = _write(root, "layer_norm_backward", "float32")
    path.write_text(json.dumps({**json.loads(path.read_text()), "target_key": "llvm-x86-64-v2-64c"}))
    with pytest.raises(ValueError, match="it is the record of .*llvm-x86-64-v2-64c"):
        tuning_records.knobs_for("layer_norm_backward", "llvm", "float32")


def _class_of(cpu):
    return llvm.cpu_facts(cpu, "x86_64-linux-gnu").isa_class


@pytest.mark.skipif(llvm.host_triple() != "x86_64-linux-gnu", reason="the classes below are x86-64's")
def test_records_are_keyed_by_isa_class_and_the_nearest_is_taken(root, monkeypatch):
    cores = os.cpu_count() or 1
    op = "layer_norm_backward"
    monkeypatch.setenv(llvm.MCPU_ENV, "skylake-avx512")
    assert tuning_records.target_key("llvm") == f"llvm-x86-64-v4-{cores}c"
    monkeypatch.setenv(llvm.MCPU_ENV, "znver3")
    assert (tuning_records.target_key("llvm") == f"llvm-x86-64-v3-{cores}c"
            == tuning_records.record_path(op, "llvm", "float32").parent.name)

    def taken():
        found = tuning_records.find(op, "llvm", "float32")
        return found and (found.key, found.exact)

    # a wider class's record never stands for a narrower build, nor another architecture's
    _write(root, op, "float32", key=f"llvm-x86-64-v4-{cores}c", knobs={"COLUMNS": 128})
    _write(root, op, "float32", key=f"llvm-aarch64-{cores}c", knobs={"COLUMNS": 128})
    assert taken() is None and tuning_records.knobs_for(op, "llvm", "float32") is None
    # a lower class stands in; of two, the nearer; then the nearer core count
    _write(root, op, "float32", key=f"llvm-x86-64-{cores}c", knobs={"COLUMNS": 64})
    assert taken() == (f"llvm-x86-64-{cores}c", False)
    _write(root, op, "float32", key=f"llvm-x86-64-v2-{cores + 9}c", knobs={"COLUMNS": 256})
    assert taken() == (f"llvm-x86-64-v2-{cores + 9}c", False)
    _write(root, op, "float32", key=f"llvm-x86-64-v2-{cores + 1}c", knobs={"COLUMNS": 512})
    assert taken() == (f"llvm-x86-64-v2-{cores + 1}c", False)
    assert tuning_records.knobs_for(op, "llvm", "float32") == {"COLUMNS": 512}
    # this machine's own class first
    _write(root, op, "float32", key=f"llvm-x86-64-v3-{cores + 5}c", knobs={"COLUMNS": 1024})
    assert taken() == (f"llvm-x86-64-v3-{cores + 5}c", False)
    _write(root, op, "float32", knobs={"COLUMNS": 64, "VECTOR": 8})
    assert taken() == (f"llvm-x86-64-v3-{cores}c", True)
    # the build for the wider class takes its own record
    monkeypatch.setenv(llvm.MCPU_ENV, "sapphirerapids")
    assert taken() == (f"llvm-x86-64-v4-{cores}c", True)


def test_installed_fusedgrad_writes_records_to_the_user_folder(tmp_path, monkeypatch):
    """Without $FUSEDGRAD_TUNING an installed fusedgrad tunes into the user's data folder (never into
    site-packages) and builds look there before the shipped records."""
    monkeypatch.delenv(tuning_records.TUNING_ENV, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    shipped = tmp_path / "site" / "fusedgrad" / "generated" / "tuning"
    monkeypatch.setattr(tuning_records, "shipped_root", lambda: shipped)
    monkeypatch.setattr(tuning_records, "_checkout", lambda: False)
    user = tmp_path / "data" / "fusedgrad" / "tuning"
    assert tuning_records.tuning_root() == user and tuning_records.search_roots() == [user, shipped]
    op = "layer_norm_backward"
    _write(shipped, op, "float32", knobs={"COLUMNS": 128})
    assert tuning_records.knobs_for(op, "llvm", "float32") == {"COLUMNS": 128}
    _write(user, op, "float32", knobs={"COLUMNS": 256})
    assert tuning_records.knobs_for(op, "llvm", "float32") == {"COLUMNS": 256}
    # from a checkout, the source tree's records are both written and read
    monkeypatch.setattr(tuning_records, "_checkout", lambda: True)
    assert tuning_records.tuning_root() == shipped and tuning_records.search_roots() == [shipped]


def test_record_with_unknown_knob_is_rejected(root, tmp_path):
    _write(root, "layer_norm_backward", "float32", knobs={"TILE": 4})
    with pytest.raises(ValueError, match="unknown knobs"):
        tuning_records.knobs_for("layer_norm_backward", "llvm", "float32")


@pytest.mark.parametrize("argv, match", [
    (["--op", "nope"], "op: expected one of"),
    (["--op", "layer_norm_backward", "--dtype", "float64"], "supports dtypes"),
    (["--op", "layer_norm_backward", "--target", "cuda"], "--target: expected a target that runs on this machine"),
    (["--op", "layer_norm_backward", "--target", "tpu"], "target: expected one of"),
    (["--op", "layer_norm_backward", "--shape", "M=4"], "--shape: expected"),
    (["--op", "layer_norm_backward", "--shape", "M=4,D=x"], "--shape: expected"),
    (["--op", "layer_norm_backward", "--trials", "0"], "--trials: expected an integer >= 1"),
    (["--op", "layer_norm_backward", "--rpc-tracker", "nohost"], "--rpc-tracker: expected HOST:PORT"),
    (["--op", "layer_norm_backward", "--rpc-key", "k"], "--rpc-key: only with --rpc-tracker"),
])
def test_bad_input(root, capsys, argv, match):
    assert cli.main(["tune"] + argv) == 2
    assert match in capsys.readouterr().err
    assert not root.exists()


def test_op_without_knobs_is_rejected(root, capsys, monkeypatch):
    from fusedgrad import schedules

    rule = schedules.rule_for("fusedgrad.schedules.llvm", "column_sum")
    monkeypatch.setattr(type(rule), "KNOBS", {})
    assert cli.main(["tune", "--op", "column_sum"]) == 2
    assert "expected an op with a tunable llvm schedule" in capsys.readouterr().err
    assert not root.exists()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_tracker(root, capsys):
    port = _free_port()
    assert cli.main(["tune", "--op", "layer_norm_backward", "--rpc-tracker", f"127.0.0.1:{port}",
                     "--rpc-key", "k", "--trials", "1"]) == 2
    assert f"--rpc-tracker: cannot reach 127.0.0.1:{port}" in capsys.readouterr().err
    assert not root.exists()


def test_interrupted_tuning_keeps_the_old_record(root, monkeypatch):
    path = _write(root, "layer_norm_backward", "float32")
    before = path.read_text()

    def boom(*a, **k):
        raise RuntimeError("measurement failed")
    monkeypatch.setattr(tuning, "_time", boom)
    with pytest.raises(RuntimeError, match="measurement failed"):
        tuning.tune("layer_norm_backward", "llvm", "float32", SHAPE, trials=1, per_round=1, out=lambda s: None)
    assert path.read_text() == before
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]


def _start(args):
    return subprocess.Popen([sys.executable, "-m"] + args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)


def _until(ready, procs) -> None:
    """Poll ``ready()`` until it holds, failing as soon as one of the started ``procs`` has exited;
    no deadline: how long TVM takes to start on a loaded machine is not what the test checks."""
    while not ready():
        for p in procs:
            assert p.poll() is None, f"{p.args[2]} exited with status {p.returncode}"
        time.sleep(0.2)


def test_distributed_over_rpc_tracker(root):
    """A tracker and two rpc_servers on 127.0.0.1 (free ports); trials measured through them;
    exactly the started process groups are stopped."""
    import tvm.rpc

    port = _free_port()
    procs = [_start(["tvm.exec.rpc_tracker", "--host", "127.0.0.1", "--port", str(port),
                     "--port-end", str(port + 1), "--silent"])]
    try:
        def tracker_listens() -> bool:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return True
            except OSError:
                return False

        _until(tracker_listens, procs)
        for _ in range(2):
            sp = _free_port()
            procs.append(_start(["tvm.exec.rpc_server", "--tracker", f"127.0.0.1:{port}", "--key", "fg-test",
                                 "--host", "127.0.0.1", "--port", str(sp), "--port-end", str(sp + 1), "--silent"]))

        def servers() -> list:
            summary = tvm.rpc.connect_tracker("127.0.0.1", port).summary()
            return [s for s in summary.get("server_info", []) if "fg-test" in str(s.get("key", ""))]

        _until(lambda: len(servers()) == 2, procs)  # each imports TVM before it registers
        rec = tuning.tune("layer_norm_backward", "llvm", "float32", SHAPE, trials=2, per_round=2,
                          rpc=("127.0.0.1", port, "fg-test"), out=lambda s: None)
        assert rec["rpc"] == f"127.0.0.1:{port} key fg-test"
        path = tuning_records.record_path("layer_norm_backward", "llvm", "float32")
        lines = (path.parent / path.stem / "database_tuning_record.json").read_text().splitlines()
        assert len(lines) >= 1
        secs = [s for line in lines for s in json.loads(line)[1][1]]
        # each candidate measured on a server: a time, not the failed-run sentinel
        assert secs and all(0 < s < tuning.FAILED_RUN_SECS for s in secs), secs
    finally:
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for p in procs:
            p.wait(timeout=30)
    assert all(p.poll() is not None for p in procs)


def test_cli_tune_reports_progress_and_verdict(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv(tuning_records.TUNING_ENV, raising=False)
    assert cli.main(["tune", "--op", "lstm_cell_backward", "--shape", "N=20,H=33", "--trials", "2",
                     "--generated", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert "tuning lstm_cell_backward llvm float32 at N=20,H=33: 2 trials" in out
    assert "used by builds" in out or "not used: not faster" in out
    # progress on stderr, a line as each stage begins: [trials done/trials, seconds since the start]
    stages = [re.sub(r"^\[(\d+)/2 trials, \d+ s\] ", r"\1: ", line) for line in err.splitlines()
              if line.startswith("[")]
    assert stages[:3] == ["0: loading meta-schedule",
                          "0: starting meta-schedule's measuring worker (a process that imports TVM)",
                          "0: building and measuring 2 candidate schedules"], err
    assert re.fullmatch(r"2: \d+ records, (best .* ms with .*|no successful measurement yet)", stages[3]), err
    assert stages[4:] == ["2: timing the best and the hand schedule side by side"], err
    path = tuning_records.record_path("lstm_cell_backward", "llvm", "float32", tmp_path / "tuning")
    rec = json.loads(path.read_text())
    assert rec["shape"] == {"N": 20, "H": 33} and rec["trials"] == 2
    assert rec["target_key"] == tuning_records.target_key("llvm") and rec["cpu"] == (llvm.host_cpu() or "generic")


def test_generate_check_ignores_tuning_records(tmp_path):
    from fusedgrad.lowering import sources

    # the CPU sources are the only ones a tuning record could reach (records are for llvm)
    committed = tmp_path / "generated"
    sources.write_all(committed, ["llvm"])
    _write(committed / "tuning", "layer_norm_backward", "float32")
    assert cli.main(["generate", "--check", "--target", "llvm", "--generated", str(committed)]) == 0


TUNABLE = ("lstm_cell_backward", "layer_norm_backward", "lstm_cell_forward", "lstm_step_backward",
           "matmul_packed", "column_sum", "pack_b", "pack_bt", "lstm_layer_forward", "lstm_layer_backward")


@pytest.mark.parametrize("knobs", [{"MR": 1, "KU": 4, "MB": 8, "NP": 64}, {"MR": 8, "KU": 2, "MB": 16, "NP": 32}])
def test_matmul_register_tile_and_k_unroll_keep_the_bits(root, tmp_path, knobs):
    """The GEMM's space spans the register tile's rows and k unrolling; every point computes the same
    sum in the same order (k increasing in one accumulator), so the bits equal the hand schedule's."""
    from fusedgrad import api

    op = te_defs.get("matmul_packed")
    dims = op.shapes["odd, not a vector multiple"]
    sample = op.sample(dims, np.random.default_rng(7))
    arrays = {k: v.astype(np.float32) for k, v in sample.items()}
    variant = op.variants[0]
    specs = {t.name: t for t in op.inputs}
    given = {k: (v if op.present(specs[k], variant) else None) for k, v in arrays.items()}
    build.build("matmul_packed", "llvm", "float32", tmp_path / "hand")
    hand = api.run("matmul_packed", given, {}, variant, library=runtime.load(tmp_path / "hand"))
    _write(root, "matmul_packed", "float32", knobs=knobs)
    build.cache_key.cache_clear()
    entry = build.build("matmul_packed", "llvm", "float32", tmp_path / "tuned")
    assert entry["tuning_records"]["knobs"] == knobs
    tuned = api.run("matmul_packed", given, {}, variant, library=runtime.load(tmp_path / "tuned"))
    for name, value in hand.items():
        if value is not None:
            assert np.array_equal(value, tuned[name]), name


POINT = re.compile(r"  (\{.*\}): (\d+\.\d+) ms")


@pytest.mark.parametrize("op_name", TUNABLE)
def test_every_tunable_op_tunes_and_builds(root, tmp_path, op_name):
    import ast

    from fusedgrad import schedules

    op = te_defs.get(op_name)
    rule = schedules.rule_for("fusedgrad.schedules.llvm", op_name)
    assert rule.KNOBS and set(rule.defaults()) == set(rule.KNOBS)
    dims = op.shapes["odd, not a vector multiple"]
    lines = []
    rec = tuning.tune(op_name, "llvm", "float32", dims, trials=2, per_round=2, out=lines.append)
    assert set(rec["knobs"]) == set(rule.KNOBS)
    assert all(rec["knobs"][k] in rule.KNOBS[k] for k in rule.KNOBS)
    # the report shows each measured point's knobs and time, one line per record of the database
    path = tuning_records.record_path(op_name, "llvm", "float32")
    db = (path.parent / path.stem / "database_tuning_record.json").read_text().splitlines()
    points = [POINT.fullmatch(line) for line in lines if line.startswith("  ")]
    assert len(points) == len(db) and all(points), lines
    shown = [(ast.literal_eval(m[1]), float(m[2])) for m in points]
    assert all(set(k) == set(rule.KNOBS) and all(k[n] in rule.KNOBS[n] for n in k) for k, _ in shown)
    best = next(line for line in lines if " records, best " in line)
    assert best.endswith(f"best {min(ms for _, ms in shown):.3f} ms with {rec['knobs']}"), (best, shown)
    # whatever won, the build with those knobs is correct
    path = tuning_records.record_path(op_name, "llvm", "float32")
    path.write_text(json.dumps({**rec, "use": True, "knobs": rec["knobs"]}))
    build.cache_key.cache_clear()
    entry = build.build(op_name, "llvm", "float32", tmp_path / "out")
    assert entry["tuning_records"]["used"]
    lib = runtime.load(tmp_path / "out")
    from fusedgrad import api

    sample = op.sample(dims, np.random.default_rng(5))
    fixed = {t.name: t.dtype for t in op.inputs if t.dtype}  # e.g. the layers' batch_sizes: int32
    arrays = {k: v.astype(fixed.get(k, np.float32)) for k, v in sample.items()}
    variant = op.variants[0]
    specs = {t.name: t for t in op.inputs}
    given = {k: (v if op.present(specs[k], variant) else None) for k, v in arrays.items()}
    got = api.run(op_name, given, {}, variant, library=lib)
    ref = op.reference(**{k: (v.astype(np.float64) if v is not None else None) for k, v in given.items()},
                       **variant)
    for name, value in got.items():
        if value is not None:
            r = ref[name].reshape(np.shape(value))
            assert np.abs(value - r).max() / (np.abs(r).max() + 1) < 1e-5, name


_LAYER_HAND = {}  # op -> the hand schedule's outputs on the sample below (built once per session)


# knob points of the layer kernels: at least two differ from whatever this machine's defaults are; the
# smallest tile and the largest the tuner may pick (past TVM's stack limit in one buffer on AVX-512:
# lstm_layer._Registers) come first
_LAYER_POINTS = ({"UNITS_VECTORS": 1, "ROWS": 1}, {"UNITS_VECTORS": 4, "ROWS": 8}, {"UNITS_VECTORS": 2, "ROWS": 4},
                 {"UNITS_VECTORS": 1, "ROWS": 8})


@pytest.mark.parametrize("op_name", ["lstm_layer_forward", "lstm_layer_backward"])
@pytest.mark.parametrize("point", range(2))
def test_layer_kernel_knobs_keep_the_bits(root, tmp_path, op_name, point):
    """The layer kernels' space spans the units per chunk and the rows per register tile; every point
    sums in the definition's order, so a build with any point's record gives the hand schedule's bits
    (every variant, with a short final chunk and a partial row tile: H=37, B=5).  The points are the
    ``point``-th of _LAYER_POINTS other than the defaults (derived from this machine's registers)."""
    from fusedgrad import api, schedules

    rule = schedules.rule_for("fusedgrad.schedules.llvm", op_name)
    knobs = [p for p in _LAYER_POINTS if p != rule.defaults()][point]
    assert all(v in rule.KNOBS[k] for k, v in knobs.items())
    op = te_defs.get(op_name)
    dims = op.shapes["odd, not a vector multiple"]
    sample = op.sample(dims, np.random.default_rng(11))
    arrays = {t.name: sample[t.name].astype(t.dtype or "float32") for t in op.inputs}

    def run(out_dir):
        lib = runtime.load(out_dir)
        return [api.run(op_name, arrays, {}, variant, library=lib) for variant in op.variants]

    # both built by lowering.build.build, or copied from an earlier build of the same cache key (which
    # holds the knobs a record applies): build_cache.artifact
    if op_name not in _LAYER_HAND:
        assert build_cache.artifact(op_name, "llvm", "float32", tmp_path / "hand")["tuning_records"] is None
        _LAYER_HAND[op_name] = run(tmp_path / "hand")
    _write(root, op_name, "float32", knobs=knobs, shape=dims)
    build.cache_key.cache_clear()
    assert build_cache.artifact(op_name, "llvm", "float32", tmp_path / "tuned")["tuning_records"]["knobs"] == knobs
    for hand, tuned in zip(_LAYER_HAND[op_name], run(tmp_path / "tuned")):
        assert set(hand) == set(tuned)
        for name, value in hand.items():
            if value is not None:
                assert np.array_equal(value, tuned[name]), (name, knobs)
