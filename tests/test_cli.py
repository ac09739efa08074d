"""The command line: list, generate into a folder, --check against committed sources."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fusedgrad import cli, targets
from fusedgrad.lowering import build as build_mod
from fusedgrad.lowering import sources

ROOT = Path(__file__).resolve().parents[1]


def test_list_names_ops_targets_dtypes(capsys):
    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out
    for word in ("lstm_cell_backward", "layer_norm_backward", "llvm", "bfloat16", "storage[N,4*H]"):
        assert word in out


def test_generate_builds_and_checks(tmp_path, capsys, monkeypatch):
    from fusedgrad import timing

    timed, median_time = [], timing.median_time
    monkeypatch.setattr(timing, "median_time", lambda fn, *a: timed.append(fn) or median_time(fn, *a))
    rc = cli.main(["generate", "--op", "layer_norm_backward", "--dtype", "float32", "--out", str(tmp_path)])
    out, err = capsys.readouterr()
    assert rc == 0
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert [(a["op"], a["dtype"]) for a in manifest["artifacts"]] == [("layer_norm_backward", "float32")]
    row = next(line for line in out.splitlines() if line.startswith("| layer_norm_backward"))
    assert "| ok " in row
    # the check times fusedgrad's call alone: at its tiny case a competitor's time over ours would
    # compare per-call overheads, not kernels, so the table gives no speed ratio
    assert len(timed) == 1
    header = next(line for line in out.splitlines() if line.startswith("| op "))
    columns = [c.strip() for c in header.strip("|").split("|")]
    assert not [c for c in columns if "vs" in c], columns  # no speed ratio
    assert len(row.strip("|").split("|")) == len(columns) and float(row.strip("|").split("|")[-1]) > 0
    # a progress line on stderr as each step begins, with the seconds since the command began
    steps = [line for line in err.splitlines() if line.startswith("[1/1, ")]
    assert [s.split("] ", 1)[1] for s in steps] == [
        "building layer_norm_backward llvm float32",
        f"checking layer_norm_backward float32 {manifest['artifacts'][0]['isa_class']} against the float64 reference"]
    assert all(s.split("] ")[0].endswith(" s") for s in steps), steps


_CALL_WITHOUT_BUILDING = """
import sys, numpy as np
import fusedgrad.lowering.build as b
def no_build(*a, **k):
    raise SystemExit("the API built although fusedgrad generate had built this artifact")
