"""The C/C++ build cache (tests/build_cache.py): an unchanged build is a lookup; a change of any
input (a source, a header in a named folder, the command, the program) is a build; a failed build is
not kept; processes wanting one build at once run it once."""
from __future__ import annotations

import multiprocessing
import os
import stat
from pathlib import Path

import pytest

import build_cache

# a stand-in compiler: counts its runs, writes its output from its inputs ("cc -I DIR -o OUT SRC")
FAKE_CC = """#!/bin/sh
echo run >> "$COUNT"
out=""; inc=""; src=""
while [ $# -gt 0 ]; do
  case "$1" in
    -o) out="$2"; shift 2 ;;
    -I*) inc="${1#-I}"; shift ;;
    -fail) echo "error: asked to fail" >&2; exit 1 ;;
    *) src="$1"; shift ;;
  esac
done
cat "$src" "$inc"/*.h > "$out"
echo "built $out"
"""


@pytest.fixture
def cc(tmp_path, monkeypatch):
    """The stand-in compiler, its run counter and a private cache folder."""
    exe = tmp_path / "fake-cc"
    exe.write_text(FAKE_CC)
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    count = tmp_path / "count"
    count.write_text("")
    monkeypatch.setenv("COUNT", str(count))
    monkeypatch.setenv(build_cache.CACHE_ENV, str(tmp_path / "cache"))
    return exe, lambda: len(count.read_text().split())


def _tree(root: Path, header: str = "int h;\n") -> tuple[Path, Path]:
    (root / "inc").mkdir(parents=True)
    (root / "inc" / "a.h").write_text(header)
    (root / "src.c").write_text("int main;\n")
    return root / "src.c", root / "inc"


def _build(exe, src, inc, out, *extra):
    return build_cache.run([exe, *extra, f"-I{inc}", "-o", out, src], outputs=[out])


def test_an_unchanged_build_from_another_folder_is_a_lookup(cc, tmp_path):
    exe, runs = cc
    first = _build(exe, *_tree(tmp_path / "one"), tmp_path / "one" / "out")
    again = _build(exe, *_tree(tmp_path / "two"), tmp_path / "two" / "out")
    assert runs() == 1
    assert (tmp_path / "two" / "out").read_text() == (tmp_path / "one" / "out").read_text() == "int main;\nint h;\n"
    assert again.returncode == 0 and again.stdout == first.stdout  # the build's own output, kept


@pytest.mark.parametrize("change", ["header", "source", "flag"])
def test_a_changed_input_is_built(cc, tmp_path, change):
    exe, runs = cc
    _build(exe, *_tree(tmp_path / "one"), tmp_path / "one" / "out")
    src, inc = _tree(tmp_path / "two", header="int g;\n" if change == "header" else "int h;\n")
    if change == "source":
        src.write_text("int other;\n")
    _build(exe, src, inc, tmp_path / "two" / "out", *(["-O2"] if change == "flag" else []))
    assert runs() == 2


def test_a_failed_build_is_not_kept(cc, tmp_path):
    exe, runs = cc
    src, inc = _tree(tmp_path)
    for _ in range(2):
        proc = _build(exe, src, inc, tmp_path / "out", "-fail")
        assert proc.returncode == 1 and "asked to fail" in proc.stderr
    assert runs() == 2


def test_a_relative_path_is_refused(cc, tmp_path):
    exe, _ = cc
    src, inc = _tree(tmp_path)
    with pytest.raises(ValueError, match="relative path"):
        build_cache.run([exe, "-o", "out", os.path.relpath(src)], outputs=[tmp_path / "out"])


def _one(args):
    exe, root = args
    src, inc = _tree(Path(root))
    return _build(exe, src, inc, Path(root) / "out").returncode


def test_processes_wanting_one_build_run_it_once(cc, tmp_path):
    exe, runs = cc
    with multiprocessing.get_context("spawn").Pool(3) as pool:
        codes = pool.map(_one, [(str(exe), str(tmp_path / str(n))) for n in range(3)])
    assert codes == [0, 0, 0] and runs() == 1


def test_a_native_build_is_keyed_by_this_cpu(cc, tmp_path, monkeypatch):
    """-march=native code is this CPU's: another CPU (its /proc/cpuinfo) is another build."""
    exe, runs = cc
    src, inc = _tree(tmp_path)
    _build(exe, src, inc, tmp_path / "out", "-march=native")
    _build(exe, src, inc, tmp_path / "out", "-march=native")
    monkeypatch.setattr(build_cache, "_host_cpu", lambda: "another CPU")
    _build(exe, src, inc, tmp_path / "out", "-march=native")
    assert runs() == 2
