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
import re
from typing import Callable, Mapping, Sequence

__all__ = ["TensorSpec", "ScalarSpec", "OpDef", "register", "get", "names", "parse_dim", "dim_size", "bind_dims"]


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
    ``strided`` may too (the kernel writes into a caller's view).  ``dtype``
    fixes the tensor's dtype whatever the op's (e.g. a float32 result of a
    float16 GEMM); None: the op's dtype, which every such tensor shares.
    """

    name: str
    shape: tuple[str, ...]
    kernel_shape: tuple[str, ...] | None = None
    when: str | None = None
    strided: bool = False
    dtype: str | None = None
    bounded_by: str | None = None
    """An integer input's values lie in 0 .. the size this names (e.g. a step's row count, at most B)."""
    non_increasing: bool = False
    """An integer input's values never grow along it (e.g. batch sizes of sequences sorted by length)."""

    @property
    def kshape(self) -> tuple[str, ...]:
        return self.kernel_shape or self.shape


# ---- the shape language of TensorSpec: a dimension is N, 4*H or a literal 32


@functools.lru_cache(maxsize=None)
def parse_dim(sym: str) -> tuple[int, str]:
    """A TensorSpec dimension as (factor, base): "4*H" -> (4, "H"); "N" -> (1, "N"); "4" -> (1, "4")."""
    m = re.fullmatch(r"(?:(\d+)\*)?(\w+)", sym)
    return int(m.group(1) or 1), m.group(2)


def bind_dims(dims: Mapping[str, int], spec: tuple[str, ...], actual: tuple[int, ...], name: str,
              origin: dict[str, str] | None = None) -> None:
    """Bind symbols of ``spec`` (e.g. ("N", "4*H")) to ``actual`` sizes, or raise naming the mismatch:
    both arguments, when ``origin`` records which argument bound each symbol."""
    if len(spec) != len(actual):
        raise ValueError(f"{name}: expected rank {len(spec)} (shape [{', '.join(spec)}]), got shape {list(actual)}")
    for sym, size in zip(spec, actual):
        k, base = parse_dim(sym)
        if base.isdigit():
            if size != int(base) * k:
                raise ValueError(f"{name}: expected shape [{', '.join(spec)}], got {list(actual)}")
            continue
        if size % k:
            raise ValueError(f"{name}: expected shape [{', '.join(spec)}]: {sym} must be a multiple of {k}, got {size}")
        if base in dims and dims[base] * k != size:
            where = f" ({base} = {dims[base]} from {origin[base]})" if origin and base in origin else ""
            raise ValueError(
                f"{name}: expected shape [{', '.join(spec)}] = "
                f"{[dim_size(dims, s) for s in spec]} from the other arguments{where}, got {list(actual)}"
            )
        if base not in dims and origin is not None:
            origin[base] = name
        dims.setdefault(base, size // k)


def dim_size(dims: Mapping[str, int], sym: str):
    """The size of dimension ``sym`` under ``dims`` (``sym`` itself while its base is unbound)."""
    k, base = parse_dim(sym)
    if base.isdigit():
        return int(base) * k
    return dims[base] * k if base in dims else sym


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

    ``schedule_flags`` names variant flags that choose how a kernel is
    scheduled, not what it computes (e.g. ``matmul_packed``'s schedule for a
    few rows): a variant setting one is a further entry point with the same
    arguments and definition.  ``compute`` is not given these flags (see
    :meth:`split_variant`); the target's schedule rule reads them
    (``ScheduleRule.flag``); a caller that leaves them out gets them False
    (:meth:`full_variant`).

    ``target_flags`` names schedule flags only some targets build: flag -> those targets (e.g. the
    CUDA layer kernels' ``w_hh_global``, W_hh read from global memory where the on-chip slice makes
    the grid too large).  They are not in ``variants`` (what every target builds and every caller
    passes); a target that builds one has each of the op's variants with the flag set too
    (:meth:`variants_for`), and its rule reads it as a schedule flag.  They exclude each other: an
    entry point sets at most one, so each flag adds one entry per variant, not every combination.

    ``short`` is the op's short name in the C libraries' symbols (``lcg``: ``fg_lcg_float32``,
    ``FG_LCG_OK``).  ``partial_rows`` is part of the summation order: the op's column sums over
    rows add fixed blocks of that many rows, each in row order, then the block partials in block
    order; the schedules read it (schedules.row_blocks.partial_rows), so their kernels have the
    same bits whatever their thread or core count (None: the op has no such sum).
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
    schedule_flags: tuple[str, ...] = ()
    target_flags: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    short: str | None = None
    partial_rows: int | None = None

    @staticmethod
    def present(spec: TensorSpec, variant: Mapping[str, bool]) -> bool:
        """Whether a tensor is an argument of the kernel for ``variant``."""
        return spec.when is None or bool(variant[spec.when])

    def split_variant(self, variant: Mapping[str, bool]) -> tuple[dict[str, bool], tuple[str, ...]]:
        """(the flags ``compute`` takes, the schedule flags set) of ``variant``."""
        scheduling = tuple(self.schedule_flags) + tuple(self.target_flags)
        flags = {k: v for k, v in variant.items() if k not in scheduling}
        return flags, tuple(k for k in scheduling if variant.get(k, False))

    def variants_for(self, target: str) -> tuple[dict[str, bool], ...]:
        """The variants ``target`` builds: ``variants``, then each of them with one ``target_flags`` flag
        the target builds set, flag by flag (the flags exclude each other; those left out are False)."""
        out = [dict(v) for v in self.variants]
        for flag, names in self.target_flags.items():
            if target in names:
                out += [{**v, flag: True} for v in self.variants]
        return tuple(out)

    def full_variant(self, variant: Mapping[str, bool]) -> dict[str, bool]:
        """``variant`` with every schedule flag it leaves out set to False."""
        return {**{k: False for k in self.schedule_flags}, **variant}

    @property
    def flags(self) -> tuple[str, ...]:
        """The variant flags in the op's order (its variants' keys)."""
        return tuple(self.variants[0])

    def variant(self, **flags: bool) -> dict[str, bool]:
        """The variant setting ``flags`` (every one of the op's flags), in the op's order."""
        if set(flags) != set(self.flags):
            raise ValueError(f"{self.name}: expected the variant flags {list(self.flags)}, got {sorted(flags)}")
        return {k: bool(flags[k]) for k in self.flags}

    def variant_key(self, variant: Mapping[str, bool]) -> int:
        """``variant`` as bits, one per flag in the op's order, the first the highest: how a C
        library's entry point picks the variant's kernel (0 .. 2**len(flags) - 1)."""
        return sum(int(bool(variant[k])) << (len(self.flags) - 1 - n) for n, k in enumerate(self.flags))

    def variant_key_c(self, given: Mapping[str, str], extra: Sequence[str] = ()) -> str:
        """The C expression of :meth:`variant_key`: ``given`` holds each flag's C value (an int 0 or 1,
        parenthesised or a name), ``extra`` the values of a target's further bits, which follow the
        flags' as the lowest; ``0`` for an op without flags."""
        if set(given) != set(self.flags):
            raise ValueError(f"{self.name}: expected a C value for each of the variant flags {list(self.flags)}, "
                             f"got {sorted(given)}")
        bits = [given[k] for k in self.flags] + list(extra)
        return " | ".join(f"({b} << {len(bits) - 1 - n})" if n < len(bits) - 1 else b for n, b in enumerate(bits)) or "0"


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
