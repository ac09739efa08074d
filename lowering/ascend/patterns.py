"""The kernel patterns of the Ascend packages: how an op's main kernels are printed from its scheduled
TIR.  A pattern is anything with the functions of ``KernelPattern`` (the modules ``gates`` and
``rownorm`` are two); an op's package record names its pattern (``OpPackage.kernel``) and
``pattern(name)`` finds it among the registered ones.

To add a pattern: a module of lowering.ascend with ``kernel_file``, ``entries`` and ``sizes_header``
as below, registered here with ``register(name, module)``; an op's record then names it.
"""
from __future__ import annotations

from typing import Mapping, Protocol, runtime_checkable

from ...schedules.ascend import OpPackage
from . import gates, rownorm


@runtime_checkable
class KernelPattern(Protocol):
    """What the package writer (lowering.ascend.package) asks of a kernel pattern."""

    def kernel_file(self, package: OpPackage, dtype: str) -> tuple[str, Mapping]:
        """The body of the op's kernel file for ``dtype`` (its main kernels, the group sum and, where
        the dtype has one, the copy kernel), and the sizes its sizes header records for ``dtype``."""

    def entries(self, package: OpPackage, dtype: str) -> list[str]:
        """The main kernels' symbol parts after the dtype (fg_<short>_<dtype>_<part>), in the order the
        launch header declares them."""

    def sizes_header(self, package: OpPackage, sizes: Mapping[str, Mapping]) -> str:
        """The kernels' sizes header (fg_<op>_sizes.h) from each dtype's sizes (``kernel_file``'s)."""


_REGISTERED: dict[str, KernelPattern] = {}


def register(name: str, pattern: KernelPattern) -> KernelPattern:
    """Make ``pattern`` the kernel pattern ``name`` (TypeError when it lacks a function of
    ``KernelPattern``; ValueError when the name is taken)."""
    if not isinstance(pattern, KernelPattern):
        missing = [f for f in ("kernel_file", "entries", "sizes_header") if not callable(getattr(pattern, f, None))]
        raise TypeError(f"Ascend kernel pattern {name!r} lacks {missing}")
    if name in _REGISTERED:
        raise ValueError(f"Ascend kernel pattern {name!r} is registered already")
    _REGISTERED[name] = pattern
    return pattern


def pattern(name: str) -> KernelPattern:
    """The kernel pattern ``name`` (ValueError when none is registered by that name)."""
    if name not in _REGISTERED:
        raise ValueError(f"no Ascend kernel pattern {name!r} (known: {names()})")
    return _REGISTERED[name]


def names() -> list[str]:
    """The registered kernel patterns' names."""
    return sorted(_REGISTERED)


register("gates", gates)  # elementwise rows with a gate axis (the LSTM-cell backward)
register("rownorm", rownorm)  # two passes over each row (the LayerNorm backward)
