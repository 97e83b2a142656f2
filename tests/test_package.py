"""The installed package: every module imports, every sub-package is declared, public names exist."""

import importlib
import pathlib
import pkgutil
import sys
import tomllib

import pytest

import fusedrl

ROOT = pathlib.Path(__file__).resolve().parents[1]


def all_modules():
    # fusedrl.envs and fusedrl.train live in their own folders (package-dir), so walk each root.
    names = []
    for root in ("fusedrl", "fusedrl.envs", "fusedrl.train"):
        pkg = importlib.import_module(root)
        names.append(root)
        names += [i.name for i in pkgutil.walk_packages(pkg.__path__, prefix=root + ".")]
    return sorted({n for n in names if not n.endswith("__main__")})  # __main__ would run a CLI


def test_walk_finds_the_subpackages():
    names = set(all_modules())
    assert {"fusedrl.envs", "fusedrl.train", "fusedrl.envs.cartpole", "fusedrl.train.ppo"} <= names


@pytest.mark.parametrize("name", all_modules())
def test_every_module_imports(name):
    from fusedrl.envs import suites

    prefix = name.removeprefix("fusedrl.envs._")
    if prefix in suites.SUITES and not suites.is_installed(prefix):  # an adapter needs its extra
        with pytest.raises(suites.SuiteNotInstalledError, match="pip install"):
            suites.adapter(prefix)
        return
    importlib.import_module(name)
    # From the repo root `envs`/`train` would be importable as top-level packages too: a second
    # copy of every class. Nothing of ours may import them that way.
    assert "envs" not in sys.modules and "train" not in sys.modules


def test_pyproject_declares_every_subpackage():
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    declared = set(cfg["packages"])
    found = {n for n in all_modules() if not n.startswith("fusedrl.envs._")  # modules, not packages
             and hasattr(importlib.import_module(n), "__path__")}
    assert found <= declared, f"sub-packages missing from pyproject: {sorted(found - declared)}"
    assert cfg["package-dir"] == {"fusedrl": "src/fusedrl", "fusedrl.envs": "envs", "fusedrl.train": "train"}


def test_public_api_names():
    for name in ["make", "register", "PPOConfig", "make_train", "evaluate", "TrainResult", "preset"]:
        assert name in fusedrl.__all__ and hasattr(fusedrl, name), name
