"""fusedgrad command line: generate (the main job), list, graph, bench."""
from __future__ import annotations

import argparse
import filecmp
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from . import __version__, api, paths, te_defs, tensors
from . import targets as _targets
from .lowering import build as _build
from .lowering import packagers as _packagers
from .lowering import sources as _sources


_START = time.perf_counter()  # when the command began: progress lines say the seconds since


def _progress(i: int, n: int, text: str) -> None:
    """One progress line on stderr, printed as step ``i`` of ``n`` begins: ``[i/n, 12.3 s] text``."""
    print(f"[{i}/{n}, {time.perf_counter() - _START:.1f} s] {text}", file=sys.stderr, flush=True)


def _smoke(op_name: str, dtype: str, lib) -> dict:
    """Run every variant on the op's small odd case against the float64 reference; time one call of
    the full variant there (per-call overhead, mostly: no competitor is timed at this size, where a
    ratio would compare overheads, not kernels; `fusedgrad bench` does)."""
    from . import timing

    op = te_defs.get(op_name)
    dims = op.shapes["odd, not a vector multiple"]
    sample = op.sample(dims, np.random.default_rng(0))
    specs = {s.name: s for s in op.inputs}
    # each input in the op's dtype, or the one its definition fixes (e.g. int32 batch sizes)
    arrays = {k: v.astype(specs[k].dtype or tensors.NP_DTYPES[dtype]) for k, v in sample.items()}
    exact = {k: v.astype(np.float64) for k, v in arrays.items()}
    worst = 0.0
    for variant in op.variants:
        given = {k: (v if op.present(specs[k], variant) else None) for k, v in arrays.items()}
        got = api.run(op_name, given, {}, variant, library=lib)
        ref = op.reference(**{k: (exact[k] if given[k] is not None else None) for k in given}, **variant)
        for name, value in got.items():
            if value is not None:
                r = ref[name]
                err = np.abs(np.asarray(value, dtype=np.float64) - r.reshape(np.shape(value))).max()
                worst = max(worst, float(err / (np.abs(r).max() + 1.0)))
    tol = {"float32": 1e-5, "float16": 2e-2, "bfloat16": 8e-2}[dtype]
    full = op.variants[0]
    return {"status": "ok" if worst <= tol else "MISMATCH", "err": worst, "tol": tol, "variants": len(op.variants),
            "ours_ms": 1e3 * timing.median_time(lambda: api.run(op_name, arrays, {}, full, library=lib), 0.05, 3)}


