"""Schedule tuning with TVM's meta-schedule, over the hand schedules' own knobs.

Design space.  TVM 0.27's default design space (post-order-apply with the
generic rules) fails on fusedgrad's multi-reduction PrimFuncs, and a generic
schedule would throw away the fixed summation orders the hand schedules
guarantee.  So each tunable hand rule lists its knobs (``ScheduleRule.KNOBS``:
rows per partial block, column chunk, vector width, ...) and the design space
is a ``ScheduleFn`` that samples every knob with ``sample_categorical`` and
applies the hand rule with those values.  Every point of the space is a
correct, deterministic schedule; meta-schedule's ``replay-func`` search
measures as many points as the trial budget allows.

Shapes.  Meta-schedule measures concrete shapes: the kernel is specialised to
the ``--shape`` given (the shape class the record stands for), while builds
apply the chosen knobs to the shape-generic kernels they always produce.

Records.  A record stands for a machine class, ``<target>-<ISA class>-<cores>c``
(e.g. ``llvm-x86-64-v3-2c``: the psABI level of the CPU builds are for, from
targets.llvm's CPU facts, and this machine's core count), not for one CPU
model.  Its folder holds per op and dtype meta-schedule's JSON database
(``<op>.<dtype>/database_{workload,tuning_record}.json``) and a summary
``<op>.<dtype>.json``: the knobs of the best record, the shape, the CPU it was
tuned on, the TVM version, and the tuned and hand times measured side by side
(interleaved medians) after the search.  ``use`` is true only when the tuned
schedule was faster by more than 3% (MARGIN); builds apply a record only then,
and the manifest says which record an artifact got.

Where records are.  The committed ones (generated/tuning) ship inside the
package (fusedgrad/generated/tuning, summaries only).  ``fusedgrad tune``
writes to $FUSEDGRAD_TUNING, else the source tree's generated/tuning when
fusedgrad runs from a checkout, else the user's folder
($XDG_DATA_HOME/fusedgrad/tuning): never into an installed package.  A build
takes the nearest record (``candidates``): this machine's class, else a lower
ISA class of the same architecture, the nearest core count first; the user's
records before the shipped ones; $FUSEDGRAD_TUNING, when set, is the only
place looked in.  A record from another TVM version, of another format, or
corrupt is an error naming the file.  Summary and database are written to a
temporary name and renamed, so a failed or interrupted run leaves the old
record whole.

Distributed tuning uses TVM's own RPC tracker: with ``rpc=(host, port, key)``
the measurements run on the rpc_servers registered under ``key``
(meta-schedule's RPCRunner); the builds run here.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
import shutil
import socket
import statistics
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Callable

from .. import schedules, targets, te_defs
from ..targets import llvm
from . import intrinsics, naming, tvm_api
from .tuning_kernels import builds_own as _builds_own
from .tuning_kernels import definition as _definition
from .tuning_kernels import device_arguments as _device_arguments
from .tuning_kernels import rpc_arguments as _rpc_arguments
from .tuning_kernels import scheduled as _scheduled
from .tuning_kernels import specialised as _specialised
from .tuning_kernels import static as _static
from .tuning_kernels import time as _time

TUNING_ENV = "FUSEDGRAD_TUNING"
FORMAT = 2
# a tuned schedule is used only when it beat the hand one by more than the noise:
# interleaved medians on a shared machine still differ by a few percent run to run
MARGIN = 0.97
_KEY = re.compile(r"^(?P<target>[a-z0-9_]+)-(?P<isa>[a-z0-9_.-]+)-(?P<cores>[0-9]+)c$")


def shipped_root() -> Path:
    """The records that come with fusedgrad: generated/tuning of the source tree, which an install
    carries as package data at the same place relative to the package (fusedgrad/generated/tuning)."""
    return Path(__file__).resolve().parents[1] / "generated" / "tuning"


def _checkout() -> bool:
    """Whether fusedgrad runs from its source tree (where the shipped records may be rewritten)."""
    return (Path(__file__).resolve().parents[1] / "pyproject.toml").exists()


def user_root() -> Path:
    """Records this user tuned on an installed fusedgrad: $XDG_DATA_HOME/fusedgrad/tuning
    (default ~/.local/share/fusedgrad/tuning)."""
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(base) / "fusedgrad" / "tuning"


def tuning_root() -> Path:
    """Where ``fusedgrad tune`` writes: $FUSEDGRAD_TUNING, else the source tree's generated/tuning when
    fusedgrad runs from one, else the user's records (never into an installed package)."""
    env = os.environ.get(TUNING_ENV)
    if env:
        return Path(env)
    return shipped_root() if _checkout() else user_root()


