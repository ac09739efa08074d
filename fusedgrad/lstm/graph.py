"""The LSTM's launch plan as a DAG of its stages (:func:`graph`, :func:`graph_of`) and its Graphviz
text (:func:`to_dot`): what ``fusedgrad graph`` draws.  Nothing here runs: the plan is data
(:mod:`fusedgrad.lstm.launches`).
"""
from __future__ import annotations

from .config import Config


def graph(cfg: Config, backward: bool = False):
    """The stages of ``cfg``'s plan (:func:`graph_of` of ``launches.build``).  The two directions
    of a layer have no edge between them: they may run at the same time
    (``nx.topological_generations`` lists what can)."""
    from . import launches

    return graph_of(launches.build(cfg, "backward" if backward else "forward"))


def graph_of(data: dict):
    """The stages of plan data (``launches.build``, or JSON it wrote) as a DAG: a node per stage, named by its name's parts ("layer.0.1" -> ("layer", 0, 1)), ``kernels`` the ops of its
    launches in order, an edge from each stage it comes after."""
    import networkx as nx

    g = nx.DiGraph(config=dict(data["config"]), backward=data["pass"] == "backward")
    node = {}
    for st in data["stages"]:
        kind, *idx = st["name"].split(".")
        node[st["name"]] = (kind, *(int(v) for v in idx))
        ops = tuple(x["op"] for x in data["launches"] if x["stage"] == st["name"])
        g.add_node(node[st["name"]], kind=st["kind"], layer=st["layer"], dir=st["dir"], kernels=ops)
        g.add_edges_from((node[a], node[st["name"]]) for a in st["after"])
    return g


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
            text = a["kind"]
            if a["kernels"]:
                text += "\\n" + " + ".join(a["kernels"])
            lines.append(f'    {names[node]} [label="{text}"];')
        lines.append("  }")
    for u, v in g.edges:
        lines.append(f"  {names[u]} -> {names[v]};")
    lines.append("}")
    return "\n".join(lines) + "\n"
