"""Operator definitions: one module per op, each a TVM tensor-expression compute.

A definition says *what* an op computes and nothing about *how* or *where*:
its argument specification, a function building the TE graph for one dtype and
one variant, a float64 numpy reference, and named shapes for tests and
benchmarks.  Modules register themselves with :func:`register` on import.
"""
from __future__ import annotations

import dataclasses
import functools
import importlib
import pkgutil
from typing import Callable, Mapping

__all__ = ["TensorSpec", "ScalarSpec", "OpDef", "register", "get", "names"]


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """One tensor argument of an op, as the public API sees it.

    ``shape`` names each dimension with a symbol ("N", "H") or an expression
    over symbols that the API can evaluate ("4*H").  ``kernel_shape`` is the
    shape the kernel sees (e.g. ``storage`` [N, 4H] is passed to the kernel as
    the view [N, 4, H]); it defaults to ``shape``.  ``when`` names the
    variant flag under which the tensor exists: an input with ``when`` is
    optional (None selects the variant without it), an output with ``when``
    is only produced in that variant.  Inputs may have any row stride with a
    unit inner stride and are passed without a copy; an output with
    ``strided`` may too (the kernel writes into a caller's view).
    """

    name: str
    shape: tuple[str, ...]
    kernel_shape: tuple[str, ...] | None = None
    when: str | None = None
    strided: bool = False

    @property
    def kshape(self) -> tuple[str, ...]:
        return self.kernel_shape or self.shape


@dataclasses.dataclass(frozen=True)
class ScalarSpec:
    """A float scalar passed to the kernel at run time (e.g. ``eps``)."""

    name: str
    default: float


@dataclasses.dataclass(frozen=True)
class OpDef:
    """Everything fusedgrad knows about one operator, independent of targets.

    ``compute(dtype, **variant)`` returns the kernel's arguments, in order, as
    TE placeholders/computes and scalar ``tirx.Var``s; tensors absent from the
    variant are simply not among them.  ``variants`` lists every variant as a
    dict of booleans; the kernel entry name is derived from it by
    ``fusedgrad.lowering.naming``.  ``reference(**arrays, **variant)`` takes
    float64 arrays in the public layout and returns a dict of float64 outputs.
    ``shapes`` maps a case name to a dict of dimension sizes.
    ``sample(dims, rng)`` returns realistic float64 inputs (public layout) for
    those sizes, made with the op's forward; ``nbytes(dims, itemsize)`` is the
    minimum memory traffic of one call, for bandwidth figures.  ``dtypes``
    lists the dtypes the definition is written for (internal kernels, e.g.
    the LSTM's GEMMs, exist in float32 only).
    """

    name: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    scalars: tuple[ScalarSpec, ...]
    variants: tuple[Mapping[str, bool], ...]
    compute: Callable
    reference: Callable
    shapes: Mapping[str, Mapping[str, int]]
    sample: Callable
    nbytes: Callable
    doc: str = ""
    dtypes: tuple[str, ...] = ("float32", "float16", "bfloat16")

    @staticmethod
    def present(spec: TensorSpec, variant: Mapping[str, bool]) -> bool:
        """Whether a tensor is an argument of the kernel for ``variant``."""
        return spec.when is None or bool(variant[spec.when])


_REGISTRY: dict[str, OpDef] = {}


def register(op: OpDef) -> OpDef:
    if op.name in _REGISTRY:
        raise ValueError(f"op {op.name!r} is already registered")
    _REGISTRY[op.name] = op
    return op


@functools.lru_cache(maxsize=None)
def _load_all() -> None:
    """Import every op module of this package (each registers itself), once."""
    for info in pkgutil.iter_modules(__path__):
        if not info.name.startswith("_"):
            importlib.import_module(f"{__name__}.{info.name}")


def get(name: str) -> OpDef:
    _load_all()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"op: expected one of {sorted(_REGISTRY)}, got {name!r}") from None


def names() -> list[str]:
    _load_all()
    return sorted(_REGISTRY)
