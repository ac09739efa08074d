"""Committed, human-readable sources under generated/: what every kernel became.

Each target's packager (lowering.packagers) writes its own folder,
``generated/<target>/``: for LLVM the scheduled TensorIR of each op x dtype
(what the schedule rules made of the definition), for CUDA the CUDA C++ that
nvcc compiles into the artifacts, for the DSPs their C library, for Ascend
the AscendC kernels with their aclnn host code and build files.  They show
the hand schedules: tuning records (generated/tuning/) belong to a machine
class, and a build's manifest says which schedule its artifacts got.  Files
start with a "generated -- do not edit" banner naming the versions, the
target and the command that regenerates them, and contain no timestamps or
absolute paths, so a fresh generation is byte-identical (`fusedgrad generate
--check`).
"""
from __future__ import annotations

from pathlib import Path

from .. import targets
from . import packagers

REGEN_COMMAND = packagers.REGEN_COMMAND
banner = packagers.banner


def write_all(root: Path, target_names=None) -> list[str]:
    """Write the sources of ``target_names`` (default: every registered target) under
    ``root/<target>/``; returns their paths relative to ``root``, sorted."""
    written = []
    for name in target_names or targets.names():
        info = targets.get(name)
        rels = packagers.get(info).sources(info, Path(root) / name, lambda comment: banner(name, comment))
        written += [f"{name}/{rel}" for rel in rels]
    return sorted(written)
