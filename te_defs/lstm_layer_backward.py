"""One LSTM layer and direction, backward through all its time steps (the recurrence).

Inputs (public layout)
    dy          [T, B, H]   gradient w.r.t. h_t from the output (or the layer above); any row
                            stride (one direction's columns of a [T, B, 2H] gradient)
    w_hh        [4H, H]     the recurrent weight, gate blocks i, f, g, o
    c           [T, B, H]   c_t saved by the forward (``lstm_layer_forward``, train)
    c0          [B, H]      the initial cell state
    i, f, g, o, tanhc  [T, B, H]  the saved activations and tanh(c_t)
    grad_hy, grad_cy   [B, H]     gradients w.r.t. each row's final state
    batch_sizes [T] int32   rows running at each time index, non-increasing
Outputs
    dgates      [T, B, 4H]  pre-activation gate gradients, order i, f, g, o (zero past a step's
                            batch size)
    dgates_t    [4H, T, B]  the same transposed: the A of the weight-gradient GEMMs
                            dW = dgatesᵀ·x, written without a separate transpose pass
    dh0, dc0    [B, H]      gradients w.r.t. each row's initial state h0, c0

Steps run against the forward's order (``reverse``: the forward ran from T-1 down, so the
backward runs from 0 up).  Per step t, for the rows b < batch_sizes[t], with dh, dc the row's
state (grad_hy, grad_cy before its last running step):
    dh_t = dh + dy[t];  dc_t = dc + dh_t·o·(1 - tanhc²)
    di = dc_t·g·i(1-i), df = dc_t·c_prev·f(1-f), dg = dc_t·i·(1-g²), do = dh_t·tanhc·o(1-o)
    dc ← dc_t·f;  dh ← Σ_k (Σ_j dgates[b, k, j]·W_hh[k·H + j, :])
        the inner sums in increasing j from 0, then added over k = i, f, g, o in that order
where c_prev is c of the row's previous step in the forward's order, or c0 where it has none.
The kernel sees dgates as [T, B, 4, H], dgates_t as [4, H, T, B], w_hh as [4, H, H].  Written
as TIR for the reason ``lstm_layer_forward`` gives.

float32, float16 and bfloat16 storage, as ``lstm_layer_forward``: loads widened, the cell gradient
and the sums in float32, each stored value rounded once (dgates, dgates_t, dh0, dc0).  The running
state between steps is the stored one: dh, dc are read back from dh0, dc0, and dh sums the stored
dgates, so in 16 bits the recurrence runs on rounded gradients (what a half backward with half
outputs computes).

Schedule flag ``tensor_cores`` (CUDA): each gate block's sum Σ_j dgates[b, k, j]·W_hh[k·H + j, :] as
the tensor cores compute it (``_lstm_layer.TENSOR_CORE_SUMS``: the stored dgates and W_hh the
operands), the blocks then added i, f, g, o as above.
"""
from __future__ import annotations

from tvm import tirx
from tvm.script.ir_builder import IRBuilder

from . import OpDef, TensorSpec, register
from . import _lstm_layer as L
from . import _tir
from ._tir import T, loop, store

DTYPE = L.DTYPE
SAVED = ("i", "f", "g", "o", "tanhc")
VARIANTS = tuple({"reverse": rv} for rv in (False, True))


def c_prev(a, tt, b, j, Tn, reverse: bool):
    """c_{t-1} of unit (b, j) at time index ``tt`` in the forward's order: the saved c of the
    previous time index where row b ran there, else c0."""
    p = L.previous_index(tt, reverse)
    pc = tirx.max(tirx.min(p, Tn - 1), 0)
    ran = tirx.all(p >= 0, p < Tn, b < a["batch_sizes"][pc])
    return tirx.if_then_else(ran, a["c"][pc, b, j], a["c0"][b, j])


def cell_gradient(a, tt, b, j, Tn, reverse: bool, dh, dc):
    """Bound dh_t, dc_t and the four gate gradients of unit (b, j) at ``tt``, from the row's
    state values ``dh``, ``dc``: (dgate expressions [4], dc_t·f), all in float32 (loads widened)."""
    sv = {k: L.wide(a[k][tt, b, j]) for k in SAVED}
    dh_t = _tir.let("dh_t", L.wide(dh) + L.wide(a["dy"][tt, b, j]))
    cx = _tir.let("c_prev", L.wide(c_prev(a, tt, b, j, Tn, reverse)))
    dc_t, grads = L.cell_backward(dh_t, L.wide(dc), cx, sv["i"], sv["f"], sv["g"], sv["o"], sv["tanhc"])
    dc_t = _tir.let("dc_t", dc_t)
    return [fn(dc_t) for fn in grads], dc_t * sv["f"]