def search_roots() -> list[Path]:
    """Where builds look for records, first found first: $FUSEDGRAD_TUNING alone when it is set (a
    folder of one's own records, or an empty one for the hand schedules), else the user's records,
    then the shipped ones."""
    env = os.environ.get(TUNING_ENV)
    if env:
        return [Path(env)]
    roots = [user_root()] if not _checkout() else []
    return roots + [shipped_root()]


@dataclasses.dataclass(frozen=True)
class MachineClass:
    """What a record stands for: the target, the ISA class of the CPU builds are for
    (``llvm.CpuFacts.isa_class``) and this machine's core count."""

    target: str
    isa_class: str
    cores: int
    arch: str

    @property
    def key(self) -> str:
        """The folder name of the class's records, e.g. ``llvm-x86-64-v3-2c``."""
        return f"{self.target}-{self.isa_class}-{self.cores}c"


def machine_class(target_name: str) -> MachineClass:
    if target_name != "llvm":
        raise ValueError(f"--target: expected a target that runs on this machine ('llvm'), got {target_name!r}")
    info = targets.get(target_name)
    spec = info.tvm_target()
    arch = (spec.get("mtriple") or llvm.host_triple() or "").split("-")[0]
    return MachineClass(target_name, info.isa_class(spec), os.cpu_count() or 1, arch)


def target_key(target_name: str) -> str:
    """The machine class a record is for, e.g. ``llvm-x86-64-v4-2c``."""
    return machine_class(target_name).key


def record_path(op: str, target_name: str, dtype: str, root: Path | None = None) -> Path:
    """Where ``fusedgrad tune`` writes this machine class's record for (op, target, dtype)."""
    return (root or tuning_root()) / target_key(target_name) / f"{naming.artifact_stem(op, target_name, dtype)}.json"


@dataclasses.dataclass(frozen=True)
class Found:
    """A record a build uses: its summary, file, class folder, and whether that is this machine's own
    class (``exact``) or the nearest one (``want`` is the class looked for)."""

    record: dict
    path: Path
    key: str
    want: str
    exact: bool


def candidates(op: str, target_name: str, dtype: str) -> list[tuple[tuple, Path]]:
    """Every record that may stand for this machine, nearest first: the same ISA class before a
    lower one of the same architecture (a record tuned for a wider ISA than the build's is never
    taken: its knobs were measured with instructions this build lacks), then the nearest core count,
    then the earlier root."""
    want = machine_class(target_name)
    order = llvm.ISA_CLASSES.get(want.arch, (want.isa_class,))
    rank = order.index(want.isa_class) if want.isa_class in order else 0
    stem = naming.artifact_stem(op, target_name, dtype)
    found = []
    for i, root in enumerate(search_roots()):
        if not root.is_dir():
            continue
        for folder in root.iterdir():
            m = _KEY.match(folder.name)
            if not m or m["target"] != target_name or m["isa"] not in order[rank:]:
                continue
            path = folder / f"{stem}.json"
            if path.is_file():
                found.append(((order.index(m["isa"]) - rank, abs(int(m["cores"]) - want.cores), i), path))
    return sorted(found)


_FIELDS = {"format": int, "op": str, "target": str, "dtype": str, "target_key": str, "shape": dict,
           "knobs": dict, "tuned_ms": float, "hand_ms": float, "use": bool, "trials": int, "tvm": str}


def _read(path: Path, op: str, target_name: str, dtype: str) -> dict:
    """A record's summary, validated; ValueError naming the file when it is corrupt, of another
    format, from another TVM, or not the record of (op, target, dtype) and its folder's class."""
    try:
        rec = json.loads(path.read_text())
        if not isinstance(rec, dict):
            raise ValueError(f"expected a JSON object, got {type(rec).__name__}")
        if rec.get("format") != FORMAT:
            raise ValueError(f"format {rec.get('format')!r}, expected {FORMAT}")
        for field, kind in _FIELDS.items():
            if not isinstance(rec.get(field), (int, float) if kind is float else kind):
                raise ValueError(f"field {field!r}: expected {kind.__name__}, got {rec.get(field)!r}")
        want = {"op": op, "target": target_name, "dtype": dtype, "target_key": path.parent.name}
        wrong = {k: rec[k] for k, v in want.items() if rec[k] != v}
        if wrong:
            raise ValueError(f"it is the record of {wrong}, expected {want}")
        rule = schedules.rule_for(targets.get(target_name).schedules, op)
        rule.tuned(rec["knobs"])  # unknown knob names raise
    except (ValueError, TypeError, AttributeError) as e:
        raise ValueError(f"{path}: corrupt tuning record ({e}); delete it or run `fusedgrad tune` again") from None
    if rec["tvm"] != tvm_api.tvm_version():
        raise ValueError(f"{path}: a tuning record from TVM {rec['tvm']}, this is TVM {tvm_api.tvm_version()}; "
                         f"its times do not hold for this TVM's code: run `fusedgrad tune` again or delete it")
    return rec


