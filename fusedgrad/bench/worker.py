"""Each benchmark competitor in its own process: the child that times one, the driver that alternates them.

On two cores, two runtimes' thread pools in one process distort each other (torch's collapses
first, which flatters fusedgrad), so every competitor of every case is timed in a fresh child:

    python fusedgrad/bench/worker.py '{"factory": "fusedgrad.bench.kernels:make_call", "args": {...},
                                       "threads": 2, "min_time": 0.25, "repeat": 7}'

The child imports only the module the factory names (``module:function``, or
``path/to/file.py:function`` for a script such as benchmarks/gemm_bench.py), calls
``factory(**args)`` for a zero-argument callable (inputs made, kernels built and checked there,
outside the timing), sets torch's thread count, times the callable with ``timing.median_time``
and prints one JSON line: ``{"seconds": s}``, or ``{"error": "Type: message"}`` when anything
failed.  The thread count reaches TVM, OpenMP, MKL and OpenBLAS through the environment the
driver starts the child with.  It runs as a script, not ``python -m``, so that a numpy-only probe
(the copy bandwidth) does not pay for importing TVM and torch, which ``fusedgrad/__init__`` does.

``alternate`` runs rounds of children, one per competitor, rotating their order each round,
and reports each competitor's median over the rounds (or its error).
"""
from __future__ import annotations

import contextlib
import dataclasses
import importlib
import importlib.util
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

