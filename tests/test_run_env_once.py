"""A run builds its env once: `fusedrl train` (and `--resume`) construct the registered env class a
single time, from the command line's checks through compiling, checkpoints and evaluation."""

from __future__ import annotations

import csv
import json
import sys

import pytest

import fusedrl
import fusedrl.runs
from fusedrl.envs import registry
from fusedrl.envs.cartpole import CartPole

ENV_ID = "CountedCartPole-v0"
TINY = ["--set", "num_envs=4", "--set", "num_steps=16", "--set", "update_epochs=1", "--set",
        "num_minibatches=1", "--set", "hidden_sizes=[8]", "--total-timesteps", str(4 * 16 * 6),
        "--eval-episodes", "2", "--progress-every", "1", "--checkpoint-every", "3", "--no-progress"]


class CountedCartPole(CartPole):
    """CartPole that counts its constructions."""

    built = 0

    def __init__(self):
        super().__init__()
        type(self).built += 1


@pytest.fixture
def counted_env(monkeypatch):
    # The registration ends with the test.
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    fusedrl.register(ENV_ID, CountedCartPole)
    CountedCartPole.built = 0
    return CountedCartPole


def test_train_and_resume_build_the_env_once(run_cli, counted_env, interrupt_at, tmp_path):
    out = tmp_path / "run"
    # Interrupted at update 4, after the checkpoint at update 3 (as Ctrl-C would: the CSV logger raises).
    restore = interrupt_at(4)
    code, _, err = run_cli("train", "--env", ENV_ID, *TINY, "--out", out)
    assert code == 130, err
    assert json.loads((out / "summary.json").read_text())["checkpoint_update"] == 3
    assert counted_env.built == 1, f"`fusedrl train` built the env {counted_env.built} times"

    restore()
    counted_env.built = 0
    code, out_text, err = run_cli("train", "--resume", out, "--no-progress")
    assert code == 0, err
    assert json.loads((out / "summary.json").read_text())["status"] == "finished"
    assert counted_env.built == 1, f"`fusedrl train --resume` built the env {counted_env.built} times"

    # The same interruption, resumed from Python without the env: resume_run builds it once too.
    restore = interrupt_at(4)
    code, _, err = run_cli("train", "--env", ENV_ID, *TINY, "--out", tmp_path / "python")
    assert code == 130, err
    restore()
    counted_env.built = 0
    run = fusedrl.runs.resume_run(tmp_path / "python", progress=False)
    assert json.loads((tmp_path / "python" / "summary.json").read_text())["status"] == "finished", run
    assert counted_env.built == 1, f"fusedrl.runs.resume_run built the env {counted_env.built} times"

    # A finished run, trained afresh into a new folder in this process: its programs come from the
    # cache, and still its env is built once (the command line's).
    counted_env.built = 0
    code, _, err = run_cli("train", "--env", ENV_ID, *TINY, "--out", tmp_path / "again")
    assert code == 0, err
    assert counted_env.built == 1, f"a second `fusedrl train` built the env {counted_env.built} times"


def test_a_run_with_other_env_params_builds_the_env_once(run_cli, counted_env, tmp_path):
    # --set env_params.* changes the params of the env the command line built, not the env itself.
    out = tmp_path / "run"
    code, _, err = run_cli("train", "--env", ENV_ID, *TINY, "--set", "env_params.max_steps_in_episode=7",
                           "--out", out)
    assert code == 0, err
    assert json.loads((out / "config.json").read_text())["ppo"]["env_params"] == {"max_steps_in_episode": 7}
    assert counted_env.built == 1, f"a run with env params built the env {counted_env.built} times"
    # The run stepped the env with those params: no episode longer than the time limit set.
    with (out / "metrics.csv").open() as f:
        lengths = [float(row["episode_length"]) for row in csv.DictReader(f) if row["episode_length"]]
    assert lengths and max(lengths) <= 7, lengths
    code, _, err = run_cli("train", "--env", ENV_ID, *TINY, "--set", "env_params.gravity=nope",
                           "--out", tmp_path / "bad")
    assert code == 2 and "gravity" in err, err  # the params are still checked as make checks them


NET_CODE = """
import flax.linen as nn
from fusedrl.distributions import Categorical


class Net(nn.Module):
    @nn.compact
    def __call__(self, obs):
        return Categorical(logits=nn.Dense(2)(obs)), nn.Dense(1)(obs)[..., 0]


def net(action_dim, discrete, obs_shape, config):
    return Net()
"""


def test_a_run_with_its_own_network_builds_the_env_once(run_cli, counted_env, monkeypatch, tmp_path):
    # The command line builds the network once to check it before any work: with the run's env.
    (tmp_path / "counted_net.py").write_text(NET_CODE)
    monkeypatch.chdir(tmp_path)  # --set network=module:function imports from the current directory
    monkeypatch.delitem(sys.modules, "counted_net", raising=False)
    code, _, err = run_cli("train", "--env", ENV_ID, *TINY, "--set", "network=counted_net:net",
                           "--out", tmp_path / "run")
    assert code == 0, err
    assert counted_env.built == 1, f"`fusedrl train` built the env {counted_env.built} times"
