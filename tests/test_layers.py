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


_NUMPY_WATCH = """
import os, sys
seen = []
class Watch:  # records the environment's OPENBLAS_THREAD_TIMEOUT when NumPy is first imported
    def find_spec(self, name, path=None, target=None):
        if name == "numpy" and not seen:
            seen.append(os.environ.get("OPENBLAS_THREAD_TIMEOUT", "unset"))
sys.meta_path.insert(0, Watch())
{entry}
print(seen[0] if seen else "numpy not imported")
"""


@pytest.mark.parametrize("entry", [
    "import jdlcore", "import pipeline.tuning", "import flows.pipelines",
    "from jdl.cli import main; main(['inspect', 'absent.zarr'])",
])
@pytest.mark.parametrize("given", [None, "12"])
def test_every_entry_sets_openblas_idle_wait_before_numpy_loads(entry, given):
    """OpenBLAS reads OPENBLAS_THREAD_TIMEOUT when it loads, with NumPy: each way into the product sets it
    (to 4) first, and a value the environment gives is kept."""
    import os
    import subprocess
    import sys

    env = {key: value for key, value in os.environ.items() if key != "OPENBLAS_THREAD_TIMEOUT"}
    if given is not None:
        env["OPENBLAS_THREAD_TIMEOUT"] = given
    result = subprocess.run([sys.executable, "-c", _NUMPY_WATCH.format(entry=entry)], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.stdout.strip().splitlines()[-1] == (given or "4"), result.stdout + result.stderr
