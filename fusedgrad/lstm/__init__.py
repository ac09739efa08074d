"""The full LSTM, forward and backward through time (torch_npu ``_lstm_npu`` /
``_lstm_npu_backward`` semantics), from fusedgrad's generated kernels.

Multi-layer, bidirectional, batch_first and variable-length.  Every
arithmetic operation runs in a TVM-generated float32 kernel:

forward, per layer and direction
    ``gemm``               X·W_ihᵀ + b_ih + b_hh for every step at once
    ``lstm_layer_forward`` the whole recurrence: gates_t = h_{t-1}·W_hhᵀ + (X·W_ihᵀ)_t,
                           activations, c_t, tanh(c_t), h_t at every step
backward, per layer (top first) and direction
    ``lstm_layer_backward`` the whole recurrence backwards: dgates_t (and its transpose,
                           the [4H, T·B] operand below), dh_{t-1}, dc_{t-1}
    ``gemm``               dW_ih = dgatesᵀ·x,  dW_hh = dgatesᵀ·h_{t-1} over all steps
    ``column_sum``         db = Σ dgates
    ``gemm``               dx = Σ_directions dgates·W_ih
A ``gemm`` is ``pack_b`` / ``pack_bt`` and ``matmul_packed`` on the CPU (``buffers.gemm``).

A call reads top-down: :func:`~fusedgrad.lstm.inputs.parse` checks the arguments and gives the
:class:`Config` (the sizes); :func:`~fusedgrad.lstm.launches.plan` is that configuration's launch
plan (buffers, launches binding views of them, dependencies; made once per configuration, a
sequence with no steps included); :func:`~fusedgrad.lstm.run.run` binds the call's arrays to it
and calls the kernels (:mod:`~fusedgrad.lstm.buffers`: kernels, scratch buffers, GEMM operands).
The same plan is data for the other hosts: JSON (``fusedgrad graph --json``), C tables for every
size at once (:mod:`~fusedgrad.lstm.symbolic`, the Ascend package), a DAG to draw
(:mod:`~fusedgrad.lstm.graph`).  The results are the same bits on every run.

float16 and bfloat16 tensors are widened to float32 once on the way in and
rounded once on the way out.  numpy (torch for CUDA tensors) does only data
movement: layout copies, casts, and the row bookkeeping of variable lengths.

Where the buffers live follows the tensors (``inputs.arrays_for``): numpy
arrays and CPU tensors run in host memory with the llvm kernels; torch CUDA
tensors keep every buffer on their device and run the cuda target's kernels
on torch's current stream (``buffers.TorchArrays``), with the same
driver code; a 16-bit call there runs its GEMMs on the tensor-core ``matmul``
in its own dtype (x and the weights as given, h and dgates rounded once,
float32 sums), and a float32 call in TF32 where ``torch.backends.cudnn.allow_tf32``
says so, as cuDNN does.
"""
from __future__ import annotations

from . import run
from .buffers import ROW_BLOCK, Operand, Workspace
from .config import Config
from .graph import graph, graph_of, to_dot
from .inputs import Inputs, padded_rows_zeroed, parse, public_layout, shape_of, time_major
from .launches import PARAMS, plan

__all__ = ["Config", "Operand", "ROW_BLOCK", "Workspace", "backward", "graph", "graph_of", "lstm_backward",
           "lstm_forward", "plan", "to_dot"]


def _initial_state(cfg: Config, inputs: Inputs, hx):
    LD = cfg.L * cfg.D
    if not hx:
        z = inputs.arrays.new((LD, cfg.B, cfg.H), zero=True)
        return z, z
    return inputs.f32(hx[0]), inputs.f32(hx[1])


def _run(cfg: Config, pass_: str, bound: dict, bs, xp, train: bool = True, need_dx: bool = True) -> dict:
    """Run the plan of one pass with the call's arrays ``bound``; every buffer by name."""
    ws = Workspace(xp)
    try:
        with xp.launching():
            return run.run(plan(cfg, pass_, train, need_dx), {**bound, "batch_sizes": xp.int32(bs)}, ws,
                           {"batch_sizes": bs})
    finally:
        ws.release()


def lstm_forward(input, hx, params, has_biases, num_layers, dropout, train, bidirectional,
                 batch_first=False, batch_sizes=None):
    """Full LSTM forward; returns (output, hy, cy, i, j, f, o, h, c, tanhc).

    See the module docstring and docs/lstm.md for shapes.  With ``train`` the
    activations i, j (= g), f, o, the states h, c and tanh(c) of every step
    are returned as [D·L, T, B, H] (what :func:`lstm_backward` consumes);
    without, the gate tensors are empty and h, c are the final states.
    """
    cfg, inputs, bs, hx = parse(input, hx, params, has_biases, num_layers, dropout, train, bidirectional,
                                 batch_first, batch_sizes)
    xp, train = inputs.arrays, bool(train)
    h0, c0 = _initial_state(cfg, inputs, hx)
    bound = {"x": time_major(cfg, inputs.f32(input), bool(batch_first), cfg.I, xp), "h0": h0, "c0": c0,
             **run.param_buffers(cfg, inputs.f32, params, PARAMS)}
    a = _run(cfg, "forward", bound, bs, xp, train)
    o = inputs.out
    out = o(public_layout(cfg, a["y"], bool(batch_first), cfg.D * cfg.H, xp))
    if train:
        return (out, o(a["hy"]), o(a["cy"]), *(o(a[k]) for k in ("i", "g", "f", "o", "h", "c", "tanhc")))
    empty = xp.new((0,))
    hy, cy = o(a["hy"]), o(a["cy"])
    return (out, hy, cy, o(empty), o(empty), o(empty), o(empty), o(xp.copy(a["hy"])), o(xp.copy(a["cy"])), o(empty))


