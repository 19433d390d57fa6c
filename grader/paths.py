"""Where the course's files are: its root, kernels/ (with the header library in kernels/include),
solutions/ and notebooks/, and how a path inside the course is shown."""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KERNELS = ROOT / "kernels"
INCLUDE = KERNELS / "include"
SOLUTIONS = ROOT / "solutions"
NOTEBOOKS = ROOT / "notebooks"


def display_path(p: str | Path) -> str:
    """A path relative to the course root when it is inside it."""
    p = Path(p).resolve()
    try:
        return str(p.relative_to(ROOT))
    except ValueError:
        return str(p)
