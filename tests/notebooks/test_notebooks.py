"""Every notebook runs end to end, headless, on the bundled samples; each is saved without
outputs, exactly as ``notebooks/make_notebooks.py`` writes it."""

from __future__ import annotations

import importlib.util
import json
import os
import re
from pathlib import Path
from types import ModuleType

import nbformat
import pytest
from nbclient import NotebookClient
from nbformat import NotebookNode

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


def run_injected(
    name: str, after_params: str, at_end: str, tmp_path: Path, temp: Path
) -> list[NotebookNode]:
    """Run notebook ``name`` with a cell after its parameters (as papermill's ``-p`` does) and
    one at its end; returns its code cells, failing on a cell error."""
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    at = next(i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", []))
    nb.cells.insert(at + 1, nbformat.v4.new_code_cell(after_params))
    nb.cells.append(nbformat.v4.new_code_cell(at_end))
    client = NotebookClient(
        nb, kernel_name="python3", timeout=CELL_TIMEOUT_S,
        resources={"metadata": {"path": str(tmp_path)}},
    )  # fmt: skip
    client.execute(env={**os.environ, "TMPDIR": str(temp)})
    return [c for c in nb.cells if c.cell_type == "code"]


def shown(cell: NotebookNode) -> str:
    """What a code cell printed or displayed, as text."""
    return "".join(o.get("text", "") + str(o.get("data", {}).get("text/plain", ""))
                   for o in cell.outputs)  # fmt: skip


def test_the_trace_notebook_describes_each_bundled_sample_as_it_is() -> None:
    """Its introduction called both samples "10-minute excerpts", but the synthetic one is its
    trace's first 1,000 requests, about 4.5 minutes: each sample's requests and minutes, as
    the files hold them."""
    from kvcast.data import BUNDLED_TRACES, bundled_trace_path

    nb = nbformat.read(NOTEBOOKS / "01_trace_exploration.ipynb", as_version=4)
    intro = " ".join(nb.cells[0].source.split())
    for name in BUNDLED_TRACES:
        with bundled_trace_path(name).open() as f:
            arrivals = [json.loads(line)["timestamp"] for line in f]
        minutes = (max(arrivals) - min(arrivals)) / 60_000
        said = intro.split(f"`{name}`", 1)[1].split("`", 1)[0]  # up to the next code span
        assert f"{len(arrivals):,} requests" in said, (name, said)
        stated = re.search(r"([\d.]+)[ -]minute", said)
        assert stated and abs(float(stated[1]) - minutes) <= 0.5, (name, minutes, said)


@pytest.mark.slow
def test_every_plot_of_the_trace_notebook_labels_its_y_axis(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The prefix tree's panel drew nodes and requests per node on an unlabelled log axis."""
    record = (
        "import matplotlib.pyplot as _plt\n"
        "_figures, _figure = [], _plt.figure\n"
        "_plt.figure = lambda *a, **k: _figures.append(_figure(*a, **k)) or _figures[-1]"
    )
    check = (
        "print([ax.get_title() or '(untitled)' for f in _figures for ax in f.axes\n"
        "       if ax.axison and not ax.get_ylabel()])"
    )
    temp = tmp_path_factory.mktemp("kernel-tmp")
    cells = run_injected("01_trace_exploration.ipynb", record, check, tmp_path, temp)
    assert shown(cells[-1]).strip() == "[]"
    assert "prefix tree by depth" in "".join(c.source for c in cells)  # the panel is drawn


POLICY_SUBSETS = [
    ["dynamo_kv", "mooncake_conductor", "oracle"],  # the review's: two anchors left out
    ["oracle", "predictive_recency"],  # no anchor router
    ["round_robin"],  # nothing replicates
]


def test_the_policy_notebook_names_policies_only_in_its_parameters() -> None:
    """Which policies are the anchors and which replicate comes from ``POLICIES`` and kvcast's
    registry: the anchors listed in a later cell broke every other choice of ``POLICIES``
    (``KeyError: "['round_robin', 'llmd_precise'] not in index"``)."""
    from kvcast.simulator.policies.registry import policy_names
    from kvcast.simulator.replication_policies import replicating_policy_names

    assert replicating_policy_names()  # imported: the replicating policies are registered
    nb = nbformat.read(NOTEBOOKS / "03_policy_comparison.ipynb", as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    later = "".join(c.source for c in code[1:])
    named = [p for p in policy_names() if f'"{p}"' in later or f"'{p}'" in later]
    assert named == [], "policies named outside the parameters cell"


@pytest.mark.slow
@pytest.mark.parametrize("policies", POLICY_SUBSETS, ids=lambda p: "+".join(p))
def test_the_policy_notebook_runs_on_any_subset_of_policies(
    policies: list[str], tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Its parameters invite other policies; and its goal table says which checks do not
    apply to a policy (the oracle's share of the oracle's gain) instead of showing NaN."""
    params = f"POLICIES = {policies!r}\nLOADS = [0.5, 1.0]"
    temp = tmp_path_factory.mktemp("kernel-tmp")
    cells = run_injected("03_policy_comparison.ipynb", params, "None", tmp_path, temp)
    [goal] = [c for c in cells if "judge(" in c.source]
    assert "NaN" not in shown(goal), shown(goal)
    if len([p for p in policies if p in ("oracle", "predictive_recency")]) == 2:
        assert "n/a" in shown(goal)  # the oracle's oracle_share
    assert list(tmp_path.iterdir()) == []
