"""Timing for the benchmarks: interleaved medians, copy bandwidth, the optional torch.

A leaf module (numpy only): ``bench.worker``'s children time their one
competitor with ``median_time`` (they load this file by path, without the
fusedgrad package); ``median_times`` interleaves several callables in one
process, for what must share one (benchmarks/dsp_bench.py's C against LLVM,
``fusedgrad generate``'s smoke timing).
"""
from __future__ import annotations

import statistics
import time
from typing import Callable


__all__ = ["SETTLE_S", "median_time", "median_times", "torch_or_none"]

# pause before each batch: TVM's and torch's thread pools spin-wait after a
# call, and on two cores one runtime's spinning workers slow the other's call
SETTLE_S = 0.02


def median_time(fn: Callable[[], object], min_time: float = 0.25, repeat: int = 7) -> float:
    """Median seconds per call over ``repeat`` batches of calls lasting about ``min_time``/repeat."""
    return median_times([fn], min_time, repeat)[0]


def median_times(fns, min_time: float = 0.25, repeat: int = 9, settle: float | None = None) -> list[float]:
    """Median seconds per call of each function, measured in interleaved rounds.

    The machine is shared and noisy: interleaving puts every competitor
    under the same load, so their ratio is fairer than their absolute times.
    Each batch starts after SETTLE_S, when the other runtime's workers sleep.
    """
    numbers = []
    for fn in fns:
        fn()  # warm-up (and compile/load on first use)
        t0 = time.perf_counter()
        fn()
        one = max(time.perf_counter() - t0, 1e-6)
        numbers.append(max(1, int(min_time / repeat / one)))
    samples = [[] for _ in fns]
    for _ in range(repeat):
        for fn, number, out in zip(fns, numbers, samples):
            time.sleep(SETTLE_S if settle is None else settle)
            t0 = time.perf_counter()
            for _ in range(number):
                fn()
            out.append((time.perf_counter() - t0) / number)
    return [statistics.median(s) for s in samples]


def torch_or_none():
    """torch if installed (it is a test extra), else None: then only numpy is compared."""
    try:
        import torch
    except ImportError:
        return None
    return torch
