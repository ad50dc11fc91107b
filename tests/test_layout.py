"""The house's imports (docs/layout.md): no module reaches itself again through what it imports,
counting the imports made for type hints only (`if TYPE_CHECKING:`) and those inside functions."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "lrtransfer"


def modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imported(path: Path, name: str, known: dict[str, Path]) -> set[str]:
    """The package's modules that the module `name` at `path` imports, anywhere in it."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: `level - 1` packages up from the module's own
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            out |= {base} | {f"{base}.{alias.name}" for alias in node.names}
    return {m for m in out if m in known and m != name}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while not group or group[-1] != v:
                group.append(stack.pop())
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_circle_even_for_type_hints():
    """training/skips.py imported the engine's Ensemble for its type hints while the engine imported
    the skip step: a circle in type terms. The skip step now gets what it needs, not the ensemble."""
    known = modules()
    graph = {name: imported(path, name, known) for name, path in known.items()}
    assert graph["lrtransfer.training.engine"] and "lrtransfer.training.skips" in graph["lrtransfer.training.engine"]
    assert circles(graph) == []


def test_a_circle_is_found():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
