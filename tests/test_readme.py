"""The README a user follows: its Python examples (and docs/python.md's, which continue them) run as
written, in order, in one namespace (as a reader pastes them), with the training budget shrunk; its
set-up commands are the ones CI runs; its sections come in the order the issue asks for; and it, the
docs and the notebooks install from a clone and link to pages that exist."""

import json
import pathlib
import re

import chex
import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
DOCS = sorted((ROOT / "docs").glob("*.md"))
# (text in the README, what the test runs instead): a smaller budget, nothing else.
SHRINK = [("total_timesteps=500_000", "total_timesteps=2048")]
SECTIONS = ["Install", "Train an agent", "Use it from Python", "What is supported", "Results", "Speed",
            "Documentation"]


def python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


@pytest.mark.slow
def test_readme_python_examples_run_in_order():
    blocks = python_blocks(README)
    assert len(blocks) == 3, "the README's three Python examples (train, vmap, sweep) were not found"
    more = python_blocks((ROOT / "docs" / "python.md").read_text(encoding="utf-8"))
    assert len(more) >= 3, "docs/python.md's examples were not found"
    for old, new in SHRINK:
        assert sum(b.count(old) for b in blocks) == 1, f"the README no longer has {old!r}: update SHRINK"
        blocks = [b.replace(old, new) for b in blocks]
    ns: dict = {}
    exec(compile(blocks[0], "README.md, train", "exec"), ns)
    # What the comments say each line gives.
    num_updates = ns["config"].num_updates
    assert ns["result"].metrics["episode_return"].shape == (num_updates,)
    assert np.shape(ns["returns"]) == (64,)
    assert ns["acrobot"].env_id == "Acrobot-v1"
    exec(compile(blocks[1], "README.md, vmap", "exec"), ns)
    assert ns["results"].metrics["episode_return"].shape == (8, num_updates)
    lrs = ns["by_lr"].metrics["learning_rate"][:, 0]  # three learning rates
    np.testing.assert_allclose(lrs, [1e-4, 3e-4, 1e-3], rtol=1e-6)
    exec(compile(blocks[2], "README.md, sweep", "exec"), ns)
    assert ns["swept"].metrics["episode_return"].shape == (8, num_updates)
    # "the two agree to rounding only at first (... policy losses within 1e-4 for 10 updates, returns
    # equal for 11)": the shrunk budget is 4 updates, all within the first ones.
    assert num_updates <= 10
    np.testing.assert_allclose(
        ns["swept"].metrics["policy_loss"], ns["results"].metrics["policy_loss"], rtol=1e-4, atol=1e-6)
    np.testing.assert_array_equal(
        ns["swept"].metrics["episode_return"], ns["results"].metrics["episode_return"])
    assert ns["grid"].metrics["episode_return"].shape == (2, 3, num_updates)  # "6 runs"
    assert len(ns["table"]) == 6 and {"lr", "seed"} <= set(ns["table"][0])
    for i, block in enumerate(more):
        exec(compile(block, f"docs/python.md, example {i + 1}", "exec"), ns)
    np.testing.assert_allclose(ns["faster"].metrics["learning_rate"][0], 1e-3, rtol=1e-6)
    assert ns["one"].metrics["episode_return"].shape == (num_updates,)
    # Evaluation during training: four pieces, a greedy mean after each, ending where one call ends,
    # with the agent of the first example's `train(key)` call, bit for bit.
    assert len(ns["curve"]) == 4 and all(np.isfinite(ns["curve"]))
    assert int(ns["state"].update) == num_updates == 4 * (num_updates // 4)
    chex.assert_trees_all_equal(ns["state"].params, ns["result"].params)


def test_readme_sections_come_in_order_and_it_stays_short():
    headings = re.findall(r"^## (.+)$", README, flags=re.M)
    assert headings == SECTIONS, f"README sections are {headings}, expected {SECTIONS}"
    assert len(README.splitlines()) <= 200, "the README is for users: keep it short, details go to docs/"


def test_readme_set_up_commands_are_the_ones_ci_runs():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()[-1]
    commands = re.findall(r"^    (python3 -m venv .*)$", README, flags=re.M)
    assert ci in commands, f"the README's test command is not .ci/run's: {ci!r}"
    main_job = ("python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/fusedrl train "
                "--env CartPole-v1")
    assert main_job in commands, "the README's main job (install and train CartPole) is missing"
    assert 'pip install -e ".[cuda]"' in README, "the README's GPU install is missing"


def test_readme_holds_no_lab_notes():
    """Commit ids, dates and processor models belong in docs/speed.md's and docs/results.md's tables."""
    for pattern, what in ((r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b", "a commit id"),
                          (r"\b20\d\d-\d\d-\d\d\b", "a date"),
                          (r"EPYC|Xeon|Ryzen|Core i\d|family \d+ model", "a processor model")):
        found = re.findall(pattern, README)
        assert not found, f"the README holds {what}: {found}"


def test_readme_commands_name_the_venv_they_run_from():
    """The README installs into .venv and never activates it, so in a fresh shell a bare `fusedrl`,
    `python` or `pip` is "command not found" (or another Python): every command a reader pastes (code
    lines, `$ ` lines of sample output, commands in backticks) names .venv/bin/... ."""
    code = re.findall(r"^    (\S.*)$", README, flags=re.M)
    code += [line[2:] for block in re.findall(r"^```\n(.*?)^```", README, flags=re.S | re.M)
             for line in block.splitlines() if line.startswith("$ ")]
    inline = re.findall(r"`([^`\n]+)`", README)
    bare = [c for c in code + inline if re.match(r"(fusedrl|python|pip)( |$)", c.strip())]
    assert not bare, f"commands that need `source .venv/bin/activate` first: {bare}"
    assert sum(c.startswith(".venv/bin/fusedrl ") for c in code + inline) >= 5


def _install_commands() -> list[tuple[str, str]]:
    texts = [("README.md", README)]
    texts += [(str(p.relative_to(ROOT)), p.read_text(encoding="utf-8")) for p in DOCS]
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = json.loads(nb.read_text(encoding="utf-8"))["cells"]
        texts.append((str(nb.relative_to(ROOT)), "\n".join("".join(c["source"]) for c in cells)))
    return [(name, m) for name, text in texts for m in re.findall(r"pip install[^`\n&]*", text)]


def test_every_install_command_works_from_a_clone():
    """fusedrl is not on PyPI: `pip install "fusedrl[x]"` fails; `pip install -e ".[x]"` in a clone works."""
    commands = _install_commands()
    assert len(commands) >= 4
    for name, command in commands:
        assert "fusedrl" not in command, f"{name}: {command!r} installs from PyPI (use -e \".[x]\")"
        if re.search(r"pip install( -q)? -e", command):
            assert re.search(r'-e (\.|"\.\[[a-z0-9,]+\]")( |$)', command), f"{name}: {command!r}"


def test_links_to_docs_resolve():
    for path in [ROOT / "README.md", *DOCS]:
        text = path.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            if re.match(r"[a-z]+://", target):
                continue
            assert (path.parent / target).exists(), f"{path.relative_to(ROOT)} links to missing {target}"


def test_results_table_figures_match_docs_results():
    """The README's results table and docs/results.md, which tells how each row was measured, agree."""
    table = re.search(r"^\| env \| gymnax-blines.*?\n\n", README, flags=re.S | re.M).group(0)
    results = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    # env | reference | mean ± std (worst)
    row = r"^\| (\S+) \| (-?\d+) \| \**(-?\d+\.\d ± \d+\.\d)\** \((-?\d+(?:\.\d)?)\)"
    rows = re.findall(row, table, flags=re.M)
    assert len(rows) == 7, rows
    for env, reference, mean, worst in rows:
        line = next((x for x in results.splitlines() if x.startswith(f"| {env} | {reference} |")), None)
        assert line is not None, f"docs/results.md has no row for {env} (reference {reference})"
        assert mean in line and f"({worst})" in line, f"{env}: the README's {mean} ({worst}) is not in {line}"