# --------------------------------------------------------------------------- backward


def lstm_backward(grad_y, grad_hy, grad_cy, input, hx, params, i, j, f, o, h, c, tanhc, has_biases, num_layers,
                  dropout, train, bidirectional, batch_first=False, batch_sizes=None):
    """Full LSTM backward; returns (dx, [dh0, dc0], dparams).

    Takes what :func:`lstm_forward` returned with ``train=True``; grad_hy and
    grad_cy may be None (zeros).  dparams follows the order and shapes of
    ``params``.
    """
    return backward(grad_y, grad_hy, grad_cy, input, hx, params, i, j, f, o, h, c, tanhc, has_biases, num_layers,
                    dropout, train, bidirectional, batch_first, batch_sizes)


def backward(grad_y, grad_hy, grad_cy, input, hx, params, i, j, f, o, h, c, tanhc, has_biases, num_layers,
             dropout, train, bidirectional, batch_first=False, batch_sizes=None, need_dx: bool = True):
    """:func:`lstm_backward`, and with ``need_dx=False`` dx is not computed (None):
    the layer-0 input GEMMs are skipped, as autograd does for an input that
    needs no gradient."""
    saved_in = {"i": i, "g": j, "f": f, "o": o, "h": h, "c": c, "tanhc": tanhc}
    public = {"i": "i", "g": "j", "f": "f", "o": "o", "h": "h", "c": "c", "tanhc": "tanhc"}
    extra = [("grad_y", grad_y), ("grad_hy", grad_hy), ("grad_cy", grad_cy)]
    extra += [(public[k], v) for k, v in saved_in.items()]
    if grad_y is None:
        raise TypeError("grad_y: expected a tensor, got None")
    for k, v in saved_in.items():
        if v is None:
            raise TypeError(f"{public[k]}: expected a tensor (saved by lstm_forward with train=True), got None")
    cfg, inputs, bs, hx = parse(input, hx, params, has_biases, num_layers, dropout, train, bidirectional,
                                 batch_first, batch_sizes, extra=extra)
    if not train:
        raise ValueError("train: expected True (the backward needs the activations a train=True forward saves), "
                         "got False")
    T, B, H, LD, D = cfg.T, cfg.B, cfg.H, cfg.L * cfg.D, cfg.D
    want_y = (T * B, D * H) if cfg.varlen else ((B, T, D * H) if batch_first else (T, B, D * H))
    if shape_of(grad_y) != want_y:
        raise ValueError(f"grad_y: expected shape {list(want_y)} (the output's), got {list(shape_of(grad_y))}")
    for name, v in (("grad_hy", grad_hy), ("grad_cy", grad_cy)):
        if v is not None and shape_of(v) != (LD, B, H):
            raise ValueError(f"{name}: expected shape [D*L, B, H] = {[LD, B, H]}, got {list(shape_of(v))}")
    for k, v in saved_in.items():
        if shape_of(v) != (LD, T, B, H):
            raise ValueError(f"{public[k]}: expected shape [D*L, T, B, H] = {[LD, T, B, H]} "
                             f"(saved by lstm_forward with train=True), got {list(shape_of(v))}")
    xp = inputs.arrays
    x = time_major(cfg, inputs.f32(input), bool(batch_first), cfg.I, xp)
    h0, c0 = _initial_state(cfg, inputs, hx)
    zeros = xp.new((LD, B, H), zero=True)
    ghy = inputs.f32(grad_hy) if grad_hy is not None else zeros
    gcy = inputs.f32(grad_cy) if grad_cy is not None else zeros
    gy = time_major(cfg, inputs.f32(grad_y), bool(batch_first), D * H, xp)
    gy = padded_rows_zeroed(cfg, gy, bs, xp, owned=False)
    bound = {"x": x, "h0": h0, "c0": c0, "dy": gy, "grad_hy": ghy, "grad_cy": gcy,
             **{k: inputs.f32(v) for k, v in saved_in.items()},
             **run.param_buffers(cfg, inputs.f32, params, ("w_ih", "w_hh"))}
    a = _run(cfg, "backward", bound, bs, xp, True, bool(need_dx))
    names = PARAMS[: 4 if cfg.has_biases else 2]
    dparams = [inputs.out(a[f"d{n}.{l}.{d}"]) for l in range(cfg.L) for d in range(cfg.D) for n in names]
    grads = [inputs.out(a["dh0"]), inputs.out(a["dc0"])]
    if not need_dx:
        return None, grads, dparams
    return inputs.out(public_layout(cfg, a["dx"], bool(batch_first), cfg.I, xp)), grads, dparams
