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


def module_imports(package: str) -> dict[str, set[str]]:
    """Per module of ``package`` (dotted name): the modules of the same package it imports, absolute or
    relative, at module level or inside a function (an import deferred to a call still closes a loop)."""
    modules = {".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): path
               for path in sorted((ROOT / package).rglob("*.py"))}
    graph = {}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        found = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    parts = name.split(".")[:len(name.split(".")) - node.level + is_package]
                    base = ".".join(parts + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
            else:
                continue
            found.update(target for target in targets if target in modules and target != name)
        graph[name] = found
    return graph


def cycle_in(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` (its modules in order, the first repeated at the end), or None."""
    state: dict[str, int] = {}  # 1: on the path being walked, 2: finished
    path: list[str] = []

    def walk(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                return path[path.index(target):] + [target]
            if target not in state and (found := walk(target)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := walk(node)):
            return found
    return None


def test_cycle_finder_finds_a_cycle_and_only_a_cycle():
    assert cycle_in({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle_in({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


@pytest.mark.parametrize("package", LAYERS)
def test_no_import_cycle_inside_a_package(package):
    """A package's modules import one another downward only: no module needs a function-level import
    to break a loop."""
    assert cycle_in(module_imports(package)) is None


@pytest.mark.parametrize("package", LAYERS)
def test_no_private_name_crosses_a_package(package):
    """What one top-level package uses of another has a public name (no leading underscore): in what
    it imports, and in the attributes it reads of objects other than its own (every layer above jdlcore
    works with jdlcore's objects, so there no underscored attribute is read but of ``self`` or ``cls``)."""
    offending = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                if node.module.split(".")[0] in set(LAYERS) - {package}:
                    private = [alias.name for alias in node.names if alias.name.startswith("_")]
                    private += [part for part in node.module.split(".") if part.startswith("_")
                                and part != "__init__"]
                    offending += [f"{path.relative_to(ROOT)}: {node.module}.{name}" for name in private]
            elif (package != "jdlcore" and isinstance(node, ast.Attribute) and node.attr.startswith("_")
                  and not node.attr.startswith("__")
                  and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))):
                offending.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")  # another's private
    assert not offending, offending


@pytest.mark.parametrize("package", ["jdlcore", "pipeline", "flows", "jdl", "data_schemas"])
def test_modules_and_functions_stay_small(package):
    """No module over 600 lines, no function over 100 lines and no module docstring over 25 lines: a
    reader can hold each in mind, and the details live with the functions they describe."""
    long_modules, long_functions, long_docstrings = [], [], []
    for path in sorted((ROOT / package).rglob("*.py")):
        text = path.read_text()
        if len(text.splitlines()) > 600:
            long_modules.append(str(path.relative_to(ROOT)))
        tree = ast.parse(text, str(path))
        docstring = ast.get_docstring(tree, clean=False)
        if docstring is not None and len(docstring.strip("\n").splitlines()) > 25:
            long_docstrings.append(str(path.relative_to(ROOT)))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > 100:
                long_functions.append(f"{path.relative_to(ROOT)}:{node.name}")
    assert not long_modules and not long_functions and not long_docstrings, (long_modules, long_functions,
                                                                             long_docstrings)


def test_the_math_of_the_fitted_model_lives_in_jdlcore():
    """The boosted summaries (trained with LightGBM), the view of x, the law's map of y and the choice
    between views are jdlcore's: no module of the pipeline, the flows or the command imports LightGBM,
    defines the view or a search over views, or fits summaries or searches a view itself."""
    for package in ("pipeline", "flows", "jdl"):
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(), str(path))
            imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                        for alias in node.names}
            imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                         if isinstance(node, ast.ImportFrom) and node.module and node.level == 0}
            assert "lightgbm" not in imported, path
            classes = {node.name for node in ast.walk(tree) if isinstance(node, ast.ClassDef)}
            assert not classes & {"XView", "BoostedSummaries", "LocationScale", "ConditionalModel", "ViewSearch",
                                  "SearchRun"}, path
            called = {node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
                      for node in ast.walk(tree) if isinstance(node, ast.Call)}
            assert not called & {"fit_summaries", "search_grid", "refine", "choose_view"}, path
