"""A run folder runs no code of its own unless the user says to trust it (`fusedrl.trust`).

One tiny run, trained with `--import` of a module and a network "module:function" of another; both
modules write a marker file when imported. Every reader of the folder refuses without
`--trust-imports` / `trust_imports=True`, naming both modules and the flag, and imports neither (no
marker, not in sys.modules); with it they work, and sys.path is as it was.
"""

from __future__ import annotations

import json
import os
import shutil
import sys

import numpy as np
import pytest

import fusedrl
from fusedrl import runs
from fusedrl.trust import UntrustedImportsError

ENVS, NET = "trust_marker_envs", "trust_marker_net"
MARK = "import pathlib\npathlib.Path(__file__).with_suffix('.imported').write_text('yes')\n"
NET_CODE = MARK + """
import flax.linen as nn
from fusedrl.distributions import Categorical


class Net(nn.Module):
    @nn.compact
    def __call__(self, obs):
        return Categorical(logits=nn.Dense(2)(obs)), nn.Dense(1)(obs)[..., 0]


def net(action_dim, discrete, obs_shape, config):
    return Net()
"""
TINY = ["--total-timesteps", 64, "--set", "num_envs=4", "--set", "num_steps=8", "--set", "num_minibatches=2",
        "--set", "update_epochs=1", "--eval-episodes", 2, "--no-progress"]


@pytest.fixture(scope="module")
def project(run_cli, tmp_path_factory):
    """A folder holding the two modules and `run`, a finished run trained from it by the CLI."""
    folder = tmp_path_factory.mktemp("project")
    (folder / f"{ENVS}.py").write_text(MARK)
    (folder / f"{NET}.py").write_text(NET_CODE)
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(folder)  # --import looks in the current directory, as `python -m` does
        code, _, err = run_cli("train", "--env", "CartPole-v1", "--import", ENVS,
                               "--set", f"network={NET}:net", "--out", folder / "run", *TINY)
        assert code == 0, err
    saved = json.loads((folder / "run" / "config.json").read_text())
    assert saved["run"]["imports"] == [ENVS, NET] and saved["ppo"]["network"] == f"{NET}:net"
    return folder


@pytest.fixture
def fresh(project, monkeypatch):
    """As in a new process run from the project folder: neither module imported, no marker."""
    for name in (ENVS, NET):
        monkeypatch.delitem(sys.modules, name, raising=False)  # and put back afterwards
    forget(project)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(project))])
    monkeypatch.chdir(project)
    return project


def forget(project) -> None:
    """Neither module imported, no marker: as before the first import."""
    for name in (ENVS, NET):
        sys.modules.pop(name, None)
        (project / f"{name}.imported").unlink(missing_ok=True)


def imported(project) -> list[str]:
    return [n for n in (ENVS, NET) if n in sys.modules or (project / f"{n}.imported").exists()]


def test_every_reader_of_a_run_folder_refuses_its_modules_without_trust(run_cli, fresh):
    run, path = fresh / "run", list(sys.path)

    def refused(text, *, cli_flag):
        assert "--trust-imports" in text if cli_flag else "trust_imports=True" in text, text
        assert f"'{ENVS}' (imports)" in text and f"'{NET}' (imports and network '{NET}:net')" in text, text
        assert imported(fresh) == [] and sys.path == path

    for argv in (["evaluate", run], ["train", "--resume", run],  # --resume: before "has finished"
                 ["train", "--config", run / "config.json", "--out", fresh / "again"]):
        code, _, err = run_cli(*argv)
        assert code == 2, (argv, err)
        refused(err, cli_flag=True)
    assert not (fresh / "again").exists()
    for read in (lambda: fusedrl.load(run), lambda: runs.load_run_config(run), lambda: runs.evaluate_run(run),
                 lambda: runs.resume_run(run, progress=False)):
        with pytest.raises(UntrustedImportsError) as e:
            read()
        assert isinstance(e.value, ValueError)
        refused(str(e.value), cli_flag=False)
    # A checkpoint alone names its network: restoring it would import the module.
    with pytest.raises(UntrustedImportsError, match=f"meta.json names code to import: module.s. '{NET}'"):
        fusedrl.load(run / "checkpoint")
    assert imported(fresh) == []


def test_a_file_that_names_an_installed_module_is_refused_too(run_cli, fresh, tmp_path):
    # Any module on the path, not only one beside the folder ("this" prints the Zen of Python).
    run = tmp_path / "run"
    shutil.copytree(fresh / "run", run)
    doc = json.loads((run / "config.json").read_text())
    doc["run"]["imports"] = ["this"]
    (run / "config.json").write_text(json.dumps(doc))
    before = "this" in sys.modules
    code, out, err = run_cli("evaluate", run)
    assert code == 2 and "'this' (imports)" in err and "--trust-imports" in err, err
    assert out == "" and ("this" in sys.modules) == before


def test_trusted_readers_import_the_modules_and_leave_sys_path_as_it_was(run_cli, fresh):
    run, path = fresh / "run", list(sys.path)
    code, out, err = run_cli("evaluate", run, "--trust-imports")
    assert code == 0 and "mean" in out, err
    assert imported(fresh) == [ENVS, NET] and sys.path == path
    forget(fresh)
    policy = fusedrl.load(run, trust_imports=True)
    assert imported(fresh) == [ENVS, NET] and sys.path == path and os.getcwd() not in sys.path
    assert policy.act(np.zeros(4, np.float32)) in (0, 1)
    forget(fresh)
    assert fusedrl.load(run / "checkpoint", trust_imports=True).update == policy.update
    assert imported(fresh) == [NET] and sys.path == path
    # Trusted, the finished run's resume is refused for what it is.
    code, _, err = run_cli("train", "--resume", run, "--trust-imports")
    assert code == 2 and "has finished" in err, err


def test_modules_typed_on_the_command_line_are_trusted(run_cli, fresh):
    run = fresh / "run"
    code, _, err = run_cli("evaluate", run, "--import", ENVS)  # the network's module is not typed
    assert code == 2 and f"'{NET}' (imports and network" in err and f"'{ENVS}'" not in err, err
    assert NET not in sys.modules
    code, out, err = run_cli("evaluate", run, "--import", ENVS, "--import", NET)
    assert code == 0 and "mean" in out, err
    # --config: a module typed with --import or in --set network=MODULE:FUNCTION is trusted.
    forget(fresh)
    code, _, err = run_cli("train", "--config", run / "config.json", "--set", f"network={NET}:net",
                           "--out", fresh / "again", "--no-progress")
    assert code == 2 and f"'{ENVS}' (imports)" in err and f"'{NET}'" not in err, err
    assert imported(fresh) == [] and not (fresh / "again").exists()
    code, out, err = run_cli("train", "--config", run / "config.json", "--import", ENVS,
                             "--set", f"network={NET}:net", "--out", fresh / "again", "--no-progress")
    assert code == 0 and "mean" in out, err
    shutil.rmtree(fresh / "again")
