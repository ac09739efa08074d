"""The LSTM's launch plan: the sizes it depends on (:class:`Config`), its DAG of
launches (:func:`plan`), the fixed walk of that DAG (:func:`order`, :func:`run_plan`)
and its Graphviz text (:func:`to_dot`).

Nothing here touches data: the plan depends on sizes only and is built once per
configuration.
"""
from __future__ import annotations

import dataclasses
import functools


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


def run_plan(cfg: Config, handlers, backward: bool = False) -> None:
    """Walk the plan in its fixed order, calling ``handlers.<kind>`` for each node."""
    g = plan(cfg, backward)
    for node in order(cfg, backward):
        kind = g.nodes[node]["kind"]
        getattr(handlers, kind if kind not in ("xw", "dx", "dw") else kind + "_")(*node[1:])
