"""A damaged kernel cache entry is rebuilt, with a WARNING, whatever the damage.

Each case damages one thing of a cached layer_norm_backward entry -- one field of its manifest missing
or of another type, kernels that are not the op's, the manifest or the library replaced by a folder or
gone, the slot replaced by a file or a link -- then calls the op: the call succeeds, one WARNING
names the slot, the slot holds a rebuilt entry, and a later process uses it without building.
"""
from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pytest

import fusedgrad
from conftest import LN_ARGS, assert_close, ln_inputs, ln_reference, to_np
from fusedgrad import cache_files, runtime
from fusedgrad.lowering import build as build_mod

OP, DTYPE = "layer_norm_backward", "float32"


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    """A cache folder holding the entry of OP as the API builds it (its slot named by its cache key)."""
    cache = tmp_path_factory.mktemp("pristine")
    build_mod.build(OP, "llvm", DTYPE, cache / build_mod.cache_key(OP, "llvm", DTYPE))
    return cache


def _entry(slot: Path) -> dict:
    return json.loads((slot / build_mod.MANIFEST).read_text())["artifacts"][0]


def _edit(fn):
    """A damage that edits the slot's manifest: ``fn(manifest, its only entry)``."""
    def damage(slot: Path) -> None:
        m = json.loads((slot / build_mod.MANIFEST).read_text())
        fn(m, m["artifacts"][0])
        (slot / build_mod.MANIFEST).write_text(json.dumps(m))
    return damage


def _other_type(value):
    return {str: 7, dict: "abc", list: {"a": 1}}.get(type(value), "abc")


def _set(path: str, value=None, drop: bool = False):
    """Set (or with ``drop`` remove) the field at ``path`` ("kernels.0.variant") of the entry; value
    None: one of another type than the field's."""
    *parents, last = path.split(".")

    def fn(m, e):
        for p in parents:
            e = e[int(p)] if isinstance(e, list) else e[p]
        key = int(last) if isinstance(e, list) else last
        if drop:
            del e[key]
        else:
            e[key] = _other_type(e[key]) if value is None else value
    return _edit(fn)


def _replace_by_folder(name: str):
    def damage(slot: Path) -> None:
        target = slot / (_entry(slot)["library"] if name == "library" else name)
        target.unlink()
        target.mkdir()
    return damage


def _slot_a_file(slot: Path) -> None:
    shutil.rmtree(slot)
    slot.write_text("not a folder\n")


def _slot_a_link(slot: Path) -> None:
    elsewhere = slot.parent.parent / "elsewhere"
    shutil.copytree(slot, elsewhere)
    shutil.rmtree(slot)
    slot.symlink_to(elsewhere, target_is_directory=True)


FIELDS = ("op", "target", "dtype", "library", "sha256", "tvm", "tvm_ffi", "tvm_target", "isa_class", "cache_key",
          "kernels", "kernels.0.symbol", "kernels.0.variant", "kernels.0.args", "kernels.0.args.0.name",
          "kernels.0.args.0.role")

DAMAGES = {
    **{f"no {f}": _set(f, drop=True) for f in FIELDS if f != "isa_class"},  # an entry may lack isa_class
    **{f"{f} of another type": _set(f) for f in FIELDS},
    "no kernels": _set("kernels", []),
    "variant 'abc'": _set("kernels.0.variant", "abc"),
    "variant of another op": _set("kernels.0.variant", {"has_bias": True}),
    "variant flag not a bool": _set("kernels.0.variant", {"has_bias": 1}),
    "an argument less": _edit(lambda m, e: e["kernels"][0]["args"].pop()),
    "an argument of another role": _set("kernels.0.args.0.role", "output"),
    "a kernel twice": _edit(lambda m, e: e["kernels"].append(e["kernels"][0])),
    "tvm_target 'garbage'": _set("tvm_target", "garbage"),
    "tvm_target's mcpu a number": _set("tvm_target.mcpu", 5),
    "another cache_key": _set("cache_key", "0" * 24),
    "no artifacts": _edit(lambda m, e: m.update(artifacts=[])),
    "an artifact not an object": _edit(lambda m, e: m.update(artifacts=["abc"])),
    "another format": _edit(lambda m, e: m.update(format=build_mod.FORMAT + 1)),
    "manifest missing": lambda slot: (slot / build_mod.MANIFEST).unlink(),
    "manifest a folder": _replace_by_folder(build_mod.MANIFEST),
    "library missing": lambda slot: (slot / _entry(slot)["library"]).unlink(),
    "library a folder": _replace_by_folder("library"),
    "slot a file": _slot_a_file,
    "slot a link": _slot_a_link,
}


@pytest.mark.parametrize("damage", DAMAGES.values(), ids=DAMAGES.keys())
def test_a_damaged_cache_entry_is_rebuilt_with_a_warning(pristine, tmp_path, monkeypatch, caplog, damage):
    cache = tmp_path / "cache"
    shutil.copytree(pristine, cache)
    slot = next(cache.iterdir())
    monkeypatch.setenv("FUSEDGRAD_CACHE", str(cache))
    monkeypatch.delenv(runtime.ARTIFACTS_ENV, raising=False)
    monkeypatch.setattr(runtime, "_LOADED", {})  # nothing loaded in this process yet
    damage(slot)
    inp = ln_inputs((6,), 40, seed=11)
    args = [to_np(inp[k], DTYPE) for k in LN_ARGS]
    caplog.set_level(logging.WARNING, logger="fusedgrad")

    dx = fusedgrad.layer_norm_backward(*args)[0]
    assert_close(dx, ln_reference(inp, DTYPE)["dx"], 1e-5, 1e-5, name="dx")
    warned = [r.getMessage() for r in caplog.records if r.name == "fusedgrad" and r.levelno >= logging.WARNING]
    assert len(warned) == 1 and warned[0].startswith(f"cache entry {slot} is unusable"), warned
    assert slot.is_dir() and not slot.is_symlink()
    assert _entry(slot)["kernels"] == _entry(next(pristine.iterdir()))["kernels"]
    # nothing left beside it but the build locks' folder (the rebuild took its key's lock)
    assert sorted(p.name for p in cache.iterdir()) == sorted([slot.name, cache_files.LOCKS])

    caplog.clear()  # a later process uses the rebuilt entry, without building or warning
    monkeypatch.setattr(runtime, "_LOADED", {})
    monkeypatch.setattr(build_mod, "build", lambda *a, **k: pytest.fail("built again"))
    np.testing.assert_array_equal(fusedgrad.layer_norm_backward(*args)[0], dx)
    assert [r for r in caplog.records if r.name == "fusedgrad" and r.levelno >= logging.WARNING] == []
