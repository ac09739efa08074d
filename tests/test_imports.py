"""The import graph of fusedgrad's own modules: no cycles, no other module's private
names, and TVM touched only where lowering/tvm_api.py says.

Read from the sources with ``ast`` (nothing is imported), so function-level
(lazy) imports count as much as top-level ones.  Modules are named as
installed: ``fusedgrad.lowering.build`` for lowering/build.py (pyproject's
package-dir).  An import of a package's submodule (``from . import runtime``)
is an edge to that submodule; an import of a name from a package
(``from .. import ScheduleRule``) is an edge to the package's ``__init__``.
"""
from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"fusedgrad": "fusedgrad", "lowering": "fusedgrad.lowering", "schedules": "fusedgrad.schedules",
            "targets": "fusedgrad.targets", "te_defs": "fusedgrad.te_defs"}

# Modules that import TVM (or tvm_ffi) themselves, and why; everything else goes through
# lowering/tvm_api.py, whose docstring names these too.
TVM_FACING = {
    "fusedgrad.lowering.tvm_api": "the thin layer over TVM's API",
    "fusedgrad.lowering.tuning": "drives TVM's meta-schedule (database, runner, builder, tune_tir)",
    "fusedgrad.lowering.intrinsics": "lowering rules are TIR expressions registered with TVM",
    "fusedgrad.schedules.cuda.mma_tf32": "tensor intrinsics are TIR functions written in TVMScript",
    "fusedgrad.schedules.cuda.mma_16bit": "tensor intrinsics are TIR functions written in TVMScript",
    "fusedgrad.schedules.tir_api": "what schedule rules need of TVM's API (PrimFuncs, Schedules, choose)",
    "fusedgrad.lowering.c_emitter": "prints C from TIR nodes",
    "fusedgrad.lowering.c_guards": "analyses TIR nodes for the C printer",
    "fusedgrad.lowering.c_spmd": "analyses TIR nodes for the C printer",
    "fusedgrad.lowering.ascend.vector": "lowers scheduled TIR to AscendC vector instructions",
    "fusedgrad.targets.llvm": "asks TVM's LLVM for the host CPU",
    "fusedgrad.schedules.llvm.lstm_layer": "builds the LSTM layer's loop nest with TVM's IR builder",
    "fusedgrad.schedules.dsp.lstm_layer": "builds the LSTM layer's loop nest with TVM's IR builder",
    "fusedgrad.schedules.cuda.lstm_layer": "builds the LSTM layer's loop nest with TVM's IR builder",
    "fusedgrad.schedules.cuda.lstm_mma": "builds the layer kernels' tensor-core sums with TVM's IR builder",
    "fusedgrad.lowering.tuning_kernels": "fixes and builds kernels for meta-schedule's measurements",
    "fusedgrad.schedules.tir_rewrite": "rewrites TIR as IR (variables, buffers, joined schedules)",
}
TE_DEFINITIONS = "fusedgrad.te_defs."  # an op is written in TVM's tensor expressions: its module imports tvm.te


def _sources() -> dict[str, tuple[Path, bool]]:
    """{module name: (path, is a package __init__)} of every source file of the packages."""
    mods = {}
    for folder, package in PACKAGES.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            mods[".".join([package] + (parts[:-1] if is_package else parts))] = (path, is_package)
    return mods


def _imports(name: str, text: str, is_package: bool, mods) -> list[tuple[str, str, int]]:
    """(imported module, name taken from it or "", line) of every import statement of module
    ``name``, and of every ``module.attribute`` use of a module it imported (``api._size``)."""
    package = name if is_package else name.rpartition(".")[0]
    tree = ast.parse(text)
    found, bound = [], {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(a.name, "", node.lineno) for a in node.names]
            bound.update({a.asname: a.name for a in node.names if a.asname})
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package
                for _ in range(node.level - 1):
                    anchor = anchor.rpartition(".")[0]
                base = f"{anchor}.{base}" if base else anchor
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                if sub in mods:
                    found.append((sub, "", node.lineno))
                    bound[alias.asname or alias.name] = sub
                else:
                    found.append((base, alias.name, node.lineno))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in bound:
            found.append((bound[node.value.id], node.attr, node.lineno))
    return found


