"""A cache of the suite's C/C++ builds: an unchanged build is a lookup, not a compile.

``run(cmd, outputs=[...])`` runs a build command (a compiler, a linker, cmake) the way
``subprocess.run(cmd, capture_output=True, text=True)`` does, keyed by everything that decides what
it writes:

- the command, with every path it names written relative to its role (an input's content stands in
  for its name, an output is named by its position), so a build from another pytest temporary
  folder is the same build;
- the content of every file and folder the command names (sources, ``-I`` folders with every header
  in them, the twin, libraries), and of the ``inputs`` given besides (what the build reads without
  naming it on its command line);
- the program itself (its path, size and modification time), the environment variables that
  steer compilers (``COMPILER_ENV``), and this machine's CPU where an argument says ``=native``.

A build that succeeds puts its outputs (files or folders) and its stdout/stderr under its key, in
the folder ``$FUSEDGRAD_TEST_BUILDS`` (default ``~/.cache/fusedgrad-test-builds``), whole (written
beside and renamed); a later run of the same build copies them into place.  A failed build is never
cached.  Processes that want the same missing build at once (pytest-xdist workers) build it once:
the first holds the key's lock (``flock``), the others wait and copy.  Remove the folder to clear it.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Iterable, Sequence

CACHE_ENV = "FUSEDGRAD_TEST_BUILDS"
# variables that change what a compiler or cmake writes
COMPILER_ENV = ("CC", "CXX", "CFLAGS", "CXXFLAGS", "CPPFLAGS", "LDFLAGS", "CPATH", "C_INCLUDE_PATH",
                "CPLUS_INCLUDE_PATH", "LIBRARY_PATH", "PKG_CONFIG_PATH", "CMAKE_PREFIX_PATH", "ZIG_GLOBAL_CACHE_DIR")
# a path inside an argument: an absolute path (after an option's prefix such as -I or -o)
_PATH = re.compile(r"(/[^\s=:;,]*)")
MAX_TREE_FILES = 20000  # a named folder with more files than this is refused: a build names what it reads
# folders named on a command line under these are hashed with every file in them (the repository, the
# temporary folders the tests write trees into); others (system include folders) count by name
_TREES = (str(Path(__file__).resolve().parents[1]), os.path.realpath(tempfile.gettempdir()))


def cache_root() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "fusedgrad-test-builds")


def _digest_file(h, path: Path) -> None:
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)


def _digest_path(path: Path) -> str:
    """sha256 of a file's bytes, or of a folder's files (their names relative to it, and bytes)."""
    h = hashlib.sha256()
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file())
        if len(files) > MAX_TREE_FILES:
            raise ValueError(f"build_cache: {path} holds {len(files)} files (more than {MAX_TREE_FILES}): name "
                             f"the folders the build reads, not a root above them")
        for p in files:
            h.update(str(p.relative_to(path)).encode() + b"\0")
            _digest_file(h, p)
            h.update(b"\0")
    else:
        _digest_file(h, path)
    return h.hexdigest()


def _host_cpu() -> str:
    """What names this machine's CPU (what ``-march=native`` resolves to): /proc/cpuinfo's first
    processor's model and flags, and the machine's architecture."""
    import platform

    try:
        block = Path("/proc/cpuinfo").read_text().split("\n\n")[0]
    except OSError:
        block = ""
    keep = ("vendor_id", "cpu family", "model", "model name", "stepping", "flags", "Features", "CPU implementer",
            "CPU architecture", "CPU variant", "CPU part", "isa")
    lines = [line for line in block.splitlines() if line.split(":")[0].strip() in keep]
    return "\n".join([platform.machine(), *lines])


def _program(name: str) -> str:
    """The program ``name`` resolves to, with its size and modification time (another compiler, or
    the same one upgraded, is another build)."""
    found = shutil.which(name) or name
    try:
        st = os.stat(os.path.realpath(found))
    except OSError:
        return found
    return f"{os.path.realpath(found)}:{st.st_size}:{st.st_mtime_ns}"


def key(cmd: Sequence[str], outputs: Sequence[Path], inputs: Iterable[Path] = (), cwd=None, env=None) -> str:
    """The cache key of a build (see the module's docstring)."""
    env = os.environ if env is None else env
    outs = [os.path.abspath(o) for o in outputs]
    h = hashlib.sha256()
    words = [_program(str(cmd[0]))]
    for arg in cmd[1:]:
        arg = str(arg)

        bare = re.sub(r"^-[IiLo]|^-include", "", arg)
        if bare and not os.path.isabs(bare) and "/" in bare and os.path.exists(os.path.join(cwd or ".", bare)):
            raise ValueError(f"build_cache: {arg!r} names a relative path: give absolute paths")

        def role(m):
            p = os.path.normpath(m.group(1))
            for n, o in enumerate(outs):
                if p == o or p.startswith(o + os.sep):
                    return f"<out{n}{p[len(o):]}>"
            if os.path.isfile(p) or (os.path.isdir(p) and any(p.startswith(r + os.sep) for r in _TREES)):
                return f"<{_digest_path(Path(p))}>"
            return m.group(1)  # a system folder (/usr/include) or a path that is not there: as written

        words.append(_PATH.sub(role, arg))
    if any("=native" in str(arg) for arg in cmd):  # -march=native: what this CPU is decides the code
        words.append(f"cpu <{_host_cpu()}>")
    for p in inputs:
        words.append(f"input <{_digest_path(Path(p))}>")
    words += [f"{k}={env[k]}" for k in COMPILER_ENV if k in env]
    h.update(json.dumps(words).encode())
    return h.hexdigest()


def _building(root: Path, k: str):
    """Key ``k``'s lock among processes (pytest-xdist workers): one builds, the others wait and copy."""
    from fusedgrad import cache_files

    root.mkdir(parents=True, exist_ok=True)
    return cache_files.building(root, k)


def _put(slot: Path, fill) -> None:
    """Write ``slot`` whole: ``fill(tmp)`` writes a folder beside it, renamed into place (a slot left
    without its result file by a copy cut short is replaced)."""
    from fusedgrad import cache_files

    with cache_files.staging(slot) as tmp:
        fill(tmp)
        if slot.exists():
            shutil.rmtree(slot)
        os.replace(tmp, slot)


def _copy(src: Path, dst: Path) -> None:
    if src.is_dir():
        if dst.exists():
            shutil.rmtree(dst)
        shutil.copytree(src, dst, symlinks=True)
    else:
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst)


