"""The layers import downward only: each top-level package imports itself and the packages before it in
``LAYERS`` (the README's layout table), never one after it. No import cycle between layers can form."""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ("jdlcore", "data_schemas", "pipeline", "experiments", "flows", "jdl")


def imported_layers(package: str) -> dict[str, set[str]]:
    """Per module of ``package``: the project layers it imports (absolute imports; relative ones stay inside)."""
    found = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        names = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
        found[str(path.relative_to(ROOT))] = names & set(LAYERS)
    return found


@pytest.mark.parametrize("position, package", list(enumerate(LAYERS)))
def test_each_layer_imports_only_the_layers_below_it(position, package):
    allowed = set(LAYERS[:position + 1])
    offending = {module: sorted(names - allowed) for module, names in imported_layers(package).items()
                 if names - allowed}
    assert not offending, offending


def test_the_layers_are_every_python_package_of_the_product():
    packages = {path.parent.name for path in ROOT.glob("*/__init__.py")} - {"tests"}
    assert packages == set(LAYERS)
