"""The full LSTM, forward and backward through time (torch_npu ``_lstm_npu`` /
``_lstm_npu_backward`` semantics), from fusedgrad's generated kernels.

Multi-layer, bidirectional, batch_first and variable-length.  Every
arithmetic operation runs in a TVM-generated float32 kernel:

forward, per layer and direction
    ``pack_bt``            W_ihᵀ, W_hhᵀ as GEMM panels, once per call
    ``matmul_packed``      X·W_ihᵀ + b_ih + b_hh for every step at once
    per step ``matmul_packed``  gates_t = h_{t-1}·W_hhᵀ + (X·W_ihᵀ)_t
    per step ``lstm_cell_forward``  activations, c_t, tanh(c_t), h_t
backward, per layer (top first) and direction
    ``pack_b``             W_hh, W_ih as GEMM panels, once per call
    per step ``lstm_step_backward`` dgates_t (and its transpose, into the
                           [4H, T·B] operand below), dc_{t-1} from dh_t (recurrent + output)
    per step ``matmul_packed``  dh_{t-1} = dgates_t·W_hh
    ``pack_b``, ``matmul_packed``
                           dW_ih = dgatesᵀ·x,  dW_hh = dgatesᵀ·h_{t-1} over all steps
    ``column_sum``         db = Σ dgates
    ``matmul_packed``      dx = Σ_directions dgates·W_ih
Where a GEMM's N is not a multiple of the panel width (32), B is zero-padded
to whole panels and the extra columns are dropped.

float16 and bfloat16 tensors are widened to float32 once on the way in and
rounded once on the way out.  On the CPU (the layer recurrence: one
``lstm_layer_forward`` / ``lstm_layer_backward`` launch per layer and direction
instead of the per-step kernels above) the launch plan is data
(:mod:`fusedgrad.lstm.launches`: buffers, launches binding views of them,
dependencies), made once per configuration and run by :mod:`fusedgrad.lstm.run`;
the per-step plan is a networkx DAG (:func:`plan`) whose nodes the handlers of
:mod:`fusedgrad.lstm.steps` run in a fixed topological order (:func:`run_plan`).  Either way the
results are the same bits on every run.  numpy (torch
for CUDA tensors) does only data movement: layout copies, casts, and the row
bookkeeping of variable lengths.

Where the buffers live follows the tensors (``inputs.arrays_for``): numpy
arrays and CPU tensors run in host memory with the llvm kernels; torch CUDA
tensors keep every buffer on their device and run the cuda target's kernels
on torch's current stream (``buffers.TorchArrays``), with the same
driver code; a 16-bit call there runs its GEMMs on the tensor-core ``matmul``
in its own dtype (x and the weights as given, h and dgates rounded once,
float32 sums), and a float32 call in TF32 where ``torch.backends.cudnn.allow_tf32``
says so, as cuDNN does.

The package's ``__init__`` holds the public forward and backward (the arrays a call binds to
the plan data).  Its modules, in the order a call uses them: :mod:`~fusedgrad.lstm.inputs`
(argument validation and layouts), :mod:`~fusedgrad.lstm.config` (the sizes a plan depends on),
:mod:`~fusedgrad.lstm.dag` (the launch DAG and its walk), :mod:`~fusedgrad.lstm.launches` (the
layer recurrence's plan as data, in the format of :mod:`~fusedgrad.lstm.schema`),
:mod:`~fusedgrad.lstm.symbolic` (that data for every size at once, and as C tables),
:mod:`~fusedgrad.lstm.run` (its Python host), :mod:`~fusedgrad.lstm.steps` (the per-step plan's
node handlers) and :mod:`~fusedgrad.lstm.buffers` (kernels, scratch buffers and GEMM operands).
``Config``, ``plan``, ``graph_of``, ``order``,
``to_dot``, ``run_plan``, ``Workspace``, ``Operand`` and ``ROW_BLOCK`` are
importable from here too.
"""
from __future__ import annotations

