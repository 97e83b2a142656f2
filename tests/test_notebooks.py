"""Every notebook in notebooks/ executes without error (small budgets via FUSEDRL_NOTEBOOK_SMALL=1).

Needs nbclient, nbformat and ipykernel (the `notebooks` extra); skipped when they are missing.
Each notebook runs in a fresh kernel of this Python, with a temporary working directory so run
folders and GIFs it writes stay out of the repository.
"""

import os
import re
from pathlib import Path

import pytest

nbclient = pytest.importorskip("nbclient")
nbformat = pytest.importorskip("nbformat")
pytest.importorskip("ipykernel")

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))
WARNING_LINE = re.compile(r"\b\w*Warning: ")  # how `warnings` prints one: "file:line: RuntimeWarning: ..."
CELL_TIMEOUT = int(os.environ.get("FUSEDRL_NOTEBOOK_CELL_TIMEOUT", "400"))


@pytest.mark.slow
@pytest.mark.subprocess
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
    # A warning printed in a cell (a RuntimeWarning of fusedrl.load, a deprecation) is shown to every
    # reader but does not make the cell fail: the suite's filterwarnings=error stops at this process.
    warned = [
        f"cell {i}: {line.strip()}"
        for i, cell in enumerate(nb.cells) if cell.cell_type == "code"
        for out in cell.get("outputs", []) if out.get("name") == "stderr"  # stream outputs only have a name
        for line in out.get("text", "").splitlines() if WARNING_LINE.search(line)
    ]
    assert not warned, f"{path.name} printed warnings:\n" + "\n".join(warned)


def _text(name: str, cell_type: str, collapse: bool = True) -> str:
    """The sources of a notebook's cells of `cell_type`, whitespace collapsed (prose wraps anywhere)
    unless `collapse` is False (code to parse)."""
    nb = nbformat.read(NOTEBOOKS[0].parent / name, as_version=4)
    cells = [c.source for c in nb.cells if c.cell_type == cell_type]
    return " ".join(" ".join(c.split()) for c in cells) if collapse else "\n".join(cells)


def test_why_2_percent_prose_matches_the_benchmark():
    """The settings and rules the markdown states are the ones `fusedrl.bench.hostloop` runs (executing
    the notebook only shows that it runs: stale prose would pass)."""
    from fusedrl.bench import hostloop
    from fusedrl.train import PPOConfig

    z = hostloop.ZOO
    text, code = _text("why_2_percent.ipynb", "markdown"), _text("why_2_percent.ipynb", "code")
    batch = z["num_envs"] * z["num_steps"]
    claims = {
        "8 envs x 32 steps": (z["num_envs"], z["num_steps"]) == (8, 32),
        "20 epochs over one 256-sample minibatch":
            (z["update_epochs"], z["num_minibatches"], batch) == (20, 1, 256),
        "lr 1e-3 annealed": z["lr"] == 1e-3 and PPOConfig(env_id="CartPole-v1").anneal_lr,
        "gamma 0.98": z["gamma"] == 0.98,
        "lambda 0.8": z["gae_lambda"] == 0.8,
        "over the last 10 updates reaches 475": (hostloop.WINDOW, hostloop.SOLVED) == (10, 475),
        "8 x 4 batch": z["num_envs"] == 8,  # CartPole's observation has 4 numbers
        "default 100,000 env steps": '"4096" if SMALL else "100000"' in code,
    }
    for phrase, holds in claims.items():
        assert phrase in text, f"why_2_percent.ipynb no longer says {phrase!r}: update this test with it"
        assert holds, f"why_2_percent.ipynb says {phrase!r}, which the code no longer does"
    # The profile plot's axis label.
    assert "num_envs=8, num_steps=32" in code and (z["num_envs"], z["num_steps"]) == (8, 32)


def test_quickstart_prose_matches_its_code():
    text, code = _text("quickstart.ipynb", "markdown"), _text("quickstart.ipynb", "code")
    assert "trains 16 seeds at once" in text and "vmaps the same program over 16 keys" in text
    assert "num_seeds=16" in code


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_names(requirements) -> set[str]:
    return {_canonical(re.match(r"[A-Za-z0-9_.-]+", r).group(0)) for r in requirements}


def test_the_notebooks_extra_installs_what_they_need():
    """`pip install -e ".[notebooks]"` is enough to execute every notebook: each module a notebook imports
    comes with fusedrl's dependencies or the extra (or what those require), and a notebook that trains a
    "gymnasium:" env (the host bridge imports Gymnasium) has Gymnasium in the extra."""
    import ast
    import importlib.metadata as md
    import sys
    import tomllib

    pyproject = NOTEBOOKS[0].parents[1] / "pyproject.toml"
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    extra = _requirement_names(project["optional-dependencies"]["notebooks"])
    provided, todo = set(), list(_requirement_names(project["dependencies"]) | extra)
    while todo:  # the extra's and the core's requirements, transitively (as pip installs them)
        name = todo.pop()
        if name in provided:
            continue
        provided.add(name)
        try:
            requires = md.requires(name) or []
        except md.PackageNotFoundError:
            continue
        todo += _requirement_names(r for r in requires if "extra ==" not in r)
    distributions = md.packages_distributions()
    for path in NOTEBOOKS:
        code = "\n".join(line for line in _text(path.name, "code", collapse=False).splitlines()
                         if not line.lstrip().startswith(("%", "!")))
        modules = set()
        for node in ast.walk(ast.parse(code)):
            if isinstance(node, ast.Import):
                modules |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                modules.add(node.module.split(".")[0])
        for module in sorted(modules - set(sys.stdlib_module_names) - {"fusedrl"}):
            dists = {_canonical(d) for d in distributions.get(module, [])}
            assert dists & provided, (f"{path.name} imports {module} ({sorted(dists)}), which neither "
                                      f"fusedrl nor its notebooks extra installs: add it to the extra")
        if "gymnasium:" in code:
            assert "gymnasium" in extra, f"{path.name} trains a gymnasium: env; add gymnasium to the extra"


def test_docs_show_every_notebooks_plots():
    page = (NOTEBOOKS[0].parents[1] / "docs" / "notebooks.md").read_text(encoding="utf-8")
    for path in NOTEBOOKS:
        section = page.split(f"## {path.name}", 1)
        assert len(section) == 2, f"docs/notebooks.md has no section for {path.name}"
        images = re.findall(r"!\[[^\]]*\]\((images/[^)]+)\)", section[1].split("\n## ", 1)[0])
        assert images, f"docs/notebooks.md shows no plot of {path.name}"
        for image in images:
            assert (NOTEBOOKS[0].parents[1] / "docs" / image).is_file(), f"docs/notebooks.md: no {image}"
