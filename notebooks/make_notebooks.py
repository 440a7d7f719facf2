"""Write the notebooks of this folder from their cells (outputs cleared).

The cells live in ``notebook_cells/``, one module per notebook. Run
``python notebooks/make_notebooks.py`` after editing a cell there; the ``.ipynb`` files are
generated, never edited by hand (``tests/notebooks`` checks they match this script). Every
notebook runs end to end on the bundled trace samples, in a minute or less on two cores, and
writes nothing outside a temporary directory, which it removes before it ends.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
from nbformat.notebooknode import NotebookNode

sys.path.insert(0, str(Path(__file__).resolve().parent))  # notebook_cells/, however loaded
try:
    from notebook_cells.cell import Cell
    from notebook_cells.model_evaluation import MODEL_EVALUATION
    from notebook_cells.policy_comparison import POLICY_COMPARISON
    from notebook_cells.trace_exploration import TRACE_EXPLORATION
finally:  # (the importer's path as it was)
    del sys.path[0]

HERE = Path(__file__).resolve().parent

NOTEBOOKS: dict[str, list[Cell]] = {
    "01_trace_exploration.ipynb": TRACE_EXPLORATION,
    "02_model_evaluation.ipynb": MODEL_EVALUATION,
    "03_policy_comparison.ipynb": POLICY_COMPARISON,
}


def build(cells: list[Cell]) -> NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nb.metadata["language_info"] = {"name": "python"}
    for i, (kind, src) in enumerate(cells):
        new = nbformat.v4.new_markdown_cell if kind == "md" else nbformat.v4.new_code_cell
        cell = new(src)
        if kind == "params":
            cell.metadata["tags"] = ["parameters"]
        cell["id"] = f"cell-{i:02d}"  # stable ids: regenerating changes nothing
        nb.cells.append(cell)
    return nb


def render(name: str) -> str:
    return nbformat.writes(build(NOTEBOOKS[name])) + "\n"


def main(out_dir: Path = HERE) -> None:
    for name in NOTEBOOKS:
        (out_dir / name).write_text(render(name))
        print(out_dir / name)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE)
