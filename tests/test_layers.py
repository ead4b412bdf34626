"""The product's imports: no cycles, and layers that import one way.

A folder is a layer (docs/architecture.md): `contracts` (the abilities a
cluster declares, the deadline helper) imports nothing of the project, and
every layer may use it; `cluster` (the system under test) imports no other
layer; `faults` may use `cluster`; `harness` may use `faults`, `cluster` and
`reports`; `reports` reads histories only. Imports are read from the source (every `import` and
`from ... import`, also the ones under `if TYPE_CHECKING:` and inside
functions: each is a dependency a reader has to follow).
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("contracts", "cluster", "faults", "harness", "reports")
MAY_IMPORT = {
    "contracts": {"contracts"},
    "cluster": {"cluster", "contracts"},
    "faults": {"faults", "cluster", "contracts"},
    "harness": {"harness", "faults", "cluster", "reports", "contracts"},
    "reports": {"reports", "contracts"},
}


def modules(root: Path, packages=PACKAGES) -> dict[str, Path]:
    out = {}
    for pkg in packages:
        for f in (root / pkg).rglob("*.py"):
            parts = list(f.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = f
    return out


def import_graph(root: Path, packages=PACKAGES) -> dict[str, set[str]]:
    """module -> the product modules it imports (a name resolves to the
    longest module prefix that exists: `from a.b import c` is a.b.c when c
    is a module, else a.b)."""
    mods = modules(root, packages)

    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {m: set() for m in mods}
    for m, f in mods.items():
        is_pkg = f.name == "__init__.py"
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    here = m.split(".") if is_pkg else m.split(".")[:-1]
                    here = here[:len(here) - (node.level - 1)]
                    base = ".".join(here + ([node.module] if node.module else []))
                names = [f"{base}.{a.name}" for a in node.names]
            for name in names:
                target = resolve(name)
                if target and target != m:
                    graph[m].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{m} imports {d}" for m, deps in graph.items() for d in deps
                  if d.split(".")[0] not in MAY_IMPORT[m.split(".")[0]])


# What of the system under test the other layers may use (docs/architecture.md):
# its configuration, ZooKeeper layout, admin operations (of both coordination
# modes), the on-disk format (disk faults), the wire codecs and error codes (probes,
# the fuzzer) and the group -> offsets partition mapping (coordinator targets).
CLUSTER_PUBLIC = ("cluster.config", "cluster.zkpaths", "cluster.admin", "cluster.modes",
                  "cluster.coordination", "cluster.v2.admin",
                  "cluster.log.crash", "cluster.log.batch", "cluster.protocol",
                  "cluster.server.offsets_topic")


def private_cluster_uses(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{m} imports {d}" for m, deps in graph.items() for d in deps
                  if not m.startswith("cluster") and d.startswith("cluster")
                  and not any(d == p or d.startswith(p + ".") for p in CLUSTER_PUBLIC))


def test_other_layers_use_only_the_public_pieces_of_cluster():
    assert private_cluster_uses(import_graph(REPO)) == []


def test_the_product_has_no_import_cycle():
    assert cycles(import_graph(REPO)) == []


def test_layers_import_one_way():
    assert layer_violations(import_graph(REPO)) == []


def test_the_checks_find_a_cycle_and_a_layer_violation(tmp_path):
    """The two checks above, shown to fire on a small tree that breaks both."""
    (tmp_path / "cluster").mkdir()
    (tmp_path / "cluster" / "__init__.py").write_text("")
    (tmp_path / "cluster" / "a.py").write_text("from cluster import b\n")
    (tmp_path / "cluster" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import X\n")
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "__init__.py").write_text("")
    (tmp_path / "reports" / "r.py").write_text("def f():\n    import cluster.a\n")
    (tmp_path / "faults").mkdir()
    (tmp_path / "faults" / "__init__.py").write_text("")
    (tmp_path / "faults" / "f.py").write_text("from cluster.b import Y\nimport contracts.c\n")
    (tmp_path / "contracts").mkdir()
    (tmp_path / "contracts" / "__init__.py").write_text("")
    (tmp_path / "contracts" / "c.py").write_text("from faults import f\n")
    graph = import_graph(tmp_path, ("cluster", "reports", "faults", "contracts"))
    assert cycles(graph) == [["cluster.a", "cluster.b"], ["contracts.c", "faults.f"]]
    assert layer_violations(graph) == ["contracts.c imports faults.f",
                                       "reports.r imports cluster.a"]
    assert private_cluster_uses(graph) == ["faults.f imports cluster.b",
                                           "reports.r imports cluster.a"]


# -- citations in the product's comments ----------------------------------------
# Code comments cite the project's own design document by anchor
# (`docs/design.md#isr`), never documents a reader of the repository does not
# have (the design drafts the project started from: "seed 000 §C").

SEED_CITATION = re.compile(r"(?i)\bseeds?\s+0\d\d\b|seed\s*§")
DESIGN_CITATION = re.compile(r"docs/design\.md#([A-Za-z0-9_-]+)")
DESIGN_LINK = re.compile(r"\]\(#([A-Za-z0-9_-]+)\)")  # an in-page link of design.md
ANCHOR = re.compile(r'<a id="([^"]+)"></a>')


def _sources() -> list[Path]:
    return sorted(f for pkg in PACKAGES for f in (REPO / pkg).rglob("*.py"))


def test_no_citations_of_documents_outside_the_repository():
    hits = []
    for f in _sources():
        text = f.read_text()
        for m in SEED_CITATION.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            hits.append(f"{f.relative_to(REPO)}:{line}: {m.group(0)!r}")
    assert not hits, ("cite docs/design.md#ANCHOR instead of documents outside the "
                      "repository:\n" + "\n".join(hits))


def test_design_anchors_cited_exist():
    design = REPO / "docs" / "design.md"
    anchors = set(ANCHOR.findall(design.read_text()))
    cited: dict[str, set[str]] = {}
    for f in _sources() + sorted((REPO / "docs").glob("*.md")):
        text = f.read_text()
        names = DESIGN_CITATION.findall(text)
        if f == design:
            names += DESIGN_LINK.findall(text)
        for name in names:
            cited.setdefault(name, set()).add(str(f.relative_to(REPO)))
    assert cited, "no docs/design.md#ANCHOR citation found: is the pattern right?"
    missing = sorted(f"#{a} (cited in {', '.join(sorted(cited[a]))})"
                     for a in cited if a not in anchors)
    assert not missing, "anchors cited but not in docs/design.md: " + "; ".join(missing)


# -- abilities are declared, not probed -------------------------------------------
# What a cluster can do is what it declares (contracts/abilities.py): faults
# never guess it from the attributes a cluster object happens to have.

PROBE = re.compile(r"\b(?:getattr|hasattr)\(\s*[\w.]*cluster\b")


def test_faults_never_probe_a_cluster_for_abilities():
    assert PROBE.search('getattr(self.ctx.cluster, "coordination", "controller")')
    hits = [f"{f.relative_to(REPO)}:{text.count(chr(10), 0, m.start()) + 1}"
            for f in sorted((REPO / "faults").rglob("*.py"))
            for text in [f.read_text()] for m in PROBE.finditer(text)]
    assert hits == [], "declare the ability in contracts/abilities.py instead: " + ", ".join(hits)
