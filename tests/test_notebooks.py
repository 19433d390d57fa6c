"""Notebooks are committed clean: no outputs, short cells, one per day, each exercise's cell present."""
import json

import pytest

from grader import toolchain

NOTEBOOKS = sorted(toolchain.NOTEBOOKS.glob("day*.ipynb"))


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
