"""`import fusedrl` and `fusedrl --help` start at once: heavy dependencies load where they are used."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.subprocess]

# Imported on first use of a public name, never by `import fusedrl` itself.
LAZY = ["jax", "flax", "optax", "orbax.checkpoint", "gymnax", "gymnax.environments", "rich", "matplotlib",
        "pandas", "seaborn", "scipy", "fusedrl.envs", "fusedrl.train", "fusedrl.sweeps", "fusedrl.runs"]
# Loaded by no part of `fusedrl.envs`: gymnax's env families (seaborn, scipy, matplotlib with them).
FAMILIES = ["gymnax.environments.misc", "gymnax.environments.bsuite", "gymnax.environments.minatar",
            "gymnax.registration", "seaborn", "matplotlib", "scipy"]


def _loaded(code: str, names: list[str]) -> list[str]:
    """The modules of `names` in sys.modules after running `code` in a fresh interpreter."""
    probe = f"{code}\nimport sys, json\nprint(json.dumps([n for n in {names!r} if n in sys.modules]))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.timeout(200)
def test_import_fusedrl_loads_no_heavy_module():
    assert _loaded("import fusedrl", LAZY) == []


@pytest.mark.timeout(200)
def test_help_loads_neither_jax_nor_the_library():
    code = ("from fusedrl.cli import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass")
    assert _loaded(code, LAZY) == []


@pytest.mark.timeout(200)
def test_envs_load_gymnax_base_classes_without_its_env_families():
    assert _loaded("import fusedrl\nfusedrl.make('CartPole-v1')", FAMILIES) == []


@pytest.mark.timeout(200)
def test_gymnax_classes_are_the_same_whichever_loads_first():
    # fusedrl loads gymnax's base-class modules on their own; a later `import gymnax` reuses them.
    code = ("import fusedrl\nfrom fusedrl.envs import base\nimport gymnax\n"
            "from gymnax.environments import environment, spaces\n"
            "assert base.environment is environment and base.Box is spaces.Box\n"
            "env, _ = fusedrl.make('gymnax:CartPole-v1')\n"
            "assert isinstance(env, base.environment.Environment)")
    assert _loaded(code, ["gymnax.environments.misc"]) == ["gymnax.environments.misc"]


def test_every_public_name_resolves():
    import fusedrl

    for name in fusedrl.__all__:
        assert getattr(fusedrl, name) is not None, name
    assert set(fusedrl.__all__) <= set(dir(fusedrl))
    with pytest.raises(AttributeError, match="has no attribute 'mak'"):
        fusedrl.mak  # noqa: B018


def test_sweep_stays_the_function_after_its_modules_are_imported():
    import fusedrl
    import fusedrl.sweep_cli  # noqa: F401
    import fusedrl.sweeps  # the package of the sweep modules: no name clash with the function

    assert callable(fusedrl.sweep) and fusedrl.sweep.__name__ == "sweep"
    assert fusedrl.sweep is fusedrl.sweeps.sweep
