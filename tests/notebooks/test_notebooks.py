"""Every notebook runs end to end, headless, on the bundled samples; each is saved without
outputs, exactly as ``notebooks/make_notebooks.py`` writes it."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from types import ModuleType

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
NAMES = sorted(p.name for p in NOTEBOOKS.glob("*.ipynb"))
CELL_TIMEOUT_S = 300


def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_notebooks", NOTEBOOKS / "make_notebooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_three_notebooks_exist_and_match_their_generator() -> None:
    gen = generator()
    assert sorted(gen.NOTEBOOKS) == NAMES and len(NAMES) == 3
    for name in NAMES:
        assert (NOTEBOOKS / name).read_text() == gen.render(name), f"{name}: regenerate it"


@pytest.mark.parametrize("name", NAMES)
def test_notebook_is_saved_with_outputs_cleared(name: str) -> None:
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, name


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_notebook_runs_end_to_end_without_a_cell_error(
    name: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    client = NotebookClient(
        nb,
        kernel_name="python3",
        timeout=CELL_TIMEOUT_S,
        resources={"metadata": {"path": str(tmp_path)}},  # the kernel's working directory
    )
    temp = tmp_path_factory.mktemp("kernel-tmp")  # the kernel's own temporary directory
    client.execute(env={**os.environ, "TMPDIR": str(temp)})  # a cell error: CellExecutionError
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs
              if o.output_type == "error"]  # fmt: skip
    assert errors == []
    assert list(tmp_path.iterdir()) == []  # the notebook wrote nothing in its working dir
    assert list(temp.glob("kvcast-nb-*")) == []  # and removed the temporary files it made