def cmd_generate(args) -> int:
    if args.check or args.sources:
        return _generate_sources(args)
    out = _check_out(args.out)
    info = _targets.get(args.target or "llvm")
    if args.arch is not None:
        if info.archs is None:
            raise ValueError(f"--arch: target {info.name!r} has no device architectures, got {args.arch!r}")
        import os

        os.environ[_targets.CUDA_ARCH_ENV] = args.arch
        _targets.cuda_archs()  # validate now, before anything is built
    # --cpu (repeatable) / --triple: one build per CPU named, each its own ISA class, into one folder
    cpus = _cpus_to_build(info, args.cpu, args.triple) if args.cpu or args.triple is not None else [None]
    packager = _packagers.get(info)
    ops = args.op or info.served_ops()
    jobs = [(o, d) for o in ops for d in (args.dtype or info.dtypes_for(o))]
    for o, d in jobs:
        info.check(o, d)
    # the keys the Python API builds under here (runtime.artifact): an artifact built for them goes
    # into its cache; taken now, before --cpu changes what the llvm target builds for
    api_keys = ({job: _build.cache_key(job[0], info.name, job[1]) for job in jobs}
                if args.cache and info.runnable_here and isinstance(packager, _packagers.LibraryPackager) else {})
    starts = []  # when each step the packager reports began: a step's time runs to the next one's start

    def progress(i: int, n: int, text: str) -> None:
        starts.append(time.perf_counter())
        _progress(i, n, text)

    entries = []
    for facts in cpus:
        if facts is not None:
            _build_for(facts)
        entries += packager.generate(info, jobs, out, progress)
    starts.append(time.perf_counter())
    steps = [b - a for a, b in zip(starts, starts[1:])]
    # a library packager reports one step per entry; a source packager one step for the whole tree
    rows = [{"op": e["op"], "dtype": e["dtype"], "entry": e,
             "build_s": steps[k] if len(steps) == len(entries) else sum(steps) / len(entries)}
            for k, e in enumerate(entries)]
    for row in rows:  # why this machine cannot run a library (None: it can)
        row["why"] = info.cannot_run(row["entry"].get("tvm_target", {})) if info.cannot_run else None
    elsewhere = {r["why"] for r in rows} - {None}
    runnable = [r for r in rows if info.runnable_here and r["why"] is None]
    if runnable:
        from . import runtime

        for i, row in enumerate(runnable, 1):
            art = runtime.load_entry(row["entry"], out)  # this very library, whichever class load would pick
            cls = f" {art.isa_class}" if art.isa_class else ""
            _progress(i, len(runnable), f"checking {row['op']} {row['dtype']}{cls} against the float64 reference")
            row.update(_smoke(row["op"], row["dtype"], runtime.Library({art.key: art})))
    cached = _install(out, rows, api_keys) if api_keys else None
    print(f"\nfusedgrad {__version__}: {len(rows)} artifacts for target {info.name} in {out}/ "
          f"({_build.MANIFEST} lists them)\n")
    print(f"| {'op':20} | {'dtype':8} | {'isa class':9} | {'runs here':9} | {'kernels':7} | {'build s':7} | "
          f"{'status':8} | {'max rel err':11} | {'call ms':7} |")
    print(f"|{'-' * 22}|{'-' * 10}|{'-' * 11}|{'-' * 11}|{'-' * 9}|{'-' * 9}|{'-' * 10}|{'-' * 13}|{'-' * 9}|")
    bad = 0
    for r in rows:
        runs = "-" if not info.runnable_here else "no" if r["why"] else "yes"
        head = f"| {r['op']:20} | {r['dtype']:8} | {r['entry'].get('isa_class') or '-':9} | {runs:9} | "
        if "status" not in r:
            kernels = len(r["entry"]["kernels"]) if "kernels" in r["entry"] else "-"
            status = "built" if "kernels" in r["entry"] else "written"
            print(f"{head}{kernels:7} | {r['build_s']:7.1f} | {status:8} | {'-':11} | {'-':7} |")
            continue
        bad += r["status"] != "ok"
        print(f"{head}{r['variants']:7} | {r['build_s']:7.1f} | {r['status']:8} | "
              f"{r['err']:11.2e} | {r['ours_ms']:7.3f} |")
    picks = _picks(out, info, rows)
    if picks:
        print(f"\n(one folder, several ISA classes: runtime.load loads, per op and dtype, the best class the "
              f"running CPU supports; here: {'; '.join(picks)})")
    if elsewhere:
        print(f"\n(built for another machine, not run here: {'; '.join(sorted(elsewhere))})")
    if cached:
        print(f"\n{cached}")
    if runnable:
        print("\n(call ms: median time of one call of the full variant on the small check case, through the "
              "API: per-call overhead, mostly, so no speed is compared here; `fusedgrad bench` measures speed "
              "against torch and numpy at sizes where the kernels' work counts)")
    if not info.runnable_here:
        print(f"\n(target {info.name} does not run in this process: {'built' if info.archs else 'written'} "
              "only, not checked against the reference here)")
    folders = sorted({rel.split("/")[0] + "/" for r in rows for rel in r["entry"].get("files", {}) if "/" in rel})
    if folders:  # a source package may hold more than its ops' rows (Ascend: the full LSTM's package)
        print(f"\n(folders written under {out}/: {', '.join(folders)})")
    return 1 if bad else 0


def _check_out(text: str) -> Path:
    """--out as a Path, checked before anything is built: a folder (or where one can be made) whose
    manifest, if it has one, is one the build can add its entries to."""
    out = paths.check_folder("--out", text)
    try:
        _build.read_manifest(out)
    except ValueError as e:
        raise ValueError(f"--out: {e}; remove it or choose another folder") from None
    return out


