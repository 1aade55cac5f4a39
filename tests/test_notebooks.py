"""Every notebook in notebooks/ runs top to bottom without error and shows a figure (nbclient,
fresh kernel; slow, as the docs build of tests/test_docs.py runs them in the default suite), and
is stored without outputs: the figures are made by the build, never committed."""

import os
from pathlib import Path

import pytest

import decentlearn

nbformat = pytest.importorskip("nbformat", reason="notebook tests need the test extras")
nbclient = pytest.importorskip("nbclient", reason="notebook tests need the test extras")

NOTEBOOKS = sorted((Path(__file__).parent.parent / "notebooks").glob("*.ipynb"))


def test_there_are_notebooks():
    assert NOTEBOOKS, "notebooks/ has no notebook"


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs(path, tmp_path, monkeypatch):
    """The notebook alone, in a fresh kernel. In the default suite the build of the docs site
    executes every notebook the same way (short version, the same metadata skips) and
    tests/test_docs.py checks each page for errors and figures: this is the same check without
    mkdocs, for ``pytest -m slow``."""
    # The kernel imports the same decentlearn as this process (a checkout's in-place build or the
    # installed package), not whatever another path on the machine would give it.
    root = str(Path(decentlearn.__file__).resolve().parent.parent)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
    # Figures render inline, as in Jupyter: an MPLBACKEND inherited from the shell (CI exports
    # Agg) would make the kernel draw them nowhere.
    monkeypatch.delenv("MPLBACKEND", raising=False)
    nb = nbformat.read(path, as_version=4)
    # A notebook lists what it needs beyond the test extras in metadata["decentlearn"]: optional
    # packages ("requires", e.g. torch) and data sets ("datasets"); it is skipped without them,
    # and runs its short version (DECENTLEARN_NOTEBOOK_QUICK=1).
    needs = nb.metadata.get("decentlearn", {})
    for module in needs.get("requires", []):
        pytest.importorskip(module, reason=f"{path.name} needs {module}")
    for name in needs.get("datasets", []):
        from decentlearn.data import load_dataset
        try:
            load_dataset(name)
        except FileNotFoundError:
            pytest.skip(f"{path.name} needs the {name} data set")
    monkeypatch.setenv("DECENTLEARN_NOTEBOOK_QUICK", "1")
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    errors = [o for cell in nb.cells if cell.cell_type == "code"
              for o in cell.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
    # Figures render inline: at least one PNG among the outputs.
    images = [o for cell in nb.cells if cell.cell_type == "code"
              for o in cell.get("outputs", []) if "image/png" in o.get("data", {})]
    assert images, f"{path.name} shows no figure"


def test_at_least_five_notebooks():
    assert len(NOTEBOOKS) >= 5, [p.name for p in NOTEBOOKS]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_is_stored_clean(path):
    """No hidden state: notebooks are committed without outputs or execution counts, so what the
    test runs top to bottom is all there is."""
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert not cell.get("outputs") and cell.get("execution_count") is None, path.name
