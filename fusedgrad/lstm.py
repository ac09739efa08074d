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
(:mod:`fusedgrad.lstm_launches`: buffers, launches binding views of them,
dependencies), made once per configuration and run by :mod:`fusedgrad.lstm_run`;
the per-step plan is a networkx DAG (:func:`plan`) whose nodes this module's
handlers run in a fixed topological order (:func:`run_plan`).  Either way the
results are the same bits on every run.  numpy (torch
for CUDA tensors) does only data movement: layout copies, casts, and the row
bookkeeping of variable lengths.

Where the buffers live follows the tensors (``lstm_inputs.arrays_for``): numpy
arrays and CPU tensors run in host memory with the llvm kernels; torch CUDA
tensors keep every buffer on their device and run the cuda target's kernels
on torch's current stream (``lstm_buffers.TorchArrays``), with the same
driver code; a 16-bit call there runs its GEMMs on the tensor-core ``matmul``
in its own dtype (x and the weights as given, h and dgates rounded once,
float32 sums), and a float32 call in TF32 where ``torch.backends.cudnn.allow_tf32``
says so, as cuDNN does.

This module holds the forward and backward drivers (the per-step plan's node
handlers; the arrays a call binds to the plan data); the plan is in
:mod:`fusedgrad.lstm_plan`, the kernels, scratch buffers and GEMM operands in
:mod:`fusedgrad.lstm_buffers`, argument validation and layouts in
:mod:`fusedgrad.lstm_inputs`.  ``Config``, ``plan``, ``graph_of``, ``order``,
``to_dot``, ``run_plan``, ``Workspace``, ``Operand`` and ``ROW_BLOCK`` are
importable from here too.
"""
from __future__ import annotations

from . import lstm_run
from .lstm_buffers import ROW_BLOCK, Operand, Workspace, gemm
from .lstm_inputs import Inputs, last_steps, padded_rows_zeroed, parse, public_layout, shape_of, time_major
from .lstm_plan import Config, graph_of, order, plan, run_plan, to_dot

__all__ = ["Config", "Operand", "ROW_BLOCK", "Workspace", "backward", "graph_of", "lstm_backward", "lstm_forward",
           "order", "plan", "run_plan", "to_dot"]

GATES = ("i", "f", "g", "o")


def _rows(a, n: int):
    """The first n rows of ``a``, without slicing when that is all of them."""
    return a if n == a.shape[0] else a[:n]


# --------------------------------------------------------------------------- forward


class _Forward:
    """Buffers and node handlers of one forward call."""

    def __init__(self, cfg, bs, x, h0, c0, weights, train, ws: Workspace):
        self.cfg, self.bs, self.train = cfg, bs, train
        self.xp = xp = ws.arrays
        T, B, H, LD = cfg.T, cfg.B, cfg.H, cfg.L * cfg.D
        self.h0, self.c0 = h0, c0
        self.w = None  # [layer][dir] -> GEMM operands, packed by the input node
        self._weights = weights
        # h and c of every step and the saved activations; with variable lengths
        # the padded positions are never written and must read as zero
        shape = (LD, T, B, H)
        self.h = xp.new(shape, zero=cfg.varlen)
        self.c = xp.new(shape, zero=cfg.varlen)
        if train:
            self.gates = {k: xp.new(shape, zero=cfg.varlen) for k in GATES + ("tanhc",)}
        else:
            self.gates = {k: xp.new((1, 1, B, H)) for k in GATES + ("tanhc",)}
        # per-direction scratch: the two directions of a layer share nothing
        self.ws = ws
        self.xw = [self.ws.get((T * B, 4 * H)) for _ in range(cfg.D)]
        self.g = [xp.new((B, 4 * H)) for _ in range(cfg.D)]
        self.prev_h = [xp.new((B, H)) for _ in range(cfg.D)]
        self.prev_c = [xp.new((B, H)) for _ in range(cfg.D)]
        self.layer_in = x
        self.bs32 = xp.int32(bs)
        self.hy = xp.new((LD, B, H))
        self.cy = xp.new((LD, B, H))
        # every step's views, made once: [k·T + t] -> [B, H] (the gates' only entry without train)
        self.h_at = xp.unstack(self.h.reshape(LD * T, B, H))
        self.c_at = xp.unstack(self.c.reshape(LD * T, B, H))
        self.gates_at = {k: xp.unstack(v.reshape(v.shape[0] * v.shape[1], B, H)) for k, v in self.gates.items()}
        self.xw_at = [xp.unstack(v.reshape(T, B, 4 * H)) for v in self.xw]
        self.g4 = [v.reshape(B, 4, H) for v in self.g]

    def input(self):
        self.w = self._weights()

    def xw_(self, l, d):
        w = self.w[l][d]
        gemm(self.layer_in, w["w_ihT"], self.xw[d], bias=w.get("bias"), ws=self.ws)

    def _prev(self, l, d, t, n):
        """h_{t-1}, c_{t-1} (in the direction's order) for the first n rows."""
        cfg, bs, k = self.cfg, self.bs, l * self.cfg.D + d
        p = t - 1 if d == 0 else t + 1
        if p < 0 or p >= cfg.T:
            return self.h0[k, :n], self.c0[k, :n]
        running = int(min(bs[p], n))
        if running == n:
            i = k * cfg.T + p
            return _rows(self.h_at[i], n), _rows(self.c_at[i], n)
        # reverse direction, variable length: sequences whose last step is t start from h0, c0
        for buf, src, init in ((self.prev_h[d], self.h, self.h0), (self.prev_c[d], self.c, self.c0)):
            buf[:running] = src[k, p, :running]
            buf[running:n] = init[k, running:n]
        return self.prev_h[d][:n], self.prev_c[d][:n]

    def step(self, l, d, t):
        cfg, n, k = self.cfg, int(self.bs[t]), l * self.cfg.D + d
        hp, cp = self._prev(l, d, t, n)
        g = _rows(self.g[d], n)
        gemm(hp, self.w[l][d]["w_hhT"], g, addend=_rows(self.xw_at[d][t], n))
        i = k * cfg.T + t
        s = i if self.train else 0
        self.xp.kernel("lstm_cell_forward")(_rows(self.g4[d], n), cp, _rows(self.h_at[i], n), _rows(self.c_at[i], n),
                       *(_rows(self.gates_at[name][s], n) for name in GATES + ("tanhc",)))

    def output(self, l):
        cfg = self.cfg
        T, B, H, D, xp = cfg.T, cfg.B, cfg.H, cfg.D, self.xp
        for d in range(D):
            k = l * D + d
            if d == 1:
                self.hy[k], self.cy[k] = self.h[k, 0], self.c[k, 0]
            else:  # each sequence's own last step
                for t, b0, b1 in last_steps(self.bs):
                    self.hy[k, b0:b1], self.cy[k, b0:b1] = self.h[k, t, b0:b1], self.c[k, t, b0:b1]
        if D == 1:
            self.layer_in = self.h[l].reshape(T * B, H)
        else:
            y = xp.new((T, B, D * H)) if l == cfg.L - 1 else self.ws.get((T, B, D * H))
            for d in range(D):
                y[:, :, d * H:(d + 1) * H] = self.h[l * D + d]
            self.layer_in = y.reshape(T * B, D * H)


def _weights(cfg: Config, inputs: Inputs, params, transpose: bool, ws: Workspace):
    """[layer][dir] -> the weights as GEMM operands, and b_ih + b_hh.

    forward: W_ihᵀ (x·W_ihᵀ), W_hhᵀ (h·W_hhᵀ); backward: W_hh (dgates·W_hh),
    W_ih (dgates·W_ih).
    """
    per = 4 if cfg.has_biases else 2
    out = []
    for l in range(cfg.L):
        row = []
        for d in range(cfg.D):
            base = (l * cfg.D + d) * per
            w_ih, w_hh = inputs.f32(params[base]), inputs.f32(params[base + 1])
            if transpose:
                w = {"w_ihT": Operand.of_transposed(w_ih, ws), "w_hhT": Operand.of_transposed(w_hh, ws)}
                if cfg.has_biases:
                    w["bias"] = inputs.f32(params[base + 2]) + inputs.f32(params[base + 3])
            else:
                w = {"w_ih": Operand.of(w_ih, ws), "w_hh": Operand.of(w_hh, ws)}
            row.append(w)
        out.append(row)
    return out


def _initial_state(cfg: Config, inputs: Inputs, hx):
    LD = cfg.L * cfg.D
    if not hx:
        z = inputs.arrays.new((LD, cfg.B, cfg.H), zero=True)
        return z, z
    return inputs.f32(hx[0]), inputs.f32(hx[1])



def _forward_data(cfg: Config, inputs: Inputs, params, x, h0, c0, bs, train: bool, batch_first: bool, ws: Workspace):
    """The forward from the plan data (``lstm_launches``, run by ``lstm_run``)."""
    xp = ws.arrays
    bound = {"x": x, "h0": h0, "c0": c0, "batch_sizes": xp.int32(bs),
             **lstm_run.param_buffers(cfg, inputs.f32, params, ("w_ih", "w_hh", "b_ih", "b_hh"))}
    data = lstm_run.Launches(cfg, bound, ws, {"batch_sizes": bs}, train)
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
    bound = {**bound, "batch_sizes": xp.int32(bs), **lstm_run.param_buffers(cfg, inputs.f32, params, ("w_ih", "w_hh"))}
    data = lstm_run.Launches(cfg, bound, ws, {"batch_sizes": bs}, True, need_dx)
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

    See the module docstring and README for shapes.  With ``train`` the
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
        fw = _Forward(cfg, bs, x, h0, c0, lambda: _weights(cfg, inputs, params, True, ws), bool(train), ws)
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


class _Backward:
    """Buffers and node handlers of one backward call."""

    def __init__(self, cfg, bs, x, h0, c0, saved, weights, grad_y, grad_hy, grad_cy, ws: Workspace):
        self.cfg, self.bs = cfg, bs
        self.xp = xp = ws.arrays
        T, B, H, D = cfg.T, cfg.B, cfg.H, cfg.D
        self.x, self.h0, self.c0, self.s = x, h0, c0, saved
        self.w = None  # packed by the grad_output node
        self._weights = weights
        self.grad_hy, self.grad_cy = grad_hy, grad_cy
        self.dy = grad_y  # [T·B, D·H] gradient w.r.t. the current layer's output
        # rows past a step's batch size must hold zero
        self.ws = ws
        self.dgates = [ws.get((T, B, 4 * H), zero=cfg.varlen) for _ in range(D)]
        # dgatesᵀ [4H, T·B], written by the step kernel column block by column block
        self.dgates_t = [ws.get((4 * H, T * B), zero=cfg.varlen) for _ in range(D)]
        # per direction: dh_t, and dc_t / dc_{t-1} alternating between two buffers
        self.dh = [xp.new((B, H)) for _ in range(D)]
        self.dc = [[xp.new((B, H)), xp.new((B, H))] for _ in range(D)]
        self.flip = [0] * D
        self.dh0 = xp.new((cfg.L * D, B, H))
        self.dc0 = xp.new((cfg.L * D, B, H))
        self.prev_c = [xp.new((B, H)) for _ in range(D)]
        self.dparams: list[dict] = [[{} for _ in range(D)] for _ in range(cfg.L)]
        self.bs32 = xp.int32(bs)
        self.layer_in = {}
        # every step's views, made once (see _Forward): saved [k·T + t] -> [B, H], dgates [t] -> [B, 4H]
        LD = cfg.L * D
        self.saved_at = {name: xp.unstack(saved[name].reshape(LD * T, B, H))
                         for name in ("c", "i", "f", "g", "o", "tanhc")}
        self.dgates_at = [xp.unstack(v) for v in self.dgates]
        self.dgates4_at = [xp.unstack(v.reshape(T, B, 4, H)) for v in self.dgates]
        self.dgt3 = [v.reshape(4, H, T * B) for v in self.dgates_t]

    def grad_output(self):
        self.w = self._weights()

    def _layer_input(self, l):
        if l not in self.layer_in:
            cfg = self.cfg
            if l == 0:
                self.layer_in[l] = padded_rows_zeroed(cfg, self.x, self.bs, self.xp, owned=False)
            else:
                h = self.s["h"]
                y = self.ws.get((cfg.T, cfg.B, cfg.D * cfg.H))
                for d in range(cfg.D):
                    y[:, :, d * cfg.H:(d + 1) * cfg.H] = h[(l - 1) * cfg.D + d]
                self.layer_in[l] = padded_rows_zeroed(cfg, y.reshape(cfg.T * cfg.B, -1), self.bs, self.xp,
                                                      owned=True)
        return self.layer_in[l]

    def bstep(self, l, d, t):
        cfg, bs, H, k = self.cfg, self.bs, self.cfg.H, l * self.cfg.D + d
        n = int(bs[t])
        first = t == cfg.T - 1 if d == 0 else t == 0
        dh, prev_c = self.dh[d], self.prev_c[d]
        dc, dc_next = self.dc[d][self.flip[d]], self.dc[d][1 - self.flip[d]]
        # rows that start here (their last forward step is t) take grad_hy, grad_cy
        if d == 0:
            start = 0 if t == cfg.T - 1 else int(bs[t + 1])
        else:
            start = 0 if first else n
        if start < n:
            dh[start:n] = self.grad_hy[k, start:n]
            dc[start:n] = self.grad_cy[k, start:n]
        # c_{t-1} in the direction's order
        p = t - 1 if d == 0 else t + 1
        saved = self.saved_at
        if p < 0 or p >= cfg.T:
            cp = _rows(self.c0[k], n)
        else:
            running = int(min(bs[p], n))
            c = saved["c"][k * cfg.T + p]
            if running == n:
                cp = _rows(c, n)
            else:
                prev_c[:running] = c[:running]
                prev_c[running:n] = self.c0[k, running:n]
                cp = prev_c[:n]
        dy = self.dy.reshape(cfg.T, cfg.B, cfg.D * H)[t, :n, d * H:(d + 1) * H]
        i = k * cfg.T + t
        dg = _rows(self.dgates_at[d][t], n)
        dgt = self.dgt3[d][:, :, t * cfg.B:t * cfg.B + n]
        dh_n = _rows(dh, n)
        self.xp.kernel("lstm_step_backward")(
            dh_n, dy, _rows(dc, n), cp, *(_rows(saved[name][i], n) for name in ("i", "f", "g", "o", "tanhc")),
            _rows(self.dgates4_at[d][t], n), _rows(dc_next, n), dgt)
        gemm(dg, self.w[l][d]["w_hh"], dh_n)
        self.flip[d] = 1 - self.flip[d]
        # rows whose first forward step was t: their h_{t-1}, c_{t-1} are h0, c0
        if d == 0:
            done = 0 if t == 0 else n
        else:
            done = int(bs[t + 1]) if t + 1 < cfg.T else 0
        if done < n:
            self.dh0[k, done:n] = dh[done:n]
            self.dc0[k, done:n] = dc_next[done:n]

    def dw_(self, l, d):
        cfg, T, B, H, k = self.cfg, self.cfg.T, self.cfg.B, self.cfg.H, l * self.cfg.D + d
        xp = self.xp
        dg = self.dgates[d]
        out = self.dparams[l][d]
        x = self._layer_input(l)
        # the weight gradients as A·B GEMMs over all steps: A = dgatesᵀ [4H, T·B]
        dgt = self.dgates_t[d]
        out["w_ih"] = xp.new((4 * H, cfg.in_size(l)))
        gemm(dgt, Operand.of(x, self.ws), out["w_ih"], ws=self.ws)
        # dW_hh = Σ_t dgates_tᵀ·h_prev(t): h0 for each row's first step, else h of the neighbouring step
        h = self.s["h"][k]
        first = xp.new((4 * H, H))
        if d == 0:
            gemm(dgt[:, :B], Operand.of(self.h0[k], self.ws), first)
            rest_g, rest_h = dgt[:, B:], h[:-1]
        else:
            e_t = xp.new((4 * H, B))  # dgates at each sequence's first step in the reverse direction
            for t, b0, b1 in last_steps(self.bs):
                e_t[:, b0:b1] = dg[t, b0:b1].T
            gemm(e_t, Operand.of(self.h0[k], self.ws), first)
            rest_g, rest_h = dgt[:, :(T - 1) * B], h[1:]
            if cfg.varlen:  # h past a sequence's end must not reach its last step's dgates
                rest_h = xp.copy(rest_h)
                for t in range(T - 1):
                    rest_h[t, self.bs[t + 1]:] = 0.0
        out["w_hh"] = xp.new((4 * H, H))
        gemm(rest_g, Operand.of(rest_h.reshape(-1, H), self.ws), out["w_hh"], addend=first, ws=self.ws)
        if cfg.has_biases:
            db = xp.new((4 * H,))
            xp.kernel("column_sum")(dg.reshape(T * B, 4 * H), db)
            out["b_ih"], out["b_hh"] = db, xp.copy(db)

    def dx_(self, l):
        cfg, T, B, H = self.cfg, self.cfg.T, self.cfg.B, self.cfg.H
        if l == 0 and not self.need_dx:  # nobody wants the input's gradient: skip its GEMMs
            self.dy = None
            return
        n_in = cfg.in_size(l)
        acc = None
        for d in range(cfg.D):
            out = self.xp.new((T * B, n_in)) if l == 0 else self.ws.get((T * B, n_in))
            gemm(self.dgates[d].reshape(T * B, 4 * H), self.w[l][d]["w_ih"], out, addend=acc, ws=self.ws)
            acc = out
        self.dy = acc


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
        bw = _Backward(cfg, bs, x, h0, c0, saved, lambda: _weights(cfg, inputs, params, False, ws), gy, ghy, gcy, ws)
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