def _install(out: Path, rows: list[dict], api_keys: dict) -> str:
    """Put each artifact that passed its check into the Python API's kernel cache when it is what the
    API builds here (its cache key is the API's: not so for another CPU's build); what was done, said
    in one note for after the table."""
    from . import runtime

    put, kept, other = [], [], []
    for row in rows:
        entry = row["entry"]
        name = f"{row['op']} {row['dtype']}"
        if row.get("status") != "ok":
            continue  # not run here, or failed its check: the API builds its own
        if entry.get("cache_key") != api_keys.get((row["op"], row["dtype"])):
            other.append(f"{name} {entry.get('isa_class') or ''}".strip())
            continue
        try:
            (put if runtime.install(entry, out) else kept).append(name)
        except (OSError, runtime.ArtifactError) as e:
            return f"(not put into the Python API's kernel cache {runtime.cache_dir()}: {e})"
    notes = []
    if put or kept:
        notes.append(f"(the Python API calls these {len(put) + len(kept)} artifacts without building them: "
                     f"they are in its kernel cache {runtime.cache_dir()}/ ({len(put)} put there now, {len(kept)} "
                     f"there already); --no-cache leaves the cache alone)")
    if other:
        notes.append(f"(not put into the Python API's kernel cache, whose builds are for this machine's CPU: "
                     f"{', '.join(other)})")
    return "\n".join(notes)


def _picks(out: Path, info, rows: list[dict]) -> list[str]:
    """For each (op, dtype) built whose folder holds several ISA classes: "op dtype -> the class
    runtime.load picks on this machine" (or "none runs here")."""
    from . import runtime

    picks = []
    entries = _build.read_manifest(out)["artifacts"]
    for op, dtype in dict.fromkeys((r["op"], r["dtype"]) for r in rows):
        same = [e for e in entries if (e["op"], e["target"], e["dtype"]) == (op, info.name, dtype) and "library" in e]
        if len({e.get("isa_class") for e in same}) < 2:
            continue
        try:
            pick = runtime.best_runnable_entry(same, out).get("isa_class") if info.runnable_here else None
        except runtime.ArtifactError:
            pick = None
        picks.append(f"{op} {dtype} -> {pick or 'none runs here'}")
    return picks


def _cpus_to_build(info, cpus: list[str] | None, triple: str | None) -> list:
    """--cpu (repeatable) / --triple: the facts of each CPU to build the CPU target's libraries for,
    all checked now, before anything is built (a bad name, a triple without its cross compiler, two
    CPUs of one ISA class: a folder holds one library per class and op)."""
    from .targets import llvm

    if info.tvm_target()["kind"] != "llvm":
        raise ValueError(f"--cpu/--triple: target {info.name!r} does not build for a named CPU "
                         f"(the CPU target does: llvm), got --cpu {cpus!r} --triple {triple!r}")
    out, seen = [], {}
    for cpu in cpus or [None]:
        facts = llvm.check_build_for(cpu, triple)
        if facts.isa_class in seen:
            raise ValueError(f"--cpu: {seen[facts.isa_class]!r} and {facts.cpu!r} are both of ISA class "
                             f"{facts.isa_class} (one library per class and op): name one of them")
        seen[facts.isa_class] = facts.cpu
        out.append(facts)
    return out


def _build_for(facts) -> None:
    """Make the CPU target build for ``facts``' CPU and triple from now on (the choice reaches the target
    record through its environment variables; the cache keys, which include the TVM target, are dropped)."""
    import os

    from .targets import llvm

    os.environ[llvm.MCPU_ENV] = "" if facts.cpu == "generic" else facts.cpu
    os.environ[llvm.MTRIPLE_ENV] = facts.triple
    _build.cache_key.cache_clear()
    print(f"building for CPU {facts.cpu} ({facts.triple}): {facts.isa}, {facts.vector_bits}-bit vectors x "
          f"{facts.vector_registers}, ISA class {facts.isa_class}")


