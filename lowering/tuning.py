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

Records.  The search writes this machine class's record (summary and meta-schedule's database,
to a temporary name and renamed); where records are and which one a build takes is
:mod:`fusedgrad.lowering.tuning_records`, the only part of tuning a build imports.

Shapes.  Meta-schedule measures concrete shapes: the kernel is specialised to
the ``--shape`` given (the shape class the record stands for), while builds
apply the chosen knobs to the shape-generic kernels they always produce.

Distributed tuning uses TVM's own RPC tracker: with ``rpc=(host, port, key)``
the measurements run on the rpc_servers registered under ``key``
(meta-schedule's RPCRunner); the builds run here.
"""
from __future__ import annotations

import functools
import json
import os
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
from ..schedules import tir_api
from ..targets import llvm
from . import intrinsics, tvm_api
from .tuning_kernels import builds_own as _builds_own
from .tuning_kernels import definition as _definition
from .tuning_kernels import device_arguments as _device_arguments
from .tuning_kernels import rpc_arguments as _rpc_arguments
from .tuning_kernels import scheduled as _scheduled
from .tuning_kernels import specialised as _specialised
from .tuning_kernels import static as _static
from .tuning_kernels import time as _time
from .tuning_records import FORMAT, record_path, target_key

# a tuned schedule is used only when it beat the hand one by more than the noise:
# interleaved medians on a shared machine still differ by a few percent run to run
MARGIN = 0.97


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
        own = tir_api.schedule(_static(_scheduled(rule.tuned(values), generic, target), op, dims))
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
