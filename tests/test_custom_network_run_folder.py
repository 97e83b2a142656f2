"""A run folder written by `train_run` from Python with a network of its own ("module:function")
does not list the network's module in its imports; `fusedrl evaluate RUN` (and --resume,
fusedrl.load) run from the module's folder still find it, as the error message says they do: they
said "no module named ... (the command-line tools look there)" without looking there."""

from __future__ import annotations

import sys

import fusedrl
from fusedrl.cli import main as cli_main
from fusedrl.runs import train_run


def test_a_python_made_run_with_its_own_network_evaluates_from_the_networks_folder(tmp_path, monkeypatch,
                                                                                   capsys, net_module):
    folder = tmp_path / "project"
    folder.mkdir()
    net_module("folder_nets", folder=folder)
    config = fusedrl.PPOConfig(env_id="CartPole-v1", network="folder_nets:net", num_envs=4, num_steps=8,
                               total_timesteps=64, num_minibatches=2, update_epochs=1)
    run = tmp_path / "run"
    train_run(config, run, progress=False, eval_episodes=1)
    # A new process in the module's folder: the module is not imported, and neither the folder nor
    # "" (the current directory) is on the path, as for the `fusedrl` console script.
    monkeypatch.delitem(sys.modules, "folder_nets")
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(folder))])
    monkeypatch.chdir(folder)
    capsys.readouterr()
    code = cli_main(["evaluate", str(run), "--episodes", "1", "--trust-imports"])
    assert code == 0, capsys.readouterr().err
