"""The package's structure, read from its source (ast): imports run one way, no module
reaches into another's private names, package faces only re-export, and each layer
imports only the layers below it. Runs nothing of dse."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "dse"

# Layers from the bottom up: a module may import its own layer and those listed before it.
LAYERS = [
    {"dse._version", "dse.errors", "dse.units", "dse.atomic", "dse.checks", "dse.pytrees"},
    {"dse.formulas"},
    {"dse.catalogue", "dse.schema"},
    {"dse.study"},
    {"dse.core"},
    {"dse.results"},
    {"dse.run"},
    {"dse.search", "dse.sensitivity", "dse.validate", "dse.uncertainty"},
    {"dse.report"},
    {"dse.cli", "dse.__main__", "dse"},
]


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _target(module: str, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    package = module.split(".")
    if not MODULES[module].name == "__init__.py":
        package = package[:-1]
    base = package[:len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(module: str) -> list[tuple[str, str]]:
    """(imported module, imported name or '') for every import of ``module``."""
    out = []
    for node in ast.walk(ast.parse(MODULES[module].read_text())):
        if isinstance(node, ast.ImportFrom):
            target = _target(module, node)
            for alias in node.names:
                full = f"{target}.{alias.name}"
                out.append((full, "") if full in MODULES else (target, alias.name))
        elif isinstance(node, ast.Import):
            out += [(alias.name, "") for alias in node.names]
    return [(m, n) for m, n in out if m in MODULES and m != module]


def _layer(module: str) -> int:
    for i, layer in enumerate(LAYERS):
        if any(module == top or module.startswith(top + ".") for top in layer - {"dse"}):
            return i
    assert module == "dse", module
    return len(LAYERS) - 1


def test_the_import_graph_has_no_cycle():
    graph = {m: {t for t, _ in _imports(m)} for m in MODULES}
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(module, path):
        state[module] = 1
        for target in sorted(graph[module]):
            if state.get(target) == 1:
                cycle = path[path.index(target):] + [target]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if target not in state:
                visit(target, path + [target])
        state[module] = 2

    for module in sorted(MODULES):
        if module not in state:
            visit(module, [module])
    assert len(MODULES) > 50  # the walk saw the package


def test_no_module_imports_a_private_name_of_another():
    private = [f"{m} imports {t}.{n}" for m in MODULES for t, n in _imports(m)
               if n.startswith("_") and not n.startswith("__")]
    assert not private, private


def test_each_layer_imports_only_the_layers_below():
    upward = [f"{m} (layer {_layer(m)}) imports {t} (layer {_layer(t)})"
              for m in MODULES for t, _ in _imports(m) if _layer(t) > _layer(m)]
    assert not upward, upward


@pytest.mark.parametrize("face", sorted(m for m, p in MODULES.items()
                                        if p.name == "__init__.py" and m != "dse"))
def test_package_faces_only_reexport(face):
    for node in ast.parse(MODULES[face].read_text()).body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # the docstring
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and getattr(node.targets[0], "id", "") == "__all__"):
            continue
        pytest.fail(f"{face}: line {node.lineno} is not a re-export")


def test_the_layers_name_every_module():
    assert {m for m in MODULES if _layer(m) is not None} == set(MODULES)
