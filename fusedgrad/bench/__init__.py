"""Benchmarks: fusedgrad's kernels and its full LSTM against torch and numpy, in the same run, as ratios.

``kernels``  each op's kernel against its competitors, and the ``fusedgrad bench`` command (:func:`main`)
``lstm``     the full LSTM's forward + backward and training step against ``torch.nn.LSTM``
``plot``     ``--plot FILE.png``: the per-op table as a roofline
``worker``   each competitor in its own process: the child that times one, the driver that alternates them

Importing this package imports none of them: a worker child imports only the module its factory
names (``fusedgrad.bench.lstm:make_sides``), and torch's side must not load TVM on the way.  The
per-op benchmark's names (``main``, ``run``, ``TORCH``, ``FLOPS``...) are importable from here too,
loaded from :mod:`fusedgrad.bench.kernels` on first use (PEP 562).
"""
from __future__ import annotations

_KERNELS = ("CASES", "DTYPES", "FLOPS", "TORCH", "competitors", "main", "make_call", "make_calls", "median_times",
            "part", "run")
__all__ = list(_KERNELS)


def __getattr__(name: str):
    """The per-op benchmark's names, from :mod:`fusedgrad.bench.kernels` on first use."""
    if name in _KERNELS:
        from . import kernels

        return getattr(kernels, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_KERNELS))
