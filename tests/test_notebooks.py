"""Notebooks are committed clean: no outputs, short cells, one per day, each exercise's cell present;
and what they use of the grader exists (cells that need a GPU never run on the CPU)."""
import ast
import importlib
import json
import types

import pytest

from grader import paths

NOTEBOOKS = sorted(paths.NOTEBOOKS.glob("day*.ipynb"))


def test_every_day_so_far_has_a_notebook():
    days = {p.name[:5] for p in NOTEBOOKS}
    assert {"day01", "day02"} <= days


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_outputs_are_stripped_and_cells_short(path):
    nb = json.loads(path.read_text())
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] == "code":
            assert not cell.get("outputs") and cell.get("execution_count") is None, f"cell {i} has outputs"
            src = "".join(cell["source"])
            assert len(src.splitlines()) <= 20, f"cell {i} of {path.name} is {len(src.splitlines())} lines"
            assert "pip install" not in src and "wget" not in src


def _grader_names(tree) -> dict[str, str]:
    """The notebook's names for the grader's modules: `import grader.x` (grader), `from grader
    import nb`, `from grader.exercises import day08 as d8`."""
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update({(a.asname or a.name.split(".")[0]): (a.name if a.asname else a.name.split(".")[0])
                          for a in node.names if a.name.split(".")[0] == "grader"})
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "grader":
            names.update({(a.asname or a.name): f"{node.module}.{a.name}" for a in node.names})
    return names


def _resolve(dotted: str):
    """A dotted name of the grader: its module, or the module's attribute."""
    try:
        return importlib.import_module(dotted)
    except ModuleNotFoundError:
        parent, _, attr = dotted.rpartition(".")
        return getattr(importlib.import_module(parent), attr)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_what_the_notebooks_use_of_the_grader_exists(path):
    # A cell behind nb.gpu(...) runs only on a GPU: an attribute of the grader it names that no longer
    # exists (grader.ncu.available, once removed as "without callers") fails only there. Read here.
    nb = json.loads(path.read_text())
    code = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    code = "\n".join(line for line in code.splitlines() if not line.lstrip().startswith(("%", "!")))
    tree = ast.parse(code)
    names = _grader_names(tree)
    missing = []
    for node in ast.walk(tree):
        chain = []
        while isinstance(node, ast.Attribute):
            chain.insert(0, node.attr)
            node = node.value
        if not (chain and isinstance(node, ast.Name) and node.id in names):
            continue
        obj, dotted = _resolve(names[node.id]), names[node.id]
        for attr in chain:
            if not isinstance(obj, types.ModuleType):
                break  # an attribute of a class or a function: as far as the modules go
            dotted += "." + attr
            try:
                obj = _resolve(dotted)
            except (AttributeError, ModuleNotFoundError):
                missing.append(f"{node.id}.{'.'.join(chain)}")
                break
    assert not missing, f"{path.name} uses what the grader does not have: {sorted(set(missing))}"
