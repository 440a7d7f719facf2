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


@pytest.mark.parametrize("name", NAMES)
def test_each_notebook_has_one_parameters_cell_naming_its_trace(name: str) -> None:
    """Papermill's convention: the cell tagged ``parameters`` holds what a user changes (its
    trace first); a run with ``-p`` injects its values after it."""
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1 and tagged[0].cell_type == "code", name
    assert "TRACE" in tagged[0].source, name
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code[0] is tagged[0], f"{name}: the parameters come before any other code"
    later = "".join(c.source for c in code[1:])
    assert "bundled:" not in later, f"{name}: a trace is named outside the parameters cell"


@pytest.mark.slow
def test_the_trace_notebook_explores_another_trace_given_as_a_parameter(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Run as papermill would with ``-p TRACES '["bundled:synthetic"]'``: a cell after the
    parameters overrides them; nothing in the notebook assumes the conversation trace."""
    nb = nbformat.read(NOTEBOOKS / "01_trace_exploration.ipynb", as_version=4)
    at = next(i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", []))
    injected = 'TRACES = ["bundled:synthetic"]\nTREE_TRACE = TRACES[0]'
    nb.cells.insert(at + 1, nbformat.v4.new_code_cell(injected))
    client = NotebookClient(
        nb, kernel_name="python3", timeout=CELL_TIMEOUT_S,
        resources={"metadata": {"path": str(tmp_path)}},
    )  # fmt: skip
    temp = tmp_path_factory.mktemp("kernel-tmp")
    client.execute(env={**os.environ, "TMPDIR": str(temp)})
    shown = "".join(
        o.get("text", "") + str(o.get("data", {}).get("text/plain", ""))
        for c in nb.cells if c.cell_type == "code" for o in c.outputs
    )  # fmt: skip
    assert "synthetic" in shown and "conversation" not in shown