b.build = no_build
import fusedgrad
from fusedgrad import runtime
rng = np.random.default_rng(0)
x, dy = rng.standard_normal((2, 3, 5), np.float32), rng.standard_normal((2, 3, 5), np.float32)
mean, var = x.mean(-1), x.var(-1)
fusedgrad.layer_norm_backward(x, dy, mean, var, np.ones(5, np.float32))
print(runtime.artifact("layer_norm_backward", "float32").path)
"""


def test_generate_fills_the_api_cache(tmp_path, capsys, monkeypatch):
    """After `fusedgrad generate` the Python API, in a fresh process and without FUSEDGRAD_ARTIFACTS,
    calls the library generate built and builds nothing; --no-cache leaves the cache alone."""
    cache, out = tmp_path / "cache", tmp_path / "build"
    monkeypatch.setenv("FUSEDGRAD_CACHE", str(cache))
    monkeypatch.delenv("FUSEDGRAD_ARTIFACTS", raising=False)
    args = ["generate", "--op", "layer_norm_backward", "--dtype", "float32", "--out", str(out)]
    assert cli.main(args + ["--no-cache"]) == 0
    assert not cache.exists()
    assert "kernel cache" not in capsys.readouterr().out
    assert cli.main(args) == 0
    assert f"they are in its kernel cache {cache}/ (1 put there now, 0 there already)" in capsys.readouterr().out
    entry = json.loads((out / "manifest.json").read_text())["artifacts"][0]
    slot = cache / entry["cache_key"]
    assert sorted(p.name for p in cache.iterdir()) == [slot.name]  # no temporary folder left
    assert (slot / entry["library"]).read_bytes() == (out / entry["library"]).read_bytes()
    assert json.loads((slot / "manifest.json").read_text())["artifacts"] == [entry]
    # byte for byte what the API would have built into that slot
    api = tmp_path / "api"
    build_mod.build("layer_norm_backward", "llvm", "float32", api)
    assert sorted(p.name for p in api.iterdir()) == sorted(p.name for p in slot.iterdir())
    assert all((api / p.name).read_bytes() == p.read_bytes() for p in slot.iterdir())
    before = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in slot.iterdir()}
    child = subprocess.run([sys.executable, "-c", _CALL_WITHOUT_BUILDING], capture_output=True, text=True,
                           timeout=600, env={k: v for k, v in os.environ.items() if k != "FUSEDGRAD_ARTIFACTS"})
    assert child.returncode == 0, child.stderr[-3000:]
    assert child.stdout.strip() == str(slot)
    assert {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in slot.iterdir()} == before


def test_generate_rejects_unsupported_dtype(tmp_path, capsys):
    rc = cli.main(["generate", "--dtype", "float64", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 2
    assert "float64" in err and "llvm" in err
    assert not (tmp_path / "manifest.json").exists()


@pytest.mark.parametrize("target", ["llvm", "cuda", "dsp", "ascend"])
def test_sources_are_deterministic_and_committed_ones_current(tmp_path, target):
    """One fresh generation of each target: byte for byte the committed tree, which another process
    wrote at another time (so generation is deterministic across runs, and the commit is current);
    outside a source checkout, a second generation in this process stands in for the committed one."""
    a = sources.write_all(tmp_path / "a", [target])
    assert a and {r.split("/")[0] for r in a} == {target}
    committed = ROOT / "generated"
    if not committed.is_dir():
        committed = tmp_path / "b"
        assert sources.write_all(committed, [target]) == a
    on_disk = sorted(str(p.relative_to(committed)) for p in (committed / target).rglob("*") if p.is_file())
    assert on_disk == a, "committed generated/ differs in its file list: run `fusedgrad generate --sources`"
    for rel in a:
        text = (tmp_path / "a" / rel).read_text()
        comment = "//" if rel.endswith((".cu", ".c", ".h", ".cpp")) else "#"
        assert text.startswith(f"{comment} generated by fusedgrad -- do not edit")
        assert str(tmp_path) not in text
        assert text == (committed / rel).read_text(), f"{rel} differs: run `fusedgrad generate --sources`"


def test_every_target_has_committed_sources():
    """Every registered target is one of the four checked above, and the committed folder holds
    their trees and the tuning records only."""
    assert set(targets.names()) == {"llvm", "cuda", "dsp", "ascend"}
    if (ROOT / "generated").is_dir():
        assert {p.name for p in (ROOT / "generated").iterdir() if p.is_dir()} <= {"llvm", "cuda", "dsp", "ascend",
                                                                                   "tuning"}


def test_check_passes_on_current_and_detects_stale_sources(tmp_path, capsys):
    """The CLI's --check, on one target's committed sources (the cheapest to generate; the full
    comparison is the test above): a match, then an edited file, a missing one and a stray one;
    then --sources for that target repairs the folder."""
    if not (ROOT / "generated").is_dir():
        pytest.skip("not running from a source checkout")
    committed = tmp_path / "generated"
    shutil.copytree(ROOT / "generated" / "ascend", committed / "ascend")
    check = ["generate", "--check", "--target", "ascend", "--generated", str(committed)]
    assert cli.main(check) == 0
    out, err = capsys.readouterr()
    assert "match a fresh generation" in out
    assert err.startswith("[1/1, ") and err.splitlines()[0].endswith(" s] generating the ascend sources"), err
    files = sorted(p for p in (committed / "ascend").rglob("*") if p.is_file())
    edited, removed = files[0], files[1]
    edited.write_text(edited.read_text() + "// edited\n")
    removed.unlink()
    (committed / "ascend" / "stray.txt").write_text("left over\n")
    assert cli.main(check) == 1
    err = capsys.readouterr().err
    for line in (f"differs: {edited.relative_to(committed)}", f"missing: {removed.relative_to(committed)}",
                 "not generated any more: ascend/stray.txt"):
        assert line in err, err
    # --sources rewrites that target's folder whole (the stray file goes) and no other target's
    assert cli.main(["generate", "--sources", "--target", "ascend", "--generated", str(committed)]) == 0
    assert sorted(p.name for p in committed.iterdir()) == ["ascend"]
    assert not (committed / "ascend" / "stray.txt").exists()
    assert cli.main(check) == 0


def test_sources_failing_part_way_leave_the_folder_as_it_was(tmp_path, monkeypatch):
    """--sources makes a target's files before it replaces its folder: a generator that fails
    after writing some files leaves the existing folder byte for byte, and nothing beside it."""
    committed = tmp_path / "generated"
    (committed / "dsp").mkdir(parents=True)
    (committed / "dsp" / "kept.h").write_text("// kept\n")

    def fails_part_way(root, names):
        (root / names[0]).mkdir(parents=True, exist_ok=True)
        (root / names[0] / "half.h").write_text("// half written\n")
        raise RuntimeError("a schedule failed")

    monkeypatch.setattr(cli._sources, "write_all", fails_part_way)
    with pytest.raises(RuntimeError, match="a schedule failed"):
        cli.main(["generate", "--sources", "--target", "dsp", "--generated", str(committed)])
    assert [p.name for p in committed.iterdir()] == ["dsp"]
    assert [p.name for p in (committed / "dsp").iterdir()] == ["kept.h"]
    assert (committed / "dsp" / "kept.h").read_text() == "// kept\n"


def test_console_script_runs():
    exe = shutil.which("fusedgrad") or None
    cmd = [exe, "--version"] if exe else [sys.executable, "-m", "fusedgrad.cli", "--version"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    assert out.startswith("fusedgrad ")


def test_the_command_says_it_is_loading_before_tvm_is_imported():
    """`import fusedgrad` does not load TVM (the API's functions come on first use), so the command
    can say what it is doing during the import, which takes about 20 s on a cold start; the API's
    names still import as before."""
    code = ("import sys, fusedgrad; assert 'tvm' not in sys.modules, 'tvm imported'; "
            "from fusedgrad import launch; launch.NOTICE_S = 0.0; rc = launch.main(['list']); "
            "from fusedgrad import lstm_forward, lstm_backward, lstm_cell_backward, layer_norm_backward; "
            "assert callable(fusedgrad.layer_norm_backward); sys.exit(rc)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr.startswith("fusedgrad: loading TVM"), proc.stderr[:500]
    assert "\n  llvm: " in proc.stdout


def test_every_target_is_listed_and_named_in_errors(capsys):
    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out
    for name in ("llvm", "cuda", "dsp", "ascend"):
        assert f"\n  {name}: " in out
    assert cli.main(["generate", "--target", "bogus"]) == 2
    err = capsys.readouterr().err
    assert "'bogus'" in err and all(repr(t) in err for t in ("llvm", "cuda", "dsp", "ascend"))


@pytest.mark.parametrize("target", ["dsp", "ascend"])
def test_source_target_generates_into_out(target, tmp_path, capsys):
    """A source target writes its package where --out says, with a manifest, and nowhere else."""
    before = sorted(p.stat().st_mtime_ns for p in (ROOT / "generated" / target).rglob("*") if p.is_file())
    out = tmp_path / "out"
    assert cli.main(["generate", "--target", target, "--out", str(out)]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    info = cli._targets.get(target)
    assert sorted((a["op"], a["dtype"]) for a in manifest["artifacts"]) == \
        sorted((o, d) for o in info.ops for d in info.dtypes_for(o))
    files = manifest["artifacts"][0]["files"]
    assert files and all((out / rel).is_file() for rel in files)
    assert sorted(p.stat().st_mtime_ns for p in (ROOT / "generated" / target).rglob("*") if p.is_file()) == before
    # the same files as the committed sources of that target
    assert sorted(files) == sorted(str(p.relative_to(ROOT / "generated" / target))
                                   for p in (ROOT / "generated" / target).rglob("*") if p.is_file())
    said = capsys.readouterr().out
    assert "written" in said
    folders = sorted({rel.split("/")[0] + "/" for rel in files})
    assert f"(folders written under {out}/: {', '.join(folders)})" in said
    if target == "ascend":  # the full LSTM's package, which has no row of its own
        assert "lstm/" in folders


def test_source_target_refuses_a_subset(tmp_path, capsys):
    rc = cli.main(["generate", "--target", "dsp", "--op", "layer_norm_backward", "--out", str(tmp_path / "o")])
    assert rc == 2
    assert "packaged whole" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


# --------------------------------------------------------------------------- --cpu / --triple
# run in a child process: the choice reaches the llvm record through its environment variables


def _generate_for(out: Path, *extra: str, op: str = "layer_norm_backward") -> subprocess.CompletedProcess:
    code = (f"import sys; from fusedgrad import cli; sys.exit(cli.main(['generate', '--op', {op!r}, "
            f"'--dtype', 'float32', '--out', {str(out)!r}] + {list(extra)!r}))")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=900)


def _elf_machine(path: Path) -> int:
    return int.from_bytes(path.read_bytes()[18:20], "little")  # e_machine: 62 x86-64, 183 aarch64


@pytest.mark.parametrize("op", ["layer_norm_backward", "matmul_packed"])
def test_generate_for_a_named_cpu_this_machine_runs(tmp_path, op):
    # x86-64-v3 (AVX2, FMA, F16C): every machine of the AVX2 and AVX-512 classes runs it, so it is
    # checked against the reference (the GEMM with its AVX2 register tile)
    from fusedgrad.targets import llvm

    if llvm.host_triple() != "x86_64-linux-gnu" or llvm.cannot_run({"kind": "llvm", "mcpu": "x86-64-v3"}):
        pytest.skip("this machine is not an x86-64 with AVX2")
    r = _generate_for(tmp_path, "--cpu", "x86-64-v3", op=op)
    assert r.returncode == 0, r.stderr
    assert "building for CPU x86-64-v3 (x86_64-linux-gnu): avx2, 256-bit vectors x 16" in r.stdout
    entry = json.loads((tmp_path / "manifest.json").read_text())["artifacts"][0]
    assert entry["tvm_target"]["mcpu"] == "x86-64-v3"
    row = next(line for line in r.stdout.splitlines() if line.startswith(f"| {op}"))
    assert "| ok " in row  # run against the reference here


def test_generate_for_another_architecture_is_built_not_run(tmp_path):
    from fusedgrad.targets import llvm

    try:
        llvm.linker({"kind": "llvm", "mtriple": "aarch64-linux-gnu"})
    except ValueError as e:
        if os.environ.get("FUSEDGRAD_CROSS_REQUIRED"):
            raise
        pytest.skip(str(e))
    r = _generate_for(tmp_path, "--triple", "aarch64-linux-gnu", "--cpu", "neoverse-n1")
    assert r.returncode == 0, r.stderr
    entry = json.loads((tmp_path / "manifest.json").read_text())["artifacts"][0]
    assert entry["tvm_target"]["mtriple"] == "aarch64-linux-gnu" and entry["tvm_target"]["mcpu"] == "neoverse-n1"
    assert _elf_machine(tmp_path / entry["library"]) == 183  # linked by the cross compiler: an aarch64 library
    row = next(line for line in r.stdout.splitlines() if line.startswith("| layer_norm_backward"))
    assert "| built " in row
    assert "not run here: built for aarch64-linux-gnu, this machine is" in r.stdout


@pytest.mark.parametrize("extra, names", [
    (["--cpu", "nosuchcpu"], "cpu: 'nosuchcpu' is not a CPU LLVM knows for"),
    (["--triple", "riscv64-linux-gnu"], "triple: expected an x86_64-* or aarch64-* triple, got 'riscv64-linux-gnu'"),
    (["--target", "dsp", "--cpu", "haswell"], "--cpu/--triple: target 'dsp' does not build for a named CPU"),
])
def test_generate_for_a_bad_cpu_or_triple_is_named(tmp_path, extra, names):
    r = _generate_for(tmp_path, *extra)
    assert r.returncode == 2 and names in r.stderr, r.stderr
    assert not (tmp_path / "manifest.json").exists()  # refused before anything is built


@pytest.fixture
def cpu_env(monkeypatch):
    """`generate --cpu` sets the llvm record's variables in this process: restore them (and drop the
    cache keys computed under them) after the test."""
    from fusedgrad.lowering import build as build_mod
    from fusedgrad.targets import llvm

    for var in (llvm.MCPU_ENV, llvm.MTRIPLE_ENV):
        monkeypatch.setenv(var, os.environ.get(var, ""))  # recorded: the test's changes are undone
        monkeypatch.delenv(var)
    yield
    build_mod.cache_key.cache_clear()


def test_generate_several_cpus_into_one_folder(tmp_path, capsys, cpu_env):
    # --cpu repeated: one library per ISA class in one folder, each row saying its class and whether
    # this machine runs it; two runs with one --cpu each (either order) make the same folder
    from fusedgrad.targets import llvm

    if llvm.host_triple() != "x86_64-linux-gnu" or llvm.cannot_run({"kind": "llvm", "mcpu": "haswell"}):
        pytest.skip("this machine is not an x86-64 with AVX2")
    v4_here = llvm.cannot_run({"kind": "llvm", "mcpu": "skylake-avx512"}) is None
    args = ["generate", "--op", "column_sum", "--dtype", "float32", "--out"]
    once, twice = tmp_path / "once", tmp_path / "twice"
    assert cli.main(args + [str(once), "--cpu", "haswell", "--cpu", "skylake-avx512"]) == 0
    out = capsys.readouterr().out
    rows = [[c.strip() for c in line.split("|")[1:7]] for line in out.splitlines() if line.startswith("| column_sum")]
    assert rows == [["column_sum", "float32", "x86-64-v3", "yes", "1", rows[0][5]],
                    ["column_sum", "float32", "x86-64-v4", "yes" if v4_here else "no", "1", rows[1][5]]]
    assert f"column_sum float32 -> {'x86-64-v4' if v4_here else 'x86-64-v3'}" in out  # what runtime.load picks
    manifest = json.loads((once / "manifest.json").read_text())
    assert [a["isa_class"] for a in manifest["artifacts"]] == ["x86-64-v3", "x86-64-v4"]
    assert [a["tvm_target"]["mcpu"] for a in manifest["artifacts"]] == ["haswell", "skylake-avx512"]
    assert cli.main(args + [str(twice), "--cpu", "skylake-avx512"]) == 0
    assert cli.main(args + [str(twice), "--cpu", "haswell"]) == 0
    files = sorted(p.name for p in once.iterdir())
    assert files == sorted(p.name for p in twice.iterdir())
    for name in files:
        assert (once / name).read_bytes() == (twice / name).read_bytes(), name


def test_generate_two_cpus_of_one_class_is_refused(tmp_path, capsys, cpu_env):
    from fusedgrad.targets import llvm

    if llvm.host_triple() != "x86_64-linux-gnu":
        pytest.skip("names x86-64 CPUs for this machine's triple")
    rc = cli.main(["generate", "--op", "column_sum", "--out", str(tmp_path / "o"), "--cpu", "haswell",
                   "--cpu", "znver3"])
    assert rc == 2
    assert "'haswell' and 'znver3' are both of ISA class x86-64-v3" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


# --------------------------------------------------------------------------- path options


@pytest.fixture
def no_work(monkeypatch):
    """Every command's work fails the test: a refusal must come before any of it."""
    from fusedgrad import lstm
    from fusedgrad.bench import kernels
    from fusedgrad.lowering import tuning

    def began(*a, **k):
        pytest.fail("work began before the path was refused")

    monkeypatch.setattr(cli._packagers, "get", began)
    monkeypatch.setattr(cli._sources, "write_all", began)
    monkeypatch.setattr(lstm, "plan", began)
    monkeypatch.setattr(tuning, "tune", began)
    monkeypatch.setattr(kernels, "run", began)