def _generate_sources(args) -> int:
    root = paths.check_folder("--generated", args.generated)
    names = [_targets.get(args.target).name] if args.target else _targets.names()
    if args.check:
        with tempfile.TemporaryDirectory() as tmp:
            written = _write_sources(Path(tmp), names)
            diffs = _compare(Path(tmp), root, written, names)
        if diffs:
            print(f"{root}/ is stale; regenerate with `{_sources.REGEN_COMMAND}`:", file=sys.stderr)
            for d in diffs:
                print(f"  {d}", file=sys.stderr)
            return 1
        print(f"{root}/: {len(written)} files of {', '.join(names)} match a fresh generation")
        return 0
    # every target is generated into a fresh folder beside root first, and only when all of them
    # were made does each replace its old folder whole (files it no longer makes go): a failure
    # part way leaves the committed folders as they were
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root, prefix=".fresh-") as tmp:
        written = _write_sources(Path(tmp), names)
        for name in names:
            if (root / name).is_dir():
                (root / name).rename(Path(tmp) / f".old-{name}")
            if (Path(tmp) / name).is_dir():
                (Path(tmp) / name).rename(root / name)
    print(f"wrote {len(written)} files of {', '.join(names)} under {root}/")
    return 0


def _write_sources(root: Path, names: list[str]) -> list[str]:
    """lowering.sources.write_all, one target at a time with a progress line each."""
    written = []
    for i, name in enumerate(names, 1):
        _progress(i, len(names), f"generating the {name} sources")
        written += _sources.write_all(root, [name])
    return sorted(written)


def _compare(fresh: Path, committed: Path, written: list[str], names: list[str]) -> list[str]:
    diffs = []
    for rel in written:
        if not (committed / rel).exists():
            diffs.append(f"missing: {rel}")
        elif not filecmp.cmp(fresh / rel, committed / rel, shallow=False):
            diffs.append(f"differs: {rel}")
    for name in names:
        for path in sorted((committed / name).rglob("*")):
            rel = str(path.relative_to(committed))
            if path.is_file() and rel not in written:
                diffs.append(f"not generated any more: {rel}")
    return diffs


def cmd_list(args) -> int:
    print("ops:")
    for name in te_defs.names():
        op = te_defs.get(name)
        ins = ", ".join(f"{t.name}[{','.join(t.shape)}]{'?' if t.when else ''}" for t in op.inputs)
        outs = ", ".join(f"{t.name}[{','.join(t.shape)}]{'?' if t.when else ''}" for t in op.outputs)
        print(f"  {name}: ({ins}) -> ({outs}); {len(op.variants)} variant(s); dtypes {', '.join(op.dtypes)}")
    print("targets:")
    for name in _targets.names():
        t = _targets.get(name)
        ops = t.served_ops()
        print(f"  {name}: {t.description}")
        print(f"    ops {', '.join(ops)}; dtypes {', '.join(t.dtypes)}; packaged as {t.artifact}")
        print(f"    TVM target {t.tvm_target()}")
    return 0


