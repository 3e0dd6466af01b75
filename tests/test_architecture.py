"""The house rules of the package layout (docs/architecture.md): imports point down the layers, no import circle
(imports inside functions count), no function over 100 lines (80 in the engine), public names are what they
say, and the architecture document names every package."""
import ast
import importlib
import pkgutil
from collections import defaultdict
from pathlib import Path

import networkx as nx
import pytest

import sacmodel

REPO = Path(__file__).resolve().parent.parent
PKG = REPO / "sacmodel"
# layer of each subpackage: a module may import its own package and packages of lower layers only
LAYERS = {"util": 0, "hardware": 1, "data": 1, "plots": 1, "serving": 2, "fit": 3, "planning": 4, "cluster": 5,
          "cli": 6}


def modules() -> dict[str, Path]:
    out = {}
    for p in PKG.rglob("*.py"):
        name = ".".join(p.relative_to(REPO).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = p
    return out


def imports(mods: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the sacmodel modules it imports anywhere in its file (functions included)."""
    deps = defaultdict(set)
    for name, p in mods.items():
        here = name if p.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(p.read_text())):
            if not isinstance(node, ast.ImportFrom):
                continue
            base = here.split(".")[:len(here.split(".")) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else [])) if node.level else node.module
            if not target or not target.startswith("sacmodel"):
                continue
            subs = {f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in mods}
            deps[name] |= subs or {target}
    return deps


def layer(module: str):
    parts = module.split(".")
    return LAYERS.get(parts[1]) if len(parts) > 2 or (len(parts) == 2 and parts[1] in LAYERS) else None


def test_every_subpackage_has_a_layer():
    pkgs = {p.parent.name for p in PKG.glob("*/__init__.py")}
    assert pkgs == set(LAYERS)


def test_imports_point_down_the_layers():
    mods = modules()
    wrong = []
    for a, bs in imports(mods).items():
        for b in bs:
            la, lb = layer(a), layer(b)
            if la is not None and lb is not None and lb > la:
                wrong.append(f"{a} -> {b}")
    assert not wrong, wrong


def test_no_import_circle():
    mods = modules()
    g = nx.DiGraph([(a, b) for a, bs in imports(mods).items() for b in bs if b != a])
    assert [c for c in nx.strongly_connected_components(g) if len(c) > 1] == []


def test_functions_are_short():
    long = []
    for p in PKG.rglob("*.py"):
        if p.name == "step_generated.py":
            continue
        limit = 80 if "engine" in p.parts else 100
        for n in ast.walk(ast.parse(p.read_text())):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno - n.lineno + 1 > limit:
                long.append(f"{p.relative_to(REPO)}:{n.name} ({n.end_lineno - n.lineno + 1} lines)")
    assert not long, long


MODULES = {"reference": "sacmodel.serving.reference", "workloads": "sacmodel.workloads"}  # public on purpose


def test_public_names_stay_what_they_are_after_every_subpackage_is_imported():
    """A subpackage named like a public function (sacmodel.plan) would replace it on import."""
    for m in pkgutil.walk_packages(sacmodel.__path__, "sacmodel."):
        if not m.name.endswith("__main__"):
            importlib.import_module(m.name)
    for name in sacmodel.__all__:
        value = getattr(sacmodel, name)
        if name in MODULES:
            assert value.__name__ == MODULES[name]
        else:
            assert not isinstance(value, type(sacmodel)), f"sacmodel.{name} is a module"


@pytest.mark.parametrize("pkg", sorted(LAYERS))
def test_the_architecture_document_describes_every_package(pkg):
    doc = (REPO / "docs" / "architecture.md").read_text()
    assert f"sacmodel/{pkg}/" in doc
