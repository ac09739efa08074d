"""The LSTM's launch plan: the sizes it depends on (:class:`Config`), its DAG of
launches (:func:`plan`; for the layer recurrence the stages of its plan data,
:mod:`fusedgrad.lstm.launches`), the fixed walk of that DAG (:func:`order`,
:func:`run_plan`) and its Graphviz text (:func:`to_dot`).

Nothing here touches data: the plan depends on sizes only.  Plans are kept for
reuse, least recently used dropped first, while together they cost at most
:data:`PLAN_CACHE_BYTES` (a plan has about 4 nodes per time step and layer, so
a loop over many sequence lengths would otherwise keep every length's plan).
"""
from __future__ import annotations

import collections
import dataclasses
import threading

from .config import RECURRENCES, Config  # noqa: F401  (part of this module's API)

PLAN_CACHE_BYTES = 64 << 20
"""The memory the kept plans (and their walks) may hold together.  A plan that
alone costs more is built for each call and not kept."""

NODE_BYTES = 1200
"""What one node of a plan costs, counted with its edges, attributes and its
place in the walk (measured: about 0.92 KB with networkx 3; the rest is margin)."""


# --------------------------------------------------------------------------- the launch plan


def plan(cfg: Config, backward: bool = False):
    """The launch DAG for ``cfg``: nodes are launches (or tiny data-movement
    steps), edges are data dependencies.  Node attributes: ``kind``, ``layer``,
    ``dir``, ``t`` and ``kernels`` (the ops the node launches: the per-step
    plan's input nodes pack the weights into GEMM panels; rows past whole 32-row
    blocks go to ``matmul_packed``'s few_rows entry).  The layer recurrence's DAG
    is its plan data's stages (:func:`graph_of`), ``kernels`` their launches'
    ops (host steps such as ``gemm`` and ``copy`` included).  The two
    directions of a layer have no edge between them: they may run at the same
    time (``nx.topological_generations`` lists what can).  Kept for reuse (see
    :data:`PLAN_CACHE_BYTES`): the same object for the same ``cfg`` while kept.
    """
    return _kept(cfg, backward)[0]


def graph_of(data: dict):
    """The stages of plan data (``launches.build``) as a launch DAG like :func:`plan`'s: a node
    per stage, named by its name's parts ("layer.0.1" -> ("layer", 0, 1)), ``kernels`` the ops of its
    launches in order, an edge from each stage it comes after."""
    import networkx as nx

    g = nx.DiGraph(config=dict(data["config"]), backward=data["pass"] == "backward")
    node = {}
    for st in data["stages"]:
        kind, *idx = st["name"].split(".")
        node[st["name"]] = (kind, *(int(v) for v in idx))
        ops = tuple(x["op"] for x in data["launches"] if x["stage"] == st["name"])
        g.add_node(node[st["name"]], kind=st["kind"], layer=st["layer"], dir=st["dir"], t=-1, kernels=ops)
        g.add_edges_from((node[a], node[st["name"]]) for a in st["after"])
    return g


def _build(cfg: Config, backward: bool):
    import networkx as nx

    if cfg.recurrence not in RECURRENCES:
        raise ValueError(f"recurrence: expected one of {RECURRENCES}, got {cfg.recurrence!r}")
    if cfg.recurrence == "layer":
        from . import launches

        return graph_of(launches.build(cfg, "backward" if backward else "forward"))
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
            node = ("dw", l, d)
            g.add_node(node, kind="dw", layer=l, dir=d, t=-1, kernels=("pack_b", "matmul_packed", "column_sum"))
            g.add_edge(last, node)
            g.add_edge(last, dx)
        g.nodes[dx].update(kind="dx", layer=l, dir=-1, t=-1, kernels=("matmul_packed",))
        upper = dx
    return g


def order(cfg: Config, backward: bool = False) -> tuple:
    """The fixed walk of :func:`plan`: a topological order, ties broken by node name."""
    return _walk(_kept(cfg, backward))


# [plan, its walk or None until asked for], least recently used first, and the bytes they count
_KEPT: collections.OrderedDict[tuple[Config, bool], list] = collections.OrderedDict()
_kept_bytes = 0
_lock = threading.Lock()


def _kept(cfg: Config, backward: bool) -> list:
    """[plan, walk or None] for ``cfg``: the kept one, else built and kept while the kept plans
    together count at most PLAN_CACHE_BYTES (NODE_BYTES a node), dropping the least recently used."""
    global _kept_bytes
    key = (cfg, bool(backward))
    with _lock:
        entry = _KEPT.get(key)
        if entry is not None:
            _KEPT.move_to_end(key)
            return entry
    entry = [_build(cfg, bool(backward)), None]  # outside the lock: building takes a while
    cost = entry[0].number_of_nodes() * NODE_BYTES
    with _lock:
        if key in _KEPT:  # another thread built it meanwhile: use the kept one
            _KEPT.move_to_end(key)
            return _KEPT[key]
        if cost > PLAN_CACHE_BYTES:
            return entry
        while _KEPT and _kept_bytes + cost > PLAN_CACHE_BYTES:
            _, dropped = _KEPT.popitem(last=False)
            _kept_bytes -= dropped[0].number_of_nodes() * NODE_BYTES
        _KEPT[key] = entry
        _kept_bytes += cost
    return entry


def _walk(entry: list) -> tuple:
    if entry[1] is None:
        import networkx as nx

        entry[1] = tuple(nx.lexicographical_topological_sort(entry[0], key=str))
    return entry[1]


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
    """Run the plan of one pass: for the layer recurrence ``handlers.run(pass)`` runs its plan data
    (``run.Launches``: a call's arrays bound to it); for the per-step recurrence walk the DAG in
    its fixed order, calling ``handlers.<kind>`` for each node."""
    if cfg.recurrence == "layer":
        handlers.run("backward" if backward else "forward")
        return
    entry = _kept(cfg, backward)
    g = entry[0]
    for node in _walk(entry):
        kind = g.nodes[node]["kind"]
        getattr(handlers, kind if kind not in ("xw", "dx", "dw") else kind + "_")(*node[1:])