def _refusal(argv: list[str], capsys) -> tuple[int, str]:
    """Exit status and stderr of a command that is refused (the bench's parser exits instead of returning)."""
    try:
        rc = cli.main(argv)
    except SystemExit as e:
        rc = e.code
    return rc, capsys.readouterr().err


_TUNE = ["tune", "--op", "layer_norm_backward", "--trials", "1"]
_BENCH = ["bench", "--op", "column_sum", "--rounds", "1"]


@pytest.mark.parametrize("argv, option", [
    (["generate", "--out", "{}"], "--out"),
    (["generate", "--target", "dsp", "--out", "{}"], "--out"),
    (["generate", "--target", "ascend", "--out", "{}"], "--out"),
    (["generate", "--sources", "--target", "dsp", "--generated", "{}"], "--generated"),
    (["generate", "--check", "--target", "dsp", "--generated", "{}"], "--generated"),
    (["graph", "--out", "{}/plan.dot"], "--out"),
    (_TUNE + ["--work-dir", "{}"], "--work-dir"),
    (_TUNE + ["--generated", "{}"], "--generated"),
    (_BENCH + ["--plot", "{}/roofline.png"], "--plot"),
], ids=["generate", "generate-dsp", "generate-ascend", "sources", "check", "graph", "tune-work-dir",
        "tune-generated", "bench-plot"])