def find(op: str, target_name: str, dtype: str) -> Found | None:
    """The record a build of (op, target, dtype) for this machine uses (``candidates``' first), or None."""
    if target_name != "llvm":
        return None
    found = candidates(op, target_name, dtype)
    if not found:
        return None
    path = found[0][1]
    want = target_key(target_name)
    return Found(_read(path, op, target_name, dtype), path, path.parent.name, want, path.parent.name == want)


def read_record(op: str, target_name: str, dtype: str, root: Path | None = None) -> dict | None:
    """This machine class's own record in ``root`` (default: where ``tune`` writes), or None."""
    if target_name != "llvm":
        return None
    path = record_path(op, target_name, dtype, root)
    return _read(path, op, target_name, dtype) if path.exists() else None


def knobs_for(op: str, target_name: str, dtype: str) -> dict | None:
    """Knobs a build applies: the nearest record's, when it measured faster than the hand schedule."""
    found = find(op, target_name, dtype)
    return dict(found.record["knobs"]) if found and found.record["use"] else None


# ---------------------------------------------------------------------------- search

def _prepare_builds() -> None:
    """Before building candidates: skip the 40 s tensor-intrinsics import that meta-schedule's
    default build does (no tensorisation on CPU) and install the target's intrinsic lowering."""
    sys.modules.setdefault("tvm.s_tir.tensor_intrin", types.ModuleType("tvm.s_tir.tensor_intrin"))
    info = targets.get("llvm")
    intrinsics.install(info.tvm_target()["kind"], dict(info.intrinsics))


@functools.cache
def _in_process_builder():
    """Meta-schedule's builder, building here rather than in a worker pool.

    TVM's LocalBuilder starts a fresh pool of Python workers for every batch (and one more for its
    sanity check), and each worker imports TVM (about 20 s here), so a batch of quick builds cost
    most of a minute.  The candidates are the hand rules' own schedules at other knob values, so
    building them in this process is as safe as any ``fusedgrad generate``; each failure becomes
    that candidate's error, as in the pool."""
    from tvm.s_tir.meta_schedule.builder import BuilderResult, PyBuilder
    from tvm.s_tir.meta_schedule.builder.local_builder import default_build, default_export
    from tvm.ir.utils import derived_object

    @derived_object
    class InProcessBuilder(PyBuilder):
        def build(self, build_inputs):
            results = []
            for inp in build_inputs:
                try:
                    results.append(BuilderResult(default_export(default_build(inp.mod, inp.target, None)), None))
                except Exception as err:  # noqa: BLE001 - reported as this candidate's build error
                    results.append(BuilderResult(None, f"{type(err).__name__}: {err}"))
            return results

    return InProcessBuilder()


@functools.cache
def _local_runner():
    """One LocalRunner per process: its worker (which imports TVM once) serves every tuning run."""
    from tvm.s_tir import meta_schedule as ms

    return ms.runner.LocalRunner(timeout_sec=60)


def parse_shape(text: str, op_name: str) -> dict:
    """ "N=1024,H=1024" -> {"N": 1024, "H": 1024}; names must be the op's dims."""
    op = te_defs.get(op_name)
    bases = {te_defs.parse_dim(d)[1] for t in op.inputs for d in t.shape}
    want = sorted(b for b in bases if not b.isdigit())
    dims = {}
    for part in text.split(","):
        name, _, value = part.partition("=")
        name = name.strip()
        if name not in want or not value.strip().isdigit() or int(value) < 1:
            raise ValueError(f"--shape: expected {','.join(f'{w}=<int >= 1>' for w in want)}, got {text!r}")
        dims[name] = int(value)
    if sorted(dims) != want:
        raise ValueError(f"--shape: expected {','.join(f'{w}=<int >= 1>' for w in want)}, got {text!r}")
    return dims