def run(cmd: Sequence, outputs: Sequence, inputs: Iterable = (), cwd=None, env=None,
        timeout: float | None = None) -> subprocess.CompletedProcess:
    """Run the build ``cmd`` (writing ``outputs``, files or folders) or copy its cached outputs into
    place; returns what ``subprocess.run(cmd, capture_output=True, text=True)`` would (the build's
    own stdout and stderr on a cache hit)."""
    cmd = [str(c) for c in cmd]
    outputs = [Path(o) for o in outputs]
    k = key(cmd, outputs, [Path(p) for p in inputs], cwd, env)
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    slot = root / k
    with _building(root, k):
        if not (slot / "result.json").exists():
            proc = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout)
            if proc.returncode != 0 or not all(o.exists() for o in outputs):
                return proc

            def fill(tmp: Path) -> None:
                for n, o in enumerate(outputs):
                    _copy(o, tmp / f"out{n}")
                (tmp / "result.json").write_text(json.dumps({"cmd": cmd, "stdout": proc.stdout,
                                                             "stderr": proc.stderr}))

            _put(slot, fill)
            return proc
    result = json.loads((slot / "result.json").read_text())
    for n, o in enumerate(outputs):
        _copy(slot / f"out{n}", o)
    return subprocess.CompletedProcess(cmd, 0, result["stdout"], result["stderr"])


def artifact(op: str, target: str, dtype: str, out) -> dict:
    """``lowering.build.build(op, target, dtype, out)`` for tests that need the artifact, not its
    build: a build of the same cache key (which stands for every input of its bytes: definition,
    schedule and lowering sources, TVM target and CPU, knobs, TVM and nvcc versions) made earlier
    is copied into ``out`` and its entry added to ``out``'s manifest.  One build per key among
    processes (its lock).  Returns the manifest entry."""
    from fusedgrad.lowering import build, manifest

    k = build.cache_key(op, target, dtype)
    root = cache_root() / "artifacts"
    slot = root / k
    with _building(root, k):
        if not (slot / manifest.MANIFEST).exists():
            _put(slot, lambda tmp: build.build(op, target, dtype, tmp))
    (entry,) = manifest.read_manifest(slot)["artifacts"]
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for name in (entry["library"], entry.get("source")):
        if name:
            shutil.copy2(slot / name, out / name)
    manifest.update_manifest(out, entry)
    return entry
