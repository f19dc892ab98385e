"""The linker package's layering (issue 40): pipelink.common is the ground both halves stand on,
pipelink.linker is the link side, pipelink.runtime the launch side.

Read from the source with `ast` (nothing is imported), counting every import, including the
ones inside functions and under TYPE_CHECKING, so a cycle cannot hide in a deferred import:

* no import cycles between pipelink modules;
* no private (_underscore) name imported from another module;
* common imports neither half; the linker never imports the runtime, nor the runtime the linker;
* a runtime module imports its siblings, never the package's public API (pipelink.runtime).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "tools" / "pipelink"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports(path: Path, known: dict[str, Path]) -> list[tuple[str, str]]:
    """(module, name) for every pipelink import of the file; name is "" for `import module`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(a.name, "") for a in node.names if a.name.split(".")[0] == "pipelink"]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "pipelink":
            assert node.level == 0, f"{path}: a relative import"
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                found.append((sub, "") if sub in known else (node.module, a.name))
    return found


def graph() -> dict[str, set[str]]:
    known = modules()
    return {m: {target for target, _ in imports(p, known) if target != m} for m, p in known.items()}


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in g.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return found


def half(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_no_import_cycles():
    assert cycles(graph()) == []


def test_no_private_names_across_modules():
    known = modules()
    private = [f"{m}: from {target} import {name}" for m, p in known.items()
               for target, name in imports(p, known) if name.startswith("_") and target != m]
    assert private == []


def test_halves_meet_only_in_common():
    crossing = []
    for m, targets in graph().items():
        for t in targets:
            if half(m) == "common" and half(t) in ("linker", "runtime"):
                crossing.append(f"{m} -> {t}")
            if {half(m), half(t)} == {"linker", "runtime"}:
                crossing.append(f"{m} -> {t}")
    assert crossing == []


def test_runtime_modules_import_siblings_not_the_public_api():
    inward = [m for m, targets in graph().items() if m.startswith("pipelink.runtime.") and "pipelink.runtime" in targets]
    assert inward == []


def test_the_graph_is_read():
    """The checks above see the package: its three halves, and the edges between them."""
    g = graph()
    assert {"pipelink.common.diagnostics", "pipelink.linker.link", "pipelink.runtime.kernel"} <= set(g)
    assert "pipelink.common.diagnostics" in g["pipelink.linker.link"]
    assert "pipelink.runtime.kernel" in g["pipelink.runtime"]