def check_tracker(host: str, port: int, timeout: float = 5.0) -> None:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as e:
        raise ValueError(f"--rpc-tracker: cannot reach {host}:{port} ({e.strerror or e})") from None


def _quiet_meta_schedule() -> None:
    """Meta-schedule's console log gives way to fusedgrad's progress lines (its log files stay).
    Each tune_tir call re-configures the logger at its current level, so set it before each;
    its setup also trips over unnamed handlers (e.g. a test runner's) on that logger."""
    import logging

    ms_log = logging.getLogger("tvm.s_tir.meta_schedule")
    ms_log.setLevel(logging.WARNING)
    for handler in list(ms_log.handlers):
        if handler.get_name() is None:
            ms_log.removeHandler(handler)


def _space(rule, target, op_name: str, dtype: str, dims: dict) -> Callable:
    """Meta-schedule's design space: every knob sampled from ``rule.space`` (in name order), then the
    hand rule applied with those values.  A rule that builds its own PrimFunc (``_builds_own``) gives
    a schedule of that function, made static at ``dims``, with the same samples (decisions fixed)
    replayed on it, so that its trace, the one the database keeps, names the knobs too."""
    space = rule.space(target)
    names = sorted(space)
    op = te_defs.get(op_name)
    generic = _definition(op_name, dtype)[0] if _builds_own(rule) else None

    def sample(sch, values=None):
        chosen = {}
        for name in names:
            cands = [int(c) for c in space[name]]
            decision = None if values is None else cands.index(values[name])
            rv = sch.sample_categorical(candidates=cands, probs=[1.0 / len(cands)] * len(cands),
                                        decision=decision)
            chosen[name] = int(sch.get(rv))
        return chosen

    def fn(sch):
        values = sample(sch)
        if generic is None:
            rule.tuned(values).schedule(sch, target)
            return sch
        own = tvm_api.schedule(_static(_scheduled(rule.tuned(values), generic, target), op, dims))
        sample(own, values)
        return own

    return fn


FAILED_RUN_SECS = 1e9  # what meta-schedule records as the run time of a failed measurement


def _points(db, names: list[str]) -> list[tuple[dict, float | None]]:
    """Every measured point of the database: (its knobs, the median seconds; None for a failed
    measurement).  The knobs are the trace's samples, in ``_space``'s name order."""
    points = []
    for rec in db.get_all_tuning_records():
        trace = rec.trace
        values = [int(inst.attrs[0][int(trace.decisions[inst])]) for inst in trace.insts
                  if inst.kind.name == "SampleCategorical"]
        secs = None
        if rec.run_secs is not None and len(rec.run_secs):
            secs = statistics.median(float(s) for s in rec.run_secs)
        points.append((dict(zip(names, values)), None if secs is None or secs >= FAILED_RUN_SECS else secs))
    return points


def _knobs_of(db, names: list[str]) -> tuple[dict, float] | None:
    """The fastest measured point: (knobs, median seconds), or None when none was measured."""
    measured = [p for p in _points(db, names) if p[1] is not None]
    return min(measured, key=lambda p: p[1]) if measured else None


def check(op_name: str, target_name: str, dtype: str, trials: int):
    """Validate a tuning request before anything runs; returns (the op's rule, the target key)."""
    info = targets.get(target_name)
    key = target_key(target_name)
    te_defs.get(op_name)
    info.check(op_name, dtype)
    rule = schedules.rule_for(info.schedules, op_name)
    if rule is None or not rule.KNOBS:
        tunable = sorted(r.op for r in schedules.rules(info.schedules) if r.op and r.KNOBS)
        raise ValueError(f"--op: expected an op with a tunable {target_name} schedule {tunable}, got {op_name!r}")
    if not isinstance(trials, int) or isinstance(trials, bool) or trials < 1:
        raise ValueError(f"--trials: expected an integer >= 1, got {trials!r}")
    return rule, key


