"""The thread team the CPU kernels run on: the process's OpenMP team (torch's, when torch is loaded).

Each loaded CPU library reaches its parallel launcher and barrier through two pointers the loader
fills (``__TVMBackendParallelLaunch``, ``__TVMBackendParallelBarrier``); :func:`adopt` points them at
``team.c``'s, which run the library's parallel regions and barriers on OpenMP.  ``team.c`` is built
once per machine with the C compiler (into ``~/.cache/fusedgrad-team``, beside the kernel cache and
kept apart from its slots), linked against ``libgomp.so.1``: the
soname torch's CPU build loads, so torch and fusedgrad share one OpenMP runtime, one pool of threads
and one team size (``torch.set_num_threads``), whichever is imported first.

Why: the loader's own launcher keeps a second pool whose idle workers spin beside torch's, and its
barrier waits by calling ``sched_yield`` in a loop, which gives the core to any other runnable
process for a time slice at every step's barrier (measured in docs/BENCHMARKS.md, "Training step").

``FUSEDGRAD_TEAM=tvm`` keeps the loader's launcher (to compare); so does a machine without a C
compiler or libgomp, with one warning.
"""
from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

from . import cache_files

log = logging.getLogger("fusedgrad")

SOURCE = Path(__file__).with_name("team.c")
ENV = "FUSEDGRAD_TEAM"  # "openmp" (default) or "tvm"
POINTERS = ("__TVMBackendParallelLaunch", "__TVMBackendParallelBarrier")


def physical_cores() -> int:
    """Physical cores this process may run on (hyperthread siblings counted once)."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    cores = set()
    for cpu in cpus:
        topo = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology")
        try:
            cores.add(((topo / "physical_package_id").read_text().strip(), (topo / "core_id").read_text().strip()))
        except OSError:
            cores.add(("cpu", str(cpu)))
    return max(1, len(cores))


# TVM's thread pool, unless told otherwise, uses half the logical CPUs on x86
# (it assumes two hyperthreads per core): on a machine without SMT that is
# half the cores.  Size it by the physical cores this process may use, before
# TVM reads the variable (its pool starts on the first parallel launch);
# TVM_NUM_THREADS set by the user wins.  It sizes TVM's pool where the
# OpenMP launcher is not used, and the OpenMP team where torch is not installed.
os.environ.setdefault("TVM_NUM_THREADS", str(physical_cores()))
# TVM also pins its workers to cores by default; in a process that runs
# torch too, the pinned workers slowed torch's own kernels 5x (LayerNorm
# backward 3.2 -> 15.6 ms when interleaved with ours).  Unpinned, neither side
# lost time here.  TVM_BIND_THREADS set by the user wins.
os.environ.setdefault("TVM_BIND_THREADS", "0")

_lib: ctypes.CDLL | None = None
_why_not: str | None = None
_lock = threading.Lock()


def _compiler() -> str | None:
    return os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")


def _key(cc: str, source: bytes) -> str:
    version = subprocess.run([cc, "--version"], capture_output=True, text=True).stdout
    return hashlib.sha256(source + b"\0" + version.encode()).hexdigest()[:24]


def _build(cache: Path) -> Path:
    """``team.c`` built into ``<cache>/team-<key>/libfgteam.so`` (once per source and compiler)."""
    cc = _compiler()
    if cc is None:
        raise RuntimeError("no C compiler (cc, gcc or $CC) to build the OpenMP launcher")
    source = SOURCE.read_bytes()
    key = f"team-{_key(cc, source)}"
    slot = cache / key
    lib = slot / "libfgteam.so"
    if lib.is_file():
        return lib
    cache.mkdir(parents=True, exist_ok=True)
    with cache_files.building(cache, key):
        if lib.is_file():
            return lib
        cache_files.remove_abandoned_builds(cache, key)
        with cache_files.staging(slot) as tmp:
            r = subprocess.run([cc, "-O2", "-fPIC", "-shared", "-fopenmp", str(SOURCE), "-o",
                                str(tmp / lib.name)], capture_output=True, text=True)
            if r.returncode != 0:
                raise RuntimeError(f"{cc} -fopenmp failed on {SOURCE.name}: {r.stderr.strip()[-400:]}")
            with cache_files.locked(cache):
                if os.path.lexists(slot):
                    cache_files.discard(slot)
                os.rename(tmp, slot)
    return lib


def _gomp_loaded() -> bool:
    try:
        ctypes.CDLL("libgomp.so.1", mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
        return True
    except OSError:
        return False


def _load(path: Path) -> ctypes.CDLL:
    """Load the launcher.  Where no OpenMP runtime is loaded yet (no torch), the one it brings reads
    its team size from the environment as it loads: OMP_NUM_THREADS if set, else TVM_NUM_THREADS
    (fusedgrad.runtime defaults it to the physical cores), for that moment only, so that child
    processes inherit the environment as it was."""
    if _gomp_loaded() or "OMP_NUM_THREADS" in os.environ:
        return ctypes.CDLL(str(path))
    os.environ["OMP_NUM_THREADS"] = os.environ.get("TVM_NUM_THREADS", "")
    try:
        return ctypes.CDLL(str(path))
    finally:
        del os.environ["OMP_NUM_THREADS"]


def library() -> ctypes.CDLL | None:
    """The launcher library (built and loaded on first use), or None where it cannot be had (then the
    loader's launcher stays; :func:`why_not` says why)."""
    global _lib, _why_not
    if _lib is not None or _why_not is not None:
        return _lib
    with _lock:
        if _lib is not None or _why_not is not None:
            return _lib
        if os.environ.get(ENV, "openmp") == "tvm":
            _why_not = f"{ENV}=tvm"
            return None
        try:
            path = _build(Path.home() / ".cache" / "fusedgrad-team")
            lib = _load(path)
        except (OSError, RuntimeError) as e:
            _why_not = str(e)
            log.warning("fusedgrad: CPU kernels run on TVM's thread pool (%s)", _why_not)
            return None
        torch = sys.modules.get("torch")
        if torch is not None:  # torch sets its team size per thread, lazily: have it do so here
            torch.get_num_threads()
        lib.fg_team_launches.restype = ctypes.c_long
        _lib = lib
    return _lib


def why_not() -> str | None:
    """Why the OpenMP launcher is not in use (None when it is)."""
    library()
    return _why_not


def adopt(path: str | os.PathLike) -> bool:
    """Point the loaded CPU library at ``path`` at the OpenMP launcher and barrier; False where the
    loader's stay (no launcher here, or a library without parallel regions)."""
    lib = library()
    if lib is None:
        return False
    handle = ctypes.CDLL(str(path), mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
    values = {p: ctypes.cast(f, ctypes.c_void_p).value for p, f in zip(POINTERS, (lib.fg_team_launch, lib.fg_team_barrier))}
    changed = False
    for name, value in values.items():
        try:
            ctypes.c_void_p.in_dll(handle, name).value = value
            changed = True
        except ValueError:  # the library has no parallel region (or no barrier)
            pass
    return changed


def last_team() -> list[int]:
    """The kernel thread ids of the team of this thread's last launch (member k ran task k)."""
    lib = library()
    if lib is None:
        return []
    tids = (ctypes.c_long * 1024)()
    n = lib.fg_team_last(tids, 1024)
    return list(tids[:n])


def launches() -> int:
    """How many parallel regions this thread has launched through the OpenMP launcher."""
    lib = library()
    return 0 if lib is None else int(lib.fg_team_launches())