THREAD_ENV = ("TVM_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
COPY_MIB = 64
PEAK_N = 2048  # the peak probe's square float32 matmul


@dataclasses.dataclass(frozen=True)
class Competitor:
    """One side of a case: its name in the table and the factory (with arguments) a child calls.
    ``min_time``/``repeat`` override the driver's for a slow side (numpy's float64-free references).
    With ``parts``, one child times several callables of the same runtime in turn (the factory
    returns {part: callable, or the exception that kept it from being made}), each reported under
    its part name, a failing part with its own error: it saves a process start (importing TVM and
    torch) per part and never puts two runtimes in one process."""

    name: str
    factory: str
    args: dict = dataclasses.field(default_factory=dict)
    min_time: float | None = None
    repeat: int | None = None
    parts: tuple = ()


@dataclasses.dataclass
class Result:
    """A competitor's median seconds per call over the rounds (None when it failed), each round's
    median, and the error of the child that failed, if one did."""

    seconds: float | None
    samples: list
    error: str | None = None


def copy_probe(mib: int = COPY_MIB):
    """A numpy copy of ``mib`` MiB: the machine's copy bandwidth is 2 * bytes / its time."""
    import numpy as np

    src = np.ones(mib * 2**20 // 4, dtype=np.float32)
    dst = np.empty_like(src)
    return lambda: np.copyto(dst, src)


def copy_gbs(seconds: float, mib: int = COPY_MIB) -> float:
    """GB/s of ``copy_probe`` (read + write counted) from its time per call."""
    return 2 * mib * 2**20 / seconds / 1e9


def matmul_probe(n: int = PEAK_N):
    """A float32 [n, n] x [n, n] matmul through torch (numpy's BLAS when torch is missing): the
    machine's measured matmul peak is 2 n^3 / its time."""
    try:
        import torch
    except ImportError:
        import numpy as np

        a = np.ones((n, n), dtype=np.float32)
        return lambda: a @ a
    a = torch.ones(n, n)
    return lambda: torch.mm(a, a)


def probe(name: str, **args) -> Competitor:
    """A competitor for one of this file's probes ("copy_probe", "matmul_probe"), named by path so
    the child imports numpy (and torch) only."""
    return Competitor(name, f"{Path(__file__).resolve()}:{name}", args)


def cpu_model() -> str:
    """This machine's CPU model name (/proc/cpuinfo, else lscpu), or "unknown CPU"."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    try:
        text = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        text = ""
    return next((ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.startswith("Model name")),
                "unknown CPU")


def describe_machine(threads: int, rounds: int) -> list[str]:
    """The lines every benchmark table starts with: the CPU, the LLVM CPU the kernels are built for,
    torch's version, the threads and how the numbers are taken."""
    from fusedgrad.targets import llvm

    torch = importlib.util.find_spec("torch")
    version = "not installed"
    if torch is not None:
        from importlib import metadata

        version = metadata.version("torch")
    return [f"CPU: {cpu_model()}, {os.cpu_count()} cores; kernels built for LLVM CPU "
            f"{llvm.host_cpu() or 'generic'} ({llvm.MCPU_ENV} picks another); torch {version}",
            f"{threads} threads per competitor ({', '.join(THREAD_ENV)}, torch.set_num_threads); "
            f"each competitor in its own process, median of {rounds} alternating rounds"]


def child_env(threads: int) -> dict:
    """The environment a child runs with: this one, every runtime's thread count set to ``threads``."""
    env = dict(os.environ)
    env.update({k: str(threads) for k in THREAD_ENV})
    return env


@contextlib.contextmanager
def busy_beside(on: bool = True):
    """While the block runs, one lowest-priority process (``nice -n 19``) spinning on a core: what a
    training job always has beside it (a data loader, logging, a compile).  Nothing when not ``on``."""
    if not on:
        yield
        return
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"], preexec_fn=lambda: os.nice(19))
    try:
        yield
    finally:
        proc.kill()
        proc.wait()


def run_child(job: dict, timeout: float = 900.0) -> dict:
    """Run one child for ``job`` and return its JSON result; a child that crashed, timed out or
    printed no result gives ``{"error": ...}`` saying so (its last line of stderr, or its signal)."""
    cmd = [sys.executable, str(Path(__file__).resolve()), json.dumps(job)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              env=child_env(job.get("threads", 1)))
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                break
    last = next((ln for ln in reversed(proc.stderr.splitlines()) if ln.strip()), "")
    how = f"killed by signal {-proc.returncode}" if proc.returncode < 0 else f"exit status {proc.returncode}"
    return {"error": f"child {how}, no result" + (f": {last.strip()}" if last else "")}


def alternate(competitors, rounds: int, threads: int, min_time: float, repeat: int,
              timeout: float = 900.0) -> dict[str, Result]:
    """Time every competitor in ``rounds`` rounds, each in its own child, the order rotated each
    round so none always runs first; return {name (or part): Result} with the median over the
    rounds.  A competitor whose child fails is not run again and reports that error."""
    results = {p: Result(None, []) for c in competitors for p in (c.parts or (c.name,))}
    for r in range(rounds):
        k = r % len(competitors)
        for c in competitors[k:] + competitors[:k]:
            names = c.parts or (c.name,)
            if results[names[0]].error is not None:
                continue
            job = {"factory": c.factory, "args": c.args, "threads": threads, "parts": list(c.parts),
                   "min_time": c.min_time if c.min_time is not None else min_time,
                   "repeat": c.repeat if c.repeat is not None else repeat}
            got = run_child(job, timeout)
            for name in names:
                error = got.get("error") or got.get("errors", {}).get(name)
                if results[name].error is not None:
                    continue
                if error is not None:
                    results[name].error = error
                else:
                    results[name].samples.append(got["seconds"][name] if c.parts else got["seconds"])
    for res in results.values():
        res.seconds = statistics.median(res.samples) if res.error is None and res.samples else None
    return results


def _load(factory: str):
    where, _, name = factory.rpartition(":")
    if not where or not name:
        raise ValueError(f"factory: expected 'module:function' or 'file.py:function', got {factory!r}")
    if where.endswith(".py"):
        spec = importlib.util.spec_from_file_location(Path(where).stem, where)
        module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(where)
    return getattr(module, name)


def _timing():
    # timing.py is a leaf (numpy only): load it by path, so that a numpy-only probe does not
    # import the fusedgrad package (and with it TVM and torch)
    if "fusedgrad.timing" in sys.modules:
        return sys.modules["fusedgrad.timing"]
    spec = importlib.util.spec_from_file_location("_fusedgrad_timing", Path(__file__).parent.parent / "timing.py")
    module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def child_main(job_text: str) -> int:
    """The child: time ``job``'s callable and print its result as one JSON line (never a traceback)."""
    try:
        job = json.loads(job_text)
        fn = _load(job["factory"])(**job.get("args", {}))
        if "torch" in sys.modules:
            sys.modules["torch"].set_num_threads(int(job.get("threads", 1)))
        timed = lambda f: _timing().median_time(f, job.get("min_time", 0.25), job.get("repeat", 7))  # noqa: E731
        if not job.get("parts"):
            print(json.dumps({"seconds": timed(fn)}), flush=True)
            return 0
        if not isinstance(fn, dict) or set(fn) != set(job["parts"]):
            raise TypeError(f"factory: expected a dict of the parts {job['parts']}, got {type(fn).__name__}")
        seconds, errors = {}, {}
        for part in job["parts"]:
            try:
                if isinstance(fn[part], BaseException):
                    raise fn[part]
                seconds[part] = timed(fn[part])
            except Exception as e:  # noqa: BLE001 -- that part's error, in the table
                errors[part] = _message(e)
        print(json.dumps({"seconds": seconds, "errors": errors}), flush=True)
    except BaseException as e:  # noqa: BLE001 -- the parent reports it by competitor, in the table
        print(json.dumps({"error": _message(e)}), flush=True)
    return 0


def _message(e: BaseException) -> str:
    msg = str(e).strip().splitlines()
    return f"{type(e).__name__}: {msg[0] if msg else ''}".rstrip(": ")


def parts_of(make, keys) -> dict:
    """{key: make(key)} for a factory with parts; a key that ``make`` fails on maps to its exception
    (that part's error), so one bad case does not cost the others their timing."""
    out = {}
    for key in keys:
        try:
            out[key] = make(key)
        except Exception as e:  # noqa: BLE001 -- reported by the child as this part's error
            out[key] = e
    return out


if __name__ == "__main__":
    # run as a script: this folder is sys.path[0], where its modules (lstm, plot...) would shadow any
    # top-level modules of those names
    sys.path.pop(0)
    sys.exit(child_main(sys.argv[1]))
