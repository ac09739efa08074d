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
rounded once on the way out.  The order of launches is a networkx DAG built
once per configuration (:func:`plan`); :func:`run_plan` walks it in a fixed
topological order, so results are the same bits on every run.  numpy does
only data movement: layout copies, casts, and the row bookkeeping of variable
lengths.
"""
from __future__ import annotations

import dataclasses
import functools
import numbers
import threading
from typing import Any, Sequence

import numpy as np

from . import runtime
from .tensors import NP_DTYPES, alloc, classify, dtype_text, torch_module
from .te_defs.matmul_packed import PANEL

ROW_BLOCK = 32  # rows per task of matmul_packed's main entry: M % ROW_BLOCK rows go to its few_rows entry

F32 = np.float32
GATES = ("i", "f", "g", "o")


# --------------------------------------------------------------------------- configuration


@dataclasses.dataclass(frozen=True)
class Config:
    """Everything the launch plan depends on (sizes, not values)."""

    T: int
    B: int
    I: int
    H: int
    L: int
    D: int
    has_biases: bool
    varlen: bool

    def in_size(self, layer: int) -> int:
        return self.I if layer == 0 else self.D * self.H

    def steps(self, d: int, backward: bool = False) -> range:
        """Time steps of direction ``d`` in execution order."""
        fwd = range(self.T) if d == 0 else range(self.T - 1, -1, -1)
        return fwd if not backward else fwd[::-1]


# --------------------------------------------------------------------------- the launch plan


@functools.lru_cache(maxsize=64)
def plan(cfg: Config, backward: bool = False):
    """The launch DAG for ``cfg``: nodes are launches (or tiny data-movement
    steps), edges are data dependencies.  Node attributes: ``kind``, ``layer``,
    ``dir``, ``t`` and ``kernels`` (the generated ops the node calls: the
    input nodes pack the weights into GEMM panels; rows past whole 32-row
    blocks go to ``matmul_packed``'s few_rows entry).  The two
    directions of a layer have no edge between them: they may run at the same
    time (``nx.topological_generations`` lists what can).
    """
    import networkx as nx

    g = nx.DiGraph(config=dataclasses.asdict(cfg), backward=backward)
    if not backward:
        g.add_node(("input",), kind="input", layer=-1, dir=-1, t=-1, kernels=("pack_bt",))
        prev_layer = ("input",)
        for l in range(cfg.L):
            for d in range(cfg.D):
                xw = ("xw", l, d)
                g.add_node(xw, kind="xw", layer=l, dir=d, t=-1, kernels=("matmul_packed",))
                g.add_edge(prev_layer, xw)
                last = xw
                for t in cfg.steps(d):
                    node = ("step", l, d, t)
                    g.add_node(node, kind="step", layer=l, dir=d, t=t, kernels=("matmul_packed", "lstm_cell_forward"))
                    g.add_edge(last, node)
                    last = node
                g.add_edge(last, ("output", l))
            g.nodes[("output", l)].update(kind="output", layer=l, dir=-1, t=-1, kernels=())
            prev_layer = ("output", l)
        return g
    g.add_node(("grad_output",), kind="grad_output", layer=cfg.L, dir=-1, t=-1, kernels=("pack_b",))
    upper = ("grad_output",)
    for l in reversed(range(cfg.L)):
        dx = ("dx", l)
        for d in range(cfg.D):
            last = upper
            for t in cfg.steps(d, backward=True):
                node = ("bstep", l, d, t)
                g.add_node(node, kind="bstep", layer=l, dir=d, t=t, kernels=("lstm_step_backward", "matmul_packed"))
                g.add_edge(last, node)
                last = node
            for kind, kernels in (("dw", ("pack_b", "matmul_packed", "column_sum")),):
                node = (kind, l, d)
                g.add_node(node, kind=kind, layer=l, dir=d, t=-1, kernels=kernels)
                g.add_edge(last, node)
            g.add_edge(last, dx)
        g.nodes[dx].update(kind="dx", layer=l, dir=-1, t=-1, kernels=("matmul_packed",))
        upper = dx
    return g


@functools.lru_cache(maxsize=64)
def order(cfg: Config, backward: bool = False) -> tuple:
    """The fixed walk of :func:`plan`: a topological order, ties broken by node name."""
    import networkx as nx

    return tuple(nx.lexicographical_topological_sort(plan(cfg, backward), key=str))


def to_dot(g) -> str:
    """Graphviz DOT text of a plan: one cluster per layer and direction."""
    lines = ["digraph lstm_plan {", "  rankdir=TB; node [shape=box, fontsize=10];"]
    clusters: dict[tuple, list] = {}
    for node, a in g.nodes(data=True):
        clusters.setdefault((a["layer"], a["dir"]), []).append(node)
    names = {node: f"n{i}" for i, node in enumerate(g.nodes)}
    for (layer, d), nodes in sorted(clusters.items()):
        lines.append(f"  subgraph cluster_{layer + 1}_{d + 1} {{")
        label = "io" if layer < 0 or layer >= g.graph["config"]["L"] else f"layer {layer}" + (
            f" {'forward' if d == 0 else 'reverse'}" if d >= 0 else "")
        lines.append(f'    label="{label}";')
        for node in nodes:
            a = g.nodes[node]
            text = a["kind"] + (f" t={a['t']}" if a["t"] >= 0 else "")
            if a["kernels"]:
                text += "\\n" + " + ".join(a["kernels"])
            lines.append(f'    {names[node]} [label="{text}"];')
        lines.append("  }")
    for u, v in g.edges:
        lines.append(f"  {names[u]} -> {names[v]};")
    lines.append("}")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- kernels


@functools.lru_cache(maxsize=None)
def _kernel(op: str, **variant: bool):
    """The bare float32 entry point of ``op``'s ``variant``, loaded once per process."""
    return runtime.artifact(op, "float32").kernel(variant).func


def _buffer(shape, zero: bool = False) -> np.ndarray:
    """A new float32 numpy array (``tensors.alloc``: huge pages from 32 MiB up).

    Smaller ones come from malloc, which after the first call recycles the
    memory freed by the previous one (glibc raises its mmap threshold to the
    freed size): the forward at (50, 32, 256, 256) took 16.6 ms against 21
    with fresh huge-page mappings from 1 MiB up, and the same at (100, 64, 512, 512).
    """
    return alloc("numpy", shape, "float32", zero)


# Scratch buffers (gate pre-activations, dgates, packed operands...) go back to
# a pool when a call ends and serve the next call of the same sizes: a fresh
# buffer's first touch costs ~0.3-0.9 ms per MB here (page faults, huge pages
# or not), against ~0.1 ms per MB to reuse one.  Outputs are always fresh.
POOL_BYTES = 1 << 30
_POOL: list[np.ndarray] = []
_POOL_LOCK = threading.Lock()


class Workspace:
    """The scratch buffers of one call: taken from the pool, returned by :meth:`release`."""

    def __init__(self):
        self.taken: list[np.ndarray] = []

    def get(self, shape, zero: bool = False) -> np.ndarray:
        shape = tuple(int(v) for v in shape)
        with _POOL_LOCK:
            i = next((i for i in range(len(_POOL) - 1, -1, -1) if _POOL[i].shape == shape), None)
            a = _POOL.pop(i) if i is not None else None
        if a is None:
            a = _buffer(shape, zero)
        elif zero:
            a.fill(0.0)
        self.taken.append(a)
        return a

    def release(self) -> None:
        with _POOL_LOCK:
            _POOL.extend(self.taken)
            total = sum(a.nbytes for a in _POOL)
            while _POOL and total > POOL_BYTES:  # oldest first
                total -= _POOL.pop(0).nbytes
        self.taken = []


class Operand:
    """The B of a GEMM as the column panels ``matmul_packed`` streams, made once
    and used by every GEMM that shares it (a weight: every time step).

    When N is not a multiple of the panel width, B is zero-padded to the next
    multiple (``n_padded``) and the product is computed that wide: a partial
    panel would run the kernels' guarded tail path, measured at ~2 GFLOP/s
    (N = 16) against ~30-200 for whole panels.
    """

    def __init__(self, k: int, n: int, panels):
        self.k, self.n, self.panels = k, n, panels
        self.n_padded = panels.shape[0] * PANEL

    @staticmethod
    def of(b: np.ndarray, ws: Workspace) -> "Operand":
        """B given as [K, N]."""
        k, n = b.shape
        return Operand._packed(b, k, n, "pack_b", ws)

    @staticmethod
    def of_transposed(w: np.ndarray, ws: Workspace) -> "Operand":
        """B = wᵀ, w given as [N, K] (an LSTM weight)."""
        n, k = w.shape
        return Operand._packed(w, k, n, "pack_bt", ws)

    @staticmethod
    def _packed(src: np.ndarray, k: int, n: int, packer: str, ws: Workspace) -> "Operand":
        npad = -(-n // PANEL) * PANEL
        bp = ws.get((npad // PANEL, k, PANEL))
        if src.size == 0:
            bp[...] = 0.0
            return Operand(k, n, bp)
        if npad != n:  # zero-pad the N axis (the columns of b, the rows of w) to whole panels
            transposed = packer == "pack_bt"
            full = ws.get((npad, k) if transposed else (k, npad), zero=True)
            (full[:n] if transposed else full[:, :n])[...] = src
            src = full
        _kernel(packer)(src, bp)
        return Operand(k, n, bp)


def _gemm(a, b: Operand, c, bias=None, addend=None, ws: "Workspace | None" = None) -> None:
    """c = a·b (+ bias) (+ addend), float32, skipped when there is nothing to sum over."""
    m = a.shape[0]
    if m == 0 or b.n == 0:
        return
    if b.k == 0:
        c[...] = 0.0
        if bias is not None:
            c += bias
        if addend is not None:
            c += addend
        return
    if b.n_padded != b.n:  # compute the padded width, then keep the first n columns
        wide = ws.get((m, b.n_padded)) if ws is not None else np.empty((m, b.n_padded), F32)
        wide_bias = None
        if bias is not None:
            wide_bias = np.zeros(b.n_padded, F32)
            wide_bias[:b.n] = bias
        _panels(a, b.panels, wide, wide_bias, None)
        if addend is not None:
            np.add(wide[:, :b.n], addend, out=c)
        else:
            c[...] = wide[:, :b.n]
        return
    _panels(a, b.panels, c, bias, addend)


def _panels(a, bp, c, bias, addend) -> None:
    """c = a·B (+ bias) (+ addend) from B's panels: whole row blocks through
    ``matmul_packed``'s main entry, the remaining rows through its few_rows entry."""
    m = a.shape[0]
    main = m - m % ROW_BLOCK
    flags = {"has_bias": bias is not None, "has_addend": addend is not None}
    for few_rows, rows in ((False, slice(0, main)), (True, slice(main, m))):
        if rows.start == rows.stop:
            continue
        args = [a[rows], bp] + ([bias] if bias is not None else []) + ([addend[rows]] if addend is not None else [])
        _kernel("matmul_packed", **flags, few_rows=few_rows)(*args, c[rows])


# --------------------------------------------------------------------------- validation


class _Inputs:
    """Validated inputs: kind and dtype shared by all, sizes bound, all as float32 numpy."""

    def __init__(self, kind: str, dtype: str):
        self.kind, self.dtype = kind, dtype

    @staticmethod
    def gather(named: Sequence[tuple[str, Any]]) -> "_Inputs":
        first_name, first = named[0]
        kind, obj = classify(first_name, first)
        dtype = dtype_text(obj.dtype)
        if dtype not in NP_DTYPES:
            raise TypeError(f"{first_name}: expected dtype float32, float16 or bfloat16, got {dtype}")
        for name, value in named[1:]:
            k, obj = classify(name, value)
            if k != kind:
                raise TypeError(f"{name}: expected a {'torch tensor' if kind == 'torch' else 'numpy array'} "
                                f"like {first_name}, got {type(value).__name__}")
            if dtype_text(obj.dtype) != dtype:
                raise TypeError(f"{name}: expected dtype {dtype} (the dtype of {first_name}), "
                                f"got {dtype_text(obj.dtype)}")
        return _Inputs(kind, dtype)

    def f32(self, value) -> np.ndarray:
        """A C-contiguous float32 numpy view (no copy for contiguous, writable float32 input)."""
        _, a = classify("tensor", value)  # validated by gather: detaches torch, copies read-only numpy
        if self.kind == "torch":
            return np.ascontiguousarray((a if a.dtype == torch_module().float32 else a.float()).contiguous().numpy())
        return np.ascontiguousarray(a, dtype=F32)

    def out(self, a: np.ndarray):
        """A float32 result as the caller's kind and dtype."""
        if self.kind == "torch":
            torch = torch_module()
            t = torch.from_numpy(a)
            return t if self.dtype == "float32" else t.to(getattr(torch, self.dtype))
        return a if self.dtype == "float32" else a.astype(NP_DTYPES[self.dtype])


def _shape(value) -> tuple[int, ...]:
    return tuple(int(s) for s in value.shape)


def _check_flags(has_biases, num_layers, dropout, train, bidirectional, batch_first) -> None:
    for name, v in (("has_biases", has_biases), ("train", train), ("bidirectional", bidirectional),
                    ("batch_first", batch_first)):
        if not isinstance(v, (bool, np.bool_)):
            raise TypeError(f"{name}: expected a bool, got {type(v).__name__}")
    if not isinstance(num_layers, numbers.Integral) or isinstance(num_layers, (bool, np.bool_)) or num_layers < 1:
        raise ValueError(f"num_layers: expected an integer >= 1, got {num_layers!r}")
    if not isinstance(dropout, numbers.Real) or float(dropout) != 0.0:
        raise ValueError(f"dropout: expected 0.0 (dropout between layers is not supported), got {dropout!r}")


def _lengths(bs: np.ndarray, B: int) -> np.ndarray:
    """Each sequence's length from the batch sizes: how many steps have it running."""
    return (bs[None, :] > np.arange(B)[:, None]).sum(axis=1)


def _batch_sizes(batch_sizes) -> np.ndarray:
    if isinstance(batch_sizes, np.ndarray) or isinstance(batch_sizes, (list, tuple)):
        bs = np.asarray(batch_sizes)
    elif torch_module() is not None and isinstance(batch_sizes, torch_module().Tensor):
        bs = batch_sizes.detach().cpu().numpy()
    else:
        raise TypeError(f"batch_sizes: expected a list or an integer numpy/torch array, got {type(batch_sizes).__name__}")
    if bs.ndim != 1 or bs.size == 0:
        raise ValueError(f"batch_sizes: expected a non-empty 1-D sequence [T], got shape {list(bs.shape)}")
    if bs.dtype.kind not in "iu" and not (bs.dtype == object and all(isinstance(v, numbers.Integral) for v in bs)):
        raise TypeError(f"batch_sizes: expected integers, got dtype {bs.dtype}")
    bs = bs.astype(np.int64)
    if (bs <= 0).any():
        raise ValueError(f"batch_sizes: expected every entry > 0, got {bs.tolist()}")
    if (np.diff(bs) > 0).any():
        raise ValueError(f"batch_sizes: expected non-increasing sizes, got {bs.tolist()}")
    return bs


def _parse(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first, batch_sizes,
           extra: Sequence[tuple[str, Any]] = ()):
    """Validate everything; returns (Config, _Inputs, batch sizes [T], hx as a list)."""
    _check_flags(has_biases, num_layers, dropout, train, bidirectional, batch_first)
    L, D = int(num_layers), 2 if bidirectional else 1
    if not isinstance(params, (list, tuple)):
        raise TypeError(f"params: expected a list of tensors, got {type(params).__name__}")
    per = 4 if has_biases else 2
    if len(params) != L * D * per:
        raise ValueError(f"params: expected {L * D * per} tensors for num_layers={L}, "
                         f"bidirectional={bool(bidirectional)}, has_biases={bool(has_biases)} "
                         f"({per} per layer and direction), got {len(params)}")
    if hx is None:
        hx = []
    if not isinstance(hx, (list, tuple)) or len(hx) not in (0, 2):
        raise ValueError(f"hx: expected [h0, c0] or an empty list, got {type(hx).__name__} of length "
                         f"{len(hx) if isinstance(hx, (list, tuple)) else '-'}")
    named = [("input", input)] + [(f"params[{k}]", p) for k, p in enumerate(params)]
    named += [(n, v) for n, v in zip(("hx[0]", "hx[1]"), hx)] + [(n, v) for n, v in extra if v is not None]
    for n, v in named:
        if v is None:
            raise TypeError(f"{n}: expected a tensor, got None")
    inputs = _Inputs.gather(named)
    shape = _shape(input)
    if batch_sizes is not None:
        if len(shape) != 2:
            raise ValueError(f"input: expected shape [T*B, I] with batch_sizes, got {list(shape)}")
        bs = _batch_sizes(batch_sizes)
        T, B = len(bs), int(bs[0])
        if shape[0] != T * B:
            raise ValueError(f"input: expected {T * B} rows (T={T} batch_sizes entries x B=batch_sizes[0]={B}), "
                             f"got shape {list(shape)}")
        I = shape[1]
    else:
        if len(shape) != 3:
            raise ValueError(f"input: expected shape [{'B, T' if batch_first else 'T, B'}, I], got {list(shape)}")
        T, B = (shape[1], shape[0]) if batch_first else (shape[0], shape[1])
        I = shape[2]
        bs = np.full(T, B, dtype=np.int64)
    w_hh0 = _shape(params[1])
    if len(w_hh0) != 2 or w_hh0[0] != 4 * w_hh0[1]:
        raise ValueError(f"params[1] (layer 0 w_hh): expected shape [4H, H], got {list(w_hh0)}")
    H = w_hh0[1]
    cfg = Config(T=T, B=B, I=I, H=H, L=L, D=D, has_biases=bool(has_biases), varlen=batch_sizes is not None)
    for l in range(L):
        for d in range(D):
            base = (l * D + d) * per
            want = {"w_ih": (4 * H, cfg.in_size(l)), "w_hh": (4 * H, H), "b_ih": (4 * H,), "b_hh": (4 * H,)}
            for k, name in enumerate(list(want)[:per]):
                got = _shape(params[base + k])
                if got != want[name]:
                    raise ValueError(f"params[{base + k}] (layer {l} {'reverse ' if d else ''}{name}): "
                                     f"expected shape {list(want[name])}, got {list(got)}")
    for n, v in zip(("hx[0]", "hx[1]"), hx):
        if _shape(v) != (L * D, B, H):
            raise ValueError(f"{n}: expected shape [D*L, B, H] = {[L * D, B, H]}, got {list(_shape(v))}")
    return cfg, inputs, bs, list(hx)


def _time_major(cfg: Config, a: np.ndarray, batch_first: bool, width: int) -> np.ndarray:
    """[T·B, width] time-major float32 rows of a public sequence tensor."""
    if cfg.varlen or not batch_first:
        return a.reshape(cfg.T * cfg.B, width)
    return np.ascontiguousarray(a.transpose(1, 0, 2)).reshape(cfg.T * cfg.B, width)


def _public_layout(cfg: Config, a: np.ndarray, batch_first: bool, width: int) -> np.ndarray:
    if cfg.varlen:
        return a.reshape(cfg.T * cfg.B, width)
    a = a.reshape(cfg.T, cfg.B, width)
    return np.ascontiguousarray(a.transpose(1, 0, 2)) if batch_first else a


def _padded_rows_zeroed(cfg: Config, x: np.ndarray, bs: np.ndarray, owned: bool) -> np.ndarray:
    """x [T·B, n] with the rows past each step's batch size set to zero (a copy unless ``owned``)."""
    if not cfg.varlen or bs[-1] == cfg.B:
        return x
    x = x if owned else x.copy()
    v = x.reshape(cfg.T, cfg.B, -1)
    for t in range(cfg.T):
        v[t, bs[t]:] = 0.0
    return x


# --------------------------------------------------------------------------- forward


class _Forward:
    """Buffers and node handlers of one forward call."""

    def __init__(self, cfg, bs, x, h0, c0, weights, train, ws: Workspace):
        self.cfg, self.bs, self.train = cfg, bs, train
        T, B, H, LD = cfg.T, cfg.B, cfg.H, cfg.L * cfg.D
        self.h0, self.c0 = h0, c0
        self.w = None  # [layer][dir] -> GEMM operands, packed by the input node
        self._weights = weights
        # h and c of every step and the saved activations; with variable lengths
        # the padded positions are never written and must read as zero
        shape = (LD, T, B, H)
        self.h = _buffer(shape, zero=cfg.varlen)
        self.c = _buffer(shape, zero=cfg.varlen)
        if train:
            self.gates = {k: _buffer(shape, zero=cfg.varlen) for k in GATES + ("tanhc",)}
        else:
            self.gates = {k: np.empty((1, 1, B, H), F32) for k in GATES + ("tanhc",)}
        # per-direction scratch: the two directions of a layer share nothing
        self.ws = ws
        self.xw = [self.ws.get((T * B, 4 * H)) for _ in range(cfg.D)]
        self.g = [np.empty((B, 4 * H), F32) for _ in range(cfg.D)]
        self.prev_h = [np.empty((B, H), F32) for _ in range(cfg.D)]
        self.prev_c = [np.empty((B, H), F32) for _ in range(cfg.D)]
        self.layer_in = x
        self.hy = np.empty((LD, B, H), F32)
        self.cy = np.empty((LD, B, H), F32)

    def input(self):
        self.w = self._weights()

    def xw_(self, l, d):
        w = self.w[l][d]
        _gemm(self.layer_in, w["w_ihT"], self.xw[d], bias=w.get("bias"), ws=self.ws)

    def _prev(self, l, d, t, n):
        """h_{t-1}, c_{t-1} (in the direction's order) for the first n rows."""
        cfg, bs, k = self.cfg, self.bs, l * self.cfg.D + d
        p = t - 1 if d == 0 else t + 1
        if p < 0 or p >= cfg.T:
            return self.h0[k, :n], self.c0[k, :n]
        running = int(min(bs[p], n))
        if running == n:
            return self.h[k, p, :n], self.c[k, p, :n]
        # reverse direction, variable length: sequences whose last step is t start from h0, c0
        for buf, src, init in ((self.prev_h[d], self.h, self.h0), (self.prev_c[d], self.c, self.c0)):
            buf[:running] = src[k, p, :running]
            buf[running:n] = init[k, running:n]
        return self.prev_h[d][:n], self.prev_c[d][:n]

    def step(self, l, d, t):
        cfg, n, k = self.cfg, int(self.bs[t]), l * self.cfg.D + d
        hp, cp = self._prev(l, d, t, n)
        g = self.g[d][:n]
        _gemm(hp, self.w[l][d]["w_hhT"], g, addend=self.xw[d][t * cfg.B: t * cfg.B + n])
        s = (k, t) if self.train else (0, 0)
        _kernel("lstm_cell_forward")(g.reshape(n, 4, cfg.H), cp, self.h[k, t, :n], self.c[k, t, :n],
                       *(self.gates[name][s][:n] for name in GATES + ("tanhc",)))

    def output(self, l):
        cfg = self.cfg
        T, B, H, D = cfg.T, cfg.B, cfg.H, cfg.D
        for d in range(D):
            k = l * D + d
            if d == 1:
                self.hy[k], self.cy[k] = self.h[k, 0], self.c[k, 0]
            else:
                last = _lengths(self.bs, B) - 1  # each sequence's own last step
                self.hy[k] = self.h[k, last, np.arange(B)]
                self.cy[k] = self.c[k, last, np.arange(B)]
        if D == 1:
            self.layer_in = self.h[l].reshape(T * B, H)
        else:
            y = _buffer((T, B, D * H)) if l == cfg.L - 1 else self.ws.get((T, B, D * H))
            for d in range(D):
                y[:, :, d * H:(d + 1) * H] = self.h[l * D + d]
            self.layer_in = y.reshape(T * B, D * H)


def _weights(cfg: Config, inputs: _Inputs, params, transpose: bool, ws: Workspace):
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


def _initial_state(cfg: Config, inputs: _Inputs, hx):
    LD = cfg.L * cfg.D
    if not hx:
        z = np.zeros((LD, cfg.B, cfg.H), F32)
        return z, z
    return inputs.f32(hx[0]), inputs.f32(hx[1])


def run_plan(cfg: Config, handlers, backward: bool = False) -> None:
    """Walk the plan in its fixed order, calling ``handlers.<kind>`` for each node."""
    g = plan(cfg, backward)
    for node in order(cfg, backward):
        kind = g.nodes[node]["kind"]
        getattr(handlers, kind if kind not in ("xw", "dx", "dw") else kind + "_")(*node[1:])


def lstm_forward(input, hx, params, has_biases, num_layers, dropout, train, bidirectional,
                 batch_first=False, batch_sizes=None):
    """Full LSTM forward; returns (output, hy, cy, i, j, f, o, h, c, tanhc).

    See the module docstring and README for shapes.  With ``train`` the
    activations i, j (= g), f, o, the states h, c and tanh(c) of every step
    are returned as [D·L, T, B, H] (what :func:`lstm_backward` consumes);
    without, the gate tensors are empty and h, c are the final states.
    """
    cfg, inputs, bs, hx = _parse(input, hx, params, has_biases, num_layers, dropout, train, bidirectional,
                                 batch_first, batch_sizes)
    x = _time_major(cfg, inputs.f32(input), bool(batch_first), cfg.I)
    h0, c0 = _initial_state(cfg, inputs, hx)
    ws = Workspace()
    try:
        fw = _Forward(cfg, bs, x, h0, c0, lambda: _weights(cfg, inputs, params, True, ws), bool(train), ws)
        return _forward_run(cfg, fw, inputs, h0, c0, bool(batch_first), bool(train))
    finally:
        ws.release()


def _forward_run(cfg, fw, inputs, h0, c0, batch_first: bool, train: bool):
    if cfg.T * cfg.B > 0:
        run_plan(cfg, fw)
    else:  # no steps: the final state is the initial state
        fw.hy[...], fw.cy[...] = h0, c0
        fw.layer_in = np.zeros((0, cfg.D * cfg.H), F32)
    y = fw.layer_in
    if cfg.D == 1 and y.size:  # the last layer's h buffer, itself returned as h: give output its own memory
        y = _buffer(y.shape)
        np.copyto(y, fw.layer_in)
    out = _public_layout(cfg, y, bool(batch_first), cfg.D * cfg.H)
    o = inputs.out
    if train:
        gates = [o(fw.gates[k]) for k in ("i", "g", "f", "o")]
        return (o(out), o(fw.hy), o(fw.cy), *gates, o(fw.h), o(fw.c), o(fw.gates["tanhc"]))
    empty = np.empty((0,), F32)
    hy, cy = o(fw.hy), o(fw.cy)
    return (o(out), hy, cy, o(empty), o(empty), o(empty), o(empty), o(fw.hy.copy()), o(fw.cy.copy()), o(empty))


# --------------------------------------------------------------------------- backward


class _Backward:
    """Buffers and node handlers of one backward call."""

    def __init__(self, cfg, bs, x, h0, c0, saved, weights, grad_y, grad_hy, grad_cy, ws: Workspace):
        self.cfg, self.bs = cfg, bs
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
        self.dh = [np.empty((B, H), F32) for _ in range(D)]
        self.dc = [[np.empty((B, H), F32), np.empty((B, H), F32)] for _ in range(D)]
        self.flip = [0] * D
        self.dh0 = np.empty((cfg.L * D, B, H), F32)
        self.dc0 = np.empty((cfg.L * D, B, H), F32)
        self.prev_c = [np.empty((B, H), F32) for _ in range(D)]
        self.dparams: list[dict] = [[{} for _ in range(D)] for _ in range(cfg.L)]
        self.layer_in = {}

    def grad_output(self):
        self.w = self._weights()

    def _layer_input(self, l):
        if l not in self.layer_in:
            cfg = self.cfg
            if l == 0:
                self.layer_in[l] = _padded_rows_zeroed(cfg, self.x, self.bs, owned=False)
            else:
                h = self.s["h"]
                y = self.ws.get((cfg.T, cfg.B, cfg.D * cfg.H))
                for d in range(cfg.D):
                    y[:, :, d * cfg.H:(d + 1) * cfg.H] = h[(l - 1) * cfg.D + d]
                self.layer_in[l] = _padded_rows_zeroed(cfg, y.reshape(cfg.T * cfg.B, -1), self.bs, owned=True)
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
        c = self.s["c"][k]
        if p < 0 or p >= cfg.T:
            cp = self.c0[k, :n]
        else:
            running = int(min(bs[p], n))
            if running == n:
                cp = c[p, :n]
            else:
                prev_c[:running] = c[p, :running]
                prev_c[running:n] = self.c0[k, running:n]
                cp = prev_c[:n]
        dy = self.dy.reshape(cfg.T, cfg.B, cfg.D * H)[t, :n, d * H:(d + 1) * H]
        s = self.s
        dg = self.dgates[d][t, :n]
        dgt = self.dgates_t[d].reshape(4, H, cfg.T * cfg.B)[:, :, t * cfg.B:t * cfg.B + n]
        _kernel("lstm_step_backward")(dh[:n], dy, dc[:n], cp, s["i"][k, t, :n], s["f"][k, t, :n], s["g"][k, t, :n],
                        s["o"][k, t, :n], s["tanhc"][k, t, :n], dg.reshape(n, 4, H), dc_next[:n], dgt)
        _gemm(dg, self.w[l][d]["w_hh"], dh[:n])
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
        dg = self.dgates[d]
        out = self.dparams[l][d]
        x = self._layer_input(l)
        # the weight gradients as A·B GEMMs over all steps: A = dgatesᵀ [4H, T·B]
        dgt = self.dgates_t[d]
        out["w_ih"] = np.empty((4 * H, cfg.in_size(l)), F32)
        _gemm(dgt, Operand.of(x, self.ws), out["w_ih"], ws=self.ws)
        # dW_hh = Σ_t dgates_tᵀ·h_prev(t): h0 for each row's first step, else h of the neighbouring step
        h = self.s["h"][k]
        first = np.empty((4 * H, H), F32)
        if d == 0:
            _gemm(dgt[:, :B], Operand.of(self.h0[k], self.ws), first)
            rest_g, rest_h = dgt[:, B:], h[:-1]
        else:
            last = _lengths(self.bs, B) - 1  # each sequence's first step in the reverse direction
            e_t = dg[last, np.arange(B)].T.copy()  # [4H, B], small (a copy: fresh unit strides even for B = 1)
            _gemm(e_t, Operand.of(self.h0[k], self.ws), first)
            rest_g, rest_h = dgt[:, :(T - 1) * B], h[1:]
            if cfg.varlen:  # h past a sequence's end must not reach its last step's dgates
                rest_h = rest_h.copy()
                for t in range(T - 1):
                    rest_h[t, self.bs[t + 1]:] = 0.0
        out["w_hh"] = np.empty((4 * H, H), F32)
        _gemm(rest_g, Operand.of(rest_h.reshape(-1, H), self.ws), out["w_hh"], addend=first, ws=self.ws)
        if cfg.has_biases:
            db = np.empty((4 * H,), F32)
            _kernel("column_sum")(dg.reshape(T * B, 4 * H), db)
            out["b_ih"], out["b_hh"] = db, db.copy()

    def dx_(self, l):
        cfg, T, B, H = self.cfg, self.cfg.T, self.cfg.B, self.cfg.H
        if l == 0 and not self.need_dx:  # nobody wants the input's gradient: skip its GEMMs
            self.dy = None
            return
        n_in = cfg.in_size(l)
        acc = None
        for d in range(cfg.D):
            out = _buffer((T * B, n_in)) if l == 0 else self.ws.get((T * B, n_in))
            _gemm(self.dgates[d].reshape(T * B, 4 * H), self.w[l][d]["w_ih"], out, addend=acc, ws=self.ws)
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
    cfg, inputs, bs, hx = _parse(input, hx, params, has_biases, num_layers, dropout, train, bidirectional,
                                 batch_first, batch_sizes, extra=extra)
    if not train:
        raise ValueError("train: expected True (the backward needs the activations a train=True forward saves), "
                         "got False")
    T, B, H, LD, D = cfg.T, cfg.B, cfg.H, cfg.L * cfg.D, cfg.D
    want_y = (T * B, D * H) if cfg.varlen else ((B, T, D * H) if batch_first else (T, B, D * H))
    if _shape(grad_y) != want_y:
        raise ValueError(f"grad_y: expected shape {list(want_y)} (the output's), got {list(_shape(grad_y))}")
    for name, v in (("grad_hy", grad_hy), ("grad_cy", grad_cy)):
        if v is not None and _shape(v) != (LD, B, H):
            raise ValueError(f"{name}: expected shape [D*L, B, H] = {[LD, B, H]}, got {list(_shape(v))}")
    for k, v in saved_in.items():
        if _shape(v) != (LD, T, B, H):
            raise ValueError(f"{public[k]}: expected shape [D*L, T, B, H] = {[LD, T, B, H]} "
                             f"(saved by lstm_forward with train=True), got {list(_shape(v))}")
    x = _time_major(cfg, inputs.f32(input), bool(batch_first), cfg.I)
    h0, c0 = _initial_state(cfg, inputs, hx)
    zeros = np.zeros((LD, B, H), F32)
    ghy = inputs.f32(grad_hy) if grad_hy is not None else zeros
    gcy = inputs.f32(grad_cy) if grad_cy is not None else zeros
    gy = _time_major(cfg, inputs.f32(grad_y), bool(batch_first), D * H)
    gy = _padded_rows_zeroed(cfg, gy, bs, owned=False)
    saved = {k: inputs.f32(v) for k, v in saved_in.items()}
    ws = Workspace()
    try:
        bw = _Backward(cfg, bs, x, h0, c0, saved, lambda: _weights(cfg, inputs, params, False, ws), gy, ghy, gcy, ws)
        bw.need_dx = bool(need_dx)
        return _backward_run(cfg, bw, inputs, ghy, gcy, bool(batch_first))
    finally:
        ws.release()


def _backward_run(cfg, bw, inputs, ghy, gcy, batch_first: bool):
    T, B, H, D = cfg.T, cfg.B, cfg.H, cfg.D
    if T * B > 0:
        run_plan(cfg, bw, backward=True)
        dx = bw.dy
    else:
        dx = np.zeros((0, cfg.I), F32)
        bw.dh0[...], bw.dc0[...] = ghy, gcy
        for l in range(cfg.L):
            for d in range(D):
                bw.dparams[l][d] = {"w_ih": np.zeros((4 * H, cfg.in_size(l)), F32),
                                    "w_hh": np.zeros((4 * H, H), F32),
                                    "b_ih": np.zeros((4 * H,), F32), "b_hh": np.zeros((4 * H,), F32)}
    names = ("w_ih", "w_hh", "b_ih", "b_hh")[: 4 if cfg.has_biases else 2]
    dparams = [inputs.out(bw.dparams[l][d][n]) for l in range(cfg.L) for d in range(D) for n in names]
    if dx is None:
        return None, [inputs.out(bw.dh0), inputs.out(bw.dc0)], dparams
    dx = _public_layout(cfg, dx, bool(batch_first), cfg.I)
    return inputs.out(dx), [inputs.out(bw.dh0), inputs.out(bw.dc0)], dparams
