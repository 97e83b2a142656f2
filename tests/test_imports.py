"""The package's import structure, read from the source (nothing is imported or run).

- No import circle, counting the imports made inside functions.
- The layers read top-down: the environments know nothing of the learners; the fused trainer
  (`fusedrl.train`) knows nothing of the host bridge, runs, sweeps or the CLI (`fusedrl.learners`
  is where both learners are visible).
- An import inside a function is there for an optional dependency (one that is not in pyproject's
  `dependencies`) or for start-up time, and says which in a comment: on the import, on the comment
  lines just above its block of imports, or once for the whole module in a comment line that starts
  with "# Start-up time:" before the module's first definition.
"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"src/fusedrl": "fusedrl", "envs": "fusedrl.envs", "train": "fusedrl.train"}

#: Third-party packages fusedrl imports only where they are used, since not every install has them.
OPTIONAL = {
    "gymnasium", "matplotlib", "PIL", "pandas", "brax", "craftax", "jumanji", "mujoco_playground",
    "navix", "xminigrid", "wandb", "tensorboardX", "stable_baselines3", "purejaxrl", "rejax",
}
#: What each floor may import of fusedrl (prefixes): a lower floor never imports a higher one.
ALLOWED = {
    "fusedrl.envs": ("fusedrl.envs", "fusedrl._warnings", "fusedrl._numbers"),
    "fusedrl.train": ("fusedrl.envs", "fusedrl._warnings", "fusedrl._numbers", "fusedrl.train",
                      "fusedrl.metrics", "fusedrl.networks", "fusedrl.distributions",
                      "fusedrl.initializers", "fusedrl.platform", "fusedrl._suggest"),
}
REASON = re.compile(r"start-up|optional", re.IGNORECASE)


def _modules() -> dict[str, Path]:
    mods = {}
    for folder, package in PACKAGES.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            mods[".".join([package, *parts])] = path
    return mods


MODULES = _modules()


class Import:
    def __init__(self, module: str, node: ast.stmt, targets: list[str], in_function: bool):
        self.module, self.node, self.targets, self.in_function = module, node, targets, in_function

    @property
    def where(self) -> str:
        return f"{MODULES[self.module].relative_to(ROOT)}:{self.node.lineno}"


def _targets(module: str, node: ast.stmt) -> list[str]:
    """The modules an import statement names: for `from P import name`, P.name when it is a module
    (importing P's submodule), else P itself (a name P defines)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if node.level:
        base = module.split(".") if MODULES[module].name == "__init__.py" else module.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        source = ".".join(base + ([node.module] if node.module else []))
    else:
        source = node.module
    names = [f"{source}.{a.name}" for a in node.names]
    subs = [n for n in names if n in MODULES]
    return subs + ([source] if len(subs) < len(names) else [])


def _imports() -> list[Import]:
    found = []
    for module, path in MODULES.items():
        def visit(node, in_function, module=module):
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.Import | ast.ImportFrom):
                    found.append(Import(module, child, _targets(module, child), in_function))
                visit(child, in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef))
        visit(ast.parse(path.read_text(encoding="utf-8")), False)
    return found


IMPORTS = _imports()


def _first_party(name: str) -> str | None:
    """The module of ours that importing `name` runs (its longest known prefix), or None."""
    parts = name.split(".")
    for k in range(len(parts), 0, -1):
        if ".".join(parts[:k]) in MODULES:
            return ".".join(parts[:k])
    return None


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of `graph` (its modules in order, the first repeated at the end), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(v):
        state[v] = 1
        path.append(v)
        for w in sorted(graph.get(v, ())):
            if state.get(w) == 1:
                return path[path.index(w):] + [w]
            if w not in state and (found := visit(w)):
                return found
        state[v] = 2
        path.pop()
        return None

    for v in sorted(graph):
        if v not in state and (found := visit(v)):
            return found
    return None


