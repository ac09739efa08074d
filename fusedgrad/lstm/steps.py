"""The LSTM's per-step recurrence (``Config.recurrence == "step"``: a GEMM and a pointwise kernel per
time step, what a target without the layer kernels runs): the node handlers of one forward
(:class:`Forward`) and one backward call (:class:`Backward`) that ``dag.run_plan`` calls in
the per-step plan's fixed order, and the weights as their GEMM operands (:func:`weights`).
The public functions that make and run them are in :mod:`fusedgrad.lstm`.
"""
from __future__ import annotations

from .buffers import Operand, Workspace, gemm
from .dag import Config
from .inputs import Inputs, last_steps, padded_rows_zeroed

GATES = ("i", "f", "g", "o")


def rows(a, n: int):
    """The first n rows of ``a``, without slicing when that is all of them."""
    return a if n == a.shape[0] else a[:n]


class Forward:
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
            return rows(self.h_at[i], n), rows(self.c_at[i], n)
        # reverse direction, variable length: sequences whose last step is t start from h0, c0
        for buf, src, init in ((self.prev_h[d], self.h, self.h0), (self.prev_c[d], self.c, self.c0)):
            buf[:running] = src[k, p, :running]
            buf[running:n] = init[k, running:n]
        return self.prev_h[d][:n], self.prev_c[d][:n]

    def step(self, l, d, t):
        cfg, n, k = self.cfg, int(self.bs[t]), l * self.cfg.D + d
        hp, cp = self._prev(l, d, t, n)
        g = rows(self.g[d], n)
        gemm(hp, self.w[l][d]["w_hhT"], g, addend=rows(self.xw_at[d][t], n))
        i = k * cfg.T + t
        s = i if self.train else 0
        self.xp.kernel("lstm_cell_forward")(rows(self.g4[d], n), cp, rows(self.h_at[i], n), rows(self.c_at[i], n),
                       *(rows(self.gates_at[name][s], n) for name in GATES + ("tanhc",)))

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


def weights(cfg: Config, inputs: Inputs, params, transpose: bool, ws: Workspace):
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


class Backward:
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
        # every step's views, made once (see Forward): saved [k·T + t] -> [B, H], dgates [t] -> [B, 4H]
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
            cp = rows(self.c0[k], n)
        else:
            running = int(min(bs[p], n))
            c = saved["c"][k * cfg.T + p]
            if running == n:
                cp = rows(c, n)
            else:
                prev_c[:running] = c[:running]
                prev_c[running:n] = self.c0[k, running:n]
                cp = prev_c[:n]
        dy = self.dy.reshape(cfg.T, cfg.B, cfg.D * H)[t, :n, d * H:(d + 1) * H]
        i = k * cfg.T + t
        dg = rows(self.dgates_at[d][t], n)
        dgt = self.dgt3[d][:, :, t * cfg.B:t * cfg.B + n]
        dh_n = rows(dh, n)
        self.xp.kernel("lstm_step_backward")(
            dh_n, dy, rows(dc, n), cp, *(rows(saved[name][i], n) for name in ("i", "f", "g", "o", "tanhc")),
            rows(self.dgates4_at[d][t], n), rows(dc_next, n), dgt)
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
