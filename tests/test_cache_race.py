"""Several processes building the same artifact into one empty kernel cache at once.

Each process waits at a barrier, then asks for the same artifact on an empty cache: one builds it
(holding the key's build lock) and the others wait and load its slot.  None may fail, exactly one
builds, the slot a process loaded is never removed or replaced afterwards (another process may be
loading it: the folder and its library keep their inodes to the end), and the cache ends with that
slot alone (beside the build locks' folder).
"""
from __future__ import annotations

import json
import multiprocessing
import os
import traceback
from pathlib import Path

from fusedgrad import cache_files

OP, DTYPE = "pack_bt", "float32"  # the smallest build: the processes finish it close together
PROCESSES, ROUNDS = 3, 3


def _race(cache_root: str, rounds: int, barrier, results) -> None:
    """One process: per round, on the round's empty cache folder, once every process is ready, the
    artifact OP; puts (round, inodes of the slot folder and library it loaded, builds it ran, None) on
    ``results``, or (round, None, builds, the traceback) when it failed."""
    os.environ.pop("FUSEDGRAD_ARTIFACTS", None)
    from fusedgrad import runtime
    from fusedgrad.lowering import build

    build.cache_key(OP, "llvm", DTYPE)  # imports and hashes done before the start
    builds = []
    real_build = runtime._build.build

    def counted(*args, **kwargs):
        builds.append(args)
        return real_build(*args, **kwargs)

    runtime._build.build = counted
    for r in range(rounds):
        os.environ["FUSEDGRAD_CACHE"] = os.path.join(cache_root, str(r))
        runtime._LOADED.clear()  # as a fresh process
        builds.clear()
        barrier.wait(timeout=600)
        try:
            art = runtime.artifact(OP, DTYPE)
            art.kernel({})
            results.put((r, _inodes(art.path, art.entry["library"]), len(builds), None))
        except BaseException:
            results.put((r, None, len(builds), traceback.format_exc()))


def _inodes(slot: Path, library: str) -> tuple[int, int]:
    return slot.stat().st_ino, (slot / library).stat().st_ino


def test_processes_building_one_key_at_once_all_succeed(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(PROCESSES), ctx.Queue()
    procs = [ctx.Process(target=_race, args=(str(tmp_path), ROUNDS, barrier, results)) for _ in range(PROCESSES)]
    for p in procs:
        p.start()
    outcomes = [results.get(timeout=900) for _ in range(PROCESSES * ROUNDS)]
    for p in procs:
        p.join(timeout=60)
    assert [p.exitcode for p in procs] == [0] * PROCESSES
    failed = [f"round {r}:\n{tb}" for r, _, _, tb in outcomes if tb]
    assert not failed, "\n".join(failed)
    for r in range(ROUNDS):  # the slot alone: no process's build folder left behind
        assert sum(n for k, _, n, _ in outcomes if k == r) == 1, (r, outcomes)  # one build, the rest waited
        names = [p.name for p in (tmp_path / str(r)).iterdir() if p.name != cache_files.LOCKS]
        assert len(names) == 1 and not names[0].startswith("."), names
        slot = tmp_path / str(r) / names[0]
        library = json.loads((slot / "manifest.json").read_text())["artifacts"][0]["library"]
        loaded = [inodes for k, inodes, _, _ in outcomes if k == r]
        assert loaded == [_inodes(slot, library)] * PROCESSES, (r, loaded)