def _graph(imports: list[Import]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for imp in imports:
        for target in imp.targets:
            if (ours := _first_party(target)) and ours != imp.module:
                graph[imp.module].add(ours)
    return graph


def test_no_import_circle_counting_imports_inside_functions():
    cycle = _cycle(_graph(IMPORTS))
    assert cycle is None, "import circle: " + " -> ".join(cycle)


def test_cycle_finder_sees_a_circle_through_a_function_level_import():
    # The check above would pass vacuously if the finder missed function-level edges.
    fake = [Import("fusedrl.train.ppo", ast.parse("from fusedrl.bridge import HostTrainer").body[0],
                   ["fusedrl.bridge"], True)]
    cycle = _cycle(_graph(IMPORTS + fake))
    assert cycle is not None and "fusedrl.bridge" in cycle and "fusedrl.train.ppo" in cycle


@pytest.mark.parametrize("floor", sorted(ALLOWED))
def test_a_lower_floor_imports_no_higher_one(floor):
    wrong = [f"{imp.where} imports {target}" for imp in IMPORTS
             if imp.module == floor or imp.module.startswith(floor + ".")
             for target in imp.targets
             if (ours := _first_party(target)) and not ours.startswith(ALLOWED[floor])]
    assert not wrong, "\n".join(wrong)


def _core_dependencies() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    names = (re.split(r"[\[<>=!~ ;]", d, maxsplit=1)[0] for d in project["dependencies"])
    return {name.lower().replace("-", "_") for name in names}


def test_optional_packages_are_no_core_dependency():
    assert not {name.lower() for name in OPTIONAL} & _core_dependencies()


def _module_reason(lines: list[str], tree: ast.Module) -> bool:
    first_def = min((n.lineno for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef)),
                    default=len(lines) + 1)
    return any(line.startswith("# Start-up time:") for line in lines[: first_def - 1])


def _has_reason(imp: Import, lines: list[str], block_start: int) -> bool:
    """A comment with the reason on the import's lines, or on the comment lines just above its block."""
    own = lines[imp.node.lineno - 1: imp.node.end_lineno]
    if any("#" in line and REASON.search(line.split("#", 1)[1]) for line in own):
        return True
    i = block_start - 2  # the line above the block's first import (0-based)
    while i >= 0 and lines[i].strip().startswith("#"):
        if REASON.search(lines[i]):
            return True
        i -= 1
    return False


def _unexplained() -> list[str]:
    unexplained = []
    by_module: dict[str, list[Import]] = {}
    for imp in IMPORTS:
        if imp.in_function and not imp.module.startswith("fusedrl.bench"):
            by_module.setdefault(imp.module, []).append(imp)
    for module, imports in by_module.items():
        text = MODULES[module].read_text(encoding="utf-8")
        lines, tree = text.splitlines(), ast.parse(text)
        if _module_reason(lines, tree):
            continue
        block_start = None
        previous_end = None
        for imp in sorted(imports, key=lambda i: i.node.lineno):
            # A block: imports on consecutive lines (one blank line apart at most is a new block).
            if previous_end is None or imp.node.lineno != previous_end + 1:
                block_start = imp.node.lineno
            previous_end = imp.node.end_lineno
            if all(t.split(".")[0] in OPTIONAL for t in imp.targets):
                continue
            if not _has_reason(imp, lines, block_start):
                unexplained.append(f"{imp.where}: {lines[imp.node.lineno - 1].strip()}")
    return unexplained


def test_imports_inside_functions_say_why():
    unexplained = _unexplained()
    assert not unexplained, ("imports inside functions without a comment saying 'start-up time' or "
                             "'optional' (or move them to the top):\n" + "\n".join(unexplained))


def test_fixed_house_facts():
    # The dispatch between the learners stands above both: train/ does not import the bridge.
    targets = {t for imp in IMPORTS if imp.module.startswith("fusedrl.train") for t in imp.targets}
    assert not any(t.startswith(("fusedrl.bridge", "fusedrl.learners")) for t in targets)
    learners = {t for imp in IMPORTS if imp.module == "fusedrl.learners" for t in imp.targets}
    assert "fusedrl.bridge" in learners and "fusedrl.train.ppo" in learners


#: The steps of a run, bottom up: each imports none of those after it (the folder knows nothing of
#: programs, the programs nothing of driving them, the driver nothing of the report; only the
#: pipeline `fusedrl.runs`, and the command line above it, see them all).
RUN_STAGES = ["fusedrl.run_folder", "fusedrl.run_programs", "fusedrl.run_driver", "fusedrl.run_report",
              "fusedrl.runs", "fusedrl.sweep_cli", "fusedrl.cli"]


def _stage_violations(imports: list[Import]) -> list[str]:
    later = {stage: set(RUN_STAGES[i + 1:]) for i, stage in enumerate(RUN_STAGES)}
    return [f"{imp.where} imports {target}" for imp in imports if imp.module in later
            for target in imp.targets if _first_party(target) in later[imp.module]]


def test_run_stages_read_top_down():
    assert set(RUN_STAGES) <= set(MODULES)
    wrong = _stage_violations(IMPORTS)
    assert not wrong, "\n".join(wrong)


def test_stage_check_sees_an_import_of_a_later_stage():
    # The check above would pass vacuously if it missed an import, even one inside a function.
    fake = [Import("fusedrl.run_folder", ast.parse("from fusedrl.run_report import summary_table").body[0],
                   ["fusedrl.run_report"], True)]
    assert _stage_violations(IMPORTS + fake) == [f"{fake[0].where} imports fusedrl.run_report"]
