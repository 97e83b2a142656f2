"""Every notebook in notebooks/ executes without error (small budgets via FUSEDRL_NOTEBOOK_SMALL=1).

Needs nbclient, nbformat and ipykernel (the `notebooks` extra); skipped when they are missing.
Each notebook runs in a fresh kernel of this Python, with a temporary working directory so run
folders and GIFs it writes stay out of the repository.
"""

import os
from pathlib import Path

import pytest

nbclient = pytest.importorskip("nbclient")
nbformat = pytest.importorskip("nbformat")
pytest.importorskip("ipykernel")

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))
CELL_TIMEOUT = int(os.environ.get("FUSEDRL_NOTEBOOK_CELL_TIMEOUT", "400"))


@pytest.mark.timeout(900)
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_executes(path, tmp_path, monkeypatch):
    monkeypatch.setenv("FUSEDRL_NOTEBOOK_SMALL", os.environ.get("FUSEDRL_NOTEBOOK_SMALL", "1"))
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        nb, timeout=CELL_TIMEOUT, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    try:
        client.execute()
    except nbclient.exceptions.CellExecutionError as e:
        pytest.fail(f"{path.name} failed:\n{e}")