@pytest.mark.parametrize("under", [False, True], ids=["file", "under-a-file"])
def test_a_file_where_a_folder_is_expected_is_refused_before_any_work(argv, option, under, tmp_path, capsys,
                                                                      no_work):
    """Every path option pointed at a file (or at a path under one): one line naming the option and the
    file, exit status 2, nothing built, written or timed; the file is left as it was."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder\n")
    path = f"{blocker}/sub" if under else str(blocker)
    rc, err = _refusal([a.replace("{}", path) for a in argv], capsys)
    assert rc == 2, err
    assert len(err.splitlines()) == 1 and err.split(": error: ", 1)[1].startswith(f"{option}: "), err
    assert repr(str(blocker)) in err and "a file" in err, err
    assert blocker.read_text() == "not a folder\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]


@pytest.mark.parametrize("argv, option", [
    (["graph", "--out", "{}/plan.dot"], "--out"),  # what it writes: {}/plan-forward.dot
    (_BENCH + ["--plot", "{}/roofline.png"], "--plot"),
], ids=["graph", "bench-plot"])
def test_a_folder_where_a_file_is_expected_is_refused_before_any_work(argv, option, tmp_path, capsys, no_work):
    (tmp_path / "plan-forward.dot").mkdir()
    (tmp_path / "roofline.png").mkdir()
    rc, err = _refusal([a.replace("{}", str(tmp_path)) for a in argv], capsys)
    assert rc == 2, err
    assert len(err.splitlines()) == 1 and f"{option}: expected a file name, got '{tmp_path}/" in err, err
    assert "which is a folder" in err


# a manifest entry as a build writes it (the fields the manifest's own checks look at)
_ENTRY = {"op": "layer_norm_backward", "target": "llvm", "dtype": "float32", "isa_class": "x86-64-v3",
          "library": "layer_norm_backward.llvm.float32.x86-64-v3.so", "tvm_target": {"kind": "llvm"},
          "kernels": [], "sha256": "0" * 64}


def _damaged(change) -> bytes:
    manifest = {"format": build_mod.FORMAT, "artifacts": [dict(_ENTRY)]}
    change(manifest)
    return json.dumps(manifest).encode()


_DAMAGE = {
    "not JSON": b'{"format": 1, "artifacts": [',
    "not UTF-8": b"\xff\xfe{}",
    "a list": b"[]",
    "format": _damaged(lambda m: m.update(format=2)),
    "no format": _damaged(lambda m: m.pop("format")),
    "artifacts a dict": _damaged(lambda m: m.update(artifacts={})),
    "no artifacts": _damaged(lambda m: m.pop("artifacts")),
    "entry a list": _damaged(lambda m: m.update(artifacts=[["layer_norm_backward"]])),
    **{f"no {field}": _damaged(lambda m, f=field: m["artifacts"][0].pop(f)) for field in ("op", "target", "dtype")},
    **{f"{field} of another type": _damaged(lambda m, f=field: m["artifacts"][0].update({f: 7}))
       for field in ("op", "target", "dtype", "isa_class", "library", "tvm_target", "kernels")},
    "files a list": _damaged(lambda m: m["artifacts"][0].update(files=["a.c"])),
}


@pytest.mark.parametrize("damage", sorted(_DAMAGE) + ["a folder"])
def test_generate_into_a_folder_with_a_damaged_manifest_names_it_before_building(damage, tmp_path, capsys,
                                                                                 no_work):
    manifest = tmp_path / "manifest.json"
    if damage == "a folder":
        manifest.mkdir()
    else:
        manifest.write_bytes(_DAMAGE[damage])
    rc, err = _refusal(["generate", "--op", "layer_norm_backward", "--dtype", "float32", "--out", str(tmp_path)],
                       capsys)
    assert rc == 2, err
    assert len(err.splitlines()) == 1 and f"error: --out: {manifest}: " in err, err
    assert manifest.is_dir() if damage == "a folder" else manifest.read_bytes() == _DAMAGE[damage]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["manifest.json"]


def test_generate_into_a_folder_with_a_sound_manifest_goes_ahead(tmp_path, monkeypatch):
    # the control of the test above: the same entry undamaged passes the checks and the build begins
    (tmp_path / "manifest.json").write_bytes(_damaged(lambda m: None))
    (tmp_path / "more.json").write_bytes(_damaged(lambda m: m["artifacts"][0].update(isa_class=None, files={})))

    class Began(Exception):
        pass

    def began(info):
        raise Began

    monkeypatch.setattr(cli._packagers, "get", began)
    for name in ("manifest.json", "more.json"):
        (tmp_path / name).replace(tmp_path / "manifest.json")
        with pytest.raises(Began):
            cli.main(["generate", "--op", "layer_norm_backward", "--dtype", "float32", "--out", str(tmp_path)])
