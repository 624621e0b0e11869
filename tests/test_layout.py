"""The package's shape: wings import one way, no import cycles, torch stays out of results.

Every ``import`` and ``from ... import`` in ``bench/`` is read with :mod:`ast` (also the
ones inside functions and under ``TYPE_CHECKING``), mapped to the wing it belongs to, and
checked against the pipeline's direction::

    foundations -> data -> axes -> cell -> model -> cache -> run
                                      \\-> results -> report

``run`` may use ``results`` and ``report`` (a sweep collects and reports at its end);
``results`` and ``report`` read result files and never import ``model``, ``cache``,
``run`` or torch.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"

FOUNDATIONS = {"errors", "atomic", "clock", "paths"}
#: What each wing may import besides itself.
ALLOWED: dict[str, set[str]] = {
    "foundation": {"foundation"},
    "data": {"foundation"},
    "axes": {"foundation", "data"},
    "cell": {"foundation", "data", "axes"},
    "model": {"foundation", "data", "axes", "cell"},
    "cache": {"foundation", "data", "axes", "cell", "model"},
    "results": {"foundation", "data", "axes", "cell"},
    "report": {"foundation", "data", "axes", "cell", "results"},
    "run": {"foundation", "data", "axes", "cell", "model", "cache", "results", "report"},
    "main": {"run"},
}
HEAVY = ("torch", "lightning", "transformers", "torchmetrics", "safetensors", "peft")
#: Torch-free data modules: task metadata and metric functions that results may re-score with.
TORCH_FREE_DATA = {
    "bench.data.tasks",
    "bench.data.glue_files",
    "bench.data.conll",
    "bench.data.ner_metrics",
}


def module_name(path: Path) -> str:
    parts = path.relative_to(BENCH.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def wing(module: str) -> str:
    parts = module.split(".")
    if module == "bench":
        return "foundation"
    head = parts[1]
    if head in FOUNDATIONS:
        return "foundation"
    if head == "__main__":
        return "main"
    return head


def imports(path: Path) -> set[str]:
    """Every module name a file imports (``from x import y`` also counts ``x.y``)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert not node.level, f"{path}: use absolute imports"
            base = node.module or ""
            found.add(base)
            # `from bench.x import y` may name a submodule y
            for alias in node.names:
                found.add(f"{base}.{alias.name}")
    return found


def _graph() -> nx.DiGraph:
    modules = {module_name(p): p for p in BENCH.rglob("*.py")}
    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    for name, path in modules.items():
        for target in imports(path):
            if target in modules and target != name:
                graph.add_edge(name, target)
    return graph


MODULES = sorted(module_name(p) for p in BENCH.rglob("*.py"))


def test_every_module_belongs_to_a_known_wing():
    unknown = {m for m in MODULES if wing(m) not in ALLOWED}
    assert not unknown, f"modules outside the wings {sorted(ALLOWED)}: {sorted(unknown)}"


def test_no_import_cycles():
    cycles = list(nx.simple_cycles(_graph()))
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles[:5])


def test_imports_follow_the_pipeline_direction():
    bad = []
    for source, target in _graph().edges:
        src, dst = wing(source), wing(target)
        if src != dst and dst not in ALLOWED[src]:
            bad.append(f"{source} ({src}) imports {target} ({dst})")
    assert not bad, "imports against the direction:\n" + "\n".join(sorted(bad))


@pytest.mark.parametrize(
    "module",
    [m for m in MODULES if wing(m) in ("foundation", "axes", "cell", "results", "report")]
    + sorted(TORCH_FREE_DATA),
)
def test_torch_free_modules_import_no_torch(module):
    path = BENCH.parent / (module.replace(".", "/") + ".py")
    if not path.exists():
        path = BENCH.parent / module.replace(".", "/") / "__init__.py"
    heavy = sorted(m for m in imports(path) if m.split(".")[0] in HEAVY)
    assert not heavy, f"{module} imports {heavy}"


def test_the_checker_sees_a_violation(tmp_path):
    """The parser resolves what a wrong import would look like (the test can fail)."""
    fake = BENCH / "results" / "_layout_probe.py"
    assert not fake.exists()
    probe = tmp_path / "probe.py"
    probe.write_text("from bench.model.module import HeadbenchModule\nimport torch\n")
    found = imports(probe)
    assert "bench.model.module" in found and "torch" in found
    assert "model" not in ALLOWED["results"]