def tune(op_name: str, target_name: str, dtype: str, dims: dict, trials: int, work_dir: str | None = None,
         rpc: tuple[str, int, str] | None = None, root: Path | None = None,
         out: Callable[[str], None] = print, per_round: int = 8) -> dict:
    """Search the op's knobs for ``trials`` measurements; write and return the summary record.

    ``out`` gets a progress line as each stage begins (``[done/trials trials, seconds] ...``): the
    measuring worker's start, each round of ``per_round`` trials with the best so far, the final
    side-by-side timing; after each round, a line per point it measured (``  {knobs}: <ms> ms``, or
    ``failed``).  Every candidate runs on the op's sample inputs (``_arguments``)."""
    t0 = time.perf_counter()

    def progress(done: int, text: str) -> None:
        out(f"[{done}/{trials} trials, {time.perf_counter() - t0:.0f} s] {text}")

    import tvm

    rule, key = check(op_name, target_name, dtype, trials)
    if rpc is not None:
        check_tracker(rpc[0], rpc[1])
    progress(0, "loading meta-schedule")
    from tvm.s_tir import meta_schedule as ms

    _prepare_builds()

    func, _ = _specialised(op_name, dtype, dims)
    mod = tvm.IRModule({"main": func})
    names = [p.name for p in func.params]
    space_names = sorted(rule.space(tvm_api.target(targets.get(target_name).tvm_target())))
    tgt = tvm_api.target(targets.get(target_name).tvm_target())
    dest = record_path(op_name, target_name, dtype, root)
    dest.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.stem}-"))
    try:
        db_dir = scratch / "db"
        db_dir.mkdir()
        if rpc is not None:
            runner = ms.runner.RPCRunner(ms.runner.RPCConfig(tracker_host=rpc[0], tracker_port=rpc[1],
                                                             tracker_key=rpc[2], session_timeout_sec=120),
                                         f_alloc_argument=functools.partial(_rpc_arguments, op_name, dtype,
                                                                            dict(dims), names))
        else:
            progress(0, "starting meta-schedule's measuring worker (a process that imports TVM)")
            runner = _local_runner()
            # the worker (one per process) measures this op now: its inputs
            runner.f_alloc_argument = functools.partial(_device_arguments, op_name, dtype, dict(dims), names)
        db = ms.database.JSONDatabase(work_dir=str(db_dir))
        done, best, shown_points = 0, None, []
        while done < trials:
            n = min(per_round, trials - done)
            progress(done, f"building and measuring {n} candidate schedules")
            _quiet_meta_schedule()
            ms.tune_tir(mod, tgt, str(Path(work_dir or scratch) / "ms"), max_trials_global=n,
                        num_trials_per_iter=n, space=ms.space_generator.ScheduleFn(
                            _space(rule, tgt, op_name, dtype, dims), sch_rules=[], postprocs=[],
                            mutator_probs={}),
                        strategy="replay-func", builder=_in_process_builder(),
                        runner=runner, database=db, cost_model="random", num_tuning_cores=1)
            done += n
            best = _knobs_of(db, space_names)
            points = _points(db, space_names)
            shown = (f"best {best[1] * 1e3:.3f} ms with {best[0]}" if best else "no successful measurement yet")
            progress(done, f"{len(points)} records, {shown}")
            for point in points:  # this round's (the database keeps them by time, not in order)
                if point in shown_points:
                    shown_points.remove(point)
                    continue
                out(f"  {point[0]}: " + (f"{point[1] * 1e3:.3f} ms" if point[1] is not None else "failed"))
            shown_points = points
        if best is None:
            raise RuntimeError(f"tuning {op_name} {dtype}: no trial was measured successfully "
                               f"(see {work_dir or 'the meta-schedule logs'})")
        knobs = best[0]
        hand = rule.defaults(tgt)
        progress(done, "timing the best and the hand schedule side by side")
        tuned_ms, hand_ms = (float(t) for t in _time(op_name, dtype, dims, rule, [knobs, hand]))
        rec = {"format": FORMAT, "op": op_name, "target": target_name, "dtype": dtype, "target_key": key,
               "cpu": llvm.host_cpu() or "generic",
               "shape": dict(dims), "knobs": knobs, "hand_knobs": hand, "tuned_ms": tuned_ms, "hand_ms": hand_ms,
               "use": bool(tuned_ms < MARGIN * hand_ms and knobs != hand), "margin": MARGIN, "trials": trials,
               "rpc": None if rpc is None else f"{rpc[0]}:{rpc[1]} key {rpc[2]}",
               "tvm": tvm_api.tvm_version(), "database": f"{dest.stem}/"}
        # atomically: the database folder, then the summary that points at it
        final_db = dest.parent / dest.stem
        if final_db.exists():
            os.replace(final_db, scratch / "old")
        os.replace(db_dir, final_db)
        tmp = scratch / "summary.json"
        tmp.write_text(json.dumps(rec, indent=1, sort_keys=True) + "\n")
        os.replace(tmp, dest)
        return rec
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