def compute(dtype: str, reverse: bool):
    """The plain loop nest of one variant as a PrimFunc."""
    with IRBuilder() as ib:
        with T.prim_func():
            T.func_name("lstm_layer_backward")
            T.func_attr({"tirx.noalias": True, "fusedgrad.variant": {"reverse": reverse}})
            sz = _tir.dims("T", "B", "H")
            a = _tir.params(OP, {"reverse": reverse}, dtype, sz)
            Tn, B, H = sz["T"], sz["B"], sz["H"]
            part = _tir.local("dh_part", (4,), L.ACC)
            with loop("b", B) as b:
                with loop("j", H) as j:
                    store(a["dh0"], (b, j), a["grad_hy"][b, j])
                    store(a["dc0"], (b, j), a["grad_cy"][b, j])
            with loop("s", Tn) as s:
                tt = _tir.let("tt", L.step_index(s, Tn, not reverse))
                n = _tir.let("n", a["batch_sizes"][tt])
                with loop("b", B) as b:
                    with loop("j", H) as j:
                        with T.If(b < n):
                            with T.Then():
                                d, dcx = cell_gradient(a, tt, b, j, Tn, reverse, a["dh0"][b, j], a["dc0"][b, j])
                                for k in range(4):
                                    store(a["dgates"], (tt, b, k, j), d[k])
                                    store(a["dgates_t"], (k, j, tt, b), d[k])
                                store(a["dc0"], (b, j), dcx)
                            with T.Else():
                                for k in range(4):
                                    store(a["dgates"], (tt, b, k, j), T.float32(0))
                                    store(a["dgates_t"], (k, j, tt, b), T.float32(0))
                with loop("b", n) as b:
                    with loop("r", H) as r:
                        with loop("k", 4) as k:
                            store(part, (k,), T.float32(0))
                            with loop("j", H) as j:
                                store(part, (k,), part[k] + L.wide(a["dgates"][tt, b, k, j])
                                      * L.wide(a["w_hh"][k, j, r]))
                        store(a["dh0"], (b, r), ((part[0] + part[1]) + part[2]) + part[3])
    return ib.get()


def reference(dy, w_hh, c, c0, i, f, g, o, tanhc, grad_hy, grad_cy, batch_sizes, reverse=False, tensor_cores=False,
              **_):
    return L.backward_reference(dy, w_hh, c, c0, i, f, g, o, tanhc, grad_hy, grad_cy, batch_sizes, reverse,
                                L.operand_for(tensor_cores))


def sample(dims, rng):
    """The saved values of a real forward (``lstm_layer_forward``'s sample), unit-scale gradients."""
    from .lstm_layer_forward import reference as forward
    from .lstm_layer_forward import sample as forward_sample

    T, B, H = dims["T"], dims["B"], dims["H"]
    fs = forward_sample(dims, rng)
    fw = forward(**fs, train=True, reverse=False)
    return {"dy": rng.standard_normal((T, B, H)), "w_hh": fs["w_hh"], "c": fw["c"], "c0": fs["c0"],
            **{k: fw[k] for k in SAVED}, "grad_hy": rng.standard_normal((B, H)),
            "grad_cy": rng.standard_normal((B, H)), "batch_sizes": fs["batch_sizes"]}


def nbytes(dims, itemsize):
    """Read dy, c and the five saved [T, B, H] once, W_hh once; write dgates twice."""
    T, B, H = dims["T"], dims["B"], dims["H"]
    return itemsize * (T * B * H * 7 + 4 * H * H + 2 * T * B * 4 * H + 6 * B * H)


_TBH = ("T", "B", "H")
OP = register(
    OpDef(
        name="lstm_layer_backward",
        short="lstmg",
        inputs=(
            TensorSpec("dy", _TBH),
            TensorSpec("w_hh", ("4*H", "H"), kernel_shape=("4", "H", "H")),
            TensorSpec("c", _TBH),
            TensorSpec("c0", ("B", "H")),
            *(TensorSpec(k, _TBH) for k in SAVED),
            TensorSpec("grad_hy", ("B", "H")),
            TensorSpec("grad_cy", ("B", "H")),
            TensorSpec("batch_sizes", ("T",), dtype="int32", bounded_by="B", non_increasing=True),
        ),
        outputs=(
            TensorSpec("dgates", ("T", "B", "4*H"), kernel_shape=("T", "B", "4", "H")),
            TensorSpec("dgates_t", ("4*H", "T", "B"), kernel_shape=("4", "H", "T", "B")),
            TensorSpec("dh0", ("B", "H")),
            TensorSpec("dc0", ("B", "H")),
        ),
        scalars=(),
        variants=VARIANTS,
        compute=compute,
        reference=reference,
        sample=sample,
        nbytes=nbytes,
        shapes=L.SHAPES,
        doc=__doc__ + "\n" + L.TENSOR_CORE_SUMS,
        dtypes=L.DTYPES,
        target_flags=L.TARGET_FLAGS,
    )
)
