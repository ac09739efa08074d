"""Results must not depend on where buffers lie: alignment and adjacency.

Every kernel argument is carved out of one shared allocation, in a shuffled
order, at element offsets that break 16/32/64-byte alignment and with the
buffers packed next to each other.  All placements must give the same bits
(a kernel whose compiled code picks between loop versions by address would
not), and misaligned views must not fault.
"""
from __future__ import annotations

import numpy as np
import pytest

from fusedgrad import runtime, te_defs

from conftest import NP_DTYPES


def _kernel_arrays(op, dims, dtype, rng):
    """Kernel arguments in order: (name, role, kernel shape, value or None for outputs)."""
    sample = op.sample(dims, rng)
    art = runtime.artifact(op.name, dtype)
    kernel = art.kernel(op.variants[0])
    args = []
    for spec in kernel.args:
        if spec["role"] == "scalar":
            args.append((spec["name"], "scalar", None, spec["default"]))
            continue
        shape = tuple(int(eval(d, {}, dict(dims))) if not d.isdigit() else int(d) for d in spec["kernel_shape"])
        value = None
        if spec["role"] == "input":
            value = sample[spec["name"]].astype(NP_DTYPES[dtype]).reshape(shape)
        args.append((spec["name"], spec["role"], shape, value))
    return kernel, args


def _run_placed(kernel, args, dtype, rng):
    tensors = [a for a in args if a[1] != "scalar"]
    order = rng.permutation(len(tensors))
    offsets = rng.integers(0, 5, len(tensors))
    total = sum(int(np.prod(t[2])) for t in tensors) + 5 * len(tensors) + 16
    pool = np.full(total, np.nan, dtype=NP_DTYPES[dtype])
    pos = int(rng.integers(0, 16))
    views = {}
    for k, off in zip(order, offsets):
        name, role, shape, value = tensors[k]
        n = int(np.prod(shape))
        pos += int(off)
        v = pool[pos:pos + n].reshape(shape)
        if value is not None:
            v[...] = value
        views[name] = v
        pos += n
    call = [views[a[0]] if a[1] != "scalar" else a[3] for a in args]
    kernel(*call)
    return b"".join(views[a[0]].tobytes() for a in args if a[1] == "output")


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize(
    "op_name, dims",
    [("layer_norm_backward", {"M": 8, "D": 24}), ("layer_norm_backward", {"M": 40, "D": 100}),
     ("lstm_cell_backward", {"N": 5, "H": 24}), ("lstm_cell_backward", {"N": 33, "H": 37})],
    ids=["LN 8x24", "LN 40x100", "cell 5x24", "cell 33x37"],
)
def test_same_bits_for_every_placement(op_name, dims, dtype):
    op = te_defs.get(op_name)
    rng = np.random.default_rng(11)
    kernel, args = _kernel_arrays(op, dims, dtype, rng)
    results = {_run_placed(kernel, args, dtype, rng) for _ in range(40)}
    assert len(results) == 1, f"{len(results)} different results over 40 placements"