def cmd_graph(args) -> int:
    """Write the full LSTM's launch plan as Graphviz DOT (and PNG when ``dot`` is installed); with
    ``--json`` also the plan data (``lstm.launches``) that every host runs."""
    import shutil
    import subprocess

    from . import lstm
    from .lstm import launches as launch_data

    for name in ("steps", "batch", "input_size", "hidden_size", "layers"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')}: expected an integer >= 1, got {getattr(args, name)}")
    cfg = lstm.Config(T=args.steps, B=args.batch, I=args.input_size, H=args.hidden_size, L=args.layers,
                      D=2 if args.bidirectional else 1, has_biases=True, varlen=args.varlen)
    out = Path(args.out)
    if out.suffix != ".dot":
        raise ValueError(f"--out: expected a .dot file name, got {str(out)!r}")
    written = {backward: out.with_name(out.stem + ("-backward" if backward else "-forward") + ".dot")
               for backward in (False, True)}
    for path in written.values():
        paths.check_file("--out", path)
        if args.json:
            paths.check_file("--out", path.with_suffix(".json"))
    out.parent.mkdir(parents=True, exist_ok=True)
    for backward, path in written.items():
        data = launch_data.build(cfg, "backward" if backward else "forward")
        g = lstm.graph_of(data)
        texts = {path: lstm.to_dot(g)} | ({path.with_suffix(".json"): launch_data.dumps(data)} if args.json else {})
        for target, text in texts.items():
            tmp = target.with_name(target.name + ".tmp")
            tmp.write_text(text)
            tmp.replace(target)
        level: list[int] = []
        for x in data["launches"]:
            level.append(1 + max((level[i] for i in x["after"]), default=-1))
        width = max((level.count(v) for v in set(level)), default=0)
        kernels = sum(x["op"] not in launch_data.HOST_OPS for x in data["launches"])
        print(f"{path}: {g.number_of_nodes()} nodes, {g.number_of_edges()} edges, {len(data['launches'])} "
              f"launches ({kernels} generated kernels, the rest host steps), up to {width} launches at once"
              + (f"; data in {path.with_suffix('.json')}" if args.json else ""))
        if shutil.which("dot"):
            png = path.with_suffix(".png")
            subprocess.run(["dot", "-Tpng", str(path), "-o", str(png)], check=True)
            print(f"{png}: rendered with graphviz")
    if not shutil.which("dot"):
        print("graphviz `dot` not found: DOT files only (apt-get install graphviz renders PNGs)")
    return 0


def cmd_tune(args) -> int:
    """Search an op's schedule knobs with meta-schedule; the record goes under generated/tuning/."""
    from .lowering import tuning, tuning_records

    dtypes = args.dtype or ["float32"]
    for d in dtypes:
        tuning.check(args.op, args.target, d, args.trials)
    if args.work_dir is not None:
        paths.check_folder("--work-dir", args.work_dir)
    if args.generated is not None:
        paths.check_folder("--generated", args.generated)
    dims = tuning.parse_shape(args.shape, args.op) if args.shape else None
    if dims is None:
        op = te_defs.get(args.op)
        dims = next(v for k, v in op.shapes.items() if k.startswith(("N=1024", "M=4096"))) \
            if any(k.startswith(("N=1024", "M=4096")) for k in op.shapes) else list(op.shapes.values())[-1]
    rpc = None
    if args.rpc_tracker:
        host, _, port = args.rpc_tracker.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"--rpc-tracker: expected HOST:PORT, got {args.rpc_tracker!r}")
        if not args.rpc_key:
            raise ValueError("--rpc-key: expected the key the rpc_servers registered with, got nothing")
        rpc = (host, int(port), args.rpc_key)
    elif args.rpc_key:
        raise ValueError(f"--rpc-key: only with --rpc-tracker, got {args.rpc_key!r} alone")
    root = Path(args.generated) / "tuning" if args.generated else None
    for dtype in dtypes:
        shape = ",".join(f"{k}={v}" for k, v in dims.items())
        print(f"tuning {args.op} {args.target} {dtype} at {shape}: {args.trials} trials"
              + (f" on the rpc_servers of {args.rpc_tracker} key {args.rpc_key}" if rpc else ""), flush=True)
        rec = tuning.tune(args.op, args.target, dtype, dims, args.trials, work_dir=args.work_dir, rpc=rpc,
                          root=root, out=lambda line: print(line, file=sys.stderr, flush=True))
        verdict = ("used by builds" if rec["use"] else
                   f"not used: not faster than the hand schedule by more than {100 * (1 - tuning.MARGIN):.0f}%")
        print(f"{args.op} {dtype}: tuned {rec['knobs']} {rec['tuned_ms']:.3f} ms, hand {rec['hand_knobs']} "
              f"{rec['hand_ms']:.3f} ms -> {verdict}")
        print(f"record: {tuning_records.record_path(args.op, args.target, dtype, root)}")
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="fusedgrad", description=__doc__)
    p.add_argument("--version", action="version", version=f"fusedgrad {__version__}")
    sub = p.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("generate", help="build every op x dtype for a target into ./build/ and check each kernel")
    g.add_argument("--target", help="target name (`fusedgrad list` names them; default: llvm, the host CPU; "
                   "with --sources/--check: every target)")
    g.add_argument("--op", action="append", help="only this op (repeatable)")
    g.add_argument("--dtype", action="append", help="only this dtype (repeatable)")
    g.add_argument("--out", default="build", help="artifact directory (default: ./build)")
    g.add_argument("--arch", help="device architectures to compile for, comma-separated "
                   f"(--target cuda; default {','.join(_targets.CUDA_DEFAULT_ARCHS)})")
    g.add_argument("--cpu", action="append", help="llvm: build for this LLVM CPU (e.g. haswell, znver3, "
                   "skylake-avx512, neoverse-n1; default: this machine's); repeatable: one library per ISA "
                   "class in one folder, runtime.load picks the best this CPU runs; artifacts this machine "
                   "cannot run are built, not run")
    g.add_argument("--triple", help="llvm: build for this target triple (e.g. aarch64-linux-gnu; its Debian "
                   "cross compiler links the libraries; default: this machine's)")
    g.add_argument("--sources", action="store_true", help="write the committed sources of --target (default: "
                   "every target) under --generated instead")
    g.add_argument("--check", action="store_true", help="regenerate the committed sources in a temporary "
                   "folder and fail if --generated differs")
    g.add_argument("--generated", default="generated", help="committed sources folder (default: ./generated)")
    g.add_argument("--no-cache", dest="cache", action="store_false", help="do not put the artifacts into the "
                   "Python API's kernel cache ($FUSEDGRAD_CACHE, default ~/.cache/fusedgrad; by default each "
                   "one that runs here and passed its check goes there, so the API does not build it again)")
    g.set_defaults(fn=cmd_generate)
    sub.add_parser("list", help="ops, targets and dtypes").set_defaults(fn=cmd_list)
    gr = sub.add_parser("graph", help="write the full LSTM's launch plan (DAG) as DOT, and PNG with graphviz")
    gr.add_argument("--steps", type=int, default=4, help="time steps T (default 4)")
    gr.add_argument("--batch", type=int, default=32, help="batch size B")
    gr.add_argument("--input-size", type=int, default=256, help="input size I")
    gr.add_argument("--hidden-size", type=int, default=256, help="hidden size H")
    gr.add_argument("--layers", type=int, default=2, help="num_layers L (default 2)")
    gr.add_argument("--bidirectional", action="store_true", help="two directions per layer")
    gr.add_argument("--varlen", action="store_true", help="variable-length sequences (batch_sizes)")
    gr.add_argument("--json", action="store_true", help="also write each pass's plan data (buffers, launches "
                    "binding views of them, dependencies: what every host runs) as -forward/-backward.json "
                    "beside the DOT files")
    gr.add_argument("--out", default="build/lstm-plan.dot",
                    help="DOT file name; -forward/-backward are appended (default build/lstm-plan.dot)")
    gr.set_defaults(fn=cmd_graph)
    t = sub.add_parser("tune", help="tune an op's schedule with meta-schedule (record in generated/tuning/)")
    t.add_argument("--op", required=True, help="op whose schedule has knobs (e.g. lstm_cell_backward, layer_norm_backward)")
    t.add_argument("--target", default="llvm", help="target (default llvm: this machine)")
    t.add_argument("--dtype", action="append", help="dtype (repeatable; default float32)")
    t.add_argument("--shape", help="shape class to tune at, e.g. N=1024,H=1024 (default: the op's benchmark shape)")
    t.add_argument("--trials", type=int, default=32, help="measurements (default 32)")
    t.add_argument("--work-dir", help="keep meta-schedule's logs here (default: a temporary folder)")
    t.add_argument("--rpc-tracker", metavar="HOST:PORT", help="measure on the rpc_servers of this TVM RPC tracker")
    t.add_argument("--rpc-key", help="device key the rpc_servers registered with")
    t.add_argument("--generated", help="write the record under GENERATED/tuning/ (default: the source tree's)")
    t.set_defaults(fn=cmd_tune)
    sub.add_parser("bench", help="benchmark the kernels against torch and numpy (fusedgrad bench -h)")
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["bench"]:  # its options belong to fusedgrad.bench.kernels
        from .bench import kernels

        return kernels.main(argv[1:])
    args = p.parse_args(argv)
    global _START
    _START = time.perf_counter()
    try:
        return args.fn(args)
    except (ValueError, TypeError) as e:
        print(f"fusedgrad: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