from . import run, steps
from .buffers import ROW_BLOCK, Operand, Workspace
from .dag import Config, graph_of, order, plan, run_plan, to_dot
from .inputs import Inputs, padded_rows_zeroed, parse, public_layout, shape_of, time_major

__all__ = ["Config", "Operand", "ROW_BLOCK", "Workspace", "backward", "graph_of", "lstm_backward", "lstm_forward",
           "order", "plan", "run_plan", "to_dot"]


def _initial_state(cfg: Config, inputs: Inputs, hx):
    LD = cfg.L * cfg.D
    if not hx:
        z = inputs.arrays.new((LD, cfg.B, cfg.H), zero=True)
        return z, z
    return inputs.f32(hx[0]), inputs.f32(hx[1])


def _forward_data(cfg: Config, inputs: Inputs, params, x, h0, c0, bs, train: bool, batch_first: bool, ws: Workspace):
    """The forward from the plan data (``launches``, run by ``run``)."""
    xp = ws.arrays
    bound = {"x": x, "h0": h0, "c0": c0, "batch_sizes": xp.int32(bs),
             **run.param_buffers(cfg, inputs.f32, params, ("w_ih", "w_hh", "b_ih", "b_hh"))}
    data = run.Launches(cfg, bound, ws, {"batch_sizes": bs}, train)
    with xp.launching():
        run_plan(cfg, data)
    a = data.arrays
    o = inputs.out
    out = o(public_layout(cfg, a["y"], batch_first, cfg.D * cfg.H, xp))
    if train:
        return (out, o(a["hy"]), o(a["cy"]), *(o(a[k]) for k in ("i", "g", "f", "o", "h", "c", "tanhc")))
    empty = xp.new((0,))
    hy, cy = o(a["hy"]), o(a["cy"])
    return (out, hy, cy, o(empty), o(empty), o(empty), o(empty), o(xp.copy(a["hy"])), o(xp.copy(a["cy"])), o(empty))


def _backward_data(cfg: Config, inputs: Inputs, params, bound: dict, bs, need_dx: bool, batch_first: bool,
                   ws: Workspace):
    """The backward from the plan data; ``bound``: x, h0, c0, dy, grad_hy, grad_cy and the saved
    activations as float32 arrays where the call runs."""
    xp = ws.arrays
    bound = {**bound, "batch_sizes": xp.int32(bs), **run.param_buffers(cfg, inputs.f32, params, ("w_ih", "w_hh"))}
    data = run.Launches(cfg, bound, ws, {"batch_sizes": bs}, True, need_dx)
    with xp.launching():
        run_plan(cfg, data, backward=True)
    a = data.arrays
    names = ("w_ih", "w_hh", "b_ih", "b_hh")[: 4 if cfg.has_biases else 2]
    dparams = [inputs.out(a[f"d{n}.{l}.{d}"]) for l in range(cfg.L) for d in range(cfg.D) for n in names]
    grads = [inputs.out(a["dh0"]), inputs.out(a["dc0"])]
    if not need_dx:
        return None, grads, dparams
    return inputs.out(public_layout(cfg, a["dx"], batch_first, cfg.I, xp)), grads, dparams


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
    x = time_major(cfg, inputs.f32(input), bool(batch_first), cfg.I, inputs.arrays)
    h0, c0 = _initial_state(cfg, inputs, hx)
    ws = Workspace(inputs.arrays)
    try:
        if cfg.recurrence == "layer" and cfg.T * cfg.B > 0:
            return _forward_data(cfg, inputs, params, x, h0, c0, bs, bool(train), bool(batch_first), ws)
        fw = steps.Forward(cfg, bs, x, h0, c0, lambda: steps.weights(cfg, inputs, params, True, ws), bool(train), ws)
        return _forward_run(cfg, fw, inputs, h0, c0, bool(batch_first), bool(train))
    finally:
        ws.release()