def _graph(mods: dict[str, tuple[str, bool]]) -> nx.DiGraph:
    """Module graph of {name: (source text, is a package __init__)}; edges carry the line and imported names."""
    g = nx.DiGraph()
    g.add_nodes_from(mods, own=True)
    for name, (text, is_package) in mods.items():
        for target, imported, line in _imports(name, text, is_package, mods):
            if target == name:  # a module naming itself (e.g. to hash its own source) is no cycle
                continue
            edge = g.get_edge_data(name, target, {})
            g.add_edge(name, target, line=min(line, edge.get("line", line)),
                       names=edge.get("names", set()) | {(imported, line)})
    return g


@pytest.fixture(scope="module")
def graph():
    sources = _sources()
    g = _graph({name: (path.read_text(), is_package) for name, (path, is_package) in sources.items()})
    for name, (path, _) in sources.items():
        g.nodes[name]["path"] = path.relative_to(ROOT)
    return g


def _rel(g, name) -> str:
    return str(g.nodes[name].get("path", name))


def test_no_import_cycles(graph):
    own = graph.subgraph([n for n in graph if graph.nodes[n].get("own")])
    cycles = sorted(nx.simple_cycles(own), key=len)
    shown = [" -> ".join(f"{_rel(own, a)}:{own.edges[a, b]['line']}" for a, b in zip(c, c[1:] + c[:1]))
             for c in cycles[:20]]
    assert not cycles, f"{len(cycles)} import cycles, e.g. (file:line of each import):\n" + "\n".join(shown)


LAYERS = ("fusedgrad.te_defs", "fusedgrad.schedules", "fusedgrad.lowering")
"""What an op is, how it is scheduled, how it is built: each imports only the layers before it."""


def test_the_packages_import_only_the_layers_below(graph):
    def layer(name: str) -> int | None:
        return next((i for i, p in enumerate(LAYERS) if name == p or name.startswith(p + ".")), None)

    upward = sorted(f"{_rel(graph, a)}:{graph.edges[a, b]['line']} imports {b}" for a, b in graph.edges
                    if layer(a) is not None and layer(b) is not None and layer(b) > layer(a))
    assert not upward, "a layer imports one built on it:\n" + "\n".join(upward)


MAX_LINES = 500
"""A module longer than this is split along a seam (one job per module)."""


def test_modules_stay_under_the_line_limit():
    long = {str(path.relative_to(ROOT)): n for path, _ in _sources().values()
            if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines (split them along a seam): {long}"


def test_no_private_names_of_other_modules(graph):
    """``from .x import _y`` or ``x._y`` reaches into x: shared pieces belong in a module that names them publicly."""
    bad = []
    for a, b, data in graph.edges(data=True):
        if not graph.nodes[b].get("own"):
            continue
        for imported, line in sorted(data["names"]):
            if imported.startswith("_") and not imported.startswith("__"):
                bad.append(f"{_rel(graph, a)}:{line} takes {imported} from {b}")
    assert not bad, "\n".join(bad)


def test_tvm_is_imported_only_where_tvm_api_says(graph):
    users = {a for a, b in graph.edges if b.split(".")[0] in ("tvm", "tvm_ffi")}
    undeclared = sorted(u for u in users - set(TVM_FACING) if not u.startswith(TE_DEFINITIONS))
    assert not undeclared, f"import TVM through lowering/tvm_api.py (or declare why not): {undeclared}"
    stale = sorted(set(TVM_FACING) - users)
    assert not stale, f"listed as TVM-facing but no longer importing TVM: {stale}"
    doc = ast.get_docstring(ast.parse((ROOT / "lowering" / "tvm_api.py").read_text()))
    missing = [m for m in set(TVM_FACING) - {"fusedgrad.lowering.tvm_api"}
               if m.removeprefix("fusedgrad.").replace(".", "/") + ".py" not in doc]
    assert not missing, f"lowering/tvm_api.py's docstring does not name {missing}"


def test_the_walk_sees_lazy_cycles_and_private_names():
    """The graph walk finds what the tests above must catch (so they can fail)."""
    g = _graph({"fusedgrad": ("from .a import f\n", True),
                "fusedgrad.a": ("def f():\n    from .b import _g\n", False),
                "fusedgrad.b": ("from . import a\nimport tvm\nx = a._h\n", False)})
    assert sorted(sorted(c) for c in nx.simple_cycles(g)) == [["fusedgrad.a", "fusedgrad.b"]]
    assert g.edges["fusedgrad.a", "fusedgrad.b"]["names"] == {("_g", 2)}
    assert ("_h", 3) in g.edges["fusedgrad.b", "fusedgrad.a"]["names"]
    assert g.has_edge("fusedgrad.b", "tvm") and not g.has_edge("fusedgrad.b", "fusedgrad")
