"""The single source of every symbol and file name fusedgrad produces."""
from __future__ import annotations

from typing import Mapping

def entry_symbol(op: str, dtype: str, variant: Mapping[str, bool]) -> str:
    """C symbol of one kernel variant, e.g. ``fg_lstm_cell_backward_float32__bias_grad_cy``.

    The suffix lists the variant flags that are set (``has_`` dropped), sorted;
    ``none`` when a variant has flags but none is set.
    """
    base = f"fg_{op}_{dtype}"
    if not variant:
        return base
    flags = "_".join(k.removeprefix("has_") for k, v in sorted(variant.items()) if v)
    return f"{base}__{flags or 'none'}"


def artifact_stem(op: str, target: str, dtype: str) -> str:
    return f"{op}.{target}.{dtype}"