def _forward_run(cfg, fw, inputs, h0, c0, batch_first: bool, train: bool):
    xp = fw.xp
    if cfg.T * cfg.B > 0:
        with xp.launching():
            run_plan(cfg, fw)
    else:  # no steps: the final state is the initial state
        fw.hy[...], fw.cy[...] = h0, c0
        fw.layer_in = xp.new((0, cfg.D * cfg.H))
    y = fw.layer_in
    if cfg.D == 1 and cfg.T * cfg.B * cfg.H:  # the last layer's h buffer, itself returned as h: own memory
        y = xp.copy(fw.layer_in)
    out = public_layout(cfg, y, bool(batch_first), cfg.D * cfg.H, xp)
    o = inputs.out
    if train:
        gates = [o(fw.gates[k]) for k in ("i", "g", "f", "o")]
        return (o(out), o(fw.hy), o(fw.cy), *gates, o(fw.h), o(fw.c), o(fw.gates["tanhc"]))
    empty = xp.new((0,))
    hy, cy = o(fw.hy), o(fw.cy)
    return (o(out), hy, cy, o(empty), o(empty), o(empty), o(empty), o(xp.copy(fw.hy)), o(xp.copy(fw.cy)), o(empty))


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
    x = time_major(cfg, inputs.f32(input), bool(batch_first), cfg.I, inputs.arrays)
    h0, c0 = _initial_state(cfg, inputs, hx)
    zeros = inputs.arrays.new((LD, B, H), zero=True)
    ghy = inputs.f32(grad_hy) if grad_hy is not None else zeros
    gcy = inputs.f32(grad_cy) if grad_cy is not None else zeros
    gy = time_major(cfg, inputs.f32(grad_y), bool(batch_first), D * H, inputs.arrays)
    gy = padded_rows_zeroed(cfg, gy, bs, inputs.arrays, owned=False)
    saved = {k: inputs.f32(v) for k, v in saved_in.items()}
    ws = Workspace(inputs.arrays)
    try:
        if cfg.recurrence == "layer" and T * B > 0:
            bound = {"x": x, "h0": h0, "c0": c0, "dy": gy, "grad_hy": ghy, "grad_cy": gcy, **saved}
            return _backward_data(cfg, inputs, params, bound, bs, bool(need_dx), bool(batch_first), ws)
        bw = steps.Backward(cfg, bs, x, h0, c0, saved, lambda: steps.weights(cfg, inputs, params, False, ws), gy, ghy, gcy, ws)
        bw.need_dx = bool(need_dx)
        return _backward_run(cfg, bw, inputs, ghy, gcy, bool(batch_first))
    finally:
        ws.release()


def _backward_run(cfg, bw, inputs, ghy, gcy, batch_first: bool):
    T, B, H, D, xp = cfg.T, cfg.B, cfg.H, cfg.D, bw.xp
    if T * B > 0:
        with xp.launching():
            run_plan(cfg, bw, backward=True)
        dx = bw.dy
    else:
        dx = xp.new((0, cfg.I))
        bw.dh0[...], bw.dc0[...] = ghy, gcy
        for l in range(cfg.L):
            for d in range(D):
                bw.dparams[l][d] = {"w_ih": xp.new((4 * H, cfg.in_size(l)), zero=True),
                                    "w_hh": xp.new((4 * H, H), zero=True),
                                    "b_ih": xp.new((4 * H,), zero=True), "b_hh": xp.new((4 * H,), zero=True)}
    names = ("w_ih", "w_hh", "b_ih", "b_hh")[: 4 if cfg.has_biases else 2]
    dparams = [inputs.out(bw.dparams[l][d][n]) for l in range(cfg.L) for d in range(D) for n in names]
    if dx is None:
        return None, [inputs.out(bw.dh0), inputs.out(bw.dc0)], dparams
    dx = public_layout(cfg, dx, bool(batch_first), cfg.I, xp)
    return inputs.out(dx), [inputs.out(bw.dh0), inputs.out(bw.dc0)], dparams
